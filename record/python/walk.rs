//! Walking a thread's Python stack from user space, through the process's memory, as the BPF program walks it at a
//! sample: the same frames (code object address, raw instruction position, check word, first local), the same
//! status, the same GIL state. For what BPF cannot see: a thread that stays off CPU until the recording ends (or was
//! off CPU since before it started) never runs the program, so `record --off-cpu` walks its stack here at the end;
//! `pyperf dump` walks every thread the same way.
//!
//! The rules are the program's (bpf/, `find_tstate` and `frame_walk_step`), driven by the same
//! configuration row ([`ProcConfig`], as put in the `procs` map): frames owned by the interpreter itself skipped
//! (`owner_cstack`), C-stack entry frames skipped (`skip_code`, 3.13+ `Py_None`), tagged code pointers masked
//! (`code_mask`, 3.14+), the thread's base frame ending a complete walk (3.15+, else `INCOMPLETE`), at most
//! [`MAX_FRAMES`] frames kept (`TRUNCATED`) in at most `PYPERF_MAX_WALK` steps, the check word read once per run of
//! frames of one code object, the first local (self/cls heuristic, <= 3.10) read for frames whose code takes an
//! argument, the run roots of generator frames (`track_tasks`, `owner_generator`: asyncio tasks). The window reads of
//! 3.11+ (`frame_window`) are an optimisation of the program's and change nothing here.
//!
//! Finding the thread's `PyThreadState`: the interpreters' thread lists are walked (bounded: [`MAX_INTERPRETERS`],
//! [`MAX_THREAD_STATES`]), the main interpreter first as in the program (which looks at no other), and the first
//! thread state of the thread is taken:
//! - 3.11+ (`MATCH_NATIVE_TID`): `native_thread_id` is the tid in the process's PID namespace;
//! - 2.7-3.10 (`MATCH_PTHREAD`): `thread_id` is `pthread_self()`, the address of glibc's `struct pthread`, which
//!   holds the tid at an offset that is verified, never assumed (as [`super::threads`] does): a candidate is used
//!   only once the process's main thread's `struct pthread` (a thread control block: its `header.self` points to
//!   itself) holds the process's pid there, and the other control blocks of the list hold distinct tids there,
//!   below `PID_MAX_LIMIT` (0 for an exited thread's block). A thread state whose `thread_id` is not a control block
//!   cannot be told; a thread found in none then is an error, not `IDLE`.
//!
//! The target runs while it is read, and a walk must never give a stack the thread did not have: a frame chain
//! read while the thread returns and calls again would splice two stacks. So every walk reads the thread state and
//! its whole frame chain twice, and keeps the result only when both reads agree, frame for frame (addresses, code
//! objects, positions, check words, first locals, status); when they differ it reads once more and keeps the result
//! if that read agrees with the one before, else it fails ([`WalkError::Changing`]). A thread blocked in a system
//! call (what `--off-cpu` walks) cannot change its frames, so the first two agree. The thread state found through a
//! list read earlier is re-checked (its match field read again) before each walk. Every read is bounded: the whole
//! walk, retry included, spends at most [`WALK_BUDGET`].

use std::collections::HashMap;

use super::code::code_check;
use super::objects::{at, Budget, Metered};
use super::threads::{PID_MAX_LIMIT, PTHREAD_TID_CANDIDATES, TCB_SELF};
use super::versions::Row;
use super::PythonProcess;
use crate::abi::{
    types, ProcConfig, RawFrame, RawLocal, CODE_BUF, FRAME_BUF, GIL_BUF, INSTR_ENTRY, MAX_FRAMES, TSTATE_BUF,
};
use crate::mem::{read_u64, ProcMem, ReadMem};

/// Most interpreters (main and subinterpreters) whose thread lists are walked.
pub const MAX_INTERPRETERS: usize = 16;
/// Most thread states walked, over all interpreters; a longer list is an error ([`WalkError::TooManyThreads`]).
pub const MAX_THREAD_STATES: usize = 4096;
/// Steps of a frame walk (`PYPERF_MAX_WALK`): frames kept plus interpreter frames skipped.
pub const MAX_WALK: usize = types::pyperf_limits::PYPERF_MAX_WALK.0 as usize;
/// The work one [`StackWalker::walk`] may do, retry included: 16 MiB read, in at most 64 Ki reads. About what two
/// scans of [`MAX_THREAD_STATES`] thread states (1 to 3 reads each) and three walks of [`MAX_WALK`] frames (up to 3
/// reads each) need together; spent, the walk fails ([`WalkError::TooMuchWork`]).
pub const WALK_BUDGET: Budget = Budget { bytes: 16 << 20, ops: 64 << 10 };

const COMPLETE: u8 = types::pyperf_stack_status::STACK_STATUS_COMPLETE.0 as u8;
const ERROR: u8 = types::pyperf_stack_status::STACK_STATUS_ERROR.0 as u8;
const TRUNCATED: u8 = types::pyperf_stack_status::STACK_STATUS_TRUNCATED.0 as u8;
const IDLE: u8 = types::pyperf_stack_status::STACK_STATUS_IDLE.0 as u8;
const INCOMPLETE: u8 = types::pyperf_stack_status::STACK_STATUS_INCOMPLETE.0 as u8;

/// A thread's Python stack, as the BPF program would have recorded it at a sample of the thread.
#[derive(Debug, Clone)]
pub struct WalkedStack {
    /// Leaf first, as in a sample: code object address, raw instruction position, check word (0 when the code
    /// object could not be read).
    pub frames: Vec<RawFrame>,
    /// <= 3.10: each frame's first local and its type, as many as `frames` (as a record holds them); empty on
    /// 3.11+.
    pub locals: Vec<RawLocal>,
    /// `enum pyperf_stack_status` value (`pyperf_format::StackStatus`): `COMPLETE`, `ERROR` (the chain broke: an
    /// unreadable frame, a frame without code; `frames` holds those above it), `TRUNCATED` (more than
    /// [`MAX_FRAMES`] frames: the leaf-nearest kept), `IDLE` (no thread state, or no Python frame), `INCOMPLETE`
    /// (3.15+: the chain ended without reaching the thread's base frame).
    pub status: u8,
    /// `enum pyperf_gil_state` value (`pyperf_format::GilState`), as the program computes it; `GIL_STATE_WAITING`
    /// on 3.15+ for a thread that asked for the GIL and does not hold it.
    pub gil: u8,
    /// `enum pyperf_thread_state` value: this thread state against the global current one, where the version has
    /// one (else `THREAD_STATE_UNKNOWN`).
    pub thread_state: u8,
    /// `enum pyperf_pthread_id` value: 2.7-3.10, `PTHREAD_ID_MATCH` (the thread state was matched by its
    /// `pthread_t`); 3.11+ `PTHREAD_ID_UNKNOWN` (the thread's `pthread_self()` is not known here), or
    /// `PTHREAD_ID_THREAD_STATE_NULL` without a thread state.
    pub pthread_id: u8,
    /// The GIL block the walk found, for telling a thread blocked in futex(2) on the GIL (`py_proc.gil_wait_addr`
    /// 0 means "relative to this"): 3.12+ `interp->ceval.gil`, 2.7 the semaphore `interpreter_lock` points to;
    /// 0 otherwise (the configuration's `gil_wait_addr` is absolute then) or when unknown.
    pub gil_wait_base: u64,
    /// The run roots of generator frames (asyncio tasks; bpf/pyperf.h, `pyperf_event_header.coro_frame`), every
    /// one, leaf first: (index in `frames`, frame address). Empty when the configuration does not track them (the
    /// program keeps the rootmost 4 of these).
    pub coro_roots: Vec<(usize, u64)>,
}

