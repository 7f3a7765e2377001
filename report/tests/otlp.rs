//! `--otlp` read by OpenTelemetry's own Python classes (the `opentelemetry-proto` package from PyPI, 1.45.2, in
//! the virtual environment scripts/setup makes: an implementation independent of the Rust crate the export is
//! encoded with; report/tests/support/otlp_decode.py checks every dictionary index on the way). For each synthetic
//! recording, in cpu mode and, for those with off-CPU intervals, wall mode:
//!
//! - every stack the decoder rebuilds (root first, frames named as `--folded` names them) carries what
//!   `--folded` gives it: its samples times the sampling period in cpu mode (the sample type `cpu`/`nanoseconds`),
//!   its time in ns in wall mode (`wall`/`nanoseconds`; `--folded` rounds it to µs);
//! - one resource per process, with `service.name`, `process.pid`, `process.runtime.name` `cpython` and the
//!   recording's Python version and host; each sample's `thread.id` is one of its process's threads;
//! - the scope is `pyperf`, the period and times the recording's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_pyperf-report");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// The virtual environment with opentelemetry-proto: $PYPERF_OTEL_VENV, else target/otel-venv (scripts/setup).
fn python() -> PathBuf {
    let venv = std::env::var_os("PYPERF_OTEL_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(|| repo().join("target/otel-venv"), PathBuf::from);
    let python = venv.join("bin/python");
    assert!(python.exists(), "no {} (scripts/setup makes it, with opentelemetry-proto from PyPI)", python.display());
    python
}

fn report(recording: &Path, args: &[&str]) -> Vec<u8> {
    let o = Command::new(BIN).arg("-i").arg(recording).args(args).output().expect("run pyperf-report");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// What the decoder printed.
fn decode(otlp: &[u8]) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("prof.otlp.pb");
    std::fs::write(&file, otlp).expect("write the export");
    let o = Command::new(python())
        .arg(repo().join("report/tests/support/otlp_decode.py"))
        .arg(&file)
        .output()
        .expect("run the decoder");
    assert!(o.status.success(), "the decoder failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("the decoder's JSON")
}

fn check(name: &str, mode: &str) {
    let recording = repo().join(format!("testdata/synthetic/{name}.pyp"));
    let folded = String::from_utf8(report(&recording, &["--folded", "--mode", mode])).expect("UTF-8");
    let want: BTreeMap<String, u64> = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(stack, n)| (stack.to_string(), n.parse::<u64>().expect("a count")))
        .fold(BTreeMap::new(), |mut m, (s, n)| {
            *m.entry(s).or_insert(0) += n;
            m
        });
    let text = String::from_utf8(report(&recording, &["--mode", mode])).expect("UTF-8");
    let rooted = String::from_utf8(report(&recording, &["--folded", "--mode", mode, "--pid-root", "--tid-root"]))
        .expect("UTF-8");
    // `... [pid P];worker-2 [tid T];...` or `...;thread T (comm);...`
    let has_thread = |pid: i64, tid: i64| {
        rooted.lines().any(|l| {
            l.contains(&format!("[pid {pid}]"))
                && (l.contains(&format!(" [tid {tid}];")) || l.contains(&format!(";thread {tid} (")))
        })
    };
    let got = decode(&report(&recording, &["--otlp", "--mode", mode]));
    let resources = got["resources"].as_array().expect("resources");
    assert!(!resources.is_empty(), "{name}: no resource");
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    let mut period = 0;
    for r in resources {
        let attrs = &r["attributes"];
        assert_eq!(r["scope"][0], "pyperf", "{name}: scope");
        assert!(attrs["service.name"].as_str().is_some_and(|s| !s.is_empty()), "{name}: {attrs}");
        assert!(attrs["host.name"].as_str().is_some(), "{name}: {attrs}");
        let pid = attrs["process.pid"].as_i64();
        if attrs.get("process.runtime.version").is_some() {
            assert_eq!(attrs["process.runtime.name"], "cpython", "{name}: {attrs}");
            let version = attrs["process.runtime.version"].as_str().expect("a version");
            assert!(text.contains(&format!("python       {version}")), "{name}: {version} not in the text report");
        }
        for p in r["profiles"].as_array().expect("profiles") {
            let kind = (p["sample_type"][0].as_str().unwrap(), p["sample_type"][1].as_str().unwrap());
            match mode {
                "cpu" => assert_eq!(kind, ("cpu", "nanoseconds"), "{name}"),
                _ => assert_eq!(kind, ("wall", "nanoseconds"), "{name}"),
            }
            period = p["period"].as_u64().expect("a period");
            assert!(p["time_unix_nano"].as_u64().is_some_and(|t| t > 0), "{name}: no start time");
            for s in p["samples"].as_array().expect("samples") {
                // As --folded writes a frame: its separator escaped.
                let frames: Vec<String> =
                    s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().replace(';', "\\x3b")).collect();
                *stacks.entry(frames.join(";")).or_insert(0) += s["value"].as_u64().expect("a value");
                if let (Some(pid), Some(tid)) = (pid, s["attributes"]["thread.id"].as_i64()) {
                    assert!(has_thread(pid, tid), "{name}: thread {tid} is not one of process {pid}'s");
                }
            }
        }
    }
    // --folded counts samples in cpu mode, whole µs in the time modes; OTLP has ns.
    let stacks: BTreeMap<String, u64> = match mode {
        "cpu" => stacks.into_iter().map(|(s, ns)| (s, ns / period)).collect(),
        _ => stacks.into_iter().map(|(s, ns)| (s, (ns + 500) / 1000)).collect(),
    };
    assert_eq!(stacks, want, "{name} ({mode} mode): the decoded stacks differ from --folded's");
    eprintln!("{name} {mode}: {} stacks, {} resources, as --folded", stacks.len(), resources.len());
}

