//! A recording session: the loop that ties the parts together, and nothing more. It applies the targets' events to
//! the sampler, the symbolizer, the thread names, the off-CPU pairing and the frees plan; drains the sampler's ring
//! buffer through the symbolizer into the sink; flushes; and at the end gathers the statistics for the sink and the
//! summary ([`crate::summary`]). What each of those parts does is theirs: the session owns only the loop's timing
//! (the constants below) and the order of the calls. It imports the rooms it wires; none of them imports it (only
//! the front ends and the plan do).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pyperf_format::{
    GilState, OffCpuKind, Process, PthreadIdMatch, RecorderWarning, StackStatus, Stats, ThreadName, ThreadStateMatch,
};

use crate::abi::ProcConfig;
use crate::clock::monotonic_ns;
use crate::native::stacks::NativeStacks;
use crate::offcpu::{Ended, Interval, Pairing, Step};
use crate::python::config::bpf_config;
use crate::python::frees::{FreesPlan, Uprobes};
use crate::python::PythonProcess;
use crate::rest::Target;
use crate::sampler::{RawSample, Sampler};
use crate::signals;
use crate::sink::{OffCpuSample, Sample, Sink};
use crate::sources::Sources;
use crate::summary;
use crate::symbolizer::Symbolizer;
use crate::targets::procfs::Namespaces;
use crate::targets::{Event, Stop, Targets};
use crate::tasks::Tasks;
use crate::threadnames::ThreadNames;
use crate::traces::Traces;

/// Hand what is buffered to the kernel (write(2)) at least this often, so that a killed recorder (SIGKILL, OOM
/// killer, a crash) loses at most this much: the kernel's page cache outlives the process. Half a second keeps the
/// loss well under the one second promised, with a poll timeout (POLL_EVERY) on top. No fsync while recording: it
/// would stall the loop on the disk, and only a crash of the whole machine loses unsynced pages; the file is
/// synced once at the end.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// Longest wait for samples, and how late at most the periodic work (RESCAN_EVERY, FLUSH_EVERY) is done. The ring
/// is taken at least as often (the sampler's `POLL_INTERVAL`, the same 100 ms); this also bounds how late the loop
/// notices a signal or an exited target.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// How often `-a` looks for new Python processes and `-p` / `--` for exited ones.
const RESCAN_EVERY: Duration = Duration::from_millis(200);
/// How often at least the ring is taken while a followed process has asyncio tasks (see [`crate::tasks`]): a task
/// that ends sooner after a sample than this is not named (its sample keeps the thread view, counted). A request's
/// task lives tens of milliseconds; each take is a wakeup of the recorder (bench/RESULTS.md, #31).
const TASKS_POLL: Duration = Duration::from_millis(10);
/// While a command pyperf started runs no Python: a scan every FAST_SCAN for FAST_FOR after its spawn (an
/// interpreter it execs is mapped within a millisecond or two, and is caught before the script runs), then twice as
/// long after each scan, up to SLOW_SCAN: an interpreter it starts later is caught within SLOW_SCAN, still before
/// its own code runs (starting an interpreter takes longer), and waiting costs SLOW_SCAN's wakeups with a few small
/// /proc reads each (the command's process tree, not every process), instead of a busy loop.
const FAST_SCAN: Duration = Duration::from_micros(500);
const FAST_FOR: Duration = Duration::from_millis(20);
const SLOW_SCAN: Duration = Duration::from_millis(20);

