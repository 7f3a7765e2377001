//! A sample's whole stack as symbol ids: its Python frames (from the symbolizer) merged with its native frames
//! (`record --native`) and followed by its kernel frames (`record --kernel`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pyperf_format::{symbol_flags, Symbol};

use super::jit::GeneratedCode;
use super::kernel::KernelSymbols;
use super::merge::{self, Class, Step};
use super::unwind::{NativeUnwinder, UnwindEnd, UserRegs};
use crate::sampler::RawSample;

/// Marker frame of a sample whose native and Python walks were not merged (it keeps its Python frames).
pub const UNMERGED: &str = "[native: unmerged]";
/// Marker frame above the native frames of a sample whose stack copy ended before its first frame.
pub const TRUNCATED: &str = "[native: truncated]";
/// Marker frame of a sample that carries no copy of its user stack (the copy failed).
pub const NO_STACK: &str = "[native: no stack copy]";

/// `name` without an ELF symbol version (`__libc_start_main@@GLIBC_2.34`, `memcpy@GLIBC_2.2.5`): the function is
/// the same whichever version a caller bound to.
fn without_version(name: &str) -> &str {
    match name.find('@') {
        Some(at)
            if name[at..]
                .trim_start_matches('@')
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') =>
        {
            &name[..at]
        }
        _ => name,
    }
}

/// A native frame as seen once: its class and the symbols it is shown as.
struct Known {
    class: Class,
    name: Arc<str>,
    /// The frame's symbol id; `glue_id` the same frame marked as glue (interned on first use).
    id: Option<u32>,
    glue_id: Option<u32>,
    symbol: Symbol,
}

/// What merging needs to know of a followed process.
struct Proc {
    eval: &'static str,
}

/// Native and kernel frames of the samples of a recording.
pub struct NativeStacks {
    unwinder: Option<NativeUnwinder>,
    kernel: Option<KernelSymbols>,
    kernel_wanted: bool,
    procs: HashMap<u32, Proc>,
    /// (pid, address, is a return address) -> what it is.
    frames: HashMap<(u32, u64, bool), Known>,
    /// Kernel address -> symbol id.
    kernel_ids: HashMap<u64, u32>,
    libraries: HashSet<Arc<str>>,
    /// Libraries first named since the last [`NativeStacks::take_libraries`]: (path, build id).
    new_libraries: Vec<(String, String)>,
    addrs: Vec<u64>,
    keys: Vec<(u32, u64, bool)>,
    counts: Counts,
    /// The unwinder's [`NativeUnwinder::generation`] the names in `frames` are of.
    generation: u64,
}

#[derive(Default)]
struct Counts {
    merged: u64,
    merged_incomplete: u64,
    unmerged: u64,
    no_stack: u64,
    python_incomplete: u64,
    kernel_stacks: u64,
    kernel_frames: u64,
}

impl NativeStacks {
    /// For a recording with `native` and/or `kernel` frames. A kernel whose addresses are hidden gives a warning
    /// (kernel frames are then named `[unknown kernel]`), not an error. `code`: what is known of the interpreter's
    /// generated code (`crate::python::jit::GENERATED` for CPython).
    pub fn new(native: bool, kernel: bool, code: &'static GeneratedCode) -> (NativeStacks, Option<String>) {
        let (kernel_syms, warning) = if kernel {
            match KernelSymbols::load() {
                Ok(k) => (Some(k), None),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, None)
        };
        let stacks = NativeStacks {
            unwinder: native.then(|| NativeUnwinder::with_generated_code(code)),
            kernel: kernel_syms,
            kernel_wanted: kernel,
            procs: HashMap::new(),
            frames: HashMap::new(),
            kernel_ids: HashMap::new(),
            libraries: HashSet::new(),
            new_libraries: Vec::new(),
            addrs: Vec::with_capacity(256),
            keys: Vec::with_capacity(256),
            counts: Counts::default(),
            generation: 0,
        };
        (stacks, warning)
    }

