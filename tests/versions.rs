//! End to end over every supported CPython: pyenv's 2.7.18, 3.6.15, 3.7.16, 3.8.18, 3.9.18, 3.10.13, 3.11.7,
//! 3.12.1, 3.13.0, Debian's /usr/bin/python3.11 (non-PIE, stripped .symtab) and Debian sid's python3.13, 3.14 and
//! 3.15 (non-PIE, interpreter in the executable, `.PyRuntime` section; run chrooted into the sid root, see
//! `common::sid_root`): the interpreters of testdata/interpreters. A missing interpreter fails its test. Needs root
//! (loads the real BPF program). Then two checks of 3.15's and of what comes after it: a thread waiting for the
//! GIL (`waiting`), and a Python newer than pyperf knows (3.15 relabelled 3.16).
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
    Expect {
        name: "sid-3.13",
        version: "3.13.18",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
    Expect {
        name: "sid-3.14",
        version: "3.14.",
        single_thread_gil: GilState::ThisThread,
        spin_held: 0.9,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
    Expect {
        name: "sid-3.15",
        version: "3.15.",
        single_thread_gil: GilState::ThisThread,
        // 3.15 says per thread when a thread waits for the GIL (`waiting`): those samples are not `held`.
        spin_held: 0.85,
        bootstrap: ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
        qualname: true,
    },
];

/// The row pyperf profiles interpreter `name` with.
fn row_of(name: &str) -> &'static pyperf::python::Row {
    let i = interpreters().into_iter().find(|i| i.name == name).expect("listed");
    pyperf::python::row_for(i.version.0, i.version.1).expect("a row")
}

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
    // 3.15+ marks the bottom of every thread's frames: complete walks are known to be, having reached it; before
    // 3.15 nothing is checked that way.
    let counter = |k: &str| rec.tables.stats.as_ref().and_then(|s| s.counters.iter().find(|c| c.0 == k)).map(|c| c.1);
    let with_frames = rec.samples.iter().filter(|s| s.status == StackStatus::Complete && !s.names.is_empty()).count();
    let (reached, incomplete) = (counter("bpf_base_reached").unwrap_or(0), counter("bpf_incomplete").unwrap_or(0));
    eprintln!("{name}: base frame reached by {reached} walks, {incomplete} incomplete, {with_frames} complete stacks");
    if row_of(name).layout.tstate_base_frame >= 0 {
        // (A record is written once per sampling period it stands for: a late one, steal, more than once.)
        let added = counter("clock_periods_added").unwrap_or(0);
        assert!(
            (reached + added) as usize >= with_frames,
            "{name}: {reached} walks reached the base frame (+{added} late periods) of {with_frames}"
        );
        assert!(incomplete * 100 <= rec.samples.len() as u64, "{name}: {incomplete} incomplete walks");
    } else {
        assert_eq!((reached, incomplete), (0, 0), "{name}");
    }

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
                GilState::ThisThread
                    | GilState::GlobalCurrentThread
                    | GilState::OtherThread
                    | GilState::NotLocked
                    // 3.15: a spin thread on its CPU without the GIL it asked for (taking it back) sees it too.
                    | GilState::Waiting
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

every_interpreter!(check_version);

/// Every entry of the table has a test above, every supported version has an entry, and every interpreter of
/// testdata/interpreters (what scripts/setup installs) is recorded.
#[test]
fn every_supported_version_is_tested() {
    let names: Vec<&str> = VERSIONS.iter().map(|e| e.name).collect();
    let all = interpreters();
    for row in &pyperf::python::ROWS {
        let (major, minor) = row.version;
        // By the interpreter's version, not its name: `sid-3.14` tests 3.14.
        let tested = all.iter().any(|i| i.version == row.version && names.contains(&i.name.as_str()));
        assert!(tested, "no end-to-end test for Python {major}.{minor}");
    }
    for i in all {
        assert!(names.contains(&i.name.as_str()), "no end-to-end test for {} (testdata/interpreters)", i.name);
    }
    assert!(names.contains(&"debian-3.11"));
}

// ---- 3.15: a thread waiting for the GIL ----------------------------------------------------------------------

