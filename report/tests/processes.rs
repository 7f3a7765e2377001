//! Processes that share a pid are kept apart: a process record applies from its `first_seen_ns` (FORMAT.md), so an
//! exec'd or reused pid is several processes, each with its own label, threads, stacks and timelines.

#[path = "support/synth.rs"]
mod synth;

use pyperf_report::{folded, speedscope, text, Filter, LoadOptions, Profile};

fn load(filter: Filter, timeline: bool) -> Profile {
    Profile::load(&synth::exec()[..], &LoadOptions::new(filter, timeline)).expect("load")
}

fn folded_text(profile: &Profile, pid_root: bool, tid_root: bool) -> String {
    let mut o = folded::Options::default();
    o.pid_root = pid_root;
    o.tid_root = tid_root;
    let mut out = Vec::new();
    folded::write(profile, &o, &mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn each_process_record_is_a_process_of_its_own() {
    let p = load(Filter::default(), false);
    let got: Vec<(u32, Option<u32>, &str, u64, u32)> =
        p.processes.iter().map(|i| (i.pid, i.record, i.label.as_str(), i.samples, i.threads)).collect();
    // Records in file order: 500, 100 (a.py), 400, 100 (b.py), 400.
    assert_eq!(
        got,
        vec![
            (100, Some(1), "python3 [pid 100 #1, from 0.000 s]", 5, 2),
            (100, Some(3), "python3 [pid 100 #2, from 0.010 s]", 2, 1),
            (300, None, "nameless [pid 300]", 1, 1),
            (400, Some(2), "old [pid 400 #1, from 0.000 s]", 1, 1),
            (400, Some(4), "new [pid 400 #2, from 0.020 s]", 1, 1),
            (500, Some(0), "python3 [pid 500]", 2, 1),
        ]
    );
    // A thread is (process instance, tid): tid 100 before and after the exec are two threads.
    let threads: Vec<(u32, u32, &str)> =
        p.threads.iter().map(|t| (t.pid, t.tid, p.processes[t.process as usize].label.as_str())).collect();
    assert_eq!(
        threads,
        vec![
            (500, 500, "python3 [pid 500]"),
            (100, 100, "python3 [pid 100 #1, from 0.000 s]"),
            (100, 101, "python3 [pid 100 #1, from 0.000 s]"),
            (400, 400, "old [pid 400 #1, from 0.000 s]"),
            (100, 100, "python3 [pid 100 #2, from 0.010 s]"),
            (300, 300, "nameless [pid 300]"),
            (400, 400, "new [pid 400 #2, from 0.020 s]"),
        ]
    );
    assert_eq!(p.process_label_of(&p.threads[1]), "python3 [pid 100 #1, from 0.000 s]");
    // A pid alone names its latest process.
    assert_eq!(p.process_label(100), "python3 [pid 100 #2, from 0.010 s]");
    assert_eq!(p.process_label(9), "[pid 9]");
}

#[test]
fn process_roots_put_each_sample_under_its_own_process() {
    let p = load(Filter::default(), false);
    assert_eq!(
        folded_text(&p, true, false),
        "nameless [pid 300];x (/x.py:1) 1\n\
         new [pid 400 #2, from 0.020 s];x (/x.py:1) 1\n\
         old [pid 400 #1, from 0.000 s];x (/x.py:1) 1\n\
         python3 [pid 100 #1, from 0.000 s];<module> (/a.py:1);main (/a.py:3) 4\n\
         python3 [pid 100 #1, from 0.000 s];work (/a.py:5) 1\n\
         python3 [pid 100 #2, from 0.010 s];<module> (/b.py:1);main (/b.py:2) 2\n\
         python3 [pid 500];x (/x.py:1) 2\n"
    );
    let with_threads = folded_text(&p, true, true);
    assert!(with_threads
        .contains("python3 [pid 100 #1, from 0.000 s];thread 100 (python3);<module> (/a.py:1);main (/a.py:3) 4\n"));
    assert!(with_threads
        .contains("python3 [pid 100 #2, from 0.010 s];thread 100 (python3);<module> (/b.py:1);main (/b.py:2) 2\n"));
    // Thread roots alone merge what looks the same: tid 100 before and after the exec.
    assert!(folded_text(&p, false, true).contains("thread 100 (python3);<module> (/a.py:1);main (/a.py:3) 4\n"));
    // The full tree (flame graphs) has both processes as roots.
    let mut o = folded::Options::default();
    o.pid_root = true;
    let tree = pyperf_report::tree::Tree::build(&p, &o);
    let roots: Vec<&str> =
        tree.children(pyperf_report::tree::ROOT).iter().map(|&n| tree.label(n).text.as_str()).collect();
    assert!(
        roots.contains(&"python3 [pid 100 #1, from 0.000 s]") && roots.contains(&"python3 [pid 100 #2, from 0.010 s]")
    );
}

#[test]
fn text_report_lists_every_process() {
    let out = text::render(&load(Filter::default(), false), &text::Options::default());
    let a = out.find("  python3 [pid 100 #1, from 0.000 s]: 5 samples, 2 threads\n    command      python3 a.py\n");
    let b = out.find("  python3 [pid 100 #2, from 0.010 s]: 2 samples, 1 thread\n    command      python3 b.py\n");
    assert!(a.is_some() && b.is_some() && a < b, "{out}");
    assert!(out.contains("    first seen   0.010 s after the start\n"), "{out}");
    assert!(
        out.contains("  old [pid 400 #1, from 0.000 s]: 1 sample, 1 thread\n    command      (not read)\n"),
        "{out}"
    );
    assert!(out.contains("  nameless [pid 300]: 1 sample, 1 thread\n    (the recording does not describe"), "{out}");
    // The thread table names each thread's own process.
    assert!(out.contains("python3 [pid 100 #2, from 0.010 s]  thread 100 (python3)\n"), "{out}");
    assert!(out.contains("python3 [pid 100 #1, from 0.000 s]  thread 100 (python3)\n"), "{out}");
}

#[test]
fn a_pid_filter_selects_every_process_of_the_pid() {
    let p = load(Filter { pids: vec![100], ..Filter::default() }, false);
    assert_eq!(p.matched.samples, 7);
    let matched: Vec<u64> = p.processes.iter().filter(|i| i.pid == 100).map(|i| i.matched).collect();
    assert_eq!(matched, vec![5, 2]);
    assert_eq!(p.processes.iter().filter(|i| i.pid != 100).map(|i| i.matched).sum::<u64>(), 0);
}

/// speedscope shows one profile per thread, so the two tid-100 threads (before and after the exec) are two
/// profiles.
#[test]
fn speedscope_has_a_profile_per_thread_of_each_process() {
    let p = load(Filter::default(), true);
    let mut out = Vec::new();
    speedscope::write(&p, &speedscope::Options::default(), &mut out).expect("write");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(doc["profiles"].as_array().expect("profiles").len(), p.threads.len());
}

#[test]
fn speedscope_names_each_thread_by_its_own_process() {
    let p = load(Filter::default(), true);
    let mut out = Vec::new();
    speedscope::write(&p, &speedscope::Options::default(), &mut out).expect("write");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let mut names: Vec<&str> =
        doc["profiles"].as_array().expect("profiles").iter().map(|p| p["name"].as_str().expect("name")).collect();
    assert!(names.contains(&"python3 [pid 100 #1, from 0.000 s] thread 100 (python3)"), "{names:?}");
    names.sort();
    names.dedup();
    assert_eq!(names.len(), p.threads.len(), "{names:?}");
}
