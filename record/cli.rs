//! `pyperf record`: arguments, and the loop that ties targets, the BPF sampler and the file together.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::bpf::{Rate, SampleEvent, Sampler, SamplerOptions};
use crate::output::Output;
use crate::recorder::Recorder;
use crate::signals;
use crate::targets::{Targets, Workload};

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["pid", "all", "command"])))]
pub struct RecordArgs {
    /// Output file. An existing recording there is kept as FILE.old, as perf does.
    #[arg(short = 'o', long = "output", default_value = "prof.pyp")]
    pub output: PathBuf,
    /// Samples per second per CPU.
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
    /// Profile every Python process on the host, including ones that start while recording.
    #[arg(short = 'a', long = "all-processes")]
    pub all: bool,
    /// Ring buffer size in KiB (rounded up to a power of two pages).
    #[arg(long = "ringbuf-kib", default_value_t = 4096)]
    pub ringbuf_kib: usize,
    /// Measure the BPF program's own run time (kernel BPF statistics) and print it in the summary.
    #[arg(long = "bpf-stats")]
    pub bpf_stats: bool,
    /// Start this command and profile it until it exits; pyperf exits with its status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub const DEFAULT_FREQ: u64 = 99;

/// Hand what is buffered to the kernel (write(2)) at least this often, so that a killed recorder (SIGKILL, OOM
/// killer, a crash) loses at most this much: the kernel's page cache outlives the process. Half a second keeps the
/// loss well under the one second promised, with a poll timeout (POLL_EVERY) on top. No fsync while recording: it
/// would stall the loop on the disk, and only a crash of the whole machine loses unsynced pages; the file is
/// synced once at the end.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Longest wait for samples. The BPF program wakes us within PYPERF_WAKEUP_NS (2 ms) of a sample; this only
/// bounds how late the loop notices a signal, a deadline or an exited target.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// How often `-a` looks for new Python processes and `-p` / `--` for exited ones.
const RESCAN_EVERY: Duration = Duration::from_millis(200);

pub fn record(args: &RecordArgs) -> Result<ExitCode> {
    let rate = match (args.freq, args.period) {
        (_, Some(0)) | (Some(0), _) => bail!("the sampling rate must be above 0"),
        (Some(f), _) => Rate::Frequency(f),
        (None, Some(p)) => Rate::Period(p),
        (None, None) => Rate::Frequency(DEFAULT_FREQ),
    };
    if let Some(d) = args.duration {
        if !(d > 0.0 && d.is_finite()) {
            bail!("--duration must be a positive number of seconds");
        }
    }
    let event = if args.event == "cycles" { SampleEvent::Cycles } else { SampleEvent::CpuClock };

    // Everything that can fail at start fails before the output file exists.
    crate::output::check(&args.output)?;
    let mut sampler = Sampler::new(&SamplerOptions { event, rate, ringbuf_bytes: args.ringbuf_kib.max(4) * 1024 })
        .context("cannot start sampling")?;
    let mut targets = if args.all {
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
    // dropping `targets` ends a workload it started).
    let output = Output::create(&args.output)?;
    let created = output.guard();
    signals::install();

    let header = crate::recorder::header(args, event, rate);
    let mut rec = Recorder::new(output, &header)?;
    targets.start(&mut sampler, &mut rec)?;
    created.keep();

    let started = Instant::now();
    let deadline = args.duration.map(|d| started + Duration::from_secs_f64(d));
    let status_line = std::io::stderr().is_terminal();
    let mut last_flush = Instant::now();
    let mut last_scan = Instant::now();
    loop {
        sampler.poll(POLL_EVERY, &mut |s| rec.on_sample(s)).context("reading samples")?;
        let now = Instant::now();
        if now.duration_since(last_scan) >= RESCAN_EVERY {
            targets.rescan(&mut sampler, &mut rec)?;
            last_scan = now;
        }
        if now.duration_since(last_flush) >= FLUSH_EVERY {
            rec.flush()?;
            last_flush = now;
            if status_line {
                eprint!("\r\x1b[K{}", rec.status(started.elapsed(), &sampler, targets.count()));
            }
        }
        if signals::stop_requested() || deadline.is_some_and(|d| now >= d) || targets.all_exited() {
            break;
        }
    }
    // Stop sampling, then take what is still in the ring buffer: every sample the BPF program counted is now in
    // the file or counted lost. (A program run that started before the stop may still be writing: give it a
    // moment, it takes microseconds.)
    targets.stop_sampling(&mut sampler);
    std::thread::sleep(Duration::from_millis(2));
    sampler.poll(Duration::ZERO, &mut |s| rec.on_sample(s)).context("reading samples")?;
    if status_line {
        eprint!("\r\x1b[K");
    }
    let summary = rec.finish(started.elapsed(), &sampler, &targets.counters())?;
    eprintln!("{summary}");
    if args.bpf_stats {
        if let Some((run_ns, runs)) = sampler.bpf_stats() {
            let c = sampler.counters();
            // Every perf event runs the program, also on CPUs running other processes; those runs return after
            // one map lookup. Per target sample counts all of it against the samples taken.
            eprintln!(
                "pyperf: BPF {} runs, {:.0} ns per run, {:.0} ns per target sample ({} samples)",
                runs,
                run_ns as f64 / runs.max(1) as f64,
                run_ns as f64 / c.samples.max(1) as f64,
                c.samples
            );
        }
    }
    let code = targets.finish()?;
    Ok(code)
}
