//! Several recordings reported as one (`-i A.pyp -i B.pyp`): counts add up, processes stay apart (also with the
//! same pid), times share one clock, and what cannot be added up is refused with one line.

#[path = "support/synth.rs"]
mod synth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pyperf_format::Rate;

const BIN: &str = env!("CARGO_BIN_EXE_pyperf-report");

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).args(args).current_dir(dir).output().expect("run pyperf-report")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(o.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

/// Folded output as stack -> count.
fn folded(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("count");
        *m.entry(stack.to_string()).or_default() += n.parse::<u64>().expect("number");
    }
    m
}

#[test]
fn counts_of_several_recordings_add_up_per_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "mixed.pyp", &synth::recording("mixed"));
    write(dir.path(), "native.pyp", &synth::recording("native"));
    let a = folded(&ok(dir.path(), &["-i", "mixed.pyp", "--folded"]));
    let b = folded(&ok(dir.path(), &["-i", "native.pyp", "--folded"]));
    let both = folded(&ok(dir.path(), &["-i", "mixed.pyp", "-i", "native.pyp", "--folded"]));
    let mut expected = a.clone();
    for (k, v) in &b {
        *expected.entry(k.clone()).or_default() += v;
    }
    assert_eq!(both, expected);
    // Positional recordings are the same as -i.
    assert_eq!(folded(&ok(dir.path(), &["mixed.pyp", "native.pyp", "--folded"])), expected);
    // Every format reads them.
    for flag in ["--text", "--speedscope", "--flamegraph"] {
        let out = dir.path().join("out");
        ok(dir.path(), &["-i", "mixed.pyp", "-i", "native.pyp", flag, "-o", out.to_str().expect("utf-8")]);
        assert!(std::fs::metadata(&out).expect("output").len() > 0, "{flag}");
    }
}

#[test]
fn the_same_pid_in_two_recordings_is_two_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "a.pyp", &synth::recording("mixed"));
    write(dir.path(), "b.pyp", &synth::recording("mixed"));
    let one = folded(&ok(dir.path(), &["-i", "a.pyp", "--folded", "--pid-root"]));
    let two = folded(&ok(dir.path(), &["-i", "a.pyp", "-i", "b.pyp", "--folded", "--pid-root"]));
    // Each process of `a` appears twice, labelled with its recording, with its own counts.
    for (stack, n) in &one {
        let (process, rest) = stack.split_once(';').unwrap_or((stack.as_str(), ""));
        let inner = process.strip_suffix(']').expect("label ends with ]");
        for file in ["a.pyp", "b.pyp"] {
            let label = format!("{inner}, {file}]");
            let key = if rest.is_empty() { label } else { format!("{label};{rest}") };
            assert_eq!(two.get(&key), Some(n), "{key} in {two:#?}");
        }
    }
    assert_eq!(two.values().sum::<u64>(), 2 * one.values().sum::<u64>());
    let text = ok(dir.path(), &["-i", "a.pyp", "-i", "b.pyp"]);
    assert!(text.contains("python3.11 [pid 1000, a.pyp]") && text.contains("python3.11 [pid 1000, b.pyp]"), "{text}");
    assert!(text.contains("\n  recordings    2 as one: a.pyp, b.pyp\n"), "{text}");
}

#[test]
fn later_recordings_are_shifted_onto_one_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let second = 2_000_000_000;
    write(dir.path(), "a.pyp", &synth::small_offcpu("cpu-clock", Rate::Frequency(100)));
    write(dir.path(), "b.pyp", &synth::small_offcpu_from("cpu-clock", Rate::Frequency(100), second));
    let out = dir.path().join("s.json");
    ok(
        dir.path(),
        &["-i", "a.pyp", "-i", "b.pyp", "--mode", "wall", "--speedscope", "-o", out.to_str().expect("path")],
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("json");
    let profiles = json["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 2, "one thread per recording");
    ok(dir.path(), &["-i", "a.pyp", "--mode", "wall", "--speedscope", "-o", out.to_str().expect("path")]);
    let alone: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).expect("read")).expect("json");
    let end = alone["profiles"][0]["endValue"].as_u64().expect("endValue");
    // Both threads' timelines span the merged recording: b's start 2 s after a's.
    for p in profiles {
        assert_eq!(p["endValue"].as_u64(), Some(second + end), "{p}");
    }
    // In b's timeline the first 2 s are empty (one idle sample), then its 100 ms as in a.
    let b = profiles.iter().find(|p| p["name"].as_str().is_some_and(|n| n.contains("b.pyp"))).expect("b's thread");
    let weights = b["weights"].as_array().expect("weights");
    assert_eq!(weights[0].as_u64(), Some(second), "{b}");
    let folded_wall = folded(&ok(dir.path(), &["-i", "a.pyp", "-i", "b.pyp", "--mode", "wall", "--folded"]));
    let single = folded(&ok(dir.path(), &["-i", "a.pyp", "--mode", "wall", "--folded"]));
    assert_eq!(folded_wall, single.iter().map(|(k, v)| (k.clone(), 2 * v)).collect::<BTreeMap<_, _>>());
}

