//! `pyperf record`: its arguments, checked, and the session they set up.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::privileges;
use crate::sampler::{Rate, SampleEvent, Sampler, SamplerOptions};
use crate::session::{self, Session};
use crate::signals;
use crate::sink::file::FileSink;
use crate::sink::output::{self, Output};
use crate::sink::push::{check_app, parse_labels, redacted_command_line, Endpoint, PushOptions, PushSink};
use crate::sink::tee::Tee;
use crate::sink::Sink;
use crate::targets::{Targets, Workload};

/// `pyperf record`'s arguments.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["pid", "all", "cgroup", "command"])))]
pub struct RecordArgs {
    /// Output file. An existing recording there is kept as FILE.old, as perf does. Created before anything starts;
    /// under sudo it belongs to the user who ran sudo where they could have created it (else it stays root's). A
    /// second pyperf writing the same FILE is refused.
    #[arg(short = 'o', long = "output", default_value = "prof.pyp")]
    pub output: PathBuf,
    /// Samples per second: of each running thread of the targets with -p and -- CMD, of each CPU with -a and -G [default: 99]
    #[arg(short = 'F', long = "freq", conflicts_with = "period")]
    pub freq: Option<u64>,
    /// Sample every PERIOD events instead (nanoseconds for cpu-clock, cycles for cycles).
    #[arg(short = 'c', long = "count")]
    pub period: Option<u64>,
    /// Stop after this many seconds (default: until Ctrl-C or until the targets exit), counted from the command's
    /// start with `-- CMD`. A command still running then is stopped once the file is written: SIGINT, SIGTERM 2 s
    /// later, SIGKILL 2 s after that (a second Ctrl-C: SIGKILL at once); pyperf exits 0.
    #[arg(short = 'd', long = "duration", allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Sampling event: cpu-clock (works in VMs and containers) or cycles (hardware counter).
    #[arg(short = 'e', long = "event", default_value = "cpu-clock", value_parser = ["cpu-clock", "cycles"])]
    pub event: String,
    /// Profile these running processes (comma-separated or repeated).
    #[arg(short = 'p', long = "pid", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Profile every Python process on the host (in every container), including ones that start while recording.
    #[arg(short = 'a', long = "all-processes")]
    pub all: bool,
    /// Profile the Python processes of this cgroup (e.g. a container's, as /proc/PID/cgroup names it) and of the
    /// cgroups below it, including ones that start while recording.
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Ring buffer size in KiB, 4 to 1048576 (rounded up to a power of two pages).
    #[arg(long = "ringbuf-kib", default_value_t = 4096)]
    pub ringbuf_kib: usize,
    /// Also record when each followed thread is off CPU (blocked in I/O, sleep, a lock, waiting for the GIL, or
    /// preempted), for how long and with which Python stack: `pyperf report --mode off-cpu` or `--mode wall`.
    #[arg(long = "off-cpu")]
    pub off_cpu: bool,
    /// With --off-cpu: intervals shorter than this (e.g. 500us, 1ms, 0) are sampled, each kept with probability
    /// length / DURATION and then counted as DURATION, which estimates their total time without walking the stack
    /// at every context switch.
    #[arg(long = "off-cpu-min", value_name = "DURATION", default_value = "1ms", requires = "off_cpu")]
    pub off_cpu_min: String,
    /// Also record the native frames (C, C++, Rust: the interpreter, C extensions, libc) of each sample, merged
    /// with its Python frames. Unwound by pyperf from a copy of the thread's stack and the binaries' .eh_frame
    /// tables: no frame pointers needed, nothing paused.
    #[arg(long = "native")]
    pub native: bool,
    /// Also record the kernel frames of each sample (and, with --off-cpu, where each thread blocked in the
    /// kernel), named from /proc/kallsyms.
    #[arg(long = "kernel")]
    pub kernel: bool,
    /// With --native: bytes of each sample's stack copied for the unwinding (from the stack pointer up, never
    /// past the thread's stack). A native stack deeper than this is cut there (its Python frames are kept).
    #[arg(long = "native-stack-kib", value_name = "KIB", default_value_t = 16, requires = "native")]
    pub native_stack_kib: u32,
    /// Continuous profiling: every --push-every seconds, also send the profile of that window (gzip'd pprof) to a
    /// Pyroscope server's ingest API at URL (plain http, e.g. http://localhost:4040; user:password@ for Basic
    /// authentication, stored and shown as user:***@, or see --push-auth-file). The .pyp file keeps everything; a
    /// server that is down or slow never blocks the recording (windows retried from a bounded queue; what is
    /// dropped is counted in the summary and the trailer).
    #[arg(long = "push", value_name = "URL")]
    pub push: Option<String>,
    /// With --push: credentials kept out of the command line: the file's first line is `Bearer TOKEN`,
    /// `USER:PASSWORD`, or the password of the URL's user (http://USER@host). The environment's
    /// PYPERF_PUSH_PASSWORD (with the URL's user) or PYPERF_PUSH_TOKEN (Bearer) work too.
    #[arg(long = "push-auth-file", value_name = "FILE", requires = "push")]
    pub push_auth_file: Option<PathBuf>,
    /// With --push: window length in seconds (1-3600).
    #[arg(long = "push-every", value_name = "SECONDS", default_value_t = 10, requires = "push")]
    pub push_every: u64,
    /// With --push: the application name on the server [default: the command's program name, else "python"]
    #[arg(long = "app", value_name = "NAME", requires = "push")]
    pub app: Option<String>,
    /// With --push: a label of every pushed profile (repeat: --label env=prod --label region=eu); each name once, at
    /// most 15, none of the reserved ones (__..., service_name, pyroscope_spy, pid, tid, thread, gil, process).
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "push")]
    pub label: Vec<String>,
    /// Measure the BPF program's own run time (kernel BPF statistics) and print it in the summary.
    #[arg(long = "bpf-stats")]
    pub bpf_stats: bool,
    /// Never put a uprobe in a target. Before 3.14 pyperf counts a process's frees of code objects with a uprobe
    /// on its code_dealloc (a breakpoint: ~1-3 us each time a code object is freed), which lets the BPF program keep
    /// the check words of deep stacks instead of reading them at every sample; without it each sample costs more
    /// (~100 ns more per distinct frame), nothing else changes. 3.14+ count frees themselves.
    #[arg(long = "no-uprobe")]
    pub no_uprobe: bool,
    /// Start this command and profile it until it exits; pyperf exits with its status. `--` before it is
    /// optional (needed only when the command's first word starts with `-`). Ctrl-C stops the recording and the
    /// command; a full disk stops the recording only (pyperf waits for the command, then exits 1). Arguments that
    /// are not UTF-8 are passed as they are (the recording's header shows them with U+FFFD for each bad byte).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Longest `--off-cpu-min`: 4 s (the kernel's draw multiplies a 32-bit random number by it, which must fit 64 bits;