/// Sampler, targets, symbolizer and sink of one recording.
pub struct Session {
    sampler: Sampler,
    targets: Targets,
    symbolizer: Symbolizer,
    /// The Python names of the sampled threads.
    names: ThreadNames,
    /// The OpenTelemetry trace context of the followed processes (see [`crate::traces`]).
    traces: Traces,
    sink: Box<dyn Sink>,
    /// CLOCK_MONOTONIC at the start: sample and process times are relative to it.
    start_ns: u64,
    started: Instant,
    truncated: u64,
    /// SIGINT / SIGTERM received when recording stopped (each later one hurries the end of a command).
    signals_seen: usize,
    /// Pidfds of the command pyperf started or of the processes given: the sampler's poll returns when one exits
    /// (see [`Sampler::wake_on`]).
    exit_fds: Vec<std::os::fd::OwnedFd>,
    /// `--off-cpu`: the pairing of the program's off-CPU records (see [`crate::offcpu`]).
    off_cpu: Option<Pairing>,
    /// Which processes' frees of code objects are counted (the BPF program's check-word cache), and how.
    frees: FreesPlan,
    /// `--async`: the task view of the samples, and the sweep of suspended tasks (see [`crate::tasks`]).
    tasks: Option<Tasks>,
    /// `--source`: the source files of the sampled frames (see [`crate::sources`]).
    sources: Option<Sources>,
}

impl Session {
    /// A session over a loaded sampler, the targets to follow and where samples go. Nothing is followed until
    /// [`Session::start`].
    pub fn new(sampler: Sampler, targets: Targets, sink: Box<dyn Sink>) -> Session {
        Session {
            sampler,
            targets,
            symbolizer: Symbolizer::new(),
            names: ThreadNames::default(),
            traces: Traces::default(),
            sink,
            start_ns: monotonic_ns(),
            started: Instant::now(),
            truncated: 0,
            signals_seen: 0,
            exit_fds: Vec::new(),
            off_cpu: None,
            frees: FreesPlan::new(true),
            tasks: None,
            sources: None,
        }
    }

    /// Stores the source file of every sampled Python frame in the recording (`--source`). Before
    /// [`Session::start`].
    pub fn with_sources(mut self) -> Session {
        self.sources = Some(Sources::default());
        self
    }

    /// Gives samples of asyncio tasks their task view (`--async`), and with `sweep_hz` > 0 weighs suspended tasks
    /// that often (`--async-rate`; `capped`: the default rate, slowed down to keep the sweep's CPU at 1%). Before
    /// [`Session::start`].
    pub fn with_async(mut self, sweep_hz: u32, capped: bool) -> Result<Session> {
        if sweep_hz > 0 {
            self.sink.start_task_waits()?;
        }
        self.tasks = Some(Tasks::new(sweep_hz, capped));
        Ok(self)
    }

    /// Whether pyperf may put a uprobe in a target (`--no-uprobe`: no), to count its frees of code objects before
    /// 3.14 (see [`crate::python::frees`]). Before [`Session::start`].
    pub fn with_uprobes(mut self, on: bool) -> Session {
        self.frees = FreesPlan::new(on);
        self
    }

    /// Records off-CPU intervals too (`--off-cpu`; the sampler was loaded with the same `min_ns`). Before
    /// [`Session::start`].
    pub fn with_off_cpu(mut self, min_ns: u64) -> Result<Session> {
        self.sink.start_off_cpu(min_ns)?;
        self.off_cpu = Some(Pairing::new());
        Ok(self)
    }

