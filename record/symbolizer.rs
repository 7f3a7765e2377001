//! From the frames the BPF program reports (code object addresses) to symbols: one [`CodeReader`] per followed
//! process, a per-frame cache, and a symbol table of its own.
//!
//! Symbol ids are dense, in first-seen order, and equal symbols get equal ids whatever process they came from.
//! A sink learns each symbol once, before the first sample that uses it; the symbolizer knows nothing of sinks.
//! May import the python room (code objects), native (with `--native` / `--kernel`) and the sampler's records;
//! not the session, a sink or thread names ([`crate::threadnames`]).

use std::collections::HashMap;

/// The maps looked up for every frame or sample: FxHash, not SipHash (a sample's lookups were a quarter of the
/// recorder's CPU). Their keys are pids, tids and addresses of the profiled processes' code objects.
type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// A sample's raw frames (their bytes) and their symbol ids, root first.
type CachedStack = (Box<[u8]>, Box<[u32]>);

/// Most whole stacks kept by [`Symbolizer::symbolize`] (forgotten all at once beyond: a workload with that many
/// distinct stacks gains little from them).
const MAX_CACHED_STACKS: usize = 1 << 16;

use pyperf_format::Symbol;

use crate::abi::types;
use crate::mem::ProcMem;
use crate::native::stacks::NativeStacks;
use crate::python::code::{unresolved, CodeReader, FirstLocal, Resolution, Snapshot};
use crate::python::PythonProcess;
use crate::sampler::{CodeSnap, RawSample};

/// Symbol flags of frames that are not Python code: native (glue, markers) and kernel frames.
const NOT_PYTHON: u32 = pyperf_format::symbol_flags::NATIVE | pyperf_format::symbol_flags::KERNEL;

/// `frame_ids` value of a frame the interpreter does not show (see [`Resolution::Hidden`]).
const HIDDEN: u32 = u32::MAX;

/// `enum pyperf_stack_status` values of a sample whose Python stack is whole (or empty).
const STACK_COMPLETE: u8 = types::pyperf_stack_status::STACK_STATUS_COMPLETE.0 as u8;
const STACK_IDLE: u8 = types::pyperf_stack_status::STACK_STATUS_IDLE.0 as u8;

/// What BPF read of frame `i`'s first argument, for the <= 3.10 self/cls heuristic (none on 3.11+).
fn first_local(s: &RawSample<'_>, i: usize) -> FirstLocal {
    s.locals
        .get(i)
        .map_or(FirstLocal::default(), |l| FirstLocal { object: l.first_local, type_addr: l.first_local_type })
}

/// What of a sample's interpreters its stack depends on (the boundary marker): 0 for a thread in one interpreter.
fn interp_key(s: &RawSample<'_>) -> u64 {
    if !s.interp.nested && s.interp.outer.is_none() {
        return 0;
    }
    let at = s.interp.outer.map_or(u64::from(u16::MAX), |(k, _)| k as u64);
    1 << 63 | at << 32 | (s.interp.id as u64 & 0xffff_ffff)
}

/// The `[interpreter N]` boundary's symbol (format 1.8, [`pyperf_format::symbol_flags::INTERPRETER`]).
pub fn interpreter_marker(id: u32) -> Symbol {
    Symbol {
        scope: String::new(),
        name: format!("{}{id}]", pyperf_format::symbol_flags::INTERPRETER_MARKER_PREFIX),
        file: String::new(),
        line: 0,
        flags: pyperf_format::symbol_flags::INTERPRETER,
    }
}

/// Raw frames to symbol ids.
#[derive(Default)]
pub struct Symbolizer {
    readers: FastMap<u32, CodeReader<ProcMem>>,
    /// [`CodeReader::from_snapshots`] of the processes removed.
    from_snapshots_gone: u64,
    /// (pid, code, check, instr, class) -> symbol id, or [`HIDDEN`]: the per-frame cost after the first sight
    /// is this lookup (and on <= 3.10, for frames with an argument, the class lookup of `CodeReader::class_key`).
    frame_ids: FastMap<(u32, u64, u32, u32, u64), u32>,
    symbol_ids: Interned,
    /// Whole stacks symbolized before: (pid, hash of the sample's raw frames) -> (those frames' bytes, the symbol
    /// ids). A steady workload repeats its stacks: a hash and a compare instead of a lookup per frame (the
    /// recorder's CPU per sample, issue #18). Not with native frames (merged per sample).
    stacks: FastMap<(u32, u64), CachedStack>,
    stack: Vec<u32>,
    lost_symbols: u64,
    /// The evaluation loop of each process's Python.
    evals: FastMap<u32, crate::python::versions::EvalLoop>,
    /// Frames of `stack` per activation of the evaluation loop, root first.
    activations: Vec<usize>,
    /// `record --native` / `--kernel`: the whole stack is built here.
    native: Option<NativeStacks>,
    merged: Vec<u32>,
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new() -> Symbolizer {
        Symbolizer { stack: Vec::with_capacity(1024), ..Symbolizer::default() }
    }

