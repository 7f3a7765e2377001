//! A thread at rest (off CPU: blocked, or any thread `pyperf dump` looks at), read from user space: its Python
//! stack walked as the BPF program would have walked it ([`StackWalker`]), whether it waits for the GIL, and the raw
//! sample that makes of it. `record --off-cpu` reads the threads still blocked at its end this way (the program
//! walks a thread's stack when it comes back on CPU, which these did not); `pyperf dump` reads every thread so.
//!
//! Owns: what a process's walk needs ([`Target`]: its interpreter, BPF row and namespaces), a thread's tid in its
//! own PID namespace, the GIL-wait rule on the user-space side, the raw sample of a thread at rest. How often to
//! walk, and what to make of the result, is the caller's. May import the python, sampler and /proc rooms and the
//! targets' [`Namespaces`]; not its callers (the off-CPU pairing, the session, dump), the symbolizer or a sink.

use anyhow::{Context, Result};
use pyperf_format::GilState;

use crate::abi::{types, ProcConfig};
use crate::mem::ProcMem;
use crate::python::config::bpf_config;
use crate::python::detect::inspect;
use crate::python::walk::{StackWalker, WalkedStack};
use crate::python::PythonProcess;
use crate::sampler::{CoroRoots, OffCpu, RawSample, UserStack};
use crate::targets::procfs::{namespaces, Namespaces};

/// A process whose threads are read at rest: its interpreter, its configuration row (what the BPF map got for it)
/// and its namespaces.
#[derive(Debug, Clone)]
pub struct Target {
    /// The interpreter found in it.
    pub process: PythonProcess,
    /// Its BPF configuration row.
    pub config: ProcConfig,
    /// Its PID namespace.
    pub ns: Namespaces,
}

impl Target {
    /// Process `pid` as it is now: its interpreter found, its namespaces read, its configuration row built (as
    /// `pyperf dump` takes it). The errors say which step failed.
    pub fn inspect(pid: u32) -> Result<Target> {
        let process = inspect(pid).map_err(|e| anyhow::anyhow!("{e}"))?;
        let ns = namespaces(pid).with_context(|| format!("process {pid} is gone"))?;
        let config = bpf_config(&process, ns.other_pid_ns, true).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Target { process, config, ns })
    }

    /// A walker of its threads' Python stacks (one per process, for one moment: see [`StackWalker::walk`]).
    pub fn walker(&self) -> std::io::Result<StackWalker<ProcMem>> {
        StackWalker::open(&self.process, &self.config, self.ns.ns_pid)
    }

    /// The id of its thread `tid` in its own PID namespace, which the thread's state in the interpreter holds
    /// (`tid` itself when it shares pyperf's namespace); None when the thread is gone.
    pub fn ns_tid(&self, tid: u32) -> Option<u32> {
        if self.ns.other_pid_ns {
            crate::proc::task_ns_tid(self.process.pid, tid)
        } else {
            Some(tid)
        }
    }

    /// Whether a thread of it waits for the GIL (see [`gil_wait`]).
    pub fn gil_wait(&self, call: Option<(i64, u64)>, walked: Option<&WalkedStack>) -> bool {
        gil_wait(&self.config, call, walked)
    }
}

/// Whether a thread of a process configured as `config` waits for the GIL: blocked in futex(2) (`call`: the system
/// call it is blocked in and its first argument) on a word of the GIL (`config.gil_wait_addr`, or relative to the
/// GIL block the walk found when that is 0), or found waiting by the walk itself (3.15+). The BPF program decides
/// the same for an interval that ends on CPU, in C (bpf/record.bpf.h, where a record's `off_kind` becomes
/// `OFF_KIND_GIL`; there a walk's "waiting" counts only for a thread not merely runnable, which a thread read here,
/// at rest, never is): a change to one is a change to the other.
pub fn gil_wait(config: &ProcConfig, call: Option<(i64, u64)>, walked: Option<&WalkedStack>) -> bool {
    let lo = if config.gil_wait_addr != 0 { config.gil_wait_addr } else { walked.map_or(0, |w| w.gil_wait_base) };
    let futex = i64::from(types::pyperf_limits::PYPERF_NR_FUTEX.0);
    let on_gil = call
        .is_some_and(|(nr, uaddr)| nr == futex && lo != 0 && uaddr.wrapping_sub(lo) < u64::from(config.gil_wait_len));
    on_gil || walked.is_some_and(|w| w.gil == GilState::Waiting.as_u8())
}

/// The name of a thread as the kernel hands it to BPF: at most 15 bytes, NUL-padded.
pub fn comm16(name: &[u8]) -> [u8; 16] {
    let mut comm = [0u8; 16];
    for (d, s) in comm.iter_mut().take(15).zip(name) {
        *d = *s;
    }
    comm
}