#[test]
fn differences_are_warnings_and_what_cannot_be_added_up_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "clock.pyp", &synth::small_offcpu("cpu-clock", Rate::Frequency(100)));
    write(dir.path(), "fast.pyp", &synth::small_offcpu("cpu-clock", Rate::Frequency(1000)));
    write(dir.path(), "cycles.pyp", &synth::small_offcpu("cycles", Rate::Period(1_000_000)));
    write(dir.path(), "mixed.pyp", &synth::recording("mixed"));
    // Different events: added up, with a warning.
    let o = run(dir.path(), &["-i", "clock.pyp", "-i", "cycles.pyp", "--folded"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(
        err.lines().next(),
        Some(
            "pyperf-report: warning: clock.pyp samples cpu-clock and cycles.pyp samples cycles: their samples count \
             different things, added up here as samples; report them separately to compare"
        )
    );
    // Off-CPU time adds up whatever the event.
    ok(dir.path(), &["-i", "clock.pyp", "-i", "cycles.pyp", "--folded", "--mode", "off-cpu"]);
    // Different rates: a warning, and the counts.
    let o = run(dir.path(), &["-i", "clock.pyp", "-i", "fast.pyp", "--folded"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("warning: clock.pyp was recorded at 100 Hz and fast.pyp at 1000 Hz"), "{err}");
    // --mode off-cpu needs off-CPU data in every recording: the one without is named.
    let o = run(dir.path(), &["-i", "clock.pyp", "-i", "mixed.pyp", "--folded", "--mode", "off-cpu"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.starts_with("pyperf-report: mixed.pyp has no off-CPU data") && err.lines().count() == 1, "{err}");
    // Standard input once; the output is none of the inputs.
    let o = run(dir.path(), &["-i", "-", "-i", "-", "--folded"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("standard input (-) can be read once"));
    let o = run(dir.path(), &["-i", "clock.pyp", "-i", "fast.pyp", "--folded", "-o", "fast.pyp", "--force"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("it is the input recording"), "{o:?}");
    // A missing second recording is named.
    let o = run(dir.path(), &["-i", "clock.pyp", "-i", "absent.pyp"]);
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("pyperf-report: cannot open absent.pyp"), "{o:?}");
}

/// The same recording given twice (by the same name, another spelling, a hard link, standard input redirected
/// from it) would count its samples twice: one line saying so, nothing on stdout. A copy is another file: two
/// recordings, as given.
#[test]
fn the_same_recording_twice_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write(dir.path(), "a.pyp", &synth::recording("mixed"));
    std::fs::hard_link(&a, dir.path().join("link.pyp")).expect("hard link");
    let refused = |o: Output, line: &str| {
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr), format!("pyperf-report: {line}\n"));
        assert!(o.stdout.is_empty());
    };
    let twice = "a.pyp is given twice: a recording counts once in a report; give it once";
    refused(run(dir.path(), &["-i", "a.pyp", "-i", "a.pyp"]), twice);
    refused(run(dir.path(), &["a.pyp", "a.pyp", "--folded"]), twice);
    let same = |b: &str| format!("a.pyp and {b} are the same file: a recording counts once in a report; give it once");
    refused(run(dir.path(), &["-i", "a.pyp", "-i", "./a.pyp"]), &same("./a.pyp"));
    refused(run(dir.path(), &["-i", "a.pyp", "-i", "link.pyp", "--folded"]), &same("link.pyp"));
    let o = Command::new(BIN)
        .args(["-i", "a.pyp", "-i", "-", "--folded"])
        .current_dir(dir.path())
        .stdin(std::fs::File::open(&a).expect("open"))
        .output()
        .expect("run pyperf-report");
    refused(o, &same("standard input"));
    // A copy: counted as given.
    std::fs::copy(&a, dir.path().join("copy.pyp")).expect("copy");
    let one = folded(&ok(dir.path(), &["-i", "a.pyp", "--folded"]));
    let both = folded(&ok(dir.path(), &["-i", "a.pyp", "-i", "copy.pyp", "--folded"]));
    assert_eq!(both.values().sum::<u64>(), 2 * one.values().sum::<u64>());
}
