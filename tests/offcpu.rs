//! Off-CPU and wall-clock time (issue #14), end to end: `pyperf record --off-cpu` on real interpreters, checked
//! through `pyperf report --mode wall|off-cpu|cpu` against what the workload measured itself.
//!
//! The workload (testdata/workloads/offcpu/phases.py) runs five phases on its main thread, each in a function of
//! its own and each about 0.7 s of wall time: `phase_cpu` (a pure Python loop, for 0.7 s of its CPU time, so
//! longer on a busy machine), `phase_sleep` (time.sleep),
//! `phase_pipe` (os.read on a pipe a helper writes to later), `phase_lock` (a threading.Lock a helper holds) and
//! `phase_gil` (a pure Python loop while two other threads run pure Python loops: the main thread is off the CPU
//! about two thirds of the phase; waiting for the GIL 35-65% of it on 3.x, 17-40% on 2.7, whose woken waiters
//! mostly find the GIL taken again and spend the rest runnable, as the preempted do on a busy machine). It prints each phase's wall time and the main thread's time on a CPU and
//! runnable over it (the kernel's schedstat), the same of the phase's core (its blocking call, or its loop,
//! without the helpers' start and join: starting a thread took 113 ms once on a busy machine), the main thread's
//! tid and its total wall time. Per interpreter (the list: 2.7, 3.6, 3.8, 3.11, 3.12, 3.13, and 3.14 and
//! 3.15 of the Debian sid root):
//!
//! - wall mode, `--tid MAIN` (folded values in µs): each phase's share of the main thread's wall time over the
//!   phases (the stacks through `phase_X` over those through `run_phases`: pyperf follows the thread only from
//!   when it has found the interpreter, up to a few hundred ms into the run, so the workload first sleeps 0.5 s in
//!   `settle`, and its share of the thread's whole life is not checked) is the workload's own share within 3
//!   points, and its time is its wall time within 20 ms + 5% + 3 x sqrt(CPU samples) periods (the counting error
//!   of samples); the thread's total is at least the phases' and at most the workload's total plus 0.5 s; wall = off-CPU + CPU samples x period, to the rounding;
//! - the off-CPU leaf pseudo-frame of each phase says why it waited: phase_sleep `[off-CPU: clock_nanosleep]`
//!   (3.11+) or `[off-CPU: pselect6]` / `[off-CPU: select]` (2.7 - 3.10 sleep in select(), which glibc makes the
//!   pselect6 system call), phase_pipe `[off-CPU: read]`, phase_lock `[off-CPU: futex]`: the phase's largest off-CPU
//!   leaf, holding (with the GIL wait the call ends with) at least its blocking call's time (-10 ms) and at most the
//!   phase's (+10 ms); phase_lock has
//!   under 5% in `[off-CPU: GIL wait]` (a lock is not the GIL);
//! - phase_gil's loop (`spin`): `[off-CPU: GIL wait]` is at least 80% of its off-CPU time other than
//!   `[off-CPU: runnable]`, and at least the time the kernel says the thread slept there (-20 ms: nothing else
//!   puts it to sleep; less what a hypervisor stole meanwhile, which that time counts); its `[off-CPU: runnable]`
//!   is no longer than the kernel's runnable time (+20 ms). Preemption is left out of "GIL wait dominates": it is
//!   the machine's load (other processes took the CPU from the thread while it held the GIL), up to half of the
//!   loop on this busy shared 2-CPU machine;
//! - cpu mode: phase_sleep has under 1% of the main thread's samples (but for the workload's own measuring, `core`),
//!   and no stack has an off-CPU pseudo-frame;
//! - off-cpu mode: every stack ends in an `[off-CPU: ...]` pseudo-frame; phase_cpu has no off-CPU time beyond the
//!   time the kernel says it was runnable (preempted: the machine is shared) plus 3% of the phase, and none but
//!   `[off-CPU: runnable]` beyond 3%; `--gil waiting` selects GIL waits, at least 80% of them in phase_gil;
//! - the trailer counts off_cpu_intervals > 0, and the text report's `off-CPU` line says as many, 0 lost.
//!
//! Attaching (`-p PID -d 2`) to a process one of whose threads has been blocked in a read since before pyperf
//! started (2.7, 3.12, sid's 3.15): that thread's stack through `blocked_forever` has at least 95% of the
//! recording's duration (the trailer's), ending in `[off-CPU: read]`, and the thread no more than the recording
//! (102%); the main thread (blocked reading stdin, then running the phases from the middle of the recording on)
//! covers the recording too; off_cpu_open_at_end counts the still-blocked threads.
//!
//! Migration (3.12): sleeps whose thread is moved to the other CPU while it sleeps (a helper flips its affinity
//! every 3 ms): the off-CPU time of the phase is its wall time minus its CPU time, to 5%: no interval that ends on
//! another CPU than it began is lost.
//!
//! Sampling at 999 Hz (-F 999): in phase_gil the main thread runs in bursts of one GIL switch interval (5 ms), 0.1
//! to 0.25 s in all; at the default 99 Hz that is 10 to 25 samples of 10 ms, whose count alone moves the phase's
//! share of the thread by about a point; at 999 Hz the samples weigh 1 ms and the thread gets 300 to 900 samples
//! in all (at least 300 are required), so the 1% bound on phase_sleep in cpu mode means something. The recordings run one at a time
//! (common::serial): the CPU and GIL phases measure shares of 2 CPUs. About 50 s in all on a 2-CPU machine.
//!
//! A failing check does not stop the others: every failure of one recording is listed, and the recording is kept
//! as target/tmp/offcpu/TEST.pyp.
//!
//! Needs root (loads the real BPF program); a missing interpreter fails.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Samples per second per CPU (see the module's documentation).
const HZ: u32 = 999;
/// The phases the workload runs by default, in order.
const PHASES: [&str; 5] = ["cpu", "sleep", "pipe", "lock", "gil"];
const WORKLOAD: &str = "offcpu/phases.py";

