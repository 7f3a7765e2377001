//! The run roots of generator frames (asyncio tasks, #31) as the BPF program records them, against live
//! interpreters (needs root: loads BPF). testdata/workloads/coro_roots.py runs three threads: two an event loop whose
//! task `spinner` (coroutine spin -> mid -> leaf) burns the CPU, in one of them leaf burns it in a generator resumed
//! with next(); the third resumes that generator from a plain function. On 3.11, 3.12, 3.13 (pyenv) and Debian sid's
//! 3.14 and 3.15 every complete sample must carry the run root of the task: the index of spin's frame (Handle._run
//! the next frame rootward), at the address of the frame embedded in the very coroutine object the workload created;
//! the generator's frame is a run of its own from 3.12 on (behind next()'s C-stack entry frame). Nothing with the
//! process's tracking off, nothing before 3.11.
//!
//! `task_records_wake_user_space`: the program wakes user space for a record of a task (bpf/tasks.bpf.h), only for
//! a process user space reads tasks of, never for a generator's run or a coroutine user space said is no task's.
//!
//! `bench_run_roots_cost` (ignored; bench/tasks-bpf.sh runs it) measures what the run roots cost per sample.

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{inspect_when_ready, interpreter, repo, serial, workload, Kid};
use pyperf::abi::RawFrame;
use pyperf::mem::ProcMem;
use pyperf::python::code::{CodeReader, FirstLocal, Resolution};
use pyperf::python::config::bpf_config;
use pyperf::python::frees::{code_frees, with_frees, CodeFrees};
use pyperf::python::PythonProcess;
use pyperf::sampler::{Rate, RawSample, SampleEvent, Sampler, SamplerOptions};
use pyperf_format::StackStatus;

/// `PyGenObject.gi_iframe`/`PyCoroObject.cr_iframe`: where a coroutine embeds its frame (docs/design/asyncio-tasks.md,
/// section 2.3, from the interpreters' DWARF and `_Py_DebugOffsets`): a run root's address less this is the
/// coroutine.
fn gi_iframe(version: (u8, u8)) -> u64 {
    if version == (3, 11) {
        80
    } else {
        72
    }
}

/// A thread of the workload: its tid, the addresses of its spin() coroutine and burn() generator (0: none).
#[derive(Debug, Clone)]
struct Thread {
    kind: String,
    tid: u32,
    coro: u64,
    gen: u64,
}

struct Target {
    name: &'static str,
    p: PythonProcess,
    threads: Vec<Thread>,
    _kid: Kid,
}

/// Starts the workload under interpreter `name` and waits until both its threads burn the CPU.
fn start(name: &'static str) -> Target {
    let python = interpreter(name);
    let script = workload("coro_roots.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", python.display()));
    let out = child.stdout.take().expect("stdout");
    let kid = Kid(child);
    let mut threads = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.expect("read the workload");
        if line == "ready" {
            break;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "{name}: the workload said {line:?}");
        let num = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("{name}: {line:?}"));
        threads.push(Thread { kind: f[0].to_string(), tid: num(f[1]) as u32, coro: num(f[2]), gen: num(f[3]) });
    }
    assert_eq!(threads.len(), 3, "{name}: the workload ended early");
    let p = inspect_when_ready(kid.0.id());
    Target { name, p, threads, _kid: kid }
}

/// What the test keeps of a sample.
#[derive(Debug, Clone)]
struct Sample {
    status: u8,
    frames: Vec<RawFrame>,
    roots: Vec<(usize, u64)>,
    total: u32,
}

impl Sample {
    fn of(s: &RawSample<'_>) -> Sample {
        Sample {
            status: s.status,
            frames: s.frames.to_vec(),
            roots: s.coro_roots.leaf_first().collect(),
            total: s.coro_roots.total(),
        }
    }
}

/// A sampler at 499 Hz following the targets, their tracking as `track`.
fn sampler(targets: &[&Target], track: bool) -> Sampler {
    let mut sampler = Sampler::new(&SamplerOptions {
        event: SampleEvent::CpuClock,
        rate: Rate::Frequency(499),
        ringbuf_bytes: 4 << 20,
        ..SamplerOptions::default()
    })
    .unwrap_or_else(|e| panic!("Sampler::new: {e}"));
    for t in targets {
        let config = bpf_config(&t.p, false, track).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        sampler.add_process(t.p.pid, &config).unwrap_or_else(|e| panic!("{}: add_process: {e}", t.name));
    }
    sampler
}

