//! End-to-end check of the BPF sampler against real interpreters (needs root: loads BPF).
//!
//! Runs testdata/workloads/callchain.py under pyenv's 3.11.7 (shared libpython, PIE
//! executable) and Debian's /usr/bin/python3.11 (non-PIE, stripped .symtab) at once, samples
//! both for ~2 s and checks, per process, that the raw frames' code objects resolve (co_name
//! read through /proc/PID/mem with the version's layout) to the known call chain root to leaf,
//! that most stacks are COMPLETE, and that a single-threaded CPU-bound process holds the GIL
//! (THIS_THREAD). A second test checks 1000+ frame stacks: complete below PYPERF_MAX_FRAMES,
//! leaf-nearest frames kept and TRUNCATED above.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;

use common::{inspect_when_ready, interpreter, workload, Kid};
use pyperf::abi;
use pyperf::python::config::bpf_config;
use pyperf::python::layout::Layout;
use pyperf::python::{self, PythonProcess};
use pyperf::sampler::{self, Rate, SampleEvent, Sampler, SamplerOptions};
use pyperf_format::{GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

/// The tests load BPF and burn CPU: run them one at a time (the machine has 2 cores).
static SERIAL: Mutex<()> = Mutex::new(());

const CHAIN: &[&str] = &["<module>", "main", "outer_frame", "middle_frame", "leaf_spin"];

/// Starts a workload that prints `ready` once it is in the state the test samples (past start-up, at its depth,
/// its threads started), and waits for that line: a loaded machine can take seconds to get there, so a fixed
/// sleep would let start-up samples into the shares the tests check.
fn spawn_ready(python: &Path, args: &[&str]) -> Kid {
    assert!(python.exists(), "interpreter {} not installed", python.display());
    let mut kid = Kid(Command::new(python)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", python.display())));
    let mut line = String::new();
    BufReader::new(kid.0.stdout.as_mut().expect("piped stdout")).read_line(&mut line).expect("read the workload");
    assert_eq!(line.trim(), "ready", "{} {args:?} said {line:?}", python.display());
    kid
}

/// Resolves code object addresses to `co_name` by reading the target's memory.
struct Names {
    mem: File,
    layout: &'static Layout,
    cache: HashMap<u64, Option<String>>,
}

impl Names {
    fn new(p: &PythonProcess) -> Names {
        let mem = File::open(format!("/proc/{}/mem", p.pid)).expect("open /proc/PID/mem");
        Names { mem, layout: p.row.layout, cache: HashMap::new() }
    }

    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem.read_exact_at(&mut b, addr).ok()?;
        Some(u64::from_le_bytes(b))
    }

    /// The check word of a code object, recomputed from the target's memory.
    fn check(&self, code: u64) -> Option<u32> {
        let l = self.layout;
        let line = self.read_u64(code + l.code_firstlineno as u64)? as u32;
        let file = self.read_u64(code + l.code_filename as u64)?;
        let name = self.read_u64(code + l.code_name as u64)?;
        Some(pyperf::python::code::code_check(line, file, name))
    }

    fn name(&mut self, code: u64) -> Option<String> {
        if let Some(n) = self.cache.get(&code) {
            return n.clone();
        }
        let l = self.layout;
        let n = (|| {
            let s = self.read_u64(code + l.code_name as u64)?;
            let len = self.read_u64(s + l.unicode_length as u64)?;
            if len > 256 {
                return None;
            }
            let mut state = [0u8; 4];
            self.mem.read_exact_at(&mut state, s + l.unicode_state as u64).ok()?;
            let state = u32::from_le_bytes(state);
            assert!(state >> l.unicode_ascii_shift & 1 == 1, "test names are ASCII");
            let mut buf = vec![0u8; len as usize];
            self.mem.read_exact_at(&mut buf, s + l.ascii_data as u64).ok()?;
            String::from_utf8(buf).ok()
        })();
        self.cache.insert(code, n.clone());
        n
    }
}

#[derive(Debug, Default, Clone)]
struct Sample {
    status: u8,
    gil: u8,
    thread_state: u8,
    pthread_id: u8,
    tid: u32,
    comm: String,
    frames: Vec<abi::RawFrame>,
}

/// Samples by pid, the BPF counters, and the kernel's `(run_time_ns, run_cnt)` of the program.
type Sampled = (HashMap<u32, Vec<Sample>>, sampler::Counters, Option<(u64, u64)>);

/// Samples the given processes until each has `each` samples (at most a minute): how long that takes depends on
/// how much CPU a loaded machine leaves them, so a fixed time would not say how many samples there are.
fn sample(procs: &[&PythonProcess], rate: Rate, each: usize) -> Sampled {
    let mut sampler = Sampler::new(&SamplerOptions {
        event: SampleEvent::CpuClock,
        rate,
        ringbuf_bytes: 4 << 20,
        ..SamplerOptions::default()
    })
    .unwrap_or_else(|e| panic!("Sampler::new: {e}"));
    sampler.enable_bpf_stats().expect("enable bpf stats");
    for p in procs {
        sampler.add_process(p.pid, &bpf_config(p, false, true).unwrap()).unwrap_or_else(|e| panic!("add_process: {e}"));
    }
    // Shared by the callback and the loop's check between polls.
    let out: RefCell<HashMap<u32, Vec<Sample>>> = RefCell::default();
    let t = Instant::now();
    let mut on = |s: &sampler::RawSample<'_>| {
        // Code snapshots (PYPERF_EVENT_CODE) are not samples.
        if s.code.is_some() {
            return;
        }
        let comm_len = s.comm.iter().position(|&c| c == 0).unwrap_or(16);
        out.borrow_mut().entry(s.pid).or_default().push(Sample {
            status: s.status,
            gil: s.gil,
            thread_state: s.thread_state,
            pthread_id: s.pthread_id,
            tid: s.tid,
            comm: String::from_utf8_lossy(&s.comm[..comm_len]).into_owned(),
            frames: s.frames.to_vec(),
        });
    };
    let enough = || procs.iter().all(|p| out.borrow().get(&p.pid).is_some_and(|v| v.len() >= each));
    while !enough() && t.elapsed() < Duration::from_secs(60) {
        sampler.poll(Duration::from_millis(100), &mut on).expect("poll");
    }
    for p in procs {
        sampler.remove_process(p.pid);
    }
    sampler.poll(Duration::ZERO, &mut on).expect("poll");
    (out.take(), sampler.counters(), sampler.bpf_stats())
}

