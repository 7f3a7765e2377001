//! CPython's generated code: the names its JIT registers executors under (3.15, GDB's JIT interface), and its perf
//! trampolines.
//!
//! The perf trampolines (`-X perf`, `-X perf_jit`, `PYTHONPERFSUPPORT=1`; 3.12+ on x86-64 Linux): a copy of
//! a few instructions per code object, in anonymous executable memory, through which the interpreter calls its
//! evaluation function so that `perf` sees one symbol per Python function. They have no call frame information.
//!
//! Their code is two fixed shapes (`Python/asm_trampoline.S`), whose frame at the return site (right after
//! `call *%rcx`) is fully known: the caller's stack pointer is 16 bytes up, the return address 8 bytes up, and the
//! shape that pushes rbp saved it at the stack pointer. A return address in generated code is taken for a
//! trampoline's only when the bytes around it, read from the process, are exactly one of these shapes: the code is
//! checked, never assumed.

use crate::native::jit::{GeneratedCode, TrampolineShape};

/// CPython's generated code, as the native unwinder needs to know it.
pub const GENERATED: GeneratedCode = GeneratedCode {
    // How the names CPython 3.15 registers its JIT code under start (`py::jit:executor`): shown as `[jit]`.
    symbol_prefix: "py::jit",
    trampolines: &SHAPES,
    // Interpreter glue: the Python frame the trampoline calls is shown instead.
    trampoline_name: "[perf trampoline]",
};

/// The trampoline's shapes: 3.12-3.14 (`sub $8,%rsp; call *%rcx | add $8,%rsp; ret`) and 3.15 (`push %rbp; mov
/// %rsp,%rbp; call *%rcx | pop %rbp; ret`). An `endbr64` may come first; it does not change the frame. At the return
/// site the caller's stack pointer is 16 bytes up in both.
const SHAPES: [TrampolineShape; 2] = [
    TrampolineShape {
        before: &[0x48, 0x83, 0xec, 0x08, 0xff, 0xd1],
        after: &[0x48, 0x83, 0xc4, 0x08, 0xc3],
        saves_bp: false,
        frame_size: 16,
    },
    TrampolineShape {
        before: &[0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1],
        after: &[0x5d, 0xc3],
        saves_bp: true,
        frame_size: 16,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_are_known_by_their_bytes_only() {
        // 3.12's libpython `_Py_trampoline_func_start`, return site after `ff d1`.
        let t312 = [0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3];
        let shape_at = |code: &[u8]| GENERATED.shape_at(code).map(|i| &SHAPES[i]);
        assert_eq!(shape_at(&t312).map(|s| s.saves_bp), Some(false));
        // 3.15's, with endbr64 first: the bytes before the site are the last six of the prologue.
        let t315 = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xff, 0xd1, 0x5d, 0xc3, 0xcc, 0xcc, 0xcc];
        assert_eq!(shape_at(&t315[4..]).map(|s| s.saves_bp), Some(true));
        // Any other bytes, or too few: not a trampoline.
        let mut other = t312;
        other[5] = 0xd0; // call *%rax
        assert_eq!(shape_at(&other), None);
        assert_eq!(shape_at(&t312[..8]), None);
        assert_eq!(shape_at(&[]), None);
    }
}