/// Why a thread's stack could not be walked (nothing is known of it; not a status of a stack).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    /// A structure the walk needs (the interpreter list, a thread state) could not be read: the process is gone,
    /// or its memory is not readable.
    #[error("cannot read {0}")]
    Unreadable(&'static str),
    /// The thread's frames kept changing while they were read (it runs): three reads, no two in a row equal.
    #[error("the thread's stack kept changing while it was read")]
    Changing,
    /// The thread state found for the thread is no longer its (the thread exited while it was read).
    #[error("the thread's thread state went away while it was read")]
    Gone,
    /// 2.7-3.10: where glibc's `struct pthread` keeps the tid could not be confirmed (see the module's doc), or a
    /// thread state's `thread_id` is not a thread control block while the thread is in no other: the thread states
    /// cannot be told apart.
    #[error("cannot tell which thread state is the thread's (its pthread's tid is not readable)")]
    UnknownPthreadTid,
    /// Two thread states with different `pthread_t`s hold this tid.
    #[error("two thread states claim the thread")]
    Ambiguous,
    /// The thread lists hold more than [`MAX_THREAD_STATES`] thread states (or loop).
    #[error("more than {MAX_THREAD_STATES} thread states")]
    TooManyThreads,
    /// The walk needed more work than [`WALK_BUDGET`].
    #[error("walking the stack needed more than its budget of work")]
    TooMuchWork,
}

/// Walks the Python stacks of one process's threads.
pub struct StackWalker<M> {
    mem: M,
    proc: Proc,
    state: State,
}

/// What the walks of a process read from its configuration.
struct Proc {
    config: ProcConfig,
    /// `PyInterpreterState.next`, -1 if unknown (the main interpreter only, as BPF).
    interp_next: i32,
    /// The process's pid in its own PID namespace (its main thread's tid there).
    ns_pid: u32,
    pthread: bool,
}

/// What a walker keeps from one walk to the next.
#[derive(Default)]
struct State {
    /// The thread states of the last scan of the thread lists, by tid (in the process's PID namespace).
    tstates: Option<HashMap<u32, Found>>,
    /// The `struct pthread` offset of the tid, once confirmed (2.7-3.10).
    pthread_tid: Option<u64>,
    /// The last scan met a thread state that could not be matched to a tid (2.7-3.10).
    unmatched: bool,
}

/// A tid's thread state in a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Its address, and (2.7-3.10) the `pthread_t` it was matched by.
    One { ts: u64, ident: u64 },
    /// Two thread states of different `pthread_t`s hold the tid.
    Ambiguous,
}

impl<M: ReadMem> StackWalker<M> {
    /// A walker of the threads of a process whose memory is `mem`, configured for BPF as `config` (the `procs` map
    /// value [`super::config::bpf_config`] made for it), whose interpreter `row` describes; `ns_pid` is the process's
    /// pid in its own PID namespace (`Namespaces::ns_pid`; its pid when it shares pyperf's).
    pub fn new(mem: M, config: &ProcConfig, row: &'static Row, ns_pid: u32) -> Self {
        let pthread = u32::from(config.off.match_kind) == types::pyperf_match_kind::MATCH_PTHREAD.0;
        StackWalker {
            mem,
            proc: Proc { config: *config, interp_next: row.layout.interp_next, ns_pid, pthread },
            state: State::default(),
        }
    }

    /// The Python stack of the thread whose tid in the process's own PID namespace is `ns_tid` (its host tid when
    /// the process shares pyperf's namespace), leaf first, as the BPF program would have recorded it at a sample of
    /// that thread, read consistently (see the module's doc). A thread without a thread state (or tid 0, as in the
    /// program) has an `IDLE` stack.
    ///
    /// The thread lists are read once and reused by later walks (each checked again); a walker is meant for one
    /// moment, such as the end of a recording: [`StackWalker::forget`] makes the next walk read them anew.
    pub fn walk(&mut self, ns_tid: u32) -> Result<WalkedStack, WalkError> {
        let mem = Metered::new(&self.mem, WALK_BUDGET);
        let walked = self.proc.walk(&mem, &mut self.state, ns_tid);
        if mem.exhausted() {
            return Err(WalkError::TooMuchWork);
        }
        walked
    }

    /// Forgets the thread states found so far (the confirmed `struct pthread` offset stays).
    pub fn forget(&mut self) {
        self.state.tstates = None;
    }
}

impl StackWalker<ProcMem> {
    /// A walker of process `p`'s threads through its memory (/proc/PID/mem, else process_vm_readv), configured as
    /// `config` (what the BPF map got for it); `ns_pid`: its pid in its own PID namespace.
    pub fn open(p: &PythonProcess, config: &ProcConfig, ns_pid: u32) -> std::io::Result<Self> {
        let probe = p.addrs.runtime.or(p.addrs.interp_head).or(p.addrs.code_type).unwrap_or(0);
        Ok(StackWalker::new(ProcMem::open(p.pid, probe)?, config, p.row, ns_pid))
    }
}

/// A field of a block read from the target; 0 when the offset is absent (< 0) or past the block, as the program's
/// `get_u64`.
fn u64_in(b: &[u8], off: i16) -> u64 {
    super::objects::u64_in(b, off).unwrap_or(0)
}

/// `get_s32`.
fn s32_in(b: &[u8], off: i16) -> i32 {
    usize::try_from(off)
        .ok()
        .and_then(|o| b.get(o..o.checked_add(4)?))
        .map_or(0, |s| i32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
}

/// `get_u8`: -1 when absent.
fn u8_in(b: &[u8], off: i16) -> i32 {
    usize::try_from(off).ok().and_then(|o| b.get(o)).map_or(-1, |&v| i32::from(v))
}

/// `size` bytes at `addr`, as the program's `read_user` (nothing when the size is 0 or beyond its buffer `max`).
fn block<M: ReadMem>(mem: &M, addr: u64, size: u16, max: usize) -> Option<Vec<u8>> {
    let size = usize::from(size);
    if size == 0 || size > max {
        return None;
    }
    let mut b = vec![0u8; size];
    mem.read(addr, &mut b).then_some(b)
}

fn read_u32<M: ReadMem>(mem: &M, addr: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b).then(|| u32::from_le_bytes(b))
}

/// A thread state found for a thread: what re-checks that it is still the thread's.
struct Match {
    ts: u64,
    /// 2.7-3.10: the `pthread_t` it was matched by, and the confirmed offset of the tid in its `struct pthread`.
    ident: u64,
    pthread_off: Option<u64>,
    ns_tid: u32,
}

/// One read of a thread's frames: what two reads must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chain {
    /// The leaf frame pointer and (3.15+) the base frame the thread state held.
    leaf: u64,
    base: u64,
    /// Every frame visited, skipped ones included.
    visited: Vec<u64>,
    /// (code, instr, check, first_local, first_local_type) per frame kept, leaf first.
    frames: Vec<(u64, u32, u32, u64, u64)>,
    /// Run roots of generator frames, leaf first: (index in `frames`, frame address).
    roots: Vec<(usize, u64)>,
    status: u8,
}

impl Proc {
    fn walk<M: ReadMem>(&self, mem: &M, st: &mut State, ns_tid: u32) -> Result<WalkedStack, WalkError> {
        let found = if ns_tid == 0 { None } else { self.find_tstate(mem, st, ns_tid)? };
        let Some((ts, ident)) = found else {
            return Ok(self.stack(mem, 0, &[], None));
        };
        let m = Match { ts, ident, pthread_off: st.pthread_tid, ns_tid };
        // Two reads that agree, the second and a third if they did not.
        let (_, mut prev) = self.read_chain(mem, &m)?;
        for _ in 0..2 {
            let (tblock, next) = self.read_chain(mem, &m)?;
            if next == prev {
                return Ok(self.stack(mem, ts, &tblock, Some(next)));
            }
            prev = next;
        }
        Err(WalkError::Changing)
    }