    /// Starts symbolizing for `p`: opens its memory (forgetting what was cached for an earlier process of the
    /// same pid).
    pub fn add_process(&mut self, p: &PythonProcess) -> std::io::Result<()> {
        let mem = ProcMem::open(p.pid, p.mapped_addr())?;
        self.frame_ids.retain(|k, _| k.0 != p.pid);
        self.readers.insert(p.pid, CodeReader::new(mem, p.row, p.addrs.code_type));
        self.evals.insert(p.pid, p.row.eval);
        if let Some(native) = self.native.as_mut() {
            native.add_process(p.pid, p.row.eval.function)?;
        }
        Ok(())
    }

    /// Stops symbolizing for a process that exited (its pid may be reused).
    pub fn remove_process(&mut self, pid: u32) {
        if let Some(r) = self.readers.remove(&pid) {
            self.from_snapshots_gone += r.from_snapshots();
        }
        self.frame_ids.retain(|k, _| k.0 != pid);
        self.stacks.retain(|k, _| k.0 != pid);
        self.evals.remove(&pid);
        if let Some(native) = self.native.as_mut() {
            native.remove_process(pid);
        }
    }

    /// Frames whose code object could not be read (shown as `[unknown code 0x...]`).
    pub fn lost_symbols(&self) -> u64 {
        self.lost_symbols
    }

    /// Keeps the program's copy of a code object of process `pid` (see [`CodeSnap`]).
    pub fn code_snapshot(&mut self, pid: u32, c: &CodeSnap<'_>) {
        let Some(reader) = self.readers.get_mut(&pid) else { return };
        let mut snap = Snapshot::default();
        for (addr, bytes) in c.regions {
            snap.add(addr, bytes);
        }
        reader.add_snapshot(c.code, c.check, snap);
    }

    /// Code objects named from the program's copies, over all processes so far.
    pub fn from_snapshots(&self) -> u64 {
        self.readers.values().map(|r| r.from_snapshots()).sum::<u64>() + self.from_snapshots_gone
    }

