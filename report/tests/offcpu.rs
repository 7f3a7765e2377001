//! Off-CPU and wall-clock views (`--mode off-cpu`, `--mode wall`) on small recordings made on the spot: speedscope's
//! timeline is real time, a recording whose samples are no fixed time, reasons this pyperf does not know.

#[path = "support/synth.rs"]
mod synth;

use pyperf_format::*;
use pyperf_report::{folded, speedscope, text, Filter, LoadOptions, Mode, Profile};
use serde_json::Value;

const MS: u64 = 1_000_000;

fn load(bytes: &[u8], mode: Mode) -> Profile {
    let mut options = LoadOptions::new(Filter::default(), true);
    options.mode = mode;
    Profile::load(bytes, &options).expect("load")
}

/// (frame names root first, weight) of the speedscope profile of the only thread.
fn timeline(profile: &Profile) -> Vec<(Vec<String>, u64)> {
    let mut out = Vec::new();
    speedscope::write(profile, &speedscope::Options::default(), &mut out).expect("speedscope");
    let doc: Value = serde_json::from_slice(&out).expect("json");
    let frames = doc["shared"]["frames"].as_array().expect("frames");
    let p = &doc["profiles"][0];
    assert_eq!(doc["profiles"].as_array().expect("profiles").len(), 1);
    let samples = p["samples"].as_array().expect("samples");
    let weights = p["weights"].as_array().expect("weights");
    samples
        .iter()
        .zip(weights)
        .map(|(s, w)| {
            let names = s
                .as_array()
                .expect("stack")
                .iter()
                .map(|i| frames[i.as_u64().expect("index") as usize]["name"].as_str().expect("name").to_string())
                .collect();
            (names, w.as_u64().expect("weight"))
        })
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A sample at 0 and at 61 ms (1 ms each), read(2) from 1 to 61 ms, preempted from 62 to 100 ms: in wall mode the
/// timeline is exactly that; in off-cpu mode the samples are idle time.
#[test]
fn speedscope_timelines_are_real_time() {
    let bytes = synth::small_offcpu("cpu-clock", Rate::Period(MS));
    let f = "f";
    let wall = load(&bytes, Mode::Wall);
    assert_eq!(
        timeline(&wall),
        vec![
            (names(&[f]), MS),
            (names(&[f, "[off-CPU: read]"]), 60 * MS),
            (names(&[f]), MS),
            (names(&[f, "[off-CPU: runnable]"]), 38 * MS),
        ]
    );
    let off = load(&bytes, Mode::OffCpu);
    assert_eq!(
        timeline(&off),
        vec![
            (vec![], MS),
            (names(&[f, "[off-CPU: read]"]), 60 * MS),
            (vec![], MS),
            (names(&[f, "[off-CPU: runnable]"]), 38 * MS),
        ]
    );
    // cpu mode: as ever, two samples and idle time, the intervals nowhere.
    let cpu = load(&bytes, Mode::Cpu);
    assert_eq!(timeline(&cpu), vec![(names(&[f]), MS), (vec![], 60 * MS), (names(&[f]), MS), (vec![], 38 * MS)]);
    assert_eq!(cpu.off_cpu_all.intervals, 2);
    assert_eq!(cpu.off_cpu_matched.intervals, 0);
    assert!(cpu.stacks.iter().all(|s| s.reason == 0));
}

/// The periods a late sample stands for (a hypervisor's steal, format 1.11 sample flag STOLEN) are wall time, not CPU
/// time: the CPU mode leaves them out (and the text report says so), the wall mode counts them as the thread's time
/// in their stack; a recording before 1.11, which did not flag them, counts them as CPU samples.
#[test]
fn stolen_periods_are_wall_time_not_cpu_time() {
    let text_of = |p: &Profile| text::render(p, &text::Options::default());
    let line = |text: &str, key: &str| -> String {
        text.lines().map(str::trim_start).find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key}: {text}")).into()
    };
    let bytes = synth::stolen_periods(true);
    let cpu = load(&bytes, Mode::Cpu);
    let lines = folded::stacks(&cpu, &folded::Options::default());
    assert_eq!(lines, vec![("f (/t.py:3)".to_string(), 1), ("f (/t.py:3);g (/t.py:9)".to_string(), 1)]);
    assert_eq!((cpu.all.samples, cpu.all.stolen, cpu.matched.samples), (2, 3, 2));
    let text = text_of(&cpu);
    assert_eq!(
        line(&text, "samples "),
        "samples       2 and 3 stolen periods (no CPU time, left out: late clock, below)"
    );
    let late = line(&text, "late clock ");
    assert!(late.contains("1 sample taken when") && late.contains("the 3 periods"), "{late}");
    assert!(late.ends_with("wall time, not CPU time: left out here (--mode wall counts them)"), "{late}");

    let wall = load(&bytes, Mode::Wall);
    let lines = folded::stacks(&wall, &folded::Options::default());
    assert_eq!(
        lines,
        vec![
            ("f (/t.py:3)".to_string(), 1_000),
            ("f (/t.py:3);g (/t.py:9)".to_string(), 4_000),
            ("f (/t.py:3);g (/t.py:9);[off-CPU: read]".to_string(), 15_000),
        ]
    );
    assert_eq!((wall.all.samples, wall.all.stolen, wall.matched.stolen), (5, 3, 3));
    assert_eq!(timeline(&wall)[1], (names(&["f", "g"]), 4 * MS), "the stolen periods in the timeline, with the sample");
    let text = text_of(&wall);
    assert_eq!(
        line(&text, "samples "),
        "samples       5, of which 3 stolen periods (wall time, no CPU time: late clock, below)"
    );
    let late = line(&text, "late clock ");
    assert!(late.ends_with("counted as the threads' wall time (running), not CPU time (--mode cpu leaves them out)"));
    // The time table: 4 periods of running (one sampled, three stolen) and 15 ms blocked, in both time modes.
    for p in [&wall, &load(&bytes, Mode::OffCpu)] {
        let text = text_of(p);
        let running = line(&text, "running ");
        assert!(running.contains("5.000 ms") && running.contains("5 samples, 3 of them stolen by the host"), "{text}");
        assert!(line(&text, "wall ").contains("20.000 ms"), "{text}");
    }
    // Firefox Profiler: no CPU use during the stolen periods.
    let mut gecko = Vec::new();
    pyperf_report::gecko::write(&wall, &pyperf_report::gecko::Options::default(), &mut gecko).expect("gecko");
    let doc: Value = serde_json::from_slice(&gecko).expect("json");
    let deltas = &doc["threads"][0]["samples"]["threadCPUDelta"];
    assert_eq!(deltas, &serde_json::json!([1000, 0, 0, 0, 1000, 0]), "{doc}");

    // As a 1.10 recorder wrote it: the same samples, unflagged, in a file of that version.
    let mut old = synth::stolen_periods(false);
    old[10..12].copy_from_slice(&10u16.to_le_bytes());
    let cpu = load(&old, Mode::Cpu);
    assert_eq!(cpu.version, (1, 10));
    assert_eq!((cpu.all.samples, cpu.all.stolen), (5, 0));
    let lines = folded::stacks(&cpu, &folded::Options::default());
    assert_eq!(lines, vec![("f (/t.py:3)".to_string(), 1), ("f (/t.py:3);g (/t.py:9)".to_string(), 4)]);
    let late = line(&text_of(&cpu), "late clock ");
    assert!(
        late.ends_with("counted as CPU samples (a recording before format 1.11 does not tell them apart)"),
        "{late}"
    );
    // Reported together with a 1.11 recording: the difference is said.
    let new = load(&bytes, Mode::Cpu);
    let warnings =
        Profile::check_combinable(&[("old.pyp".into(), &cpu), ("new.pyp".into(), &new)]).expect("combinable");
    assert!(
        warnings.iter().any(|w| w.starts_with("old.pyp (format 1.10) counts the 3 periods its late samples stood for")
            && w.ends_with("new.pyp (format 1.11) leaves such periods out of --mode cpu")),
        "{warnings:?}"
    );
}