    /// The stack of thread state `ts` (0: none) whose block is `tblock`, with its frames `chain`.
    fn stack<M: ReadMem>(&self, mem: &M, ts: u64, tblock: &[u8], chain: Option<Chain>) -> WalkedStack {
        use types::{pyperf_gil_state as g, pyperf_pthread_id as p};
        let c = &self.config;
        let (mut gil, global_ts, gil_wait_base) = self.gil_state(mem, ts, tblock);
        let thread_state = if c.tstate_current_addr != 0 || c.off.global_from_gil != 0 {
            thread_state_match(ts, global_ts)
        } else {
            types::pyperf_thread_state::THREAD_STATE_UNKNOWN.0 as u8
        };
        // 3.15+: a thread that asked for the GIL and does not hold it is waiting for it.
        if ts != 0
            && c.off.tstate_gil_requested >= 0
            && u32::from(gil) != g::GIL_STATE_THIS_THREAD.0
            && s32_in(tblock, c.off.tstate_gil_requested) != 0
        {
            gil = g::GIL_STATE_WAITING.0 as u8;
        }
        let pthread_id = if ts == 0 {
            p::PTHREAD_ID_THREAD_STATE_NULL
        } else if self.pthread {
            p::PTHREAD_ID_MATCH
        } else {
            p::PTHREAD_ID_UNKNOWN
        }
        .0 as u8;
        let has_locals = self.config.off.frame_localsplus >= 0;
        let coro_roots = chain.as_ref().map(|ch| ch.roots.clone()).unwrap_or_default();
        let (frames, locals, mut status) = match chain {
            Some(ch) => (
                ch.frames.iter().map(|&(code, instr, check, _, _)| RawFrame { code, instr, check }).collect(),
                ch.frames
                    .iter()
                    .filter(|_| has_locals)
                    .map(|&(_, _, _, first_local, first_local_type)| RawLocal { first_local, first_local_type })
                    .collect(),
                ch.status,
            ),
            None => (Vec::new(), Vec::new(), COMPLETE),
        };
        if status == COMPLETE && frames.is_empty() {
            status = IDLE;
        }
        WalkedStack { frames, locals, status, gil, thread_state, pthread_id, gil_wait_base, coro_roots }
    }

    /// The thread state of `ns_tid` and the `pthread_t` it was matched by (2.7-3.10), or `None` when it has none:
    /// from the last scan if it is still the thread's, else from a new scan of the thread lists.
    fn find_tstate<M: ReadMem>(&self, mem: &M, st: &mut State, ns_tid: u32) -> Result<Option<(u64, u64)>, WalkError> {
        let mut scanned = false;
        loop {
            if st.tstates.is_none() {
                st.tstates = Some(self.scan(mem, st)?);
                scanned = true;
            }
            match st.tstates.as_ref().and_then(|m| m.get(&ns_tid).copied()) {
                Some(Found::One { ts, ident }) => {
                    let m = Match { ts, ident, pthread_off: st.pthread_tid, ns_tid };
                    match self.tstate_block(mem, &m) {
                        Ok(Some(_)) => return Ok(Some((ts, ident))),
                        Ok(None) if scanned => return Err(WalkError::Gone),
                        Err(e) if scanned => return Err(e),
                        // Found by an earlier scan, and gone since (freed, or another thread's now).
                        _ => {}
                    }
                }
                Some(Found::Ambiguous) if scanned => return Err(WalkError::Ambiguous),
                None if scanned => {
                    return if st.unmatched { Err(WalkError::UnknownPthreadTid) } else { Ok(None) };
                }
                _ => {}
            }
            // Not found (or no longer the thread's) in an earlier scan: scan again, once.
            st.tstates = None;
        }
    }

