//! Golden tests: every output format of every synthetic recording, compared with testdata/expected/.
//!
//! `PYPERF_BLESS=1 cargo test -p pyperf-report --test golden` rewrites the expected files (and the synthetic
//! recordings) from the current code; review the diff before committing. Without it a mismatch fails with the
//! first differing lines.

#[path = "support/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use pyperf_report::{write_report, Format, ReportArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    report: ReportArgs,
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// Blessing rewrites the recordings the other tests read: one at a time.
static FILES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    FILES.lock().unwrap_or_else(|e| e.into_inner())
}

fn blessing() -> bool {
    std::env::var_os("PYPERF_BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Real recordings made by `pyperf record` (testdata/recordings/NAME.pyp). Unlike the synthetic ones they are never
/// regenerated: they are the files old and new readers must keep reading; blessing rewrites only their outputs.
const REAL: &[&str] = &["split-3.11", "traced-3.12"];

/// Where a recording lives: testdata/recordings for real ones, testdata/synthetic for generated ones.
fn recording_path(name: &str) -> PathBuf {
    let dir = if REAL.contains(&name) { "recordings" } else { "synthetic" };
    testdata().join(dir).join(format!("{name}.pyp"))
}

/// Run on every recording besides each output format of the report crate (`Format::ALL`, expected file
/// `RECORDING.SUFFIX`): (suffix of the expected file, arguments).
const VARIANTS: &[(&str, &[&str])] = &[
    ("folded-nolines", &["--folded", "--no-lines"]),
    ("folded-pid-tid-root", &["--folded", "--pid-root", "--tid-root"]),
];

/// Filtered and other extra cases: (recording, suffix, arguments).
const EXTRA: &[(&str, &str, &[&str])] = &[
    ("mixed", "pid1000-gil-held.text", &["--pid", "1000", "--gil", "held,held-by-current"]),
    // One trace of an OpenTelemetry-instrumented service (format 1.10).
    ("traced-3.12", "trace.folded", &["--folded", "--trace-id", "1234d9324937bf65fda137f82d14e805"]),
    ("traced-3.12", "trace.text", &["--trace-id", "1234d9324937bf65fda137f82d14e805"]),
    ("mixed", "pid1000-gil-held.folded", &["--folded", "--pid", "1000", "--gil", "held", "--gil", "held-by-current"]),
    ("mixed", "tid1001-1002.speedscope.json", &["--speedscope", "--tid", "1001,1002"]),
    ("mixed", "idle-released.folded-pid-root", &["--folded", "--pid-root", "--status", "idle", "--gil", "released"]),
    ("mixed", "nolines-pid-root.svg", &["--flamegraph", "--no-lines", "--pid-root", "--title", "pyperf: mixed"]),
    ("killed", "top3.text", &["--top", "3"]),
    ("offcpu", "off-cpu.gil-waiting.folded", &["--folded", "--mode", "off-cpu", "--gil", "waiting"]),
    ("offcpu", "wall.tid501.text", &["--mode", "wall", "--tid", "501"]),
    ("offcpu", "wall.nolines-pid-root.svg", &["--flamegraph", "--mode", "wall", "--no-lines", "--pid-root"]),
    ("native", "no-native.folded", &["--folded", "--no-native"]),
    ("native", "no-kernel.folded", &["--folded", "--no-kernel"]),
    ("native", "show-glue.folded", &["--folded", "--show-glue"]),
    ("native", "python-only.text", &["--no-native", "--no-kernel"]),
    ("native", "show-glue.text", &["--show-glue", "--top", "8"]),
    ("native", "no-native.speedscope.json", &["--speedscope", "--no-native"]),
    ("native", "show-glue.svg", &["--flamegraph", "--show-glue"]),
    ("native", "off-cpu.folded", &["--folded", "--mode", "off-cpu"]),
    ("native", "off-cpu.no-native.folded", &["--folded", "--mode", "off-cpu", "--no-native"]),
    ("native", "wall.no-kernel.speedscope.json", &["--speedscope", "--mode", "wall", "--no-kernel"]),
    ("tasks", "exact.folded", &["--folded", "--exact-task-names"]),
    ("tasks", "exact.text", &["--exact-task-names"]),
    ("tasks", "no-async.folded", &["--folded", "--no-async"]),
    ("tasks", "no-async.text", &["--no-async"]),
    ("tasks", "wall.exact.folded", &["--folded", "--mode", "wall", "--exact-task-names"]),
    ("tasks", "wall.no-async.folded", &["--folded", "--mode", "wall", "--no-async"]),
    ("gc", "hide.folded", &["--folded", "--gc", "hide"]),
    ("gc", "only.folded", &["--folded", "--gc", "only"]),
    ("gc", "drop.folded", &["--folded", "--gc", "drop"]),
    ("gc", "only.text", &["--gc", "only"]),
    ("gc", "no-native.folded", &["--folded", "--no-native", "--no-kernel"]),
    ("gc", "show-glue.folded", &["--folded", "--show-glue"]),
    ("gc", "wall.drop.folded", &["--folded", "--mode", "wall", "--gc", "drop"]),
    ("gc", "off-cpu.only.folded", &["--folded", "--mode", "off-cpu", "--gc", "only"]),
    ("interp", "interp-root.folded", &["--folded", "--interp-root"]),
    ("interp", "interp-root.svg", &["--flamegraph", "--interp-root", "--title", "pyperf: interp"]),
    ("interp", "pid-tid-interp-root.folded", &["--folded", "--pid-root", "--tid-root", "--interp-root"]),
    ("interp", "wall.interp-root.folded", &["--folded", "--mode", "wall", "--interp-root"]),
];

/// Recordings with off-CPU intervals (`pyperf record --off-cpu`), also reported in every output format and variant
/// with `--mode off-cpu` and `--mode wall` (expected file `RECORDING.MODE.SUFFIX`).
const OFF_CPU: &[&str] = &["offcpu", "tasks", "gc", "interp", "stolen"];

/// The modes besides the default (cpu) every [`OFF_CPU`] recording is reported in.
const TIME_MODES: &[&str] = &["off-cpu", "wall"];

fn cases() -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for rec in synth::RECORDINGS.iter().chain(REAL) {
        for format in Format::ALL {
            out.push((rec.to_string(), format.suffix().to_string(), vec![format.flag().to_string()]));
        }
        for (suffix, args) in VARIANTS {
            out.push((rec.to_string(), suffix.to_string(), args.iter().map(|s| s.to_string()).collect()));
        }
    }
    for rec in OFF_CPU {
        for mode in TIME_MODES {
            let with_mode = |args: &[&str]| args.iter().copied().chain(["--mode", mode]).map(str::to_string).collect();
            for format in Format::ALL {
                out.push((rec.to_string(), format!("{mode}.{}", format.suffix()), with_mode(&[format.flag()])));
            }
            for (suffix, args) in VARIANTS {
                out.push((rec.to_string(), format!("{mode}.{suffix}"), with_mode(args)));
            }
        }
    }
    for (rec, suffix, args) in EXTRA {
        out.push((rec.to_string(), suffix.to_string(), args.iter().map(|s| s.to_string()).collect()));
    }
    out
}

/// The report `pyperf-report -i <recording> <args>` writes to standard output.
fn render(recording: &Path, args: &[String]) -> Vec<u8> {
    let mut argv = vec!["pyperf-report".to_string(), "-i".to_string(), recording.display().to_string()];
    argv.extend(args.iter().cloned());
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let profile = cli.report.load().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let mut out = Vec::new();
    write_report(&cli.report, &profile, &mut out).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    out
}

/// The first differing lines of two texts, as a short readable diff.
#[allow(clippy::needless_range_loop)]
fn first_difference(expected: &[u8], actual: &[u8]) -> String {
    let e = String::from_utf8_lossy(expected);
    let a = String::from_utf8_lossy(actual);
    let el: Vec<&str> = e.split('\n').collect();
    let al: Vec<&str> = a.split('\n').collect();
    let first = el.iter().zip(&al).position(|(x, y)| x != y).unwrap_or(el.len().min(al.len()));
    let mut out = format!("first difference at line {} (expected {} lines, got {}):\n", first + 1, el.len(), al.len());
    let clip = |s: &str| {
        if s.chars().count() > 200 {
            format!("{}...", s.chars().take(200).collect::<String>())
        } else {
            s.to_string()
        }
    };
    for i in first.saturating_sub(2)..first {
        out.push_str(&format!("   {:>5}  {}\n", i + 1, clip(el[i])));
    }
    for i in first..(first + 5).min(el.len()) {
        out.push_str(&format!("  -{:>5}  {}\n", i + 1, clip(el[i])));
    }
    for i in first..(first + 5).min(al.len()) {
        out.push_str(&format!("  +{:>5}  {}\n", i + 1, clip(al[i])));
    }
    out
}

#[test]
fn synthetic_recordings_match_the_generator() {
    let _files = lock();
    let dir = testdata().join("synthetic");
    let mut failures = Vec::new();
    for name in synth::RECORDINGS {
        let path = dir.join(format!("{name}.pyp"));
        let now = synth::recording(name);
        if blessing() {
            std::fs::create_dir_all(&dir).expect("create testdata/synthetic");
            std::fs::write(&path, &now).expect("write synthetic recording");
            continue;
        }
        match std::fs::read(&path) {
            Ok(committed) if committed == now => {}
            Ok(committed) => {
                let at = committed.iter().zip(&now).position(|(a, b)| a != b).unwrap_or(committed.len().min(now.len()));
                failures.push(format!(
                    "testdata/synthetic/{name}.pyp differs from what the generator makes now (first at byte {at}; \
                     {} bytes committed, {} generated)",
                    committed.len(),
                    now.len()
                ));
            }
            Err(e) => failures.push(format!("testdata/synthetic/{name}.pyp: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nIf the change is intended: PYPERF_BLESS=1 cargo test -p pyperf-report --test golden",
        failures.join("\n")
    );
}

#[test]
fn outputs_match_expected() {
    let _files = lock();
    let expected_dir = testdata().join("expected");
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    for (rec, suffix, args) in cases() {
        let recording = recording_path(&rec);
        let actual = render(&recording, &args);
        let name = format!("{rec}.{suffix}");
        let path = expected_dir.join(&name);
        seen.push(name.clone());
        if blessing() {
            std::fs::create_dir_all(&expected_dir).expect("create testdata/expected");
            std::fs::write(&path, &actual).expect("write expected output");
            continue;
        }
        match std::fs::read(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "testdata/expected/{name} (pyperf-report -i {} {}): {}",
                recording.display(),
                args.join(" "),
                first_difference(&expected, &actual)
            )),
            Err(e) => failures.push(format!("testdata/expected/{name}: {e}")),
        }
    }
    // Expected files no case produces any more are stale.
    if let Ok(entries) = std::fs::read_dir(&expected_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !seen.contains(&name) {
                failures.push(format!("testdata/expected/{name}: no test case produces it (stale?)"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} outputs differ:\n{}\nIf the change is intended: PYPERF_BLESS=1 cargo test -p pyperf-report --test golden",
        failures.len(),
        seen.len(),
        failures.join("\n")
    );
}

fn expected_files(pattern: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata().join("expected"))
        .expect("testdata/expected")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pattern))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no expected files to check");
    files
}

/// speedscope's own JSON schema (vendored from the speedscope npm package, MIT licence) validates every
/// expected speedscope file. Needs python3 with the `jsonschema` package: fails, never skips, without them.
#[test]
fn speedscope_files_follow_the_schema() {
    let _files = lock();
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/speedscope-file-format-schema.json");
    let files = expected_files(|n| n.ends_with(".speedscope.json"));
    let script = r#"
import json, sys
try:
    import jsonschema
except ImportError:
    sys.exit("python3 has no jsonschema module: install it (apt-get install python3-jsonschema, or scripts/setup) to validate speedscope output")
schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft7Validator(schema)
bad = 0
for path in sys.argv[2:]:
    for error in validator.iter_errors(json.load(open(path, encoding="utf-8"))):
        bad += 1
        print(f"{path}: {error.json_path}: {error.message}")
sys.exit(1 if bad else 0)
"#;
    let out =
        // Debian's interpreter with Debian's python3-jsonschema, both installed by scripts/setup.
        Command::new(std::env::var_os("PYPERF_SCHEMA_PYTHON").unwrap_or_else(|| "/usr/bin/python3".into()))
            .arg("-c").arg(script).arg(&schema).args(&files).output().unwrap_or_else(|e| {
            panic!("cannot run python3 (needed with jsonschema to validate speedscope output): {e}")
        });
    assert!(
        out.status.success(),
        "speedscope schema validation failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // What the schema cannot say.
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
        let frames = doc["shared"]["frames"].as_array().expect("frames").len();
        for p in doc["profiles"].as_array().expect("profiles") {
            let samples = p["samples"].as_array().expect("samples");
            let weights = p["weights"].as_array().expect("weights");
            assert_eq!(samples.len(), weights.len(), "{}: samples and weights differ in length", file.display());
            assert!(!samples.is_empty(), "{}: empty profile", file.display());
            for s in samples {
                for f in s.as_array().expect("stack") {
                    assert!((f.as_u64().expect("index") as usize) < frames, "{}: frame out of range", file.display());
                }
            }
            let sum: u64 = weights.iter().map(|w| w.as_u64().expect("non-negative integer weight")).sum();
            let (start, end) = (p["startValue"].as_u64().expect("start"), p["endValue"].as_u64().expect("end"));
            assert_eq!(end - start, sum, "{}: weights do not add up to the profile's span", file.display());
        }
    }
}

/// Sum of the counts of folded lines, parsed as flamegraph.pl and inferno do (count after the last space).
fn folded_total(text: &str) -> u64 {
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("a space before the count");
            assert!(!stack.is_empty() && !stack.contains('\n'));
            count.parse::<u64>().expect("count")
        })
        .sum()
}