    /// Follows process `pid`, whose evaluation loop is the function `eval` ([`crate::python::versions::EvalLoop`]).
    pub fn add_process(&mut self, pid: u32, eval: &'static str) -> std::io::Result<()> {
        self.forget(pid);
        self.procs.insert(pid, Proc { eval });
        if let Some(u) = self.unwinder.as_mut() {
            u.add_process(pid)?;
        }
        Ok(())
    }

    /// Stops following `pid` (it exited; its pid may come back as another process).
    pub fn remove_process(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.forget(pid);
        if let Some(u) = self.unwinder.as_mut() {
            u.remove_process(pid);
        }
    }

    fn forget(&mut self, pid: u32) {
        if self.frames.keys().any(|k| k.0 == pid) {
            self.frames.retain(|k, _| k.0 != pid);
        }
    }

    /// Libraries named since the last call: (path, build id), each once per recording.
    pub fn take_libraries(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.new_libraries)
    }

    /// The stack of `s`, root first, into `out`: `python` holds its Python frames' symbol ids, root first, in
    /// `activations` runs (one per activation of the evaluation loop, root first, ids per run). `intern` gives
    /// a symbol its id.
    pub fn stack(
        &mut self,
        s: &RawSample<'_>,
        python: &[u32],
        activations: &[usize],
        python_complete: bool,
        intern: &mut dyn FnMut(Symbol) -> u32,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        if self.unwinder.is_some() {
            self.merged(s, python, activations, python_complete, intern, out);
        } else {
            out.extend_from_slice(python);
        }
        if self.kernel_wanted && !s.kernel.is_empty() {
            self.counts.kernel_stacks += 1;
            // An off-CPU record's stack was taken by the program itself, from a tracepoint: its leaf frames are
            // the BPF machinery (how many depends on the kernel), not the thread's.
            let mut leaf = 0;
            if s.off_cpu.is_some() {
                while leaf < s.kernel.len() && self.is_bpf_frame(s.kernel[leaf]) {
                    leaf += 1;
                }
            }
            for &addr in s.kernel[leaf..].iter().rev() {
                let id = match self.kernel_ids.get(&addr) {
                    Some(&id) => id,
                    None => {
                        let (name, module) = match self.kernel.as_ref() {
                            Some(k) => k.symbol(addr),
                            None => ("[unknown kernel]".to_string(), "[kernel.kallsyms]".to_string()),
                        };
                        let id = intern(Symbol {
                            scope: String::new(),
                            name,
                            file: module,
                            line: 0,
                            flags: symbol_flags::KERNEL,
                        });
                        self.kernel_ids.insert(addr, id);
                        id
                    }
                };
                self.counts.kernel_frames += 1;
                out.push(id);
            }
        }
    }

    fn merged(
        &mut self,
        s: &RawSample<'_>,
        python: &[u32],
        activations: &[usize],
        python_complete: bool,
        intern: &mut dyn FnMut(Symbol) -> u32,
        out: &mut Vec<u32>,
    ) {
        let marker = |intern: &mut dyn FnMut(Symbol) -> u32, name: &str| {
            intern(Symbol {
                scope: String::new(),
                name: name.to_string(),
                file: String::new(),
                line: 0,
                flags: symbol_flags::NATIVE | symbol_flags::MARKER,
            })
        };
        let (Some(user), Some(unwinder), Some(proc)) = (s.user, self.unwinder.as_mut(), self.procs.get(&s.pid)) else {
            self.counts.no_stack += 1;
            out.extend_from_slice(python);
            out.push(marker(intern, NO_STACK));
            return;
        };
        if !python_complete {
            // A Python stack cut short cannot be paired activation by activation.
            self.counts.python_incomplete += 1;
            out.extend_from_slice(python);
            out.push(marker(intern, UNMERGED));
            return;
        }
        let eval = proc.eval;
        self.addrs.clear();
        let end = unwinder.unwind(
            s.pid,
            UserRegs { ip: user.ip, sp: user.sp, bp: user.bp },
            user.stack,
            s.time_ns,
            &mut self.addrs,
        );
        // A separate debug file came late, or new mappings: frames named before get their names from here on.
        let generation = unwinder.generation();
        if generation != self.generation {
            self.generation = generation;
            self.frames.clear();
        }
        // Root first from here on.
        self.keys.clear();
        self.keys.extend(self.addrs.iter().enumerate().rev().map(|(i, &a)| (s.pid, a, i > 0)));
        for &key in &self.keys {
            if self.frames.contains_key(&key) {
                continue;
            }
            let sym = unwinder.symbol(key.0, key.1, key.2);
            let library: &str = &sym.library;
            if !library.is_empty() && self.libraries.insert(sym.library.clone()) {
                self.new_libraries.push((library.to_string(), sym.build_id.to_string()));
            }
            let mut flags = symbol_flags::NATIVE;
            if !sym.resolved {
                flags |= symbol_flags::UNRESOLVED;
            }
            let name = without_version(&sym.name);
            // A trampoline of the interpreter's calls its loop: glue like the rest of the interpreter.
            let class = if sym.trampoline { Class::Interpreter } else { merge::classify(name, library, eval) };
            let symbol =
                Symbol { scope: String::new(), name: name.to_string(), file: library.to_string(), line: 0, flags };
            self.frames.insert(key, Known { class, name: name.into(), id: None, glue_id: None, symbol });
        }
        let classes: Vec<(Class, &str)> = self
            .keys
            .iter()
            .map(|k| {
                let f = &self.frames[k];
                (f.class, &*f.name)
            })
            .collect();
        let complete = matches!(end, UnwindEnd::Complete);
        match merge::merge(&classes, activations.len(), complete) {
            Ok(steps) => {
                drop(classes);
                if complete {
                    self.counts.merged += 1;
                } else {
                    self.counts.merged_incomplete += 1;
                }
                let mut starts = Vec::with_capacity(activations.len());
                let mut at = 0;
                for &n in activations {
                    starts.push(at);
                    at += n;
                }
                for step in steps {
                    match step {
                        Step::Python(i) => out.extend_from_slice(&python[starts[i]..starts[i] + activations[i]]),
                        Step::Truncated => out.push(marker(intern, TRUNCATED)),
                        Step::Native { index, glue } => {
                            let Some(f) = self.frames.get_mut(&self.keys[index]) else { continue };
                            let slot = if glue { &mut f.glue_id } else { &mut f.id };
                            let id = match *slot {
                                Some(id) => id,
                                None => {
                                    let mut sym = f.symbol.clone();
                                    if glue {
                                        sym.flags |= symbol_flags::GLUE;
                                    }
                                    let id = intern(sym);
                                    *slot = Some(id);
                                    id
                                }
                            };
                            out.push(id);
                        }
                    }
                }
            }
            Err(_) => {
                drop(classes);
                self.counts.unmerged += 1;
                out.extend_from_slice(python);
                out.push(marker(intern, UNMERGED));
            }
        }
    }

    /// Whether the kernel address `addr` is in the BPF machinery that runs the program (the program itself, the
    /// tracepoint's trampoline).
    fn is_bpf_frame(&self, addr: u64) -> bool {
        let Some(k) = self.kernel.as_ref() else { return false };
        let (name, _) = k.symbol(addr);
        ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"].iter().any(|p| name.starts_with(p))
    }

    /// Counters for the recording's statistics.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let c = &self.counts;
        let mut v = Vec::new();
        if self.unwinder.is_some() {
            v.extend([
                ("native_merged".to_string(), c.merged),
                ("native_merged_partial_unwind".to_string(), c.merged_incomplete),
                ("native_unmerged".to_string(), c.unmerged),
                ("native_unmerged_python_incomplete".to_string(), c.python_incomplete),
                ("native_no_stack".to_string(), c.no_stack),
            ]);
        }
        if let Some(u) = self.unwinder.as_ref() {
            v.extend(u.counters());
        }
        if self.kernel_wanted {
            v.extend([("kernel_stacks".to_string(), c.kernel_stacks), ("kernel_frames".to_string(), c.kernel_frames)]);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn symbol_versions_are_left_out() {
        assert_eq!(super::without_version("__libc_start_main@@GLIBC_2.34"), "__libc_start_main");
        assert_eq!(super::without_version("memcpy@GLIBC_2.2.5"), "memcpy");
        assert_eq!(super::without_version("operator@(int)"), "operator@(int)");
        assert_eq!(super::without_version("deflate"), "deflate");
    }
}