fn frac(n: usize, d: usize) -> f64 {
    n as f64 / d.max(1) as f64
}

#[test]
fn callchain_on_pyenv_and_debian_python311() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");

    let script = workload("callchain.py");
    let script = script.to_str().unwrap();
    let pythons = [interpreter("3.11.7"), interpreter("debian-3.11")];
    let kids: Vec<Kid> = pythons.iter().map(|py| spawn_ready(py, &[script, "3600"])).collect();
    let procs: Vec<PythonProcess> = kids.iter().map(|k| inspect_when_ready(k.0.id())).collect();
    for p in &procs {
        eprintln!("target: {p} build-id {:?} bias {:#x} addrs {:x?}", p.build_id, p.load_bias, p.addrs);
        assert_eq!((p.version.0, p.version.1), (3, 11), "{p}");
    }
    assert_eq!(procs[0].version, (3, 11, 7));
    assert_eq!(procs[1].load_bias, 0, "Debian's python3.11 is not PIE");
    assert_ne!(procs[0].load_bias, 0, "pyenv's libpython is relocated");
    let (by_pid, counters, stats) = sample(&procs.iter().collect::<Vec<_>>(), Rate::Frequency(499), 1000);
    eprintln!("counters: {counters:?}");
    if let Some((ns, cnt)) = stats {
        eprintln!(
            "bpf_stats: {cnt} runs (all CPUs, all processes), {ns} ns total, {:.0} ns/run, {:.0} ns per target sample",
            ns as f64 / cnt.max(1) as f64,
            ns as f64 / counters.samples.max(1) as f64
        );
    }
    assert_eq!(counters.lost, 0, "ring buffer drops");

    for p in &procs {
        let samples = by_pid.get(&p.pid).cloned().unwrap_or_default();
        let n = samples.len();
        // Sampled until 1000 each (a minute at most).
        assert!(n >= 200, "{p}: only {n} samples");
        let mut names = Names::new(p);
        let complete = samples.iter().filter(|s| s.status == StackStatus::Complete.as_u8()).count();
        let gil_mine = samples.iter().filter(|s| s.gil == GilState::ThisThread.as_u8()).count();
        let ts_match = samples.iter().filter(|s| s.thread_state == ThreadStateMatch::Match.as_u8()).count();
        let pt_match = samples.iter().filter(|s| s.pthread_id == PthreadIdMatch::Match.as_u8()).count();
        let mut chains: HashMap<Vec<String>, usize> = HashMap::new();
        let mut full_chain = 0;
        for s in &samples {
            assert_eq!(s.tid, p.pid, "single-threaded workload");
            assert!(s.comm.starts_with("python3"), "comm {:?}", s.comm);
            let chain: Vec<String> = s
                .frames
                .iter()
                .rev()
                .map(|f| names.name(f.code).unwrap_or_else(|| format!("?{:#x}", f.code)))
                .collect();
            if chain == CHAIN {
                full_chain += 1;
            }
            // Every complete stack starts at the module and main, whatever the leaf.
            if s.status == StackStatus::Complete.as_u8() {
                assert!(chain.len() >= 2 && chain[0] == "<module>" && chain[1] == "main", "{p}: {chain:?}");
            }
            *chains.entry(chain).or_default() += 1;
        }
        let mut top: Vec<_> = chains.into_iter().collect();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        eprintln!(
            "{p}: {n} samples, complete {:.1}%, GIL this thread {:.1}%, thread state match {:.1}%, pthread id match {:.1}%, \
             full chain {:.1}%; top stacks {:?}",
            100.0 * frac(complete, n),
            100.0 * frac(gil_mine, n),
            100.0 * frac(ts_match, n),
            100.0 * frac(pt_match, n),
            100.0 * frac(full_chain, n),
            &top[..top.len().min(3)]
        );
        assert_eq!(top[0].0, CHAIN, "{p}: most common stack");
        assert!(frac(full_chain, n) > 0.8, "{p}: the known chain in most samples");
        assert!(frac(complete, n) > 0.95, "{p}: most stacks COMPLETE");
        assert!(frac(gil_mine, n) > 0.9, "{p}: GIL held by the sampled thread");
        assert!(frac(ts_match, n) > 0.9, "{p}: thread state is the GIL holder's");
        assert!(frac(pt_match, n) > 0.95, "{p}: pthread id matches");
        // The check word mixes co_firstlineno, co_filename and co_name as user space recomputes it.
        let leaf = samples.iter().find(|s| s.frames.len() == CHAIN.len()).expect("a full stack");
        for f in &leaf.frames {
            assert_eq!(Some(f.check), names.check(f.code), "{p}: check word of {:?}", names.name(f.code));
        }
    }
}