/// Samples the targets (their tracking as `track`) until each of their threads has `each` samples, within two
/// minutes; by tid.
fn sample(targets: &[&Target], track: bool, each: usize) -> HashMap<u32, Vec<Sample>> {
    let mut sampler = sampler(targets, track);
    let tids: Vec<u32> = targets.iter().flat_map(|t| t.threads.iter().map(|th| th.tid)).collect();
    let mut out: HashMap<u32, Vec<Sample>> = HashMap::new();
    let started = Instant::now();
    let enough = |out: &HashMap<u32, Vec<Sample>>| tids.iter().all(|t| out.get(t).is_some_and(|v| v.len() >= each));
    while !enough(&out) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "too few samples in 2 minutes: {:?}",
            tids.iter().map(|t| (t, out.get(t).map_or(0, Vec::len))).collect::<Vec<_>>()
        );
        sampler
            .poll(Duration::from_millis(100), &mut |s: &RawSample<'_>| {
                if s.code.is_none() {
                    out.entry(s.tid).or_default().push(Sample::of(s));
                }
            })
            .expect("poll");
    }
    let counters = sampler.counters();
    assert_eq!(counters.lost, 0, "ring buffer drops");
    assert_eq!(counters.malformed, 0, "malformed records");
    out
}

/// The frames' names (qualified), leaf first; "?" for a frame the reader cannot name or hides.
fn names(reader: &mut CodeReader<ProcMem>, frames: &[RawFrame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match reader.resolve(f.code, f.instr_value(), f.check, FirstLocal::default()) {
            Resolution::Frame(s) => s.qualified_name(),
            Resolution::Hidden | Resolution::Lost => "?".to_string(),
        })
        .collect()
}

/// The code object of the frame at `addr` in process `p`, read from its memory (the layout's `frame_code`, tag
/// bits masked).
fn code_of_frame(mem: &File, p: &PythonProcess, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr + p.row.layout.frame_code as u64).ok()?;
    Some(u64::from_le_bytes(b) & p.row.code_tag_mask)
}

/// Checks the samples of one target with tracking on; returns how many were checked per thread.
fn check_tracked(t: &Target, by_tid: &HashMap<u32, Vec<Sample>>) -> Vec<(String, usize)> {
    let v = (t.p.version.0, t.p.version.1);
    let probe = t.p.addrs.runtime.or(t.p.addrs.interp_head).unwrap_or(0);
    let mut reader = CodeReader::new(ProcMem::open(t.p.pid, probe).expect("memory"), t.p.row, t.p.addrs.code_type);
    let mem = File::open(format!("/proc/{}/mem", t.p.pid)).expect("/proc/PID/mem");
    let mut checked = Vec::new();
    for th in t.threads.iter().filter(|th| th.kind != "plain") {
        let samples = by_tid.get(&th.tid).map_or(&[][..], Vec::as_slice);
        let mut n = 0;
        for s in samples {
            let names = names(&mut reader, &s.frames);
            let Some(spin) = names.iter().position(|n| n == "spin") else { continue };
            if StackStatus::from_u8(s.status) != StackStatus::Complete {
                continue;
            }
            let what =
                format!("{} {} thread: stack {names:?}, run roots {:?} of {}", t.name, th.kind, s.roots, s.total);
            // The task's coroutine: spin's frame, the loop's Handle._run rootward of it, embedded in the coroutine
            // object the workload made.
            assert_eq!(names.get(spin + 1).map(String::as_str), Some("Handle._run"), "{what}");
            assert_eq!(spin.checked_sub(1).and_then(|i| names.get(i)).map(String::as_str), Some("mid"), "{what}");
            let mut want = vec![(spin, th.coro + gi_iframe(v))];
            // The generator resumed by next(): its own run from 3.12 (the entry frame of next() before it);
            // on 3.11 nothing separates it from leaf's frame.
            if let Some(burn) = names.iter().position(|n| n == "burn") {
                assert!(th.gen != 0 && names.get(burn + 1).map(String::as_str) == Some("leaf"), "{what}");
                if v >= (3, 12) {
                    want.insert(0, (burn, th.gen + gi_iframe(v)));
                }
            }
            assert_eq!(s.roots, want, "{what}");
            assert_eq!(s.total as usize, want.len(), "{what}");
            // Each root's address is a frame of the code object at its index.
            for &(i, addr) in &s.roots {
                assert_eq!(code_of_frame(&mem, &t.p, addr), Some(s.frames[i].code), "{what}: frame at {addr:#x}");
            }
            n += 1;
        }
        checked.push((th.kind.clone(), n));
        assert!(
            n >= 30,
            "{}: only {n} complete samples in spin of the {} thread of {}",
            t.name,
            th.kind,
            samples.len()
        );
        if th.kind == "gen" {
            let in_burn = samples.iter().filter(|s| s.roots.len() == 2).count();
            assert!(v < (3, 12) || in_burn >= 10, "{}: {in_burn} samples inside the generator", t.name);
        }
    }
    checked
}

