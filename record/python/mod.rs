//! Every CPython fact pyperf depends on, and nothing else.
//!
//! - [`versions`]: one [`Row`] per supported version (offsets, how threads, the GIL and frames are found, line
//!   table and instruction kinds, hidden frames, code-pointer tags, string kind) and the choice of a row for an
//!   interpreter ([`versions::select`]); nothing outside this module compares Python versions.
//! - [`layout`]: the struct offsets, one column per version; [`debug_offsets`]: the interpreter's own
//!   `_Py_DebugOffsets` (3.13+), validated and cross-checked; [`probes`]: how each offset is found in the DWARF
//!   (run by `tests/conformance.rs`).
//! - [`detect`]: finding the interpreter in a process (ELF symbols, load bias, version from the binary).
//! - [`config`]: the BPF program's per-process configuration row, built from the version's row; [`frees`]: how a
//!   process's frees of code objects are counted (the program's check-word cache).
//! - [`code`]: reading code objects (names, files, line tables) from it;
//!   [`linetable`]: decoding line tables.
//! - [`objects`]: reading `str`, `int`, `dict` and instance attributes (and the way to one, [`objects::AttrStep`])
//!   from a process's memory; [`context`]: `contextvars` contexts and their HAMTs; [`threads`]: the
//!   names of its Python threads (`threading.Thread.name`); [`walk`]: a thread's Python stack walked from user space,
//!   as the BPF program walks it (threads that never ran while recorded).
//! - [`jit`]: CPython's generated code: the names its JIT registers its code under, and the code of the perf
//!   trampolines (`-X perf`), so that native unwinding crosses them.
//! - `testing` (unit tests only): a simulated process's memory and a process record for the tests above.

pub mod asyncio;
pub mod code;
pub mod config;
pub mod context;
pub mod debug_offsets;
pub mod detect;
pub mod frees;
pub mod jit;
pub mod layout;
pub mod linetable;
pub mod objects;
pub mod probes;
#[cfg(test)]
pub(crate) mod testing;
pub mod threads;
pub mod versions;
pub mod walk;

pub use detect::{inspect, InspectError, PythonAddrs, PythonProcess};
pub use versions::{row_for, supported_versions, Row, ROWS};