// ---- what the workload measured ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Default)]
struct Clock {
    wall: f64,
    oncpu: f64,
    runq: f64,
    migrations: i64,
    /// The phase's core (its blocking call, or its loop): wall, on CPU, runnable.
    core: f64,
    core_oncpu: f64,
    core_runq: f64,
    /// At most how long a hypervisor took the CPU from the main thread during the core (/proc/stat's steal).
    core_steal: f64,
}

impl Clock {
    fn parse(words: &[&str], line: &str) -> Clock {
        let mut c = Clock { migrations: -1, ..Clock::default() };
        for w in words {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("bad field {w:?} in {line:?}"));
            let f = || v.parse::<f64>().unwrap_or_else(|_| panic!("bad value {w:?} in {line:?}"));
            match k {
                "wall" => c.wall = f(),
                "oncpu" => c.oncpu = f(),
                "runq" => c.runq = f(),
                "migrations" => c.migrations = v.parse().unwrap_or_else(|_| panic!("{line:?}")),
                "core" => c.core = f(),
                "core_oncpu" => c.core_oncpu = f(),
                "core_runq" => c.core_runq = f(),
                "core_steal" => c.core_steal = f(),
                _ => panic!("unknown field {k} in {line:?}"),
            }
        }
        c
    }

    /// Off the CPU and not runnable: asleep in the kernel.
    fn asleep(&self) -> f64 {
        self.wall - self.oncpu - self.runq
    }

    /// The same of the phase's core. On a VM this counts the time the hypervisor took from the thread while it
    /// ran (schedstat's time on a CPU leaves steal out), which the recorder's CPU samples count as running: that
    /// is up to `core_steal` more than the thread slept.
    fn core_asleep(&self) -> f64 {
        self.core - self.core_oncpu - self.core_runq
    }
}

#[derive(Debug, Default)]
struct Truth {
    main: u32,
    phases: Vec<(String, Clock)>,
    total: Clock,
    helpers: Vec<(String, u32)>,
}

impl Truth {
    fn parse(stdout: &str) -> Truth {
        let mut t = Truth::default();
        let mut total = false;
        for line in stdout.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["tid", "main", tid] => t.main = tid.parse().expect("tid"),
                ["phase", name, rest @ ..] => t.phases.push((name.to_string(), Clock::parse(rest, line))),
                ["helper", role, tid] => t.helpers.push((role.to_string(), tid.parse().expect("tid"))),
                ["total", rest @ ..] => {
                    t.total = Clock::parse(rest, line);
                    total = true;
                }
                _ => {}
            }
        }
        assert!(t.main != 0 && total, "the workload did not say its tid and total: {stdout:?}");
        t
    }

    fn phase(&self, name: &str) -> Clock {
        self.phases.iter().find(|p| p.0 == name).unwrap_or_else(|| panic!("no phase {name}: {:?}", self.phases)).1
    }
}

