//! `record --off-cpu`: the pairing of the BPF program's off-CPU records into intervals, and the intervals the
//! program cannot end itself (threads already off CPU when a process is first followed, threads still off CPU at the
//! end of the recording).
//!
//! Owns: the starts waiting for their ends ([`Pairing::record`], [`Pairing::hold`]), the processes followed (what
//! the end needs to walk their blocked threads, through [`crate::rest`]), the counts of intervals whose stack could
//! not be read and of those cut by the end, the threads off CPU now ([`now`]). It returns intervals and raw samples;
//! the session symbolizes them and hands them to the sink. May import the sampler's records and map entries, the
//! thread-at-rest reader, /proc and the format's types; not the session, the symbolizer or a sink.

pub mod now;

use std::collections::HashMap;

use pyperf_format::{off_cpu_flags, GilState, OffCpuKind, PthreadIdMatch, StackStatus, ThreadStateMatch};

use crate::abi::types;
use crate::mem::ProcMem;
use crate::python::walk::StackWalker;
use crate::rest::{self, Target};
use crate::sampler::{self, OffCpuPart, RawSample};

/// The off-CPU state of a recording: the followed processes and the starts waiting for their ends.
#[derive(Default)]
pub struct Pairing {
    /// Each followed process's interpreter, BPF row and namespaces: the threads still off CPU at the end are walked
    /// from user space with them.
    processes: HashMap<u32, Target>,
    /// Intervals whose stack walk failed (status error).
    unreadable: u64,
    /// Intervals cut by the end of the recording.
    open_at_end: u64,
    /// Intervals whose start and stack came in a record of their own (see [`OffCpuPart::Start`]), by (pid, tid):
    /// waiting for their end.
    pending: HashMap<(u32, u32), Pending>,
}

/// The start of an off-CPU interval whose end has not come yet.
struct Pending {
    frames: Vec<u32>,
    task_frames: Vec<u32>,
    status: StackStatus,
    gil: GilState,
    thread_state: ThreadStateMatch,
    pthread_id: PthreadIdMatch,
    cpu: u32,
    comm: String,
    /// CLOCK_MONOTONIC ns of the switch-out.
    start: u64,
    kind: OffCpuKind,
    flags: u8,
    in_gc: bool,
    interp: u32,
    span: Option<pyperf_format::SpanLink>,
}

/// An off-CPU interval whose stack came with its start (symbolized then: see [`Step::Hold`]), ended: what the sink
/// writes. Times are CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// The stack at its start, as the session's symbolizer named it.
    pub frames: Vec<u32>,
    /// Its task view ([`crate::tasks`]), empty if none.
    pub task_frames: Vec<u32>,
    /// Of that stack.
    pub status: StackStatus,
    /// GIL state at its start.
    pub gil: GilState,
    /// Thread-state match at its start.
    pub thread_state: ThreadStateMatch,
    /// pthread-id match at its start.
    pub pthread_id: PthreadIdMatch,
    /// CPU it left.
    pub cpu: u32,
    /// Thread name at its start.
    pub comm: String,
    /// Its start (the switch-out), at or before `end`.
    pub start: u64,
    /// Its end.
    pub end: u64,
    /// Time off CPU.
    pub duration_ns: u64,
    /// Of which runnable (at most `duration_ns`).
    pub runnable_ns: u64,
    /// What it counts for.
    pub weight_ns: u64,
    /// Why it was off CPU.
    pub kind: OffCpuKind,
    /// On-disk `OffCpuInterval` flags.
    pub flags: u8,
    /// Its thread was running the cyclic garbage collector when it left.
    pub in_gc: bool,
    /// The interpreter its leaf frames ran in (0 the main one, and when unknown).
    pub interp: u32,
    /// The OpenTelemetry span active on its thread when it left.
    pub span: Option<pyperf_format::SpanLink>,
}

/// What the session does with an off-CPU record (see [`Pairing::record`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// A whole interval: symbolize it and write it as it is.
    Write,
    /// The start of one: symbolize its stack and hand the frames to [`Pairing::hold`].
    Hold,
    /// The end of one: write the interval it closes.
    Ended(Interval),
    /// Nothing to write (an end of an interval dropped as short, or whose start was lost).
    Nothing,
}

/// What the end of the recording hands the session (see [`Pairing::end`]).
pub enum Ended<'a> {
    /// An interval whose stack was taken when it started: write it.
    Interval(Interval),
    /// A thread blocked in a system call, walked now: symbolize and write it. (Boxed: a sample is ~3x an interval.)
    Walked(Box<RawSample<'a>>),
}

