//! `--gecko`: Firefox Profiler's processed format. The file has what the profiler requires (meta with version,
//! interval, start time and categories; per thread its samples, stack, frame and function tables and strings), one
//! thread per recorded thread with all its samples at their times, stacks that resolve to the frames every other
//! export shows, and GIL markers.

#[path = "support/synth.rs"]
mod synth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pyperf_report::{write_report, Format, LoadOptions, Mode, Profile, ReportArgs};
use serde_json::Value;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn export(path: &Path, mode: Mode) -> Value {
    let args = ReportArgs { input: vec![path.to_path_buf()], mode, ..ReportArgs::with_format(Format::Gecko) };
    let profile = args.load().expect("load");
    let mut out = Vec::new();
    write_report(&args, &profile, &mut out).expect("write");
    serde_json::from_slice(&out).expect("JSON")
}

/// The frame names of sample `i` of `thread`, root first.
fn stack_names(thread: &Value, i: usize) -> Vec<String> {
    let strings = thread["stringArray"].as_array().expect("strings");
    let stack_table = &thread["stackTable"];
    let frame_table = &thread["frameTable"];
    let func_table = &thread["funcTable"];
    let mut out = Vec::new();
    let mut stack = thread["samples"]["stack"][i].as_u64();
    while let Some(s) = stack {
        let frame = stack_table["frame"][s as usize].as_u64().expect("frame") as usize;
        let func = frame_table["func"][frame].as_u64().expect("func") as usize;
        let name = func_table["name"][func].as_u64().expect("name") as usize;
        out.push(strings[name].as_str().expect("string").to_string());
        stack = stack_table["prefix"][s as usize].as_u64();
    }
    out.reverse();
    out
}

#[test]
fn every_thread_with_its_samples_and_the_required_fields() {
    for name in synth::RECORDINGS {
        let path = testdata().join(format!("synthetic/{name}.pyp"));
        let p = export(&path, Mode::Cpu);
        let meta = &p["meta"];
        assert!(meta["version"].as_u64().is_some_and(|v| v >= 24), "{name}: {meta}");
        assert!(meta["preprocessedProfileVersion"].as_u64().is_some(), "{name}");
        assert!(meta["interval"].as_f64().is_some_and(|v| v > 0.0), "{name}");
        let profile = Profile::open(&path, &LoadOptions::new(Default::default(), true)).expect("load");
        assert_eq!(meta["startTime"].as_f64(), Some(profile.header.start_time_unix_ns as f64 / 1e6), "{name}");
        let categories: Vec<&str> = meta["categories"]
            .as_array()
            .expect("categories")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        for c in ["Python", "Native", "Kernel", "Idle", "Off-CPU", "GIL"] {
            assert!(categories.contains(&c), "{name}: {categories:?}");
        }
        let threads = p["threads"].as_array().expect("threads");
        // Each recorded thread with samples is a thread of the profile with all of them.
        let mut want: BTreeMap<u32, u64> = BTreeMap::new();
        let per_thread = pyperf_report::tracks::entries_per_thread(&profile).expect("timeline");
        for (t, &n) in profile.threads.iter().zip(&per_thread) {
            if n > 0 {
                *want.entry(t.tid).or_default() += n;
            }
        }
        let mut got: BTreeMap<u32, u64> = BTreeMap::new();
        for t in threads {
            for key in ["frameTable", "funcTable", "stackTable", "stringArray", "markers", "samples", "name", "pid"] {
                assert!(!t[key].is_null(), "{name}: thread without {key}");
            }
            let n = t["samples"]["length"].as_u64().expect("length");
            assert_eq!(t["samples"]["stack"].as_array().expect("stacks").len() as u64, n);
            let tid: u32 = match &t["tid"] {
                Value::Number(n) => n.as_u64().expect("tid") as u32,
                Value::String(s) => s.parse().expect("tid"),
                other => panic!("tid {other}"),
            };
            *got.entry(tid).or_default() += n;
        }
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn stacks_resolve_to_the_frames_of_the_other_exports_and_gil_runs_are_markers() {
    let path = testdata().join("synthetic/mixed.pyp");
    let p = export(&path, Mode::Cpu);
    let threads = p["threads"].as_array().expect("threads");
    let mut all: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut markers = 0;
    for t in threads {
        let n = t["samples"]["length"].as_u64().expect("n") as usize;
        for i in 0..n {
            *all.entry(stack_names(t, i)).or_default() += 1;
        }
        let m = &t["markers"];
        let names: Vec<usize> =
            m["name"].as_array().expect("marker names").iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let strings = t["stringArray"].as_array().expect("strings");
        for i in names {
            assert!(strings[i].as_str().expect("s").starts_with("GIL"), "{}", strings[i]);
            markers += 1;
        }
    }
    assert!(markers > 0, "no GIL markers");
    // The same stacks, with the same counts, as every export.
    let profile = Profile::open(&path, &LoadOptions::default()).expect("load");
    let mut folded: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for s in &profile.stacks {
        // Names with control characters are shown escaped, as in the text report.
        let names = profile.stack_count_names(s, true).iter().map(|n| pyperf_report::names::escape_text(n)).collect();
        *folded.entry(names).or_default() += s.count;
    }
    assert_eq!(all, folded);
}

#[test]
fn wall_mode_weighs_time_in_milliseconds() {
    let path = testdata().join("recordings/offcpu-1.3.pyp");
    let p = export(&path, Mode::Wall);
    let mut o = LoadOptions::default();
    o.mode = Mode::Wall;
    let profile = Profile::open(&path, &o).expect("load");
    let total_ms = profile.total() as f64 / 1e6;
    let mut got = 0i64;
    for t in p["threads"].as_array().expect("threads") {
        assert_eq!(t["samples"]["weightType"].as_str(), Some("tracing-ms"));
        got += t["samples"]["weight"].as_array().expect("weights").iter().map(|w| w.as_i64().unwrap()).sum::<i64>();
    }
    let threads = p["threads"].as_array().expect("threads").len() as f64;
    // Rounded per thread: within a millisecond each.
    assert!((got as f64 - total_ms).abs() <= threads, "{got} ms against {total_ms} ms");
}
