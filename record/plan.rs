//! What every front end (`record`, `top`) asks for, checked once: the arguments they share (the targets, the
//! sampling, the push), flattened into each front end's own; every default, as one constant each; and the
//! [`Plan`] built from them, which makes the sampler's options, the targets, the header, the push sink and the
//! session's settings. A front end adds only what is its own (`record`'s file and native frames, `top`'s view).
//! Imports the rooms it assembles (sampler, targets, session, sink); none of them imports it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use pyperf_format::Header;

use crate::sampler::{Rate, SampleEvent, Sampler, SamplerOptions};
use crate::session::Session;
use crate::sink::fanout::FanOut;
use crate::sink::push::{
    check_app, parse_labels, redacted, redacted_command_line, Endpoint, Protocol, PushOptions, PushSink,
};
use crate::sink::Sink;
use crate::targets::Targets;

/// Samples per second without `-F` / `-c`.
pub const DEFAULT_FREQ: u64 = 99;
/// `--ringbuf-kib` without it: 4 MiB.
pub const DEFAULT_RINGBUF_KIB: usize = 4096;
/// Smallest `--ringbuf-kib`: one page.
pub const MIN_RINGBUF_KIB: usize = 4;
/// Largest `--ringbuf-kib`: 1 GiB, the most the sampler takes (and far more than any rate needs).
pub const MAX_RINGBUF_KIB: usize = 1 << 20;
/// `--native-stack-kib` without it.
pub const DEFAULT_NATIVE_STACK_KIB: u32 = 16;
/// `--off-cpu-min` without it.
pub const DEFAULT_OFF_CPU_MIN: &str = "1ms";
/// `--async-rate` with `--off-cpu` and no rate given: suspended asyncio tasks weighed this often (Hz).
pub const DEFAULT_ASYNC_RATE: u32 = 10;
/// Highest `--async-rate`: a sweep reads every task of every followed process.
pub const MAX_ASYNC_RATE: u32 = 1000;
/// Longest `--off-cpu-min`: 4 s (the kernel's draw multiplies a 32-bit random number by it, which must fit 64 bits;
/// and longer would sample even long waits).
const MAX_OFF_CPU_MIN_NS: u64 = 4_000_000_000;
/// `--push-every` without it, in seconds.
pub const DEFAULT_PUSH_EVERY: u64 = 10;
/// Beyond ~30 years a `--duration` is a typo, and Duration/Instant arithmetic would overflow.
const LONGEST: f64 = 1e9;