/// The `all (N samples, 100%)` of a flame graph.
fn flamegraph_total(svg: &str) -> u64 {
    let at = svg.find("<title>all (").expect("root frame") + "<title>all (".len();
    let digits: String =
        svg[at..].chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
    digits.parse().expect("total")
}

/// inferno (the library behind `inferno-flamegraph`) reads every expected folded file: same number of stacks and
/// samples as written (a line it could not parse, or a frame taken for a differential count, would change them).
#[test]
fn inferno_reads_folded_output() {
    let _files = lock();
    for file in expected_files(|n| n.contains(".folded")) {
        let text = std::fs::read_to_string(&file).expect("read");
        let total = folded_total(&text);
        let mut options = inferno::flamegraph::Options::default();
        options.min_width = 0.0;
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg)
            .unwrap_or_else(|e| panic!("inferno rejects {}: {e}", file.display()));
        let svg = String::from_utf8(svg).expect("utf-8 svg");
        assert_eq!(flamegraph_total(&svg), total, "{}: inferno counts other totals", file.display());
        // One <g> per frame drawn; at least one per line (its leaf).
        assert!(svg.matches("<g>").count() >= text.lines().count(), "{}", file.display());
    }
}

/// flamegraph.pl (Brendan Gregg's FlameGraph) reads every expected folded file. Runs the real script when
/// `flamegraph.pl` is on PATH or FLAMEGRAPH_PL names it (it is not packaged for Debian). Otherwise it runs, with
/// perl, flamegraph.pl's own input parsing (the regex and split it uses, quoted below) and says so.
#[test]
fn flamegraph_pl_reads_folded_output() {
    let _files = lock();
    let files = expected_files(|n| n.contains(".folded"));
    let tool = std::env::var("FLAMEGRAPH_PL").unwrap_or_else(|_| "flamegraph.pl".to_string());
    if Command::new(&tool).arg("--help").output().is_ok() {
        for file in &files {
            let text = std::fs::read_to_string(file).expect("read");
            let out = Command::new(&tool).arg(file).output().expect("run flamegraph.pl");
            assert!(out.status.success(), "flamegraph.pl fails on {}", file.display());
            let svg = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                flamegraph_total(&svg),
                folded_total(&text),
                "{}: flamegraph.pl counts other totals",
                file.display()
            );
        }
        return;
    }
    eprintln!("flamegraph.pl not found (set FLAMEGRAPH_PL or put it on PATH): checking with its parsing code in perl");
    // From flamegraph.pl: `my ($stack, $samples) = (/^(.*)\s+?(\d+(?:\.\d*)?)$/);` then, for differential
    // input, the same match again on $stack; frames are `split ";", $stack`.
    let script = r#"