#[test]
fn deep_stacks_complete_and_truncated() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");

    let script = workload("deep.py");
    let script = script.to_str().unwrap();
    let py = interpreter("3.11.7");
    // <module> + main + 1500 x recurse + spin = 1503 frames; 3000 recursions exceed MAX_FRAMES.
    // Each says `ready` once at its depth.
    let deep = spawn_ready(&py, &[script, "1500", "3600"]);
    let deeper = spawn_ready(&py, &[script, "3000", "3600"]);
    let p1 = inspect_when_ready(deep.0.id());
    let p2 = inspect_when_ready(deeper.0.id());

    let (by_pid, counters, stats) = sample(&[&p1, &p2], Rate::Frequency(199), 300);
    eprintln!("counters: {counters:?}");
    if let Some((ns, cnt)) = stats {
        eprintln!(
            "bpf_stats: {cnt} runs, {:.0} ns per target sample (stacks of 1503 and 2048+ frames)",
            ns as f64 / counters.samples.max(1) as f64
        );
    }

    let s1 = by_pid.get(&p1.pid).cloned().unwrap_or_default();
    assert!(s1.len() >= 50, "deep: only {} samples", s1.len());
    let mut names = Names::new(&p1);
    let ok = s1.iter().filter(|s| s.status == StackStatus::Complete.as_u8() && s.frames.len() == 1503).count();
    eprintln!("deep (1503 frames): {} samples, {} complete with 1503 frames", s1.len(), ok);
    assert!(frac(ok, s1.len()) > 0.9, "complete 1503-frame stacks");
    let s = s1.iter().find(|s| s.frames.len() == 1503).unwrap();
    let chain: Vec<String> = s.frames.iter().rev().map(|f| names.name(f.code).unwrap_or_default()).collect();
    assert_eq!(&chain[..2], ["<module>", "main"]);
    assert!(chain[2..1502].iter().all(|n| n == "recurse"));
    assert_eq!(chain[1502], "spin");

    let s2 = by_pid.get(&p2.pid).cloned().unwrap_or_default();
    assert!(s2.len() >= 50, "deeper: only {} samples", s2.len());
    let mut names = Names::new(&p2);
    let trunc =
        s2.iter().filter(|s| s.status == StackStatus::Truncated.as_u8() && s.frames.len() == abi::MAX_FRAMES).count();
    eprintln!("deeper (3003 frames): {} samples, {} truncated at {}", s2.len(), trunc, abi::MAX_FRAMES);
    assert!(frac(trunc, s2.len()) > 0.9, "truncated stacks keep MAX_FRAMES frames");
    assert!(counters.truncated >= trunc as u64);
    let s = s2.iter().find(|s| s.status == StackStatus::Truncated.as_u8()).unwrap();
    // Leaf-nearest frames kept: the leaf is spin, everything else recurse.
    assert_eq!(names.name(s.frames[0].code).as_deref(), Some("spin"));
    assert!(s.frames[1..].iter().all(|f| names.name(f.code).as_deref() == Some("recurse")));
}