/// What to sample: `-p`, `-a`, `-G` or a command (exactly one). The help is `record`'s; a front end that words
/// it otherwise says so with `mut_arg`.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["pid", "all", "cgroup", "command"])))]
pub struct TargetArgs {
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
    /// Start this command and profile it until it exits; pyperf exits with its status. `--` before it is
    /// optional (needed only when the command's first word starts with `-`). Ctrl-C stops the recording and the
    /// command; a full disk stops the recording only (pyperf waits for the command, then exits 1). Arguments that
    /// are not UTF-8 are passed as they are (the recording's header shows them with U+FFFD for each bad byte).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl TargetArgs {
    /// The command's words as text (lossy), for the header and the view.
    pub fn workload(&self) -> Vec<String> {
        self.command.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// What is watched, in a few words (the view's title).
    pub fn describe(&self) -> String {
        if let Some(c) = &self.cgroup {
            format!("cgroup {c}")
        } else if self.all {
            "all Python processes".to_string()
        } else if !self.pid.is_empty() {
            format!("pid {}", self.pid.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
        } else {
            self.workload().join(" ")
        }
    }
}

/// How to sample: the event and its rate, for how long, the ring buffer, off-CPU time, the uprobe.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// `-F`: samples per second. Its default is said in the help, not given to clap: without -F, -c decides.
    #[arg(
        short = 'F',
        long = "freq",
        conflicts_with = "period",
        help = format!(
            "Samples per second: of each running thread of the targets with -p and -- CMD, of each CPU with -a and -G \
             [default: {DEFAULT_FREQ}]"
        )
    )]
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
    #[arg(short = 'e', long = "event", default_value = "cpu-clock", value_parser = SampleEvent::NAMES)]
    pub event: String,
    /// Ring buffer size in KiB, 4 to 1048576 (rounded up to a power of two pages).
    #[arg(long = "ringbuf-kib", default_value_t = DEFAULT_RINGBUF_KIB)]
    pub ringbuf_kib: usize,
    /// Also record when each followed thread is off CPU (blocked in I/O, sleep, a lock, waiting for the GIL, or
    /// preempted), for how long and with which Python stack: `pyperf report --mode off-cpu` or `--mode wall`.
    #[arg(long = "off-cpu")]
    pub off_cpu: bool,
    /// With --off-cpu: intervals shorter than this (e.g. 500us, 1ms, 0) are sampled, each kept with probability
    /// length / DURATION and then counted as DURATION, which estimates their total time without walking the stack
    /// at every context switch.
    #[arg(long = "off-cpu-min", value_name = "DURATION", default_value = DEFAULT_OFF_CPU_MIN, requires = "off_cpu")]
    pub off_cpu_min: String,
    /// Never put a uprobe in a target. Before 3.14 pyperf counts a process's frees of code objects with a uprobe
    /// on its code_dealloc (a breakpoint: ~1-3 us each time a code object is freed), which lets the BPF program keep
    /// the check words of deep stacks instead of reading them at every sample; without it each sample costs more
    /// (~100 ns more per distinct frame), nothing else changes. 3.14+ count frees themselves.
    #[arg(long = "no-uprobe")]
    pub no_uprobe: bool,
    /// asyncio task view (the default; CPython 3.11+): each sample of a running task also gets its task's stack,
    /// stitched under the tasks awaiting it (`[task NAME]` boundaries), which reports show unless `--no-async`
    #[arg(long = "async", overrides_with = "no_async")]
    pub async_tasks: bool,
    /// No asyncio task view: thread stacks only (the BPF program then skips marking coroutine frames)
    #[arg(long = "no-async", overrides_with = "async_tasks")]
    pub no_async: bool,
    /// Also weigh suspended asyncio tasks this many times a second, each at the await it waits in (`report --mode
    /// wall`: where requests wait); default 10 with --off-cpu (less often when a sweep would cost over 1% of a CPU:
    /// thousands of tasks), else 0 (off)
    #[arg(long = "async-rate", value_name = "HZ")]
    pub async_rate: Option<u32>,
}

/// `record`'s native and kernel frames.
#[derive(Args, Debug, Clone)]
pub struct NativeArgs {
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
    #[arg(long = "native-stack-kib", value_name = "KIB", default_value_t = DEFAULT_NATIVE_STACK_KIB, requires = "native")]
    pub native_stack_kib: u32,
}

