//! End to end over every supported CPython: pyenv's 2.7.18, 3.6.15, 3.7.16, 3.8.18, 3.9.18, 3.10.13, 3.11.7,
//! 3.12.1, 3.13.0 and Debian's /usr/bin/python3.11 (non-PIE, stripped .symtab). A missing interpreter fails its
//! test. Needs root (loads the real BPF program).
//!
//! Per interpreter, two recordings with `pyperf record -- python WORKLOAD`:
//!
//! 1. `split.py 2 --threads 2 --thread-seconds 1`: the main thread alone runs `Runner.run`, which calls
//!    `heavy` (3 units of work) and `light` (1 unit); then two threads run `spin`. Checked: the frames root to
//!    leaf, exactly (per version: thread bootstrap names, and on <= 3.10 method names without their class
//!    unless the self/cls heuristic adds it, see [`Expect::method`]); the heavy:light split of the samples against
//!    the workload's own thread-CPU timing (`assert_share`: 4 standard errors, at least 3 points); the GIL
//!    state (below); the thread state and pthread id; the two spin threads as two distinct tids other than the
//!    main thread's; COMPLETE stacks.
//! 2. `gil_released.py 30`: a thread runs `zlib.compress`, on the CPU in C with the GIL released, while the
//!    main thread runs bytecode. The released thread must still be found (its thread state through the
//!    interpreter's thread list: on 3.12+ no global points at it), with its Python stack, COMPLETE, and a GIL
//!    state other than "held by this thread".
//!
//! Expected GIL state of the sampled thread (pyperf.h, `enum pyperf_gil_kind`):
//! - while the main thread is the only thread: 2.7 and 3.6 create the GIL with the first thread, so
//!   UNINITIALIZED (2.7: the `interpreter_lock` pointer is NULL; 3.6: `gil_locked == -1`); 3.7+ create it at
//!   start-up, so THIS_THREAD;
//! - a thread running bytecode holds the GIL: THIS_THREAD (all versions);
//! - a thread in C with the GIL released: NOT_LOCKED, or held by the thread that is running bytecode
//!   (GLOBAL_CURRENT_THREAD / OTHER_THREAD); 2.7 derives the holder from `_PyThreadState_Current`.
//!
//! Thread state ("is the sampled thread the interpreter's current thread"): compared with
//! `_PyThreadState_Current` (2.7, 3.6), `_PyRuntime.gilstate.tstate_current` (3.7-3.11) and, on 3.12+ where no
//! such global exists, with the GIL holder (`locked ? last_holder : NULL`), so MATCH for a thread running
//! bytecode on every version, and MISMATCH / no current thread for the released one.

mod common;

use std::collections::HashSet;