/// and longer would sample even long waits).
const MAX_OFF_CPU_MIN_NS: u64 = 4_000_000_000;

/// `--off-cpu-min`: a number with a unit (ns, us, ms, s), or 0, as nanoseconds.
pub(crate) fn parse_min_duration(text: &str) -> Result<u64> {
    let t = text.trim();
    let bad = || {
        anyhow::anyhow!(
            "--off-cpu-min {text:?}: give a duration with its unit, e.g. 500us, 1ms or 0.5s (at most 4s), or 0"
        )
    };
    if t == "0" {
        return Ok(0);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let ns = value * scale;
    if !(ns.is_finite() && ns >= 0.0 && ns <= MAX_OFF_CPU_MIN_NS as f64) {
        return Err(bad());
    }
    Ok(ns.round() as u64)
}

/// (endpoint, application name, labels) of `--push`.
type PushTarget = (Endpoint, String, Vec<(String, String)>);

/// `--push`, `--app`, `--label`, `--push-every`, checked: (endpoint, application name, labels).
fn push_settings(args: &RecordArgs) -> Result<Option<PushTarget>> {
    let Some(url) = &args.push else { return Ok(None) };
    let endpoint = Endpoint::parse(url)?.with_credentials(args.push_auth_file.as_deref(), |k| std::env::var(k).ok())?;
    if !(1..=3600).contains(&args.push_every) {
        bail!("--push-every must be between 1 and 3600 seconds");
    }
    let app = match &args.app {
        Some(a) => a.clone(),
        None => args
            .command
            .first()
            .map(|c| c.to_string_lossy().rsplit('/').next().unwrap_or_default().to_string())
            .filter(|c| check_app(c).is_ok())
            .unwrap_or_else(|| "python".to_string()),
    };
    check_app(&app)?;
    let labels = parse_labels(&args.label)?;
    Ok(Some((endpoint, app, labels)))
}

/// Fails if a signal asked pyperf to stop before the recording started: nothing is started then, and the output
/// is left as it was.
fn stopped_during_start(output: &std::path::Path) -> Result<()> {
    if !signals::stop_requested() {
        return Ok(());
    }
    bail!("stopped by a signal before recording started: {} is left as it was", output.display())
}

/// Samples per second per CPU without `-F` / `-c`.
pub const DEFAULT_FREQ: u64 = 99;
/// Smallest `--ringbuf-kib`: one page.
pub const MIN_RINGBUF_KIB: usize = 4;
/// Largest `--ringbuf-kib`: 1 GiB, the most the sampler takes (and far more than any rate needs).
pub const MAX_RINGBUF_KIB: usize = 1 << 20;

/// Runs `pyperf record`; its exit code is the workload's, if it started one.
pub fn record(args: &RecordArgs) -> Result<ExitCode> {
    // First of all: a SIGINT, SIGTERM or SIGHUP during the start must not kill pyperf half way (a file created and
    // never written). One before the command is started undoes the start (see `stopped_during_start`); one after
    // it ends the recording at once, complete.
    signals::install();
    let rate = match (args.freq, args.period) {
        (_, Some(0)) | (Some(0), _) => bail!("the sampling rate must be above 0"),
        (Some(f), _) => Rate::Frequency(f),
        (None, Some(p)) => Rate::Period(p),
        (None, None) => Rate::Frequency(DEFAULT_FREQ),
    };
    if !(1..=64).contains(&args.native_stack_kib) {
        bail!("--native-stack-kib must be between 1 and 64");
    }
    if !(MIN_RINGBUF_KIB..=MAX_RINGBUF_KIB).contains(&args.ringbuf_kib) {
        bail!("--ringbuf-kib must be between {MIN_RINGBUF_KIB} and {MAX_RINGBUF_KIB} (1 GiB)");
    }
    // Beyond ~30 years a duration is a typo, and Duration/Instant arithmetic would overflow.
    const LONGEST: f64 = 1e9;
    if let Some(d) = args.duration {
        if !(d > 0.0 && d <= LONGEST) {
            bail!("--duration must be a positive number of seconds, at most {LONGEST:e}");
        }
    }
    let event = if args.event == "cycles" { SampleEvent::Cycles } else { SampleEvent::CpuClock };
    let push = push_settings(args)?;
    let off_cpu_min_ns = if args.off_cpu { Some(parse_min_duration(&args.off_cpu_min)?) } else { None };

    // Everything that can fail at start fails before the output file exists, except what the output file itself
    // needs, which fails before a command is started: a command never runs for a recording that cannot be made.
    output::check(&args.output)?;
    privileges::check_all()?;
    let per_task = !args.all && args.cgroup.is_none();
    let mut sampler = Sampler::new(&SamplerOptions {
        event,
        rate,
        ringbuf_bytes: args.ringbuf_kib * 1024,
        off_cpu_min_ns,
        native: args.native,
        kernel: args.kernel,
        // -p and a command: per-task events; -a and -G: every CPU.
        per_task,
        ustack_bytes: args.native_stack_kib * 1024,
    })
    .context("cannot start sampling")?;
    if args.bpf_stats {
        sampler.enable_bpf_stats().context("cannot measure the BPF program")?;
    }
    let targets = Targets::chosen(args.cgroup.as_deref(), args.all, &args.pid)?;
    stopped_during_start(&args.output)?;
    // A failure from here to the end of the start removes the new file and puts the previous one back (and
    // dropping the targets ends a command it started).
    let output = Output::create(&args.output)?;
    let created = output.guard();
    // A start guard is armed: on the way out it removes the new file and puts the previous one back.
    stopped_during_start(&args.output)?;
    let targets = match targets {
        Some(t) => t,
        None => {
            sampler.follow_next_exec().context("cannot start sampling")?;
            Targets::workload(Workload::spawn(&args.command)?)
        }
    };

    let workload: Vec<String> = args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut header = session::header(&workload, event, rate);
    // A --push URL's password is not stored in the recording.
    header.command_line = redacted_command_line(&header.command_line);
    let file: Box<dyn Sink> = Box::new(FileSink::new(output, &header)?);
    let sink: Box<dyn Sink> = match push {
        Some((endpoint, app, labels)) => {
            let clock = event == SampleEvent::CpuClock;
            let (sample_rate, period_ns) = match rate {
                Rate::Frequency(hz) => (Some(hz), Some(1_000_000_000 / hz.max(1))),
                Rate::Period(p) if clock => (Some((1_000_000_000 / p.max(1)).max(1)), Some(p)),
                Rate::Period(_) => (None, None),
            };
            let options = PushOptions {
                endpoint,
                every: Duration::from_secs(args.push_every),
                app,
                labels,
                sample_rate,
                period_ns,
                off_cpu: args.off_cpu,
                start_unix_ns: header.start_time_unix_ns,
                arch: header.arch.clone(),
            };
            Box::new(Tee::new(file, PushSink::new(options).context("cannot start pushing")?))
        }
        None => file,
    };
    let mut session = Session::new(sampler, targets, sink).with_uprobes(!args.no_uprobe);
    if let Some(min_ns) = off_cpu_min_ns {
        session = session.with_off_cpu(min_ns)?;
    }
    if args.native || args.kernel {
        session = session.with_native(args.native, args.kernel)?;
    }
    session.start()?;
    created.keep();

    // Counted from the command's spawn (or the end of the start for the other targets), as the status line is.
    let deadline = args.duration.and_then(|d| session.started().checked_add(Duration::from_secs_f64(d)));
    let stop = match session.run(deadline, std::io::stderr().is_terminal()) {
        Ok(stop) => stop,
        // A full disk: one line, what is on disk stays readable, the command runs on (see Session::abandon).
        Err(e) => return session.abandon(&e),
    };
    let code = session.finish(args.bpf_stats, stop)?;
    let shown = args.output.display().to_string();
    // Quoted for a shell when it needs it, so the line can be pasted as is.
    let plain = shown.chars().all(|c| c.is_alphanumeric() || "-_./=:,+@%".contains(c));
    let path = if plain { shown } else { format!("'{}'", shown.replace('\'', r"'\''")) };
    crate::say!(
        "pyperf: next: pyperf report {path} (or --flamegraph -o flame.svg, --speedscope -o prof.speedscope.json)"
    );
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::parse_min_duration;

    #[test]
    fn off_cpu_min_durations() {
        assert_eq!(parse_min_duration("1ms").unwrap(), 1_000_000);
        assert_eq!(parse_min_duration("500us").unwrap(), 500_000);
        assert_eq!(parse_min_duration("0.5s").unwrap(), 500_000_000);
        assert_eq!(parse_min_duration("250ns").unwrap(), 250);
        assert_eq!(parse_min_duration("0").unwrap(), 0);
        assert_eq!(parse_min_duration("4s").unwrap(), 4_000_000_000);
        for bad in ["", "1", "ms", "1h", "-1ms", "4.1s", "11s", "1e3ms", "nan ms"] {
            let e = parse_min_duration(bad).unwrap_err().to_string();
            assert!(e.contains("give a duration with its unit"), "{bad}: {e}");
        }
    }
}