// ---- what the report says -----------------------------------------------------------------------------------------

/// Folded stacks: function names root first (frames without their `(file)`; the leaf may be a pseudo-frame) and
/// the value (µs in wall and off-cpu mode, samples in cpu mode).
struct Folded {
    lines: Vec<(Vec<String>, u64)>,
}

const OFF: &str = "[off-CPU: ";
const GIL_WAIT: &str = "[off-CPU: GIL wait]";

impl Folded {
    fn parse(text: &str) -> Folded {
        let lines = text
            .lines()
            .map(|l| {
                let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
                let n = n.parse::<u64>().unwrap_or_else(|_| panic!("bad folded count in {l:?}"));
                let frames = stack.split(';').map(|f| f.split(" (").next().unwrap_or(f).to_string()).collect();
                (frames, n)
            })
            .collect();
        Folded { lines }
    }

    fn total(&self) -> u64 {
        self.lines.iter().map(|l| l.1).sum()
    }

    /// The stacks through `function`.
    fn through(&self, function: &str) -> u64 {
        self.lines.iter().filter(|l| l.0.iter().any(|f| f == function)).map(|l| l.1).sum()
    }

    /// The stacks through every one of `functions` (all stacks: none given).
    fn with<'a>(&'a self, functions: &'a [&str]) -> impl Iterator<Item = &'a (Vec<String>, u64)> + 'a {
        self.lines.iter().filter(move |l| functions.iter().all(|f| l.0.iter().any(|x| x == f)))
    }

    /// Per off-CPU leaf pseudo-frame, the value of the stacks through every one of `functions` ending in it.
    fn leaves(&self, functions: &[&str]) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (frames, n) in self.with(functions) {
            if let Some(leaf) = frames.last().filter(|l| l.starts_with(OFF)) {
                *m.entry(leaf.clone()).or_insert(0) += n;
            }
        }
        m
    }

    fn leaf(&self, functions: &[&str], leaf: &str) -> u64 {
        self.leaves(functions).get(leaf).copied().unwrap_or(0)
    }

    /// The off-CPU time of the stacks through `functions`.
    fn off_cpu(&self, functions: &[&str]) -> u64 {
        self.leaves(functions).values().sum()
    }

    /// The largest off-CPU leaf of the stacks through `functions`.
    fn dominant(&self, functions: &[&str]) -> Option<(String, u64)> {
        self.leaves(functions).into_iter().max_by_key(|l| l.1)
    }

    /// The stacks through `functions`, from below `run_phases` on, for messages.
    fn show(&self, functions: &[&str]) -> String {
        let mut out = String::new();
        for (frames, n) in self.with(functions) {
            let from = frames.iter().position(|f| f == "run_phases").map_or(0, |i| i + 1);
            out.push_str(&format!("\n    {} {n}", frames[from..].join(";")));
        }
        out
    }
}

/// `pyperf report -i REC ARGS`: its standard output; a failure is the test's, with the report's stderr.
fn report(rec: &Path, args: &[&str]) -> String {
    let o = pyperf().arg("report").arg("-i").arg(rec).args(args).output().expect("run pyperf report");
    assert!(
        o.status.success(),
        "pyperf report {args:?} failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr).trim()
    );
    String::from_utf8(o.stdout).expect("UTF-8 report")
}

fn folded(rec: &Path, mode: &str, extra: &[&str]) -> Folded {
    let mut args = vec!["--mode", mode, "--folded", "--no-lines"];
    args.extend_from_slice(extra);
    Folded::parse(&report(rec, &args))
}

/// The text report's `off-CPU` summary line, `N intervals[ read (W written according to the trailer)], L lost, U
/// with an unreadable stack, O open at the end` (the trailer's off_cpu_* counters in words): (intervals, lost, open
/// at the end), each None when not shown.
fn off_cpu_line(text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let Some(line) = text.lines().map(str::trim_start).find(|l| l.starts_with("off-CPU ")) else {
        return (None, None, None);
    };
    let words: Vec<&str> = line.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
    // The number before WORD.
    let before = |word: &str| -> Option<u64> {
        words.windows(2).find(|w| w[1] == word || w[1] == format!("({word}")).and_then(|w| w[0].parse().ok())
    };
    (before("intervals").or_else(|| before("interval")), before("lost"), before("open"))
}

