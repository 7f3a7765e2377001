//! A recording session: the loop that ties the parts together. It applies the targets' events to the sampler,
//! the symbolizer and the sink, drains the sampler's ring buffer through the symbolizer into the sink, flushes,
//! and at the end writes the statistics and says what was recorded.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pyperf_format::{
    GilState, Header, Process, PthreadIdMatch, RecorderWarning, StackStatus, Stats, ThreadName, ThreadStateMatch,
};

use crate::python::config::bpf_config;
use crate::python::PythonProcess;
use crate::sampler::{Rate, RawSample, SampleEvent, Sampler};
use crate::signals;
use crate::sink::{Sample, Sink};
use crate::symbolizer::Symbolizer;
use crate::targets::procfs::Namespaces;
use crate::targets::{Event, Stop, Targets};

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
/// While a command pyperf started runs no Python: a scan every FAST_SCAN for FAST_FOR after its spawn (an
/// interpreter it execs is mapped within a millisecond or two, and is caught before the script runs), then twice as
/// long after each scan, up to SLOW_SCAN: an interpreter it starts later is caught within SLOW_SCAN, still before
/// its own code runs (starting an interpreter takes longer), and waiting costs SLOW_SCAN's wakeups with a few small
/// /proc reads each (the command's process tree, not every process), instead of a busy loop.
const FAST_SCAN: Duration = Duration::from_micros(500);
const FAST_FOR: Duration = Duration::from_millis(20);
const SLOW_SCAN: Duration = Duration::from_millis(20);

/// The recording's header: what was recorded, where, how.
pub fn header(workload: &[String], event: SampleEvent, rate: Rate) -> Header {
    let uts = uname();
    Header {
        pyperf_version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: uts.0,
        kernel_release: uts.1,
        arch: uts.2,
        start_time_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        event: match event {
            SampleEvent::CpuClock => "cpu-clock",
            SampleEvent::Cycles => "cycles",
        }
        .to_string(),
        rate: match rate {
            Rate::Frequency(f) => pyperf_format::Rate::Frequency(f),
            Rate::Period(p) => pyperf_format::Rate::Period(p),
        },
        command_line: std::env::args().collect(),
        workload: workload.to_vec(),
    }
}

