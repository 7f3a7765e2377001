//! Offline analysis of pyperf recordings (`.pyp`): a text report, folded stacks, speedscope JSON, SVG flame graphs,
//! pprof and Firefox Profiler profiles, differential flame graphs; several recordings as one; a function's source
//! with its cost per line ([`annotate`], `pyperf annotate`).
//!
//! The library can be used without the command line:
//!
//! ```no_run
//! use pyperf_report::{folded, Filter, LoadOptions, Profile};
//!
//! let profile = Profile::open("prof.pyp".as_ref(), &LoadOptions::default())?;
//! for warning in &profile.warnings {
//!     eprintln!("warning: {warning}");
//! }
//! let mut options = folded::Options::default();
//! options.lines = false;
//! folded::write(&profile, &options, std::io::stdout().lock())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A recording is streamed chunk by chunk ([`pyperf_format::scan_records`]): memory grows with the number of unique
//! (thread, stack) pairs, not with the number of samples. The timeline exports (speedscope, Firefox Profiler) need
//! every sample in order: [`tracks`] keeps them in temporary files, not in memory.
//!
//! What the counts weigh is the profile's [`Mode`] ([`LoadOptions::mode`], `--mode`): CPU samples ([`Mode::Cpu`],
//! the default), or, for a recording made with `pyperf record --off-cpu`, nanoseconds of off-CPU intervals
//! ([`Mode::OffCpu`]) or of both ([`Mode::Wall`]: a sample weighs one sampling period). An off-CPU interval's stack
//! ends with a pseudo-frame saying why the thread was off CPU ([`names::off_cpu_frame`]: `[off-CPU: read]`).
//!
//! A recording made with `pyperf record --native` / `--kernel` (format 1.4) has native and kernel frames in its stacks,
//! named as [`names::frame_name`] says (`deflate (libz.so.1.3)`, `do_syscall_64_[k]`). Which of them the stacks keep
//! is [`LoadOptions::frames`] ([`ShowFrames`]: `--no-native`, `--no-kernel`, `--show-glue`): the others are taken
//! out of the stack table once, after reading, so that every exporter sees the stacks without them.
//!
//! A recording of asyncio programs (format 1.5) has task-view stacks: the chain of tasks awaiting one another, root
//! task first, `[task NAME]` markers between the tasks' frames ([`LoadOptions::task_view`], `--no-async` for the
//! plain thread view). In [`Mode::Wall`] the waits of suspended tasks add their time where they wait. Task names
//! that differ only by counters aggregate (`[task request-N]`, [`names::aggregate_task_name`]; `--exact-task-names`
//! keeps them), by rewriting the symbols once after reading, as frames left out are, so every exporter shows one
//! node per aggregated name.
//!
//! A sample or off-CPU interval taken in the interpreter's cyclic garbage collector (format 1.6) is counted at its
//! stack with a `[gc]` pseudo-frame ([`names::GC`]) after its Python frames, before its native and kernel frames: the
//! frame is added to the stack table once, after reading, so every exporter shows it. [`Filter::gc`] (`--gc`) hides
//! it, or keeps only such samples or none of them ([`GcMode`]).

mod cli;
mod error;
mod filter;
mod hash;
mod merge;
pub mod names;
mod output;
mod profile;
pub mod syscalls;

pub mod annotate;
pub mod diff;
pub mod flamegraph;
pub mod folded;
pub mod gecko;
pub mod otlp;
pub mod pprof;
pub mod speedscope;
pub mod text;
pub mod tracks;
pub mod tree;

pub use cli::{exit_for_clap_error, run, run_annotate, write_report, AnnotateArgs, Format, FormatFlags, ReportArgs};
pub use error::{io_reason, ReportError, Result};
pub use filter::{Filter, GcMode};
pub use output::open_regular;
pub use profile::{
    split_weight, FrameKinds, LoadOptions, Mode, OffCpuTime, ProcessInstance, Profile, ShowFrames, StackCount,
    StateCounts, TaskWaitTime, Thread, Timeline, ALL_THREADS,
};

/// Name used in messages: `pyperf-report: warning: ...`.
pub fn program() -> String {
    // `pyperf report` and `pyperf-report` share this code: name whichever the user ran.
    std::env::args_os()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_name().map(|f| f.to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("pyperf"))
        .unwrap_or_else(|| "pyperf-report".to_string())
}
