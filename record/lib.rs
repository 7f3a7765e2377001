//! The pyperf recorder: a BPF program walks the Python stack of the thread on the CPU at each perf event; user
//! space resolves code objects to names and lines and hands the samples to a sink (the `.pyp` file).
//!
//! Organised by concern; no module imports its caller:
//! - [`python`]: every CPython fact (per-version rows, offsets, detection, line tables, code objects).
//! - [`abi`]: the types shared with the BPF program (generated from bpf/pyperf.h).
//! - [`sampler`]: the BPF glue: skeleton, perf events, ring buffer, libbpf log.
//! - [`targets`]: which processes to follow; discovery returns events and touches nothing else.
//! - [`symbolizer`]: raw frames (code object addresses) to symbols, with the per-frame cache.
//! - [`sink`]: where samples go; the `.pyp` file is the first [`sink::Sink`].
//! - [`session`]: the loop that applies target events to the sampler, symbolizer and sink; [`cli`]: the
//!   `pyperf record` arguments that set it up.

/// `eprintln!` that never panics: a closed or failing stderr must not cost the recording (`eprintln!` panics when
/// the write fails).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see [`say!`]).
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut err = std::io::stderr();
        let _ = write!(err, $($arg)*);
        let _ = err.flush();
    }};
}

pub mod abi;
pub mod cli;
pub mod privileges;
pub mod python;
pub mod sampler;
pub mod session;
pub mod signals;
pub mod sink;
pub mod symbolizer;
pub mod targets;
