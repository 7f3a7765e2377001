//! The ring buffer's records as [`RawSample`]s: parsed in place (no copy) and handed to the caller's callback.

use std::cell::Cell;
use std::rc::Rc;

use crate::abi::{self, types, RawFrame, RawLocal};

/// One sample as the BPF program wrote it, borrowing the ring buffer record.
#[derive(Debug, Clone, Copy)]
pub struct RawSample<'a> {
    /// Process (tgid).
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns).
    pub time_ns: u64,
    /// The thread's name, NUL-padded.
    pub comm: [u8; 16],
    /// `enum pyperf_thread_state` value.
    pub thread_state: u8,
    /// `enum pyperf_gil_state` value.
    pub gil: u8,
    /// `enum pyperf_pthread_id` value.
    pub pthread_id: u8,
    /// `enum pyperf_stack_status` value.
    pub status: u8,
    /// Leaf first.
    pub frames: &'a [RawFrame],
    /// <= 3.10: each frame's first local (see [`RawLocal`]), as many as `frames`; empty on 3.11+.
    pub locals: &'a [RawLocal],
    /// `Some` for the record of an off-CPU interval (`--off-cpu`) that ended at `time_ns`; `None` for a CPU sample.
    pub off_cpu: Option<OffCpu>,
    /// `--kernel`: kernel addresses, leaf first (the first is where the kernel was, the others return addresses).
    /// Empty without `--kernel`, for a sample in user mode, or when the stack could not be taken. For an off-CPU
    /// interval in a system call: where it blocked.
    pub kernel: &'a [u64],
    /// `--native`: the user registers and the copy of the user stack from `sp` up. `None` without `--native` (or
    /// when the registers could not be read).
    pub user: Option<UserStack<'a>>,
    /// `Some`: not a sample but a code object's snapshot (`PYPERF_EVENT_CODE`), for the samples after it.
    pub code: Option<CodeSnap<'a>>,
    /// The run roots of the generator frames in `frames` (asyncio tasks); none when the process's task tracking
    /// is off (`bpf_config`'s `track_tasks`) or before 3.11.
    pub coro_roots: CoroRoots,
    /// The thread was running the interpreter's cyclic garbage collector (`pyperf_event_header.in_gc`).
    pub in_gc: bool,
    /// Which interpreter the frames run in, and the calling interpreter's frames (subinterpreters).
    pub interp: InterpInfo,
    /// The trace context the program read (`pyperf_event_header.trace_state`).
    pub trace: TraceRead,
    /// A CPU sample: the sampling periods it stands for, >= 1: more when the cpu-clock event's timer fired that
    /// late (`pyperf_event_header.periods`: the CPU did not run this machine meanwhile, while the thread was on
    /// it). 0 for other records.
    pub periods: u32,
    /// The sampling period in nanoseconds with the cpu-clock event (0 with another), by which the sample's
    /// missed periods lie before it.
    pub period_ns: u64,
}

impl RawSample<'_> {
    /// How many samples a CPU sample is written as: one per sampling period it stands for ([`Self::periods`]).
    /// Counts of samples taken from records (truncated stacks) use this too, so that they match the file.
    pub fn samples(&self) -> u64 {
        u64::from(self.periods.max(1))
    }
}

/// What a record says of its thread's active OpenTelemetry span (bpf/pyperf.h `enum pyperf_trace_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceRead {
    /// Not looked for, or no span active.
    #[default]
    None,
    /// The active span's ids.
    Found {
        /// Its trace's id.
        trace_id: u128,
        /// Its id.
        span_id: u64,
    },
    /// A span may be active but could not be read (counted by the program).
    Unreadable,
    /// The process's context variable is not known yet: this context's variables (a HAMT) to look in.
    Discover(u64),
    /// The active span is of a class whose way to its span context is not known yet: the span.
    SpanType(u64),
}

impl TraceRead {
    fn of(h: &types::pyperf_event_header) -> TraceRead {
        use types::pyperf_trace_state as t;
        match u32::from(h.trace_state) {
            x if x == t::TRACE_FOUND.0 => {
                TraceRead::Found { trace_id: u128::from(h.trace_hi) << 64 | u128::from(h.trace_lo), span_id: h.span_id }
            }
            x if x == t::TRACE_UNREADABLE.0 => TraceRead::Unreadable,
            x if x == t::TRACE_DISCOVER.0 => TraceRead::Discover(h.trace_probe),
            x if x == t::TRACE_SPAN_TYPE.0 => TraceRead::SpanType(h.trace_probe),
            _ => TraceRead::None,
        }
    }
}

