//! Python thread names (issue #13): which threads the samples showed, and their `threading` names read from the
//! process when due ([`ThreadNames::read`]), handed out with the time they apply from.
//!
//! A tid names one thread only as long as that thread lives: each thread seen in the samples is known by its start
//! time (/proc/PID/task/TID/stat), checked again at every read of names and, for a named thread, on its samples at
//! most once per [`RECHECK_EVERY_NS`] (a change makes a read due). A thread gone, or a tid that now belongs to
//! another thread, ends the name given to it (an empty name, from the new thread's start), and the `Thread` object
//! that named it names nothing else while it stays in `threading._active` (a stale `_DummyThread`). What this misses:
//! a tid reused within a second of its last check by a thread that ends before the next one; its samples keep the old
//! name.
//!
//! Reading the objects is [`crate::python::threads`]' (a CPython fact); this module keeps the bookkeeping. It
//! imports neither the session nor the sink: names go out through a closure.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::mem::ProcMem;
use crate::proc;
use crate::python::threads::{NamedThread, ThreadNameReader, ThreadNamesError};
use crate::python::PythonProcess;
use crate::targets::procfs;

/// Looked up for every sample: FxHash, not SipHash.
type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// Thread names are read at most this often per process while new threads show up in its samples.
const NAMES_EVERY: Duration = Duration::from_secs(1);
/// While threads seen in the samples stay unnamed (and no new one shows up), the reads back off: 1, 2, 4 ... s apart,
/// at most this many times in a row (threads `threading` does not know never get a name).
const NAMES_RETRIES: u32 = 5;
/// A named thread's start time is checked again on its samples at most this often (CLOCK_MONOTONIC ns): one small
/// /proc read per busy thread and second.
const RECHECK_EVERY_NS: u64 = 1_000_000_000;

/// The thread names of one followed process: what was read, and when to read again.
struct ProcessThreads {
    /// `None` when its PID namespace could not be told (its tids could not be mapped to the samples'), or its
    /// version's threads cannot be named.
    reader: Option<ThreadNameReader<ProcMem>>,
    /// Its pid in its own PID namespace.
    ns_pid: u32,
    /// Whether that namespace is another than the host's (tids there differ).
    namespaced: bool,
    /// Threads seen in its samples (host tids), until they are gone.
    tids: FastMap<u32, Tid>,
    /// `Thread` objects that named a thread now gone or replaced, while `threading._active` still holds them: they
    /// name no other thread.
    refused: HashSet<u64>,
    /// A thread showed up in the samples since the last read.
    new_tids: bool,
    last_read: Option<Instant>,
    /// Reads in a row that left a seen thread unnamed with no new thread in between.
    misses: u32,
}

/// A thread seen in the samples.
#[derive(Default)]
struct Tid {
    /// When it started: /proc/PID/task/TID/stat field 22 (clock ticks since boot); `None` when unreadable.
    start: Option<u64>,
    /// A later start seen on its samples: the tid is another thread's since then.
    restart: Option<u64>,
    /// When its start was last checked (sample time, CLOCK_MONOTONIC ns).
    checked_ns: u64,
    /// Its tid in the process's PID namespace, once looked up (namespaced processes only; fixed for a start time).
    ns_tid: Option<u32>,
    /// The name last handed out for it.
    named: Option<Named>,
}

/// A name handed out for a thread.
struct Named {
    name: String,
    /// The `Thread` object it was read from.
    object: u64,
    /// When (CLOCK_MONOTONIC ns).
    at_ns: u64,
}

/// The thread names of the followed processes.
#[derive(Default)]
pub struct ThreadNames {
    processes: FastMap<u32, ProcessThreads>,
    /// Reads of thread names, those that failed, and their total and longest duration.
    reads: u64,
    errors: u64,
    read_ns: u64,
    read_max_ns: u64,
}

impl ThreadNames {
    /// Starts following the threads of `p` (forgetting an earlier process of the same pid). A process whose names
    /// cannot be read gets none, silently.
    pub fn add_process(&mut self, p: &PythonProcess) {
        // Thread names: a memory handle of their own (reads of names and of code objects do not interleave), and
        // the process's PID namespace, without which its tids cannot be matched to the samples' (then no names).
        let ns = proc::status(p.pid).and_then(|s| nspids(&s));
        let named = p.row.thread_names.is_some();
        let (reader, ns_pid, namespaced) = match (ns, named.then(|| ProcMem::open(p.pid, p.mapped_addr()))) {
            (Some((ns_pid, namespaced)), Some(Ok(mem))) => {
                (Some(ThreadNameReader::new(mem, p.row, &p.addrs)), ns_pid, namespaced)
            }
            _ => (None, p.pid, false),
        };
        self.processes.insert(
            p.pid,
            ProcessThreads {
                reader,
                ns_pid,
                namespaced,
                tids: FastMap::default(),
                refused: HashSet::new(),
                new_tids: false,
                last_read: None,
                misses: 0,
            },
        );
    }

