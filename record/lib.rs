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