/// The interpreters of a record (`pyperf_event_header.interp_*`, bpf/pyperf.h `enum pyperf_interp_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpInfo {
    /// `PyInterpreterState.id` of the interpreter the frames run in (0: the main one); -1 unknown (no thread state,
    /// or a Python whose interpreter ids pyperf does not read).
    pub id: i64,
    /// The thread entered this interpreter from another one (`Interpreter.exec` / `.call`): its thread state there
    /// waits, swapped out.
    pub nested: bool,
    /// `Some((k, id))`: frames `k..` (leaf first, as in [`RawSample::frames`]) are that calling interpreter's (`id`),
    /// the frames that called into this one (`k` 0: this one has none yet, e.g. a thread creating it); `None`: the frames are this interpreter's alone (for a nested thread:
    /// the calling interpreter's could not be read whole, counted by the program).
    pub outer: Option<(usize, i64)>,
    /// Which of the thread's thread states runs could not be told: the record has no frames (status error).
    pub ambiguous: bool,
}

impl Default for InterpInfo {
    fn default() -> InterpInfo {
        InterpInfo { id: -1, nested: false, outer: None, ambiguous: false }
    }
}

impl InterpInfo {
    /// The interpreter fields of header `h` whose record holds `nframes` frames (a split outside them is dropped).
    fn of(h: &types::pyperf_event_header, nframes: usize) -> InterpInfo {
        use types::pyperf_interp_flags as f;
        let flags = u32::from(h.interp_flags);
        let stitched = flags & f::PYPERF_INTERP_STITCHED.0 != 0;
        let start = h.outer_start as usize;
        InterpInfo {
            id: h.interp_id,
            // An ambiguous record has no frames to mark a boundary in: its status says what happened.
            nested: flags & f::PYPERF_INTERP_NESTED.0 != 0 && flags & f::PYPERF_INTERP_AMBIGUOUS.0 == 0,
            outer: (stitched && start < nframes).then_some((start, h.outer_interp_id)),
            ambiguous: flags & f::PYPERF_INTERP_AMBIGUOUS.0 != 0,
        }
    }
}

/// The *run roots* of a record (bpf/pyperf.h, `pyperf_event_header.coro_frame`): a run is a maximal sequence of
/// adjacent generator-owned frames with no skipped interpreter frame (C-stack shim, entry frame) between them, its
/// root the rootmost of them. A running asyncio task's coroutine is the root of the run of the coroutines awaiting
/// each other down to the leaf; a generator resumed through C (`next()`) or a task run eagerly starts a run of its
/// own, leafward.
///
/// As the program writes them: run `k` (0 = leafmost) in slot `k % 4`, `n` runs in all, so that with more than 4
/// the slots hold the 4 rootmost; [`CoroRoots::leaf_first`] gives them in order. A slot whose frame index is not
/// below the record's frame count is dropped when the record is parsed (its address set to 0), never trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoroRoots {
    /// Runs the walk ended (`ncoro`): exact up to 251; 252 to 255 stand for at least that many (the program keeps
    /// the count mod 4 right, so the ring order holds).
    pub n: u8,
    /// Per slot: (frame index in the record's frames, 0 = leaf; the frame's `_PyInterpreterFrame` address, 0 =
    /// none or dropped).
    pub frames: [(u16, u64); abi::TASK_ROOTS],
}

impl CoroRoots {
    /// The run roots the record holds, leaf first: (frame index, frame address). At most 4: with more runs, the
    /// rootmost 4.
    pub fn leaf_first(&self) -> impl Iterator<Item = (usize, u64)> {
        const K: usize = abi::TASK_ROOTS;
        let n = usize::from(self.n);
        // More than K: the oldest slot still held (the leafmost of the K kept) is the next one to be written.
        let start = if n > K { n % K } else { 0 };
        let frames = self.frames;
        (0..n.min(K))
            .map(move |i| frames[(start + i) % K])
            .filter(|&(_, addr)| addr != 0)
            .map(|(index, addr)| (usize::from(index), addr))
    }

