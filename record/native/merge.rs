//! One stack from two walks: the Python frames the BPF program read from the interpreter's frame chain, and the
//! native frames unwound from the copy of the thread's C stack. Each activation of the interpreter's evaluation
//! loop in the native stack is replaced by the Python frames it was running, in order.
//!
//! The two walks were taken at the same instant (the thread was stopped in the kernel for both), so they describe
//! one stack, but they can still disagree for a few instructions: between entering the evaluation function and
//! linking its first frame, or between unlinking the last frame and returning. Such a sample has one activation
//! more on one side. The merge then refuses ([`Unmerged`]): the sample keeps its Python frames with a marker,
//! and is counted. It never pairs activations by guesswork.

/// What a native frame is to the merge, from its symbol and the file it lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// An activation of the evaluation loop (`_PyEval_EvalFrameDefault`, 2.7's `PyEval_EvalFrameEx`, or one of
    /// their `.cold` parts): replaced by its Python frames.
    Eval,
    /// An opcode handler of a tail-calling interpreter build (`_TAIL_CALL_*`, 3.14+ built with clang): part of the
    /// activation the next [`Class::Eval`] rootward is.
    Handler,
    /// Any other function of the interpreter (the executable or libpython).
    Interpreter,
    /// A function of the C library or the dynamic loader: shown, except above the first Python frame, where it
    /// starts the program or a thread (also when stripped, as `libc.so.6+0x29f40`).
    System,
    /// Functions of anything else: C extensions, libc, other libraries.
    Other,
}

/// The classes of frames that start a thread or a program: hidden, like the interpreter's glue, above the first
/// Python frame.
const STARTUP: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_main_alias_2",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
];

/// `name` without a GCC clone suffix (`.cold`, `.part.3`, `.isra.0`, `.constprop.0`, `.lto_priv.0`).
fn base_name(name: &str) -> &str {
    name.split_once('.').map_or(name, |(base, _)| base)
}

/// The class of a native frame named `name` lying in `file` (as mapped), for an interpreter whose loop is `eval`.
pub fn classify(name: &str, file: &str, eval: &str) -> Class {
    let base = base_name(name);
    let in_interpreter = is_interpreter_file(file);
    if file == pyperf_format::symbol_flags::JIT_FILE {
        // Generated code, whatever it was registered as (a trampoline the unwinder recognised is glue: the caller
        // knows it from the unwinder, not from a name).
        Class::Other
    } else if base == eval {
        Class::Eval
    } else if in_interpreter && base.starts_with("_TAIL_CALL_") {
        Class::Handler
    } else if in_interpreter {
        Class::Interpreter
    } else if is_system_file(file) {
        Class::System
    } else {
        Class::Other
    }
}

/// Whether a file (as mapped) is the C library or the dynamic loader.
fn is_system_file(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    ["libc.so", "libc-", "ld-linux", "ld64.so", "libpthread"].iter().any(|p| base.starts_with(p))
}

/// Whether a file (as mapped) is the interpreter: the executable `python*` or `libpython*`.
pub fn is_interpreter_file(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("python") || base.starts_with("libpython")
}

/// Whether a function starts programs or threads.
fn is_startup(name: &str) -> bool {
    STARTUP.contains(&base_name(name))
}

/// One frame of a merged stack, root first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The Python frames of activation `i` (root first, as counted in the `activations` given to [`merge`]).
    Python(usize),
    /// Native frame `i` (index into the root-first native frames given), `glue`: interpreter-internal (or
    /// program and thread start-up), hidden unless asked for.
    Native {
        /// Index of the frame.
        index: usize,
        /// Shown only on request.
        glue: bool,
    },
    /// The native frames above here were not unwound (the stack copy ended): a marker frame.
    Truncated,
}

/// Why two walks were not merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmerged {
    /// The native stack holds `native` activations of the evaluation loop, the Python stack `python`.
    Count {
        /// Activations in the native stack.
        native: usize,
        /// Activations in the Python stack.
        python: usize,
    },
}

