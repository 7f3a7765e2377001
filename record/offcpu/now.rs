//! Off-CPU intervals the BPF program did not see begin or end: the threads of a process already off CPU when it is
//! first followed (as entries for the program's `off_cpu` map), and the totals of an interval still going on at the
//! end. Reads /proc through [`crate::proc`]; imports nothing else of the crate's but the ABI.

use pyperf_format::off_cpu_flags;

use crate::abi::types;

/// The threads of `pid` that are off CPU now (not running or runnable, as /proc says), as entries of the BPF
/// `off_cpu` map starting at `now` and flagged as such: their switch-out was before the recording could see it.
/// Why each waits comes from /proc too (task state; the system call and its first argument from
/// /proc/PID/task/TID/syscall); only waits in a system call (the program ends them at sys_exit).
pub fn off_cpu_now(pid: u32, now: u64) -> Vec<(u32, types::off_cpu_entry)> {
    let Ok(tids) = crate::proc::tasks(pid) else { return Vec::new() };
    let mut out = Vec::new();
    for tid in tids {
        let Some(stat) = crate::proc::task_stat(pid, tid) else { continue };
        let kind = match stat.state {
            'S' | 'I' | 't' | 'T' => types::pyperf_off_kind::OFF_KIND_BLOCKED,
            'D' => types::pyperf_off_kind::OFF_KIND_DISK,
            _ => continue, // running or runnable (R), or dying
        };
        // Only a wait in a system call ends where the program can see it (sys_exit); one outside (a page fault)
        // would never end: it is left out.
        let Some(call) = crate::proc::task_syscall(pid, tid) else { continue };
        let Ok(syscall) = i32::try_from(call.nr) else { continue };
        out.push((
            tid,
            types::off_cpu_entry {
                start: now,
                out: now,
                wake: 0,
                uaddr: call.args[0],
                off_ns: 0,
                runnable_ns: 0,
                // Not known: a wait this mark ends unseen falls back to the thread's CPU time.
                run_delay: 0,
                syscall,
                kind: kind.0 as u8,
                flags: off_cpu_flags::BEFORE_START,
                walked: 0,
                out_runnable: 0,
            },
        ));
    }
    out
}

/// Time off CPU and of it runnable, ns, of an interval still going on at `now` (CLOCK_MONOTONIC ns), from its
/// BPF map entry.
pub fn open_totals(e: &types::off_cpu_entry, now: u64) -> (u64, u64) {
    let (mut off, mut runnable) = (e.off_ns, e.runnable_ns);
    if e.out != 0 && now > e.out {
        off += now - e.out;
        if e.out_runnable != 0 {
            runnable += now - e.out;
        } else if e.wake >= e.out && now > e.wake {
            runnable += now - e.wake;
        }
    }
    (off, runnable.min(off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_of_an_interval_going_on() {
        let e = |out, wake, out_runnable| types::off_cpu_entry {
            off_ns: 10,
            runnable_ns: 4,
            out,
            wake,
            out_runnable,
            ..Default::default()
        };
        // Still off CPU since 100, not woken: all of it blocked.
        assert_eq!(open_totals(&e(100, 0, 0), 150), (60, 4));
        // Woken at 120, waiting for a CPU since.
        assert_eq!(open_totals(&e(100, 120, 0), 150), (60, 34));
        // Left runnable (preempted): all of it runnable.
        assert_eq!(open_totals(&e(100, 0, 1), 150), (60, 54));
        // Woken before it left (an old wake): not counted.
        assert_eq!(open_totals(&e(100, 90, 0), 150), (60, 4));
        // On CPU now (out 0), or a clock behind: only what the map has, runnable at most the whole.
        assert_eq!(open_totals(&e(0, 0, 0), 150), (10, 4));
        assert_eq!(open_totals(&e(200, 0, 0), 150), (10, 4));
        let over = types::off_cpu_entry { off_ns: 3, runnable_ns: 9, ..Default::default() };
        assert_eq!(open_totals(&over, 150), (3, 3));
    }

    #[test]
    fn a_thread_blocked_in_a_system_call_is_off_cpu_now() {
        use std::time::{Duration, Instant};
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<i32>();
        let waiter = std::thread::spawn(move || {
            // SAFETY: gettid(2) has no arguments and cannot fail.
            let tid = unsafe { libc::gettid() };
            let _ = ready_tx.send(tid);
            let _ = rx.recv();
        });
        let tid = u32::try_from(ready_rx.recv().expect("the thread's tid")).expect("a tid");
        let pid = std::process::id();
        // Waits in futex(2) once it reached recv (a generous limit for a loaded machine).
        let until = Instant::now() + Duration::from_secs(60);
        let found = loop {
            let now = off_cpu_now(pid, 42);
            if let Some(&(_, e)) = now.iter().find(|(t, _)| *t == tid) {
                break Some(e);
            }
            if Instant::now() > until {
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = tx.send(());
        let _ = waiter.join();
        let e = found.expect("the waiting thread off CPU");
        assert_eq!((e.start, e.out, e.flags, e.walked), (42, 42, off_cpu_flags::BEFORE_START, 0));
        assert_eq!(e.kind, types::pyperf_off_kind::OFF_KIND_BLOCKED.0 as u8);
        assert_eq!(e.syscall, types::pyperf_limits::PYPERF_NR_FUTEX.0 as i32);
        assert!(off_cpu_now(u32::MAX, 42).is_empty());
    }
}