    /// All runs the walk ended (see [`CoroRoots::n`]), of which [`CoroRoots::leaf_first`] gives the rootmost 4.
    pub fn total(&self) -> u32 {
        u32::from(self.n)
    }

    /// The run roots as the program would have written them, from every run root of a stack, leaf first:
    /// (frame index, frame address), as the user-space walk gives them (`WalkedStack::coro_roots`).
    pub fn from_leaf_first(roots: &[(usize, u64)]) -> CoroRoots {
        const K: usize = abi::TASK_ROOTS;
        let mut frames = [(0u16, 0u64); K];
        for (k, &(index, addr)) in roots.iter().enumerate() {
            // An index no record can hold is dropped, as when a record is parsed.
            frames[k % K] = u16::try_from(index).map_or((0, 0), |i| (i, addr));
        }
        // The program's count: exact up to 251, then 252 + the count mod 4.
        let n = roots.len();
        let n = if n < 256 { n as u8 } else { 252 + (n % K) as u8 };
        CoroRoots { n, frames }
    }

    /// The run roots of header `h` whose record holds `nframes` frames.
    fn of(h: &types::pyperf_event_header, nframes: usize) -> CoroRoots {
        let mut frames = [(0u16, 0u64); abi::TASK_ROOTS];
        for (slot, (&index, &addr)) in frames.iter_mut().zip(h.coro_index.iter().zip(h.coro_frame.iter())) {
            if usize::from(index) < nframes {
                *slot = (index, addr);
            }
        }
        CoroRoots { n: h.ncoro, frames }
    }
}

/// A code object as the program copied it the first time a stack held it (`struct pyperf_code_snap`).
#[derive(Debug, Clone, Copy)]
pub struct CodeSnap<'a> {
    /// Its address, as in the frames.
    pub code: u64,
    /// Its check word, as in the frames.
    pub check: u32,
    /// (address, bytes) of the code object, its name, qualified name, file name and line table; empty when not
    /// copied.
    pub regions: [(u64, &'a [u8]); 5],
}

/// The user-space state of a thread at a sample (`--native`): where it was and the bytes of its stack, for the
/// native unwinder. In a system call (or off CPU in one): where it entered the kernel.
#[derive(Debug, Clone, Copy)]
pub struct UserStack<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: `stack[0]` is the byte at this address.
    pub sp: u64,
    /// Frame pointer register.
    pub bp: u64,
    /// The stack from `sp` up, at most the sampler's `ustack_bytes`; may be empty (the copy failed).
    pub stack: &'a [u8],
}

/// Which part of an off-CPU interval a record is (bpf/pyperf.h, `enum pyperf_event_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffCpuPart {
    /// All of it: it ended at the record's time, with its stack.
    Whole,
    /// Its start and stack; the end follows in an [`OffCpuPart::End`] record of the same thread.
    Start,
    /// The end of the interval a [`OffCpuPart::Start`] began; no frames. `weight_ns` 0: dropped.
    End,
}

/// An off-CPU interval as the BPF program saw it (bpf/pyperf.h, the `off_*` fields of the record header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffCpu {
    /// Which part of the interval the record is.
    pub part: OffCpuPart,
    /// CLOCK_MONOTONIC ns of the switch-out that began it.
    pub start_ns: u64,
    /// Time off CPU, ns (a wait in a system call that was on CPU in between counts only its times off CPU).
    /// 0 in a [`OffCpuPart::Start`] record.
    pub duration_ns: u64,
    /// Of which runnable (woken, or preempted, and waiting for a CPU).
    pub runnable_ns: u64,
    /// What it counts for, ns: its length, or the minimum for a sampled short one.
    pub weight_ns: u64,
    /// `enum pyperf_off_kind` value, the on-disk `OffCpuKind`.
    pub kind: u8,
    /// System call it blocked in; -1 none.
    pub syscall: i32,
    /// On-disk `OffCpuInterval` flags set by user space in the BPF map (began before the thread was followed).
    pub flags: u8,
}

