//! `--diff BASE`: a differential profile of two recordings with a known difference. BASE: f 50, g 40, k 10
//! samples; NEW: f 90, g 10, h 20. BASE is scaled to NEW's 120 samples: f 60, g 48, k 12.

use std::path::Path;
use std::process::{Command, Output};

use pyperf_format::{
    GilState, Header, Process, PthreadIdMatch, Rate, SampleRecord, StackStatus, Stats, Symbol, ThreadStateMatch, Writer,
};

const BIN: &str = env!("CARGO_BIN_EXE_pyperf-report");

fn sym(name: &str, line: u32) -> Symbol {
    Symbol { scope: String::new(), name: name.into(), file: "/a.py".into(), line, flags: 0 }
}

/// A recording of `main` calling the functions with these sample counts, 100 Hz.
fn recording(calls: &[(&str, u32, u32)]) -> Vec<u8> {
    let header = Header {
        pyperf_version: "0.5.0".into(),
        hostname: "h".into(),
        kernel_release: "6.1".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 1_700_000_000_000_000_000,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(100),
        command_line: vec!["pyperf".into()],
        workload: vec!["python3".into(), "a.py".into()],
    };
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    w.add_process(&Process {
        pid: 7,
        command: vec!["python3".into(), "a.py".into()],
        python_version: "3.12.1".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    let main = w.intern_symbol(&sym("main", 1));
    let mut t = 0;
    let mut total = 0;
    for &(name, line, n) in calls {
        let f = w.intern_symbol(&sym(name, line));
        let stack = w.intern_stack(&[main, f]);
        for _ in 0..n {
            t += 10_000_000;
            w.push_sample(&SampleRecord {
                time_ns: t,
                cpu: 0,
                pid: 7,
                tid: 7,
                comm: "python3",
                thread_state: ThreadStateMatch::Match,
                gil: GilState::ThisThread,
                pthread_id: PthreadIdMatch::Match,
                status: StackStatus::Complete,
                stack,
                task_stack: 0,
                flags: 0,
                interp: 0,
                link: 0,
            })
            .expect("sample");
        }
        total += n as u64;
    }
    w.finish(&Stats { samples: total, duration_ns: t, ..Default::default() }).expect("finish")
}

fn setup(dir: &Path) {
    std::fs::write(dir.join("base.pyp"), recording(&[("f", 5, 50), ("g", 9, 40), ("k", 14, 10)])).expect("base");
    std::fs::write(dir.join("new.pyp"), recording(&[("f", 5, 90), ("g", 9, 10), ("h", 12, 20)])).expect("new");
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).args(args).current_dir(dir).output().expect("run")
}

#[test]
fn folded_differential_is_normalised_and_complete() {
    let dir = tempfile::tempdir().expect("dir");
    setup(dir.path());
    let o = run(dir.path(), &["new.pyp", "--diff", "base.pyp", "--folded"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).expect("utf-8");
    let expected =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/diff/known.difffolded"))
            .expect("expected file");
    assert_eq!(out, expected);
    // inferno draws it as a differential flame graph: the total is NEW's.
    let mut options = inferno::flamegraph::Options::default();
    options.min_width = 0.0;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, out.lines(), &mut svg).expect("inferno reads it");
    let svg = String::from_utf8(svg).expect("svg");
    assert!(svg.contains("120 samples"), "inferno's total");
}

/// Fill colour of the frame whose tooltip starts with `name (`.
fn fill_of(svg: &str, name: &str) -> ((u8, u8, u8), String) {
    let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
    let g = doc
        .descendants()
        .filter(|n| n.has_tag_name("g"))
        .find(|g| {
            g.children()
                .any(|c| c.has_tag_name("title") && c.text().is_some_and(|t| t.starts_with(&format!("{name} ("))))
        })
        .unwrap_or_else(|| panic!("no frame {name}"));
    let title = g.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()).unwrap_or("").to_string();
    let fill = g.children().find(|c| c.has_tag_name("rect")).and_then(|r| r.attribute("fill")).expect("fill");
    let nums: Vec<u8> =
        fill.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|n| n.parse().expect("n")).collect();
    ((nums[0], nums[1], nums[2]), title)
}

#[test]
fn flame_graph_colours_growth_red_and_shrinkage_blue() {
    let dir = tempfile::tempdir().expect("dir");
    setup(dir.path());
    let o = run(dir.path(), &["new.pyp", "--diff", "base.pyp", "--flamegraph", "-o", "d.svg"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = std::fs::read_to_string(dir.path().join("d.svg")).expect("svg");
    assert!(svg.contains("<title>Differential: new.pyp vs base.pyp</title>"));
    // f: 75% now, 50% before: red, the deepest (the largest change, with g's).
    let ((r, g, b), title) = fill_of(&svg, "f");
    assert!(r == 255 && g == b && g < 100, "f {r},{g},{b}");
    assert!(title.contains("new: 90 samples, 75.00%; base: 50 samples, 50.00%; +25.00 points"), "{title}");
    // g: 8.33% now, 40% before: blue.
    let ((r, g, b), title) = fill_of(&svg, "g");
    assert!(b == 255 && r == g && r < 100, "g {r},{g},{b}");
    assert!(title.contains("-31.67 points"), "{title}");
    // h: new, 16.67%: red, lighter than f.
    let ((r, g, _), _) = fill_of(&svg, "h");
    assert!(r == 255 && g > 100 && g < 255, "h {r},{g}");
    // main: 100% in both: white. k (only in BASE) has no width: not drawn.
    assert_eq!(fill_of(&svg, "main").0, (255, 255, 255));
    assert!(!svg.contains("<title>k ("), "k is drawn");
}

#[test]
fn diff_errors_are_one_line() {
    let dir = tempfile::tempdir().expect("dir");
    setup(dir.path());
    for (args, want) in [
        (
            vec!["new.pyp", "--diff", "base.pyp"],
            "pyperf-report: --diff makes folded stacks or a flame graph, not --text: add --folded or --flamegraph\n",
        ),
        (
            vec!["new.pyp", "--diff", "base.pyp", "--folded", "--pid-root"],
            "pyperf-report: --diff compares stacks over all processes: leave out --pid-root, --tid-root and --interp-root\n",
        ),
    ] {
        let o = run(dir.path(), &args);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&o.stderr), want);
    }
    let o = run(dir.path(), &["new.pyp", "--diff", "absent.pyp", "--folded"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.starts_with("pyperf-report: cannot open absent.pyp") && err.lines().count() == 1, "{err}");
    let o = run(dir.path(), &["new.pyp", "--diff", "base.pyp", "--folded", "-o", "base.pyp", "--force"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("it is the input recording"));
}
