//! `pyperf record`: its arguments, checked, and the session they set up.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::privileges;
use crate::sampler::{Rate, SampleEvent, Sampler, SamplerOptions};
use crate::session::{self, Session};
use crate::signals;
use crate::sink::file::FileSink;
use crate::sink::output::{self, Output};
use crate::targets::{Targets, Workload};

/// `pyperf record`'s arguments.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["pid", "all", "cgroup", "command"])))]
pub struct RecordArgs {
    /// Output file. An existing recording there is kept as FILE.old, as perf does.
    #[arg(short = 'o', long = "output", default_value = "prof.pyp")]
    pub output: PathBuf,
    /// Samples per second per CPU [default: 99]
    #[arg(short = 'F', long = "freq", conflicts_with = "period")]
    pub freq: Option<u64>,
    /// Sample every PERIOD events instead (nanoseconds for cpu-clock, cycles for cycles).
    #[arg(short = 'c', long = "count")]
    pub period: Option<u64>,
    /// Stop after this many seconds (default: until Ctrl-C or until the targets exit).
    #[arg(short = 'd', long = "duration")]
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
    /// Ring buffer size in KiB (rounded up to a power of two pages).
    #[arg(long = "ringbuf-kib", default_value_t = 4096)]
    pub ringbuf_kib: usize,
    /// Measure the BPF program's own run time (kernel BPF statistics) and print it in the summary.
    #[arg(long = "bpf-stats")]
    pub bpf_stats: bool,
    /// Start this command and profile it until it exits; pyperf exits with its status. `--` before it is
    /// optional (needed only when the command's first word starts with `-`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Samples per second per CPU without `-F` / `-c`.
pub const DEFAULT_FREQ: u64 = 99;

/// Runs `pyperf record`; its exit code is the workload's, if it started one.
pub fn record(args: &RecordArgs) -> Result<ExitCode> {
    let rate = match (args.freq, args.period) {
        (_, Some(0)) | (Some(0), _) => bail!("the sampling rate must be above 0"),
        (Some(f), _) => Rate::Frequency(f),
        (None, Some(p)) => Rate::Period(p),
        (None, None) => Rate::Frequency(DEFAULT_FREQ),
    };
    // Beyond ~30 years a duration is a typo, and Duration/Instant arithmetic would overflow.
    const LONGEST: f64 = 1e9;
    if let Some(d) = args.duration {
        if !(d > 0.0 && d <= LONGEST) {
            bail!("--duration must be a positive number of seconds, at most {LONGEST:e}");
        }
    }
    let event = if args.event == "cycles" { SampleEvent::Cycles } else { SampleEvent::CpuClock };

    // Everything that can fail at start fails before the output file exists.
    output::check(&args.output)?;
    privileges::check_all()?;
    let mut sampler = Sampler::new(&SamplerOptions { event, rate, ringbuf_bytes: args.ringbuf_kib.max(4) * 1024 })
        .context("cannot start sampling")?;
    let targets = if let Some(cgroup) = &args.cgroup {
        Targets::cgroup(cgroup)?
    } else if args.all {
        Targets::all()
    } else if !args.pid.is_empty() {
        Targets::pids(&args.pid)?
    } else {
        Targets::workload(Workload::spawn(&args.command)?)
    };
    if args.bpf_stats {
        sampler.enable_bpf_stats().context("cannot measure the BPF program")?;
    }
    // A failure from here to the end of the start removes the new file and puts the previous one back (and
    // dropping the targets ends a workload it started).
    let output = Output::create(&args.output)?;
    let created = output.guard();
    signals::install();

    let sink = FileSink::new(output, &session::header(&args.command, event, rate))?;
    let mut session = Session::new(sampler, targets, Box::new(sink));
    session.start()?;
    created.keep();

    let deadline = args.duration.and_then(|d| Instant::now().checked_add(Duration::from_secs_f64(d)));
    session.run(deadline, std::io::stderr().is_terminal())?;
    let code = session.finish(args.bpf_stats)?;
    crate::say!(
        "pyperf: next: pyperf report -i {} (or --flamegraph -o flame.svg, --speedscope -o prof.json)",
        args.output.display()
    );
    Ok(code)
}