/// The part of an off-CPU interval a record of `kind` is; `None` for a sample (or a kind this recorder does not
/// know, which it treats as a sample's header would be: never, as the program writes only these).
fn off_cpu_part(kind: u8) -> Option<OffCpuPart> {
    use types::pyperf_event_kind as k;
    match u32::from(kind) {
        x if x == k::PYPERF_EVENT_OFF_CPU.0 => Some(OffCpuPart::Whole),
        x if x == k::PYPERF_EVENT_OFF_CPU_START.0 => Some(OffCpuPart::Start),
        x if x == k::PYPERF_EVENT_OFF_CPU_END.0 => Some(OffCpuPart::End),
        _ => None,
    }
}

/// The caller's callback with its lifetime erased (see [`super::Sampler::poll`]).
pub(super) type Callback = *mut (dyn for<'a, 'b> FnMut(&'a RawSample<'b>) + 'static);

/// State shared with the ring buffer callback.
pub(super) struct Shared {
    /// The caller's callback, set only for the duration of [`Sampler::poll`].
    pub(super) callback: Cell<Option<Callback>>,
    pub(super) malformed: Cell<u64>,
    /// Records handed over so far (to tell whether a consume found any).
    pub(super) records: Cell<u64>,
    /// Their bytes (the pace of [`super::Sampler::poll`]).
    pub(super) bytes: Cell<u64>,
    /// cpu-clock's sampling period, for [`RawSample::period_ns`].
    pub(super) period_ns: u64,
}

impl Shared {
    pub(super) fn dispatch(&self, data: &[u8]) {
        self.records.set(self.records.get() + 1);
        // With the ring's 8-byte record header.
        self.bytes.set(self.bytes.get() + data.len() as u64 + 8);
        let hsize = std::mem::size_of::<types::pyperf_event_header>();
        let Ok(h) = plain::from_bytes::<types::pyperf_event_header>(data) else {
            self.malformed.set(self.malformed.get() + 1);
            return;
        };
        if u32::from(h.kind) == types::pyperf_event_kind::PYPERF_EVENT_CODE.0 {
            let Some(code) = code_snap(data) else {
                self.malformed.set(self.malformed.get() + 1);
                return;
            };
            let sample = RawSample {
                pid: h.pid,
                tid: h.tid,
                cpu: h.cpu,
                time_ns: h.ktime,
                comm: [0; 16],
                thread_state: 0,
                gil: 0,
                pthread_id: 0,
                status: 0,
                frames: &[],
                locals: &[],
                off_cpu: None,
                kernel: &[],
                user: None,
                code: Some(code),
                coro_roots: CoroRoots::default(),
                in_gc: false,
                trace: TraceRead::None,
                interp: InterpInfo::default(),
                periods: 0,
                period_ns: 0,
            };
            if let Some(callback) = self.callback.get() {
                // SAFETY: as below.
                unsafe { (*callback)(&sample) };
            }
            return;
        }
        let Some(Parts { frames, locals, kernel, user }) = parts(h, data, hsize) else {
            self.malformed.set(self.malformed.get() + 1);
            return;
        };
        let mut comm = [0u8; 16];
        for (d, s) in comm.iter_mut().zip(h.comm.iter()) {
            *d = *s as u8;
        }
        let sample = RawSample {
            pid: h.pid,
            tid: h.tid,
            cpu: h.cpu,
            time_ns: h.ktime,
            comm,
            thread_state: h.thread_state_match,
            gil: h.gil_state,
            pthread_id: h.pthread_id_match,
            status: h.stack_status,
            frames,
            locals,
            off_cpu: off_cpu_part(h.kind).map(|part| OffCpu {
                part,
                start_ns: h.off_start,
                duration_ns: h.off_duration,
                runnable_ns: h.off_runnable,
                weight_ns: h.off_weight,
                kind: h.off_kind,
                syscall: h.off_syscall,
                flags: h.off_flags,
            }),
            kernel,
            user,
            code: None,
            coro_roots: CoroRoots::of(h, frames.len()),
            in_gc: h.in_gc != 0,
            interp: InterpInfo::of(h, frames.len()),
            trace: TraceRead::of(h),
            periods: if off_cpu_part(h.kind).is_none() { h.periods.clamp(1, abi::CLOCK_PERIODS_MAX) } else { 0 },
            period_ns: self.period_ns,
        };
        if let Some(callback) = self.callback.get() {
            // SAFETY: set by `poll` from a live `&mut dyn FnMut` and cleared before it returns;
            // the ring buffer only calls back from inside `poll`.
            unsafe { (*callback)(&sample) }
        }
    }
}

/// A record's parts after its header.
struct Parts<'a> {
    frames: &'a [RawFrame],
    locals: &'a [RawLocal],
    kernel: &'a [u64],
    user: Option<UserStack<'a>>,
}

