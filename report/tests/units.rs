//! Small recordings made on the spot, one behaviour each: escaping, merging, recursion, filters, timelines.

use pyperf_format::*;
use pyperf_report::{folded, speedscope, text, Filter, LoadOptions, Profile};

struct Rec {
    w: Writer<Vec<u8>>,
    time: u64,
}

fn header() -> Header {
    Header {
        pyperf_version: "0.1.0".into(),
        hostname: "h".into(),
        kernel_release: "k".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 0,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(1000),
        command_line: vec!["pyperf".into(), "record".into()],
        workload: vec!["python3".into(), "t.py".into()],
    }
}

impl Rec {
    fn new() -> Self {
        let mut w = Writer::new(Vec::new(), &header()).expect("header");
        w.add_process(&Process {
            pid: 1,
            command: vec!["/usr/bin/python3.11".into(), "t.py".into()],
            python_version: "3.11.7".into(),
            interpreter_path: "/usr/bin/python3.11".into(),
            build_id: String::new(),
            first_seen_ns: 0,
            ns_pid: 0,
            cgroup: String::new(),
        })
        .expect("process");
        Rec { w, time: 0 }
    }

    /// Frames root first as (name, file, line).
    fn stack(&mut self, frames: &[(&str, &str, u32)]) -> u32 {
        let ids: Vec<u32> = frames
            .iter()
            .map(|(n, f, l)| {
                self.w.intern_symbol(&Symbol {
                    scope: String::new(),
                    name: n.to_string(),
                    file: f.to_string(),
                    line: *l,
                    flags: 0,
                })
            })
            .collect();
        self.w.intern_stack(&ids)
    }

    fn sample(&mut self, tid: u32, gil: GilState, status: StackStatus, stack: u32, n: usize) {
        for _ in 0..n {
            self.time += 1_000_000;
            self.w
                .push_sample(&SampleRecord {
                    time_ns: self.time,
                    cpu: 0,
                    pid: 1,
                    tid,
                    comm: "python3.11",
                    thread_state: ThreadStateMatch::Match,
                    gil,
                    pthread_id: PthreadIdMatch::Match,
                    status,
                    stack,
                    task_stack: 0,
                    flags: 0,
                    interp: 0,
                    link: 0,
                })
                .expect("sample");
        }
    }

    fn load(self, filter: Filter, timeline: bool) -> Profile {
        let bytes = self.w.finish(&Stats::default()).expect("finish");
        Profile::load(&bytes[..], &LoadOptions::new(filter, timeline)).expect("load")
    }
}

