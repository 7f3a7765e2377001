//! `--pprof`: the profile decodes (prost) to the same totals as the folded export, with labels and mappings, and
//! the real consumer, `go tool pprof` (Debian's golang-go, installed by scripts/setup), reads it without a word on
//! standard error and shows the same split. Without go the go tests fail when CI=true, and otherwise skip loudly.

#[path = "support/crafted.rs"]
mod crafted;
#[path = "support/synth.rs"]
mod synth;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use pyperf_report::pprof::proto;
use pyperf_report::{folded, write_report, Format, LoadOptions, Mode, Profile, ReportArgs};

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// The pprof export of `path` in `mode`, as `pyperf report --pprof` writes it.
fn export(path: &Path, mode: Mode) -> Vec<u8> {
    let args = ReportArgs { input: vec![path.to_path_buf()], mode, ..ReportArgs::with_format(Format::Pprof) };
    let profile = args.load().expect("load");
    let mut out = Vec::new();
    write_report(&args, &profile, &mut out).expect("write");
    out
}

fn decode(gz: &[u8]) -> proto::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz).read_to_end(&mut raw).expect("gzip");
    proto::Profile::decode(&raw[..]).expect("profile.proto")
}

/// Folded totals per leaf frame's function (the last `;` field, its ` (file:line)` cut off), in `mode`.
fn folded_leaves(path: &Path, mode: Mode) -> BTreeMap<String, u64> {
    let mut o = LoadOptions::stacks_only(Default::default());
    o.mode = mode;
    let profile = Profile::open(path, &o).expect("load");
    let mut out = Vec::new();
    let mut fo = folded::Options::default();
    fo.lines = true;
    folded::write(&profile, &fo, &mut out).expect("folded");
    let mut m = BTreeMap::new();
    for line in String::from_utf8(out).expect("utf-8").lines() {
        let (stack, n) = line.rsplit_once(' ').expect("count");
        let leaf = stack.rsplit(';').next().expect("leaf");
        let leaf = leaf.split(" (").next().expect("name").trim_end_matches("_[k]");
        *m.entry(leaf.to_string()).or_default() += n.parse::<u64>().expect("number");
    }
    m
}

/// Sample values per leaf function (first location's function name), value index `v`.
fn pprof_leaves(p: &proto::Profile, v: usize) -> BTreeMap<String, u64> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let funcs: BTreeMap<u64, String> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
    let locs: BTreeMap<u64, u64> = p.location.iter().map(|l| (l.id, l.line[0].function_id)).collect();
    let mut m = BTreeMap::new();
    for smp in &p.sample {
        let leaf = &funcs[&locs[&smp.location_id[0]]];
        *m.entry(leaf.clone()).or_default() += smp.value[v] as u64;
    }
    m
}

#[test]
fn totals_labels_and_ids_match_the_recording() {
    for name in synth::RECORDINGS {
        let path = testdata().join(format!("synthetic/{name}.pyp"));
        let p = decode(&export(&path, Mode::Cpu));
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
        let clock = Profile::open(&path, &LoadOptions::default()).expect("load").sampling_period_ns().is_some();
        if clock {
            assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")], "{name}");
        } else {
            // Samples of an event that is no clock are no fixed time: no cpu type.
            assert_eq!(types, [("samples", "count")], "{name}");
        }
        // Same totals per leaf function as the folded export; cpu = samples x period.
        assert_eq!(pprof_leaves(&p, 0), folded_leaves(&path, Mode::Cpu), "{name}");
        for smp in &p.sample {
            if clock {
                assert_eq!(smp.value[1], smp.value[0] * p.period, "{name}");
            }
            let keys: Vec<&str> = smp.label.iter().map(|l| s(l.key)).collect();
            assert_eq!(keys, ["pid", "tid", "thread", "process", "gil"], "{name}");
        }
        // Ids are dense and unique; functions are unique per (name, file), locations per (function, line, mapping).
        for (i, f) in p.function.iter().enumerate() {
            assert_eq!(f.id, i as u64 + 1);
        }
        let mut seen = std::collections::HashSet::new();
        for f in &p.function {
            assert!(seen.insert((f.name, f.filename)), "{name}: function {} twice", s(f.name));
        }
        let mut seen = std::collections::HashSet::new();
        for l in &p.location {
            assert!(seen.insert((l.line[0].function_id, l.line[0].line, l.mapping_id)), "{name}: location twice");
        }
        assert!(!s(p.mapping[0].filename).is_empty(), "{name}: a main binary");
    }
}