/// Continuous profiling to a Pyroscope server.
#[derive(Args, Debug, Clone)]
pub struct PushArgs {
    /// Continuous profiling: every --push-every seconds, also send the profile of that window (gzip'd pprof) to a
    /// Pyroscope server's ingest API at URL (plain http, e.g. http://localhost:4040; user:password@ for Basic
    /// authentication, stored and shown as user:***@, or see --push-auth-file). The .pyp file (record -o, top -o)
    /// keeps everything; a server that is down or slow never blocks the recording (windows retried from a bounded
    /// queue; what is dropped is counted in the summary and the trailer).
    #[arg(long = "push", value_name = "URL")]
    pub push: Option<String>,
    /// With --push: credentials kept out of the command line: the file's first line is `Bearer TOKEN`,
    /// `USER:PASSWORD`, or the password of the URL's user (http://USER@host). The environment's
    /// PYPERF_PUSH_PASSWORD (with the URL's user) or PYPERF_PUSH_TOKEN (Bearer) work too.
    #[arg(long = "push-auth-file", value_name = "FILE", requires = "push")]
    pub push_auth_file: Option<PathBuf>,
    /// With --push: window length in seconds (1-3600).
    #[arg(long = "push-every", value_name = "SECONDS", default_value_t = DEFAULT_PUSH_EVERY, requires = "push")]
    pub push_every: u64,
    /// With --push: the application name on the server [default: the command's program name, else "python"]
    #[arg(long = "app", value_name = "NAME", requires = "push")]
    pub app: Option<String>,
    /// With --push: a label of every pushed profile (repeat: --label env=prod --label region=eu); each name once, at
    /// most 15, none of the reserved ones (__..., service_name, pyroscope_spy, pid, tid, thread, gil, process).
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "push")]
    pub label: Vec<String>,
    /// With --push: how windows are sent: ingest (Pyroscope's /ingest), connect (Pyroscope's Connect API
    /// /push.v1.PusherService/Push, as Grafana Alloy pushes), otlp (OTLP/HTTP profiles, /v1development/profiles:
    /// an OpenTelemetry Collector, Pyroscope) or parca (Parca's WriteRaw, as gRPC-Web). A URL given as
    /// PROTOCOL+http://... says it too.
    #[arg(long = "push-protocol", value_name = "PROTOCOL", requires = "push")]
    pub push_protocol: Option<String>,
    /// With --push: the tenant (sent as the X-Scope-OrgID header, as Pyroscope and the Collector take it).
    #[arg(long = "push-tenant", value_name = "ID", requires = "push")]
    pub push_tenant: Option<String>,
}

/// The protocol of `--push URL` (`PROTOCOL+http://...`) and `--push-protocol`, and the URL without it: they must
/// agree; neither says `ingest`.
fn push_protocol<'a>(url: &'a str, flag: Option<&str>) -> Result<(Protocol, &'a str)> {
    let names = || Protocol::ALL.map(Protocol::name).join(", ");
    let from_flag = match flag {
        Some(f) => {
            Some(Protocol::named(f).ok_or_else(|| anyhow::anyhow!("--push-protocol {f:?}: give one of {}", names()))?)
        }
        None => None,
    };
    let (from_url, rest) = match url.split_once("+http://") {
        Some((scheme, _)) if !scheme.contains('/') => {
            let p = Protocol::named(scheme).ok_or_else(|| {
                anyhow::anyhow!(
                    "--push {:?}: {scheme}+http:// names no protocol; give one of {}",
                    redacted(url),
                    names()
                )
            })?;
            (Some(p), &url[scheme.len() + 1..])
        }
        _ => (None, url),
    };
    match (from_url, from_flag) {
        (Some(u), Some(f)) if u != f => {
            bail!("--push says {u} and --push-protocol says {f}: give the protocol one way")
        }
        (u, f) => Ok((u.or(f).unwrap_or_default(), rest)),
    }
}

/// `--off-cpu-min`: a number with a unit (ns, us, ms, s), or 0, as nanoseconds.
pub fn parse_min_duration(text: &str) -> Result<u64> {
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

/// The recorder's defaults: what a front end given no sampling flag asks the sampler for.
impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            event: SampleEvent::CpuClock,
            rate: Rate::Frequency(DEFAULT_FREQ),
            ringbuf_bytes: DEFAULT_RINGBUF_KIB * 1024,
            off_cpu_min_ns: None,
            native: false,
            kernel: false,
            per_task: false,
            ustack_bytes: DEFAULT_NATIVE_STACK_KIB * 1024,
        }
    }
}

/// `--push` checked: where, as what, every how long. (No `Debug`: it holds the credentials.)
struct Push {
    endpoint: Endpoint,
    protocol: Protocol,
    tenant: Option<String>,
    app_given: bool,
    app: String,
    labels: Vec<(String, String)>,
    every: Duration,
}

/// The shared arguments, checked: everything a front end needs to set up its session.
pub struct Plan {
    options: SamplerOptions,
    /// `--async`: the sweep's rate (0: none) and whether it is the default (slowed down for many tasks), `None`
    /// without the task view.
    tasks: Option<(u32, bool)>,
    duration: Option<Duration>,
    uprobes: bool,
    push: Option<Push>,
    workload: Vec<String>,
    cgroup: Option<String>,
    all: bool,
    pids: Vec<u32>,
}

