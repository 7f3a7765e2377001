//! Naming a process's Python threads: `threading.Thread.name` ("MainThread", "worker-1"), read from the process's
//! memory as py-spy does, on every supported version (not on a Python newer than pyperf knows: its row has no
//! [`super::versions::ThreadNames`]).
//!
//! For each interpreter (the list from `interp_head` or `_PyRuntime.interpreters.head`): `sys.modules` (its
//! `modules` / `imports.modules`), the `threading` module's dict, its `_active` dict (ident -> `Thread`, every thread
//! `threading` started or adopted and that has not ended), and per `Thread` its attributes (wherever the version
//! keeps them: [`super::versions::InstanceDicts`]) for the name (`_name`; `_Thread__name` on 2.7). The kernel thread
//! id ([`super::versions::ThreadTids`]):
//! - 3.8+: `Thread._native_id`, which the thread set from `gettid()` when it started;
//! - 2.7-3.7: the ident is `pthread_self()`, the address of glibc's `struct pthread`, which holds the tid at an offset
//!   that is found by verification, never assumed: a candidate offset is used only once the main thread's
//!   `struct pthread` (`_MainThread`'s ident, checked to be a thread control block: its `header.self` points to
//!   itself) holds the process's own pid there, and only while every thread read holds a distinct tid there, non-zero
//!   and below `PID_MAX_LIMIT` (in a PID namespace the pid is often 1, which many a field holds); until then, and for
//!   an ident that is not a control block, the tid is unknown and the thread gets no name.
//!
//! An `_active` entry names a thread only while the interpreter has a thread state for it: one whose `thread_id` is
//! the entry's ident and, 3.11+ (where thread states have a `native_thread_id`), whose kernel tid is the `Thread`'s.
//! That drops stale entries: `threading` never removes a `_DummyThread` (what `current_thread()` makes for a thread it
//! did not start; 2.7-3.12) when its thread ends, and a new thread may get its ident (glibc reuses `struct pthread`s)
//! or its tid. On 2.7-3.7 nothing ties a dummy to its kernel thread (its tid is read from the `struct pthread`, which
//! a new thread may own by now): dummies get no name there. A dummy whose ident and tid both went to one new thread
//! cannot be told from a live one here; the caller refuses a `Thread` object's name for a thread other than the one
//! it first named ([`NamedThread::object`]).
//!
//! The tids are those of the process's own PID namespace (what `gettid()` returns inside it); the caller maps them to
//! host tids and checks that each is a thread of the process.
//!
//! Reads are bounded: interpreters, thread states, `_active` entries ([`MAX_THREADS`]), a `Thread`'s attributes
//! ([`MAX_INSTANCE_ENTRIES`]), a name's 256 bytes, and the work of one read as a whole ([`READ_BUDGET`]; spent, the
//! read fails). A `Thread` object that `_active` holds under two idents is not read (neither entry can be right). And
//! they are checked for concurrent change: a thread's attributes are read again after its name and tid, `_active`
//! after all of them; a change drops the thread (or retries the pass once), so that a torn read gives no name, never a
//! wrong one.

use std::collections::{HashMap, HashSet};

use super::layout::Layout;
use super::objects::{at, u64_in, Budget, Dict, Metered, Objects, MAX_DICT_ENTRIES, MAX_INSTANCE_ENTRIES};
use super::versions::{Interpreters, Row, ThreadNames, ThreadTids, MAIN_THREAD_TYPE, NATIVE_ID_ATTR};
use super::PythonAddrs;
use crate::mem::ReadMem;

/// Longest thread name kept, in bytes; a longer one is cut on a character boundary.
pub const MAX_THREAD_NAME_BYTES: usize = 256;
/// Most threads named per interpreter (`_active` entries read).
pub const MAX_THREADS: usize = 1024;
/// Most interpreters (main and subinterpreters) looked at.
const MAX_INTERPRETERS: usize = 16;
/// Most thread states walked per interpreter (threads `threading` does not know have one too); a longer list is not
/// read.
const MAX_THREAD_STATES: usize = 4096;
/// The work one read may do: 8 MiB read, in at most 49 152 reads and dict keys compared (50-100 ms at 1-2 us a
/// read). About three times what naming [`MAX_THREADS`] threads costs (some 15 reads and 2 KiB each); spent, the read
/// fails: a hostile process's objects cost at most this to look at.
pub const READ_BUDGET: Budget = Budget { bytes: 8 << 20, ops: 48 << 10 };
/// `PID_MAX_LIMIT` of 64-bit Linux: every tid is below it.
pub(crate) const PID_MAX_LIMIT: u64 = 1 << 22;
/// Where glibc's `struct pthread` (x86-64) may keep `tid`: after the 704-byte `tcbhead_t` and the 16-byte `list`.
/// Only a candidate: [`ThreadNameReader`] uses it once the main thread confirmed it.
pub(crate) const PTHREAD_TID_CANDIDATES: &[u64] = &[0x2d0];
/// `tcbhead_t.self` (glibc x86-64): the control block's own address, at this offset of `struct pthread`.
pub(crate) const TCB_SELF: u64 = 16;
/// The type name of what `threading.current_thread()` makes for a thread `threading` did not start.
const DUMMY_THREAD_TYPE: &str = "_DummyThread";

/// A named thread, by its tid in the process's own PID namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedThread {
    /// `gettid()` of the thread, inside the process's PID namespace.
    pub ns_tid: u32,
    /// Its name, at most [`MAX_THREAD_NAME_BYTES`].
    pub name: String,
    /// The address of its `Thread` object: one object stands for one kernel thread for its whole life (a stale one
    /// may outlive it).
    pub object: u64,
}

/// Why a process's thread names could not be read (none of them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThreadNamesError {
    /// No interpreter has imported `threading` (yet).
    #[error("the threading module is not imported")]
    NotImported,
    /// Some object on the way could not be read or was not what it should be.
    #[error("cannot read {0}")]
    Unreadable(&'static str),
    /// `threading._active` changed while it was read, twice in a row.
    #[error("threading._active kept changing while it was read")]
    Changing,
    /// The read needed more work than [`READ_BUDGET`] allows.
    #[error("reading the thread names needed more than its budget of work")]
    TooMuchWork,
}

/// Reads the thread names of one process.
pub struct ThreadNameReader<M> {
    mem: M,
    row: &'static Row,
    /// Address of the pointer to the first interpreter.
    interp_head: Option<u64>,
    state: State,
}

/// What a reader keeps from one read to the next.
#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// The `struct pthread` offset of `tid`, once the main thread confirmed it (2.7-3.7).
    pthread_tid: Option<u64>,
    /// Where each key was found last time ([`Objects::lookup_hinted`]).
    hints: Hints,
}

/// Positions of keys in the dicts read, from the pass before.
#[derive(Debug, Default, Clone, Copy)]
struct Hints {
    threading: Option<usize>,
    active: Option<usize>,
    name: Option<usize>,
    native_id: Option<usize>,
}

