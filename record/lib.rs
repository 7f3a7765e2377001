//! The pyperf recorder: a BPF program walks the Python stack of the thread on the CPU at each perf event;
//! user space resolves code objects to names and lines and writes the samples to a `.pyp` recording.

pub mod bpf;
pub mod cli;
pub mod layouts;
pub mod linetable;
pub mod output;
pub mod process;
pub mod recorder;
pub mod signals;
pub mod symbolize;
pub mod targets;