/// (nodename, release, machine)
fn uname() -> (String, String, String) {
    // SAFETY: a zeroed utsname is a valid argument for uname, which fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (s(&u.nodename), s(&u.release), s(&u.machine))
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sampler, targets, symbolizer and sink of one recording.
pub struct Session {
    sampler: Sampler,
    targets: Targets,
    symbolizer: Symbolizer,
    sink: Box<dyn Sink>,
    /// CLOCK_MONOTONIC at the start: sample and process times are relative to it.
    start_ns: u64,
    started: Instant,
    truncated: u64,
    /// SIGINT / SIGTERM received when recording stopped (each later one hurries the end of a command).
    signals_seen: usize,
}

impl Session {
    /// A session over a loaded sampler, the targets to follow and where samples go. Nothing is followed until
    /// [`Session::start`].
    pub fn new(sampler: Sampler, targets: Targets, sink: Box<dyn Sink>) -> Session {
        Session {
            sampler,
            targets,
            symbolizer: Symbolizer::new(),
            sink,
            start_ns: monotonic_ns(),
            started: Instant::now(),
            truncated: 0,
            signals_seen: 0,
        }
    }

    /// The targets (for their counters).
    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    /// Follows the initial targets. A process given with `-p` that cannot be set up fails the start. A command
    /// pyperf started is looked at once here, then as often as [`Session::run`]'s backoff says until it runs
    /// Python. Times (the status line, the summary, `--duration`) count from here for a command (its spawn, just
    /// before), from the end of this set-up for the other targets.
    pub fn start(&mut self) -> Result<()> {
        let events = self.targets.start()?;
        self.apply(events)?;
        if !self.targets.has_workload() {
            self.started = Instant::now();
        }
        Ok(())
    }

    /// When the recording started (see [`Session::start`]): `--duration` counts from here.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Records until a signal, the `deadline` or the end of every target, and says which; with `status_line`,
    /// shows progress on stderr. An error (a full disk) ends it too: see [`Session::abandon`].
    pub fn run(&mut self, deadline: Option<Instant>, status_line: bool) -> Result<Stop> {
        let stop = self.record(deadline, status_line);
        if status_line {
            crate::say_raw!("\r\x1b[K");
        }
        stop
    }

    fn record(&mut self, deadline: Option<Instant>, status_line: bool) -> Result<Stop> {
        let mut last_flush = Instant::now();
        let mut last_scan = Instant::now();
        let mut waiting_scan = FAST_SCAN;
        loop {
            let waiting = self.targets.waiting_for_python();
            let next_scan = last_scan + if waiting { waiting_scan } else { RESCAN_EVERY };
            let mut wake = next_scan.min(last_flush + FLUSH_EVERY);
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            let wait = wake.saturating_duration_since(Instant::now()).min(POLL_EVERY);
            if wait < Duration::from_millis(1) {
                // The ring's poll counts whole milliseconds: a shorter wait would spin there.
                self.poll(Duration::ZERO)?;
                std::thread::sleep(wait);
            } else {
                // Whole milliseconds, rounded up, for the same reason: one wakeup, not one plus a short sleep.
                self.poll(Duration::from_millis(wait.as_micros().div_ceil(1000) as u64))?;
            }
            let now = Instant::now();
            if now >= next_scan {
                let events = self.targets.scan();
                self.apply(events)?;
                last_scan = now;
                if now.duration_since(self.started) >= FAST_FOR {
                    waiting_scan = (waiting_scan * 2).min(SLOW_SCAN);
                }
            }
            if now.duration_since(last_flush) >= FLUSH_EVERY {
                self.sink.flush()?;
                last_flush = now;
                if status_line {
                    crate::say_raw!("\r\x1b[K{}", self.status());
                }
            }
            // Read once: a signal after this is one more, for ending the command.
            self.signals_seen = signals::received();
            if self.targets.all_exited() {
                return Ok(Stop::Exited);
            }
            if self.signals_seen > 0 {
                return Ok(Stop::Signal);
            }
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Stop::Duration);
            }
        }
    }

    /// Recording failed (`err`, e.g. a full disk): says so in one line, stops sampling, leaves the file as it is
    /// (the report reads it up to its last complete chunk) and lets a command pyperf started run to its end
    /// (Ctrl-C stops it). pyperf's exit code: failure.
    pub fn abandon(mut self, err: &anyhow::Error) -> Result<ExitCode> {
        let seen = self.signals_seen.max(signals::received());
        crate::say!("pyperf: {}", crate::error_line(err));
        let followed: Vec<u32> = self.targets.followed().collect();
        for pid in followed {
            self.sampler.remove_process(pid);
        }
        let Session { targets, sink, .. } = self;
        drop(sink);
        targets.finish(Stop::Failed, seen)
    }

    /// Stops sampling, takes what is still in the ring buffer (every sample the BPF program counted is then in
    /// the sink or counted lost), ends the sink, prints the summary (and the BPF program's own cost with
    /// `bpf_stats`), and ends the targets as `stop` asks ([`Stop`]): pyperf's exit code. The command pyperf
    /// started is ended after the file is complete, also when ending the file failed.
    pub fn finish(mut self, bpf_stats: bool, stop: Stop) -> Result<ExitCode> {
        let followed: Vec<u32> = self.targets.followed().collect();
        for pid in followed {
            self.sampler.remove_process(pid);
        }
        // A program run that started before the stop may still be writing: give it a moment, it takes
        // microseconds.
        std::thread::sleep(Duration::from_millis(2));
        let elapsed = self.started.elapsed();
        // The last thread names too: a program may name its threads after they started.
        let drained = self.poll(Duration::ZERO).and_then(|()| self.thread_names(true));
        let written = drained.and_then(|()| self.write_summary(elapsed, bpf_stats));
        let code = self.targets.finish(stop, self.signals_seen)?;
        written.map(|()| code)
    }

    /// Ends the sink with the statistics and says what was recorded.
    fn write_summary(&mut self, elapsed: Duration, bpf_stats: bool) -> Result<()> {
        let c = self.sampler.counters();
        let samples = self.sink.samples();
        let stats = Stats {
            samples,
            lost_samples: c.lost,
            truncated_stacks: self.truncated,
            lost_symbols: self.symbolizer.lost_symbols(),
            // Failed reads of target memory. Not plus the samples whose walk ended in an error: such a walk
            // failed on a read that is counted here already (the report's stack-status table shows those samples).
            errors: c.read_errors,
            duration_ns: elapsed.as_nanos() as u64,
            counters: c
                .named()
                .into_iter()
                .chain(self.targets.counters().iter().map(|&(k, v)| (k.to_string(), v)))
                .chain(self.symbolizer.thread_name_counters())
                .collect(),
        };
        let pct = |n: u64| if samples + c.lost == 0 { 0.0 } else { 100.0 * n as f64 / (samples + c.lost) as f64 };
        let mut summary = String::new();
        let _ = write!(
            summary,
            "pyperf: {:.1} s, {} samples, {} lost ({:.2}%), {} truncated stacks ({:.2}%), {} lost symbols, {} errors",
            elapsed.as_secs_f64(),
            samples,
            c.lost,
            pct(c.lost),
            self.truncated,
            pct(self.truncated),
            stats.lost_symbols,
            stats.errors,
        );
        let sink = std::mem::replace(&mut self.sink, Box::new(Finished));
        if let Some(what) = sink.finish(&stats)? {
            summary.push('\n');
            summary.push_str(&what);
        }
        crate::say!("{summary}");
        if bpf_stats {
            if let Some((run_ns, runs)) = self.sampler.bpf_stats() {
                // Every perf event runs the program, also on CPUs running other processes; those runs return after
                // one map lookup. Per target sample counts all of it against the samples taken.
                crate::say!(
                    "pyperf: BPF {} runs, {:.0} ns per run, {:.0} ns per target sample ({} samples)",
                    runs,
                    run_ns as f64 / runs.max(1) as f64,
                    run_ns as f64 / c.samples.max(1) as f64,
                    c.samples
                );
            }
        }
        Ok(())
    }

    fn status(&self) -> String {
        let targets = self.targets.count();
        format!(
            "[pyperf] {:.1} s  {} samples  {} lost  {} target{}",
            self.started.elapsed().as_secs_f64(),
            self.sink.samples(),
            self.sampler.counters().lost,
            targets,
            if targets == 1 { "" } else { "s" }
        )
    }

    /// Takes samples from the ring buffer for up to `timeout` (see [`Sampler::poll`]).
    fn poll(&mut self, timeout: Duration) -> Result<()> {
        let Session { sampler, symbolizer, sink, start_ns, truncated, .. } = self;
        let sink: &mut dyn Sink = sink.as_mut();
        sampler
            .poll(timeout, &mut |s| on_sample(symbolizer, sink, *start_ns, truncated, s))
            .context("reading samples")?;
        self.thread_names(false)
    }

    /// Python thread names (issue #13): reads those due (a thread new in the samples; with `all`, every sampled
    /// process's, before the end) and hands the new or changed ones to the sink, stamped with the time of the read
    /// (the empty names that end one: with the time they end it from).
    fn thread_names(&mut self, all: bool) -> Result<()> {
        let start_ns = self.start_ns;
        let mut names = Vec::new();
        self.symbolizer.read_thread_names(Instant::now(), all, &mut |pid, tid, name, at_ns| {
            let time_ns = at_ns.saturating_sub(start_ns);
            names.push(ThreadName { pid, tid, time_ns, name: name.to_string() });
        });
        if names.is_empty() {
            return Ok(());
        }
        self.sink.thread_names(&names)
    }

    /// Applies what discovery found: processes gone are dropped (after their queued samples are taken, while
    /// their memory can still be read), new ones are set up.
    fn apply(&mut self, events: Vec<Event>) -> Result<()> {
        if events.iter().any(|e| matches!(e, Event::Gone { .. })) {
            self.poll(Duration::ZERO)?;
        }
        for event in events {
            match event {
                Event::Gone { pid, .. } => {
                    self.sampler.remove_process(pid);
                    self.symbolizer.remove_process(pid);
                }
                Event::Found { process, namespaces, required } => {
                    if let Err(e) = self.follow(&process, &namespaces)? {
                        if required {
                            return Err(e);
                        }
                        self.targets.failed(process.pid, &e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts sampling `p`, symbolizing its frames and recording it. The outer error is the recording's own
    /// (writing the file failed: fatal), the inner one the process's (it could not be set up).
    fn follow(&mut self, p: &PythonProcess, ns: &Namespaces) -> Result<Result<()>> {
        // The process record applies from this time on (FORMAT.md: a reused pid's later record applies from its
        // first_seen_ns): take it before the first sample can be taken.
        let seen = monotonic_ns();
        let set_up = self.set_up(p, ns);
        if let Err(e) = set_up {
            self.sampler.remove_process(p.pid);
            self.symbolizer.remove_process(p.pid);
            return Ok(Err(e));
        }
        self.sink.process(&Process {
            pid: p.pid,
            command: p.cmdline.clone(),
            python_version: p.version_string(),
            interpreter_path: p.interpreter.display().to_string(),
            build_id: p.build_id.clone().unwrap_or_default(),
            first_seen_ns: seen.saturating_sub(self.start_ns),
            ns_pid: ns.ns_pid,
            cgroup: ns.cgroup.clone(),
        })?;
        if let Some(text) = p.warning() {
            crate::say!("pyperf: warning: process {}: {text}", p.pid);
            self.sink.warning(&RecorderWarning { pid: p.pid, text })?;
        }
        Ok(Ok(()))
    }

    /// Registers `p` with the sampler and the symbolizer.
    fn set_up(&mut self, p: &PythonProcess, ns: &Namespaces) -> Result<()> {
        let config = bpf_config(p, ns.other_pid_ns).with_context(|| format!("cannot profile process {}", p.pid))?;
        self.sampler.add_process(p.pid, &config).with_context(|| format!("cannot profile process {}", p.pid))?;
        self.symbolizer.add_process(p).with_context(|| format!("cannot read the memory of process {}", p.pid))
    }
}

/// The sink of a session whose sink has been finished: takes nothing.
struct Finished;

impl Sink for Finished {
    fn process(&mut self, _: &Process) -> Result<()> {
        Ok(())
    }
    fn warning(&mut self, _: &RecorderWarning) -> Result<()> {
        Ok(())
    }
    fn symbol(&mut self, _: u32, _: &pyperf_format::Symbol) {}
    fn sample(&mut self, _: &Sample<'_>) {}
    fn samples(&self) -> u64 {
        0
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>, _: &Stats) -> Result<Option<String>> {
        Ok(None)
    }
}

/// One raw sample: symbolized, counted, handed to the sink.
fn on_sample(symbolizer: &mut Symbolizer, sink: &mut dyn Sink, start_ns: u64, truncated: &mut u64, s: &RawSample<'_>) {
    let status = StackStatus::from_u8(s.status);
    if status == StackStatus::Truncated {
        *truncated += 1;
    }
    let frames = symbolizer.symbolize(s, &mut |id, sym| sink.symbol(id, sym));
    let comm_len = s.comm.iter().position(|&c| c == 0).unwrap_or(s.comm.len());
    let comm = String::from_utf8_lossy(&s.comm[..comm_len]);
    sink.sample(&Sample {
        time_ns: s.time_ns.saturating_sub(start_ns),
        cpu: s.cpu,
        pid: s.pid,
        tid: s.tid,
        comm: &comm,
        thread_state: ThreadStateMatch::from_u8(s.thread_state),
        gil: GilState::from_u8(s.gil),
        pthread_id: PthreadIdMatch::from_u8(s.pthread_id),
        status,
        frames,
    });
}