/// The parts of a record after its header `h` (`hsize` bytes): frames, first locals, kernel addresses, user stack,
/// each where the counts before it say (bpf/pyperf.h); `None` when the record is shorter than they say or
/// misaligned.
fn parts<'a>(h: &types::pyperf_event_header, data: &'a [u8], hsize: usize) -> Option<Parts<'a>> {
    let fend = hsize.checked_add((h.nframes as usize).checked_mul(std::mem::size_of::<RawFrame>())?)?;
    // Ring buffer records are 8-byte aligned and the header is 168 bytes: no copy needed.
    let frames = plain::slice_from_bytes::<RawFrame>(data.get(hsize..fend)?).ok()?;
    let lend = if h.has_locals != 0 { fend.checked_add(frames.len() * std::mem::size_of::<RawLocal>())? } else { fend };
    let locals = plain::slice_from_bytes::<RawLocal>(data.get(fend..lend)?).ok()?;
    let kend = lend.checked_add(usize::from(h.nkernel) * 8)?;
    let kernel = plain::slice_from_bytes::<u64>(data.get(lend..kend)?).ok()?;
    let user = if h.user_flags & abi::USER_REGS != 0 {
        let uend = kend.checked_add(h.ustack_len as usize)?;
        Some(UserStack { ip: h.user_ip, sp: h.user_sp, bp: h.user_bp, stack: data.get(kend..uend)? })
    } else {
        None
    };
    Some(Parts { frames, locals, kernel, user })
}