/// The trailer's counter `name` (read with the format crate).
fn trailer_counter(rec: &Path, name: &str) -> Option<u64> {
    let (_, tables, _, _) = read_each(rec, |_, _, _| ());
    tables.stats.as_ref().and_then(|s| s.counters.iter().find(|c| c.0 == name)).map(|c| c.1)
}

/// The thread's samples flagged as stolen periods in the recording (format 1.11).
fn stolen_samples(rec: &Path, tid: u32) -> u64 {
    let (_, _, stolen, _) =
        read_each(rec, |_, s, _| s.tid == tid && s.flags & pyperf_format::sample_flags::STOLEN != 0);
    stolen.iter().filter(|&&b| b).count() as u64
}

/// The trailer's off_cpu_intervals > 0, and the text report's `off-CPU` line says as many (and 0 lost).
fn check_counters(f: &mut Failures, name: &str, rec: &Path, text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let written = trailer_counter(rec, "off_cpu_intervals");
    let shown = off_cpu_line(text);
    let line = text.lines().map(str::trim_start).find(|l| l.starts_with("off-CPU ")).unwrap_or("(none)");
    f.check(
        written.is_some_and(|n| n > 0) && shown.0 == written,
        format!("{name}: trailer off_cpu_intervals {written:?}; the text report's off-CPU line: {line:?}"),
    );
    f.check(shown.1 == Some(0), format!("{name}: no off-CPU interval lost: {line:?}"));
    // Samples taken late on a VM (steal) stood for the periods they missed (what keeps the wall view whole): the text
    // report says how many.
    let late = trailer_counter(rec, "clock_late_samples").unwrap_or(0);
    if late > 0 {
        let said = text.lines().map(str::trim_start).find(|l| l.starts_with("late clock ")).unwrap_or("(none)");
        f.check(
            said.contains(&format!(" {late} sample")),
            format!("{name}: trailer clock_late_samples {late}; the text report's late clock line: {said:?}"),
        );
    }
    shown
}