#[test]
fn thread_without_thread_state_is_idle() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");

    // A busy process registered as "Python 3.11" whose _PyRuntime points at unmapped memory:
    // no interpreter, so no thread state. Every sample must still produce an event, IDLE, with
    // no frames, and nothing may break on the failed reads.
    let kid = Kid(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("spawn sh"));
    let pid = kid.0.id();
    let fake = PythonProcess {
        pid,
        version: (3, 11, 0),
        interpreter: PathBuf::from("/bin/sh"),
        executable: PathBuf::from("/bin/sh"),
        build_id: None,
        cmdline: vec!["sh".into()],
        load_bias: 0,
        addrs: python::PythonAddrs { runtime: Some(0x1000), ..Default::default() },
        row: pyperf::python::row_for(3, 11).unwrap(),
    };
    let (by_pid, counters, _) = sample(&[&fake], Rate::Frequency(199), 200);
    let s = by_pid.get(&pid).cloned().unwrap_or_default();
    eprintln!("idle: {} samples, {counters:?}", s.len());
    assert!(s.len() >= 50, "only {} samples", s.len());
    assert!(s.iter().all(|s| s.status == StackStatus::Idle.as_u8() && s.frames.is_empty()));
    assert!(s.iter().all(|s| s.pthread_id == PthreadIdMatch::ThreadStateNull.as_u8()));
    assert!(s.iter().all(|s| s.thread_state == ThreadStateMatch::BothNull.as_u8()));
    assert!(s.iter().all(|s| s.gil == GilState::Error.as_u8()));
    assert_eq!(counters.idle, s.len() as u64);
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    exec: bool,
    name: String,
}

fn maps(pid: u32) -> Vec<Mapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let (a, b) = range.split_once('-')?;
            let name = f.nth(3).unwrap_or("").to_string();
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                exec: perms.contains('x'),
                name,
            })
        })
        .collect()
}

fn mapping_of(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    maps.iter().find(|m| m.start <= addr && addr < m.end)
}