/// Clears the callback when `poll` returns or unwinds.
pub(super) struct CallbackGuard(pub(super) Rc<Shared>);
impl Drop for CallbackGuard {
    fn drop(&mut self) {
        self.0.callback.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interpreter fields as the program writes them: a split inside the frames is kept (0: no frame of the
    /// running interpreter's), one outside is dropped; an ambiguous record marks no boundary.
    #[test]
    fn interpreter_fields_of_a_header() {
        use types::pyperf_interp_flags as f;
        // SAFETY: all-zero is a valid header (integers).
        let mut h: types::pyperf_event_header = unsafe { std::mem::zeroed() };
        h.interp_id = 2;
        h.outer_interp_id = 0;
        h.interp_flags = (f::PYPERF_INTERP_NESTED.0 | f::PYPERF_INTERP_STITCHED.0) as u8;
        h.outer_start = 3;
        let i = InterpInfo::of(&h, 5);
        assert_eq!((i.id, i.nested, i.outer, i.ambiguous), (2, true, Some((3, 0)), false));
        h.outer_start = 0;
        assert_eq!(InterpInfo::of(&h, 5).outer, Some((0, 0)));
        h.outer_start = 5;
        assert_eq!(InterpInfo::of(&h, 5).outer, None, "a split at or past the frames is dropped");
        h.interp_flags = f::PYPERF_INTERP_NESTED.0 as u8;
        assert_eq!(InterpInfo::of(&h, 5).outer, None, "not stitched");
        h.interp_flags = (f::PYPERF_INTERP_NESTED.0 | f::PYPERF_INTERP_AMBIGUOUS.0) as u8;
        let i = InterpInfo::of(&h, 0);
        assert!(i.ambiguous && !i.nested);
    }

    /// The bytes of a record as the program writes it: header (with `nframes` etc. as given), frames, kernel
    /// addresses, user stack.
    fn record(nframes: u32, nkernel: u16, ustack_len: u32, user: bool) -> Vec<u8> {
        record_with(nframes, false, nkernel, ustack_len, user)
    }

    /// As [`record`], with first locals after the frames (<= 3.10) when `locals`.
    fn record_with(nframes: u32, locals: bool, nkernel: u16, ustack_len: u32, user: bool) -> Vec<u8> {
        // SAFETY: all-zero is a valid header (integers).
        let mut h: types::pyperf_event_header = unsafe { std::mem::zeroed() };
        h.nframes = nframes;
        h.has_locals = u8::from(locals);
        h.nkernel = nkernel;
        h.user_flags = if user { abi::USER_REGS } else { 0 };
        h.ustack_len = ustack_len;
        h.user_sp = 0x7ffd_0000;
        // SAFETY: the header is plain integers without padding.
        let mut bytes = unsafe { plain::as_bytes(&h) }.to_vec();
        for i in 0..nframes.min(16) {
            let f = RawFrame { code: 0x1000 + u64::from(i), instr: 2, check: 3 };
            // SAFETY: as above.
            bytes.extend_from_slice(unsafe { plain::as_bytes(&f) });
        }
        for i in (0..nframes.min(16)).filter(|_| locals) {
            let l = RawLocal { first_local: 0x5000 + u64::from(i), first_local_type: 0x6000 };
            // SAFETY: as above.
            bytes.extend_from_slice(unsafe { plain::as_bytes(&l) });
        }
        for i in 0..nkernel.min(16) {
            bytes.extend_from_slice(&(0xffff_ffff_8100_0000u64 + u64::from(i)).to_ne_bytes());
        }
        bytes.extend(std::iter::repeat_n(7u8, ustack_len.min(4096) as usize));
        bytes
    }

    /// Frames, kernel addresses, (user sp, stack bytes) of a parsed record.
    type Parsed = (usize, Vec<u64>, Option<(u64, usize)>);

    /// `f` of the `parts` of the first `len` bytes of `bytes`, copied to 8-byte aligned memory like a ring buffer
    /// record.
    fn with_parts<T>(bytes: &[u8], len: usize, f: impl FnOnce(Parts<'_>) -> T) -> Option<T> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: u64s viewed as bytes: no padding, any bit pattern is valid both ways.
        let buf = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) };
        buf[..bytes.len()].copy_from_slice(bytes);
        let data = &buf[..len];
        let h = plain::from_bytes::<types::pyperf_event_header>(data).ok()?;
        parts(h, data, std::mem::size_of::<types::pyperf_event_header>()).map(f)
    }

    fn parse(bytes: &[u8], len: usize) -> Option<Parsed> {
        with_parts(bytes, len, |p| (p.frames.len(), p.kernel.to_vec(), p.user.map(|u| (u.sp, u.stack.len()))))
    }

    /// The first locals of a parsed record: (first_local, first_local_type) each.
    fn parse_locals(bytes: &[u8]) -> Option<Vec<(u64, u64)>> {
        with_parts(bytes, bytes.len(), |p| p.locals.iter().map(|l| (l.first_local, l.first_local_type)).collect())
    }

    #[test]
    fn first_locals_sit_between_the_frames_and_the_kernel_addresses() {
        let r = record_with(3, true, 2, 21, true);
        let (n, k, u) = parse(&r, r.len()).expect("well formed");
        assert_eq!((n, k.len(), k[0]), (3, 2, 0xffff_ffff_8100_0000), "kernel addresses after the locals");
        assert_eq!(u, Some((0x7ffd_0000, 21)));
        assert_eq!(parse_locals(&r), Some(vec![(0x5000, 0x6000), (0x5001, 0x6000), (0x5002, 0x6000)]));
        // Without the flag (3.11+): no locals.
        let r = record_with(3, false, 2, 21, true);
        assert_eq!(parse_locals(&r), Some(vec![]));
        // Cut inside the locals: dropped.
        let r = record_with(3, true, 0, 0, false);
        assert!(parse(&r, r.len() - 8).is_none());
    }

    #[test]
    fn records_with_kernel_and_user_stacks() {
        let r = record(3, 2, 21, true);
        let (n, k, u) = parse(&r, r.len()).expect("well formed");
        assert_eq!((n, k.len(), k[1]), (3, 2, 0xffff_ffff_8100_0001));
        assert_eq!(u, Some((0x7ffd_0000, 21)));
        // Registers without a stack copy (the read failed), and a record with neither.
        let r = record(1, 0, 0, true);
        assert_eq!(parse(&r, r.len()).map(|p| p.2), Some(Some((0x7ffd_0000, 0))));
        let r = record(0, 0, 0, false);
        assert_eq!(parse(&r, r.len()), Some((0, vec![], None)));
    }

    /// A header of `nframes` frames whose run roots were written as the program writes them: run `k` of `runs`
    /// (leaf first, (frame index, address) each) into slot `k % 4`, `ncoro` as given.
    fn roots(nframes: u32, ncoro: u8, runs: &[(u16, u64)]) -> CoroRoots {
        // SAFETY: all-zero is a valid header (integers).
        let mut h: types::pyperf_event_header = unsafe { std::mem::zeroed() };
        h.nframes = nframes;
        h.ncoro = ncoro;
        for (k, &(index, addr)) in runs.iter().enumerate() {
            h.coro_index[k % abi::TASK_ROOTS] = index;
            h.coro_frame[k % abi::TASK_ROOTS] = addr;
        }
        CoroRoots::of(&h, nframes as usize)
    }

    fn run(k: u16) -> (u16, u64) {
        (2 * k + 1, 0x7f00_0000_1000 + 0x100 * u64::from(k))
    }

    fn leaf_first(c: &CoroRoots) -> Vec<(usize, u64)> {
        c.leaf_first().collect()
    }

    fn expected(ks: std::ops::Range<u16>) -> Vec<(usize, u64)> {
        ks.map(run).map(|(i, a)| (usize::from(i), a)).collect()
    }

    #[test]
    fn run_roots_come_leaf_first() {
        // None, one, up to the 4 slots: in the order written.
        assert_eq!(leaf_first(&roots(20, 0, &[])), vec![]);
        assert_eq!((roots(20, 0, &[]).total(), roots(20, 0, &[])), (0, CoroRoots::default()));
        for n in 1..=4u16 {
            let runs: Vec<_> = (0..n).map(run).collect();
            let c = roots(20, n as u8, &runs);
            assert_eq!(leaf_first(&c), expected(0..n), "{n} runs");
            assert_eq!(c.total(), u32::from(n));
        }
    }

    #[test]
    fn more_run_roots_than_slots_keep_the_rootmost_in_order() {
        // 5 to 9 runs: the ring holds the last 4 written, the rootmost, and gives them leaf first.
        for n in 5..=9u16 {
            let runs: Vec<_> = (0..n).map(run).collect();
            let c = roots(64, n as u8, &runs);
            assert_eq!(leaf_first(&c), expected(n - 4..n), "{n} runs");
            assert_eq!(c.total(), u32::from(n));
        }
        // Past 255 the program counts 252 + (runs mod 4): the order still holds.
        let runs: Vec<_> = (0..258u16).map(|k| (k % 16, 0x1000 + u64::from(k))).collect();
        let c = roots(16, 252 + (258 % 4) as u8, &runs);
        let got: Vec<u64> = c.leaf_first().map(|(_, a)| a).collect();
        assert_eq!(got, vec![0x1000 + 254, 0x1000 + 255, 0x1000 + 256, 0x1000 + 257]);
    }

    #[test]
    fn run_roots_of_a_walk_are_kept_as_the_program_keeps_them() {
        for n in [0u16, 1, 3, 4, 5, 9, 255, 256, 258, 1000] {
            let all: Vec<(usize, u64)> = (0..n).map(run).map(|(i, a)| (usize::from(i), a)).collect();
            let c = CoroRoots::from_leaf_first(&all);
            assert_eq!(leaf_first(&c), all[all.len().saturating_sub(4)..].to_vec(), "{n} runs");
            assert_eq!(c.total(), if n < 256 { u32::from(n) } else { 252 + u32::from(n % 4) }, "{n} runs");
        }
    }

    #[test]
    fn run_roots_outside_the_frames_are_dropped() {
        // Indices 1, 3, 5, 7 of a record of 6 frames: the last is not a frame of the record.
        let runs: Vec<_> = (0..4).map(run).collect();
        assert_eq!(leaf_first(&roots(6, 4, &runs)), expected(0..3));
        // None kept of a record without frames, whatever the count says.
        assert_eq!(leaf_first(&roots(0, 4, &runs)), vec![]);
        // A count beyond the slots written: the empty slots give nothing.
        assert_eq!(leaf_first(&roots(20, 3, &runs[..2])), expected(0..2));
        // Index u16::MAX in a short record: dropped, no overflow.
        assert_eq!(leaf_first(&roots(3, 1, &[(u16::MAX, 0x1000)])), vec![]);
    }

    #[test]
    fn short_records_are_dropped() {
        for (nframes, nkernel, ustack) in [(3u32, 2u16, 21u32), (0, 5, 0), (2, 0, 100)] {
            let r = record(nframes, nkernel, ustack, true);
            for cut in [1, 8, 9] {
                assert!(
                    parse(&r, r.len() - cut).is_none(),
                    "{nframes} frames, {nkernel} kernel, {ustack} bytes, cut {cut}"
                );
            }
        }
        // Counts far beyond any record: no overflow, no panic.
        for (nframes, nkernel, ustack) in [(u32::MAX, 0, 0), (0, u16::MAX, 0), (0, 0, u32::MAX)] {
            let r = record(nframes, nkernel, ustack, true);
            assert!(parse(&r, r.len()).is_none());
        }
    }
}

/// The parts of a `struct pyperf_code_snap` record; `None` if it is malformed.
fn code_snap(data: &[u8]) -> Option<CodeSnap<'_>> {
    use std::mem::offset_of;
    type S = types::pyperf_code_snap;
    let u64_at = |o: usize| data.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let u32_at = |o: usize| data.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
    let code = u64_at(offset_of!(S, code))?;
    let check = u32_at(offset_of!(S, check))?;
    let starts = [
        offset_of!(S, code_obj),
        offset_of!(S, name),
        offset_of!(S, qualname),
        offset_of!(S, file),
        offset_of!(S, table),
    ];
    let caps = [abi::SNAP_CODE, abi::SNAP_NAME, abi::SNAP_NAME, abi::SNAP_FILE, abi::SNAP_TABLE];
    let region = std::mem::size_of::<types::pyperf_snap_region>();
    let mut regions: [(u64, &[u8]); 5] = [(0, &[]); 5];
    for (i, r) in regions.iter_mut().enumerate() {
        let at = offset_of!(S, regions) + i * region;
        let addr = u64_at(at)?;
        let len = u32_at(at + 8)? as usize;
        if len > caps[i] {
            return None;
        }
        *r = (addr, data.get(starts[i]..starts[i] + len)?);
    }
    Some(CodeSnap { code, check, regions })
}

