//! The user-space stack walk (`pyperf::python::walk`, for threads that stay off CPU until a recording ends) against
//! live interpreters: every one of testdata/interpreters (pyenv's 2.7 and 3.6-3.13, Debian's 3.11, Debian sid's
//! 3.13, 3.14 and 3.15 chrooted into the sid root); a missing one is a failure, never a skip. Needs root (reads the
//! processes' memory); no BPF.
//!
//! testdata/workloads/offcpu/blocked.py blocks its main thread in `<module> -> f -> g -> h -> lock.acquire()` and a
//! thread in `waiter -> wait_here -> other.acquire()`. The process is configured as the recorder configures it
//! (`inspect`, `bpf_config`), each thread's stack is walked and symbolized with the recorder's code object reader,
//! and must be exactly those functions at exactly the marked lines, COMPLETE, the GIL free.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use pyperf::mem::ProcMem;
use pyperf::python::code::{CodeReader, FirstLocal, Resolution};
use pyperf::python::config::bpf_config;
use pyperf::python::walk::{StackWalker, WalkedStack};
use pyperf_format::{GilState, StackStatus};

/// A symbolized frame: (qualified name, file, line).
type Frame = (String, String, u32);

/// A process killed (SIGKILL) on drop, by pid.
struct KillPid(u32);

impl Drop for KillPid {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
    }
}

/// The line of the workload marked `# MARK name`.
fn mark(script: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(script).expect("the workload");
    let want = format!("# MARK {name}");
    let i = text.lines().position(|l| l.trim_end().ends_with(&want)).unwrap_or_else(|| panic!("no {want:?}"));
    i as u32 + 1
}

/// Starts the workload (`cmd`, a python running it, maybe under unshare): the child, the worker's and the main
/// thread's tids (in the process's PID namespace).
fn start(mut cmd: Command) -> (Kid, u32, u32) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let out = child.stdout.take().expect("stdout");
    let kid = Kid(child);
    let mut lines = BufReader::new(out).lines();
    let mut next = |key: &str| -> u32 {
        let line = lines.next().expect("a line from the workload").expect("read");
        let v = line.strip_prefix(key).unwrap_or_else(|| panic!("the workload said {line:?}, not {key}..."));
        v.trim().parse().unwrap_or_else(|_| panic!("{line:?}"))
    };
    let worker = next("worker ");
    let main = next("main ");
    let ready = lines.next().expect("ready").expect("read");
    assert_eq!(ready, "ready");
    (kid, worker, main)
}

/// The host tid of the thread of `pid` whose tid in the process's namespace is `ns_tid` (the last `NSpid`).
fn host_tid(pid: u32, ns_tid: u32) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.filter_map(|e| e.ok()).find_map(|e| {
        let tid: u32 = e.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
        let ns: u32 = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()?;
        (ns == ns_tid).then_some(tid)
    })
}

/// Whether thread `tid` of `pid` sleeps in futex(2) (/proc/PID/task/TID/syscall: its number first).
fn in_futex(pid: u32, tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).is_ok_and(|s| s.starts_with("202 "))
}

/// (qualified name, file, line) of a walked stack's frames, root first, as the recorder symbolizes them (frames the
/// interpreter hides left out).
fn symbolize(reader: &mut CodeReader<ProcMem>, stack: &WalkedStack) -> Vec<Frame> {
    let mut out = Vec::new();
    for (i, f) in stack.frames.iter().enumerate().rev() {
        let first = stack
            .locals
            .get(i)
            .map_or(FirstLocal::default(), |l| FirstLocal { object: l.first_local, type_addr: l.first_local_type });
        match reader.resolve(f.code, f.instr_value(), f.check, first) {
            Resolution::Frame(s) => out.push((s.qualified_name(), s.file.clone(), s.line)),
            Resolution::Hidden => {}
            Resolution::Lost => out.push((format!("[lost {:#x}]", f.code), String::new(), 0)),
        }
    }
    out
}

/// What the workload's threads must show, root first: the main thread's stack, and the worker's own frames (at its
/// leaf end).
fn wanted() -> (Vec<Frame>, Vec<Frame>) {
    let script = workload("offcpu/blocked.py");
    let file = script.to_str().expect("UTF-8 path").to_string();
    let frames = |names: &[&str]| -> Vec<Frame> {
        names.iter().map(|n| (n.to_string(), file.clone(), mark(&script, n))).collect()
    };
    (frames(&["<module>", "f", "g", "h"]), frames(&["waiter", "wait_here"]))
}