impl Plan {
    /// Checks every shared value (and `record`'s `native`) before anything is started or created.
    pub fn new(
        target: &TargetArgs,
        sampling: &SamplingArgs,
        native: Option<&NativeArgs>,
        push: &PushArgs,
    ) -> Result<Plan> {
        let rate = match (sampling.freq, sampling.period) {
            (_, Some(0)) | (Some(0), _) => bail!("the sampling rate must be above 0"),
            (Some(f), _) => Rate::Frequency(f),
            (None, Some(p)) => Rate::Period(p),
            (None, None) => Rate::Frequency(DEFAULT_FREQ),
        };
        let ustack_kib = native.map_or(DEFAULT_NATIVE_STACK_KIB, |n| n.native_stack_kib);
        if !(1..=64).contains(&ustack_kib) {
            bail!("--native-stack-kib must be between 1 and 64");
        }
        if !(MIN_RINGBUF_KIB..=MAX_RINGBUF_KIB).contains(&sampling.ringbuf_kib) {
            bail!("--ringbuf-kib must be between {MIN_RINGBUF_KIB} and {MAX_RINGBUF_KIB} (1 GiB)");
        }
        if let Some(d) = sampling.duration {
            if !(d > 0.0 && d <= LONGEST) {
                bail!("--duration must be a positive number of seconds, at most {LONGEST:e}");
            }
        }
        // (clap took only these names.)
        let event = SampleEvent::from_name(&sampling.event).unwrap_or(SampleEvent::CpuClock);
        let push = Self::push(target, push)?;
        let off_cpu_min_ns = if sampling.off_cpu { Some(parse_min_duration(&sampling.off_cpu_min)?) } else { None };
        let tasks = match (sampling.no_async, sampling.async_rate) {
            (true, Some(r)) if r > 0 => bail!("--async-rate needs the task view: drop --no-async"),
            (true, _) => None,
            (false, Some(r)) if r > MAX_ASYNC_RATE => bail!("--async-rate must be at most {MAX_ASYNC_RATE} Hz"),
            (false, Some(r)) => Some((r, false)),
            (false, None) => Some((if sampling.off_cpu { DEFAULT_ASYNC_RATE } else { 0 }, true)),
        };
        Ok(Plan {
            tasks,
            options: SamplerOptions {
                event,
                rate,
                ringbuf_bytes: sampling.ringbuf_kib * 1024,
                off_cpu_min_ns,
                native: native.is_some_and(|n| n.native),
                kernel: native.is_some_and(|n| n.kernel),
                // -p and a command: per-task events; -a and -G: every CPU.
                per_task: !target.all && target.cgroup.is_none(),
                ustack_bytes: ustack_kib * 1024,
            },
            duration: sampling.duration.map(Duration::from_secs_f64),
            uprobes: !sampling.no_uprobe,
            push,
            workload: target.workload(),
            cgroup: target.cgroup.clone(),
            all: target.all,
            pids: target.pid.clone(),
        })
    }

    /// `--push`, `--app`, `--label`, `--push-every`, checked.
    fn push(target: &TargetArgs, args: &PushArgs) -> Result<Option<Push>> {
        let Some(url) = &args.push else { return Ok(None) };
        let (protocol, url) = push_protocol(url, args.push_protocol.as_deref())?;
        let endpoint =
            Endpoint::parse(url)?.with_credentials(args.push_auth_file.as_deref(), |k| std::env::var(k).ok())?;
        if !(1..=3600).contains(&args.push_every) {
            bail!("--push-every must be between 1 and 3600 seconds");
        }
        let app = match &args.app {
            Some(a) => a.clone(),
            None => target
                .command
                .first()
                .map(|c| c.to_string_lossy().rsplit('/').next().unwrap_or_default().to_string())
                .filter(|c| check_app(c).is_ok())
                .unwrap_or_else(|| "python".to_string()),
        };
        check_app(&app)?;
        let labels = parse_labels(&args.label)?;
        if protocol == Protocol::Parca {
            // Parca takes Prometheus's label names: no dots.
            if let Some((k, _)) = labels.iter().find(|(k, _)| k.contains('.')) {
                bail!("--label {k}=...: Parca's label names are letters, digits and _ (no dots); rename it");
            }
        }
        let tenant = match &args.push_tenant {
            Some(t) if t.is_empty() || t.len() > 150 || !t.bytes().all(|b| b.is_ascii_graphic()) => {
                bail!("--push-tenant {t:?}: give a tenant id of 1-150 visible ASCII characters")
            }
            t => t.clone(),
        };
        let every = Duration::from_secs(args.push_every);
        Ok(Some(Push { endpoint, protocol, tenant, app_given: args.app.is_some(), app, labels, every }))
    }