    /// Stops following `pid` (it exited; its pid may come back as another process).
    pub fn remove_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Thread `tid` of `pid` was in a sample taken at `time_ns` (CLOCK_MONOTONIC): a new one makes a read due; a
    /// named one's start time is checked again now and then.
    pub fn saw(&mut self, pid: u32, tid: u32, time_ns: u64) {
        // Only threads of processes whose names are read (else nothing would ever forget them).
        let Some(t) = self.processes.get_mut(&pid).filter(|t| t.reader.is_some()) else { return };
        match t.tids.entry(tid) {
            Entry::Vacant(e) => {
                // Which thread this tid is. Unreadable: gone already (a late sample); forgotten at the next
                // read, not a reason for one.
                let start = task_start(pid, tid);
                t.new_tids |= start.is_some();
                e.insert(Tid { start, checked_ns: time_ns, ..Tid::default() });
            }
            Entry::Occupied(mut e) => {
                // A named thread's tid may have gone to a new thread: its samples would take the old name.
                let info = e.get_mut();
                if info.named.is_some() && time_ns.saturating_sub(info.checked_ns) >= RECHECK_EVERY_NS {
                    info.checked_ns = time_ns;
                    let now = task_start(pid, tid);
                    if now.is_some() && now != info.start && info.restart.is_none() {
                        info.restart = now;
                        t.new_tids = true;
                    }
                }
            }
        }
    }

    /// Reads the Python thread names of the processes where they are due and hands each name that is new or changed
    /// for its thread to `named` (pid, tid, name, CLOCK_MONOTONIC ns it applies from). Due: a process whose samples
    /// showed a new thread since its last read, at most once per [`NAMES_EVERY`]; one whose sampled threads stay
    /// unnamed, backing off; with `all` (before the recording ends: names may be set late), every process with
    /// threads in the samples. Before each read, a thread gone or replaced (its tid reused) gets an empty name: its
    /// name no longer applies.
    pub fn read(&mut self, now: Instant, all: bool, named: &mut dyn FnMut(u32, u32, &str, u64)) {
        for (&pid, t) in self.processes.iter_mut() {
            if t.reader.is_none() {
                continue;
            }
            let since = t.last_read.map(|r| now.saturating_duration_since(r));
            let due = if all {
                !t.tids.is_empty()
            } else if t.new_tids {
                since.is_none_or(|d| d >= NAMES_EVERY)
            } else {
                t.misses < NAMES_RETRIES
                    && since.is_none_or(|d| d >= NAMES_EVERY * (1 << t.misses))
                    && t.tids.values().any(|i| i.named.is_none())
            };
            if !due {
                continue;
            }
            let started = Instant::now();
            let now_ns = crate::clock::monotonic_ns();
            t.check_tids(pid, now_ns, named);
            let Some(reader) = t.reader.as_mut().filter(|_| !t.tids.is_empty()) else {
                // Every thread seen is gone (the process exited, say): nothing to name.
                t.new_tids = false;
                t.last_read = Some(now);
                continue;
            };
            let found = match reader.read(t.ns_pid) {
                Ok(found) => found,
                // A program that does not use `threading` (yet): nothing to read, not an error.
                Err(ThreadNamesError::NotImported) => Vec::new(),
                Err(_) => {
                    self.errors += 1;
                    Vec::new()
                }
            };
            // Refused objects stay refused while `_active` holds them.
            t.refused.retain(|o| found.iter().any(|n| n.object == *o));
            for (tid, name, object) in t.host_names(pid, found) {
                let Some(info) = t.tids.get_mut(&tid) else { continue };
                if t.refused.contains(&object) {
                    continue;
                }
                let at_ns = match &info.named {
                    Some(n) if n.name == name => n.at_ns,
                    _ => {
                        named(pid, tid, &name, now_ns);
                        now_ns
                    }
                };
                info.named = Some(Named { name, object, at_ns });
            }
            let took = started.elapsed().as_nanos() as u64;
            self.reads += 1;
            self.read_ns += took;
            self.read_max_ns = self.read_max_ns.max(took);
            let unnamed = t.tids.values().any(|i| i.named.is_none());
            t.misses = if t.new_tids || !unnamed { 0 } else { t.misses + 1 };
            t.new_tids = false;
            t.last_read = Some(now);
        }
    }