/// Walks the workload's two threads in process `pid` (host pid; `ns_pid`, `main` and `worker` are its pid and
/// tids in its own PID namespace) until both sleep in futex(2) with the stacks expected, within 60 s; then checks
/// them exactly, and walks again. Returns the longest walk of the main thread.
fn check(name: &str, pid: u32, ns_pid: u32, main: u32, worker: u32) -> Duration {
    let (main_want, worker_leaf) = wanted();
    let p = inspect_when_ready(pid);
    let config = bpf_config(&p, ns_pid != pid, true).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut walker = StackWalker::open(&p, &config, ns_pid).unwrap_or_else(|e| panic!("{name}: {e}"));
    let probe = p.addrs.runtime.or(p.addrs.interp_head).unwrap_or(0);
    let mut reader = CodeReader::new(ProcMem::open(pid, probe).expect("memory"), p.row, p.addrs.code_type);
    let gil_free = if config.off.gil_kind == 0 { GilState::NoInfo } else { GilState::NotLocked };
    let host = |tid: u32| host_tid(pid, tid).unwrap_or_else(|| panic!("{name}: no thread {tid} in {pid}"));
    let (host_main, host_worker) = (host(main), host(worker));

    // Until both threads sleep in futex(2) with the stacks expected (the main thread has just said "ready"): then
    // the walk must give exactly these, every time.
    let started = Instant::now();
    let (mut last_main, mut last_worker);
    let mut took = Duration::ZERO;
    loop {
        let blocked = in_futex(pid, host_main) && in_futex(pid, host_worker);
        walker.forget();
        let t = Instant::now();
        let m = walker.walk(main).unwrap_or_else(|e| panic!("{name}: main thread: {e}"));
        took = took.max(t.elapsed());
        let w = walker.walk(worker).unwrap_or_else(|e| panic!("{name}: worker: {e}"));
        last_main = symbolize(&mut reader, &m);
        last_worker = symbolize(&mut reader, &w);
        if blocked && last_main == main_want && last_worker.ends_with(&worker_leaf) {
            for (what, s) in [("main", &m), ("worker", &w)] {
                assert_eq!(StackStatus::from_u8(s.status), StackStatus::Complete, "{name} {what}");
                assert_eq!(GilState::from_u8(s.gil), gil_free, "{name} {what}");
            }
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name}: blocked {blocked}, main thread {last_main:?}, worker {last_worker:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Below the worker's own frames, threading's: its bootstrap at the root.
    let below = &last_worker[..last_worker.len() - worker_leaf.len()];
    assert!(!below.is_empty(), "{name}: {last_worker:?}");
    assert!(below.iter().all(|f| f.1.ends_with("threading.py")), "{name}: {last_worker:?}");
    assert!(below[0].0.ends_with("_bootstrap"), "{name}: {last_worker:?}");
    eprintln!("{name}: main {:?}\n{name}: worker {:?}", names(&last_main), names(&last_worker));
    // Blocked threads do not change: walked again, the same.
    for _ in 0..3 {
        assert_eq!(symbolize(&mut reader, &walker.walk(main).expect("main")), main_want, "{name}");
    }
    // A tid with no thread state: IDLE.
    let none = walker.walk(u32::MAX - 1).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!((none.frames.len(), StackStatus::from_u8(none.status)), (0, StackStatus::Idle), "{name}");
    took
}

fn names(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| format!("{}:{}", f.0, f.2)).collect()
}

/// On every interpreter: the blocked threads' stacks, exactly.
#[test]
fn blocked_threads_stacks_on_every_interpreter() {
    let _guard = serial();
    let script = workload("offcpu/blocked.py");
    let mut report = Vec::new();
    for i in interpreters() {
        let python = interpreter(&i.name);
        let mut cmd = Command::new(&python);
        cmd.arg(&script);
        let (kid, worker, main) = start(cmd);
        let pid = kid.0.id();
        assert_eq!(main, pid, "{}: the main thread's tid is the pid", i.name);
        let took = check(&i.name, pid, pid, main, worker);
        report.push(format!("{} {} us", i.name, took.as_micros()));
    }
    eprintln!("longest walk of the main thread: {}", report.join(", "));
}

/// In a PID namespace of its own (`unshare --pid`, as in a container): the process knows its threads by that
/// namespace's tids (its main thread is 1), which is what the walk is asked for. 2.7 and 3.9 (thread states matched
/// by `pthread_t`, the `struct pthread` tid offset confirmed against pid 1) and 3.12 (`native_thread_id`).
#[test]
fn blocked_threads_in_a_pid_namespace() {
    let _guard = serial();
    let script = workload("offcpu/blocked.py");
    for name in ["2.7.18", "3.9.18", "3.12.1"] {
        let python = interpreter(name);
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc"]).arg(&python).arg(&script);
        let (kid, worker, main) = start(cmd);
        assert_eq!(main, 1, "{name}: the main thread in its namespace");
        // The interpreter: unshare's child.
        let unshare = kid.0.id();
        let pid: u32 = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or_else(|| panic!("{name}: no interpreter under unshare"));
        // Killing unshare leaves the interpreter (pid 1 of its namespace) running: kill it too, on any exit.
        let _interpreter = KillPid(pid);
        check(name, pid, 1, main, worker);
    }
}