/// Failures gathered over a whole check, reported together (one run says everything that is wrong).
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: String) {
        eprintln!("{} {what}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            self.0.push(what);
        }
    }

    /// Fails with every failure; the recording `rec` is kept as target/tmp/offcpu/TEST.pyp for a look.
    fn end(self, test: &str, rec: &Path) {
        if self.0.is_empty() {
            return;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("offcpu");
        let kept = dir.join(format!("{}.pyp", test.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_")));
        let kept = match std::fs::create_dir_all(&dir).and_then(|_| std::fs::copy(rec, &kept)) {
            Ok(_) => format!("recording kept as {}", kept.display()),
            Err(e) => format!("recording not kept: {e}"),
        };
        panic!("{test}: {} failed ({kept}):\n  {}", self.0.len(), self.0.join("\n  "));
    }
}

fn version(name: &str) -> (u8, u8) {
    interpreters().into_iter().find(|i| i.name == name).unwrap_or_else(|| panic!("{name}: not listed")).version
}

/// The pseudo-frames time.sleep may block in: select() before 3.11 (glibc's is the pselect6 system call),
/// clock_nanosleep from 3.11 on.
fn sleep_leaves(v: (u8, u8)) -> &'static [&'static str] {
    if v >= (3, 11) {
        &["[off-CPU: clock_nanosleep]"]
    } else {
        &["[off-CPU: pselect6]", "[off-CPU: select]"]
    }
}

fn s(us: u64) -> f64 {
    us as f64 / 1e6
}

/// Records `phases.py ARGS` under `python` with --off-cpu at HZ; returns what the workload measured.
fn record(python: &Path, args: &[&str], out: &Path) -> Truth {
    let hz = HZ.to_string();
    let o = run(pyperf()
        .args(["record", "--off-cpu", "-F", &hz, "-o"])
        .arg(out)
        .arg("--")
        .arg(python)
        .arg(workload(WORKLOAD))
        .args(args));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!("workload:\n{stdout}");
    assert!(o.status.success(), "pyperf record failed: {:?}", o.status);
    Truth::parse(&stdout)
}

/// Each phase's share of the main thread's wall time and its time, against the workload's clock. The shares are of
/// the phases' time (the stacks through `run_phases`, the sum of the phases' wall times): the main thread's time
/// before them (interpreter start, then `settle`'s sleep) is seen only from when pyperf found the interpreter,
/// which the workload cannot know.
fn check_shares(f: &mut Failures, name: &str, truth: &Truth, wall: &Folded) {
    let total = wall.total();
    let phases = wall.through("run_phases");
    let measured: f64 = truth.phases.iter().map(|p| p.1.wall).sum();
    f.check(
        s(total) >= measured && s(total) <= truth.total.wall + 0.5,
        format!(
            "{name}: the main thread's wall time in the report {:.3} s, measured {:.3} s ({measured:.3} s in the \
             phases)",
            s(total),
            truth.total.wall
        ),
    );
    for (phase, c) in &truth.phases {
        let func = format!("phase_{phase}");
        let got = wall.through(&func);
        let share = got as f64 / phases.max(1) as f64;
        let want = c.wall / measured;
        f.check(
            (share - want).abs() <= 0.03,
            format!("{name}: {func} has {:.1}% of the phases' wall time, measured {:.1}%", share * 100.0, want * 100.0),
        );
        // The CPU part is counted by samples: n samples of a thread running in short bursts (2.7's GIL fight
        // hands the GIL over every few hundred microseconds) have a counting error of about sqrt(n) periods;
        // three of those on top.
        let cpu_us: u64 = wall
            .with(&[func.as_str()])
            .filter(|(frames, _)| !frames.last().is_some_and(|l| l.starts_with("[off-CPU")))
            .map(|(_, us)| us)
            .sum();
        let period = 1.0 / HZ as f64;
        let sampling = 3.0 * (s(cpu_us) / period).sqrt() * period;
        f.check(
            (s(got) - c.wall).abs() <= 0.02 + 0.05 * c.wall + sampling,
            format!(
                "{name}: {func} {:.3} s of wall time, measured {:.3} s (+-{:.3} s of sampling error)",
                s(got),
                c.wall,
                sampling
            ),
        );
    }
}

/// The whole check of one interpreter (see the module's documentation).
fn check(name: &str) {
    let _guard = serial();
    let python = interpreter(name);
    let v = version(name);
    let (_dir, out) = scratch("offcpu.pyp");
    let truth = record(&python, &[], &out);
    let ran: Vec<&str> = truth.phases.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(ran, PHASES, "{name}: the workload's phases");
    let tid = truth.main.to_string();
    let wall = folded(&out, "wall", &["--tid", &tid]);
    let off = folded(&out, "off-cpu", &["--tid", &tid]);
    let cpu = folded(&out, "cpu", &["--tid", &tid]);
    let gil_waiting = folded(&out, "off-cpu", &["--tid", &tid, "--gil", "waiting"]);
    let text = report(&out, &["--mode", "wall"]);
    eprintln!("{name}: text report, wall mode:\n{text}");
    for (phase, c) in &truth.phases {
        let func = format!("phase_{phase}");
        eprintln!(
            "{name}: {func}: measured wall {:.3} s (on CPU {:.3}, runnable {:.3}, asleep {:.3}); report: wall {:.3} s, \
             off-CPU {:.3} s {:?}, {} CPU samples",
            c.wall,
            c.oncpu,
            c.runq,
            c.asleep(),
            s(wall.through(&func)),
            s(off.through(&func)),
            off.leaves(&[&func]),
            cpu.through(&func)
        );
    }

    let mut f = Failures::default();
    check_shares(&mut f, name, &truth, &wall);
    // Wall = off-CPU + (CPU samples + stolen periods) x period, to the per-stack rounding: the periods a late
    // sample stands for (steal) are the thread's wall time, not its CPU time (format 1.11 sample flag STOLEN).
    let stolen = stolen_samples(&out, truth.main);
    let period_us = 1e6 / HZ as f64;
    let sum = s(off.total()) * 1e6 + (cpu.total() + stolen) as f64 * period_us;
    let slack = (wall.lines.len() + off.lines.len() + cpu.lines.len() + 2) as f64;
    f.check(
        (wall.total() as f64 - sum).abs() <= slack,
        format!(
            "{name}: wall {} us = off-CPU {} us + ({} CPU samples + {stolen} stolen) x {period_us:.3} us ({sum:.0} \
             us, +-{slack})",
            wall.total(),
            off.total(),
            cpu.total()
        ),
    );

    // Why each phase waited: its blocking call's time (the core) all in the pseudo-frame that says why, the
    // phase's largest.
    let pipe_leaf: &[&str] = &["[off-CPU: read]"];
    let lock_leaf: &[&str] = &["[off-CPU: futex]"];
    for (phase, want) in [("sleep", sleep_leaves(v)), ("pipe", pipe_leaf), ("lock", lock_leaf)] {
        let c = truth.phase(phase);
        let func = format!("phase_{phase}");
        let at: &[&str] = &[&func];
        // The call returns only once the thread has the GIL again: on a busy machine its time includes a GIL
        // wait after the wake-up (22 ms of a 725 ms lock wait in one CI run), which is the call's time too.
        let got: u64 = want.iter().map(|l| off.leaf(at, l)).sum::<u64>() + off.leaf(at, GIL_WAIT);
        let dominant = off.dominant(at).map(|d| d.0);
        f.check(
            dominant.as_deref().is_some_and(|d| want.contains(&d))
                && s(got) >= c.core - 0.01
                && s(got) <= c.wall + 0.01,
            format!(
                "{name}: {func}: {:.3} s in {want:?} (the largest: {dominant:?}); its blocking call took {:.3} s of \
                 the phase's {:.3} s:{}",
                s(got),
                c.core,
                c.wall,
                off.show(at)
            ),
        );
    }
    let lock = truth.phase("lock");
    let lock_gil = off.leaf(&["phase_lock"], GIL_WAIT);
    f.check(
        s(lock_gil) <= 0.05 * lock.wall,
        format!(
            "{name}: phase_lock {:.3} s in {GIL_WAIT} (a lock is not the GIL):{}",
            s(lock_gil),
            off.show(&["phase_lock"])
        ),
    );
    // The GIL phase's loop (`spin` in phase_gil): it sleeps only waiting for the GIL; it is also preempted
    // (runnable), as long as the machine's load makes it (up to half the loop on a busy 2-CPU machine), which the
    // kernel's runnable time bounds.
    let g = truth.phase("gil");
    let at: &[&str] = &["phase_gil", "spin"];
    let leaves = off.leaves(at);
    let get = |k: &str| leaves.get(k).copied().unwrap_or(0);
    let (wait, runnable) = (get(GIL_WAIT), get("[off-CPU: runnable]"));
    let other = off.off_cpu(at) - wait - runnable;
    let why = format!(
        "phase_gil's loop: {:.3} s in {GIL_WAIT}, {:.3} s runnable, {:.3} s other; measured: wall {:.3} s, on CPU \
         {:.3}, runnable {:.3}, asleep {:.3}, stolen by the hypervisor at most {:.3}:{}",
        s(wait),
        s(runnable),
        s(other),
        g.core,
        g.core_oncpu,
        g.core_runq,
        g.core_asleep(),
        g.core_steal,
        off.show(&["phase_gil"])
    );
    f.check(
        wait * 10 >= (wait + other) * 8,
        format!("{name}: GIL wait >= 80% of the off-CPU time but runnable, in {why}"),
    );
    // "Asleep" counts what a hypervisor stole from the thread while it ran, which is not a GIL wait (sampled as
    // running, or in neither view: see docs/sampling.md). A CI run on a VM whose host was busy failed all eight
    // interpreters here without the steal; reproduced: 0.43 s stolen from the 2 CPUs in the loop's 0.65 s, 0.083 s
    // less GIL wait than "asleep".
    f.check(
        s(wait) >= g.core_asleep() - g.core_steal - 0.02,
        format!("{name}: GIL wait >= the time asleep - the time stolen - 20 ms, in {why}"),
    );
    f.check(
        s(runnable) <= g.core_runq + 0.02,
        format!("{name}: runnable <= the kernel's runnable time + 20 ms, in {why}"),
    );
    eprintln!(
        "{name}: GIL wait is {:.0}% of phase_gil's off-CPU time, {:.0}% of its wall time",
        100.0 * wait as f64 / off.off_cpu(&["phase_gil"]).max(1) as f64,
        100.0 * s(wait) / g.wall
    );
    let gil_elsewhere = gil_waiting.total().saturating_sub(gil_waiting.through("phase_gil"));
    f.check(
        gil_waiting.total() > 0 && gil_waiting.through("phase_gil") * 10 >= gil_waiting.total() * 8,
        format!(
            "{name}: --gil waiting: {:.3} s, {:.3} s of it outside phase_gil: {:?}",
            s(gil_waiting.total()),
            s(gil_elsewhere),
            gil_waiting.leaves(&[])
        ),
    );

    // CPU mode: samples only.
    // The workload's own measuring around the sleep (`core`: reading /proc/self/task/TID/schedstat) runs on the CPU
    // (9 of 12 samples in one CI run on a busy machine): only the rest is the sleep's.
    let measuring = cpu
        .lines
        .iter()
        .filter(|l| l.0.iter().any(|f| f == "phase_sleep") && l.0.iter().any(|f| f.starts_with("core.")));
    let sleep_samples = cpu.through("phase_sleep") - measuring.map(|l| l.1).sum::<u64>();
    f.check(
        cpu.total() >= 300 && sleep_samples * 100 < cpu.total(),
        format!("{name}: cpu mode: phase_sleep has {sleep_samples} of the main thread's {} samples", cpu.total()),
    );
    let off_in_cpu = cpu.leaves(&[]);
    f.check(off_in_cpu.is_empty(), format!("{name}: cpu mode has no off-CPU pseudo-frame: {off_in_cpu:?}"));

    // Off-CPU mode: off-CPU time only; none in the pure loop but preemption.
    let bare: Vec<&Vec<String>> =
        off.lines.iter().map(|l| &l.0).filter(|fr| !fr.last().is_some_and(|l| l.starts_with(OFF))).collect();
    f.check(bare.is_empty(), format!("{name}: off-cpu mode: every stack has an off-CPU leaf; those without: {bare:?}"));
    let c = truth.phase("cpu");
    let cpu_off = off.off_cpu(&["phase_cpu"]);
    let cpu_blocked = cpu_off - off.leaf(&["phase_cpu"], "[off-CPU: runnable]");
    f.check(
        s(cpu_off) <= c.runq + 0.03 * c.wall && s(cpu_blocked) <= 0.03 * c.wall,
        format!(
            "{name}: off-cpu mode: phase_cpu {:.3} s off CPU ({:.3} s not runnable); the kernel says runnable {:.3} s: \
             {:?}",
            s(cpu_off),
            s(cpu_blocked),
            c.runq,
            off.leaves(&["phase_cpu"])
        ),
    );

    // The trailer's counters, shown by the text report.
    check_counters(&mut f, name, &out, &text);
    f.end(name, &out);
}

per_interpreter! { check:
    python_2_7_18("2.7.18"),
    python_3_6_15("3.6.15"),
    python_3_8_18("3.8.18"),
    python_3_11_7("3.11.7"),
    python_3_12_1("3.12.1"),
    python_3_13_0("3.13.0"),
    python_sid_3_14("sid-3.14"),
    python_sid_3_15("sid-3.15"),
}

// ---- attaching to a process with a thread blocked since before ---------------------------------------------------

/// `phases.py --attach` under `name`: pyperf attaches (-p, -d 2) while its `blocked` thread is blocked in a read
/// and its main thread waits for a line on stdin; the line is sent 1 s later, and the main thread runs its phases.
/// The attach scenario, once more after a failure (printed above it, with the workload's threads as they were at
/// the end). It failed once in CI on 2.7 (the main thread's last half second missing: its pipe phase) and has not
/// been reproduced since in 40 runs, loaded or not: a second failure fails the test.
fn check_attach(name: &str) {
    if std::panic::catch_unwind(|| attach_once(name)).is_err() {
        eprintln!("attach-{name}: FAILED once (above); trying once more");
        attach_once(name);
    }
}

/// Each thread of `pid` now: tid, state, and the system call it is in (/proc).
fn threads_now(pid: u32) -> String {
    let mut out = String::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return "(gone)".into() };
    for t in dir.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().next().unwrap_or("?")).unwrap_or("?");
        let sys = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
        let sys: Vec<&str> = sys.split_whitespace().take(2).collect();
        out.push_str(&format!("[{} {state} syscall {:?}] ", t.file_name().to_string_lossy(), sys));
    }
    out
}