my ($lines, $ignored, $total, $frames, $diff) = (0, 0, 0, 0, 0);
while (<>) {
    chomp; $lines++;
    my ($stack, $samples) = (/^(.*)\s+?(\d+(?:\.\d*)?)$/);
    unless (defined $samples) { $ignored++; next; }
    $diff++ if $stack =~ /^(.*)\s+?(\d+(?:\.\d*)?)$/;
    $total += $samples;
    $frames += scalar(split ";", $stack);
}
print "$lines $ignored $total $frames $diff\n";
"#;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let out = match Command::new("perl").arg("-e").arg(script).arg(file).output() {
            Ok(out) => out,
            Err(e) => {
                eprintln!("perl not found ({e}): flamegraph.pl parsing not checked");
                return;
            }
        };
        assert!(out.status.success(), "perl: {}", String::from_utf8_lossy(&out.stderr));
        let got: Vec<u64> =
            String::from_utf8_lossy(&out.stdout).split_whitespace().map(|n| n.parse().expect("number")).collect();
        let frames: u64 = text.lines().map(|l| l.rsplit_once(' ').expect("count").0.split(';').count() as u64).sum();
        assert_eq!(
            got,
            vec![text.lines().count() as u64, 0, folded_total(&text), frames, 0],
            "{}: flamegraph.pl would read [lines, ignored, samples, frames, differential lines] differently",
            file.display()
        );
    }
}