/// The library loads a recording whose CPU samples are no fixed time in wall mode with the off-CPU time only, and
/// says so (the command line refuses it).
#[test]
fn wall_time_without_a_sample_period_leaves_samples_out() {
    let bytes = synth::small_offcpu("cycles", Rate::Period(100_000));
    let p = load(&bytes, Mode::Wall);
    assert!(p.warnings.iter().any(|w| w.contains("wall-clock time leaves the CPU samples out")), "{:?}", p.warnings);
    assert!(p.stacks.iter().all(|s| s.reason != 0));
    assert_eq!(p.total(), 98 * MS);
    let lines = folded::stacks(&p, &folded::Options::default());
    assert_eq!(
        lines,
        vec![
            ("f (/t.py:3);[off-CPU: read]".to_string(), 60_000),
            ("f (/t.py:3);[off-CPU: runnable]".to_string(), 38_000)
        ]
    );
}

/// Kinds this pyperf does not know are time all the same: `other` in the text report, named by their key; an interval
/// without Python frames has its reason frame alone (no `[idle]`), and a folded line under half a microsecond is left
/// out.
#[test]
fn unknown_kinds_frameless_intervals_and_tiny_lines() {
    let header = Header {
        pyperf_version: "0.4.0".into(),
        hostname: "h".into(),
        kernel_release: "k".into(),
        arch: "aarch64".into(),
        start_time_unix_ns: 0,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(1000),
        command_line: vec!["pyperf".into(), "record".into(), "--off-cpu".into()],
        workload: vec!["python3".into(), "t.py".into()],
    };
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    w.start_off_cpu(400).expect("off-CPU");
    let iv = |tid: u32, start_ns: u64, duration_ns: u64, kind: OffCpuKind, syscall: i32| OffCpuInterval {
        pid: 1,
        tid,
        start_ns,
        duration_ns,
        runnable_ns: 0,
        weight_ns: duration_ns.max(400),
        kind,
        syscall,
        gil: GilState::NotLocked,
        status: StackStatus::Idle,
        stack: 0,
        flags: 0,
        comm: "t".into(),
        task_stack: 0,
        interp: 0,
        link: 0,
    };
    w.push_off_cpu(&iv(1, 0, 5 * MS, OffCpuKind::Unknown(9), 63)).expect("interval");
    w.push_off_cpu(&iv(1, 5 * MS, 2 * MS, OffCpuKind::Unknown0, -1)).expect("interval");
    w.push_off_cpu(&iv(1, 7 * MS, 3 * MS, OffCpuKind::Blocked, 63)).expect("interval");
    w.push_off_cpu(&iv(2, 0, 100, OffCpuKind::Runnable, -1)).expect("interval");
    let bytes = w.finish(&Stats { duration_ns: 10 * MS, ..Default::default() }).expect("finish");

    let p = load(&bytes, Mode::OffCpu);
    let lines = folded::stacks(&p, &folded::Options::default());
    // aarch64's 63 is not x86_64's read: named by number. The runnable 400 ns (sampled) rounds to 0 µs: no line.
    assert_eq!(
        lines,
        vec![
            ("[off-CPU: syscall 63]".to_string(), 3000),
            ("[off-CPU: unknown-9]".to_string(), 5000),
            ("[off-CPU: unknown]".to_string(), 2000),
        ]
    );
    assert_eq!(p.off_cpu_matched.other_ns, 7 * MS);
    assert_eq!(p.off_cpu_matched.sampled, 1);
    let report = text::render(&p, &text::Options::default());
    assert!(report.contains("    other           7.000 ms   70.0%  reason unknown\n"), "{report}");
    assert!(report.contains("  t [pid 1] thread 2 (t)\n"), "{report}");
    assert!(!report.contains("[idle]"), "{report}");
    assert!(report.contains("  off-CPU min   400 ns: shorter intervals sampled (a kept one weighs 400 ns)\n"));
    assert!(report.contains("  4 off-CPU intervals; 1 shorter than 400 ns, weighing 400 ns (sampled)\n"), "{report}");
}

