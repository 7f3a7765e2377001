//! `pyperf annotate` on synthetic recordings: exact per-line counts (self: the leaf Python frame's line; total: once
//! per sample and line, recursion included), which functions and lines are shown, where the source comes from, and
//! escaping in text and HTML.

#[path = "support/synth.rs"]
mod synth;

use clap::Parser;
use pyperf_format::{
    GilState, Header, Process, PthreadIdMatch, Rate, SampleRecord, SourceFile, StackStatus, Stats, Symbol,
    ThreadStateMatch, Writer,
};
use pyperf_report::annotate::{self, Annotated, Line, Options, SourceOrigin, Target};
use pyperf_report::{AnnotateArgs, LoadOptions, Profile};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    annotate: AnnotateArgs,
}

fn source_profile() -> Profile {
    Profile::load(&synth::recording("source")[..], &LoadOptions::default()).expect("synthetic recording")
}

fn options(target: Target) -> Options {
    let mut o = Options::default();
    o.target = target;
    o.local = false;
    o
}

fn run(target: Target) -> Annotated {
    annotate::annotate(&source_profile(), &options(target)).expect("annotates")
}

fn text(a: &Annotated, o: &Options) -> String {
    let mut out = Vec::new();
    annotate::write(a, o, &mut out).expect("write");
    String::from_utf8(out).expect("UTF-8")
}

fn line(line: u32, self_count: u64, total_count: u64, text: &str) -> Line {
    Line { line, self_count, total_count, text: Some(text.to_string()) }
}

const HOT_SHA: &str = "66513e010772b85e31b01e9d046fc490d80c048d96ef4c27b2a07dcbc84e0201";

/// `work`: lines 3 (its def, found in the recording's copy) to 8 (its block's end), each line's self and total as
/// the recording's stacks make them. Line 7 is on the stack of 40 samples: 20 + 10 in `helper`, 5 in C code, 5
/// recursing (`work:7 work:7 work:6`, counted once); line 6's self has the recursive samples' 5.
#[test]
fn work_has_exact_per_line_counts() {
    let a = run(Target::Name("work".into()));
    assert!(a.notes.is_empty() && a.warnings.is_empty(), "{:?} {:?}", a.notes, a.warnings);
    assert_eq!(a.selection, 106);
    assert_eq!(a.annotations.len(), 1);
    let w = &a.annotations[0];
    assert_eq!((w.function.as_str(), w.file.as_str(), w.def_line), ("work", "/srv/app/hot.py", Some(3)));
    assert_eq!((w.self_count, w.total_count), (70, 100));
    assert_eq!(w.source, SourceOrigin::Recording { sha256: HOT_SHA.into() });
    assert_eq!(
        w.lines,
        vec![
            line(3, 0, 0, "def work(n):"),
            line(4, 0, 0, "    total = 0"),
            line(5, 10, 10, "    for i in range(n):"),
            line(6, 55, 55, "        total += i * i"),
            line(7, 5, 40, "        total ^= helper(i)"),
            line(8, 0, 0, "    return total"),
        ]
    );
    assert_eq!(
        text(&a, &options(Target::Top)),
        "work in /srv/app/hot.py, def at line 3
  work: 70 samples self (66.0%), 100 samples total (94.3%) of 106 CPU samples in the selection
  source: the recording's copy (sha256 66513e010772b85e31b01e9d046fc490d80c048d96ef4c27b2a07dcbc84e0201)
     self    total  line  source
                       3  def work(n):
                       4      total = 0
     9.4%     9.4%     5      for i in range(n):
    51.9%    51.9%     6          total += i * i
     4.7%    37.7%     7          total ^= helper(i)
                       8      return total
"
    );
}

/// Without a name: the top functions by self time, `--top` of them, said so; `main` (no self time) is not one.
#[test]
fn top_functions_by_self_time() {
    let a = run(Target::Top);
    let got: Vec<(&str, &str, u64, u64)> =
        a.annotations.iter().map(|x| (x.function.as_str(), x.file.as_str(), x.self_count, x.total_count)).collect();
    assert_eq!(
        got,
        vec![
            ("work", "/srv/app/hot.py", 70, 100),
            ("helper", "/srv/app/hot.py", 30, 30),
            ("helper", "/srv/app/lib.py", 4, 4)
        ]
    );
    assert_eq!(
        a.notes,
        vec!["the 3 functions with the most self time, of 4 with some (--top N for more, or name one)"]
    );
    let mut o = options(Target::Top);
    o.top = 10;
    let all = annotate::annotate(&source_profile(), &o).expect("annotates");
    assert_eq!(all.annotations.len(), 4);
    assert!(all.notes.is_empty());
    o.top = 1;
    let one = annotate::annotate(&source_profile(), &o).expect("annotates");
    assert_eq!(one.notes, vec!["the function with the most self time, of 4 with some (--top N for more, or name one)"]);
    // `main`: a caller only; its lines' totals, no self.
    let main = run(Target::Name("main".into()));
    let m = &main.annotations[0];
    assert_eq!((m.self_count, m.total_count, m.def_line), (0, 105, Some(14)));
    let counts: Vec<(u32, u64, u64)> = m.lines.iter().map(|l| (l.line, l.self_count, l.total_count)).collect();
    assert_eq!(counts, vec![(14, 0, 0), (15, 0, 1), (16, 0, 100), (17, 0, 4)]);
}