#[test]
fn run_roots_point_at_the_task_coroutine() {
    let _serial = serial();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");
    let tracked: Vec<Target> = ["3.11.7", "3.12.1", "3.13.0", "sid-3.14", "sid-3.15"].into_iter().map(start).collect();
    // Before 3.11 frames have no owner: no run roots, even with tracking on.
    let old = start("3.10.13");
    let mut all: Vec<&Target> = tracked.iter().collect();
    all.push(&old);
    let by_tid = sample(&all, true, 150);
    for t in &tracked {
        eprintln!("{}: checked {:?}", t.name, check_tracked(t, &by_tid));
    }
    for th in &old.threads {
        let s = &by_tid[&th.tid];
        assert!(s.iter().all(|s| s.total == 0 && s.roots.is_empty()), "3.10: run roots");
    }
    // Tracking off: none, on any version.
    let by_tid = sample(&all, false, 60);
    for t in &all {
        for th in &t.threads {
            let s = &by_tid[&th.tid];
            assert!(s.iter().all(|s| s.total == 0 && s.roots.is_empty()), "{}: run roots with tracking off", t.name);
        }
    }
}

/// The wakeups for task records (bpf/tasks.bpf.h): none before user space says it reads the process's tasks
/// (frame 0), then some for the spinner tasks, unknown or listed (value 1) alike, and none once their coroutine
/// frames are said to be no task's (value 0), though the plain thread's generator stays unknown: a generator's run
/// is no task's.
#[test]
fn task_records_wake_user_space() {
    let _serial = serial();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads BPF: run it as root");
    let targets: Vec<Target> = ["3.11.7", "3.12.1", "sid-3.14"].into_iter().map(start).collect();
    let mut sampler = sampler(&targets.iter().collect::<Vec<_>>(), true);
    let tids: Vec<u32> = targets.iter().flat_map(|t| t.threads.iter().map(|th| th.tid)).collect();
    // Samples every thread `each` more times (within two minutes); returns the wakeups counted so far.
    let more = |sampler: &mut Sampler, each: usize| -> u64 {
        let mut n: HashMap<u32, usize> = HashMap::new();
        let started = Instant::now();
        while !tids.iter().all(|t| n.get(t).is_some_and(|&k| k >= each)) {
            assert!(started.elapsed() < Duration::from_secs(120), "too few samples in 2 minutes: {n:?}");
            sampler
                .poll(Duration::from_millis(100), &mut |s: &RawSample<'_>| {
                    if s.code.is_none() {
                        *n.entry(s.tid).or_default() += 1;
                    }
                })
                .expect("poll");
        }
        sampler.counters().task_wakeups
    };
    assert_eq!(more(&mut sampler, 40), 0, "wakeups before user space reads tasks");
    for t in &targets {
        sampler.set_task_root(t.p.pid, 0, Some(true));
    }
    let unknown = more(&mut sampler, 40);
    assert!(unknown > 0, "no wakeup for unknown tasks");
    let tell = |sampler: &mut Sampler, task: bool| {
        for t in &targets {
            let v = (t.p.version.0, t.p.version.1);
            for th in t.threads.iter().filter(|th| th.coro != 0) {
                sampler.set_task_root(t.p.pid, th.coro + gi_iframe(v), Some(task));
            }
        }
    };
    tell(&mut sampler, true);
    let listed = more(&mut sampler, 40);
    assert!(listed > unknown, "no wakeup for listed tasks ({unknown} before, {listed} after)");
    tell(&mut sampler, false);
    // From here on every sample is gated: read after the updates, the counter must not move.
    let no_task = sampler.counters().task_wakeups;
    assert_eq!(more(&mut sampler, 40), no_task, "wakeups for coroutines no task's, or a generator");
    eprintln!("wakeups: {unknown} while the tasks were unknown, {} while listed, none after", listed - unknown);
}