    /// The thread states of the process's thread lists by tid, the first of each tid (list order, the main
    /// interpreter's first: the program's choice).
    fn scan<M: ReadMem>(&self, mem: &M, st: &mut State) -> Result<HashMap<u32, Found>, WalkError> {
        let c = &self.config;
        let o = &c.off;
        let list = WalkError::Unreadable("the interpreter list");
        let mut interp = read_u64(mem, c.interp_head_addr).ok_or(list.clone())?;
        // (thread state, match value: native tid or pthread_t), in list order.
        let mut states: Vec<(u64, u64)> = Vec::new();
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 {
                break;
            }
            let head = at(interp, o.interp_tstate_head).and_then(|a| read_u64(mem, a)).ok_or(list.clone())?;
            let mut ts = head;
            while ts != 0 {
                if states.len() >= MAX_THREAD_STATES {
                    return Err(WalkError::TooManyThreads);
                }
                let b = block(mem, ts, o.tstate_size, TSTATE_BUF).ok_or(WalkError::Unreadable("a thread state"))?;
                let key = if self.pthread { o.tstate_thread_id } else { o.tstate_native_thread_id };
                states.push((ts, u64_in(&b, key)));
                ts = u64_in(&b, o.tstate_next);
            }
            interp = match at(interp, self.interp_next) {
                Some(a) => read_u64(mem, a).ok_or(list.clone())?,
                None => 0,
            };
        }
        let mut out = HashMap::new();
        st.unmatched = false;
        if !self.pthread {
            for (ts, native) in states {
                // 0: a thread state not bound to its thread yet, matched by no thread (as in the program).
                match u32::try_from(native) {
                    Ok(0) | Err(_) => {}
                    Ok(tid) => {
                        out.entry(tid).or_insert(Found::One { ts, ident: 0 });
                    }
                }
            }
            return Ok(out);
        }
        // 2.7-3.10: each distinct pthread_t that is a thread control block, and what it holds at each candidate.
        let mut blocks: HashMap<u64, Option<Vec<u32>>> = HashMap::new();
        for &(_, ident) in &states {
            if ident == 0 || blocks.contains_key(&ident) {
                continue;
            }
            let tcb = at(ident, TCB_SELF).and_then(|a| read_u64(mem, a)) == Some(ident);
            let values = tcb
                .then(|| {
                    PTHREAD_TID_CANDIDATES.iter().map(|&off| at(ident, off).and_then(|a| read_u32(mem, a))).collect()
                })
                .flatten();
            blocks.insert(ident, values);
        }
        let plausible = |i: usize| {
            let mut seen = std::collections::HashSet::new();
            blocks.values().flatten().all(|v| v[i] == 0 || (u64::from(v[i]) < PID_MAX_LIMIT && seen.insert(v[i])))
        };
        if st.pthread_tid.is_none() {
            let ns_pid = self.ns_pid;
            let mut confirmed = (0..PTHREAD_TID_CANDIDATES.len())
                .filter(|&i| blocks.values().flatten().any(|v| v[i] == ns_pid) && plausible(i));
            let first = confirmed.next();
            st.pthread_tid = match (first, confirmed.next()) {
                (Some(i), None) => Some(PTHREAD_TID_CANDIDATES[i]),
                _ => return Err(WalkError::UnknownPthreadTid),
            };
        }
        let i = PTHREAD_TID_CANDIDATES.iter().position(|&o| Some(o) == st.pthread_tid).unwrap_or(0);
        for (ts, ident) in states {
            match blocks.get(&ident) {
                Some(Some(v)) if v[i] != 0 => {
                    let e = out.entry(v[i]).or_insert(Found::One { ts, ident });
                    if matches!(*e, Found::One { ident: other, .. } if other != ident) {
                        *e = Found::Ambiguous;
                    }
                }
                // An exited thread's block (tid 0): no thread of the process.
                Some(Some(_)) => {}
                // A pthread_t that is no control block (or unreadable): its thread cannot be told.
                Some(None) => st.unmatched = true,
                // thread_id 0: bound to no thread (the program matches it to none either).
                None => {}
            }
        }
        Ok(out)
    }

    /// The block of thread state `m.ts`, if it is (still) the one of thread `m.ns_tid`.
    fn tstate_block<M: ReadMem>(&self, mem: &M, m: &Match) -> Result<Option<Vec<u8>>, WalkError> {
        let o = &self.config.off;
        let b = block(mem, m.ts, o.tstate_size, TSTATE_BUF).ok_or(WalkError::Unreadable("a thread state"))?;
        let ours = if self.pthread {
            // 2.7-3.10: the same pthread_t, whose control block still holds the tid.
            m.ident != 0
                && u64_in(&b, o.tstate_thread_id) == m.ident
                && at(m.ident, TCB_SELF).and_then(|a| read_u64(mem, a)) == Some(m.ident)
                && m.pthread_off.and_then(|off| at(m.ident, off)).and_then(|a| read_u32(mem, a)) == Some(m.ns_tid)
        } else {
            u64_in(&b, o.tstate_native_thread_id) == u64::from(m.ns_tid)
        };
        Ok(ours.then_some(b))
    }

    /// One read of thread state `ts` (checked to be thread `ns_tid`'s) and of its frame chain.
    fn read_chain<M: ReadMem>(&self, mem: &M, m: &Match) -> Result<(Vec<u8>, Chain), WalkError> {
        let o = &self.config.off;
        let b = self.tstate_block(mem, m)?.ok_or(WalkError::Gone)?;
        // Leaf frame: tstate->frame / ->current_frame, or tstate->cframe->current_frame.
        let leaf = if o.tstate_frame >= 0 {
            u64_in(&b, o.tstate_frame)
        } else {
            let cframe = u64_in(&b, o.tstate_cframe);
            match (cframe, at(cframe, o.cframe_current_frame)) {
                (0, _) | (_, None) => 0,
                (_, Some(a)) => read_u64(mem, a).ok_or(WalkError::Unreadable("the current frame"))?,
            }
        };
        let base = if o.tstate_base_frame >= 0 { u64_in(&b, o.tstate_base_frame) } else { 0 };
        let chain = self.frames(mem, leaf, base);
        Ok((b, chain))
    }

    /// The frame chain from `leaf`: `frame_walk_step` of the program, step for step.
    fn frames<M: ReadMem>(&self, mem: &M, leaf: u64, base: u64) -> Chain {
        let c = &self.config;
        let o = &c.off;
        let mut ch = Chain { leaf, base, visited: Vec::new(), frames: Vec::new(), roots: Vec::new(), status: COMPLETE };
        if leaf == 0 {
            return ch;
        }
        // Run roots (the program's end_run): the owner of generator frames when tracked (else 256, no u8), and the
        // open run's rootmost frame so far.
        let gen_owner = if c.track_tasks != 0 { i32::from(o.owner_generator) } else { 256 };
        let mut run: Option<(usize, u64)> = None;
        let fsz = o.frame_size;
        let (mut last_code, mut last_check, mut last_argcount) = (0u64, 0u32, 0i32);
        let mut cur = leaf;
        let mut reached_base = false;
        for _ in 0..MAX_WALK {
            if cur == 0 {
                break;
            }
            if cur == base {
                reached_base = true;
                break;
            }
            ch.visited.push(cur);
            let here = cur;
            let Some(fb) = block(mem, cur, fsz, FRAME_BUF) else {
                ch.status = ERROR;
                break;
            };
            cur = u64_in(&fb, o.frame_back);
            let owner = u8_in(&fb, o.frame_owner);
            if o.owner_cstack >= 0 && owner >= i32::from(o.owner_cstack) {
                ch.roots.extend(run.take());
                mark_entry(&mut ch.frames);
                continue; // the interpreter's own frame (C-stack shim, entry frame): it ends a run
            }
            let code = u64_in(&fb, o.frame_code) & c.code_mask;
            if c.skip_code != 0 && code == c.skip_code {
                ch.roots.extend(run.take());
                mark_entry(&mut ch.frames);
                continue; // 3.13+: f_executable == Py_None, a C-stack entry frame
            }
            if code == 0 {
                ch.status = ERROR;
                break;
            }
            if ch.frames.len() >= MAX_FRAMES {
                ch.status = TRUNCATED;
                break;
            }
            // 31 bits of position, the top bit for the entry flag (as the program keeps them).
            let mut instr = match u32::from(o.instr_kind) {
                k if k == types::pyperf_instr_kind::INSTR_PTR_MINUS_CODE.0 => {
                    u64_in(&fb, o.frame_instr).wrapping_sub(code) as u32
                }
                k if k == types::pyperf_instr_kind::INSTR_LASTI.0 => s32_in(&fb, o.frame_instr) as u32,
                _ => 0,
            } & !INSTR_ENTRY;
            // 3.11: the first frame of an activation of the evaluation loop says so itself.
            if o.frame_is_entry >= 0 && u8_in(&fb, o.frame_is_entry) > 0 {
                instr |= INSTR_ENTRY;
            }
            let check = if code == last_code {
                last_check
            } else {
                let mut check = 0;
                last_argcount = 0;
                if o.code_span >= 0 {
                    if let Some(cb) = at(code, o.code_span).and_then(|a| block(mem, a, o.code_span_len, CODE_BUF)) {
                        check = code_check(
                            s32_in(&cb, o.check_firstlineno) as u32,
                            u64_in(&cb, o.check_filename),
                            u64_in(&cb, o.check_name),
                        );
                        if o.check_argcount >= 0 {
                            last_argcount = s32_in(&cb, o.check_argcount);
                        }
                    }
                }
                last_code = code;
                last_check = check;
                check
            };
            // <= 3.10: the first argument and its type, for the self/cls heuristic.
            let (mut first_local, mut first_local_type) = (0, 0);
            if o.frame_localsplus >= 0 && last_argcount > 0 {
                let obj = u64_in(&fb, o.frame_localsplus);
                if obj != 0 {
                    if let Some(t) = at(obj, o.object_type).and_then(|a| read_u64(mem, a)).filter(|&t| t != 0) {
                        (first_local, first_local_type) = (obj, t);
                    }
                }
            }
            // A generator frame starts or extends a run; any other ends the open one.
            if owner == gen_owner {
                run = Some((ch.frames.len(), here));
            } else {
                ch.roots.extend(run.take());
            }
            ch.frames.push((code, instr, check, first_local, first_local_type));
        }
        ch.roots.extend(run.take()); // the end of the walk ends a run
        if ch.status == COMPLETE && cur != 0 && !reached_base {
            ch.status = TRUNCATED; // the step bound (many skipped frames, or a loop of them)
        }
        if ch.status == COMPLETE && base != 0 && !reached_base {
            ch.status = INCOMPLETE; // ended on a NULL link above the base frame
        }
        ch
    }

    /// The program's `gil_state`: (state, global current thread state, GIL-wait base).
    fn gil_state<M: ReadMem>(&self, mem: &M, this_ts: u64, tblock: &[u8]) -> (u8, u64, u64) {
        use types::{pyperf_gil_kind as k, pyperf_gil_state as g};
        let c = &self.config;
        let o = &c.off;
        let state = |s: g| s.0 as u8;
        let kind = u32::from(o.gil_kind);
        let mut gil = c.gil_addr;
        let mut global_ts = 0;
        let mut wait_base = 0;
        let mut gbuf = Vec::new();
        if kind != k::GIL_KIND_NONE.0 {
            if gil == 0 && o.interp_gil_ptr >= 0 {
                // 3.12+: per-interpreter pointer, interp = tstate->interp, or the main interpreter.
                let interp = if this_ts != 0 {
                    u64_in(tblock, o.tstate_interp)
                } else {
                    match read_u64(mem, c.interp_head_addr) {
                        Some(i) if i != 0 => i,
                        _ => return (state(g::GIL_STATE_NO_INFO), 0, 0),
                    }
                };
                let Some(ptr) =
                    (interp != 0).then(|| at(interp, o.interp_gil_ptr).and_then(|a| read_u64(mem, a))).flatten()
                else {
                    return (state(g::GIL_STATE_ERROR), 0, 0);
                };
                if ptr == 0 {
                    return (state(g::GIL_STATE_UNINITIALIZED), 0, 0);
                }
                gil = ptr;
                wait_base = ptr;
            }
            match (gil != 0).then(|| block(mem, gil, o.gil_size, GIL_BUF)).flatten() {
                Some(b) => gbuf = b,
                None => gil = 0,
            }
        }
        if c.tstate_current_addr != 0 {
            global_ts = if gil != 0 && o.gil_tstate_current >= 0 {
                u64_in(&gbuf, o.gil_tstate_current)
            } else {
                read_u64(mem, c.tstate_current_addr).unwrap_or(0)
            };
        }
        if kind == k::GIL_KIND_NONE.0 {
            return (state(g::GIL_STATE_NO_INFO), global_ts, wait_base);
        }
        if gil == 0 {
            return (state(g::GIL_STATE_ERROR), global_ts, wait_base);
        }
        if kind == k::GIL_KIND_LOCK_PTR.0 {
            // 2.7: no lock yet = single-threaded so far.
            wait_base = u64_in(&gbuf, o.gil_locked);
            let s = if wait_base == 0 {
                g::GIL_STATE_UNINITIALIZED
            } else if global_ts == 0 {
                g::GIL_STATE_NOT_LOCKED
            } else if global_ts == this_ts {
                g::GIL_STATE_THIS_THREAD
            } else {
                g::GIL_STATE_GLOBAL_CURRENT_THREAD
            };
            return (state(s), global_ts, wait_base);
        }
        let s = match s32_in(&gbuf, o.gil_locked) {
            -1 => g::GIL_STATE_UNINITIALIZED,
            0 => g::GIL_STATE_NOT_LOCKED,
            1 => {
                let holder = if c.gil_holder_addr != 0 {
                    match read_u64(mem, c.gil_holder_addr) {
                        Some(h) => h,
                        None => return (state(g::GIL_STATE_ERROR), global_ts, wait_base),
                    }
                } else {
                    u64_in(&gbuf, o.gil_last_holder)
                };
                if o.global_from_gil != 0 {
                    global_ts = holder;
                }
                if holder == 0 {
                    g::GIL_STATE_NULL
                } else if holder == this_ts {
                    g::GIL_STATE_THIS_THREAD
                } else if holder == global_ts {
                    g::GIL_STATE_GLOBAL_CURRENT_THREAD
                } else {
                    g::GIL_STATE_OTHER_THREAD
                }
            }
            _ => g::GIL_STATE_ERROR,
        };
        (state(s), global_ts, wait_base)
    }
}