    /// Adds native and/or kernel frames to the stacks (`--native`, `--kernel`; the sampler was loaded with the
    /// same). Before [`Session::start`]. A kernel whose addresses are hidden is warned about, not refused.
    pub fn with_native(mut self, native: bool, kernel: bool) -> Result<Session> {
        let (stacks, warning) = NativeStacks::new(native, kernel, &crate::python::jit::GENERATED);
        if let Some(text) = warning {
            crate::say!("pyperf: warning: {text}");
            self.sink.warning(&RecorderWarning { pid: 0, text })?;
        }
        self.symbolizer.set_native(stacks);
        Ok(self)
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
        for fd in self.targets.exit_pidfds() {
            use std::os::fd::AsFd;
            // Without it the end is noticed at the next look (RESCAN_EVERY): not an error.
            if self.sampler.wake_on(fd.as_fd()).is_ok() {
                self.exit_fds.push(fd);
            }
        }
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
            // The scan and flush below are done at the first poll that returns after they are due, not on timers
            // of their own: while samples flow, the ring's poll wakes every POLL_EVERY anyway, and one wakeup
            // fewer matters (wakeups were most of the recorder's kernel time). Only a command's start, watched
            // closely, and the deadline are kept to the millisecond.
            let mut wake = Instant::now() + POLL_EVERY;
            // While a process has asyncio tasks, the sweep (up to `--async-rate`) and what the program learns of the
            // tasks are due every TASKS_POLL, not at the next 100 ms: the ring is taken that often anyway.
            if self.tasks.as_ref().is_some_and(Tasks::any_tasks) {
                wake = wake.min(Instant::now() + TASKS_POLL);
            }
            if waiting {
                wake = wake.min(next_scan);
            }
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            let wait = wake.saturating_duration_since(Instant::now());
            if wait < Duration::from_millis(1) {
                // The ring's poll counts whole milliseconds: a shorter wait would spin there.
                self.poll(Duration::ZERO)?;
                std::thread::sleep(wait);
            } else {
                // Whole milliseconds, rounded up, for the same reason: one wakeup, not one plus a short sleep.
                self.poll(Duration::from_millis(wait.as_micros().div_ceil(1000) as u64))?;
            }
            let now = Instant::now();
            // Whether the targets may all have ended: a pidfd said one exited, or it is time for a look. (Not after
            // every poll: that was /proc reads 50 times a second, a seventh of the recorder's CPU.)
            let mut look = self.sampler.take_woken();
            if now >= next_scan {
                let events = self.targets.scan();
                self.apply(events)?;
                self.frees.attach_due(now, &mut self.sampler);
                last_scan = now;
                look = true;
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
            if look && self.targets.all_exited() {
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
        // The end of intervals still going on: when the program stops seeing the threads.
        let end_ns = monotonic_ns();
        let followed: Vec<u32> = self.targets.followed().collect();
        for pid in followed {
            self.sampler.remove_process(pid);
        }
        // A program run that started before the stop may still be writing: give it a moment, it takes
        // microseconds. Not when every target has exited: none of theirs can be running.
        if stop != Stop::Exited {
            std::thread::sleep(Duration::from_millis(2));
        }
        let elapsed = self.started.elapsed();
        // The last thread names too: a program may name its threads after they started.
        let drained =
            self.poll(Duration::ZERO).and_then(|()| self.end_off_cpu(end_ns)).and_then(|()| self.thread_names(true));
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
                .chain(self.names.counters())
                .chain(self.traces.counters())
                .chain([("code_from_snapshots".to_string(), self.symbolizer.from_snapshots())])
                .chain(self.symbolizer.native_counters())
                .chain(self.tasks.as_ref().map_or(Vec::new(), Tasks::trailer))
                .chain(self.sources.as_ref().map_or(Vec::new(), Sources::counters))
                .chain(self.off_cpu.as_ref().map_or(Vec::new(), |o| {
                    let mut c = vec![("off_cpu_intervals".to_string(), self.sink.off_cpu_intervals())];
                    c.extend(o.counters().map(|(k, v)| (k.to_string(), v)));
                    c
                }))
                .collect(),
        };
        let native = self.symbolizer.native_counters();
        let mut summary = summary::text(&summary::Totals {
            elapsed,
            samples,
            lost: c.lost,
            truncated: self.truncated,
            lost_symbols: stats.lost_symbols,
            errors: stats.errors,
            off_cpu: self.off_cpu.is_some().then(|| summary::OffCpuTotals {
                intervals: self.sink.off_cpu_intervals(),
                sampled: c.off_cpu_sampled,
                short: c.off_cpu_short,
                lost: c.off_cpu_lost,
            }),
            native: &native,
        });
        let sink = std::mem::replace(&mut self.sink, Box::new(Finished));
        if let Some(what) = sink.finish(&stats)? {
            summary.push('\n');
            summary.push_str(&what);
        }
        if let Some(line) = self.sources.as_ref().and_then(Sources::summary) {
            summary.push('\n');
            summary.push_str(&line);
        }
        crate::say!("{summary}");
        if bpf_stats {
            let off = self.sampler.off_cpu_bpf_stats();
            for line in summary::bpf_lines(self.sampler.bpf_stats(), c.samples, &off, c.off_cpu_ended) {
                crate::say!("{line}");
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
        let Session { sampler, symbolizer, names, sink, start_ns, truncated, off_cpu, tasks, sources, traces, .. } =
            self;
        let sink: &mut dyn Sink = sink.as_mut();
        let mut tasks = tasks.as_mut();
        let mut sources = sources.as_mut();
        sampler
            .poll(timeout, &mut |s| {
                traces.saw(s.pid, s.trace);
                let (off_cpu, tasks, sources) = (off_cpu.as_mut(), tasks.as_deref_mut(), sources.as_deref_mut());
                on_sample(symbolizer, names, sink, *start_ns, truncated, off_cpu, tasks, sources, s)
            })
            .context("reading samples")?;
        for (pid, conf) in self.traces.due(Instant::now()) {
            self.sampler.set_traces(pid, Some(&conf));
        }
        self.tasks_due()?;
        self.read_sources()?;
        self.thread_names(false)
    }

    /// `--source`: reads the files the last samples named first (after the ring is taken, not in its callback) and
    /// hands them to the sink.
    fn read_sources(&mut self) -> Result<()> {
        let Some(sources) = self.sources.as_mut() else { return Ok(()) };
        let files = sources.read_due();
        if files.is_empty() {
            return Ok(());
        }
        self.sink.sources(&files)
    }

    /// `--async`: the sweep of suspended tasks when due, and what the task view has to say.
    fn tasks_due(&mut self) -> Result<()> {
        let Some(tasks) = self.tasks.as_mut() else { return Ok(()) };
        // While a followed process has tasks, its samples are read sooner (a task is named only while it lives).
        self.sampler.set_max_interval(if tasks.any_tasks() { TASKS_POLL } else { Duration::MAX });
        let now = monotonic_ns();
        if tasks.sweep_due(now) {
            let sink = &mut self.sink;
            let mut waits = tasks.sweep(&mut self.symbolizer, now, &mut |id, sym| sink.symbol(id, sym));
            for w in &mut waits {
                w.time_ns = w.time_ns.saturating_sub(self.start_ns);
            }
            if !waits.is_empty() {
                self.sink.task_waits(&waits);
            }
        }
        // The program wakes us for a task it does not know (bpf/tasks.bpf.h): it learns those we listed.
        for (pid, frame, known) in tasks.take_root_updates() {
            self.sampler.set_task_root(pid, frame, known);
        }
        for (pid, text) in tasks.take_warnings() {
            crate::say!("pyperf: warning: process {pid}: {text}");
            self.sink.warning(&RecorderWarning { pid, text })?;
        }
        Ok(())
    }

    /// Python thread names (issue #13): reads those due (a thread new in the samples; with `all`, every sampled
    /// process's, before the end) and hands the new or changed ones to the sink, stamped with the time of the read
    /// (the empty names that end one: with the time they end it from).
    fn thread_names(&mut self, all: bool) -> Result<()> {
        let start_ns = self.start_ns;
        let mut names = Vec::new();
        self.names.read(Instant::now(), all, &mut |pid, tid, name, at_ns| {
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
                    self.frees.forget(pid);
                    self.sampler.remove_process(pid);
                    self.symbolizer.remove_process(pid);
                    self.names.remove_process(pid);
                    self.traces.remove_process(pid);
                    if let Some(t) = &mut self.tasks {
                        t.remove_process(pid);
                    }
                    if let Some(o) = &mut self.off_cpu {
                        o.forget(pid);
                        self.sampler.clear_off_cpu(pid);
                    }
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
            self.names.remove_process(p.pid);
            self.traces.remove_process(p.pid);
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
        let config = bpf_config(p, ns.other_pid_ns, self.tasks.is_some())
            .with_context(|| format!("cannot profile process {}", p.pid))?;
        // Its age decides when a uprobe goes in (see `FreesPlan::config`).
        let age = crate::targets::procfs::age(p.pid).unwrap_or(Duration::ZERO);
        let config = self.frees.config(p, config, age, &mut self.sampler);
        if let Some(o) = &mut self.off_cpu {
            // Entries an earlier process of the same pid left (its end not seen) are not this one's.
            o.forget_starts(p.pid);
            self.sampler.clear_off_cpu(p.pid);
        }
        self.sampler.add_process(p.pid, &config).with_context(|| format!("cannot profile process {}", p.pid))?;
        if self.targets.per_thread_events() {
            self.sampler.follow_threads(p.pid).with_context(|| format!("cannot profile process {}", p.pid))?;
        }
        self.symbolizer.add_process(p).with_context(|| format!("cannot read the memory of process {}", p.pid))?;
        self.names.add_process(p);
        if let Some(conf) = self.traces.add_process(p) {
            self.sampler.set_traces(p.pid, Some(&conf));
        }
        if let Some(t) = &mut self.tasks {
            t.add_process(p);
        }
        if let Some(o) = &mut self.off_cpu {
            // Threads already off CPU: their intervals start now (their switch-out was before we looked).
            let target = Target { process: p.clone(), config, ns: ns.clone() };
            for (tid, entry) in o.follow(target, monotonic_ns()) {
                self.sampler.mark_off_cpu(p.pid, tid, &entry).with_context(|| format!("process {}", p.pid))?;
            }
        }
        Ok(())
    }

    /// `--off-cpu`, at the end: the followed threads still off CPU get an interval up to now, with their stack
    /// walked from user space (the program walks a thread's stack when it comes back, which these did not).
    fn end_off_cpu(&mut self, now: u64) -> Result<()> {
        let Session { sampler, symbolizer, names, sink, start_ns, off_cpu, sources, .. } = self;
        let Some(o) = off_cpu else { return Ok(()) };
        let open = sampler.open_off_cpu(&o.pids());
        let sink: &mut dyn Sink = sink.as_mut();
        o.end(open, now, &mut |ended| match ended {
            Ended::Interval(i) => write_interval(sink, *start_ns, &i),
            Ended::Walked(raw) => write_sample(symbolizer, names, sink, *start_ns, None, sources.as_mut(), &raw),
        });
        self.read_sources()
    }
}

/// The sampler is what attaches the uprobes of [`FreesPlan`].
impl Uprobes for Sampler {
    fn watch_code_frees(&mut self, pid: u32, binary: &std::path::Path, offset: u64) -> Result<(), String> {
        Sampler::watch_code_frees(self, pid, binary, offset).map_err(|e| e.to_string())
    }
    fn update_process(&mut self, pid: u32, config: &ProcConfig) -> Result<(), String> {
        self.add_process(pid, config).map_err(|e| e.to_string())
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

/// Hands the sink the native libraries the last stacks named for the first time.
fn announce_libraries(symbolizer: &mut Symbolizer, sink: &mut dyn Sink) {
    for (path, build_id) in symbolizer.take_libraries() {
        sink.library(&path, &build_id);
    }
}

/// One raw sample or off-CPU record: symbolized, counted, handed to the sink (an off-CPU record through the
/// pairing, [`crate::offcpu`]). (The session's parts one by one: the ring's callback borrows them apart from the
/// sampler, which a borrow of the whole session would not allow.)
#[allow(clippy::too_many_arguments)]
fn on_sample(
    symbolizer: &mut Symbolizer,
    names: &mut ThreadNames,
    sink: &mut dyn Sink,
    start_ns: u64,
    truncated: &mut u64,
    off_cpu: Option<&mut Pairing>,
    tasks: Option<&mut Tasks>,
    mut sources: Option<&mut Sources>,
    s: &RawSample<'_>,
) {
    if let Some(c) = &s.code {
        symbolizer.code_snapshot(s.pid, c);
        return;
    }
    match (s.off_cpu, off_cpu) {
        (None, _) => {
            // Counted as written (write_sample): a late sample once per period it stands for.
            if StackStatus::from_u8(s.status) == StackStatus::Truncated {
                *truncated += s.samples();
            }
        }
        // Records of off-CPU intervals come only when the session asked for them.
        (Some(_), None) => return,
        (Some(off), Some(o)) => match o.record(s, &off) {
            Step::Write => {}
            Step::Hold => {
                names.saw(s.pid, s.tid, s.time_ns);
                let frames = symbolizer.symbolize(s, &mut new_symbol(sink, sources.as_deref_mut(), s.pid)).to_vec();
                announce_libraries(symbolizer, sink);
                let task_frames =
                    task_view(symbolizer, sink, tasks, sources, s).map(<[u32]>::to_vec).unwrap_or_default();
                o.hold(s, &off, frames, task_frames);
                return;
            }
            Step::Ended(i) => {
                write_interval(sink, start_ns, &i);
                return;
            }
            Step::Nothing => return,
        },
    }
    write_sample(symbolizer, names, sink, start_ns, tasks, sources, s);
}

/// What a new symbol of a sample of process `pid` goes to: the sink, and with `--source` the sources (its file may be
/// new).
fn new_symbol<'a>(
    sink: &'a mut dyn Sink,
    mut sources: Option<&'a mut Sources>,
    pid: u32,
) -> impl FnMut(u32, &pyperf_format::Symbol) + 'a {
    move |id, sym| {
        if let Some(sources) = sources.as_deref_mut() {
            sources.saw(pid, sym);
        }
        sink.symbol(id, sym)
    }
}

/// The task view of the sample the symbolizer just named, if it has one.
fn task_view<'t>(
    symbolizer: &mut Symbolizer,
    sink: &mut dyn Sink,
    tasks: Option<&'t mut Tasks>,
    sources: Option<&mut Sources>,
    s: &RawSample<'_>,
) -> Option<&'t [u32]> {
    tasks?.stack(symbolizer, s, &mut new_symbol(sink, sources, s.pid))
}

/// A raw sample or whole off-CPU interval, symbolized and handed to the sink.
fn write_sample(
    symbolizer: &mut Symbolizer,
    names: &mut ThreadNames,
    sink: &mut dyn Sink,
    start_ns: u64,
    tasks: Option<&mut Tasks>,
    mut sources: Option<&mut Sources>,
    s: &RawSample<'_>,
) {
    names.saw(s.pid, s.tid, s.time_ns);
    symbolizer.symbolize(s, &mut new_symbol(sink, sources.as_deref_mut(), s.pid));
    announce_libraries(symbolizer, sink);
    let task_frames = task_view(symbolizer, sink, tasks, sources, s).unwrap_or(&[]);
    let frames = symbolizer.last_stack();
    let comm_len = s.comm.iter().position(|&c| c == 0).unwrap_or(s.comm.len());
    // (from_utf8 first: its ASCII path is much quicker than the lossy decoder's, on every sample.)
    let comm = match std::str::from_utf8(&s.comm[..comm_len]) {
        Ok(c) => std::borrow::Cow::Borrowed(c),
        Err(_) => String::from_utf8_lossy(&s.comm[..comm_len]),
    };
    let sample = Sample {
        time_ns: s.time_ns.saturating_sub(start_ns),
        cpu: s.cpu,
        pid: s.pid,
        tid: s.tid,
        comm: &comm,
        thread_state: ThreadStateMatch::from_u8(s.thread_state),
        gil: GilState::from_u8(s.gil),
        pthread_id: PthreadIdMatch::from_u8(s.pthread_id),
        status: StackStatus::from_u8(s.status),
        frames,
        tasks: task_frames,
        in_gc: s.in_gc,
        interp: s.interp.id.try_into().unwrap_or(0),
        span: crate::traces::span_of(s.trace),
        stolen: false,
    };
    let Some(off) = s.off_cpu else {
        // A sample whose timer fired late (the CPU did not run this machine: steal) stands for the periods it
        // missed, while its thread ran as the machine saw it: one sample each, where the timer would have taken
        // them, flagged as stolen (wall time, not CPU time).
        for k in (1..s.samples()).rev() {
            let time_ns = sample.time_ns.saturating_sub(k.saturating_mul(s.period_ns));
            sink.sample(&Sample { time_ns, stolen: true, ..sample });
        }
        sink.sample(&sample);
        return;
    };
    sink.off_cpu(&OffCpuSample {
        sample,
        start_ns: off.start_ns.min(s.time_ns).saturating_sub(start_ns),
        duration_ns: off.duration_ns,
        runnable_ns: off.runnable_ns.min(off.duration_ns),
        weight_ns: off.weight_ns,
        kind: OffCpuKind::from_u8(off.kind),
        syscall: off.syscall,
        flags: off.flags,
    });
}

/// Writes an interval the off-CPU pairing ended (its stack symbolized at its start).
fn write_interval(sink: &mut dyn Sink, start_ns: u64, i: &Interval) {
    sink.off_cpu(&OffCpuSample {
        sample: Sample {
            time_ns: i.end.saturating_sub(start_ns),
            cpu: i.cpu,
            pid: i.pid,
            tid: i.tid,
            comm: &i.comm,
            thread_state: i.thread_state,
            gil: i.gil,
            pthread_id: i.pthread_id,
            status: i.status,
            frames: &i.frames,
            tasks: &i.task_frames,
            in_gc: i.in_gc,
            interp: i.interp,
            span: i.span,
            stolen: false,
        },
        start_ns: i.start.saturating_sub(start_ns),
        duration_ns: i.duration_ns,
        runnable_ns: i.runnable_ns,
        weight_ns: i.weight_ns,
        kind: i.kind,
        syscall: -1,
        flags: i.flags,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that keeps each sample's time and thread.
    #[derive(Default)]
    struct Times(Vec<(u64, u32)>, Vec<bool>);

    impl Sink for Times {
        fn process(&mut self, _: &Process) -> Result<()> {
            Ok(())
        }
        fn warning(&mut self, _: &RecorderWarning) -> Result<()> {
            Ok(())
        }
        fn symbol(&mut self, _: u32, _: &pyperf_format::Symbol) {}
        fn sample(&mut self, s: &Sample<'_>) {
            self.0.push((s.time_ns, s.tid));
            self.1.push(s.stolen);
        }
        fn samples(&self) -> u64 {
            self.0.len() as u64
        }
        fn flush(&mut self) -> Result<()> {
            Ok(())
        }
        fn finish(self: Box<Self>, _: &Stats) -> Result<Option<String>> {
            Ok(None)
        }
    }

    fn raw(time_ns: u64, periods: u32) -> RawSample<'static> {
        RawSample {
            pid: 7,
            tid: 8,
            cpu: 0,
            time_ns,
            comm: [0; 16],
            thread_state: 0,
            gil: 0,
            pthread_id: 0,
            status: 0,
            frames: &[],
            locals: &[],
            kernel: &[],
            user: None,
            off_cpu: None,
            code: None,
            coro_roots: Default::default(),
            in_gc: false,
            interp: crate::sampler::InterpInfo::default(),
            trace: crate::sampler::TraceRead::None,
            periods,
            period_ns: 1_000_000,
        }
    }

    /// A sample whose timer fired 2 periods late (steal) is written as 3 samples of its thread, 1 ms apart and
    /// ending at its own time; an on-time one as itself. Truncated, it counts as 3 truncated stacks, as the file
    /// has them (the trailer's count must match the file's: tests/stacks.rs, CI under load).
    #[test]
    fn a_late_sample_stands_for_the_periods_it_missed() {
        let (mut symbolizer, mut names, mut sink) = (Symbolizer::new(), ThreadNames::default(), Times::default());
        let (start, mut truncated) = (1_000_000_000, 0);
        let truncated_status = StackStatus::Truncated.as_u8();
        for s in [raw(start + 5_000_000, 1), RawSample { status: truncated_status, ..raw(start + 9_000_000, 3) }] {
            on_sample(&mut symbolizer, &mut names, &mut sink, start, &mut truncated, None, None, None, &s);
        }
        assert_eq!(sink.0, vec![(5_000_000, 8), (7_000_000, 8), (8_000_000, 8), (9_000_000, 8)]);
        // The taken ones are CPU samples; the added ones are flagged stolen (wall time, no CPU time).
        assert_eq!(sink.1, vec![false, true, true, false]);
        assert_eq!(truncated, 3);
    }
}
