//! Where samples go. A [`Sink`] receives the processes, the symbols (each once, before its first use) and the
//! samples of a recording; the `.pyp` file ([`file::FileSink`]) is the first. A live view or a network push is
//! another sink, not a fork of the session loop.

pub mod file;
pub mod output;

use anyhow::Result;
use pyperf_format::{
    GilState, Process, PthreadIdMatch, RecorderWarning, StackStatus, Stats, Symbol, ThreadName, ThreadStateMatch,
};

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
    /// Symbol `id` is `symbol`; ids are dense and come in order, each once, before any sample uses it.
    fn symbol(&mut self, id: u32, symbol: &Symbol);
    /// A sample. Cannot fail here (it is called from inside the ring buffer's callback): a sink keeps its first
    /// error and returns it from the next [`Sink::flush`].
    fn sample(&mut self, s: &Sample<'_>);
    /// Samples accepted so far.
    fn samples(&self) -> u64;
    /// Hands what is buffered on (called every half second or so); returns the first error since the last one.
    fn flush(&mut self) -> Result<()>;
    /// Ends the recording with its statistics (a sink that counts samples itself puts its own count in);
    /// returns a line for the user saying what was produced, if anything.
    fn finish(self: Box<Self>, stats: &Stats) -> Result<Option<String>>;
}