    /// The sampler, loaded and attached.
    pub fn sampler(&self) -> Result<Sampler> {
        Sampler::new(&self.options).context("cannot start sampling")
    }

    /// `-G`, `-a` or `-p`'s targets, opened; `None` for a command, which the front end starts (its own way).
    pub fn targets(&self) -> Result<Option<Targets>> {
        Targets::chosen(self.cgroup.as_deref(), self.all, &self.pids)
    }

    /// Whether off-CPU time is recorded.
    pub fn off_cpu(&self) -> bool {
        self.options.off_cpu_min_ns.is_some()
    }

    /// Nanoseconds of CPU time one sample stands for, when the rate says (a frequency, or a cpu-clock period).
    pub fn period_ns(&self) -> Option<u64> {
        match self.options.rate {
            Rate::Frequency(hz) => Some(1_000_000_000 / hz.max(1)),
            Rate::Period(p) if self.options.event == SampleEvent::CpuClock => Some(p),
            Rate::Period(_) => None,
        }
    }

    /// The recording's header; a `--push` URL's password is not stored in it.
    pub fn header(&self) -> Header {
        let mut header = crate::header::header(&self.workload, self.options.event.name(), self.options.rate);
        header.command_line = redacted_command_line(&header.command_line);
        header
    }

    /// `recording` (the file, else the view), the sinks `beside` it, and the push's if `--push` was given.
    pub fn sinks(&self, header: &Header, recording: Box<dyn Sink>, beside: Vec<Box<dyn Sink>>) -> Result<FanOut> {
        let mut fan = beside.into_iter().fold(FanOut::new(recording), FanOut::with);
        if let Some(push) = &self.push {
            // Samples per second for the server: of the frequency, or of a cpu-clock period.
            let period_ns = self.period_ns();
            let sample_rate = match self.options.rate {
                Rate::Frequency(hz) => Some(hz),
                Rate::Period(_) => period_ns.map(|p| (1_000_000_000 / p.max(1)).max(1)),
            };
            let options = PushOptions {
                endpoint: push.endpoint.clone(),
                every: push.every,
                app: push.app.clone(),
                labels: push.labels.clone(),
                sample_rate,
                period_ns,
                off_cpu: self.off_cpu(),
                start_unix_ns: header.start_time_unix_ns,
                arch: header.arch.clone(),
                hostname: header.hostname.clone(),
                protocol: push.protocol,
                tenant: push.tenant.clone(),
                app_given: push.app_given,
            };
            fan = fan.with(Box::new(PushSink::new(options).context("cannot start pushing")?));
        }
        Ok(fan)
    }

    /// The session over `sampler`, `targets` and `sink`, with the uprobe, off-CPU and native settings.
    pub fn session(&self, sampler: Sampler, targets: Targets, sink: Box<dyn Sink>) -> Result<Session> {
        let mut session = Session::new(sampler, targets, sink).with_uprobes(self.uprobes);
        if let Some(min_ns) = self.options.off_cpu_min_ns {
            session = session.with_off_cpu(min_ns)?;
        }
        if self.options.native || self.options.kernel {
            session = session.with_native(self.options.native, self.options.kernel)?;
        }
        if let Some((hz, capped)) = self.tasks {
            session = session.with_async(hz, capped)?;
        }
        Ok(session)
    }