#[test]
fn flame_graphs_have_the_command_as_title() {
    let _files = lock();
    let svg = std::fs::read_to_string(testdata().join("expected/mixed.svg")).expect("mixed.svg");
    assert!(svg.contains(">python3.11 app.py --jobs 4</text>"), "title");
    // No workload, a process command: the process's.
    let svg = std::fs::read_to_string(testdata().join("expected/killed.svg")).expect("killed.svg");
    assert!(svg.contains(">/usr/bin/python3.12 -u serve.py --port 8080</text>"), "title");
    // Neither: pyperf's command line.
    let svg = std::fs::read_to_string(testdata().join("expected/newer-minor.svg")).expect("newer-minor.svg");
    assert!(svg.contains(">pyperf record -a -e cycles -c 100000</text>"), "title");
}

/// The synthetic recordings as formats 1.0 to 1.4 wrote them (testdata/recordings/NAME-1.0.pyp to NAME-1.4.pyp, kept,
/// never regenerated) report exactly what their current regenerations do, in every format whose output does not
/// name the format version or byte offsets: this reader loses nothing of an older file (1.0 process records lack the
/// 1.1 fields, which read as unknown; 1.0 and 1.1 have no 1.2 thread names; none before 1.3 has off-CPU intervals,
/// none before 1.4 native frames, none before 1.5 task stacks). The off-CPU recording as 1.3 and 1.4 wrote it reports
/// as today's in every mode, the native one of 1.4 as today's.
#[test]
fn older_format_recordings_report_as_before() {
    let _files = lock();
    let old = [0u8, 1, 2, 3, 4].into_iter().flat_map(|m| ["mixed", "killed", "cutoff"].map(move |n| (m, n)));
    for (minor, name) in old.chain([(3, "offcpu"), (4, "offcpu"), (4, "native")]) {
        let old = testdata().join("recordings").join(format!("{name}-1.{minor}.pyp"));
        let bytes = std::fs::read(&old).unwrap_or_else(|e| panic!("{}: {e}", old.display()));
        assert_eq!(&bytes[8..12], &[1, 0, minor, 0], "{name}: a format 1.{minor} file");
        let mut cases = vec![
            ("folded", vec!["--folded"]),
            ("folded-pid-tid-root", vec!["--folded", "--pid-root", "--tid-root"]),
            ("speedscope.json", vec!["--speedscope"]),
        ];
        if name == "native" {
            cases.push(("off-cpu.folded", vec!["--folded", "--mode", "off-cpu"]));
        }
        if name == "offcpu" {
            cases.extend([
                ("off-cpu.folded", vec!["--folded", "--mode", "off-cpu"]),
                ("wall.speedscope.json", vec!["--speedscope", "--mode", "wall"]),
                ("wall.svg", vec!["--flamegraph", "--mode", "wall"]),
            ]);
        }
        for (suffix, args) in cases {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let expected = std::fs::read(testdata().join("expected").join(format!("{name}.{suffix}"))).unwrap();
            let actual = render(&old, &args);
            assert!(expected == actual, "{name}-1.{minor} {suffix}: {}", first_difference(&expected, &actual));
        }
    }
}