use common::*;
use pyperf_format::{GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

/// What one interpreter must show.
struct Expect {
    /// Name for [`common::interpreter`].
    name: &'static str,
    /// The version the recording must report (prefix match).
    version: &'static str,
    /// GIL state of the main thread while it is the only thread.
    single_thread_gil: GilState,
    /// Frames of the thread bootstrap, root first (`threading.Thread._bootstrap` ... `run`).
    bootstrap: [&'static str; 3],
    /// Least share of the spin threads' samples (threads running bytecode) that hold the GIL. 2.7's old GIL
    /// is a plain lock taken over every 100 ticks: a thread woken to take it spins for it on the CPU, stack
    /// shown, without the GIL, so with two busy threads on two CPUs a good part of their samples are like that.
    spin_held: f64,
    /// Qualified names are read from `co_qualname` (3.11+). Before that, a method's frame is named by its
    /// function only (`run`), or `Class.method` if the self/cls class-name heuristic is in: both are accepted,
    /// but one recording must use one form throughout (see [`variants`]).
    qualname: bool,
}

const VERSIONS: &[Expect] = &[
    Expect {
        name: "2.7.18",
        version: "2.7.18",
        single_thread_gil: GilState::Uninitialized,
        spin_held: 0.25,
        bootstrap: ["Thread.__bootstrap", "Thread.__bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.6.15",
        version: "3.6.15",
        single_thread_gil: GilState::Uninitialized,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.7.16",
        version: "3.7.16",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.8.18",
        version: "3.8.18",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.9.18",
        version: "3.9.18",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.10.13",
        version: "3.10.13",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: false,
    },
    Expect {
        name: "3.11.7",
        version: "3.11.7",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
    Expect {
        name: "3.12.1",
        version: "3.12.1",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
    Expect {
        name: "3.13.0",
        version: "3.13.0",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
    Expect {
        name: "debian-3.11",
        version: "3.11.",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
];

fn expect(name: &str) -> &'static Expect {
    VERSIONS.iter().find(|e| e.name == name).expect("known version")
}

/// The stacks a frame list may equal: `stack` as written (qualified where `Class.` is given), and, before
/// 3.11, the same with every `Class.` prefix dropped (no heuristic). Entries are `Class.method` or `function`.
fn variants(e: &Expect, stack: &[&str]) -> Vec<Vec<String>> {
    let full: Vec<String> = stack.iter().map(|s| s.to_string()).collect();
    if e.qualname {
        return vec![full];
    }
    let plain: Vec<String> = stack.iter().map(|s| s.rsplit('.').next().unwrap_or(s).to_string()).collect();
    vec![plain, full]
}

/// Samples whose stack is exactly one of `want`, and which variant each used.
fn exact(samples: &[&S], want: &[Vec<String>]) -> (usize, HashSet<usize>) {
    let mut n = 0;
    let mut used = HashSet::new();
    for s in samples {
        if let Some(i) = want.iter().position(|w| *w == s.names) {
            n += 1;
            used.insert(i);
        }
    }
    (n, used)
}

fn share(n: usize, of: usize) -> f64 {
    n as f64 / of.max(1) as f64
}

/// Records `script` like [`record`], once more if the recording has too few samples of some part
/// (`too_few` says which): on a machine busy with other work the workload gets less CPU. Wrong results are
/// never retried, only thin ones.
fn record_enough(
    python: &std::path::Path,
    script: &str,
    args: &[&str],
    out: &std::path::Path,
    too_few: impl Fn(&Recording) -> Option<String>,
) -> (Recording, Vec<u8>) {
    let (rec, stdout) = record(python, script, args, out);
    match too_few(&rec) {
        None => (rec, stdout),
        Some(why) => {
            eprintln!("{script}: {why}; the machine is busy: recording once more");
            let (rec, stdout) = record(python, script, args, out);
            if let Some(why) = too_few(&rec) {
                panic!("{script} under {}: {why}", python.display());
            }
            (rec, stdout)
        }
    }
}

/// `None` if every `(frame, minimum)` has more samples than its minimum.
fn thin(rec: &Recording, minimums: &[(&str, usize)]) -> Option<String> {
    let short: Vec<String> = minimums
        .iter()
        .filter_map(|(frame, min)| {
            let n = rec.with_frame(frame).len();
            (n <= *min).then(|| format!("only {n} samples in {frame} (want > {min})"))
        })
        .collect();
    (!short.is_empty()).then(|| short.join(", "))
}

/// Records `script` under `-- CMD`; returns the recording and what the workload printed.
fn record(python: &std::path::Path, script: &str, args: &[&str], out: &std::path::Path) -> (Recording, Vec<u8>) {
    let o = run(pyperf()
        .args(["record", "-F", "499", "-o"])
        .arg(out)
        .arg("--")
        .arg(python)
        .arg(workload(script))
        .args(args));
    assert!(o.status.success(), "pyperf record failed: {:?}", o.status);
    let rec = read(out);
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    let stats = rec.tables.stats.clone().expect("trailer");
    assert_eq!(stats.samples as usize, rec.samples.len());
    assert_eq!(rec.tables.processes.len(), 1, "{:?}", rec.tables.processes);
    (rec, o.stdout)
}

fn check_version(name: &str) {
    let _guard = serial();
    let e = expect(name);
    let py = interpreter(e.name);
    let (_dir, out) = scratch("split.pyp");

    // ---- split.py: frames, work split, GIL, threads ----
    let (rec, stdout) = record_enough(&py, "split.py", &["2", "--threads", "2", "--thread-seconds", "1"], &out, |r| {
        thin(r, &[("heavy", 200), ("light", 50), ("spin", 100)])
    });
    let proc = &rec.tables.processes[0];
    assert!(proc.python_version.starts_with(e.version), "{name}: recorded version {}", proc.python_version);
    let pid = proc.pid;

    let heavy_want = variants(e, &["<module>", "main", "Runner.run", "heavy", "burn"]);
    let light_want = variants(e, &["<module>", "main", "Runner.run", "light", "burn"]);
    let boot: Vec<&str> = e.bootstrap.iter().copied().chain(["spin", "burn"]).collect();
    let spin_want = variants(e, &boot);
    let heavy = rec.with_frame("heavy");
    let light = rec.with_frame("light");
    let spin = rec.with_frame("spin");
    let (h_ok, h_var) = exact(&heavy, &heavy_want);
    let (l_ok, l_var) = exact(&light, &light_want);
    let (s_ok, s_var) = exact(&spin, &spin_want);
    eprintln!(
        "{name}: {} samples; heavy {} ({h_ok} exact), light {} ({l_ok} exact), spin {} ({s_ok} exact)",
        rec.samples.len(),
        heavy.len(),
        light.len(),
        spin.len()
    );
    assert!(h_ok * 10 >= heavy.len() * 9, "{name}: heavy stacks {:?}, want {heavy_want:?}", &heavy[..3]);
    assert!(l_ok * 10 >= light.len() * 9, "{name}: light stacks {:?}, want {light_want:?}", &light[..3]);
    assert!(s_ok * 10 >= spin.len() * 9, "{name}: spin stacks {:?}, want {spin_want:?}", &spin[..3]);
    // One naming throughout (with or without the class), never a mixture.
    let forms: HashSet<usize> = h_var.union(&l_var).chain(s_var.iter()).copied().collect();
    assert_eq!(forms.len(), 1, "{name}: stacks named with and without classes");

    assert_share(name, heavy.len(), heavy.len() + light.len(), split_truth(&stdout));

    // Main thread alone: its own GIL state, current thread, its own pthread id, complete stacks.
    let main_phase: Vec<&S> = heavy.iter().chain(light.iter()).copied().collect();
    let gil = main_phase.iter().filter(|s| s.gil == e.single_thread_gil).count();
    let current = main_phase.iter().filter(|s| s.thread_state == ThreadStateMatch::Match).count();
    let own = main_phase.iter().filter(|s| s.pthread_id == PthreadIdMatch::Match).count();
    let complete = main_phase.iter().filter(|s| s.status == StackStatus::Complete).count();
    eprintln!(
        "{name}: main phase {}: GIL {:?} {gil}, current thread {current}, pthread id {own}, complete {complete}",
        main_phase.len(),
        e.single_thread_gil
    );
    assert!(
        gil * 100 >= main_phase.len() * 95,
        "{name}: GIL {:?} in {gil} of {}",
        e.single_thread_gil,
        main_phase.len()
    );
    assert!(current * 100 >= main_phase.len() * 95, "{name}: current thread in {current} of {}", main_phase.len());
    assert!(own * 100 >= main_phase.len() * 95, "{name}: pthread id match in {own} of {}", main_phase.len());
    assert!(complete * 100 >= main_phase.len() * 99, "{name}: {complete} complete of {}", main_phase.len());
    let main_tids: HashSet<u32> = main_phase.iter().map(|s| s.tid).collect();
    assert_eq!(main_tids, HashSet::from([pid]), "{name}: main phase threads");

    // The spin threads run bytecode: when on the CPU they hold the GIL (see `spin_held` for 2.7), and the GIL
    // state agrees with the thread state (held by this thread = this thread is the current one).
    let spin_tids: HashSet<u32> = spin.iter().map(|s| s.tid).collect();
    assert_eq!(spin_tids.len(), 2, "{name}: spin threads {spin_tids:?}");
    assert!(!spin_tids.contains(&pid), "{name}: a spin thread has the main thread's tid");
    let held = spin.iter().filter(|s| s.gil == GilState::ThisThread).count();
    let exists = spin
        .iter()
        .filter(|s| {
            matches!(
                s.gil,
                GilState::ThisThread | GilState::GlobalCurrentThread | GilState::OtherThread | GilState::NotLocked
            )
        })
        .count();
    let agree =
        spin.iter().filter(|s| (s.gil == GilState::ThisThread) == (s.thread_state == ThreadStateMatch::Match)).count();
    let own = spin.iter().filter(|s| s.pthread_id == PthreadIdMatch::Match).count();
    let complete = spin.iter().filter(|s| s.status == StackStatus::Complete).count();
    eprintln!(
        "{name}: spin {}: GIL held {held}, GIL exists {exists}, GIL and thread state agree {agree}, pthread id \
         {own}, complete {complete}",
        spin.len()
    );
    assert!(share(held, spin.len()) >= e.spin_held, "{name}: spin threads hold the GIL in {held} of {}", spin.len());
    assert!(exists * 100 >= spin.len() * 99, "{name}: spin threads see a GIL in {exists} of {}", spin.len());
    assert!(agree * 100 >= spin.len() * 95, "{name}: GIL and thread state agree in {agree} of {}", spin.len());
    assert!(own * 100 >= spin.len() * 95, "{name}: spin pthread id match in {own} of {}", spin.len());
    assert!(complete * 100 >= spin.len() * 99, "{name}: spin {complete} complete of {}", spin.len());

    // ---- gil_released.py: a thread on the CPU in C with the GIL released is still found ----
    let (_dir2, out2) = scratch("released.pyp");
    let (rec, _) =
        record_enough(&py, "gil_released.py", &["30"], &out2, |r| thin(r, &[("compress_loop", 100), ("hold", 100)]));
    let pid = rec.tables.processes[0].pid;
    let zip_boot: Vec<&str> = e.bootstrap.iter().copied().chain(["compress_loop"]).collect();
    let zip_want = variants(e, &zip_boot);
    let hold_want = variants(e, &["<module>", "main", "hold", "burn"]);
    let zip = rec.with_frame("compress_loop");
    let hold = rec.with_frame("hold");
    let (z_ok, _) = exact(&zip, &zip_want);
    let (h_ok, _) = exact(&hold, &hold_want);
    let released = zip
        .iter()
        .filter(|s| matches!(s.gil, GilState::NotLocked | GilState::GlobalCurrentThread | GilState::OtherThread))
        .count();
    let not_current = zip
        .iter()
        .filter(|s| matches!(s.thread_state, ThreadStateMatch::Mismatch | ThreadStateMatch::GlobalCurrentThreadNull))
        .count();
    let own = zip.iter().filter(|s| s.pthread_id == PthreadIdMatch::Match).count();
    let complete = zip.iter().filter(|s| s.status == StackStatus::Complete).count();
    let held = hold.iter().filter(|s| s.gil == GilState::ThisThread).count();
    eprintln!(
        "{name}: GIL released thread {} samples ({z_ok} exact): released {released}, not current {not_current}, \
         pthread id {own}, complete {complete}; bytecode thread {} ({h_ok} exact), GIL held {held}",
        zip.len(),
        hold.len()
    );
    let zip_tids: HashSet<u32> = zip.iter().map(|s| s.tid).collect();
    assert_eq!(zip_tids.len(), 1, "{name}: {zip_tids:?}");
    assert!(!zip_tids.contains(&pid), "{name}: the released thread has the main thread's tid");
    assert!(hold.iter().all(|s| s.tid == pid), "{name}: bytecode runs on the main thread");
    assert!(z_ok * 10 >= zip.len() * 9, "{name}: released stacks {:?}, want {zip_want:?}", &zip[..3]);
    assert!(h_ok * 10 >= hold.len() * 9, "{name}: bytecode stacks {:?}, want {hold_want:?}", &hold[..3]);
    assert!(
        released * 10 >= zip.len() * 9,
        "{name}: GIL not held by the released thread in {released} of {}",
        zip.len()
    );
    assert!(not_current * 10 >= zip.len() * 9, "{name}: released thread not current in {not_current} of {}", zip.len());
    assert!(own * 100 >= zip.len() * 95, "{name}: released thread's own thread state in {own} of {}", zip.len());
    assert!(complete * 100 >= zip.len() * 99, "{name}: released thread {complete} complete of {}", zip.len());
    assert!(held * 100 >= hold.len() * 85, "{name}: bytecode thread holds the GIL in {held} of {}", hold.len());
}

#[test]
fn python_2_7_18() {
    check_version("2.7.18");
}

#[test]
fn python_3_6_15() {
    check_version("3.6.15");
}

#[test]
fn python_3_7_16() {
    check_version("3.7.16");
}

#[test]
fn python_3_8_18() {
    check_version("3.8.18");
}

#[test]
fn python_3_9_18() {
    check_version("3.9.18");
}

#[test]
fn python_3_10_13() {
    check_version("3.10.13");
}

#[test]
fn python_3_11_7() {
    check_version("3.11.7");
}

#[test]
fn python_3_12_1() {
    check_version("3.12.1");
}

#[test]
fn python_3_13_0() {
    check_version("3.13.0");
}

#[test]
fn python_debian_3_11() {
    check_version("debian-3.11");
}

/// Every entry of the table has a test above, every supported version has an entry, and every interpreter of
/// testdata/interpreters (what scripts/setup installs) is recorded.
#[test]
fn every_supported_version_is_tested() {
    let names: Vec<&str> = VERSIONS.iter().map(|e| e.name).collect();
    for row in &pyperf::python::ROWS {
        let (major, minor) = row.version;
        let prefix = format!("{major}.{minor}.");
        assert!(names.iter().any(|n| n.starts_with(&prefix)), "no end-to-end test for Python {major}.{minor}");
    }
    for i in interpreters() {
        assert!(names.contains(&i.name.as_str()), "no end-to-end test for {} (testdata/interpreters)", i.name);
    }
    assert!(names.contains(&"debian-3.11"));
}