    /// What reading thread names cost, as counters for the recording's statistics: reads, those that failed (the
    /// process's objects unreadable, changing, or too much work to read), their total and their longest duration in
    /// microseconds.
    pub fn counters(&self) -> [(String, u64); 4] {
        [
            ("thread_name_reads".to_string(), self.reads),
            ("thread_name_errors".to_string(), self.errors),
            ("thread_name_read_us".to_string(), self.read_ns / 1000),
            ("thread_name_read_max_us".to_string(), self.read_max_ns / 1000),
        ]
    }
}

/// (innermost pid, whether there is more than one level) from a /proc/PID/status text's `NSpid` line.
fn nspids(status: &str) -> Option<(u32, bool)> {
    let levels = proc::parse_nspids(status)?;
    Some((*levels.last()?, levels.len() > 1))
}

impl ProcessThreads {
    /// Checks that each thread seen is still the thread it was (its start time). One gone, or whose tid another
    /// thread got, loses its name: an empty name is handed to `named`, from the new thread's start (to the clock
    /// tick, never before the name it ends) or, for one gone, from now; its `Thread` object names nothing else.
    fn check_tids(&mut self, pid: u32, now_ns: u64, named: &mut dyn FnMut(u32, u32, &str, u64)) {
        let mut gone = Vec::new();
        for (&tid, info) in self.tids.iter_mut() {
            let start = task_start(pid, tid);
            // The new thread's start, if its samples showed it (it may be gone by now).
            let restart = info.restart.take().or(start.filter(|_| start != info.start));
            if start.is_some() && restart.is_none() {
                continue;
            }
            if let Some(n) = info.named.take() {
                self.refused.insert(n.object);
                let from = restart.and_then(start_to_monotonic).unwrap_or(now_ns);
                named(pid, tid, "", from.max(n.at_ns.saturating_add(1)));
            }
            match start {
                Some(s) => *info = Tid { start: Some(s), checked_ns: now_ns, ..Tid::default() },
                None => gone.push(tid),
            }
        }
        for tid in gone {
            self.tids.remove(&tid);
        }
    }

    /// `found` (tids in the process's own PID namespace) as host tids of threads seen in the samples (just checked
    /// to be threads of this process): (tid, name, `Thread` object). In another PID namespace, each seen thread's
    /// namespace tid is read once (/proc/PID/task/TID/status).
    fn host_names(&mut self, pid: u32, found: Vec<NamedThread>) -> Vec<(u32, String, u64)> {
        if found.is_empty() {
            return Vec::new();
        }
        // ns tid -> host tid
        let map: HashMap<u32, u32> = if self.namespaced {
            self.tids
                .iter_mut()
                .filter_map(|(&tid, info)| {
                    if info.ns_tid.is_none() {
                        info.ns_tid = proc::task_ns_tid(pid, tid);
                    }
                    Some((info.ns_tid?, tid))
                })
                .collect()
        } else {
            self.tids.keys().map(|&tid| (tid, tid)).collect()
        };
        found.into_iter().filter_map(|n| Some((*map.get(&n.ns_tid)?, n.name, n.object))).collect()
    }
}

/// When thread `tid` of process `pid` started (/proc/PID/task/TID/stat field 22, clock ticks since boot); `None`
/// when it is not a thread of that process (any more).
fn task_start(pid: u32, tid: u32) -> Option<u64> {
    proc::task_stat(pid, tid).map(|s| s.identity.start_time)
}