#[test]
fn cpu_samples_as_folded() {
    for name in ["mixed", "killed", "cutoff", "native", "tasks", "gc", "interp"] {
        check(name, "cpu");
    }
}

#[test]
fn wall_time_as_folded() {
    for name in ["offcpu", "tasks", "gc", "interp"] {
        check(name, "wall");
    }
}

/// A real recording of an OpenTelemetry-instrumented service (format 1.10, testdata/recordings/traced-3.12.pyp):
/// each sample that ran in a span carries it as a link whose ids are the ones `--trace-id` selects, and the samples
/// in spans are as many as the text report's Traces section says.
#[test]
fn spans_as_links() {
    let recording = repo().join("testdata/recordings/traced-3.12.pyp");
    let got = decode(&report(&recording, &["--otlp"]));
    let mut per_trace: BTreeMap<String, u64> = BTreeMap::new();
    for r in got["resources"].as_array().expect("resources") {
        for p in r["profiles"].as_array().expect("profiles") {
            let period = p["period"].as_u64().expect("a period");
            for s in p["samples"].as_array().expect("samples") {
                if let Some(link) = s.get("link") {
                    let trace = link[0].as_str().unwrap().to_string();
                    assert_eq!((trace.len(), link[1].as_str().unwrap().len()), (32, 16), "{link}");
                    *per_trace.entry(trace).or_insert(0) += s["value"].as_u64().unwrap() / period;
                }
            }
        }
    }
    let text = String::from_utf8(report(&recording, &[])).expect("UTF-8");
    let in_spans: u64 = per_trace.values().sum();
    assert!(text.contains(&format!("Traces: {in_spans} samples of ")), "{in_spans} samples with links:\n{text}");
    assert!(per_trace.len() >= 10, "{} traces", per_trace.len());
    // Each trace's samples, by --trace-id: the same count.
    for (trace, n) in per_trace.iter().take(5) {
        let folded = String::from_utf8(report(&recording, &["--folded", "--trace-id", trace])).expect("UTF-8");
        let samples: u64 = folded.lines().filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok()).sum();
        assert_eq!(samples, *n, "trace {trace}");
    }
}