    /// The symbol ids of `s`'s frames, root first, hidden frames left out. A symbol seen for the first time is
    /// handed to `new_symbol` (with its id) before this returns.
    pub fn symbolize(&mut self, s: &RawSample<'_>, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> &[u32] {
        self.stack.clear();
        // SAFETY: `struct pyperf_frame` (a u64, two u32) and `struct pyperf_frame_local` (two u64) are integers
        // without padding: every byte is initialized.
        let (raw, raw_locals): (&[u8], &[u8]) = unsafe { (plain::as_bytes(s.frames), plain::as_bytes(s.locals)) };
        let raw_hash = if self.native.is_none() {
            let h = {
                use std::hash::{BuildHasher, Hasher};
                let mut h = rustc_hash::FxBuildHasher.build_hasher();
                h.write(raw);
                // <= 3.10: a frame's class comes from its first local.
                h.write(raw_locals);
                // The interpreter boundary's marker (below) depends on these too.
                h.write_u64(interp_key(s));
                h.finish()
            };
            if let Some((bytes, ids)) = self.stacks.get(&(s.pid, h)) {
                if bytes.len() == raw.len() + raw_locals.len() + 8
                    && bytes[..raw.len()] == *raw
                    && bytes[raw.len()..raw.len() + raw_locals.len()] == *raw_locals
                    && bytes[raw.len() + raw_locals.len()..] == interp_key(s).to_le_bytes()
                {
                    self.stack.extend_from_slice(ids);
                    return &self.stack;
                }
            }
            Some(h)
        } else {
            None
        };
        let mut cacheable = true;
        // Once per sample, not per frame.
        let mut reader = self.readers.get_mut(&s.pid);
        // Activations of the evaluation loop, root first, as runs of `stack` (for the merge with native frames):
        // one per frame before 3.11; from 3.11 on, one per run of frames ending (rootward) at an entry frame.
        let shared_activations = self.evals.get(&s.pid).is_some_and(|e| e.inlines_calls);
        self.activations.clear();
        // A thread inside Interpreter.exec (subinterpreters): `[interpreter N]` between the calling interpreter's
        // frames (rootward) and this one's, or at the root when those could not be read. With native frames it
        // counts as a frame of the activation of the evaluation loop it begins (the merge slices the Python frames
        // by activation), so it lands among that activation's Python frames.
        let boundary = match s.interp.nested || s.interp.outer.is_some() {
            true => {
                let id = u32::try_from(s.interp.id).unwrap_or(0);
                let marker = interpreter_marker(id);
                Some((
                    s.interp.outer.map_or(s.frames.len(), |(k, _)| k),
                    intern(&mut self.symbol_ids, marker, new_symbol),
                ))
            }
            _ => None,
        };
        // BPF walks leaf to root; sinks want root first.
        for (i, f) in s.frames.iter().enumerate().rev() {
            let first = first_local(s, i);
            let class = match reader.as_deref_mut() {
                Some(r) if first.type_addr != 0 => r.class_key(f.code, f.check, first),
                _ => 0,
            };
            if !shared_activations || f.is_entry() || self.activations.is_empty() {
                self.activations.push(0);
            }
            if let Some((k, marker)) = boundary {
                if i + 1 == k {
                    self.stack.push(marker);
                    if let Some(n) = self.activations.last_mut() {
                        *n += 1;
                    }
                }
            }
            let instr = f.instr_value();
            let key = (s.pid, f.code, f.check, instr, class);
            let id = match self.frame_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let resolved = match reader.as_deref_mut() {
                        Some(r) => r.resolve(f.code, instr, f.check, first),
                        None => Resolution::Lost,
                    };
                    match resolved {
                        Resolution::Frame(sym) => {
                            let id = intern(&mut self.symbol_ids, sym, new_symbol);
                            self.frame_ids.insert(key, id);
                            id
                        }
                        Resolution::Hidden => {
                            self.frame_ids.insert(key, HIDDEN);
                            HIDDEN
                        }
                        // An unresolved frame may resolve later (a transient read failure): don't cache it.
                        Resolution::Lost => {
                            cacheable = false;
                            self.lost_symbols += 1;
                            intern(&mut self.symbol_ids, unresolved(f.code), new_symbol)
                        }
                    }
                }
            };
            if id != HIDDEN {
                self.stack.push(id);
                if let Some(n) = self.activations.last_mut() {
                    *n += 1;
                }
            }
        }
        // No frame of this interpreter yet (a thread creating it): the boundary at the leaf. Not with native frames:
        // counted in the caller's last activation, the merge would put it above the C frames that create the
        // interpreter, not below them.
        if let Some((0, marker)) = boundary {
            if self.native.is_none() {
                self.stack.push(marker);
            }
        }
        if let Some(native) = self.native.as_mut() {
            let complete = s.status == STACK_COMPLETE || s.status == STACK_IDLE;
            let ids = &mut self.symbol_ids;
            native.stack(
                s,
                &self.stack,
                &self.activations,
                complete,
                &mut |sym| intern(ids, sym, new_symbol),
                &mut self.merged,
            );
            return &self.merged;
        }
        if let Some(h) = raw_hash.filter(|_| cacheable) {
            if self.stacks.len() >= MAX_CACHED_STACKS {
                self.stacks.clear();
            }
            let key = interp_key(s).to_le_bytes();
            self.stacks.insert((s.pid, h), ([raw, raw_locals, &key].concat().into(), self.stack.as_slice().into()));
        }
        &self.stack
    }

    /// The id of `sym` (a pseudo-frame such as a task boundary), announced to `new_symbol` when new.
    pub fn intern(&mut self, sym: Symbol, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> u32 {
        intern(&mut self.symbol_ids, sym, new_symbol)
    }

    /// The check word of the code object at `code` in process `pid`, read now (for frames user space reads itself,
    /// [`Symbolizer::live_frame`]); `None` when it is not a readable code object.
    pub fn code_check(&self, pid: u32, code: u64) -> Option<u32> {
        self.readers.get(&pid)?.live_check(code)
    }

    /// The symbol id of a frame user space read from process `pid`'s memory (a suspended coroutine's: `code`, its
    /// check word `check` from [`Symbolizer::code_check`], `None` when that failed, and `instr` as BPF reports
    /// positions), `None` for a frame the interpreter hides. A code object that cannot be read is named by address
    /// and counted lost, as in samples.
    pub fn live_frame(
        &mut self,
        pid: u32,
        code: u64,
        check: Option<u32>,
        instr: u32,
        new_symbol: &mut dyn FnMut(u32, &Symbol),
    ) -> Option<u32> {
        if let Some(check) = check {
            let key = (pid, code, check, instr, 0);
            if let Some(&id) = self.frame_ids.get(&key) {
                return (id != HIDDEN).then_some(id);
            }
            if let Some(r) = self.readers.get_mut(&pid) {
                match r.resolve(code, instr, check, FirstLocal::NONE) {
                    Resolution::Frame(sym) => {
                        let id = intern(&mut self.symbol_ids, sym, new_symbol);
                        self.frame_ids.insert(key, id);
                        return Some(id);
                    }
                    Resolution::Hidden => {
                        self.frame_ids.insert(key, HIDDEN);
                        return None;
                    }
                    Resolution::Lost => {}
                }
            }
        }
        self.lost_symbols += 1;
        Some(intern(&mut self.symbol_ids, unresolved(code), new_symbol))
    }

    /// Where frame `raw_index` of sample `s` (leaf first, as the program reports them) is in the stack
    /// [`Symbolizer::symbolize`] returned for it (root first): `None` when the interpreter hides that frame, or the
    /// native merge left the Python frames out (with `--native`, the merged stack has other frames between them).
    pub fn position_of(&self, s: &RawSample<'_>, raw_index: usize) -> Option<usize> {
        let f = s.frames.get(raw_index)?;
        let hidden = |f: &crate::abi::RawFrame| {
            self.frame_ids.get(&(s.pid, f.code, f.check, f.instr_value(), 0)) == Some(&HIDDEN)
        };
        if hidden(f) {
            return None;
        }
        // Python frames shown rootward of it.
        let rootward = s.frames.get(raw_index + 1..)?.iter().filter(|f| !hidden(f)).count();
        if self.native.is_none() {
            // The interpreter boundary's marker, rootward of the frames leafward of it.
            let marker = interp_key(s) != 0 && raw_index < s.interp.outer.map_or(s.frames.len(), |(k, _)| k);
            let rootward = rootward + usize::from(marker);
            return (rootward < self.stack.len()).then_some(rootward);
        }
        let python = |id: u32| self.symbol_ids.flags.get(id as usize).is_some_and(|&f| f & NOT_PYTHON == 0);
        self.merged.iter().enumerate().filter(|(_, &id)| python(id)).nth(rootward).map(|(i, _)| i)
    }

    /// The stack [`Symbolizer::symbolize`] returned last.
    pub fn last_stack(&self) -> &[u32] {
        if self.native.is_some() {
            &self.merged
        } else {
            &self.stack
        }
    }

    /// Adds native and/or kernel frames to every sample from now on (`record --native`, `--kernel`).
    pub fn set_native(&mut self, native: NativeStacks) {
        self.native = Some(native);
    }

    /// Native libraries first named since the last call: (path, build id).
    pub fn take_libraries(&mut self) -> Vec<(String, String)> {
        self.native.as_mut().map(NativeStacks::take_libraries).unwrap_or_default()
    }

    /// Counters of the native and kernel frames (none without them).
    pub fn native_counters(&self) -> Vec<(String, u64)> {
        self.native.as_ref().map(NativeStacks::counters).unwrap_or_default()
    }
}