/// Thread `tid` of `pid` at rest as a raw sample, as the BPF program would have written it at `time_ns`: the
/// stack `walked` (None: it could not be walked, an empty stack with status error), waiting for the GIL as
/// `gil_wait` says (see [`Target::gil_wait`]). `user`: its registers and a copy of its stack, when read (else its
/// native frames are marked missing with `--native`); never kernel frames (the caller reads those itself).
#[allow(clippy::too_many_arguments)]
pub fn raw_sample<'a>(
    pid: u32,
    tid: u32,
    time_ns: u64,
    comm: [u8; 16],
    walked: Option<&'a WalkedStack>,
    gil_wait: bool,
    user: Option<UserStack<'a>>,
    off_cpu: Option<OffCpu>,
) -> RawSample<'a> {
    let error = types::pyperf_stack_status::STACK_STATUS_ERROR.0 as u8;
    let (frames, locals, status, thread_state, pthread_id) = match walked {
        Some(w) => (w.frames.as_slice(), w.locals.as_slice(), w.status, w.thread_state, w.pthread_id),
        None => (&[][..], &[][..], error, 0, 0),
    };
    RawSample {
        pid,
        tid,
        cpu: 0,
        time_ns,
        comm,
        thread_state,
        gil: if gil_wait { GilState::Waiting.as_u8() } else { walked.map_or(GilState::NoInfo.as_u8(), |w| w.gil) },
        pthread_id,
        status,
        frames,
        locals,
        kernel: &[],
        user,
        code: None,
        off_cpu,
        coro_roots: walked.map_or_else(CoroRoots::default, |w| CoroRoots::from_leaf_first(&w.coro_roots)),
        // (A walk from user space reads no collecting flag: a thread blocked in a system call is not collecting.)
        in_gc: false,
        interp: crate::sampler::InterpInfo::default(),
        // (Nor its trace context: only the program reads that.)
        trace: crate::sampler::TraceRead::None,
        // A look at a thread, not a sample of a clock.
        periods: u32::from(off_cpu.is_none()),
        period_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_and_padded_as_the_kernel_does() {
        assert_eq!(&comm16(b"python3"), b"python3\0\0\0\0\0\0\0\0\0");
        assert_eq!(&comm16(b"a name of twenty bytes"), b"a name of twent\0");
        assert_eq!(comm16(b""), [0; 16]);
    }

    fn walked(gil: GilState, gil_wait_base: u64) -> WalkedStack {
        WalkedStack {
            frames: Vec::new(),
            locals: Vec::new(),
            status: 0,
            gil: gil.as_u8(),
            thread_state: 0,
            pthread_id: 0,
            gil_wait_base,
            coro_roots: Vec::new(),
        }
    }

    #[test]
    fn the_gil_wait_rule() {
        let futex = i64::from(types::pyperf_limits::PYPERF_NR_FUTEX.0);
        let absolute = ProcConfig { gil_wait_addr: 0x1000, gil_wait_len: 0x40, ..Default::default() };
        let held = walked(GilState::OtherThread, 0x9000);
        // A futex word in [addr, addr + len), whatever the walk found.
        assert!(gil_wait(&absolute, Some((futex, 0x1000)), None));
        assert!(gil_wait(&absolute, Some((futex, 0x103f)), Some(&held)));
        assert!(!gil_wait(&absolute, Some((futex, 0x1040)), None));
        assert!(!gil_wait(&absolute, Some((futex, 0xfff)), None), "below: no wrap-around");
        assert!(!gil_wait(&absolute, Some((futex + 1, 0x1000)), None), "another system call");
        assert!(!gil_wait(&absolute, None, None));
        // Relative: to the GIL block the walk found; without a walk, no guess.
        let relative = ProcConfig { gil_wait_addr: 0, gil_wait_len: 0x40, ..Default::default() };
        assert!(gil_wait(&relative, Some((futex, 0x9010)), Some(&held)));
        assert!(!gil_wait(&relative, Some((futex, 0x9010)), None));
        assert!(!gil_wait(&relative, Some((futex, 0x10)), Some(&walked(GilState::OtherThread, 0))));
        // Unknown length: never.
        let unknown = ProcConfig { gil_wait_addr: 0x1000, gil_wait_len: 0, ..Default::default() };
        assert!(!gil_wait(&unknown, Some((futex, 0x1000)), None));
        // 3.15+: the walk says it asked for the GIL.
        assert!(gil_wait(&unknown, None, Some(&walked(GilState::Waiting, 0))));
    }

    #[test]
    fn a_thread_not_walked_is_an_error_without_frames() {
        let raw = raw_sample(1, 2, 3, comm16(b"x"), None, false, None, None);
        assert_eq!(raw.status, types::pyperf_stack_status::STACK_STATUS_ERROR.0 as u8);
        assert!(raw.frames.is_empty() && raw.locals.is_empty());
        assert_eq!(raw.gil, GilState::NoInfo.as_u8());
        let w = walked(GilState::OtherThread, 0);
        assert_eq!(raw_sample(1, 2, 3, comm16(b"x"), Some(&w), true, None, None).gil, GilState::Waiting.as_u8());
        assert_eq!(raw_sample(1, 2, 3, comm16(b"x"), Some(&w), false, None, None).gil, w.gil);
    }
}