/// Crafted extremes (weights and times near u64::MAX, zero durations, runnable past the duration, unknown states)
/// report in every format and mode without overflowing.
#[test]
fn extreme_intervals_do_not_overflow() {
    use pyperf_report::{write_report, Format, ReportArgs};
    let header = Header {
        pyperf_version: "x".into(),
        hostname: String::new(),
        kernel_release: String::new(),
        arch: "x86_64".into(),
        start_time_unix_ns: 0,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(1),
        command_line: vec![],
        workload: vec![],
    };
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    w.start_off_cpu(u64::MAX).expect("off-CPU");
    let s = w.intern_symbol(&Symbol { scope: String::new(), name: "f".into(), file: String::new(), line: 0, flags: 0 });
    let leaf = w.intern_stack(&[s, s]);
    for (i, (start, duration, runnable, weight)) in [
        (u64::MAX, u64::MAX, u64::MAX, u64::MAX),
        (0, 0, u64::MAX, u64::MAX),
        (u64::MAX - 1, 5, 9, u64::MAX - 1),
        (3, u64::MAX, 0, u64::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        for tid in [1, 2] {
            w.push_off_cpu(&OffCpuInterval {
                pid: 1,
                tid,
                start_ns: start,
                duration_ns: duration,
                runnable_ns: runnable,
                weight_ns: weight,
                kind: OffCpuKind::from_u8(i as u8 * 60),
                syscall: [i32::MIN, -1, 0, i32::MAX][i],
                gil: GilState::Unknown(255),
                status: StackStatus::from_u8(i as u8 * 3),
                stack: if i % 2 == 0 { leaf } else { 0 },
                flags: 255,
                comm: String::new(),
                task_stack: 0,
                interp: 0,
                link: 0,
            })
            .expect("interval");
        }
        w.push_sample(&SampleRecord {
            time_ns: start,
            cpu: 0,
            pid: 1,
            tid: 1,
            comm: "",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack: leaf,
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    let bytes = w.finish(&Stats { duration_ns: u64::MAX, ..Default::default() }).expect("finish");
    for mode in Mode::ALL {
        let p = load(&bytes, mode);
        let roots = ReportArgs { pid_root: true, tid_root: true, mode, ..ReportArgs::with_format(Format::Flamegraph) };
        for args in Format::ALL.map(|f| ReportArgs { mode, ..ReportArgs::with_format(f) }).into_iter().chain([roots]) {
            write_report(&args, &p, std::io::sink()).unwrap_or_else(|e| panic!("{mode:?} {args:?}: {e}"));
        }
    }
}