#[cfg(test)]
mod snap_tests {
    use super::*;
    use std::mem::offset_of;

    type S = types::pyperf_code_snap;

    fn record(table_len: usize, lens: [u32; 5]) -> Vec<u8> {
        let mut data = vec![0u8; offset_of!(S, table) + table_len];
        data[offset_of!(S, code)..][..8].copy_from_slice(&0x1000u64.to_le_bytes());
        data[offset_of!(S, check)..][..4].copy_from_slice(&77u32.to_le_bytes());
        let region = std::mem::size_of::<types::pyperf_snap_region>();
        for (i, len) in lens.iter().enumerate() {
            let at = offset_of!(S, regions) + i * region;
            data[at..][..8].copy_from_slice(&(0x1000u64 * (i as u64 + 1)).to_le_bytes());
            data[at + 8..][..4].copy_from_slice(&len.to_le_bytes());
        }
        data[offset_of!(S, name)] = b'n';
        data[offset_of!(S, table)] = b't';
        data
    }

    #[test]
    fn code_snapshots_parse_and_lengths_are_checked() {
        let good = record(10, [200, 5, 0, 9, 10]);
        let c = code_snap(&good).expect("well-formed");
        assert_eq!((c.code, c.check), (0x1000, 77));
        assert_eq!(c.regions[0].1.len(), 200);
        assert_eq!((c.regions[1].0, c.regions[1].1), (0x2000, &b"n\0\0\0\0"[..]));
        assert!(c.regions[2].1.is_empty());
        assert_eq!(c.regions[4].1.first(), Some(&b't'));
        // The table longer than the record, or a region longer than its field: malformed, not read past.
        assert!(code_snap(&record(10, [200, 5, 0, 9, 11])).is_none());
        assert!(code_snap(&record(10, [abi::SNAP_CODE as u32 + 1, 5, 0, 9, 10])).is_none());
        assert!(code_snap(&good[..20]).is_none());
    }
}
