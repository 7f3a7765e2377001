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
        // Ring buffer records are 8-byte aligned and the header is 48 bytes: no copy needed.
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