/// /proc/PID/stat's startstack (field 28): where the main thread's stack began at exec.
fn start_stack(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    rest.split_whitespace().nth(28 - 3).and_then(|s| s.parse().ok()).expect("startstack")
}

/// What the native/kernel test keeps of a record.
#[derive(Debug, Clone)]
struct NativeRecord {
    pid: u32,
    tid: u32,
    off_cpu: Option<sampler::OffCpu>,
    kernel: Vec<u64>,
    /// ip, sp, bp, stack copy
    user: Option<(u64, u64, u64, Vec<u8>)>,
}

#[test]
fn native_and_kernel_stacks() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");

    let py = interpreter("3.11.7");
    // A busy main thread and a busy second thread (a glibc pthread: its stack ends at its control block); a
    // reader of /dev/urandom (in the kernel most of the time); a sleeper (off CPU in a system call).
    // Each says `ready` once in its loop (the busy one: with its thread started).
    let busy = spawn_ready(
        &py,
        &[
            "-c",
            "import threading\ndef spin():\n    while True: sum(i*i for i in range(1000))\n\
               threading.Thread(target=spin, daemon=True).start()\nprint('ready', flush=True)\nspin()",
        ],
    );
    let reader = spawn_ready(
        &py,
        &["-c", "f = open('/dev/urandom', 'rb', buffering=0)\nprint('ready', flush=True)\nwhile True: f.read(1 << 20)"],
    );
    let sleeper = spawn_ready(&py, &["-c", "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.02)"]);
    let procs: Vec<PythonProcess> = [&busy, &reader, &sleeper].iter().map(|k| inspect_when_ready(k.0.id())).collect();

    const USTACK: u32 = 32768;
    let mut sampler = Sampler::new(&SamplerOptions {
        rate: Rate::Frequency(499),
        ringbuf_bytes: 4 << 20,
        off_cpu_min_ns: Some(1_000_000),
        native: true,
        kernel: true,
        ustack_bytes: USTACK,
        ..SamplerOptions::default()
    })
    .unwrap_or_else(|e| panic!("Sampler::new: {e}"));
    for p in &procs {
        sampler.add_process(p.pid, &bpf_config(p, false, true).unwrap()).unwrap_or_else(|e| panic!("add_process: {e}"));
    }
    // Shared by the callback and the loop's check between polls.
    let records: RefCell<Vec<NativeRecord>> = RefCell::default();
    let mut on = |s: &sampler::RawSample<'_>| {
        if s.code.is_some() {
            return;
        }
        records.borrow_mut().push(NativeRecord {
            pid: s.pid,
            tid: s.tid,
            off_cpu: s.off_cpu,
            kernel: s.kernel.to_vec(),
            user: s.user.map(|u| (u.ip, u.sp, u.bp, u.stack.to_vec())),
        });
    };
    // Until each target has twice what the checks below need (at most a minute): how long that takes depends on
    // how much CPU a loaded machine leaves them.
    let enough = || {
        let r = records.borrow();
        let busy = r.iter().filter(|r| r.pid == procs[0].pid && r.off_cpu.is_none());
        let busy_thread = busy.clone().filter(|r| r.tid != r.pid).count();
        let reader = r.iter().filter(|r| r.pid == procs[1].pid && r.off_cpu.is_none() && !r.kernel.is_empty());
        let blocked = r.iter().filter(|r| r.pid == procs[2].pid && r.off_cpu.is_some_and(|o| o.syscall >= 0));
        busy.count() >= 200 && busy_thread >= 50 && reader.count() >= 40 && blocked.count() >= 20
    };
    let t = Instant::now();
    while !enough() && t.elapsed() < Duration::from_secs(60) {
        sampler.poll(Duration::from_millis(100), &mut on).expect("poll");
    }
    for p in &procs {
        sampler.remove_process(p.pid);
    }
    sampler.poll(Duration::ZERO, &mut on).expect("poll");
    let records = records.take();
    let counters = sampler.counters();
    eprintln!("counters: {counters:?}");
    assert_eq!((counters.lost, counters.malformed), (0, 0), "records lost");
    assert!(counters.ustack_copies > 0 && counters.kernel_stacks > 0);

    let kernel_addr = |a: u64| a >= 0xffff_8000_0000_0000;
    // CPU samples of the busy process: the user stack of either thread, inside that thread's stack mapping.
    let busy_maps = maps(procs[0].pid);
    let top = start_stack(procs[0].pid);
    let samples: Vec<&NativeRecord> = records.iter().filter(|r| r.pid == procs[0].pid && r.off_cpu.is_none()).collect();
    assert!(samples.len() >= 100, "busy: {} samples", samples.len());
    let (mut main_full, mut thread_full, mut stable_top) = (0, 0, 0);
    let mem = File::open(format!("/proc/{}/mem", procs[0].pid)).expect("open mem");
    for r in &samples {
        let (ip, sp, _, stack) = r.user.as_ref().expect("user registers in every sample");
        assert!(!stack.is_empty() && stack.len() <= USTACK as usize, "{r:?}");
        let m = mapping_of(&busy_maps, *sp).unwrap_or_else(|| panic!("sp {sp:#x} in no mapping"));
        assert!(sp + stack.len() as u64 <= m.end, "the copy stays inside the stack's mapping {m:?}");
        assert!(mapping_of(&busy_maps, *ip).is_some_and(|m| m.exec), "ip {ip:#x} in no executable mapping");
        if r.tid == r.pid {
            assert_eq!(m.name, "[stack]", "main thread's sp");
            // The main thread's copy ends where its stack began (argc), unless it is longer than USTACK.
            if sp + stack.len() as u64 == top {
                main_full += 1;
                // The top of the stack (below argc: _start's and __libc_start_main's frames) no longer changes.
                let mut now = [0u8; 64];
                mem.read_exact_at(&mut now, top - 64).expect("read the stack top");
                stable_top += usize::from(now[..] == stack[stack.len() - 64..]);
            }
        } else {
            assert_ne!(m.name, "[stack]", "a thread's stack is a mapping of its own");
            // A glibc thread's copy ends at its control block, near the top of its mapping.
            if m.end - (sp + stack.len() as u64) < 16384 {
                thread_full += 1;
            }
        }
    }
    eprintln!(
        "busy: {} samples, main thread's copy to its stack top {main_full} (top bytes as in memory {stable_top}), \
         other thread's to its control block {thread_full}; typical copy {} bytes",
        samples.len(),
        samples.iter().filter_map(|r| r.user.as_ref()).map(|u| u.3.len()).sum::<usize>() / samples.len()
    );
    assert!(main_full > 0 && thread_full > 0, "copies reach the top of the thread's stack");
    assert_eq!(stable_top, main_full);
    // User mode: no kernel stack.
    assert!(samples.iter().filter(|r| r.kernel.is_empty()).count() * 2 > samples.len());

    // Kernel addresses by name (kptr_restrict 0: this test runs as root).
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let mut syms: Vec<(u64, &str)> = kallsyms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((u64::from_str_radix(f.next()?, 16).ok()?, f.nth(1)?))
        })
        .collect();
    syms.sort_unstable();
    let name = |a: u64| syms.partition_point(|s| s.0 <= a).checked_sub(1).map_or("?", |i| syms[i].1);
    // The reader is in the kernel most of the time: kernel stacks, and the user registers of its system call.
    let reader_maps = maps(procs[1].pid);
    let in_kernel: Vec<&NativeRecord> =
        records.iter().filter(|r| r.pid == procs[1].pid && r.off_cpu.is_none() && !r.kernel.is_empty()).collect();
    eprintln!(
        "reader: {} samples with a kernel stack, e.g. {:?}",
        in_kernel.len(),
        in_kernel.first().map(|r| r.kernel.iter().map(|&a| name(a)).collect::<Vec<_>>())
    );
    assert!(in_kernel.len() >= 20, "reader: {} kernel stacks", in_kernel.len());
    for r in &in_kernel {
        assert!(r.kernel.iter().all(|&a| kernel_addr(a)), "{:x?}", r.kernel);
        let (ip, sp, _, stack) = r.user.as_ref().expect("user registers");
        assert!(mapping_of(&reader_maps, *ip).is_some_and(|m| m.exec), "syscall ip {ip:#x}");
        assert_eq!(mapping_of(&reader_maps, *sp).map(|m| m.name.as_str()), Some("[stack]"));
        assert!(!stack.is_empty());
    }

    // The sleeper: off-CPU intervals in a system call, with the kernel stack of the block and the user stack.
    let blocked: Vec<&NativeRecord> =
        records.iter().filter(|r| r.pid == procs[2].pid && r.off_cpu.is_some_and(|o| o.syscall >= 0)).collect();
    assert!(blocked.len() >= 10, "sleeper: {} off-CPU intervals", blocked.len());
    let with_kstack = blocked.iter().filter(|r| !r.kernel.is_empty()).count();
    let first = blocked.iter().find(|r| !r.kernel.is_empty()).expect("a kernel stack at a block");
    let names: Vec<&str> = first.kernel.iter().map(|&a| name(a)).collect();
    eprintln!("sleeper: {} intervals, {with_kstack} with a kernel stack, e.g. {names:?}", blocked.len());
    assert!(with_kstack * 10 >= blocked.len() * 9);
    assert!(names.iter().any(|n| n.contains("schedule")), "the block's stack: {names:?}");
    assert!(names.iter().any(|n| n.contains("nanosleep")), "in the system call: {names:?}");
    assert!(blocked.iter().all(|r| r.user.as_ref().is_some_and(|u| !u.3.is_empty())), "user stacks");
}