/// The merged stack, root first, of the native frames `native` (root first, by class; each with its symbol name)
/// and `activations` Python activations (root first). `complete`: the unwinding reached the thread's first frame.
///
/// The counts of activations must agree. One exception: an unwinding that stopped early (its copy of the stack
/// ended) holds only the leafmost activations. Those pair with the leafmost Python activations as long as the
/// thread was not entering or leaving one, which it can only be while its innermost native frame is the loop
/// itself; the Python activations above are put above a [`Step::Truncated`] marker.
pub fn merge(native: &[(Class, &str)], activations: usize, complete: bool) -> Result<Vec<Step>, Unmerged> {
    let evals = native.iter().filter(|(c, _)| *c == Class::Eval).count();
    let leaf_in_loop = native.last().is_some_and(|(c, _)| matches!(c, Class::Eval | Class::Handler));
    let above = if evals == activations {
        0
    } else if !complete && evals < activations && !leaf_in_loop {
        activations - evals
    } else {
        return Err(Unmerged::Count { native: evals, python: activations });
    };
    let mut out = Vec::with_capacity(native.len() + activations + 1);
    out.extend((0..above).map(Step::Python));
    // Python frames above a cut unwinding, or a thread without Python frames whose unwinding stopped early (in code
    // without unwind rules): what is rootward is missing, and said so.
    if above > 0 || (activations == 0 && !complete && !native.is_empty()) {
        out.push(Step::Truncated);
    }
    let mut seen = 0;
    let mut after_eval = false;
    for (index, &(class, name)) in native.iter().enumerate() {
        match class {
            Class::Eval => {
                out.push(Step::Python(above + seen));
                seen += 1;
                after_eval = true;
                continue;
            }
            // The handler an activation is in: the activation, already shown as its Python frames.
            Class::Handler if after_eval => continue,
            _ => {}
        }
        after_eval = false;
        let glue = if activations == 0 {
            // No Python frame to place: the native stack as it is (a thread in C code).
            false
        } else if seen == 0 && above == 0 {
            // Above the first Python frame: main, thread start, the interpreter's start-up.
            class != Class::Other || is_startup(name)
        } else if class == Class::System {
            false
        } else {
            // The interpreter's own functions, between Python frames and below the last: calls, attribute
            // lookups, arithmetic of Python code. Hidden, a pure Python stack stays what it is without --native;
            // C extensions and libraries are what the user asked to see.
            class != Class::Other
        };
        out.push(Step::Native { index, glue });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVAL: &str = "_PyEval_EvalFrameDefault";

    fn frames(spec: &[&'static str]) -> Vec<(Class, &'static str)> {
        // "lib:name" for a non-interpreter frame, "name" for the interpreter's.
        spec.iter()
            .map(|s| match s.split_once(':') {
                Some((lib, name)) => (classify(name, &format!("/usr/lib/{lib}.so.1"), EVAL), name),
                None => (classify(s, "/usr/lib/libpython3.12.so.1.0", EVAL), *s),
            })
            .collect()
    }

    fn shown(steps: &[Step], native: &[(Class, &str)]) -> Vec<String> {
        steps
            .iter()
            .filter_map(|s| match *s {
                Step::Python(i) => Some(format!("py{i}")),
                Step::Native { index, glue: false } => Some(native[index].1.to_string()),
                Step::Native { glue: true, .. } => None,
                Step::Truncated => Some("[truncated]".to_string()),
            })
            .collect()
    }

    /// 3.11+: one activation runs several Python frames; a C extension calls back into Python; zlib at the leaf.
    #[test]
    fn activations_are_replaced_in_order_and_glue_hidden() {
        let native = frames(&[
            "libc:_start",
            "libc:__libc_start_main",
            "main",
            "Py_BytesMain",
            "pymain_run_file",
            "_PyEval_EvalFrameDefault",
            "_PyObject_Vectorcall",
            "cfunction_call",
            "ext:call_back",
            "PyObject_CallObject",
            "_PyFunction_Vectorcall",
            "_PyEval_EvalFrameDefault",
            "cfunction_vectorcall_O",
            "zlib_compress_impl",
            "libz:deflate",
            "libz:deflate_slow",
        ]);
        let steps = merge(&native, 2, true).expect("merges");
        assert_eq!(shown(&steps, &native), ["py0", "call_back", "py1", "deflate", "deflate_slow"]);
        // Every native frame is in the result, glue marked, evaluation frames replaced.
        let natives = steps.iter().filter(|s| matches!(s, Step::Native { .. })).count();
        assert_eq!(natives + 2, native.len());
    }

    /// The interpreter's own functions below the last Python frame are glue too (a pure Python stack stays as
    /// it is); a library they call is shown.
    #[test]
    fn the_interpreter_at_the_leaf_is_glue_a_library_is_not() {
        let native = frames(&["_PyEval_EvalFrameDefault", "_PyObject_MakeTpCall", "list_sort", "libc:memcmp"]);
        let steps = merge(&native, 1, true).expect("merges");
        assert_eq!(shown(&steps, &native), ["py0", "memcmp"]);
        let native = frames(&["_PyEval_EvalFrameDefault", "long_add"]);
        assert_eq!(shown(&merge(&native, 1, true).expect("merges"), &native), ["py0"]);
    }

    #[test]
    fn counts_that_differ_are_refused() {
        let native = frames(&["main", "_PyEval_EvalFrameDefault", "x", "_PyEval_EvalFrameDefault"]);
        assert_eq!(merge(&native, 1, true), Err(Unmerged::Count { native: 2, python: 1 }));
        assert_eq!(merge(&native, 3, true), Err(Unmerged::Count { native: 2, python: 3 }));
    }

    #[test]
    fn cold_parts_and_tail_call_handlers_belong_to_their_activation() {
        let native = frames(&["_PyEval_EvalFrameDefault", "_TAIL_CALL_BINARY_OP", "PyNumber_Add"]);
        let steps = merge(&native, 1, true).expect("merges");
        assert_eq!(steps, [Step::Python(0), Step::Native { index: 2, glue: true }]);
        let native = frames(&["_PyEval_EvalFrameDefault.cold"]);
        assert_eq!(merge(&native, 1, true), Ok(vec![Step::Python(0)]));
        // 2.7's loop (the rows say which function each version's loop is).
        let eval_of = |major, minor| crate::python::versions::row_for(major, minor).map_or("", |r| r.eval.function);
        assert_eq!(classify("PyEval_EvalFrameEx", "/usr/bin/python2.7", eval_of(2, 7)), Class::Eval);
        assert_eq!(classify("PyEval_EvalFrameEx", "/usr/bin/python3.6", eval_of(3, 6)), Class::Interpreter);
        assert_eq!(classify("libc.so.6+0x29f40", "/usr/lib/x86_64-linux-gnu/libc.so.6", "x"), Class::System);
    }

    /// A copy that ended early pairs its activations with the leafmost Python ones, unless the thread was in the
    /// loop itself (it may be entering or leaving an activation).
    #[test]
    fn a_cut_unwinding_merges_at_the_leaf_only_outside_the_loop() {
        let native = frames(&["_PyEval_EvalFrameDefault", "call_function", "_PyEval_EvalFrameDefault", "libz:deflate"]);
        let steps = merge(&native, 4, false).expect("merges");
        assert_eq!(steps[..3], [Step::Python(0), Step::Python(1), Step::Truncated]);
        assert_eq!(shown(&steps, &native), ["py0", "py1", "[truncated]", "py2", "py3", "deflate"]);
        assert!(merge(&native, 4, true).is_err(), "a complete unwinding must agree");
        let native = frames(&["_PyEval_EvalFrameDefault", "call_function", "_PyEval_EvalFrameDefault"]);
        assert!(merge(&native, 3, false).is_err(), "the leaf is in the loop");
        assert!(merge(&native, 1, false).is_err(), "more native activations than Python ones");
    }

    /// The C library starts programs and threads (stripped, it has no names for it): hidden above the first Python
    /// frame, shown below it.
    #[test]
    fn the_c_library_is_start_up_above_python_only() {
        let native = frames(&["libc:libc.so.6+0x29f40", "main", "_PyEval_EvalFrameDefault", "libc:__read"]);
        assert_eq!(shown(&merge(&native, 1, true).expect("merges"), &native), ["py0", "__read"]);
    }

    #[test]
    fn a_thread_in_c_code_shows_its_native_stack() {
        let native = frames(&["libc:clone3", "libc:start_thread", "ext:worker", "libc:read"]);
        let steps = merge(&native, 0, true).expect("merges");
        assert_eq!(shown(&steps, &native), ["clone3", "start_thread", "worker", "read"]);
        // Its unwinding stopped early (JIT code with no rules at the leaf): marked, not shown as a whole stack.
        let native = frames(&["jit:[jit]"]);
        assert_eq!(shown(&merge(&native, 0, false).expect("merges"), &native), ["[truncated]", "[jit]"]);
    }

    #[test]
    fn interpreter_files() {
        assert!(is_interpreter_file("/usr/bin/python3.11"));
        assert!(is_interpreter_file("/root/.pyenv/versions/3.12.7/lib/libpython3.12.so.1.0"));
        assert!(!is_interpreter_file("/usr/lib/python3.11/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so"));
        assert!(!is_interpreter_file("/usr/lib/x86_64-linux-gnu/libz.so.1"));
    }
}