/// `--mode cpu` is the default: the same bytes for every recording and format. And the off-CPU views of `offcpu`
/// agree with each other: the folded microseconds, the flame graph's root and the text report's totals are the same
/// time, and the speedscope profiles add up to it (the hand-checked numbers are in support/synth.rs).
#[test]
fn modes_agree_across_formats() {
    let _files = lock();
    for rec in synth::RECORDINGS.iter().chain(REAL) {
        let recording = recording_path(rec);
        for format in Format::ALL {
            let flag = format.flag().to_string();
            let default = render(&recording, std::slice::from_ref(&flag));
            let cpu = render(&recording, &[flag.clone(), "--mode".into(), "cpu".into()]);
            assert!(default == cpu, "{rec} {flag}: --mode cpu differs from the default");
        }
    }
    let recording = recording_path("offcpu");
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // (mode, total in µs: the hand-computed sums of support/synth.rs, rounded per folded line).
    for (mode, micros) in [("off-cpu", 2_384_002), ("wall", 2_984_002)] {
        let folded = String::from_utf8(render(&recording, &args(&["--folded", "--mode", mode]))).unwrap();
        assert_eq!(folded_total(&folded), micros, "{mode}: folded total");
        // Every off-CPU line ends with its reason frame; in off-cpu mode every line is one.
        for line in folded.lines() {
            let stack = line.rsplit_once(' ').unwrap().0;
            let leaf = stack.rsplit(';').next().unwrap();
            assert!(mode == "wall" || leaf.starts_with("[off-CPU: "), "{mode}: {line}");
            assert!(!stack.contains("[off-CPU: ") || leaf.starts_with("[off-CPU: "), "{mode}: {line}");
        }
        let svg = String::from_utf8(render(&recording, &args(&["--flamegraph", "--mode", mode]))).unwrap();
        let title = if mode == "wall" { "Wall-clock time" } else { "Off-CPU time" };
        let ms = format!("{},{:03}.{:03} ms", micros / 1_000_000, micros / 1000 % 1000, micros % 1000);
        assert!(svg.contains(&format!(">{title}: {ms}</text>")), "{mode}: flame graph subtitle");
        assert!(svg.contains(&format!("<title>all ({ms}, 100.00%)</title>")), "{mode}: flame graph root");
        // The text report's threads together: their wall-clock time in both modes.
        let text = String::from_utf8(render(&recording, &args(&["--mode", mode]))).unwrap();
        let all = text.split("\n  all threads").nth(1).expect("all threads");
        let wall = all.lines().nth(1).expect("wall line");
        assert!(wall.trim_start().starts_with("wall") && wall.contains(" 2984.002 ms "), "{mode}: {wall}");
        let json: serde_json::Value =
            serde_json::from_slice(&render(&recording, &args(&["--speedscope", "--mode", mode]))).unwrap();
        let drawn: u64 = json["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["samples"].as_array().unwrap().iter().zip(p["weights"].as_array().unwrap()))
            .filter(|(s, _)| !s.as_array().unwrap().is_empty())
            .map(|(_, w)| w.as_u64().unwrap())
            .sum();
        // speedscope keeps nanoseconds: the exact sums of support/synth.rs.
        let exact = if mode == "wall" { 2_984_001_800 } else { 2_384_001_800 };
        assert_eq!(drawn, exact, "{mode}: speedscope weights");
        assert_eq!((drawn + 500) / 1000, micros);
    }
}

/// `--no-native`, `--no-kernel` and `--show-glue` change nothing, in any format, for a recording without native or
/// kernel frames (every recording but `native` and `gc`): accepted silently, the same bytes.
#[test]
fn native_frame_options_change_nothing_without_native_frames() {
    let _files = lock();
    for rec in synth::RECORDINGS.iter().chain(REAL).filter(|&&r| r != "native" && r != "gc") {
        let recording = recording_path(rec);
        for format in Format::ALL {
            let flag = format.flag().to_string();
            let plain = render(&recording, std::slice::from_ref(&flag));
            for options in [&["--no-native"][..], &["--no-kernel"], &["--show-glue"], &["--no-native", "--show-glue"]] {
                let args: Vec<String> = [flag.as_str()].iter().chain(options).map(|s| s.to_string()).collect();
                assert!(plain == render(&recording, &args), "{rec} {args:?}: differs from {flag} alone");
            }
        }
    }
}

/// The hand-checked numbers of `native` (support/synth.rs): what each option leaves of its 100 samples, folded; a
/// frame left out joins its caller and callee, and stacks that become the same add up.
#[test]
fn native_and_kernel_frames_are_left_out_as_asked() {
    let _files = lock();
    let recording = recording_path("native");
    let folded = |options: &[&str]| -> Vec<(String, u64)> {
        let args: Vec<String> = ["--folded"].iter().chain(options).map(|s| s.to_string()).collect();
        let text = String::from_utf8(render(&recording, &args)).expect("utf-8");
        assert_eq!(folded_total(&text), 100, "{options:?}: every sample");
        text.lines()
            .map(|l| {
                let (stack, n) = l.rsplit_once(' ').expect("count");
                (stack.to_string(), n.parse().expect("count"))
            })
            .collect()
    };
    let count = |lines: &[(String, u64)], stack: &str| lines.iter().find(|l| l.0 == stack).map_or(0, |l| l.1);
    let (module, compress) = ("<module> (/srv/app.py:30)", "compress_all (/srv/app.py:12)");
    let deflate = format!(
        "{module};{compress};zlib_Compress_compress (zlib.cpython-312-x86_64-linux-gnu.so);deflate (libz.so.1.3)"
    );
    let fault = "asm_exc_page_fault_[k];exc_page_fault_[k]";
    let worker = "Thread._bootstrap (/usr/lib/python3.12/threading.py:1030);Worker.work (/srv/app.py:40)";
    let syscall = "entry_SYSCALL_64_[k];do_syscall_64_[k];ksys_read_[k]";

    let all = folded(&[]);
    assert_eq!(all.len(), 7);
    assert_eq!(count(&all, &format!("{deflate};longest_match (libz.so.1.3)")), 40);
    assert_eq!(count(&all, &format!("{deflate};{fault}")), 10, "a Python frame calling libz, a kernel leaf");
    assert_eq!(count(&all, &format!("{module};on_item (/srv/app.py:20)")), 20, "glue left out by default");
    assert_eq!(count(&all, &format!("{module};{compress};[native: unmerged]")), 5);
    assert_eq!(count(&all, &format!("{worker};read (libc.so.6);{syscall}")), 15);
    assert_eq!(count(&all, "start_thread (libc.so.6);worker_main (libfoo.so);libfoo.so+0x1a2b (libfoo.so)"), 8);
    assert_eq!(count(&all, "[idle]"), 2);

    let no_native = folded(&["--no-native"]);
    assert_eq!(no_native.len(), 5);
    assert_eq!(count(&no_native, &format!("{module};{compress}")), 45, "T0 and T3 (its marker gone) join");
    assert_eq!(count(&no_native, &format!("{module};{compress};{fault}")), 10);
    assert_eq!(count(&no_native, &format!("{worker};{syscall}")), 15);
    assert_eq!(count(&no_native, "[idle]"), 10, "the C thread has no Python frames");

    let no_kernel = folded(&["--no-kernel"]);
    assert_eq!(count(&no_kernel, &deflate), 10);
    assert_eq!(count(&no_kernel, &format!("{worker};read (libc.so.6)")), 15);
    assert!(no_kernel.iter().all(|l| !l.0.contains("_[k]")));

    let glue = folded(&["--show-glue"]);
    let start = "_start (python3.12);__libc_start_call_main (libc.so.6);Py_BytesMain (python3.12)";
    let call = "PyObject_Vectorcall (python3.12);_PyFunction_Vectorcall (python3.12)";
    assert_eq!(count(&glue, &format!("{start};{module};{call};on_item (/srv/app.py:20)")), 20);
    assert_eq!(
        count(&glue, &format!("start_thread (libc.so.6);thread_run (python3.12);{worker};read (libc.so.6);{syscall}")),
        15
    );
    assert_eq!(count(&glue, &format!("{module};{compress};[native: unmerged]")), 5, "no glue in an unmerged stack");

    // Glue is native: --no-native leaves it out whatever --show-glue says.
    assert_eq!(folded(&["--no-native", "--show-glue"]), no_native);
    // The off-CPU intervals' stacks too.
    let off =
        String::from_utf8(render(&recording, &["--folded", "--mode", "off-cpu", "--no-native"].map(String::from)))
            .unwrap();
    assert!(off.contains(&format!("\n{worker};{syscall};[off-CPU: read] 300000\n")), "{off}");
}

/// Every line of a folded export: (stack, count).
fn folded_lines(folded: &str) -> Vec<(String, u64)> {
    folded
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("count");
            (stack.to_string(), n.parse().expect("count"))
        })
        .collect()
}

