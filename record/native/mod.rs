//! Native (C, C++, Rust) and kernel frames: unwinding from a copy of the user stack, symbols, and the merge with
//! the Python frames.
//!
//! - [`unwind`]: processes' executable mappings, DWARF unwinding of stack copies, symbol names.
//! - [`elf`]: what is read of one ELF file (segments, call frame information, function symbols, build id).
//! - [`jit`]: code generated at run time (JIT compilers), registered through GDB's JIT interface or not.
//! - [`kernel`]: kernel frames' names from `/proc/kallsyms`.
//! - [`merge`]: native and Python frames into one stack; [`stacks`]: a sample's whole stack as symbol ids.

pub mod elf;
pub mod jit;
pub mod kernel;
pub mod merge;
pub mod stacks;
pub mod unwind;

pub use kernel::{KernelSymbols, KernelSymbolsError};
pub use unwind::{NativeSymbol, NativeUnwinder, UnwindEnd, UserRegs};