/// One repetition of the benchmark: the BPF program's run time per target sample of two samplers recording the
/// same process at once, tracking off and on.
struct Rep {
    off_ns: f64,
    on_ns: f64,
    frames: f64,
    ring_bytes: f64,
    roots: f64,
    /// Of the check words of new code objects, the share taken from the cache (else read): frames the fast path
    /// can take.
    cached: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The benchmark of bench/tasks-bpf.sh: BPF ns per sample with the run roots tracked and not, on a coroutine
/// stack and a plain stack of the same depth, both samplers on the same process at once (997 and 1009 Hz, swapped
/// every repetition); the ring's bytes per sample. Settings from the environment (the driver sets them):
/// PYPERF_BENCH_PYTHON (an interpreter of testdata/interpreters, 3.11.7), PYPERF_BENCH_DEPTH (20),
/// PYPERF_BENCH_REPS (12), PYPERF_BENCH_SECS (3).
#[test]
#[ignore]
fn bench_run_roots_cost() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let python = interpreter(&env("PYPERF_BENCH_PYTHON", "3.11.7"));
    let depth: usize = env("PYPERF_BENCH_DEPTH", "20").parse().expect("depth");
    let reps: usize = env("PYPERF_BENCH_REPS", "12").parse().expect("reps");
    let secs: f64 = env("PYPERF_BENCH_SECS", "3").parse().expect("secs");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    pin(0);
    let bench = repo().join("bench/workloads");
    for (what, script) in [("coroutine", "coro.py"), ("plain", "work.py")] {
        let mut kid = Kid(Command::new("taskset")
            .args(["-c", &(cpus - 1).to_string()])
            .arg(&python)
            .arg(bench.join(script))
            .args(["busy", &depth.to_string(), "3600"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the workload"));
        if what == "coroutine" {
            let mut line = String::new();
            BufReader::new(kid.0.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("ready");
            eprintln!("{what}: {}", line.trim());
        } else {
            std::thread::sleep(Duration::from_secs(1));
        }
        let p = inspect_when_ready(kid.0.id());
        let mut rows = Vec::new();
        for r in 0..reps {
            rows.push(bench_rep(&p, r, secs));
            let last = rows.last().expect("a row");
            eprintln!(
                "{what} rep {r}: off {:.0} ns, on {:.0} ns, on/off {:.3}, {:.1} frames, {:.2} run roots per sample, \
                 check words cached {:.3} (off at {} Hz, {} loaded first)",
                last.off_ns,
                last.on_ns,
                last.on_ns / last.off_ns,
                last.frames,
                last.roots,
                last.cached,
                if r % 2 == 0 { 997 } else { 1009 },
                if (r / 2) % 2 == 0 { "off" } else { "on" },
            );
        }
        let off = median(rows.iter().map(|r| r.off_ns).collect());
        let on = median(rows.iter().map(|r| r.on_ns).collect());
        let ratio = median(rows.iter().map(|r| r.on_ns / r.off_ns).collect());
        let diff = median(rows.iter().map(|r| r.on_ns - r.off_ns).collect());
        let bytes = median(rows.iter().map(|r| r.ring_bytes).collect());
        // The program loaded first runs slower or faster by a few percent, more than the effect measured: per load
        // order, the median difference; their mean.
        let by_order = |first: usize| {
            let reps: Vec<&Rep> =
                rows.iter().enumerate().filter(|(r, _)| (r / 2) % 2 == first).map(|(_, rep)| rep).collect();
            median(reps.iter().map(|r| r.on_ns - r.off_ns).collect())
        };
        let balanced = (by_order(0) + by_order(1)) / 2.0;
        println!(
            "RESULT {what} python={} depth={depth} frames={:.1} reps={reps} secs={secs}: off {off:.0} ns, on {on:.0} \
             ns per sample (medians); on-off {diff:+.0} ns, on/off {ratio:.3} (medians per repetition); on-off by load \
             order: off first {:+.0} ns, on first {:+.0} ns, mean {balanced:+.0} ns; ring bytes per sample \
             {bytes:.1} (before #31: {:.1}); run roots per sample {:.2}",
            p.version_string(),
            median(rows.iter().map(|r| r.frames).collect()),
            by_order(0),
            by_order(1),
            bytes - 48.0,
            median(rows.iter().map(|r| r.roots).collect()),
        );
        drop(kid);
    }
}

/// One repetition: samplers with tracking off and on, loaded afresh, on `p` for `secs`. `r` says which is loaded
/// first and samples at 997 Hz (the other at 1009 Hz): off on even repetitions of each pair, on on odd ones; the
/// load order swaps every other pair, so each combination comes once in 4 repetitions.
fn bench_rep(p: &PythonProcess, r: usize, secs: f64) -> Rep {
    let new = |hz: u64, track: bool| {
        let mut s = Sampler::new(&SamplerOptions {
            event: SampleEvent::CpuClock,
            rate: Rate::Frequency(hz),
            ringbuf_bytes: 4 << 20,
            // Events on the target's threads, as `record -p` opens them: every run of the program is a sample of it.
            per_task: true,
            ..SamplerOptions::default()
        })
        .expect("Sampler::new");
        s.enable_bpf_stats().expect("bpf stats");
        // The check-word cache on, as a recording turns it on (its count of freed code objects: a uprobe before
        // 3.14), so that frames take the fast path.
        let config = bpf_config(p, false, track).expect("config");
        let mem = ProcMem::open(p.pid, config.interp_head_addr).expect("memory");
        let frees = code_frees(p, &mem, config.interp_head_addr).expect("code frees");
        if let CodeFrees::Dealloc { binary, offset, .. } = &frees {
            s.watch_code_frees(p.pid, binary, *offset).expect("uprobe");
        }
        s.add_process(p.pid, &with_frees(config, &frees)).expect("add_process");
        s.follow_threads(p.pid).expect("follow_threads");
        s
    };
    let off_997 = r % 2 == 0;
    let (hz_off, hz_on) = if off_997 { (997, 1009) } else { (1009, 997) };
    let (mut off, mut on) = if (r / 2) % 2 == 0 {
        let off = new(hz_off, false);
        (off, new(hz_on, true))
    } else {
        let on = new(hz_on, true);
        (new(hz_off, false), on)
    };
    let header = std::mem::size_of::<pyperf::abi::types::pyperf_event_header>() as f64;
    let (mut n, mut frames, mut roots) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < secs {
        off.poll(Duration::from_millis(20), &mut |_: &RawSample<'_>| {}).expect("poll");
        on.poll(Duration::from_millis(20), &mut |s: &RawSample<'_>| {
            if s.code.is_none() {
                n += 1;
                frames += s.frames.len() as u64;
                roots += u64::from(s.coro_roots.total());
            }
        })
        .expect("poll");
    }
    let per = |s: &Sampler| {
        let (ns, _) = s.bpf_stats().expect("bpf stats");
        ns as f64 / s.counters().samples.max(1) as f64
    };
    let n = n.max(1) as f64;
    let c = on.counters();
    Rep {
        cached: c.checks_cached as f64 / (c.checks_cached + c.checks_read).max(1) as f64,
        off_ns: per(&off),
        on_ns: per(&on),
        frames: frames as f64 / n,
        // The ring's own 8-byte record header, the event header, 16 bytes a frame.
        ring_bytes: 8.0 + header + 16.0 * frames as f64 / n,
        roots: roots as f64 / n,
    }
}