/// The hand-checked numbers of `tasks` (support/synth.rs): the task view by default, counter names aggregated, the
/// thread view with --no-async, and task waits counted in wall mode only.
#[test]
fn task_view_weighs_as_recorded() {
    let _files = lock();
    let recording = recording_path("tasks");
    let folded = |options: &[&str]| -> Vec<(String, u64)> {
        let args: Vec<String> = ["--folded"].iter().chain(options).map(|s| s.to_string()).collect();
        folded_lines(&String::from_utf8(render(&recording, &args)).expect("utf-8"))
    };
    let sum = |lines: &[(String, u64)], part: &str| -> u64 {
        lines.iter().filter(|(stack, _)| stack.contains(part)).map(|(_, n)| n).sum()
    };
    let total = |lines: &[(String, u64)]| sum(lines, "");
    let cpu = folded(&[]);
    assert_eq!(total(&cpu), 45);
    assert_eq!(sum(&cpu, "[task request-N];"), 30, "render 20, orders 10");
    assert_eq!(sum(&cpu, "[task orders-N (+1 awaiters)];"), 6);
    assert_eq!(sum(&cpu, "[task orders-N];"), 4);
    assert_eq!(sum(&cpu, "[asyncio loop];"), 4);
    assert_eq!(sum(&cpu, "Handle._run"), 1, "the sample whose task was not found keeps its thread stack");
    assert_eq!(sum(&cpu, "request-3"), 0);
    let exact = folded(&["--exact-task-names"]);
    let request = |lines: &[(String, u64)], k: u32| sum(lines, &format!("[task request-{k}];"));
    assert_eq!((request(&exact, 3), request(&exact, 7), request(&exact, 12)), (14, 11, 5));
    assert_eq!(sum(&exact, "[task Task-1];"), 30);
    let plain = folded(&["--no-async"]);
    assert_eq!(total(&plain), 45);
    assert_eq!(sum(&plain, "[task"), 0);
    assert_eq!(sum(&plain, "[asyncio loop]"), 0);
    assert_eq!(sum(&plain, "Handle._run"), 31);

    // Time in µs. Wall: running 450 ms, off CPU 1550 ms (the loop's idle time under [asyncio loop]), waits 3700 ms.
    let wall = folded(&["--mode", "wall"]);
    assert_eq!(total(&wall), 5_700_000);
    assert_eq!(sum(&wall, "[asyncio loop];"), 40_000 + 650_000);
    let wait = |lines: &[(String, u64)], leaf: &str| -> u64 {
        lines.iter().filter(|(stack, _)| stack.ends_with(leaf)).map(|(_, n)| n).sum()
    };
    assert_eq!(wait(&wall, "[task Task-N];main (/srv/service.py:35)"), 1_000_000, "Task-1 waits every sweep");
    assert_eq!(wait(&wall, "[task request-N];handle_request (/srv/service.py:20)"), 1_600_000);
    assert_eq!(wait(&wall, "sleep (/usr/lib/python3.12/asyncio/tasks.py:718)"), 1_100_000);
    let wall_exact = folded(&["--mode", "wall", "--exact-task-names"]);
    assert_eq!(wait(&wall_exact, "[task request-7];handle_request (/srv/service.py:20)"), 600_000);
    assert_eq!(total(&folded(&["--mode", "wall", "--no-async"])), 2_000_000, "no waits in the thread view");
    assert_eq!(total(&folded(&["--mode", "off-cpu"])), 1_550_000, "waits count in wall mode only");

    let text = |options: &[&str]| {
        let args: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        String::from_utf8(render(&recording, &args)).unwrap()
    };
    let chains = text(&[]);
    let section = chains.split("Busiest task chains").nth(1).expect("task chains section");
    assert!(section.contains("\n         20  44.4%  Task-N > request-N\n"), "{section}");
    assert!(text(&["--exact-task-names"]).contains("  Task-1 > request-3 > orders-3 (+1 awaiters)\n"));
    assert!(!text(&["--no-async"]).contains("task chains"));
    let wall_text = text(&["--mode", "wall"]);
    assert!(wall_text.contains("  37 task waits, 3700.000 ms: where suspended asyncio tasks waited"), "{wall_text}");
    assert!(wall_text.contains("   1800.000  31.6%  Task-N > request-N\n"), "{wall_text}");
    assert!(wall_text.contains("   1000.000  17.5%  Task-N\n"), "the root task's own waits: {wall_text}");
}