/// The program's `thread_state_match`.
fn thread_state_match(this_ts: u64, global_ts: u64) -> u8 {
    use types::pyperf_thread_state as t;
    match (this_ts, global_ts) {
        (0, 0) => t::THREAD_STATE_BOTH_NULL,
        (0, _) => t::THREAD_STATE_THIS_THREAD_NULL,
        (_, 0) => t::THREAD_STATE_GLOBAL_CURRENT_THREAD_NULL,
        (a, b) if a == b => t::THREAD_STATE_MATCH,
        _ => t::THREAD_STATE_MISMATCH,
    }
    .0 as u8
}

/// 3.12+: the walk skipped an interpreter frame (a C-stack shim or entry frame): the Python frame before it, if any, is
/// the rootmost of its activation of the evaluation loop (the program's `mark_entry`).
fn mark_entry(frames: &mut [(u64, u32, u32, u64, u64)]) {
    if let Some(f) = frames.last_mut() {
        f.1 |= INSTR_ENTRY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::config::bpf_config;
    use crate::python::detect::PythonAddrs;
    use crate::python::linetable::Instr;
    use crate::python::testing::{self, FakeMem as Mem};
    use crate::python::versions::{row_for, Frames, ROWS};
    use std::cell::Cell;

    use types::pyperf_gil_state as g;

    /// Bytes a struct of these field offsets needs.
    fn size_of(offs: &[i32]) -> usize {
        offs.iter().copied().max().unwrap_or(0).max(0) as usize + 64
    }

    /// Frames are put side by side in one arena, `FRAME_STRIDE` bytes apart.
    const FRAME_STRIDE: u64 = 512;
    const ARENA_FRAMES: u64 = 8192;

    /// A code object: its address, first line and check word.
    #[derive(Clone, Copy)]
    struct Code {
        addr: u64,
        check: u32,
    }

    /// What a frame holds.
    #[derive(Clone, Copy, Default)]
    struct F {
        /// The code pointer as stored (tag bits and all).
        code: u64,
        back: u64,
        /// Code units executed.
        units: u32,
        owner: u8,
        first_local: u64,
    }

    /// A process of one row's layout in a [`Mem`], configured by the real [`bpf_config`].
    struct Sim {
        mem: Mem,
        row: &'static Row,
        config: ProcConfig,
        interp: u64,
        /// &_Py_NoneStruct.
        none: u64,
        /// The GIL block (3.7+: the runtime's or the interpreter's `_gil_runtime_state`), with `gil_locked` and
        /// `gil_last_holder` at the layout's offsets; 0 before 3.7.
        gil: u64,
        arena: u64,
        frames: Cell<u64>,
    }

    impl Sim {
        fn new(row: &'static Row) -> Sim {
            let mem = Mem::default();
            let l = row.layout;
            let v = row.version;
            let mut addrs = PythonAddrs::default();
            let mut gil = 0;
            if v >= (3, 7) {
                let rt = mem.zeros(size_of(&[
                    l.runtime_interpreters_head,
                    l.runtime_tstate_current,
                    l.runtime_gil_locked,
                    l.runtime_gil_last_holder,
                ]));
                addrs.runtime = Some(rt);
                if l.runtime_gil_locked >= 0 {
                    gil = rt + (l.runtime_gil_locked - l.gil_locked) as u64;
                }
            } else {
                addrs.interp_head = Some(mem.zeros(64));
                addrs.tstate_current = Some(mem.zeros(64));
                if v.0 == 2 {
                    addrs.interpreter_lock = Some(mem.zeros(64));
                } else {
                    addrs.gil_locked = Some(mem.zeros(64));
                    addrs.gil_last_holder = Some(mem.zeros(64));
                }
            }
            let none = mem.zeros(64);
            addrs.none = Some(none);
            let p = testing::process((v.0, v.1, 0), row, addrs);
            let config = bpf_config(&p, false, true).unwrap_or_else(|e| panic!("{v:?}: {e}"));
            let interp = mem.zeros(size_of(&[l.interp_tstate_head, l.interp_next, l.interp_gil_ptr]));
            mem.u64(config.interp_head_addr, 0, interp);
            if l.interp_gil_ptr >= 0 {
                gil = mem.zeros(size_of(&[l.gil_locked, l.gil_last_holder]));
                mem.u64(interp, l.interp_gil_ptr, gil);
            }
            let arena = mem.zeros((FRAME_STRIDE * ARENA_FRAMES) as usize);
            Sim { mem, row, config, interp, none, gil, arena, frames: Cell::new(0) }
        }

        fn l(&self) -> &'static crate::python::layout::Layout {
            self.row.layout
        }

        fn pthread(&self) -> bool {
            self.config.off.match_kind as u32 == types::pyperf_match_kind::MATCH_PTHREAD.0
        }

        /// A thread state for kernel thread `tid`, first in the main interpreter's list; on 2.7-3.10 with a glibc
        /// `struct pthread` holding `tid`.
        fn thread(&self, tid: u32) -> u64 {
            let l = self.l();
            let ts = self.mem.zeros(size_of(&[
                l.tstate_next,
                l.tstate_interp,
                l.tstate_frame,
                l.tstate_cframe,
                l.tstate_current_frame,
                l.tstate_thread_id,
                l.tstate_native_thread_id,
                l.tstate_base_frame,
                l.tstate_gil_requested,
            ]));
            self.mem.u64(ts, l.tstate_interp, self.interp);
            let tcb = self.tcb(tid);
            self.mem.u64(ts, l.tstate_thread_id, tcb);
            if l.tstate_native_thread_id >= 0 {
                self.mem.u64(ts, l.tstate_native_thread_id, u64::from(tid));
            }
            if l.tstate_base_frame >= 0 {
                // 3.15+: every thread state has its base frame (embedded in it in CPython; anywhere here).
                let base = self.frame(F::default());
                self.mem.u64(ts, l.tstate_base_frame, base);
            }
            let head = self.mem.get_u64(self.interp + l.interp_tstate_head as u64);
            self.mem.u64(ts, l.tstate_next, head);
            self.mem.u64(self.interp, l.interp_tstate_head, ts);
            ts
        }

        /// A glibc thread control block (`struct pthread`) of thread `tid`.
        fn tcb(&self, tid: u32) -> u64 {
            let tcb = self.mem.zeros(4096);
            self.mem.u64(tcb, TCB_SELF as i32, tcb);
            self.mem.u32(tcb, PTHREAD_TID_CANDIDATES[0] as i32, tid);
            tcb
        }

        /// A code object first at line `line`, taking `args` arguments.
        fn code(&self, line: u32, args: i32) -> Code {
            let l = self.l();
            let c = self.mem.zeros(l.code_size as usize);
            let file = self.mem.zeros(64);
            let name = self.mem.zeros(64);
            self.mem.u32(c, l.code_firstlineno, line);
            self.mem.u32(c, l.code_argcount, args as u32);
            self.mem.u64(c, l.code_filename, file);
            self.mem.u64(c, l.code_name, name);
            Code { addr: c, check: code_check(line, file, name) }
        }

        /// An object of a type of its own: (object, type).
        fn object(&self) -> (u64, u64) {
            let t = self.mem.zeros(64);
            let o = self.mem.zeros(64);
            self.mem.u64(o, self.l().object_type, t);
            (o, t)
        }

        /// A frame in the arena.
        fn frame(&self, f: F) -> u64 {
            let n = self.frames.get();
            assert!(n < ARENA_FRAMES);
            self.frames.set(n + 1);
            let at = self.arena + n * FRAME_STRIDE;
            self.set_frame(at, f);
            at
        }

        fn set_frame(&self, at: u64, f: F) {
            let l = self.l();
            self.mem.u64(at, l.frame_back, f.back);
            self.mem.u64(at, l.frame_code, f.code);
            match self.row.instr {
                Instr::FromCode => {
                    let code = f.code & self.row.code_tag_mask;
                    self.mem.u64(at, l.frame_instr, code + l.code_code as u64 + 2 * u64::from(f.units))
                }
                Instr::LastiBytes | Instr::LastiUnits => self.mem.u32(at, l.frame_lasti, f.units),
            }
            if l.frame_owner >= 0 {
                self.mem.write(at + l.frame_owner as u64, &[f.owner]);
            }
            if l.frame_localsplus >= 0 {
                self.mem.u64(at, l.frame_localsplus, f.first_local);
            }
        }

        /// Where the instruction position of a frame is.
        fn instr_at(&self, frame: u64) -> u64 {
            let l = self.l();
            frame + if self.row.instr == Instr::FromCode { l.frame_instr } else { l.frame_lasti } as u64
        }

        /// The raw instruction position BPF reports for `units` executed of a code object.
        fn instr(&self, units: u32) -> u32 {
            match self.row.instr {
                Instr::FromCode => self.l().code_code as u32 + 2 * units,
                _ => units,
            }
        }

        fn set_leaf(&self, ts: u64, leaf: u64) {
            let l = self.l();
            match self.row.frames {
                Frames::Object => self.mem.u64(ts, l.tstate_frame, leaf),
                Frames::Current => self.mem.u64(ts, l.tstate_current_frame, leaf),
                Frames::CFrame => {
                    let cf = self.mem.zeros(64);
                    self.mem.u64(cf, l.cframe_current_frame, leaf);
                    self.mem.u64(ts, l.tstate_cframe, cf);
                }
            }
        }

        fn walker(&self, ns_pid: u32) -> StackWalker<&Mem> {
            StackWalker::new(&self.mem, &self.config, self.row, ns_pid)
        }

        /// A frame of the interpreter's own (3.12+: owned by the C stack), to be skipped.
        fn shim(&self, back: u64) -> u64 {
            let owner = self.row.hidden_owners_from.expect("3.12+");
            let c = self.code(999, 0);
            self.frame(F { code: c.addr, back, units: 1, owner, ..F::default() })
        }

        /// The first GIL state the program gives a thread that does not hold it, while no thread does.
        fn gil_free(&self) -> u8 {
            if self.row.version.0 == 2 { g::GIL_STATE_UNINITIALIZED } else { g::GIL_STATE_NOT_LOCKED }.0 as u8
        }
    }

    /// (code, instr, check, first_local, first_local_type) of a stack's frames.
    fn tuples(s: &WalkedStack) -> Vec<(u64, u32, u32, u64, u64)> {
        let local = |i: usize| s.locals.get(i).map_or((0, 0), |l| (l.first_local, l.first_local_type));
        s.frames.iter().enumerate().map(|(i, f)| (f.code, f.instr, f.check, local(i).0, local(i).1)).collect()
    }

    /// 3.11+: the run roots of generator frames, as the program keeps them: `handle` -> [entry] -> coroutines
    /// `child` -> `mid` -> `leaf` -> [entry] -> generator `gen` -> `h`, the entry frames where the version has them
    /// (3.12: C-stack shims; 3.13+: a `Py_None` one for the generator, to take that path too); 3.11 chains the
    /// generator to `leaf` directly (one run). None with tracking off.
    #[test]
    fn run_roots_of_generator_frames() {
        for row in ROWS.iter().filter(|r| r.version >= (3, 11)) {
            let v = row.version;
            for track in [true, false] {
                let mut s = Sim::new(row);
                s.config.track_tasks = u8::from(track);
                let t = s.thread(500);
                let base =
                    if s.l().tstate_base_frame >= 0 { s.mem.get_u64(t + s.l().tstate_base_frame as u64) } else { 0 };
                let gen_owner = u8::try_from(s.config.off.owner_generator).expect("3.11+: an owner");
                let code = |n| s.code(n, 0).addr;
                let coro = |c, back| s.frame(F { code: code(c), back, units: 1, owner: gen_owner, ..F::default() });
                let handle = s.frame(F { code: code(1), back: base, units: 1, ..F::default() });
                let below_child = if row.hidden_owners_from.is_some() { s.shim(handle) } else { handle };
                let child = coro(2, below_child);
                let mid = coro(3, child);
                let leaf = coro(4, mid);
                let below_gen = if row.none_is_entry {
                    s.frame(F { code: s.none, back: leaf, ..F::default() })
                } else if row.hidden_owners_from.is_some() {
                    s.shim(leaf)
                } else {
                    leaf
                };
                let gen = coro(5, below_gen);
                let h = s.frame(F { code: code(6), back: gen, units: 1, ..F::default() });
                s.set_leaf(t, h);
                let got = s.walker(500).walk(500).unwrap_or_else(|e| panic!("{v:?}: {e}"));
                assert_eq!(got.frames.len(), 6, "{v:?}");
                let want = match (track, v >= (3, 12)) {
                    (false, _) => vec![],
                    (true, true) => vec![(1, gen), (4, child)],
                    (true, false) => vec![(4, child)],
                };
                assert_eq!(got.coro_roots, want, "{v:?} tracked {track}");
            }
        }
    }

    /// On every row: a thread in `<module>` -> `f(self)` -> `g` -> `g` (recursion), with the interpreter's own
    /// frames between them where the version has them (3.12+ C-stack shims, 3.13+ `Py_None` entry frames), tagged
    /// code pointers (3.14+), the base frame at the bottom (3.15+): the frames BPF would report, leaf first, with
    /// their positions, check words and (<= 3.10) the first argument. A thread with a thread state and no frame,
    /// a thread without one, tid 0: IDLE.
    #[test]
    fn walks_the_frames_bpf_walks_on_every_version() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let main = s.thread(500);
            let worker = s.thread(501);
            let _idle = s.thread(502);
            let module = s.code(1, 0);
            let f = s.code(10, 1);
            let gc = s.code(20, 0);
            let (obj, obj_type) = s.object();
            let tag = if row.code_tag_mask == u64::MAX { 0 } else { 1 };
            let base =
                if s.l().tstate_base_frame >= 0 { s.mem.get_u64(worker + s.l().tstate_base_frame as u64) } else { 0 };
            let m = s.frame(F { code: module.addr | tag, back: base, units: 3, ..F::default() });
            let below_f = if row.hidden_owners_from.is_some() { s.shim(m) } else { m };
            let ff = s.frame(F { code: f.addr, back: below_f, units: 5, first_local: obj, ..F::default() });
            let below_g = if row.none_is_entry { s.frame(F { code: s.none, back: ff, ..F::default() }) } else { ff };
            let g1 = s.frame(F { code: gc.addr | tag, back: below_g, units: 7, ..F::default() });
            let g2 = s.frame(F { code: gc.addr, back: g1, units: 9, ..F::default() });
            s.set_leaf(worker, g2);
            let main_leaf = s.frame(F { code: module.addr, back: 0, units: 2, ..F::default() });
            s.set_leaf(main, main_leaf);

            let mut w = s.walker(500);
            let got = w.walk(501).unwrap_or_else(|e| panic!("{v:?}: {e}"));
            let first = if v <= (3, 10) { (obj, obj_type) } else { (0, 0) };
            // The rootmost frame of an activation (a skipped interpreter frame below it) carries the entry flag.
            let entry = |on: bool| if on { INSTR_ENTRY } else { 0 };
            let want = vec![
                (gc.addr, s.instr(9), gc.check, 0, 0),
                (gc.addr, s.instr(7) | entry(row.none_is_entry), gc.check, 0, 0),
                (f.addr, s.instr(5) | entry(row.hidden_owners_from.is_some()), f.check, first.0, first.1),
                (module.addr, s.instr(3), module.check, 0, 0),
            ];
            assert_eq!(tuples(&got), want, "{v:?}");
            assert_eq!(got.status, COMPLETE, "{v:?}");
            assert_eq!(got.gil, s.gil_free(), "{v:?}");
            let pthread = if s.pthread() {
                types::pyperf_pthread_id::PTHREAD_ID_MATCH
            } else {
                types::pyperf_pthread_id::PTHREAD_ID_UNKNOWN
            };
            assert_eq!(got.pthread_id, pthread.0 as u8, "{v:?}");

            let got = w.walk(500).unwrap();
            assert_eq!(tuples(&got), vec![(module.addr, s.instr(2), module.check, 0, 0)], "{v:?}");
            // 3.15: a chain that ends on a NULL link, not at the thread's base frame: incomplete.
            assert_eq!(got.status, if base != 0 { INCOMPLETE } else { COMPLETE }, "{v:?}");
            for tid in [502, 777, 0] {
                let got = w.walk(tid).unwrap_or_else(|e| panic!("{v:?} {tid}: {e}"));
                assert_eq!((got.frames.len(), got.status), (0, IDLE), "{v:?} {tid}");
                assert_eq!(got.gil, s.gil_free(), "{v:?} {tid}");
            }
            let none = types::pyperf_pthread_id::PTHREAD_ID_THREAD_STATE_NULL.0 as u8;
            assert_eq!(w.walk(777).unwrap().pthread_id, none, "{v:?}");
        }
    }

    /// The GIL as the program reads it: held by the walked thread, by another, waited for (3.15+).
    #[test]
    fn gil_states() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let a = s.thread(500);
            let b = s.thread(501);
            for ts in [a, b] {
                let c = s.code(1, 0);
                let leaf = s.frame(F { code: c.addr, units: 1, ..F::default() });
                s.set_leaf(ts, leaf);
            }
            let mut w = s.walker(500);
            let l = s.l();
            if s.gil != 0 {
                // 3.7+: locked, held by `a`.
                s.mem.u32(s.gil, l.gil_locked, 1);
                s.mem.u64(s.gil, l.gil_last_holder, a);
                assert_eq!(w.walk(500).unwrap().gil, g::GIL_STATE_THIS_THREAD.0 as u8, "{v:?}");
                let other = if v >= (3, 12) { g::GIL_STATE_GLOBAL_CURRENT_THREAD } else { g::GIL_STATE_OTHER_THREAD };
                assert_eq!(w.walk(501).unwrap().gil, other.0 as u8, "{v:?}");
                if v >= (3, 12) {
                    assert_eq!(w.walk(501).unwrap().gil_wait_base, s.gil, "{v:?}");
                }
                if l.tstate_gil_requested >= 0 {
                    s.mem.u32(b, l.tstate_gil_requested, 1);
                    assert_eq!(w.walk(501).unwrap().gil, g::GIL_STATE_WAITING.0 as u8, "{v:?}");
                }
                s.mem.u32(s.gil, l.gil_locked, u32::MAX);
                assert_eq!(w.walk(500).unwrap().gil, g::GIL_STATE_UNINITIALIZED.0 as u8, "{v:?}");
            } else if v.0 == 2 {
                // 2.7: the lock exists, `b` is the current thread.
                let sem = s.mem.zeros(64);
                s.mem.u64(s.config.gil_addr, s.config.off.gil_locked as i32, sem);
                s.mem.u64(s.config.tstate_current_addr, 0, b);
                let got = w.walk(501).unwrap();
                assert_eq!((got.gil, got.gil_wait_base), (g::GIL_STATE_THIS_THREAD.0 as u8, sem), "{v:?}");
                let t = types::pyperf_thread_state::THREAD_STATE_MATCH.0 as u8;
                assert_eq!(got.thread_state, t, "{v:?}");
                assert_eq!(w.walk(500).unwrap().gil, g::GIL_STATE_GLOBAL_CURRENT_THREAD.0 as u8, "{v:?}");
            }
        }
    }

    /// A chain deeper than [`MAX_FRAMES`]: the leaf-nearest frames, TRUNCATED. A loop of frames: the same, bounded.
    /// A loop of frames the walk skips (3.12+ shims): TRUNCATED at the step bound, no frames.
    #[test]
    fn deep_and_looping_chains_are_truncated() {
        for v in [(2, 7), (3, 10), (3, 11), (3, 12), (3, 14)] {
            let row = row_for(v.0, v.1).unwrap();
            let s = Sim::new(row);
            let ts = s.thread(500);
            let c = s.code(4, 0);
            let mut back = 0;
            let n = MAX_FRAMES as u32 + 2;
            for i in 0..n {
                back = s.frame(F { code: c.addr, back, units: i, ..F::default() });
            }
            s.set_leaf(ts, back);
            let mut w = s.walker(500);
            let got = w.walk(500).unwrap();
            assert_eq!((got.frames.len(), got.status), (MAX_FRAMES, TRUNCATED), "{v:?}");
            assert_eq!(got.frames[0].instr, s.instr(n - 1), "{v:?}: leaf first");
            assert_eq!(got.frames[MAX_FRAMES - 1].instr, s.instr(2), "{v:?}");

            let lp = s.frame(F::default());
            s.set_frame(lp, F { code: c.addr, back: lp, units: 1, ..F::default() });
            s.set_leaf(ts, lp);
            let got = w.walk(500).unwrap();
            assert_eq!((got.frames.len(), got.status), (MAX_FRAMES, TRUNCATED), "{v:?}");

            if row.hidden_owners_from.is_some() {
                let shim = s.shim(0);
                s.mem.u64(shim, s.l().frame_back, shim);
                s.set_leaf(ts, shim);
                let got = w.walk(500).unwrap();
                assert_eq!((got.frames.len(), got.status), (0, TRUNCATED), "{v:?}");
            }
        }
    }

    /// A frame without a code object or a link to unmapped memory ends the walk: ERROR, with the frames above it.
    /// A code object that cannot be read is still a frame, with check word 0 (user space will not name it).
    #[test]
    fn broken_chains_are_errors() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let ts = s.thread(500);
            let c = s.code(4, 0);
            let m = s.frame(F { code: c.addr, units: 1, ..F::default() });
            let no_code = s.frame(F { code: 0, back: m, ..F::default() });
            let leaf = s.frame(F { code: c.addr, back: no_code, units: 2, ..F::default() });
            s.set_leaf(ts, leaf);
            let mut w = s.walker(500);
            let got = w.walk(500).unwrap();
            assert_eq!(tuples(&got), vec![(c.addr, s.instr(2), c.check, 0, 0)], "{v:?}");
            assert_eq!(got.status, ERROR, "{v:?}");

            let leaf = s.frame(F { code: c.addr, back: 0xdead_0000, units: 2, ..F::default() });
            s.set_leaf(ts, leaf);
            let got = w.walk(500).unwrap();
            assert_eq!((got.frames.len(), got.status), (1, ERROR), "{v:?}");

            let lost = 0x7777_0000u64;
            let leaf = s.frame(F { code: lost, back: m, units: 2, ..F::default() });
            s.set_leaf(ts, leaf);
            let got = w.walk(500).unwrap();
            assert_eq!(got.status, if s.l().tstate_base_frame >= 0 { INCOMPLETE } else { COMPLETE }, "{v:?}");
            assert_eq!(tuples(&got), vec![(lost, s.instr(2), 0, 0, 0), (c.addr, s.instr(1), c.check, 0, 0)], "{v:?}");
        }
    }

    /// The thread ran between two reads of its frames (it returned from `g` and `f` and called `h` at their
    /// place, in the middle of the first read): the first read is spliced; the second and third agree on the new
    /// stack, which is what the walk gives. A thread whose frames change at every read: no stack, an error.
    #[test]
    fn a_changing_stack_is_read_again_never_spliced() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let ts = s.thread(500);
            let (module, f, gc, h) = (s.code(1, 0), s.code(10, 0), s.code(20, 0), s.code(30, 0));
            let m = s.frame(F { code: module.addr, units: 1, ..F::default() });
            let ff = s.frame(F { code: f.addr, back: m, units: 2, ..F::default() });
            let g1 = s.frame(F { code: gc.addr, back: ff, units: 3, ..F::default() });
            s.set_leaf(ts, g1);
            // At the first read of f's frame: g's frame holds h now, called from <module> at another position.
            let l = s.l();
            let mut pending = Vec::new();
            {
                // What set_frame would write for h at g1 with back = m, and <module>'s new position.
                let new = |at: u64, code: u64, back: u64, units: u32| {
                    s.set_frame(at, F { code, back, units, ..F::default() });
                };
                let snapshot = |at: u64| {
                    let regions = s.mem.regions.borrow();
                    let (start, data) = regions.range(..=at).next_back().unwrap();
                    let off = (at - start) as usize;
                    data[off..off + FRAME_STRIDE as usize].to_vec()
                };
                let (old_g, old_m) = (snapshot(g1), snapshot(m));
                new(g1, h.addr, m, 4);
                new(m, module.addr, 0, 5);
                pending.push((g1, snapshot(g1)));
                pending.push((m, snapshot(m)));
                s.mem.write(g1, &old_g);
                s.mem.write(m, &old_m);
            }
            *s.mem.pending.borrow_mut() = pending;
            s.mem.watch.set(Some((Some(ff), 1)));
            let mut w = s.walker(500);
            let got = w.walk(500).unwrap_or_else(|e| panic!("{v:?}: {e}"));
            let status = if l.tstate_base_frame >= 0 { INCOMPLETE } else { COMPLETE };
            assert_eq!(
                tuples(&got),
                vec![(h.addr, s.instr(4), h.check, 0, 0), (module.addr, s.instr(5), module.check, 0, 0)],
                "{v:?}"
            );
            assert_eq!(got.status, status, "{v:?}");
            // f's frame was read once, by the first (spliced) read; the two after it agree without it.
            assert_eq!(s.mem.watched.get(), 1, "{v:?}");

            // Never still: every read sees another position of the leaf frame.
            s.mem.watch.set(None);
            s.mem.tick.set(Some(s.instr_at(g1)));
            assert_eq!(w.walk(500).unwrap_err(), WalkError::Changing, "{v:?}");
            s.mem.tick.set(None);
            assert!(w.walk(500).is_ok(), "{v:?}");
        }
    }

    /// A thread state found by an earlier walk is checked again: the thread exited and its thread state went to
    /// another thread, the walk finds the new one's by a new scan, and the old tid has none.
    #[test]
    fn thread_states_found_earlier_are_checked_again() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let l = s.l();
            let _main = s.thread(500);
            let ts = s.thread(501);
            let c = s.code(1, 0);
            let leaf = s.frame(F { code: c.addr, units: 1, ..F::default() });
            s.set_leaf(ts, leaf);
            let mut w = s.walker(500);
            assert_eq!(w.walk(501).unwrap().frames.len(), 1, "{v:?}");
            // The same thread state now belongs to thread 503 (a new pthread for it).
            if s.pthread() {
                let tcb = s.tcb(503);
                s.mem.u64(ts, l.tstate_thread_id, tcb);
            } else {
                s.mem.u64(ts, l.tstate_native_thread_id, 503);
            }
            let got = w.walk(501).unwrap();
            assert_eq!((got.frames.len(), got.status), (0, IDLE), "{v:?}");
            assert_eq!(w.walk(503).unwrap().frames.len(), 1, "{v:?}");
        }
    }

    /// 2.7-3.10: the tid offset of glibc's `struct pthread` is used only once confirmed: the main thread's control
    /// block must hold the process's pid there, the others distinct tids (or 0: an exited thread's). A thread state
    /// whose `pthread_t` is no control block makes a thread found nowhere an error, not IDLE.
    #[test]
    fn pthread_tids_are_verified() {
        for row in ROWS.iter().filter(|r| r.version <= (3, 10)) {
            let v = row.version;
            let l = row.layout;
            let setup = || {
                let s = Sim::new(row);
                let main = s.thread(500);
                let worker = s.thread(501);
                let c = s.code(1, 0);
                let leaf = s.frame(F { code: c.addr, units: 1, ..F::default() });
                s.set_leaf(worker, leaf);
                (s, main, worker)
            };
            let (s, _, _) = setup();
            assert_eq!(s.walker(500).walk(501).unwrap().frames.len(), 1, "{v:?}");
            // The main thread's block does not hold the pid (another process's view, or another offset).
            assert_eq!(s.walker(499).walk(501).unwrap_err(), WalkError::UnknownPthreadTid, "{v:?}");
            // Two blocks hold the same value there: not tids.
            let (s, _, _) = setup();
            let _ = s.thread(501);
            assert_eq!(s.walker(500).walk(501).unwrap_err(), WalkError::UnknownPthreadTid, "{v:?}");
            // Once confirmed, a tid two blocks hold is no thread's.
            let (s, _, _) = setup();
            let mut w = s.walker(500);
            assert_eq!(w.walk(501).unwrap().frames.len(), 1, "{v:?}");
            let _ = s.thread(501);
            w.forget();
            assert_eq!(w.walk(501).unwrap_err(), WalkError::Ambiguous, "{v:?}");
            assert_eq!(w.walk(500).unwrap().status, IDLE, "{v:?}");
            // An exited thread's block (tid 0): not a thread of the process, the others still confirm the offset.
            let (s, _, _) = setup();
            let _ = s.thread(0);
            let mut w = s.walker(500);
            assert_eq!(w.walk(501).unwrap().frames.len(), 1, "{v:?}");
            assert_eq!(w.walk(777).unwrap().status, IDLE, "{v:?}");
            // A thread state whose pthread_t is not a control block: a thread found nowhere cannot be told apart.
            let (s, _, _) = setup();
            let odd = s.thread(600);
            s.mem.u64(odd, l.tstate_thread_id, 0x4242_0000);
            let mut w = s.walker(500);
            assert_eq!(w.walk(501).unwrap().frames.len(), 1, "{v:?}");
            assert_eq!(w.walk(777).unwrap_err(), WalkError::UnknownPthreadTid, "{v:?}");
            // In a PID namespace the main thread's tid is often 1.
            let s = Sim::new(row);
            let _ = s.thread(1);
            let worker = s.thread(2);
            let c = s.code(1, 0);
            let leaf = s.frame(F { code: c.addr, units: 1, ..F::default() });
            s.set_leaf(worker, leaf);
            assert_eq!(s.walker(1).walk(2).unwrap().frames.len(), 1, "{v:?}");
        }
    }

    /// A thread list that loops, or is longer than [`MAX_THREAD_STATES`]: an error, after bounded work.
    #[test]
    fn the_work_is_bounded() {
        for row in &ROWS {
            let v = row.version;
            let s = Sim::new(row);
            let ts = s.thread(500);
            s.mem.u64(ts, s.l().tstate_next, ts);
            s.mem.reads.set(0);
            s.mem.bytes.set(0);
            let got = s.walker(500).walk(501);
            assert_eq!(got.unwrap_err(), WalkError::TooManyThreads, "{v:?}");
            let (reads, bytes) = (s.mem.reads.get(), s.mem.bytes.get());
            assert!(reads <= WALK_BUDGET.ops && bytes <= WALK_BUDGET.bytes, "{v:?}: {reads} reads, {bytes} bytes");
            // The deepest walk, twice, within the budget.
            let s = Sim::new(row);
            let ts = s.thread(500);
            let c = s.code(4, 1);
            let (o, _) = s.object();
            let mut back = 0;
            for i in 0..MAX_WALK as u32 {
                // A new code object every frame: a check word (and a first local) read for each.
                let code = if i % 2 == 0 { c.addr } else { s.code(5, 1).addr };
                back = s.frame(F { code, back, units: i, first_local: o, ..F::default() });
            }
            s.set_leaf(ts, back);
            s.mem.reads.set(0);
            s.mem.bytes.set(0);
            let got = s.walker(500).walk(500).unwrap_or_else(|e| panic!("{v:?}: {e}"));
            assert_eq!(got.status, TRUNCATED, "{v:?}");
            let (reads, bytes) = (s.mem.reads.get(), s.mem.bytes.get());
            eprintln!("{v:?}: deepest walk: {reads} reads, {bytes} bytes");
            assert!(reads * 3 <= WALK_BUDGET.ops * 2, "{v:?}: {reads} reads: no room for the retry");
        }
    }
}