/// A /proc start time (clock ticks since boot, CLOCK_BOOTTIME) as CLOCK_MONOTONIC ns, rounded down to its tick: at or
/// before the start.
fn start_to_monotonic(ticks: u64) -> Option<u64> {
    let boot_ns = procfs::ticks_ns(ticks)?;
    // Monotonic first: the offset comes out a little large, the time a little early (the safe side).
    let mono = procfs::clock_ns(libc::CLOCK_MONOTONIC)?;
    let boot = procfs::clock_ns(libc::CLOCK_BOOTTIME)?;
    boot_ns.checked_sub(boot.checked_sub(mono)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gettid() -> u32 {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    fn process_threads(pid: u32) -> ProcessThreads {
        ProcessThreads {
            reader: None,
            ns_pid: pid,
            namespaced: false,
            tids: FastMap::default(),
            refused: HashSet::new(),
            new_tids: false,
            last_read: None,
            misses: 0,
        }
    }

    /// A named thread of this process: while it lives, its name stands; once its tid is another thread's (its
    /// start time changed), an empty name ends it from that thread's start (never before the name itself); once
    /// it is gone, from now, and the tid is forgotten. The `Thread` objects that named it are refused.
    #[test]
    fn a_thread_gone_or_replaced_loses_its_name() {
        let pid = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(gettid()).expect("send");
            let _ = stopped.recv();
        });
        let tid = rx.recv().expect("the worker's tid");
        let start = task_start(pid, tid).expect("a live thread of this process");
        let mut t = process_threads(pid);
        let named = |name: &str, object: u64, at_ns: u64| Some(Named { name: name.into(), object, at_ns });
        t.tids.insert(tid, Tid { start: Some(start), named: named("worker", 0x1000, 5), ..Tid::default() });
        t.tids.insert(gettid(), Tid { start: task_start(pid, gettid()), ..Tid::default() });
        let mut ended = Vec::new();
        let now = crate::clock::monotonic_ns();
        t.check_tids(pid, now, &mut |p, tid, name, at| ended.push((p, tid, name.to_string(), at)));
        assert!(ended.is_empty(), "{ended:?}");
        assert!(t.tids[&tid].named.is_some());

        // As if the tid had been another thread's before: this one replaced it.
        t.tids.get_mut(&tid).expect("seen").start = Some(start.wrapping_sub(1));
        let now = crate::clock::monotonic_ns();
        t.check_tids(pid, now, &mut |p, tid, name, at| ended.push((p, tid, name.to_string(), at)));
        let from = start_to_monotonic(start).expect("the start as a monotonic time");
        assert_eq!(ended.len(), 1, "{ended:?}");
        let (p, t_, name, at) = ended[0].clone();
        assert_eq!((p, t_, name.as_str()), (pid, tid, ""));
        // (The clocks' offset is read twice: a few ns apart.)
        assert!(at.abs_diff(from) < 1_000_000 && at <= now && at >= 6, "{at} for a start at {from}, now {now}");
        assert!(now - from < 10_000_000_000, "the worker started {} ms ago?", (now - from) / 1_000_000);
        assert!(t.tids[&tid].named.is_none() && t.tids[&tid].start == Some(start));
        assert!(t.refused.contains(&0x1000));

        // Gone: ended from now, forgotten.
        t.tids.get_mut(&tid).expect("seen").named = named("worker", 0x2000, 7);
        stop.send(()).expect("stop");
        worker.join().expect("join");
        // join returns when the thread has left, but the kernel lists it in /proc until it is reaped: a moment
        // later, longer on a busy machine (CI beside a busy loop once saw it still there).
        let listed = std::path::PathBuf::from(format!("/proc/{pid}/task/{tid}"));
        let waited = std::time::Instant::now();
        while listed.exists() && waited.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        ended.clear();
        let now = crate::clock::monotonic_ns();
        t.check_tids(pid, now, &mut |p, tid, name, at| ended.push((p, tid, name.to_string(), at)));
        assert_eq!(ended, vec![(pid, tid, String::new(), now)]);
        assert!(!t.tids.contains_key(&tid) && t.tids.contains_key(&gettid()));
        assert!(t.refused.contains(&0x2000));
    }

    /// Names are handed out only for threads seen in the samples (ns tid = host tid outside a PID namespace).
    #[test]
    fn names_only_for_threads_seen() {
        let pid = std::process::id();
        let mut t = process_threads(pid);
        t.tids.insert(pid, Tid { start: task_start(pid, pid), ..Tid::default() });
        let found = vec![
            NamedThread { ns_tid: pid, name: "MainThread".into(), object: 1 },
            NamedThread { ns_tid: pid + 1, name: "unseen".into(), object: 2 },
        ];
        assert_eq!(t.host_names(pid, found.clone()), vec![(pid, "MainThread".to_string(), 1)]);
        // As if in a PID namespace of its own: each seen thread's namespace tid is read once, then kept.
        t.namespaced = true;
        assert_eq!(t.host_names(pid, found.clone()), vec![(pid, "MainThread".to_string(), 1)]);
        assert_eq!(t.tids[&pid].ns_tid, Some(pid), "looked up and kept (this test runs in the host's namespace)");
        t.tids.get_mut(&pid).expect("seen").ns_tid = Some(pid + 1);
        assert_eq!(t.host_names(pid, found), vec![(pid, "unseen".to_string(), 2)], "the kept one is used");
    }
}