fn folded_text(p: &Profile, lines: bool) -> String {
    let mut o = folded::Options::default();
    o.lines = lines;
    let mut out = Vec::new();
    folded::write(p, &o, &mut out).expect("write");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn identical_stacks_are_counted_once_per_line() {
    let mut r = Rec::new();
    let a = r.stack(&[("main", "m.py", 1), ("f", "m.py", 5)]);
    let b = r.stack(&[("main", "m.py", 1)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, a, 3);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, b, 1);
    r.sample(2, GilState::ThisThread, StackStatus::Complete, a, 2);
    let p = r.load(Filter::default(), false);
    assert_eq!(folded_text(&p, true), "main (m.py:1) 1\nmain (m.py:1);f (m.py:5) 5\n");
}

#[test]
fn folded_names_cannot_break_the_line_format() {
    let mut r = Rec::new();
    let s = r.stack(&[("main", "a;b.py", 1), ("f", "new\nline\\x.py", 2)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, s, 2);
    let p = r.load(Filter::default(), false);
    let out = folded_text(&p, true);
    assert_eq!(out, "main (a\\x3bb.py:1);f (new\\nline\\\\x.py:2) 2\n");
    assert_eq!(out.lines().count(), 1);
    assert_eq!(out.trim_end().split(';').count(), 2);
}

#[test]
fn no_lines_merges_symbols_differing_only_in_line() {
    let mut r = Rec::new();
    let a = r.stack(&[("main", "m.py", 1), ("f", "m.py", 5)]);
    let b = r.stack(&[("main", "m.py", 2), ("f", "m.py", 6)]);
    let c = r.stack(&[("main", "m.py", 2), ("f", "other.py", 6)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, a, 3);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, b, 4);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, c, 1);
    let p = r.load(Filter::default(), false);
    assert_eq!(
        folded_text(&p, true),
        "main (m.py:1);f (m.py:5) 3\nmain (m.py:2);f (m.py:6) 4\nmain (m.py:2);f (other.py:6) 1\n"
    );
    assert_eq!(folded_text(&p, false), "main (m.py);f (m.py) 7\nmain (m.py);f (other.py) 1\n");

    // speedscope without lines: one frame per function.
    let mut r = Rec::new();
    let a = r.stack(&[("main", "m.py", 1)]);
    let b = r.stack(&[("main", "m.py", 2)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, a, 1);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, b, 1);
    let p = r.load(Filter::default(), true);
    let mut o = speedscope::Options::default();
    o.lines = false;
    let mut out = Vec::new();
    speedscope::write(&p, &o, &mut out).expect("write");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(doc["shared"]["frames"], serde_json::json!([{"name": "main", "file": "m.py"}]));
}

#[test]
fn recursion_counts_once_in_total_share() {
    let mut r = Rec::new();
    let deep = r.stack(&[("main", "m.py", 1), ("fib", "m.py", 5), ("fib", "m.py", 6), ("fib", "m.py", 6)]);
    let flat = r.stack(&[("main", "m.py", 1), ("other", "m.py", 9)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, deep, 6);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, flat, 2);
    r.sample(1, GilState::NotLocked, StackStatus::Idle, 0, 2);
    let p = r.load(Filter::default(), false);
    let shares = text::function_shares(&p);
    let get = |name: &str| shares.iter().find(|f| f.function == name).expect(name);
    assert_eq!((get("fib").self_samples, get("fib").total_samples), (6, 6), "fib counted once per sample");
    assert_eq!((get("main").self_samples, get("main").total_samples), (0, 8));
    assert_eq!((get("other").self_samples, get("other").total_samples), (2, 2));
    assert_eq!((get("[idle]").self_samples, get("[idle]").total_samples), (2, 2));
    // Self shares add up to all samples.
    assert_eq!(shares.iter().map(|f| f.self_samples).sum::<u64>(), p.matched.samples);
    let report = text::render(&p, &text::Options::default());
    assert!(report.contains("          6  60.0%          6  60.0%  fib  (m.py)"), "{report}");
}

#[test]
fn filters_select_samples_for_every_format() {
    let mut r = Rec::new();
    let s = r.stack(&[("main", "m.py", 1)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, s, 5);
    r.sample(2, GilState::NotLocked, StackStatus::Idle, 0, 3);
    r.sample(3, GilState::OtherThread, StackStatus::Complete, s, 2);
    let bytes = {
        let Rec { w, .. } = r;
        w.finish(&Stats::default()).expect("finish")
    };
    let load = |f: Filter| Profile::load(&bytes[..], &LoadOptions::new(f, true)).expect("load");

    let p = load(Filter { gil: vec![GilState::ThisThread, GilState::OtherThread], ..Default::default() });
    assert_eq!(p.matched.samples, 7);
    assert_eq!(p.all.samples, 10);
    assert_eq!(folded_text(&p, true), "main (m.py:1) 7\n");

    let p = load(Filter { tids: vec![2], ..Default::default() });
    assert_eq!(folded_text(&p, true), "[idle] 3\n");

    let p = load(Filter { pids: vec![1], status: vec![StackStatus::Complete], tids: vec![3, 1], ..Default::default() });
    assert_eq!(folded_text(&p, true), "main (m.py:1) 7\n");
    let mut out = Vec::new();
    speedscope::write(&p, &speedscope::Options::default(), &mut out).expect("write");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(doc["profiles"].as_array().expect("profiles").len(), 2, "threads 1 and 3 only");

    let p = load(Filter { pids: vec![9], ..Default::default() });
    assert_eq!(folded_text(&p, true), "");
    assert!(text::render(&p, &text::Options::default()).contains("pid 9: 0 of 10 samples"));
}

#[test]
fn speedscope_weights_are_cpu_time() {
    let mut r = Rec::new();
    let s = r.stack(&[("main", "m.py", 1)]);
    // Times 1, 2, 3 ms (Rec's clock), then a sleep: 11 ms.
    r.sample(1, GilState::ThisThread, StackStatus::Complete, s, 3);
    r.time += 7_000_000;
    r.sample(1, GilState::ThisThread, StackStatus::Complete, s, 1);
    let p = r.load(Filter::default(), true);
    let mut out = Vec::new();
    speedscope::write(&p, &speedscope::Options::default(), &mut out).expect("write");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let prof = &doc["profiles"][0];
    // Each sample weighs one period (1000 Hz = 1 ms), back-to-back samples of one stack merged; the time before the
    // first sample and the sleep are empty samples (speedscope's idle time).
    assert_eq!(prof["samples"], serde_json::json!([[], [0], [], [0]]));
    assert_eq!(prof["weights"], serde_json::json!([1_000_000, 3_000_000, 7_000_000, 1_000_000]));
    assert_eq!(prof["startValue"], 0);
    assert_eq!(prof["endValue"], 12_000_000);
    assert_eq!(prof["name"], "python3.11 [pid 1] thread 1 (python3.11)");
}

#[test]
fn pid_and_tid_roots() {
    let mut r = Rec::new();
    let s = r.stack(&[("main", "m.py", 1)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, s, 2);
    r.sample(2, GilState::ThisThread, StackStatus::Truncated, s, 1);
    let p = r.load(Filter::default(), false);
    let mut o = folded::Options::default();
    o.pid_root = true;
    o.tid_root = true;
    let mut out = Vec::new();
    folded::write(&p, &o, &mut out).expect("write");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        "python3.11 [pid 1];thread 1 (python3.11);main (m.py:1) 2\n\
         python3.11 [pid 1];thread 2 (python3.11);[truncated];main (m.py:1) 1\n"
    );
}

#[path = "support/synth.rs"]
mod synth;

/// The fast loading path (no threads, dense counts) and the full one fold the same stacks.
#[test]
fn load_options_do_not_change_results() {
    let bytes = synth::recording("mixed");
    let full = Profile::load(&bytes[..], &LoadOptions::new(Filter::default(), true)).expect("load");
    let fast = Profile::load(&bytes[..], &LoadOptions::stacks_only(Filter::default())).expect("load");
    assert_eq!(folded_text(&full, true), folded_text(&fast, true));
    assert_eq!(folded_text(&full, false), folded_text(&fast, false));
    assert_eq!(full.matched.samples, fast.matched.samples);
    assert_eq!(text::function_shares(&full), text::function_shares(&fast));
    assert!(fast.threads.is_empty());
    assert_eq!(full.all, full.matched);

    let filter = Filter { gil: vec![GilState::ThisThread], ..Default::default() };
    let full = Profile::load(&bytes[..], &LoadOptions::new(filter.clone(), false)).expect("load");
    let fast = Profile::load(&bytes[..], &LoadOptions::stacks_only(filter)).expect("load");
    assert_eq!(folded_text(&full, true), folded_text(&fast, true));
    assert_eq!(full.matched, fast.matched);
}

/// A process in a container: known by its host pid and by its pid in its own PID namespace. `--pid` takes either,
/// `--pid-root` and the text report show both, and its cgroup.
#[test]
fn a_process_in_its_own_pid_namespace_is_found_by_either_pid() {
    let mut w = Writer::new(Vec::new(), &header()).expect("header");
    let contained = Process {
        pid: 4242,
        command: vec!["python3.13".into(), "app.py".into()],
        python_version: "3.13.18".into(),
        interpreter_path: "/usr/bin/python3.13".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 1,
        cgroup: "/system.slice/docker-0123abcd.scope".into(),
    };
    let host = Process { pid: 1, ns_pid: 1, cgroup: "/init.scope".into(), ..contained.clone() };
    w.add_process(&contained).unwrap();
    w.add_process(&host).unwrap();
    let f =
        w.intern_symbol(&Symbol { scope: String::new(), name: "f".into(), file: "/app.py".into(), line: 1, flags: 0 });
    let s = w.intern_stack(&[f]);
    for (i, pid) in [4242u32, 4242, 4242, 1].into_iter().enumerate() {
        w.push_sample(&SampleRecord {
            time_ns: i as u64,
            cpu: 0,
            pid,
            tid: pid,
            comm: "python3.13",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack: s,
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .unwrap();
    }
    let bytes = w.finish(&Stats::default()).unwrap();
    let load = |pids: Vec<u32>| {
        Profile::load(&bytes[..], &LoadOptions::new(Filter { pids, ..Filter::default() }, false)).expect("load")
    };
    // By its host pid: only it. By 1: the host's pid 1 and the container's init, which is pid 1 inside.
    let matched = |p: Profile| p.matched.statuses().iter().map(|s| s.1).sum::<u64>();
    assert_eq!(matched(load(vec![4242])), 3);
    assert_eq!(matched(load(vec![1])), 4);
    let p = load(vec![]);
    assert_eq!(p.process_label(4242), "python3.13 [pid 4242, 1 in its namespace]");
    assert_eq!(p.process_label(1), "python3.13 [pid 1]");
    let mut out = Vec::new();
    text::write(&p, &text::Options::default(), &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("namespace    pid 1 in its own PID namespace (a container)"), "{out}");
    assert!(out.contains("cgroup       /system.slice/docker-0123abcd.scope"), "{out}");
}

/// Folded lines come in byte order (as `LC_ALL=C sort` gives them, and as inferno's `--no-sort` checks), even where
/// a frame's text is a prefix of a sibling's and the next character sorts between the space before a count and the
/// `;` before a callee: there, depth-first order would not be byte order.
#[test]
fn folded_lines_are_in_byte_order_when_a_frame_is_a_prefix_of_another() {
    let mut r = Rec::new();
    let a = r.stack(&[("f", "a.py", 1)]);
    let a_g = r.stack(&[("f", "a.py", 1), ("g", "a.py", 2)]);
    let b = r.stack(&[("f (a.py:1)!", "b.py", 2)]);
    let c = r.stack(&[("f (a.py:1)", "c.py", 3), ("h", "c.py", 4)]);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, a, 5);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, a_g, 1);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, b, 1);
    r.sample(1, GilState::ThisThread, StackStatus::Complete, c, 12);
    let p = r.load(Filter::default(), false);
    let out = folded_text(&p, true);
    assert_eq!(
        out,
        "f (a.py:1) (c.py:3);h (c.py:4) 12\n\
         f (a.py:1) 5\n\
         f (a.py:1)! (b.py:2) 1\n\
         f (a.py:1);g (a.py:2) 1\n"
    );
    let mut sorted: Vec<&str> = out.lines().collect();
    sorted.sort_unstable();
    assert_eq!(sorted, out.lines().collect::<Vec<_>>());
}
