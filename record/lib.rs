//! The pyperf recorder: a BPF program walks the Python stack of the thread on the CPU at each perf event; user
//! space resolves code objects to names and lines and hands the samples to a sink (the `.pyp` file).
//!
//! Organised by concern; no module imports its caller:
//! - [`python`]: every CPython fact (per-version rows, offsets, detection, line tables, code objects).
//! - [`abi`]: the types shared with the BPF program (generated from bpf/pyperf.h).
//! - [`sampler`]: the BPF glue: skeleton, perf events, ring buffer, libbpf log.
//! - [`targets`]: which processes to follow; discovery returns events and touches nothing else.
//! - [`proc`]: every /proc file parsed once (a leaf); [`mem`]: reading another process's memory (a leaf); [`rest`]: a thread at rest read from user space (its stack,
//!   its GIL wait, its raw sample); [`offcpu`]: `--off-cpu`'s pairing of records into intervals.
//! - [`symbolizer`]: raw frames (code object addresses) to symbols, with the per-frame cache; [`threadnames`]: the
//!   Python names of the sampled threads.
//! - [`sink`]: where samples go; the `.pyp` file is the first [`sink::Sink`]; [`sources`]: `--source`, the source
//!   files of the sampled frames.
//! - [`session`]: the loop that applies target events to the sampler, symbolizer and sink; [`cli`]: the
//!   `pyperf record` arguments that set it up.
//! - [`plan`]: what `record` and `top` share: their target, sampling and push arguments, checked once, with every
//!   default, and the sampler options, targets, header, sinks and session built from them.
//! - [`top`], [`dump`]: the other front ends, over the same pieces.
//! - Leaves, which import nothing of the crate: [`clock`] (the BPF program's clock), [`header`] (the recording's
//!   header), [`summary`] (the lines said at the end), [`proc`], [`signals`], [`abi`].
//!
//! `tests/layout.rs` fails on an import cycle between files or between these rooms, and on a leaf that imports.

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

/// An error and its causes on one line (`cannot open x: permission denied`), each cause once: an error whose
/// message already ends with its cause's (thiserror's `{source}` in the message) does not repeat it.
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain().map(|e| e.to_string()) {
        if line.ends_with(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

pub mod abi;
pub mod cli;
pub mod clock;
pub mod dump;
pub mod header;
pub mod mem;
pub mod native;
pub mod offcpu;
pub mod plan;
pub mod privileges;
pub mod proc;
pub mod python;
pub mod rest;
pub mod sampler;
pub mod session;
pub mod signals;
pub mod sink;
pub mod sources;
pub mod summary;
pub mod symbolizer;
pub mod targets;
pub mod tasks;
pub mod threadnames;
pub mod top;
pub mod traces;

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("perf_event_open failed: {source}")]
    struct Repeats {
        source: std::io::Error,
    }

    #[test]
    fn error_line_says_each_cause_once() {
        let io = || std::io::Error::from_raw_os_error(libc::EINVAL);
        let e = anyhow::Error::new(Repeats { source: io() }).context("cannot start sampling");
        let line = super::error_line(&e);
        assert_eq!(line, format!("cannot start sampling: perf_event_open failed: {}", io()));
        let e = anyhow::Error::new(io()).context("cannot create x");
        assert_eq!(super::error_line(&e), format!("cannot create x: {}", io()));
    }
}