/// A name two functions answer to: both, by total share, said so; the one without its source (the recorder could
/// not read it) by line number only, saying why.
#[test]
fn a_name_matching_several_functions_annotates_each() {
    let a = run(Target::Name("helper".into()));
    assert_eq!(a.notes, vec!["2 functions match 'helper': each by total share"]);
    let files: Vec<&str> = a.annotations.iter().map(|x| x.file.as_str()).collect();
    assert_eq!(files, vec!["/srv/app/hot.py", "/srv/app/lib.py"]);
    let hot = &a.annotations[0];
    assert_eq!(hot.def_line, Some(10));
    assert_eq!(
        hot.lines.iter().map(|l| (l.line, l.self_count, l.total_count)).collect::<Vec<_>>(),
        vec![(10, 0, 0), (11, 20, 20), (12, 10, 10)]
    );
    let lib = &a.annotations[1];
    assert_eq!(lib.lines, vec![Line { line: 5, self_count: 4, total_count: 4, text: None }]);
    assert_eq!(lib.def_line, None);
    match &lib.source {
        SourceOrigin::Unavailable { why } => assert!(
            why.starts_with("not in the recording (the recorder could not read it: not readable by the process"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    let mut o = options(Target::Name("helper".into()));
    o.top = 1;
    let one = annotate::annotate(&source_profile(), &o).expect("annotates");
    assert_eq!(one.annotations.len(), 1);
    assert_eq!(one.notes, vec!["2 functions match 'helper': the first 1 by total share (--top 2 for all)"]);
}

/// FILE:LINE: the innermost sampled function whose lines hold it (by the path's end); a line no function spans and a
/// file with none are one-line errors that say what to try.
#[test]
fn file_and_line_pick_the_function() {
    for (file, line, function) in [
        ("hot.py", 7, "work"),
        ("app/hot.py", 3, "work"),
        ("/srv/app/hot.py", 12, "helper"),
        ("hot.py", 20, "<module>"),
    ] {
        let a = run(Target::Line { file: file.into(), line });
        assert_eq!(a.annotations.len(), 1);
        assert_eq!(a.annotations[0].function, function, "{file}:{line}");
    }
    assert_eq!(Target::parse(Some("hot.py:7")), Target::Line { file: "hot.py".into(), line: 7 });
    assert_eq!(Target::parse(Some("Worker.run")), Target::Name("Worker.run".into()));
    assert_eq!(Target::parse(None), Target::Top);
    let err = |t| annotate::annotate(&source_profile(), &options(t)).expect_err("no match").to_string();
    let e = err(Target::Line { file: "lib.py".into(), line: 9 });
    assert!(e.starts_with("no sampled function of lib.py spans line 9"), "{e}");
    // Line 9, blank between two functions, is the module's.
    assert_eq!(run(Target::Line { file: "hot.py".into(), line: 9 }).annotations[0].function, "<module>");
    let e = err(Target::Line { file: "ot.py".into(), line: 5 });
    assert!(e.starts_with("no sampled function is in a file called ot.py"), "{e}");
    let e = err(Target::Name("nope".into()));
    assert!(e.starts_with("no sampled function is called 'nope'") && !e.contains('\n'), "{e}");
}

/// Hostile names and source text: escaped in the terminal as the text report escapes them, HTML-escaped with
/// control characters made visible in HTML; no raw escape character reaches either.
#[test]
fn names_and_source_are_escaped() {
    let module = run(Target::Name("<module>".into()));
    let m = &module.annotations[0];
    assert_eq!((m.lines.first().map(|l| l.line), m.lines.last().map(|l| l.line)), (Some(1), Some(20)));
    let out = text(&module, &options(Target::Top));
    assert!(out.contains(r#"BANNER = "\x1b[2J""#), "{out}");
    assert!(!out.contains('\x1b'));
    let evil = run(Target::Name("evil".into()));
    let out = text(&evil, &options(Target::Top));
    assert!(out.starts_with("evil in /srv/app/evil\\x1b[31m.py\n"), "{out}");
    assert!(!out.contains('\x1b'));
    let mut o = options(Target::Top);
    o.html = true;
    let html = text(&module, &o);
    assert!(!html.contains('\x1b'));
    assert!(html.contains("&lt;module&gt; in /srv/app/hot.py"), "{html}");
    assert!(html.contains(r#"BANNER = &quot;\x1b[2J&quot;"#));
    assert!(!html.contains("http:") && !html.contains("https:") && !html.contains("<script"), "self-contained");
    // Colour: only with the option, only around the shares.
    let mut o = options(Target::Top);
    o.color = true;
    let coloured = text(&run(Target::Name("work".into())), &o);
    assert!(coloured.contains("\x1b[1;31m  51.9%\x1b[0m"), "{coloured:?}");
    assert!(!text(&run(Target::Name("work".into())), &options(Target::Top)).contains('\x1b'));
}

/// The HTML page: one row per line with its shares as data, the hottest row the most coloured.
#[test]
fn html_rows_carry_the_shares() {
    let mut o = options(Target::Name("work".into()));
    o.html = true;
    let html = text(&run(Target::Name("work".into())), &o);
    assert!(html.starts_with("<!DOCTYPE html>"));
    for (n, s, t) in [(5, "9.4", "9.4"), (6, "51.9", "51.9"), (7, "4.7", "37.7"), (8, "0.0", "0.0")] {
        let row = format!("<tr id=\"f0-l{n}\" data-line=\"{n}\" data-self=\"{s}\" data-total=\"{t}\"");
        assert!(html.contains(&row), "{row}\n{html}");
    }
    assert!(html.contains("rgba(255, 80, 0, 0.630)"), "hottest line: {html}");
}

/// The filters of `pyperf report` apply, and the command line's arguments reach them: no sample of pid 1.
#[test]
fn filters_and_arguments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("source.pyp");
    std::fs::write(&path, synth::recording("source")).expect("write");
    let p = path.display().to_string();
    let cli = Cli::try_parse_from(["x", "-i", &p, "--pid", "1", "work"]).expect("parses");
    let profile = cli.annotate.report_args().load().expect("loads");
    let e = annotate::annotate(&profile, &cli.annotate.options(false).unwrap()).expect_err("nothing").to_string();
    assert!(e.starts_with("no samples to annotate"), "{e}");
    let cli = Cli::try_parse_from(["x", "-i", &p, "--status", "complete", "--top", "1", "hot.py:6"]).expect("parses");
    let profile = cli.annotate.report_args().load().expect("loads");
    let a = annotate::annotate(&profile, &cli.annotate.options(false).unwrap()).expect("annotates");
    assert_eq!(a.selection, 105, "the idle sample left out");
    assert_eq!(a.annotations[0].function, "work");
    let e = Cli::try_parse_from(["x", "--color", "sometimes"]).expect("parses").annotate.options(true).unwrap_err();
    assert_eq!(e.to_string(), "unknown colour choice 'sometimes'; valid: auto, always, never");
}

/// A one-function recording of `file` (`C.f`: 3 samples at line 2, 1 at line 3), with its source stored or not.
fn recording_of(file: &str, stored: Option<&[u8]>) -> Vec<u8> {
    recording_with(file, stored, &[(3, 2), (1, 3)])
}

/// A one-function recording of `file` (`C.f`) with (samples, line) as given, with its source stored or not.
fn recording_with(file: &str, stored: Option<&[u8]>, lines: &[(u64, u32)]) -> Vec<u8> {
    let header = Header {
        pyperf_version: "0.8.0".into(),
        hostname: "h".into(),
        kernel_release: "6".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 0,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(100),
        command_line: vec![],
        workload: vec![],
    };
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    w.add_process(&Process {
        pid: 5,
        command: vec!["python3".into()],
        python_version: "3.13.1".into(),
        interpreter_path: "/usr/bin/python3".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 5,
        cgroup: String::new(),
    })
    .expect("process");
    if let Some(content) = stored {
        w.add_sources(&[SourceFile::stored(file, content.to_vec())]).expect("source");
    }
    for &(n, line) in lines {
        let s = w.intern_symbol(&Symbol { scope: "C".into(), name: "f".into(), file: file.into(), line, flags: 0 });
        let leaf = w.intern_stack(&[s]);
        for k in 0..n {
            w.push_sample(&SampleRecord {
                time_ns: k,
                cpu: 0,
                pid: 5,
                tid: 5,
                comm: "python3",
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
    }
    w.finish(&Stats { samples: 4, ..Default::default() }).expect("finish")
}

/// Where the source comes from: the recording's copy (a local file that differs is warned about, the copy shown);
/// else the local file; else line numbers only, saying why.
#[test]
fn sources_from_the_recording_or_the_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("m.py");
    let path = file.display().to_string();
    let ran = b"class C:\n    def f(self):\n        return 1\n";
    let annotate_it = |bytes: Vec<u8>, local: bool| {
        let profile = Profile::load(&bytes[..], &LoadOptions::default()).expect("loads");
        let mut o = Options::default();
        o.target = Target::Name("C.f".into());
        o.local = local;
        annotate::annotate(&profile, &o).expect("annotates")
    };
    let texts = |a: &Annotated| a.annotations[0].lines.iter().map(|l| l.text.clone()).collect::<Vec<_>>();
    let some = |s: &[&str]| s.iter().map(|t| Some(t.to_string())).collect::<Vec<_>>();

    // Recorded; no local file.
    let a = annotate_it(recording_of(&path, Some(ran)), true);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    assert_eq!(a.annotations[0].def_line, Some(2));
    assert_eq!(texts(&a), some(&["    def f(self):", "        return 1"]));
    // Recorded; the local file the same: no warning.
    std::fs::write(&file, ran).expect("write");
    assert!(annotate_it(recording_of(&path, Some(ran)), true).warnings.is_empty());
    // Recorded; the local file changed: the recording's copy, and a warning saying which is shown.
    std::fs::write(&file, b"class C:\n    def f(self):\n        return 2  # changed\n").expect("write");
    let a = annotate_it(recording_of(&path, Some(ran)), true);
    assert_eq!(texts(&a), some(&["    def f(self):", "        return 1"]));
    assert_eq!(a.warnings.len(), 1);
    assert!(
        a.warnings[0].contains("differs from the recording's copy")
            && a.warnings[0].contains("showing the recording's copy"),
        "{:?}",
        a.warnings
    );
    // Not recorded: the local file.
    let a = annotate_it(recording_of(&path, None), true);
    assert_eq!(texts(&a), some(&["    def f(self):", "        return 2  # changed"]));
    assert_eq!(a.annotations[0].source, SourceOrigin::Local { why_not_recorded: "recorded without --source".into() });
    // Neither: numbers only.
    let a = annotate_it(recording_of(&path, None), false);
    assert_eq!(texts(&a), vec![None, None]);
    assert_eq!(a.annotations[0].lines.iter().map(|l| (l.line, l.self_count)).collect::<Vec<_>>(), vec![(2, 3), (3, 1)]);
    assert!(
        matches!(&a.annotations[0].source, SourceOrigin::Unavailable { why } if why.contains("recorded without --source"))
    );
    // A local path that is no regular file is not read (a FIFO would block).
    let a = annotate_it(recording_of(&dir.path().display().to_string(), None), true);
    assert!(
        matches!(&a.annotations[0].source, SourceOrigin::Unavailable { why } if why.ends_with("not a regular file"))
    );
}

/// A crafted recording's lines billions apart, and line 0 (unknown): the sampled lines are shown, with a gap marked,
/// not billions of rows; the unknown line's samples are not lost.
#[test]
fn far_apart_lines_show_only_the_sampled_ones() {
    let bytes = recording_with("/nowhere/m.py", None, &[(2, 0), (3, 5), (1, 4_000_000_000)]);
    let profile = Profile::load(&bytes[..], &LoadOptions::default()).expect("loads");
    let a = annotate::annotate(&profile, &options(Target::Name("f".into()))).expect("annotates");
    let got: Vec<(u32, u64)> = a.annotations[0].lines.iter().map(|l| (l.line, l.self_count)).collect();
    assert_eq!(got, vec![(0, 2), (5, 3), (4_000_000_000, 1)]);
    let out = text(&a, &options(Target::Top));
    assert_eq!(out.lines().filter(|l| l.trim() == "...").count(), 2, "{out}");
    // The same with a source whose sampled lines are blank up to its end: found quickly, not by counting to 4e9.
    let src = b"def f():\n\n\n";
    let bytes = recording_with("/nowhere/m.py", Some(src), &[(1, 2), (1, 4_000_000_000)]);
    let profile = Profile::load(&bytes[..], &LoadOptions::default()).expect("loads");
    let started = std::time::Instant::now();
    let a = annotate::annotate(&profile, &options(Target::Name("f".into()))).expect("annotates");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(a.annotations[0].lines.iter().map(|l| l.line).collect::<Vec<_>>(), vec![2, 4_000_000_000]);
    // Close lines: the whole extent between them.
    let bytes = recording_with("/nowhere/m.py", None, &[(1, 10), (1, 14)]);
    let profile = Profile::load(&bytes[..], &LoadOptions::default()).expect("loads");
    let a = annotate::annotate(&profile, &options(Target::Name("C.f".into()))).expect("annotates");
    assert_eq!(a.annotations[0].lines.iter().map(|l| l.line).collect::<Vec<_>>(), vec![10, 11, 12, 13, 14]);
}