/// The symbols given ids so far, and each one's flags by id.
#[derive(Default)]
struct Interned {
    ids: HashMap<Symbol, u32>,
    flags: Vec<u32>,
}

/// The id of `sym`, a new one (announced to `new_symbol`) if it was not seen before.
fn intern(ids: &mut Interned, sym: Symbol, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> u32 {
    if let Some(&id) = ids.ids.get(&sym) {
        return id;
    }
    let id = ids.ids.len() as u32;
    new_symbol(id, &sym);
    ids.flags.push(sym.flags);
    ids.ids.insert(sym, id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_symbols_share_an_id_and_are_announced_once() {
        let mut ids = Interned::default();
        let mut seen = Vec::new();
        let mut note = |id: u32, s: &Symbol| seen.push((id, s.name.clone()));
        let a = intern(&mut ids, unresolved(0x10), &mut note);
        let b = intern(&mut ids, unresolved(0x20), &mut note);
        let c = intern(&mut ids, unresolved(0x10), &mut note);
        assert_eq!((a, b, c), (0, 1, 0));
        assert_eq!(seen, vec![(0, "[unknown code 0x10]".to_string()), (1, "[unknown code 0x20]".to_string())]);
    }

    #[test]
    fn frames_of_an_unknown_process_are_lost_not_guessed() {
        let frames = [crate::abi::RawFrame { code: 0x1000, instr: 4, check: 7 }; 2];
        let s = RawSample {
            pid: 42,
            tid: 42,
            cpu: 0,
            time_ns: 0,
            comm: [0; 16],
            thread_state: 0,
            gil: 0,
            pthread_id: 0,
            status: 0,
            frames: &frames,
            locals: &[],
            kernel: &[],
            user: None,
            off_cpu: None,
            code: None,
            coro_roots: Default::default(),
            in_gc: false,
            interp: crate::sampler::InterpInfo::default(),
            trace: crate::sampler::TraceRead::None,
            periods: 1,
            period_ns: 0,
        };
        let mut sym = Symbolizer::new();
        let mut announced = 0;
        let ids = sym.symbolize(&s, &mut |_, s| {
            assert!(s.flags & pyperf_format::symbol_flags::UNRESOLVED != 0);
            announced += 1;
        });
        assert_eq!(ids, &[0, 0]);
        assert_eq!(announced, 1);
        assert_eq!(sym.lost_symbols(), 2);
    }
}