/// Task names that differ only by counters are one frame in every format, in every mode (the profile's symbols are
/// rewritten once, not each exporter's strings); --exact-task-names keeps them apart; --no-async shows no task.
#[test]
fn task_names_aggregate_in_every_format() {
    let _files = lock();
    let recording = recording_path("tasks");
    let text_of = |format: Format, bytes: Vec<u8>| -> String {
        if format == Format::Pprof {
            let mut raw = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut raw).expect("gzip");
            String::from_utf8_lossy(&raw).into_owned()
        } else if format == Format::Otlp {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            String::from_utf8(bytes).expect("utf-8")
        }
    };
    for format in Format::ALL {
        for mode in ["cpu", "wall"] {
            let render_with = |extra: &[&str]| {
                let args: Vec<String> =
                    [format.flag(), "--mode", mode].iter().chain(extra).map(|s| s.to_string()).collect();
                text_of(format, render(&recording, &args))
            };
            let what = format!("{} --mode {mode}", format.flag());
            let aggregated = render_with(&[]);
            assert!(aggregated.contains("[task request-N]") && aggregated.contains("[task Task-N]"), "{what}");
            for exact in ["request-3", "request-7", "request-12", "Task-1", "orders-3"] {
                assert!(!aggregated.contains(exact), "{what}: {exact} not aggregated");
            }
            let exact = render_with(&["--exact-task-names"]);
            assert!(exact.contains("[task request-12]") && !exact.contains("request-N"), "{what} --exact-task-names");
            let plain = render_with(&["--no-async"]);
            assert!(!plain.contains("[task ") && !plain.contains("[asyncio loop]"), "{what} --no-async");
        }
    }
    // One frame for the aggregated name where exporters keep a frame table.
    let json: serde_json::Value = serde_json::from_slice(&render(&recording, &["--speedscope".to_string()])).unwrap();
    let frames = json["shared"]["frames"].as_array().expect("frames");
    assert_eq!(frames.iter().filter(|f| f["name"] == "[task request-N]").count(), 1, "speedscope frames");
    let svg = String::from_utf8(render(&recording, &["--flamegraph".to_string()])).unwrap();
    assert_eq!(svg.matches("<title>[task request-N] (").count(), 1, "one flame graph node: {svg}");
}