#[test]
fn native_frames_have_their_libraries_and_build_ids() {
    let path = testdata().join("synthetic/native.pyp");
    let p = decode(&export(&path, Mode::Cpu));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let libz = p.mapping.iter().find(|m| s(m.filename).ends_with("libz.so.1.3")).expect("libz mapping");
    assert_eq!(s(libz.build_id), "3f0c6d1e2a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d");
    let deflate = p.function.iter().find(|f| s(f.name) == "deflate").expect("deflate");
    let loc = p.location.iter().find(|l| l.line[0].function_id == deflate.id).expect("its location");
    assert_eq!(loc.mapping_id, libz.id);
    assert!(p.mapping.iter().any(|m| s(m.filename) == "[kernel.kallsyms]"));
}

#[test]
fn off_cpu_and_wall_time() {
    let path = testdata().join("recordings/offcpu-1.3.pyp");
    for (mode, ty) in [(Mode::OffCpu, "off_cpu"), (Mode::Wall, "wall")] {
        let p = decode(&export(&path, mode));
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.sample_type.len(), 1);
        assert_eq!((s(p.sample_type[0].r#type), s(p.sample_type[0].unit)), (ty, "nanoseconds"));
        // Folded counts are microseconds, rounded per line: compare totals per leaf within a microsecond a line.
        let folded = folded_leaves(&path, mode);
        let ours = pprof_leaves(&p, 0);
        assert_eq!(folded.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>(), "{ty}");
        for (k, us) in &folded {
            let ns = ours[k];
            assert!((ns as i64 / 1000 - *us as i64).abs() <= 2 + *us as i64 / 1000, "{ty} {k}: {ns} ns vs {us} us");
        }
    }
}

/// Task names that differ only by counters are one pprof function (`[task request-N]`) with one location, in cpu and
/// wall modes; with --exact-task-names one function per task; and the wall profile weighs the task waits too.
#[test]
fn aggregated_task_names_are_one_function() {
    let path = testdata().join("recordings/tasks-1.5.pyp");
    let functions = |p: &proto::Profile, name: &str| {
        p.function.iter().filter(|f| p.string_table[f.name as usize] == name).map(|f| f.id).collect::<Vec<_>>()
    };
    for mode in [Mode::Cpu, Mode::Wall] {
        let p = decode(&export(&path, mode));
        let ids = functions(&p, "[task request-N]");
        assert_eq!(ids.len(), 1, "{mode:?}");
        assert_eq!(p.location.iter().filter(|l| l.line[0].function_id == ids[0]).count(), 1, "{mode:?}");
        assert!(functions(&p, "[task request-3]").is_empty(), "{mode:?}");
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        let want = if mode == Mode::Cpu { 45 } else { 5_700_000_000 };
        assert_eq!(total, want, "{mode:?}: CPU samples, or wall ns with the task waits");
    }
    let args = ReportArgs { input: vec![path], exact_task_names: true, ..ReportArgs::with_format(Format::Pprof) };
    let profile = args.load().expect("load");
    let mut out = Vec::new();
    write_report(&args, &profile, &mut out).expect("write");
    let p = decode(&out);
    for k in [3, 7, 12] {
        assert_eq!(functions(&p, &format!("[task request-{k}]")).len(), 1);
    }
    assert!(functions(&p, "[task request-N]").is_empty());
}

/// `go tool pprof` with its caches in a temporary home; None (after a loud message) when go is missing off CI.
fn go_pprof(args: &[&str], file: &Path) -> Option<(String, String)> {
    let home = tempfile::tempdir().expect("home");
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", home.path())
        .env("GOCACHE", home.path().join("cache"))
        .env("GOPATH", home.path().join("go"))
        .env("PPROF_TMPDIR", home.path())
        .output();
    match out {
        Ok(o) => {
            assert!(o.status.success(), "go tool pprof {args:?}: {}", String::from_utf8_lossy(&o.stderr));
            Some((String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into()))
        }
        Err(e) => {
            assert!(!on_ci(), "go tool pprof: {e}: install golang-go (scripts/setup does)");
            eprintln!("SKIPPED: go tool pprof not available ({e}); install golang-go");
            None
        }
    }
}

#[test]
fn go_tool_pprof_reads_every_export_without_a_warning() {
    let dir = tempfile::tempdir().expect("dir");
    let mut cases: Vec<(PathBuf, Mode)> =
        synth::RECORDINGS.iter().map(|n| (testdata().join(format!("synthetic/{n}.pyp")), Mode::Cpu)).collect();
    cases.push((testdata().join("recordings/offcpu-1.3.pyp"), Mode::OffCpu));
    cases.push((testdata().join("recordings/offcpu-1.3.pyp"), Mode::Wall));
    for (i, (path, mode)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("{i}.pb.gz"));
        std::fs::write(&file, export(path, *mode)).expect("write");
        let Some((top, err)) = go_pprof(&["-top", "-nodecount=1000", "-nodefraction=0", "-edgefraction=0"], &file)
        else {
            return;
        };
        assert_eq!(err, "", "{}: go tool pprof said something on stderr", path.display());
        // -top's flat column per function, in the profile's unit, against the folded totals.
        let p = decode(&std::fs::read(&file).expect("read"));
        let v = p.sample_type.len() - 1;
        for (leaf, n) in pprof_leaves(&p, v) {
            if n == 0 || leaf.is_empty() {
                continue;
            }
            assert!(top.lines().any(|l| l.trim_end().ends_with(&format!(" {leaf}"))), "{leaf} not in -top:\n{top}");
        }
        let Some((raw, err)) = go_pprof(&["-raw"], &file) else { return };
        assert_eq!(err, "");
        assert!(raw.contains("pid:[") && raw.contains("gil:["), "{}: labels:\n{raw}", path.display());
    }
}

/// The share of a known function in -top equals its share of the samples in the text report's terms.
#[test]
fn go_tool_pprof_shows_the_known_split() {
    let dir = tempfile::tempdir().expect("dir");
    let path = testdata().join("synthetic/mixed.pyp");
    let file = dir.path().join("m.pb.gz");
    std::fs::write(&file, export(&path, Mode::Cpu)).expect("write");
    let Some((top, _)) = go_pprof(&["-top", "-nodecount=1000", "-sample_index=samples"], &file) else { return };
    let folded = folded_leaves(&path, Mode::Cpu);
    let total: u64 = folded.values().sum();
    // `      42 21.25% ...  fib`: flat count and percentage per function.
    for (leaf, n) in folded.iter().filter(|(k, _)| k.as_str() == "fib" || k.as_str() == "Poller.poll") {
        let line = top.lines().find(|l| l.trim_end().ends_with(&format!(" {leaf}"))).expect("line");
        let flat: u64 = line.split_whitespace().next().expect("flat").parse().expect("count");
        assert_eq!(flat, *n, "{line}");
        let pct = format!("{:.2}%", *n as f64 * 100.0 / total as f64);
        assert!(line.contains(&pct), "{line} lacks {pct}");
    }
    // Tag filtering works on the gil label.
    let Some((held, _)) = go_pprof(&["-top", "-sample_index=samples", "-tagfocus=gil=held"], &file) else { return };
    assert!(held.contains("Showing nodes"), "{held}");
}

/// A small crafted recording whose pprof samples would hold billions of frames is refused in one line, before
/// anything is written.
#[test]
fn a_profile_too_large_for_pprof_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("chain.pyp"), crafted::chain(20_000, 1)).expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_pyperf-report"))
        .args(["chain.pyp", "--pprof", "-o", "out.pb.gz"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("pyperf-report: a pprof profile of this recording would hold 200"), "{err}");
    assert!(err.contains("use --folded or --flamegraph") && err.lines().count() == 1, "{err}");
    assert!(!dir.path().join("out.pb.gz").exists());
}