impl Pairing {
    /// Before any process is followed.
    pub fn new() -> Pairing {
        Pairing::default()
    }

    /// Follows `target`'s off-CPU intervals from `now` (CLOCK_MONOTONIC ns). Returns its threads already off CPU,
    /// for the sampler's map (their switch-out was before the recording could see it: see [`now::off_cpu_now`]).
    pub fn follow(&mut self, target: Target, now: u64) -> Vec<(u32, types::off_cpu_entry)> {
        let pid = target.process.pid;
        self.processes.insert(pid, target);
        now::off_cpu_now(pid, now)
    }

    /// Forgets the starts of `pid`'s intervals still waiting for their ends (an earlier process of the same pid left
    /// them, its ends not seen).
    pub fn forget_starts(&mut self, pid: u32) {
        self.pending.retain(|&(p, _), _| p != pid);
    }

    /// Forgets process `pid` (gone).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
        self.forget_starts(pid);
    }

    /// The processes followed.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.keys().copied().collect()
    }

    /// What to do with off-CPU record `s` (its `off`).
    pub fn record(&mut self, s: &RawSample<'_>, off: &sampler::OffCpu) -> Step {
        let status = StackStatus::from_u8(s.status);
        match off.part {
            OffCpuPart::Whole => {
                // Counted when written (a start's interval may still be dropped as short).
                if status == StackStatus::Error {
                    self.unreadable += 1;
                }
                Step::Write
            }
            OffCpuPart::Start => Step::Hold,
            OffCpuPart::End => {
                // Dropped (short, not drawn), or its start was lost: nothing to write.
                let Some(p) = self.pending.remove(&(s.pid, s.tid)) else { return Step::Nothing };
                if off.weight_ns == 0 || p.start != off.start_ns {
                    return Step::Nothing;
                }
                if p.status == StackStatus::Error {
                    self.unreadable += 1;
                }
                let times = (s.time_ns, off.duration_ns, off.runnable_ns, off.weight_ns);
                Step::Ended(p.ended(s.pid, s.tid, times, 0))
            }
        }
    }

    /// Keeps start record `s` (its `off`), its stack symbolized as `frames`, until its end.
    pub fn hold(&mut self, s: &RawSample<'_>, off: &sampler::OffCpu, frames: Vec<u32>, task_frames: Vec<u32>) {
        let comm_len = s.comm.iter().position(|&c| c == 0).unwrap_or(s.comm.len());
        // A start whose end was lost (ring buffer full) is replaced: the thread left again since.
        self.pending.insert(
            (s.pid, s.tid),
            Pending {
                frames,
                task_frames,
                status: StackStatus::from_u8(s.status),
                gil: GilState::from_u8(s.gil),
                thread_state: ThreadStateMatch::from_u8(s.thread_state),
                pthread_id: PthreadIdMatch::from_u8(s.pthread_id),
                cpu: s.cpu,
                comm: String::from_utf8_lossy(&s.comm[..comm_len]).into_owned(),
                start: off.start_ns,
                kind: OffCpuKind::from_u8(off.kind),
                flags: off.flags,
                in_gc: s.in_gc,
                interp: s.interp.id.try_into().unwrap_or(0),
                span: crate::traces::span_of(s.trace),
            },
        );
    }

    /// At the end of the recording (`now`, CLOCK_MONOTONIC ns): the followed threads still off CPU (`open`: the
    /// sampler's map entries of the [`Pairing::pids`]) get an interval up to now, handed to `out` in order. Those
    /// whose stack was taken when they left (preempted, or blocked outside a system call) first, then those blocked
    /// in a system call, their stack walked now from user space.
    pub fn end(&mut self, open: Vec<(u32, u32, types::off_cpu_entry)>, now: u64, out: &mut dyn FnMut(Ended<'_>)) {
        for &(pid, tid, e) in &open {
            // Back on CPU (its end came after the program stopped looking): not off CPU at the end.
            if e.walked == 0 || e.out == 0 {
                continue;
            }
            let Some(p) = self.pending.remove(&(pid, tid)) else { continue };
            if p.start != e.start || !crate::proc::task_exists(pid, tid) {
                continue;
            }
            self.open_at_end += 1;
            if p.status == StackStatus::Error {
                self.unreadable += 1;
            }
            let (duration_ns, runnable_ns) = now::open_totals(&e, now);
            let times = (now, duration_ns, runnable_ns, duration_ns);
            out(Ended::Interval(p.ended(pid, tid, times, off_cpu_flags::OPEN_AT_END)));
        }
        self.pending.clear();
        // One walker per process, opened at its first thread.
        let mut walkers: HashMap<u32, Option<StackWalker<ProcMem>>> = HashMap::new();
        for (pid, tid, e) in open {
            if e.walked != 0 || e.out == 0 {
                continue;
            }
            // Still waiting in the same call (not gone, not woken since the program stopped looking): its stack is
            // where it waits. Checked again after the walk.
            let call = Some((i64::from(e.syscall), e.uaddr));
            let waiting = || crate::proc::task_syscall(pid, tid).map(|c| (c.nr, c.args[0])) == call;
            if !waiting() {
                continue;
            }
            let Some(target) = self.processes.get(&pid) else { continue };
            let walker = walkers.entry(pid).or_insert_with(|| target.walker().ok()).as_mut();
            let walked =
                walker.zip(target.ns_tid(tid)).and_then(|(w, ns_tid)| w.walk(ns_tid).ok()).filter(|_| waiting());
            let gil_wait = target.gil_wait(call, walked.as_ref());
            let kind = if gil_wait { types::pyperf_off_kind::OFF_KIND_GIL.0 as u8 } else { e.kind };
            let (duration_ns, runnable_ns) = now::open_totals(&e, now);
            let off = sampler::OffCpu {
                part: OffCpuPart::Whole,
                start_ns: e.start,
                duration_ns,
                runnable_ns,
                weight_ns: duration_ns,
                kind,
                syscall: e.syscall,
                flags: e.flags | off_cpu_flags::OPEN_AT_END,
            };
            let comm = rest::comm16(&crate::proc::task_comm(pid, tid).unwrap_or_default());
            // Read from user space at the end: no copy of the thread's stack (its native frames are marked missing
            // with --native), no kernel stack.
            let raw = rest::raw_sample(pid, tid, now, comm, walked.as_ref(), gil_wait, None, Some(off));
            self.open_at_end += 1;
            if raw.status == types::pyperf_stack_status::STACK_STATUS_ERROR.0 as u8 {
                self.unreadable += 1;
            }
            out(Ended::Walked(Box::new(raw)));
        }
    }

    /// The recording's counters of off-CPU intervals: those whose stack could not be read, those cut by its end.
    pub fn counters(&self) -> [(&'static str, u64); 2] {
        [("off_cpu_unreadable", self.unreadable), ("off_cpu_open_at_end", self.open_at_end)]
    }
}

impl Pending {
    /// The interval this start began, ended: `times` are its end, time off CPU, of which runnable, and weight.
    fn ended(
        self,
        pid: u32,
        tid: u32,
        (end, duration_ns, runnable_ns, weight_ns): (u64, u64, u64, u64),
        flags: u8,
    ) -> Interval {
        Interval {
            pid,
            tid,
            frames: self.frames,
            task_frames: self.task_frames,
            status: self.status,
            gil: self.gil,
            thread_state: self.thread_state,
            pthread_id: self.pthread_id,
            cpu: self.cpu,
            comm: self.comm,
            start: self.start.min(end),
            end,
            duration_ns,
            runnable_ns: runnable_ns.min(duration_ns),
            weight_ns,
            kind: self.kind,
            flags: self.flags | flags,
            in_gc: self.in_gc,
            interp: self.interp,
            span: self.span,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pid: u32, tid: u32, time_ns: u64, status: StackStatus, off: sampler::OffCpu) -> RawSample<'static> {
        let mut raw = rest::raw_sample(pid, tid, time_ns, rest::comm16(b"worker"), None, false, None, Some(off));
        raw.status = status.as_u8();
        raw.cpu = 3;
        raw
    }

    fn off(part: OffCpuPart, start_ns: u64, duration_ns: u64, weight_ns: u64) -> sampler::OffCpu {
        sampler::OffCpu {
            part,
            start_ns,
            duration_ns,
            runnable_ns: duration_ns + 5,
            weight_ns,
            kind: OffCpuKind::Blocked.as_u8(),
            syscall: 7,
            flags: off_cpu_flags::BEFORE_START,
        }
    }

    #[test]
    fn a_start_and_its_end_make_an_interval() {
        let mut p = Pairing::new();
        let start = off(OffCpuPart::Start, 100, 0, 0);
        let s = raw(1, 2, 100, StackStatus::Complete, start);
        assert_eq!(p.record(&s, &start), Step::Hold);
        p.hold(&s, &start, vec![4, 5], Vec::new());
        let end = off(OffCpuPart::End, 100, 50, 50);
        let Step::Ended(i) = p.record(&raw(1, 2, 150, StackStatus::Complete, end), &end) else { panic!("no interval") };
        assert_eq!((i.pid, i.tid, i.frames.as_slice(), i.comm.as_str(), i.cpu), (1, 2, &[4, 5][..], "worker", 3));
        assert_eq!((i.start, i.end, i.duration_ns, i.runnable_ns, i.weight_ns), (100, 150, 50, 50, 50));
        assert_eq!(
            (i.kind, i.flags, i.status),
            (OffCpuKind::Blocked, off_cpu_flags::BEFORE_START, StackStatus::Complete)
        );
        // Its start is used up.
        assert_eq!(p.record(&raw(1, 2, 150, StackStatus::Complete, end), &end), Step::Nothing);
        assert_eq!(p.counters(), [("off_cpu_unreadable", 0), ("off_cpu_open_at_end", 0)]);
    }

    #[test]
    fn ends_without_their_start_write_nothing() {
        let mut p = Pairing::new();
        let start = off(OffCpuPart::Start, 100, 0, 0);
        let s = raw(1, 2, 100, StackStatus::Error, start);
        let end = |start_ns, weight| off(OffCpuPart::End, start_ns, 50, weight);
        // Lost start.
        assert_eq!(p.record(&s, &end(100, 50)), Step::Nothing);
        // Dropped as short (weight 0): not counted unreadable.
        p.hold(&s, &start, Vec::new(), Vec::new());
        assert_eq!(p.record(&s, &end(100, 0)), Step::Nothing);
        // The start of another interval (its own end was lost).
        p.hold(&s, &start, Vec::new(), Vec::new());
        assert_eq!(p.record(&s, &end(90, 50)), Step::Nothing);
        assert_eq!(p.counters()[0].1, 0);
        // Another process's start is not this one's; a forgotten process's starts are gone.
        p.hold(&s, &start, Vec::new(), Vec::new());
        assert_eq!(p.record(&raw(9, 2, 150, StackStatus::Error, end(100, 50)), &end(100, 50)), Step::Nothing);
        p.forget(1);
        assert_eq!(p.record(&s, &end(100, 50)), Step::Nothing);
        // Unreadable: a whole one with status error, an ended one whose start had it.
        p.hold(&s, &start, Vec::new(), Vec::new());
        assert!(matches!(p.record(&s, &end(100, 50)), Step::Ended(_)));
        let whole = off(OffCpuPart::Whole, 100, 50, 50);
        assert_eq!(p.record(&raw(1, 2, 150, StackStatus::Error, whole), &whole), Step::Write);
        assert_eq!(p.record(&raw(1, 2, 150, StackStatus::Complete, whole), &whole), Step::Write);
        assert_eq!(p.counters()[0].1, 2);
    }

    #[test]
    fn the_end_cuts_intervals_of_threads_still_off_cpu() {
        let mut p = Pairing::new();
        let me = std::process::id();
        let tid = me;
        let start = off(OffCpuPart::Start, 100, 0, 0);
        p.hold(&raw(me, tid, 100, StackStatus::Error, start), &start, vec![1], Vec::new());
        p.hold(&raw(me, u32::MAX, 100, StackStatus::Complete, start), &start, vec![1], Vec::new());
        let entry = |walked, out| types::off_cpu_entry { start: 100, out, walked, off_ns: 10, ..Default::default() };
        let open = vec![
            // Stack taken when it left: cut at the end, from its start.
            (me, tid, entry(1, 120)),
            // A thread gone.
            (me, u32::MAX, entry(1, 120)),
            // Back on CPU.
            (me, tid, entry(1, 0)),
            // Blocked in a system call, not followed: nothing (and not running here, not in this call).
            (me, tid, entry(0, 120)),
        ];
        let mut got = Vec::new();
        p.end(open, 200, &mut |e| match e {
            Ended::Interval(i) => got.push(i),
            Ended::Walked(_) => panic!("walked a thread of a process not followed"),
        });
        assert_eq!(got.len(), 1);
        let i = &got[0];
        assert_eq!((i.start, i.end, i.duration_ns, i.weight_ns), (100, 200, 90, 90));
        assert_eq!(i.flags, off_cpu_flags::BEFORE_START | off_cpu_flags::OPEN_AT_END);
        assert_eq!(p.counters(), [("off_cpu_unreadable", 1), ("off_cpu_open_at_end", 1)]);
        // Starts not ended are dropped at the end.
        assert!(p.pending.is_empty());
    }
}