/// Four threads running bytecode on a machine with fewer CPUs take turns at the GIL: each is made to drop it every
/// switch interval and asks for it again. On 3.15 a thread that asked for the GIL and does not hold it says so
/// (`tstate->gil_requested`): a sample taken then is `waiting`, with the thread's Python stack, from the spinning
/// threads only. 3.14 has no such field: nothing is `waiting` there. (cpu-clock samples only threads on a CPU, so
/// these are the moments a waiting thread runs, in the GIL's own loop; time spent asleep on it is off-CPU time.)
#[test]
fn a_thread_waiting_for_the_gil_is_its_own_state_on_3_15() {
    let _guard = serial();
    for (name, waits) in [("sid-3.15", true), ("sid-3.14", false)] {
        let py = interpreter(name);
        // A spinning thread is on the CPU in the waiting state only between asking for the GIL and blocking for
        // it: a few samples a run, fewer when other work takes the CPUs. So 3.15 is recorded until the waiting
        // samples of the spinning threads add up to enough (each recording is checked whole), not for a fixed
        // time; both until they have enough samples in spin.
        let (mut spinners, mut starting, mut spin_total, mut runs) = (0, 0, 0, 0);
        while spin_total <= 1000 || (waits && spinners < 5) {
            runs += 1;
            assert!(
                runs <= 8,
                "{name}: {spinners} of {spin_total} spin samples waiting for the GIL in {} runs",
                runs - 1
            );
            let (n, before_first_frame, spin) = contend_recording(name, &py, waits);
            spinners += n;
            starting += before_first_frame;
            spin_total += spin;
        }
        eprintln!("{name}: {spinners} of {spin_total} spin samples waiting for the GIL in {runs} runs");
        assert!(
            !waits || starting < spinners,
            "{name}: {starting} waiting samples without a stack, {spinners} with one"
        );
    }
}

/// Records contend.py under `py` once and checks every sample in the waiting state: there are none where the
/// interpreter cannot say (`waits` false); else each has the waiting thread's own complete stack and the report
/// shows them as their own state. Returns how many samples of spinning threads waited with their stack, how many
/// before their first frame, and the samples in spin.
fn contend_recording(name: &str, py: &std::path::Path, waits: bool) -> (usize, usize, usize) {
    let (_dir, out) = scratch("contend.pyp");
    let o = run(pyperf()
        .args(["record", "-F", "999", "-o"])
        .arg(&out)
        .arg("--")
        .arg(py)
        .arg(workload("contend.py"))
        .args(["4", "4"]));
    assert!(o.status.success(), "{name}: pyperf record failed");
    let rec = read(&out);
    let pid = rec.tables.processes[0].pid;
    let spin: Vec<&S> = rec.samples.iter().filter(|s| s.names.last().is_some_and(|n| n == "spin")).collect();
    let waiting: Vec<&S> = rec.samples.iter().filter(|s| s.gil == GilState::Waiting).collect();
    eprintln!("{name}: {} samples, {} in spin, {} waiting for the GIL", rec.samples.len(), spin.len(), waiting.len());
    assert!(!spin.is_empty(), "{name}: no samples in spin");
    if !waits {
        assert!(waiting.is_empty(), "{name} cannot say a thread waits for the GIL");
        return (0, 0, spin.len());
    }
    // The spinning threads wait for it, and so does the main thread, between starting and joining them (it
    // takes the GIL back after every blocking call): each with its own complete stack.
    let bootstrap = ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run", "spin"];
    let (mut spinners, mut starting) = (0, 0);
    for s in &waiting {
        if s.tid != pid && s.status == StackStatus::Idle && s.names.is_empty() {
            // A new thread asks for the GIL before its first Python frame (seen once in a full run under
            // load): waiting, with no Python stack yet. Idle, not an error, and rare (below).
            starting += 1;
            continue;
        }
        assert_eq!(s.status, StackStatus::Complete, "{name}: {s:?}");
        if s.tid == pid {
            assert_eq!(&s.names[..2], ["<module>", "main"], "{name}: the main thread's own stack");
        } else {
            assert_eq!(s.names, bootstrap, "{name}: a waiting thread's own stack");
            spinners += 1;
        }
    }
    // Its own state in the report's breakdown and filters.
    let text = String::from_utf8(run(pyperf().args(["report", "--text", "-i"]).arg(&out)).stdout).unwrap();
    if waiting.iter().any(|s| !s.stolen) {
        assert!(text.contains("waiting          this thread is waiting for the GIL"), "{text}");
    }
    let folded = run(pyperf().args(["report", "--folded", "--no-lines", "--gil", "waiting", "-i"]).arg(&out));
    let folded = String::from_utf8(folded.stdout).unwrap();
    let total: usize = folded.lines().filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok()).sum();
    // (CPU samples: the periods stolen by the host are in the file, not in the CPU view.)
    assert_eq!(total, waiting.iter().filter(|s| !s.stolen).count(), "{folded}");
    assert!(
        folded.lines().all(|l| l.contains(";spin (")
            || l.starts_with("<module> (")
            || (starting > 0 && l.starts_with("[idle] "))),
        "{folded}"
    );
    (spinners, starting, spin.len())
}