impl<M: ReadMem> ThreadNameReader<M> {
    /// A reader of the threads of a process whose interpreter `row` describes, at the addresses `addrs`.
    pub fn new(mem: M, row: &'static Row, addrs: &PythonAddrs) -> Self {
        let interp_head = match row.interpreters {
            Interpreters::InterpHead => addrs.interp_head,
            Interpreters::Runtime => addrs.runtime.and_then(|rt| at(rt, row.layout.runtime_interpreters_head)),
        };
        ThreadNameReader { mem, row, interp_head, state: State::default() }
    }

    /// The names of the process's threads now. `ns_pid` is the process's pid in its own PID namespace (its main
    /// thread's tid there). Threads whose name or tid could not be read consistently are left out.
    pub fn read(&mut self, ns_pid: u32) -> Result<Vec<NamedThread>, ThreadNamesError> {
        let names = self.row.thread_names.ok_or(ThreadNamesError::Unreadable("the threads of this version"))?;
        // One budget for the read, the retry included.
        let mem = Metered::new(&self.mem, READ_BUDGET);
        let (row, head) = (self.row, self.interp_head);
        let named = match pass(&mem, row, names, head, &mut self.state, ns_pid) {
            Err(ThreadNamesError::Changing) => pass(&mem, row, names, head, &mut self.state, ns_pid),
            other => other,
        };
        if mem.exhausted() {
            return Err(ThreadNamesError::TooMuchWork);
        }
        let mut named = named?;
        // A tid named twice differently (two interpreters, a stale entry): neither name is trusted.
        let mut by_tid: HashMap<u32, Option<&str>> = HashMap::new();
        for n in &named {
            by_tid
                .entry(n.ns_tid)
                .and_modify(|known| {
                    if *known != Some(n.name.as_str()) {
                        *known = None;
                    }
                })
                .or_insert(Some(n.name.as_str()));
        }
        let trusted: HashSet<u32> = by_tid.into_iter().filter(|(_, n)| n.is_some()).map(|(t, _)| t).collect();
        let mut kept = HashSet::new();
        named.retain(|n| trusted.contains(&n.ns_tid) && kept.insert(n.ns_tid));
        Ok(named)
    }
}

/// One pass over the interpreters of the process behind `mem`.
fn pass<M: ReadMem>(
    mem: &M,
    row: &'static Row,
    names: ThreadNames,
    interp_head: Option<u64>,
    state: &mut State,
    ns_pid: u32,
) -> Result<Vec<NamedThread>, ThreadNamesError> {
    use ThreadNamesError::{Changing, NotImported, Unreadable};
    let l = row.layout;
    let mut objs = Objects::new(mem, row);
    let head = interp_head.ok_or(Unreadable("the interpreter list"))?;
    let mut interp = objs.u64_at(head).ok_or(Unreadable("the interpreter list"))?;
    let mut out = Vec::new();
    let mut imported = false;
    for _ in 0..MAX_INTERPRETERS {
        if interp == 0 {
            break;
        }
        let next = at(interp, l.interp_next).and_then(|a| objs.u64_at(a)).ok_or(Unreadable("the interpreter list"))?;
        let modules = at(interp, l.interp_modules).and_then(|a| objs.u64_at(a)).and_then(|m| objs.dict(m));
        let hints = &mut state.hints;
        let threading = modules.as_ref().and_then(|m| objs.lookup_hinted(m, "threading", &mut hints.threading));
        if let Some(threading) = threading {
            imported = true;
            let globals =
                objs.attributes(threading, MAX_DICT_ENTRIES).ok_or(Unreadable("the threading module's dict"))?;
            let active =
                objs.lookup_hinted(&globals, "_active", &mut hints.active).ok_or(Unreadable("threading._active"))?;
            let active = objs.dict(active).ok_or(Unreadable("threading._active"))?;
            let tstates = thread_states(&objs, l, interp).ok_or(Unreadable("the thread states"))?;
            let named = names_of(&mut objs, names, state, &active, &tstates, ns_pid);
            if !objs.unchanged(&active) {
                return Err(Changing);
            }
            out.extend(named);
        }
        interp = next;
    }
    if !imported {
        return Err(NotImported);
    }
    Ok(out)
}

/// The thread states of interpreter `interp`, by `thread_id` (the thread's `pthread_self()`, a `threading` ident):
/// their `native_thread_id` (3.11+; 0 before, or while unknown), `None` for an ident two of them share with different
/// ones. `None` when the list cannot be read to its end (unreadable, or longer than [`MAX_THREAD_STATES`]).
fn thread_states<M: ReadMem>(objs: &Objects<'_, M>, l: &Layout, interp: u64) -> Option<HashMap<u64, Option<u64>>> {
    let mut tstate = objs.u64_at(at(interp, l.interp_tstate_head)?)?;
    let fields = [l.tstate_next, l.tstate_thread_id, l.tstate_native_thread_id];
    let lo = fields.iter().copied().filter(|&o| o >= 0).min()?;
    let hi = fields.iter().copied().max()?.checked_add(8)?;
    let field = |o: i32| o.checked_sub(lo);
    let mut out: HashMap<u64, Option<u64>> = HashMap::new();
    for _ in 0..MAX_THREAD_STATES {
        if tstate == 0 {
            return Some(out);
        }
        let block = objs.bytes(at(tstate, lo)?, usize::try_from(hi - lo).ok()?)?;
        let ident = u64_in(&block, field(l.tstate_thread_id)?)?;
        let native =
            if l.tstate_native_thread_id >= 0 { u64_in(&block, field(l.tstate_native_thread_id)?)? } else { 0 };
        out.entry(ident)
            .and_modify(|known| {
                if *known != Some(native) {
                    *known = None;
                }
            })
            .or_insert(Some(native));
        tstate = u64_in(&block, field(l.tstate_next)?)?;
    }
    None
}

/// An `_active` entry whose thread has a thread state: its ident, its `Thread` object, and the thread state's
/// `native_thread_id` (0: unknown).
#[derive(Debug, Clone, Copy)]
struct Live {
    ident: u64,
    thread: u64,
    native: u64,
}

