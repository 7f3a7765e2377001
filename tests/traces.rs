//! Samples linked to traces: a small service instrumented with the OpenTelemetry SDK from PyPI
//! (testdata/workloads/traced.py, the SDK in target/otel-site: scripts/setup) is recorded, as threads and as asyncio
//! tasks each in its own context, on 3.11, 3.12, 3.13 and sid's 3.14 and 3.15: the recorder must find the SDK's
//! context variable and the span class in the process, and the program must read an active span at most samples
//! (the service spends nearly all its CPU time inside spans) and never fail to read one. A process without the SDK
//! gets nothing found and nothing read. Real BPF, real Pythons; run as root.

mod common;

use common::*;

/// The recording's trailer counter `name`.
fn counter(rec: &Recording, name: &str) -> u64 {
    let stats = rec.tables.stats.as_ref().expect("trailer");
    stats.counters.iter().find(|(k, _)| k == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {name}: {stats:?}"))
}

/// The directory with the OpenTelemetry SDK (scripts/setup installs it).
fn otel_site() -> std::path::PathBuf {
    let site =
        std::env::var_os("PYPERF_OTEL_SITE").map_or_else(|| repo().join("target/otel-site"), std::path::PathBuf::from);
    assert!(site.join("opentelemetry/sdk").is_dir(), "{} has no OpenTelemetry SDK: run scripts/setup", site.display());
    site
}

fn check(name: &str) {
    let _g = serial();
    let py = interpreter(name);
    for mode in ["threads", "asyncio"] {
        let (_dir, out) = scratch("traced.pyp");
        let o = run(pyperf()
            .args(["record", "-F", "499", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&py)
            .arg(workload("traced.py"))
            .args([mode, "60"])
            .env("PYTHONPATH", otel_site()));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && stdout.contains("done"), "{name} {mode}: {o:?}");
        let spans = stdout.lines().filter(|l| l.contains("span_id")).count();
        assert!(spans >= 10, "{name} {mode}: {spans} spans");
        let rec = read(&out);
        let samples = rec.samples.len() as u64;
        assert!(samples >= 200, "{name} {mode}: {samples} samples");
        let all = ["trace_processes_found", "trace_span_classes", "trace_span_classes_refused", "bpf_trace_found"]
            .map(|c| format!("{c} {}", counter(&rec, c)))
            .join(", ");
        assert_eq!(counter(&rec, "trace_processes_found"), 1, "{name} {mode}: the SDK's context variable ({all})");
        assert!(counter(&rec, "trace_span_classes") >= 1, "{name} {mode}: {all}");
        assert_eq!(counter(&rec, "bpf_trace_unreadable"), 0, "{name} {mode}: a span that could not be read");
        let found = counter(&rec, "bpf_trace_found");
        // The service's work (`burn`) runs inside spans only. The samples taken before the variable was found (the
        // first tenth of a second: they are read a poll later) have no ids.
        let in_spans = rec.samples.iter().filter(|s| s.names.iter().any(|n| n == "burn")).count() as u64;
        assert!(in_spans >= 100, "{name} {mode}: {in_spans} samples in burn");
        assert!(
            found * 10 >= in_spans * 7 && found <= samples,
            "{name} {mode}: {found} samples with a span, {in_spans} in spans, {samples} in all"
        );
    }
}

per_interpreter! { check:
    python_3_11_7("3.11.7"),
    python_3_12_1("3.12.1"),
    python_3_13_0("3.13.0"),
    python_sid_3_14("sid-3.14"),
    python_sid_3_15("sid-3.15"),
}

/// A process without the SDK: its contexts (asyncio's) are looked at and nothing is found or read.
#[test]
fn nothing_without_the_sdk() {
    let _g = serial();
    let (_dir, out) = scratch("plain.pyp");
    let o = run(pyperf()
        .args(["record", "-F", "499", "-o"])
        .arg(&out)
        .arg("--")
        .arg(interpreter("3.12.1"))
        .arg(workload("traced_plain.py")));
    assert!(o.status.success(), "{o:?}");
    let rec = read(&out);
    assert!(rec.samples.len() >= 100, "{} samples", rec.samples.len());
    assert_eq!(counter(&rec, "trace_processes_found"), 0);
    assert_eq!((counter(&rec, "bpf_trace_found"), counter(&rec, "bpf_trace_unreadable")), (0, 0));
}
