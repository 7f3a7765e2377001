//! The ring buffer's records as [`RawSample`]s: parsed in place (no copy) and handed to the caller's callback.

use std::cell::Cell;
use std::rc::Rc;

use crate::abi::{types, RawFrame};

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
    /// `Some` for the record of an off-CPU interval (`--off-cpu`) that ended at `time_ns`; `None` for a CPU sample.
    pub off_cpu: Option<OffCpu>,
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
}

impl Shared {
    pub(super) fn dispatch(&self, data: &[u8]) {
        self.records.set(self.records.get() + 1);
        let hsize = std::mem::size_of::<types::pyperf_event_header>();
        let Ok(h) = plain::from_bytes::<types::pyperf_event_header>(data) else {
            self.malformed.set(self.malformed.get() + 1);
            return;
        };
        let n = h.nframes as usize;
        let fsize = std::mem::size_of::<RawFrame>();
        let Some(fbytes) = data.get(hsize..hsize + n * fsize) else {
            self.malformed.set(self.malformed.get() + 1);
            return;
        };
        // Ring buffer records are 8-byte aligned and the header is 88 bytes: no copy needed.
        let Ok(frames) = plain::slice_from_bytes::<RawFrame>(fbytes) else {
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
        };
        if let Some(callback) = self.callback.get() {
            // SAFETY: set by `poll` from a live `&mut dyn FnMut` and cleared before it returns;
            // the ring buffer only calls back from inside `poll`.
            unsafe { (*callback)(&sample) }
        }
    }
}

/// Clears the callback when `poll` returns or unwinds.
pub(super) struct CallbackGuard(pub(super) Rc<Shared>);
impl Drop for CallbackGuard {
    fn drop(&mut self) {
        self.0.callback.set(None);
    }
}