// ---- a Python newer than pyperf knows -------------------------------------------------------------------------

/// Debian's 3.15 relabelled 3.16: a copy of the executable in the sid root with its `Py_Version` and the `version`
/// of its `_Py_DebugOffsets` patched (the interpreter does not read either). pyperf has no 3.16 row; the block
/// passes every check with 3.15's layout, so the process is profiled as 3.15 with that layout, with right stacks,
/// and the recording says so in a warning (in the file, in the report, on stderr).
#[test]
fn a_newer_python_is_read_through_a_layout_it_passes_and_the_recording_says_so() {
    use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
    let _guard = serial();
    let _ = interpreter("sid-3.15");
    let root = sid_root();
    let original = std::fs::read(root.join("usr/bin/python3.15")).expect("sid's python3.15 (scripts/setup)");
    let mut patched = original.clone();
    let elf = object::File::parse(&*original).expect("ELF");
    let file_offset = |addr: u64| -> usize {
        elf.segments()
            .find_map(|s| {
                let (off, size) = s.file_range();
                (addr >= s.address() && addr + 8 <= s.address() + size).then(|| (off + addr - s.address()) as usize)
            })
            .expect("in a segment")
    };
    let py_version = elf.dynamic_symbols().find(|s| s.name() == Ok("Py_Version")).expect("Py_Version").address();
    let at = file_offset(py_version);
    let old = u64::from_le_bytes(original[at..at + 8].try_into().unwrap());
    assert_eq!(old >> 16, 0x030f, "Py_Version {old:#x}");
    let relabelled = (old & !0xff_0000) | 0x10_0000;
    patched[at..at + 8].copy_from_slice(&relabelled.to_le_bytes());
    let runtime = elf.section_by_name(".PyRuntime").expect(".PyRuntime").address();
    let at = file_offset(runtime) + 8;
    assert_eq!(&original[at - 8..at], b"xdebugpy");
    patched[at..at + 8].copy_from_slice(&relabelled.to_le_bytes());
    let fake = root.join("usr/bin/python3.16-relabelled-by-pyperf-tests");
    std::fs::write(&fake, &patched).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let py = sid_python("python3.16-relabelled-by-pyperf-tests");

    let (_dir, out) = scratch("newer.pyp");
    let o = run(pyperf()
        .args(["record", "-F", "499", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(workload("split.py"))
        .arg("2"));
    let _ = std::fs::remove_file(&fake);
    assert!(o.status.success(), "pyperf record failed");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let version = format!("3.16.{}", (relabelled >> 8) & 0xff);
    let says = format!(
        "Python {version} is newer than pyperf knows (2.7, 3.6-3.15): read through its _Py_DebugOffsets with the \
         layout of 3.15"
    );
    assert!(stderr.contains(&says), "{stderr}");
    let rec = read(&out);
    let p = &rec.tables.processes[0];
    assert_eq!(p.python_version, version);
    assert_eq!(rec.tables.warnings.len(), 1, "{:?}", rec.tables.warnings);
    assert_eq!(rec.tables.warnings[0].pid, p.pid);
    assert!(rec.tables.warnings[0].text.starts_with(&says), "{:?}", rec.tables.warnings);
    // Its dicts and instances may have changed in ways its debug offsets do not show: no thread names read.
    assert!(rec.tables.thread_names.is_empty(), "{:?}", rec.tables.thread_names);
    let text = String::from_utf8(run(pyperf().args(["report", "--text", "-i"]).arg(&out)).stdout).unwrap();
    assert!(text.contains(&format!("recorder, pid {}: {says}", p.pid)), "{text}");
    // Right stacks: the split workload's, exactly, and its share against its own timing.
    let heavy: Vec<&S> = rec.with_frame("heavy");
    let light: Vec<&S> = rec.with_frame("light");
    for s in heavy.iter().chain(&light) {
        // <module> main Runner.run heavy|light, then burn unless the sample fell in heavy's or light's own code.
        assert_eq!(s.status, StackStatus::Complete);
        assert_eq!(&s.names[..3], ["<module>", "main", "Runner.run"], "{:?}", s.names);
        assert!(["heavy", "light"].contains(&s.names[3].as_str()), "{:?}", s.names);
        assert!(s.names.len() == 4 || s.names[4..] == ["burn"], "{:?}", s.names);
    }
    assert_share("relabelled 3.16", heavy.len(), heavy.len() + light.len(), split_truth(&o.stdout));
}