    /// When `--duration` ends, counted from `started`.
    pub fn deadline(&self, started: Instant) -> Option<Instant> {
        self.duration.and_then(|d| started.checked_add(d))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_push_protocol_comes_one_way() {
        assert_eq!(push_protocol("http://h", None).unwrap(), (Protocol::Ingest, "http://h"));
        assert_eq!(push_protocol("otlp+http://h:4318", None).unwrap(), (Protocol::Otlp, "http://h:4318"));
        assert_eq!(push_protocol("http://h", Some("parca")).unwrap(), (Protocol::Parca, "http://h"));
        assert_eq!(push_protocol("connect+http://h", Some("connect")).unwrap().0, Protocol::Connect);
        let e = push_protocol("otlp+http://h", Some("parca")).unwrap_err().to_string();
        assert_eq!(e, "--push says otlp and --push-protocol says parca: give the protocol one way");
        let e = push_protocol("foo+http://u:pw@h", None).unwrap_err().to_string();
        assert!(e.contains("names no protocol; give one of ingest, connect, otlp, parca") && !e.contains("pw"), "{e}");
        let e = push_protocol("http://h", Some("zz")).unwrap_err().to_string();
        assert_eq!(e, "--push-protocol \"zz\": give one of ingest, connect, otlp, parca");
    }

    /// The shared arguments as a front end flattens them.
    #[derive(Parser)]
    struct FrontEnd {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[command(flatten)]
        push: PushArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan> {
        let f = FrontEnd::try_parse_from(std::iter::once("pyperf").chain(args.iter().copied()))?;
        Plan::new(&f.target, &f.sampling, None, &f.push)
    }

    #[test]
    fn no_flags_give_the_defaults() {
        let p = plan(&["--", "python", "x.py"]).unwrap();
        let (o, d) = (&p.options, SamplerOptions::default());
        assert_eq!(
            (o.event, o.rate, o.ringbuf_bytes, o.ustack_bytes),
            (d.event, d.rate, d.ringbuf_bytes, d.ustack_bytes)
        );
        assert_eq!((o.rate, o.ringbuf_bytes, o.off_cpu_min_ns), (Rate::Frequency(99), 4 << 20, None));
        // A command: per-task events; -a: every CPU.
        assert!(o.per_task && !plan(&["-a"]).unwrap().options.per_task);
        assert_eq!(p.period_ns(), Some(1_000_000_000 / 99));
        assert_eq!(plan(&["--off-cpu", "-a"]).unwrap().options.off_cpu_min_ns, Some(1_000_000));
        assert!(p.push.is_none() && p.uprobes && p.duration.is_none());
    }

    #[test]
    fn rates_and_their_time() {
        assert_eq!(plan(&["-c", "2000000", "-a"]).unwrap().period_ns(), Some(2_000_000));
        assert_eq!(plan(&["-c", "2000000", "-e", "cycles", "-a"]).unwrap().period_ns(), None);
        assert_eq!(plan(&["-F", "1000", "-a"]).unwrap().options.rate, Rate::Frequency(1000));
    }

    #[test]
    fn each_value_is_checked() {
        for (args, want) in [
            (&["-F", "0", "-a"][..], "the sampling rate must be above 0"),
            (&["-c", "0", "-a"], "the sampling rate must be above 0"),
            (&["--ringbuf-kib", "2", "-a"], "--ringbuf-kib must be between 4 and 1048576 (1 GiB)"),
            (&["-d", "-1", "-a"], "--duration must be a positive number of seconds, at most 1e9"),
            (&["-d", "nan", "-a"], "--duration must be a positive number of seconds, at most 1e9"),
            (&["--off-cpu", "--off-cpu-min", "5s", "-a"], "give a duration with its unit"),
            (&["--push", "http://h", "--push-every", "0", "-a"], "--push-every must be between 1 and 3600 seconds"),
        ] {
            let e = plan(args).err().unwrap_or_else(|| panic!("{args:?} accepted")).to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

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