fn attach_once(name: &str) {
    let _guard = serial();
    let python = interpreter(name);
    let (_dir, out) = scratch("attach.pyp");
    let mut child = Command::new(&python)
        .arg(workload(WORKLOAD))
        .args(["--attach", "--seconds", "0.5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the workload");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the workload's first line");
    let tid = |key: &str| -> u32 {
        let w = line.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_else(|| panic!("{line:?}"));
        w.parse().unwrap_or_else(|_| panic!("{line:?}"))
    };
    assert!(line.starts_with("ready "), "the workload said {line:?}");
    let (blocked, main) = (tid("blocked="), tid("main="));
    let pid = child.id().to_string();
    let hz = HZ.to_string();
    let recorder = pyperf()
        .args(["record", "--off-cpu", "-F", &hz, "-d", "2", "-p", &pid, "-o"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pyperf record");
    // Once it records (its first flush: the blocked thread was found blocked), the workload goes on.
    wait_recording(&out);
    child.stdin.as_mut().expect("stdin").write_all(b"go\n").expect("tell the workload to go on");
    let o = recorder.wait_with_output().expect("pyperf record");
    eprintln!("pyperf record: {:?}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    let at_end = threads_now(child.id());
    // The workload is not needed any more (it would run its phases for 2.5 s more).
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{name}: pyperf record -p failed");

    let (_, tables, _, warnings) = read_each(&out, |_, _, _| ());
    assert!(warnings.is_empty(), "{name}: {warnings:?}");
    let duration = tables.stats.as_ref().expect("a trailer").duration_ns as f64 / 1e3;
    let b = folded(&out, "wall", &["--tid", &blocked.to_string()]);
    let m = folded(&out, "wall", &["--tid", &main.to_string()]);
    let text = report(&out, &["--mode", "wall"]);
    eprintln!("{name}: text report, wall mode:\n{text}");
    let in_read = b.leaf(&["blocked_forever"], "[off-CPU: read]") as f64;
    let mut f = Failures::default();
    f.check(
        in_read >= 0.95 * duration && b.total() as f64 <= 1.02 * duration,
        format!(
            "{name}: the thread blocked since before the recording: {:.3} s in blocked_forever/read, {:.3} s in all, \
             of a {:.3} s recording: {:?}",
            in_read / 1e6,
            s(b.total()),
            duration / 1e6,
            b.lines
        ),
    );
    f.check(
        (m.total() as f64) >= 0.95 * duration && (m.total() as f64) <= 1.02 * duration,
        format!(
            "{name}: the main thread: {:.3} s of a {:.3} s recording (blocked on stdin, then its phases): {:?}; the \
             workload's threads at the end: {at_end}",
            s(m.total()),
            duration / 1e6,
            m.lines
        ),
    );
    let (_, _, open) = check_counters(&mut f, name, &out, &text);
    f.check(open.is_some_and(|n| n >= 1), format!("{name}: {open:?} intervals open at the end, want >= 1"));
    f.end(&format!("attach-{name}"), &out);
}

per_interpreter! { check_attach:
    attach_blocked_thread_2_7_18("2.7.18"),
    attach_blocked_thread_3_12_1("3.12.1"),
    attach_blocked_thread_sid_3_15("sid-3.15"),
}

// ---- migration ----------------------------------------------------------------------------------------------------

/// Sleeps that begin on one CPU and end on the other (3.12): none of their off-CPU time is lost.
#[test]
fn sleeps_across_cpus_are_not_lost() {
    let name = "3.12.1";
    let _guard = serial();
    let python = interpreter(name);
    let (_dir, out) = scratch("migrate.pyp");
    let truth = record(&python, &["--phases", "cpu,migrate"], &out);
    let tid = truth.main.to_string();
    let wall = folded(&out, "wall", &["--tid", &tid]);
    let off = folded(&out, "off-cpu", &["--tid", &tid]);
    let m = truth.phase("migrate");
    eprintln!("{name}: phase_migrate measured {m:?}; off-CPU in the report {:?}", off.leaves(&["phase_migrate"]));
    // -1: the kernel does not count (no /proc/PID/task/TID/sched).
    assert!(
        m.migrations == -1 || m.migrations >= 20,
        "{name}: the main thread changed CPUs {} times only: the workload is broken",
        m.migrations
    );
    let mut f = Failures::default();
    check_shares(&mut f, name, &truth, &wall);
    let got = s(off.off_cpu(&["phase_migrate"]));
    let want = m.wall - m.oncpu;
    f.check(
        (got - want).abs() <= (0.05 * want).max(0.02),
        format!(
            "{name}: phase_migrate {got:.3} s off CPU in the report, {want:.3} s measured ({} migrations)",
            m.migrations
        ),
    );
    f.end(&format!("migrate-{name}"), &out);
}
