//! Where samples go. A [`Sink`] receives the processes, the symbols (each once, before its first use) and the
//! samples of a recording; the `.pyp` file ([`file::FileSink`]) is the first. A live view or a network push is
//! another sink, not a fork of the session loop; [`fanout::FanOut`] hands one recording to several.

pub mod fanout;
pub mod file;
pub mod live;
pub mod output;
pub mod push;

use anyhow::Result;
use pyperf_format::{
    GilState, OffCpuKind, Process, PthreadIdMatch, RecorderWarning, SourceFile, StackStatus, Stats, Symbol, ThreadName,
    ThreadStateMatch,
};

/// Named counters a sink adds to the recording's trailer ([`Stats::counters`]), e.g. a push's window counts.
pub type TrailerCounters = Vec<(String, u64)>;

/// One symbolized sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// Nanoseconds since the recording started (CLOCK_MONOTONIC).
    pub time_ns: u64,
    /// CPU it was taken on.
    pub cpu: u32,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Thread name.
    pub comm: &'a str,
    /// Thread-state classification.
    pub thread_state: ThreadStateMatch,
    /// GIL state.
    pub gil: GilState,
    /// pthread-id classification.
    pub pthread_id: PthreadIdMatch,
    /// Whether the stack is complete.
    pub status: StackStatus,
    /// Symbol ids ([`Sink::symbol`]), root first.
    pub frames: &'a [u32],
    /// The task view of the same sample (asyncio, [`crate::tasks`]): symbol ids root first, empty when it has none.
    pub tasks: &'a [u32],
    /// The thread was running the cyclic garbage collector (the file says so: format 1.6 sample flag `GC`).
    pub in_gc: bool,
    /// The interpreter its leaf frames run in (`PyInterpreterState.id`, format 1.8): 0 the main one, and when
    /// unknown.
    pub interp: u32,
    /// The OpenTelemetry span active on the thread ([`crate::traces`], format 1.10), if any was read.
    pub span: Option<pyperf_format::SpanLink>,
    /// Not a sample taken but a period a late one stands for: the thread ran, the CPU did not run this machine
    /// (steal; format 1.11 sample flag `STOLEN`). Wall time, not CPU time: CPU views leave it out.
    pub stolen: bool,
}

impl Sample<'_> {
    /// The stack views show: the task view when the sample has one, else the thread's.
    pub fn view(&self) -> &[u32] {
        if self.tasks.is_empty() {
            self.frames
        } else {
            self.tasks
        }
    }
}

/// One symbolized off-CPU interval (`record --off-cpu`): a thread's time away from the CPU, with the stack it
/// left with. `sample` holds the thread, states and frames as at its switch-in; its `time_ns` is the interval's
/// end.
#[derive(Debug, Clone, Copy)]
pub struct OffCpuSample<'a> {
    /// Thread, states and stack.
    pub sample: Sample<'a>,
    /// When it left, ns since the recording started.
    pub start_ns: u64,
    /// How long it stayed off CPU.
    pub duration_ns: u64,
    /// The part of that spent runnable (woken, waiting for a CPU).
    pub runnable_ns: u64,
    /// What it counts for (its length, or the minimum for a sampled short one).
    pub weight_ns: u64,
    /// Why it left.
    pub kind: OffCpuKind,
    /// System call it blocked in, -1 none.
    pub syscall: i32,
    /// `pyperf_format::off_cpu_flags`.
    pub flags: u8,
}

/// A consumer of a recording as it is taken.
pub trait Sink {
    /// A process is followed from now on (its `first_seen_ns` is relative to the recording's start).
    fn process(&mut self, p: &Process) -> Result<()>;
    /// Something whoever reads the recording should know (also said on stderr by the session).
    fn warning(&mut self, w: &RecorderWarning) -> Result<()>;
    /// Python thread names read from the processes: each new, or changed since the last one given for its thread
    /// (format 1.2's `ThreadNameChunk`). A sink that has no use for them keeps this default, which drops them.
    fn thread_names(&mut self, _names: &[ThreadName]) -> Result<()> {
        Ok(())
    }
    /// Source files of the sampled frames (`--source`, format 1.7's `SourceChunk`): each path once, stored or with
    /// why not. A sink that has no use for them keeps this default, which drops them.
    fn sources(&mut self, _files: &[SourceFile]) -> Result<()> {
        Ok(())
    }
    /// Symbol `id` is `symbol`; ids are dense and come in order, each once, before any sample uses it.
    fn symbol(&mut self, id: u32, symbol: &Symbol);
    /// A native library (`record --native`) named by the symbols from now on (their `file`), with its GNU build
    /// id (lower-case hex, empty when it has none); each once. A sink with no use for them drops them.
    fn library(&mut self, _path: &str, _build_id: &str) {}
    /// A sample. Cannot fail here (it is called from inside the ring buffer's callback): a sink keeps its first
    /// error and returns it from the next [`Sink::flush`].
    fn sample(&mut self, s: &Sample<'_>);
    /// Off-CPU intervals are recorded, shorter ones than `min_ns` sampled; called once, before any interval.
    fn start_off_cpu(&mut self, _min_ns: u64) -> Result<()> {
        Ok(())
    }
    /// An off-CPU interval ended (or was cut by the end of the recording).
    fn off_cpu(&mut self, _s: &OffCpuSample<'_>) {}
    /// Suspended asyncio tasks are swept (`--async-rate`); called once, before any [`Sink::task_waits`].
    fn start_task_waits(&mut self) -> Result<()> {
        Ok(())
    }
    /// Waits of suspended tasks one sweep found ([`crate::tasks::Wait`], times relative to the recording's start).
    fn task_waits(&mut self, _waits: &[crate::tasks::Wait]) {}
    /// Off-CPU intervals taken so far.
    fn off_cpu_intervals(&self) -> u64 {
        0
    }
    /// Samples accepted so far.
    fn samples(&self) -> u64;
    /// Hands what is buffered on (called every half second or so); returns the first error since the last one.
    fn flush(&mut self) -> Result<()>;
    /// Ends the recording with its statistics (a sink that counts samples itself puts its own count in);
    /// returns a line for the user saying what was produced, if anything.
    fn finish(self: Box<Self>, stats: &Stats) -> Result<Option<String>>;
    /// Ends a sink that runs beside the recording in a [`fanout::FanOut`] (a live view, a push), before the
    /// recording itself finishes: its line for the user and the counters it adds to the recording's trailer (a
    /// push's window counts). The default finishes it with the statistics as they are and adds none.
    fn finish_beside(self: Box<Self>, stats: &Stats) -> Result<(TrailerCounters, Option<String>)> {
        Ok((Vec::new(), self.finish(stats)?))
    }
}