/// The threads of `active` (`threading._active` of one interpreter, whose thread states are `tstates`) whose name
/// and tid were read consistently.
fn names_of<M: ReadMem>(
    objs: &mut Objects<'_, M>,
    names: ThreadNames,
    state: &mut State,
    active: &Dict,
    tstates: &HashMap<u64, Option<u64>>,
    ns_pid: u32,
) -> Vec<NamedThread> {
    // A Thread under two idents: at most one entry can be right, and reading it once per ident would cost as much
    // as `_active` is long.
    let mut count: HashMap<u64, u32> = HashMap::new();
    for &(_, thread) in &active.items {
        *count.entry(thread).or_default() += 1;
    }
    let live: Vec<Live> = active
        .items
        .iter()
        .filter(|(_, thread)| count.get(thread) == Some(&1))
        .take(MAX_THREADS)
        .filter_map(|&(key, thread)| {
            let ident = objs.int_value(key)?;
            let native = (*tstates.get(&ident)?)?;
            Some(Live { ident, thread, native })
        })
        .collect();
    let pthread = names.tids == ThreadTids::PthreadSelf;
    if pthread && state.pthread_tid.is_none() {
        state.pthread_tid = verify_pthread_tid(objs, &live, ns_pid);
    }
    let mut out = Vec::new();
    // 2.7-3.7: every tid read at the offset, to check them as a set.
    let mut pthread_tids = Vec::new();
    for e in &live {
        let Some(ty) = objs.type_of(e.thread) else { continue };
        if pthread && objs.type_name(&ty).as_deref() == Some(DUMMY_THREAD_TYPE) {
            continue;
        }
        let from_block = match state.pthread_tid {
            Some(off) if pthread => {
                let Some(v) = pthread_block(objs, e.ident).and_then(|()| objs.u64_at(at(e.ident, off)?)) else {
                    continue;
                };
                pthread_tids.push(v & 0xffff_ffff);
                Some(v & 0xffff_ffff)
            }
            _ => None,
        };
        let Some(attrs) = objs.attributes(e.thread, MAX_INSTANCE_ENTRIES) else { continue };
        let Some((name, _cut)) = objs
            .lookup_hinted(&attrs, names.name_attr, &mut state.hints.name)
            .and_then(|n| objs.str_value(n, MAX_THREAD_NAME_BYTES))
        else {
            continue;
        };
        let tid = match names.tids {
            ThreadTids::NativeId => {
                objs.lookup_hinted(&attrs, NATIVE_ID_ATTR, &mut state.hints.native_id).and_then(|v| objs.int_value(v))
            }
            ThreadTids::PthreadSelf => from_block,
        };
        let Some(tid) = tid.and_then(|t| u32::try_from(t).ok()).filter(|&t| t != 0) else { continue };
        // 3.11+: the thread state of this ident is the thread the Thread says it is.
        if e.native != 0 && e.native != u64::from(tid) {
            continue;
        }
        // The name and tid belong to one state of the thread's attributes.
        if !objs.unchanged(&attrs) {
            continue;
        }
        out.push(NamedThread { ns_tid: tid, name, object: e.thread });
    }
    if pthread && !plausible_tids(&pthread_tids) {
        // Live threads have distinct tids: these are not read from the tid field. Confirm the offset again later.
        state.pthread_tid = None;
        return Vec::new();
    }
    out
}

/// Whether `tids`, read at one offset of the `struct pthread`s of live threads, can be their tids: all non-zero,
/// below `PID_MAX_LIMIT`, distinct.
fn plausible_tids(tids: &[u64]) -> bool {
    let mut seen = HashSet::new();
    tids.iter().all(|&t| t != 0 && t < PID_MAX_LIMIT && seen.insert(t))
}

/// `Some(())` if `ident` is the address of a glibc thread control block: its `header.self` points to itself.
fn pthread_block<M: ReadMem>(objs: &Objects<'_, M>, ident: u64) -> Option<()> {
    (ident != 0 && objs.u64_at(at(ident, TCB_SELF)?)? == ident).then_some(())
}