/// 3.11+: the rootmost Python frame of each activation of the evaluation loop carries the entry flag
/// (`abi::INSTR_ENTRY`): 3.11 from `_PyInterpreterFrame.is_entry`, 3.12+ from the shim or entry frame below it.
/// A function called from C (`map`) starts an activation; Python-to-Python calls do not. Never on <= 3.10.
#[test]
fn entry_frames_flagged() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");

    let script = "def leaf(x):\n    s = 0\n    for i in range(3000): s += i\n    return s\n\
                  def via_c():\n    return sum(map(leaf, range(50)))\n\
                  def main():\n    print('ready', flush=True)\n    while True: via_c()\n\
                  main()";
    let names = ["3.10.13", "3.11.7", "3.12.1", "3.13.0", "sid-3.14", "sid-3.15"];
    let kids: Vec<Kid> = names.iter().map(|n| spawn_ready(&interpreter(n), &["-c", script])).collect();
    let procs: Vec<PythonProcess> = kids.iter().map(|k| inspect_when_ready(k.0.id())).collect();
    let (by_pid, _, _) = sample(&procs.iter().collect::<Vec<_>>(), Rate::Frequency(499), 300);
    for (name, p) in names.iter().zip(&procs) {
        let samples = by_pid.get(&p.pid).cloned().unwrap_or_default();
        let mut code_names = Names::new(p);
        let mut checked = 0;
        for s in samples.iter().filter(|s| s.status == StackStatus::Complete.as_u8()) {
            let chain: Vec<String> =
                s.frames.iter().rev().map(|f| code_names.name(f.code).unwrap_or_default()).collect();
            if chain != ["<module>", "main", "via_c", "leaf"] {
                continue;
            }
            let flags: Vec<bool> = s.frames.iter().rev().map(|f| f.is_entry()).collect();
            let want = if p.version >= (3, 11, 0) { [true, false, false, true] } else { [false; 4] };
            assert_eq!(flags, want, "{name}: entry flags of {chain:?}");
            // The flag is not part of the position.
            assert!(s.frames.iter().all(|f| f.instr_value() & abi::INSTR_ENTRY == 0 || f.instr_value() == u32::MAX));
            checked += 1;
        }
        eprintln!("{name}: {} samples, {checked} with the whole chain checked", samples.len());
        assert!(checked >= 10, "{name}: only {checked} samples of the chain");
    }
}