/// A recording with the asyncio task sweep and without --off-cpu has wall-clock time (CPU samples and task waits) but
/// no off-CPU time; the thread view of it has neither.
#[test]
fn task_waits_alone_give_wall_clock_time() {
    use pyperf_format::{GilState, PthreadIdMatch, SampleRecord, StackStatus, Stats, TaskWait, ThreadStateMatch};
    let mut header = pyperf_format::Reader::new(&synth::recording("mixed")[..]).unwrap().header().clone();
    header.rate = pyperf_format::Rate::Frequency(100);
    header.event = "cpu-clock".into();
    let mut w = pyperf_format::Writer::new(Vec::new(), &header).unwrap();
    w.start_task_waits().unwrap();
    let main = w.intern_symbol(&synth::sym("", "main", "/a.py", 1));
    let task = w.intern_symbol(&synth::task_sym("[task Task-1]"));
    let (stack, task_stack) = (w.intern_stack(&[main]), w.intern_stack(&[task, main]));
    w.push_sample(&SampleRecord {
        time_ns: 0,
        cpu: 0,
        pid: 1,
        tid: 1,
        comm: "python3",
        thread_state: ThreadStateMatch::Match,
        gil: GilState::ThisThread,
        pthread_id: PthreadIdMatch::Match,
        status: StackStatus::Complete,
        stack,
        task_stack,
        flags: 0,
        interp: 0,
        link: 0,
    })
    .unwrap();
    w.task_waits(&[TaskWait { pid: 1, tid: 1, time_ns: 5, weight_ns: 30_000_000, stack: task_stack }]).unwrap();
    let bytes = w.finish(&Stats::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sweep.pyp");
    std::fs::write(&path, bytes).unwrap();
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let folded = String::from_utf8(render(&path, &args(&["--folded", "--mode", "wall"]))).unwrap();
    assert_eq!(folded, "[task Task-N];main (/a.py:1) 40000\n");
    let text = String::from_utf8(render(&path, &args(&["--mode", "wall"]))).unwrap();
    assert!(text.contains("  1 task wait, 30.000 ms: where suspended asyncio tasks waited"), "{text}");
    let load = |list: &[&str]| {
        let mut argv = args(&["pyperf-report", "-i", path.to_str().unwrap()]);
        argv.extend(args(list));
        Cli::try_parse_from(&argv).unwrap().report.load().map(|_| ()).map_err(|e| e.to_string())
    };
    for refused in [&["--mode", "off-cpu"][..], &["--mode", "wall", "--no-async"]] {
        let err = load(refused).expect_err("no off-CPU data");
        assert!(err.contains("has no off-CPU data"), "{refused:?}: {err}");
    }
}

/// Samples and off-CPU intervals in the garbage collector (format 1.6) get one `[gc]` frame after their Python frames
/// and task markers, before their native and kernel frames, in the task view as in the thread view; a stack with
/// native frames only gets it at the root, one without frames has it alone; the same stack with and without the flag
/// are two stacks.
#[test]
fn gc_frames_follow_the_python_frames_in_every_view() {
    use pyperf_format::{
        off_cpu_flags, sample_flags, GilState, OffCpuInterval, OffCpuKind, PthreadIdMatch, SampleRecord, StackStatus,
        Stats, ThreadStateMatch,
    };
    let mut header = pyperf_format::Reader::new(&synth::recording("mixed")[..]).unwrap().header().clone();
    header.rate = pyperf_format::Rate::Frequency(100);
    header.event = "cpu-clock".into();
    let mut w = pyperf_format::Writer::new(Vec::new(), &header).unwrap();
    w.start_off_cpu(1_000_000).unwrap();
    w.start_task_waits().unwrap();
    let main = w.intern_symbol(&synth::sym("", "main", "/a.py", 1));
    let task = w.intern_symbol(&synth::task_sym("[task Task-1]"));
    let native = w.intern_symbol(&synth::native_sym("gc_collect_main", "/lib/libpython3.13.so", 0));
    let kernel = w.intern_symbol(&synth::kernel_sym("clear_page"));
    let stack = w.intern_stack(&[main, native, kernel]);
    let task_stack = w.intern_stack(&[task, main, native, kernel]);
    let native_only = w.intern_stack(&[native]);
    let push = |w: &mut pyperf_format::Writer<Vec<u8>>, tid: u32, stack: u32, task_stack: u32, flags: u8| {
        w.push_sample(&SampleRecord {
            time_ns: 0,
            cpu: 0,
            pid: 1,
            tid,
            comm: "python3",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: if stack == 0 { StackStatus::Idle } else { StackStatus::Complete },
            stack,
            task_stack,
            flags,
            interp: 0,
            link: 0,
        })
        .unwrap();
    };
    push(&mut w, 1, stack, task_stack, sample_flags::GC);
    push(&mut w, 1, stack, task_stack, 0);
    push(&mut w, 2, native_only, 0, sample_flags::GC);
    push(&mut w, 2, 0, 0, sample_flags::GC);
    push(&mut w, 2, 0, 0, 0);
    w.push_off_cpu(&OffCpuInterval {
        pid: 1,
        tid: 1,
        start_ns: 10_000_000,
        duration_ns: 20_000_000,
        runnable_ns: 20_000_000,
        weight_ns: 20_000_000,
        kind: OffCpuKind::Runnable,
        syscall: -1,
        gil: GilState::ThisThread,
        status: StackStatus::Complete,
        stack,
        flags: off_cpu_flags::GC,
        comm: "python3".into(),
        task_stack,
        interp: 0,
        link: 0,
    })
    .unwrap();
    let bytes = w.finish(&Stats::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gc.pyp");
    std::fs::write(&path, bytes).unwrap();
    let folded = |list: &[&str]| {
        let args: Vec<String> = ["--folded"].iter().chain(list).map(|s| s.to_string()).collect();
        let mut lines: Vec<String> =
            String::from_utf8(render(&path, &args)).unwrap().lines().map(String::from).collect();
        lines.sort();
        lines
    };
    let (n, k) = ("gc_collect_main (libpython3.13.so)", "clear_page_[k]");
    assert_eq!(
        folded(&[]),
        [
            "[gc] 1".to_string(),
            format!("[gc];{n} 1"),
            "[idle] 1".to_string(),
            format!("[task Task-N];main (/a.py:1);[gc];{n};{k} 1"),
            format!("[task Task-N];main (/a.py:1);{n};{k} 1"),
        ]
    );
    assert_eq!(folded(&["--no-async", "--no-kernel"])[3], format!("main (/a.py:1);[gc];{n} 1"));
    // Without native frames, the native-only stack in the collector is `[gc]` alone, as the one without frames.
    assert_eq!(
        folded(&["--no-native", "--no-kernel", "--no-async"]),
        ["[gc] 2", "[idle] 1", "main (/a.py:1) 1", "main (/a.py:1);[gc] 1"]
    );
    assert_eq!(
        folded(&["--mode", "off-cpu"]),
        [format!("[task Task-N];main (/a.py:1);[gc];{n};{k};[off-CPU: runnable] 20000")]
    );
    assert_eq!(
        folded(&["--mode", "wall", "--no-async", "--pid-root"]),
        [
            "python3 [pid 1];[gc] 10000".to_string(),
            format!("python3 [pid 1];[gc];{n} 10000"),
            "python3 [pid 1];[idle] 10000".to_string(),
            format!("python3 [pid 1];main (/a.py:1);[gc];{n};{k} 10000"),
            format!("python3 [pid 1];main (/a.py:1);[gc];{n};{k};[off-CPU: runnable] 20000"),
            format!("python3 [pid 1];main (/a.py:1);{n};{k} 10000"),
        ]
    );
    // The timelines too: speedscope names the frame once and uses it in the matching samples only.
    let json: serde_json::Value = serde_json::from_slice(&render(&path, &["--speedscope".to_string()])).unwrap();
    let frames = json["shared"]["frames"].as_array().expect("frames");
    let gc = frames.iter().position(|f| f["name"] == "[gc]").expect("a [gc] frame");
    assert_eq!(frames.iter().filter(|f| f["name"] == "[gc]").count(), 1);
    let with_gc: usize = json["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["samples"].as_array().unwrap())
        .filter(|s| s.as_array().unwrap().iter().any(|f| f.as_u64() == Some(gc as u64)))
        .count();
    assert_eq!(with_gc, 3);
}