/// The offset of `tid` in glibc's `struct pthread`, confirmed on the main thread: the one candidate at which the
/// `_MainThread`'s control block holds `ns_pid`. `None` when there is no live `_MainThread` in `live`, its ident is
/// not a control block, or not exactly one candidate matches.
fn verify_pthread_tid<M: ReadMem>(objs: &mut Objects<'_, M>, live: &[Live], ns_pid: u32) -> Option<u64> {
    let ident = live.iter().find_map(|e| {
        let t = objs.type_of(e.thread)?;
        (objs.type_name(&t)? == MAIN_THREAD_TYPE).then_some(e.ident)
    })?;
    pthread_block(objs, ident)?;
    let mut found = PTHREAD_TID_CANDIDATES.iter().filter(|&&off| {
        at(ident, off).and_then(|a| objs.u64_at(a)).is_some_and(|v| v & 0xffff_ffff == u64::from(ns_pid))
    });
    let off = *found.next()?;
    found.next().is_none().then_some(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::objects::{read_bytes, read_cstr, read_str};
    use crate::python::testing::FakeMem as Mem;
    use crate::python::versions::{
        row_for, InstanceDicts, Strings, MANAGED_DICT_BEFORE, MANAGED_VALUES_BEFORE_311, ROWS, TPFLAGS_DICT_SUBCLASS,
        TPFLAGS_HEAPTYPE, TPFLAGS_INLINE_VALUES, TPFLAGS_INT_SUBCLASS, TPFLAGS_LONG_SUBCLASS, TPFLAGS_MANAGED_DICT,
        TPFLAGS_STRING_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS,
    };

    /// Objects of one interpreter's layout in a [`Mem`]. `natives`: the kernel tid of each thread ident made, for
    /// its thread state.
    struct Sim {
        mem: Mem,
        row: &'static Row,
        str_type: u64,
        int_type: u64,
        dict_type: u64,
        plain_type: u64,
        natives: HashMap<u64, u64>,
    }

    impl Sim {
        fn new(row: &'static Row) -> Sim {
            let mut s = Sim {
                mem: Mem::default(),
                row,
                str_type: 0,
                int_type: 0,
                dict_type: 0,
                plain_type: 0,
                natives: HashMap::new(),
            };
            let (str_flag, int_flag) = if row.strings == Strings::Py2Bytes {
                (TPFLAGS_STRING_SUBCLASS, TPFLAGS_INT_SUBCLASS)
            } else {
                (TPFLAGS_UNICODE_SUBCLASS, TPFLAGS_LONG_SUBCLASS)
            };
            s.str_type = s.ty("str", str_flag, 0, 0, 0);
            s.int_type = s.ty("int", int_flag, 0, 0, 0);
            s.dict_type = s.ty("dict", TPFLAGS_DICT_SUBCLASS, 0, 0, 0);
            s.plain_type = s.ty("module", 0, 32, 16, 0);
            s
        }

        fn l(&self) -> &'static crate::python::layout::Layout {
            self.row.layout
        }

        fn names(&self) -> ThreadNames {
            self.row.thread_names.expect("a row of the table")
        }

        /// A type object.
        fn ty(&mut self, name: &str, flags: u64, basicsize: i64, dictoffset: i64, cached_keys: u64) -> u64 {
            let mut cname = name.as_bytes().to_vec();
            cname.push(0);
            let name_at = self.mem.put(cname);
            let t = self.mem.put(vec![0u8; 1024]);
            let l = self.l();
            self.mem.u64(t, l.object_type, t);
            self.mem.u64(t, l.type_name, name_at);
            self.mem.u64(t, self.row.type_flags, flags);
            self.mem.u64(t, l.type_basicsize, basicsize as u64);
            self.mem.u64(t, l.type_dictoffset, dictoffset as u64);
            if l.heaptype_cached_keys >= 0 {
                self.mem.u64(t, l.heaptype_cached_keys, cached_keys);
            }
            t
        }

        fn obj(&mut self, ty: u64, size: usize) -> u64 {
            let o = self.mem.put(vec![0u8; size.max(64)]);
            self.mem.u64(o, self.l().object_type, ty);
            o
        }

        /// A str (compact ASCII) or 2.7 byte string.
        fn text(&mut self, t: &str) -> u64 {
            let l = self.l();
            let o = self.obj(self.str_type, 256);
            if self.row.strings == Strings::Py2Bytes {
                self.mem.u64(o, l.bytes_size, t.len() as u64);
                self.mem.write(o + l.bytes_data as u64, t.as_bytes());
            } else {
                // Compact, one byte per character: ASCII (data after PyASCIIObject) or Latin-1 (after
                // PyCompactUnicodeObject).
                let ascii = t.is_ascii();
                let state = (1u64 << l.unicode_kind_shift)
                    | (1 << l.unicode_compact_shift)
                    | (u64::from(ascii) << l.unicode_ascii_shift);
                let latin1: Vec<u8> = t.chars().map(|c| u8::try_from(u32::from(c)).expect("Latin-1")).collect();
                self.mem.u64(o, l.unicode_length, latin1.len() as u64);
                self.mem.write(o + l.unicode_state as u64, &(state as u32).to_le_bytes());
                let data = if ascii { l.ascii_data } else { l.compact_data };
                self.mem.write(o + data as u64, &latin1);
            }
            o
        }

        /// A non-negative int.
        fn int(&mut self, v: u64) -> u64 {
            let l = self.l();
            let o = self.obj(self.int_type, 64);
            if l.int_value >= 0 {
                self.mem.u64(o, l.int_value, v);
                return o;
            }
            let digits: Vec<u32> = (0..3).map(|i| ((v >> (30 * i)) & 0x3fff_ffff) as u32).collect();
            let n = digits.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
            if l.long_tag >= 0 {
                self.mem.u64(o, l.long_tag, if n == 0 { 1 } else { (n as u64) << 3 });
            } else {
                self.mem.u64(o, l.bytes_size, n as u64);
            }
            for (i, d) in digits.iter().take(n).enumerate() {
                self.mem.write(o + l.long_digits as u64 + 4 * i as u64, &d.to_le_bytes());
            }
            o
        }

        /// A keys object holding `items` (values in the entries unless `split`), of `kind` (3.11+), its index table
        /// sized as CPython would (at most 2/3 full).
        fn keys(&mut self, items: &[(u64, u64)], kind: u8, split: bool) -> u64 {
            let l = self.l();
            let size = (items.len() * 3 / 2 + 1).next_power_of_two().max(8) as u64;
            let width: u64 = match size {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                _ => 4,
            };
            let index_bytes = size * width;
            // Built here, then put in one piece (a write per entry is slow with thousands of entries).
            let mut b = vec![0u8; 64 + index_bytes as usize + items.len() * 24 + 64];
            let mut put = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            let (esize, key_at, value_at) = if l.dictkeys_log2_size >= 0 {
                if kind == 0 {
                    (24, 8, 16)
                } else {
                    (16, 0, 8)
                }
            } else {
                (24, 8, 16)
            };
            put(l.dictkeys_nentries as usize, items.len() as u64);
            if l.dictkeys_log2_size < 0 {
                put(l.dictkeys_size as usize, size);
            }
            let entries = l.dictkeys_indices as usize + index_bytes as usize;
            for (i, &(key, value)) in items.iter().enumerate() {
                let e = entries + i * esize;
                put(e + key_at, key);
                if !split {
                    put(e + value_at, value);
                }
            }
            if l.dictkeys_log2_size >= 0 {
                let log2_size = size.trailing_zeros() as u8;
                let log2_index_bytes = index_bytes.trailing_zeros() as u8;
                let at = l.dictkeys_log2_size as usize;
                b[at..at + 3].copy_from_slice(&[log2_size, log2_index_bytes, kind]);
            }
            self.mem.put(b)
        }

        /// A split table's values for `items` (3.13+: with the `_dictvalues` header), returning what `ma_values`
        /// (or an object's inline values) points to.
        fn values(&mut self, items: &[(u64, u64)], at: Option<u64>) -> u64 {
            let l = self.l();
            let v = match at {
                Some(a) => a,
                None => self.mem.put(vec![0u8; 8 + 8 * items.len()]),
            };
            if l.dictvalues_capacity >= 0 {
                self.mem.write(v + l.dictvalues_capacity as u64, &[items.len() as u8]);
                self.mem.write(v + l.dictvalues_valid as u64, &[1]);
            }
            let array = v + l.dictvalues_values.max(0) as u64;
            for (i, &(_, value)) in items.iter().enumerate() {
                self.mem.u64(array + 8 * i as u64, 0, value);
            }
            v
        }

        /// A dict holding `items`, combined.
        fn dict(&mut self, items: &[(u64, u64)]) -> u64 {
            let l = self.l();
            let d = self.obj(self.dict_type, 128);
            if l.dict_table >= 0 {
                let slots = (items.len() * 2).next_power_of_two().max(8);
                let mut b = vec![0u8; slots * 24];
                for (i, &(key, value)) in items.iter().enumerate() {
                    // Every other slot, as a hash table leaves gaps.
                    b[48 * i + 8..48 * i + 16].copy_from_slice(&key.to_le_bytes());
                    b[48 * i + 16..48 * i + 24].copy_from_slice(&value.to_le_bytes());
                }
                let table = self.mem.put(b);
                self.mem.u64(d, l.dict_mask, slots as u64 - 1);
                self.mem.u64(d, l.dict_table, table);
            } else {
                let str_keys = items.iter().all(|&(k, _)| self.mem_type(k) == self.str_type);
                let k = self.keys(items, if str_keys { 1 } else { 0 }, false);
                self.mem.u64(d, l.dict_keys, k);
            }
            d
        }

        fn mem_type(&self, obj: u64) -> u64 {
            let mut b = [0u8; 8];
            self.mem.read(obj + self.l().object_type as u64, &mut b);
            u64::from_le_bytes(b)
        }

        /// An object of type `ty` (tp_dictoffset 16) whose `__dict__` holds `items`.
        fn with_dict(&mut self, ty: u64, items: &[(u64, u64)]) -> u64 {
            let o = self.obj(ty, 64);
            let d = self.dict(items);
            self.mem.u64(o, 16, d);
            o
        }

        /// The process: one interpreter whose sys.modules holds a `threading` module whose `_active` holds
        /// `threads` (ident -> Thread object), and a thread state for each ident (with its kernel tid, 3.11+).
        /// Returns its addresses.
        fn process(&mut self, threads: &[(u64, u64)]) -> PythonAddrs {
            let tstates: Vec<(u64, u64)> =
                threads.iter().filter_map(|&(ident, _)| Some((ident, *self.natives.get(&ident)?))).collect();
            self.process_with(threads, &tstates)
        }

        /// [`Sim::process`] with the thread states `tstates` (thread_id, native_thread_id).
        fn process_with(&mut self, threads: &[(u64, u64)], tstates: &[(u64, u64)]) -> PythonAddrs {
            let l = self.l();
            let active_items: Vec<(u64, u64)> = threads.iter().map(|&(ident, t)| (self.int(ident), t)).collect();
            let active = self.dict(&active_items);
            let other = self.text("other");
            let filler = self.int(7);
            let k_active = self.text("_active");
            let module_ty = self.plain_type;
            let threading = self.with_dict(module_ty, &[(other, filler), (k_active, active)]);
            let k_sys = self.text("sys");
            let k_threading = self.text("threading");
            let modules = self.dict(&[(k_sys, filler), (k_threading, threading)]);
            let interp = self.mem.put(vec![0u8; 8192]);
            self.mem.u64(interp, l.interp_modules, modules);
            let mut seen = HashSet::new();
            let mut next = 0;
            for &(ident, native) in tstates.iter().rev() {
                if !seen.insert(ident) {
                    continue;
                }
                let t = self.mem.put(vec![0u8; 512]);
                self.mem.u64(t, l.tstate_next, next);
                self.mem.u64(t, l.tstate_thread_id, ident);
                if l.tstate_native_thread_id >= 0 {
                    self.mem.u64(t, l.tstate_native_thread_id, native);
                }
                next = t;
            }
            self.mem.u64(interp, l.interp_tstate_head, next);
            let head = self.mem.put(vec![0u8; 64]);
            let mut addrs = PythonAddrs::default();
            if l.runtime_interpreters_head >= 0 {
                let rt = self.mem.put(vec![0u8; 4096]);
                self.mem.u64(rt, l.runtime_interpreters_head, interp);
                addrs.runtime = Some(rt);
            } else {
                self.mem.u64(head, 0, interp);
                addrs.interp_head = Some(head);
            }
            addrs
        }

        /// A glibc thread control block for tid `tid`: its address (the pthread id).
        fn pthread(&mut self, tid: u32) -> u64 {
            let b = self.mem.put(vec![0u8; 0x400]);
            self.mem.u64(b, TCB_SELF as i32, b);
            self.mem.write(b + PTHREAD_TID_CANDIDATES[0], &tid.to_le_bytes());
            b
        }

        /// A `Thread` named `name` for kernel thread `tid`, attributes in a dict at tp_dictoffset (every version
        /// reads those), of type `ty`; returns (ident, object).
        fn thread(&mut self, ty: u64, name: &str, tid: u32) -> (u64, u64) {
            let n = self.text(name);
            let k_name = self.text(self.names().name_attr);
            let k_target = self.text("_target");
            let none = self.int(0);
            let mut items = vec![(k_target, none), (k_name, n)];
            let ident = if self.names().tids == ThreadTids::NativeId {
                let k_native = self.text(NATIVE_ID_ATTR);
                let v = self.int(u64::from(tid));
                items.push((k_native, v));
                0x7f00_0000_0000 + u64::from(tid) * 0x1000
            } else {
                self.pthread(tid)
            };
            self.natives.insert(ident, u64::from(tid));
            (ident, self.with_dict(ty, &items))
        }
    }

    fn read_all(mem: &Mem, row: &'static Row, addrs: &PythonAddrs, ns_pid: u32) -> Vec<(u32, String)> {
        let mut r = ThreadNameReader::new(mem, row, addrs);
        let mut v: Vec<(u32, String)> =
            r.read(ns_pid).unwrap_or_default().into_iter().map(|n| (n.ns_tid, n.name)).collect();
        v.sort();
        v
    }

    fn named(v: &[(u32, &str)]) -> Vec<(u32, String)> {
        v.iter().map(|&(t, n)| (t, n.to_string())).collect()
    }

    /// Every row's layout of dicts, strs and ints, with attributes at tp_dictoffset: the names and tids as set.
    #[test]
    fn names_of_every_row() {
        for row in &ROWS {
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let a = s.thread(thread_ty, "worker-é", 501);
            let b = s.thread(thread_ty, &"w".repeat(300), 502);
            let addrs = s.process(&[main, a, b]);
            let got = read_all(&s.mem, row, &addrs, 500);
            let long = "w".repeat(MAX_THREAD_NAME_BYTES);
            assert_eq!(got, named(&[(500, "MainThread"), (501, "worker-é"), (502, &long)]), "{:?}", row.version);
        }
    }

    /// 2.7-3.7: the tid is taken from `struct pthread` only at an offset the main thread confirms, and only from a
    /// thread control block.
    #[test]
    fn pthread_tids_only_when_the_main_thread_confirms_them() {
        for v in [(2, 7), (3, 6), (3, 7)] {
            let row = row_for(v.0, v.1).unwrap();
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let a = s.thread(thread_ty, "worker", 501);
            let addrs = s.process(&[main, a]);
            assert_eq!(read_all(&s.mem, row, &addrs, 500), named(&[(500, "MainThread"), (501, "worker")]), "{v:?}");
            // Another pid than the main thread's tid there: the offset is not confirmed, no tid at all.
            assert_eq!(read_all(&s.mem, row, &addrs, 499), vec![], "{v:?}");
            // A thread whose ident is not a control block: no name for it.
            s.mem.u64(a.0, TCB_SELF as i32, 0);
            assert_eq!(read_all(&s.mem, row, &addrs, 500), named(&[(500, "MainThread")]), "{v:?}");
            // No _MainThread: nothing confirms the offset.
            let mut s = Sim::new(row);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let a = s.thread(thread_ty, "worker", 500);
            let addrs = s.process(&[a]);
            assert_eq!(read_all(&s.mem, row, &addrs, 500), vec![], "{v:?}");
        }
    }

    /// 3.11+: attributes in the managed dict (3.11: values pointer, 3.12: tagged word, 3.13+: inline values), with
    /// keys shared through the type's `ht_cached_keys`, or in a dict made from them.
    #[test]
    fn managed_and_inline_attributes() {
        for row in ROWS.iter().filter(|r| r.thread_names.unwrap().instance_dicts != InstanceDicts::DictOffset) {
            let scheme = row.thread_names.unwrap().instance_dicts;
            let mut s = Sim::new(row);
            let k_target = s.text("_target");
            let k_name = s.text("_name");
            let k_native = s.text(NATIVE_ID_ATTR);
            let shared = [(k_target, 0), (k_name, 0), (k_native, 0)];
            let keys = s.keys(&shared, 2, true);
            let flags = TPFLAGS_HEAPTYPE | TPFLAGS_MANAGED_DICT | TPFLAGS_INLINE_VALUES;
            let main_ty = s.ty(MAIN_THREAD_TYPE, flags, 48, -1, keys);
            let thread_ty = s.ty("Thread", flags, 48, -1, keys);
            let thread = |s: &mut Sim, ty: u64, name: &str, tid: u64, as_dict: bool| -> (u64, u64) {
                let none = s.int(0);
                let n = s.text(name);
                let id = s.int(tid);
                let items = [(k_target, none), (k_name, n), (k_native, id)];
                // The object: pre-header, then 48 bytes, then inline values.
                let block = s.mem.put(vec![0u8; 256]);
                let o = block + 64;
                s.mem.u64(o, s.l().object_type, ty);
                let before = |b: u64| o - b;
                if as_dict {
                    let d = s.dict(&items);
                    s.mem.u64(before(MANAGED_DICT_BEFORE), 0, d);
                } else {
                    match scheme {
                        InstanceDicts::Managed311 => {
                            let v = s.values(&items, None);
                            s.mem.u64(before(MANAGED_VALUES_BEFORE_311), 0, v);
                        }
                        InstanceDicts::Tagged312 => {
                            let v = s.values(&items, None);
                            s.mem.u64(before(MANAGED_DICT_BEFORE), 0, v - 1);
                        }
                        _ => {
                            s.values(&items, Some(o + 48));
                        }
                    }
                }
                s.natives.insert(0x7f00_0000_0000 + tid, tid);
                (0x7f00_0000_0000 + tid, o)
            };
            let main = thread(&mut s, main_ty, "MainThread", 500, false);
            let a = thread(&mut s, thread_ty, "worker-a", 501, false);
            let b = thread(&mut s, thread_ty, "worker-b", 502, true);
            let addrs = s.process(&[main, a, b]);
            let got = read_all(&s.mem, row, &addrs, 500);
            assert_eq!(got, named(&[(500, "MainThread"), (501, "worker-a"), (502, "worker-b")]), "{:?}", row.version);
            if scheme == InstanceDicts::Inline313 {
                // Inline values no longer valid, and no dict pointer yet: nothing rather than stale values.
                s.mem.write(a.1 + 48 + row.layout.dictvalues_valid as u64, &[0]);
                let got = read_all(&s.mem, row, &addrs, 500);
                assert_eq!(got, named(&[(500, "MainThread"), (502, "worker-b")]), "{:?}", row.version);
            }
        }
    }

    /// The program changes a thread while it is read: at every point of the read, its name and native id become
    /// another thread's. Whatever the point, a name comes with the tid it had, never with the other.
    #[test]
    fn a_torn_read_gives_no_name_never_a_wrong_one() {
        for row in ROWS.iter().filter(|r| r.thread_names.unwrap().tids == ThreadTids::NativeId) {
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let a = s.thread(thread_ty, "worker-a", 501);
            let addrs = s.process(&[main, a]);
            // The thread's dict, and in it the slots of `_name` and `_native_id`: replaced together.
            let mut d = [0u8; 8];
            s.mem.read(a.1 + 16, &mut d);
            let dict = u64::from_le_bytes(d);
            let (other_name, other_id) = (s.text("worker-z"), s.int(777));
            let mut pending = Vec::new();
            // Find the slots holding the name and id pointers by scanning the dict's table for them.
            let (name_ptr, id_ptr) = {
                let mut objs = Objects::new(&s.mem, row);
                let dd = objs.dict(dict).unwrap();
                (objs.lookup(&dd, "_name").unwrap(), objs.lookup(&dd, NATIVE_ID_ATTR).unwrap())
            };
            let regions = s.mem.regions.borrow().clone();
            for (start, data) in &regions {
                for (i, w) in data.chunks_exact(8).enumerate() {
                    let v = u64::from_le_bytes(w.try_into().unwrap());
                    let at = start + 8 * i as u64;
                    if v == name_ptr {
                        pending.push((at, other_name.to_le_bytes().to_vec()));
                    } else if v == id_ptr {
                        pending.push((at, other_id.to_le_bytes().to_vec()));
                    }
                }
            }
            assert_eq!(pending.len(), 2, "{:?}: one slot each", row.version);
            // And the old objects freed, their memory reused by the new ones' contents: read through a stale
            // pointer, they would pair the new name with the old tid.
            let l = row.layout;
            let text_at = if row.strings == Strings::Py2Bytes { l.bytes_data } else { l.ascii_data };
            pending.push((name_ptr + text_at as u64, b"worker-z".to_vec()));
            let fresh_id = s.int(777);
            let digits_at = if l.int_value >= 0 { l.int_value } else { l.long_digits };
            let mut digits = [0u8; 8];
            s.mem.read(fresh_id + digits_at as u64, &mut digits);
            pending.push((id_ptr + digits_at as u64, digits.to_vec()));
            *s.mem.pending.borrow_mut() = pending;
            let total = {
                s.mem.reads.set(0);
                read_all(&s.mem, row, &addrs, 500);
                s.mem.reads.get()
            };
            for k in 0..=total {
                // A fresh copy of the process for each point.
                let fresh = s.mem.clone();
                fresh.reads.set(0);
                fresh.watch.set(Some((None, k + 1)));
                let got = read_all(&fresh, row, &addrs, 500);
                let ok = [
                    named(&[(500, "MainThread"), (501, "worker-a")]),
                    named(&[(500, "MainThread")]),
                    named(&[(500, "MainThread"), (777, "worker-z")]),
                ];
                assert!(ok.contains(&got), "{:?}: changed before read {k} of {total}: {got:?}", row.version);
            }
        }
    }

    /// A `Thread` with `n` attributes (`_name` and `_native_id` last), of type `ty`, for kernel thread `tid`: its
    /// ident and object. The other keys are `filler` keys repeated (a hostile program can make any number).
    fn thread_with(s: &mut Sim, ty: u64, name: &str, tid: u32, n: usize) -> (u64, u64) {
        let (ident, obj) = s.thread(ty, name, tid);
        let mut d = [0u8; 8];
        s.mem.read(obj + 16, &mut d);
        let mut objs = Objects::new(&s.mem, s.row);
        let dict = u64::from_le_bytes(d);
        let mut items = objs.dict(dict).expect("its dict").items;
        let filler = (s.text("a0"), s.int(1));
        items.splice(0..0, std::iter::repeat_n(filler, n.saturating_sub(items.len())));
        let fat = s.dict(&items);
        s.mem.u64(obj, 16, fat);
        (ident, obj)
    }

    /// Whether `reads` reads of `bytes` in all are within `share` of [`READ_BUDGET`].
    fn within(reads: usize, bytes: u64, share: f64) -> bool {
        reads as f64 <= READ_BUDGET.ops as f64 * share && bytes as f64 <= READ_BUDGET.bytes as f64 * share
    }

    /// What a read gave: (tid, name) in tid order.
    type Got = Result<Vec<(u32, String)>, ThreadNamesError>;

    /// What one read costs, in reads and bytes of the memory behind it.
    fn read_cost(mem: &Mem, row: &'static Row, addrs: &PythonAddrs, ns_pid: u32) -> (Got, usize, u64) {
        mem.reads.set(0);
        mem.bytes.set(0);
        let mut r = ThreadNameReader::new(mem, row, addrs);
        let got = r.read(ns_pid).map(|v| {
            let mut v: Vec<(u32, String)> = v.into_iter().map(|n| (n.ns_tid, n.name)).collect();
            v.sort();
            v
        });
        (got, mem.reads.get() as usize, mem.bytes.get())
    }

    /// The reproduction of a read that took 3.9 s: one `Thread` with 60 000 attributes under 4 095 idents of
    /// `_active` (2 000 with a thread state, as if live). The object is not read at all (it cannot be under two
    /// idents), the other threads are named, and the read stays within its budget of reads and bytes.
    #[test]
    fn a_hostile_active_dict_costs_a_bounded_read() {
        for row in &ROWS {
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let worker = s.thread(thread_ty, "worker", 501);
            let hostile = thread_with(&mut s, thread_ty, "hostile", 502, 60_000);
            let mut threads = vec![main, worker, hostile];
            for i in 0..4094u64 {
                let ident = hostile.0 + 0x10_0000 * (i + 1);
                // Thread states for half of them (as many as the interpreter's list is read for).
                if i < 2000 {
                    s.natives.insert(ident, 502);
                }
                threads.push((ident, hostile.1));
            }
            let addrs = s.process(&threads);
            let (got, reads, bytes) = read_cost(&s.mem, row, &addrs, 500);
            assert_eq!(got, Ok(named(&[(500, "MainThread"), (501, "worker")])), "{:?}", row.version);
            assert!(within(reads, bytes, 1.0), "{:?}: {reads} reads, {bytes} bytes", row.version);
            eprintln!("{:?}: {reads} reads, {bytes} bytes", row.version);
        }
    }

    /// Threads with more attributes than [`MAX_INSTANCE_ENTRIES`] are not read; and 700 of them just under the cap
    /// spend the budget: the read fails (no names) having read at most what the budget allows.
    #[test]
    fn attribute_dicts_are_capped_and_the_budget_ends_the_read() {
        for row in &ROWS {
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let fat = thread_with(&mut s, thread_ty, "fat", 501, MAX_INSTANCE_ENTRIES as usize + 1);
            let addrs = s.process(&[main, fat]);
            let (got, _, _) = read_cost(&s.mem, row, &addrs, 500);
            assert_eq!(got, Ok(named(&[(500, "MainThread")])), "{:?}", row.version);

            // 700 of them: 2 x 8 KiB (3.11+) to 2 x 24 KiB (2.7) each to read (and to read again).
            let mut threads = vec![main];
            for i in 0..700 {
                threads.push(thread_with(&mut s, thread_ty, &format!("w{i}"), 1000 + i, 500));
            }
            let addrs = s.process(&threads);
            let (got, reads, bytes) = read_cost(&s.mem, row, &addrs, 500);
            assert_eq!(got, Err(ThreadNamesError::TooMuchWork), "{:?}", row.version);
            assert!(within(reads, bytes, 1.0), "{:?}: {reads} reads, {bytes} bytes", row.version);
        }
    }

    /// The budget is not too tight: [`MAX_THREADS`] threads of the attributes a `Thread` has (about 16) are all
    /// named, on every row.
    #[test]
    fn max_threads_fit_the_budget() {
        for row in &ROWS {
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let mut threads = vec![thread_with(&mut s, main_ty, "MainThread", 500, 16)];
            let mut want = vec![(500, "MainThread".to_string())];
            for i in 0..MAX_THREADS as u32 - 1 {
                threads.push(thread_with(&mut s, thread_ty, &format!("worker-{i}"), 1000 + i, 16));
                want.push((1000 + i, format!("worker-{i}")));
            }
            let addrs = s.process(&threads);
            let (got, reads, bytes) = read_cost(&s.mem, row, &addrs, 500);
            assert_eq!(got.as_ref().map(Vec::len), Ok(MAX_THREADS), "{:?}", row.version);
            assert_eq!(got, Ok(want), "{:?}", row.version);
            eprintln!("{:?}: {MAX_THREADS} threads: {reads} reads, {bytes} bytes", row.version);
            assert!(within(reads, bytes, 0.5), "{:?}: {reads} reads, {bytes} bytes: over half the budget", row.version);
        }
    }

    /// An `_active` entry of a thread that ended: its ident has no thread state (stale), or (3.11+) the thread state
    /// of its ident is another thread's (a new thread got the ident). Neither is named. A `_DummyThread` is named
    /// where its thread state can vouch for it (3.8+: `_native_id`), never on 2.7-3.7, where its tid is read from a
    /// `struct pthread` a new thread may own.
    #[test]
    fn entries_of_ended_threads_get_no_name() {
        for row in &ROWS {
            let v = row.version;
            let names = row.thread_names.unwrap();
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let dummy_ty = s.ty(DUMMY_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 500);
            let live = s.thread(thread_ty, "live", 501);
            let gone = s.thread(thread_ty, "gone", 502);
            let reused = s.thread(dummy_ty, "Dummy-1", 503);
            let dummy = s.thread(dummy_ty, "Dummy-2", 504);
            let mut tstates: Vec<(u64, u64)> = [main, live, dummy].iter().map(|t| (t.0, s.natives[&t.0])).collect();
            // A new thread (tid 600) owns the dummy's ident now.
            tstates.push((reused.0, 600));
            let addrs = s.process_with(&[main, live, gone, reused, dummy], &tstates);
            let got = read_all(&s.mem, row, &addrs, 500);
            let mut want = vec![(500, "MainThread"), (501, "live")];
            let native_tstates = row.layout.tstate_native_thread_id >= 0;
            if !native_tstates && names.tids == ThreadTids::NativeId {
                // 3.8-3.10: the ident is all a thread state has; the old tid names a thread that is gone (the
                // caller keeps only the process's threads).
                want.push((503, "Dummy-1"));
            }
            if names.tids == ThreadTids::NativeId {
                want.push((504, "Dummy-2"));
            }
            assert_eq!(got, named(&want), "{v:?}");
        }
    }

    /// 2.7-3.7 in a PID namespace (pid 1): the main thread's `struct pthread` holding 1 at the candidate offset
    /// does not confirm it when the other threads hold the same value or 0 there: no names at all.
    #[test]
    fn pthread_tids_must_be_distinct_and_plausible() {
        for v in [(2, 7), (3, 6), (3, 7)] {
            let row = row_for(v.0, v.1).unwrap();
            let mut s = Sim::new(row);
            let main_ty = s.ty(MAIN_THREAD_TYPE, TPFLAGS_HEAPTYPE, 32, 16, 0);
            let thread_ty = s.ty("Thread", TPFLAGS_HEAPTYPE, 32, 16, 0);
            let main = s.thread(main_ty, "MainThread", 1);
            let a = s.thread(thread_ty, "a", 1);
            let b = s.thread(thread_ty, "b", 7);
            let addrs = s.process(&[main, a, b]);
            assert_eq!(read_all(&s.mem, row, &addrs, 1), vec![], "{v:?}: two threads hold 1");
            s.mem.write(a.0 + PTHREAD_TID_CANDIDATES[0], &0u32.to_le_bytes());
            assert_eq!(read_all(&s.mem, row, &addrs, 1), vec![], "{v:?}: a thread holds 0");
            s.mem.write(a.0 + PTHREAD_TID_CANDIDATES[0], &(1u32 << 22).to_le_bytes());
            assert_eq!(read_all(&s.mem, row, &addrs, 1), vec![], "{v:?}: beyond PID_MAX_LIMIT");
            s.mem.write(a.0 + PTHREAD_TID_CANDIDATES[0], &2u32.to_le_bytes());
            let got = read_all(&s.mem, row, &addrs, 1);
            assert_eq!(got, named(&[(1, "MainThread"), (2, "a"), (7, "b")]), "{v:?}");
        }
    }

    /// Pointers read from the target near the top of the address space: every address computed from them is
    /// checked, the read gives nothing (a debug build panicked on the overflow).
    #[test]
    fn pointers_near_the_end_of_the_address_space_read_as_nothing() {
        const TOP: u64 = u64::MAX - 4095;
        for row in &ROWS {
            let v = row.version;
            let l = row.layout;
            let mut s = Sim::new(row);
            // The last page, full of 0xff: every pointer read there is near u64::MAX.
            s.mem.put_at(TOP, vec![0xff; 4096]);
            // (0xff.. is a negative size: an empty string, if anything.)
            for obj in [u64::MAX - 3, u64::MAX - 40, TOP] {
                assert!(read_str(&s.mem, row, obj, 100).is_none_or(|t| t.0.is_empty()), "{v:?}");
                assert!(read_bytes(&s.mem, l, obj, 100).is_none_or(|b| b.is_empty()), "{v:?}");
            }
            assert_eq!(read_str(&s.mem, row, u64::MAX - 3, 100), None, "{v:?}");
            assert_eq!(read_cstr(&s.mem, u64::MAX - 10, 100), None, "{v:?}: unterminated at the very end");
            let mut objs = Objects::new(&s.mem, row);
            // An object whose type pointer (0xff..) leads nowhere, one at the very end.
            assert_eq!(objs.type_of(TOP + 64), None, "{v:?}");
            // A type at the top: its heap type's cached keys lie past the end.
            let heap_flags = TPFLAGS_HEAPTYPE | TPFLAGS_DICT_SUBCLASS | TPFLAGS_LONG_SUBCLASS | TPFLAGS_MANAGED_DICT;
            let t = TOP + 1024;
            s.mem.u64(t, row.type_flags, heap_flags);
            s.mem.u64(t, l.type_dictoffset, 1 << 19);
            s.mem.u64(t, l.type_basicsize, 1 << 19);
            let objs = Objects::new(&s.mem, row);
            // Objects of that type at the top: their dict, digits, values lie past the end.
            let o = TOP + 512;
            s.mem.u64(o, l.object_type, t);
            let mut objs2 = Objects::new(&s.mem, row);
            assert_eq!(objs2.attributes(o, MAX_INSTANCE_ENTRIES), None, "{v:?}");
            assert_eq!(objs2.int_value(o), None, "{v:?}");
            assert_eq!(objs2.dict(o), None, "{v:?}");
            drop(objs);
            // In ordinary memory: a dict whose keys and values pointers are near u64::MAX, an instance whose
            // managed word (3.12: tagged values pointer) is u64::MAX.
            let o = s.obj(s.dict_type, 256);
            if l.dict_keys >= 0 {
                s.mem.u64(o, l.dict_keys, u64::MAX - 8);
                s.mem.u64(o, l.dict_values, u64::MAX - 8);
            } else {
                s.mem.u64(o, l.dict_mask, 7);
                s.mem.u64(o, l.dict_table, u64::MAX - 8);
            }
            let mut objs = Objects::new(&s.mem, row);
            assert_eq!(objs.dict(o), None, "{v:?}");
            if l.dict_keys >= 0 {
                let k = s.keys(&[(1, 2)], 2, true);
                s.mem.u64(o, l.dict_keys, k);
                s.mem.u64(o, l.dict_values, u64::MAX - 3);
                let mut objs = Objects::new(&s.mem, row);
                assert_eq!(objs.dict(o), None, "{v:?}: split values past the end");
            }
            let managed = s.ty("Thread", TPFLAGS_HEAPTYPE | TPFLAGS_MANAGED_DICT | TPFLAGS_INLINE_VALUES, 48, -1, 0);
            let block = s.mem.put(vec![0u8; 256]);
            let o = block + 64;
            s.mem.u64(o, l.object_type, managed);
            for before in [MANAGED_DICT_BEFORE, MANAGED_VALUES_BEFORE_311] {
                s.mem.u64(o - before, 0, u64::MAX);
            }
            let mut objs = Objects::new(&s.mem, row);
            assert_eq!(objs.attributes(o, MAX_INSTANCE_ENTRIES), None, "{v:?}");
            // The interpreter list: a head pointing at the end.
            let head = s.mem.put(vec![0u8; 64]);
            s.mem.u64(head, 0, u64::MAX - 7);
            let addrs = PythonAddrs { interp_head: Some(head), runtime: Some(u64::MAX - 1), ..PythonAddrs::default() };
            let mut r = ThreadNameReader::new(&s.mem, row, &addrs);
            assert!(r.read(1).is_err(), "{v:?}");
        }
    }

    #[test]
    fn ints_of_every_layout() {
        for row in &ROWS {
            let mut s = Sim::new(row);
            for v in [0u64, 1, 0x3fff_ffff, 0x4000_0000, 0x7f12_3456_7000, u64::MAX >> 2] {
                let o = s.int(v);
                let mut objs = Objects::new(&s.mem, row);
                assert_eq!(objs.int_value(o), Some(v), "{:?}", row.version);
            }
            // Not an int: no value.
            let t = s.text("12");
            let mut objs = Objects::new(&s.mem, row);
            assert_eq!(objs.int_value(t), None);
        }
    }
}
