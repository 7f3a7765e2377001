//! Timeline exports (`--gecko`, `--speedscope`) stream with bounded memory: a small crafted file with a million
//! thread ids, and a long recording, exported by the `pyperf-report` binary with its peak RSS (the child's VmHWM)
//! and time measured.

#[path = "support/crafted.rs"]
mod crafted;

use std::path::Path;

use pyperf_report::{write_report, Format, Profile, ReportArgs};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run of the binary took.
struct Run {
    rss_mib: f64,
    seconds: f64,
    stderr: String,
    output: u64,
}

/// The child's peak RSS so far (VmHWM), in KiB; 0 once it has exited.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `pyperf-report FORMAT -i INPUT -o OUTPUT` and measures its peak RSS: the high-water mark of its own
/// address space (VmHWM, read every few ms until it exits). Not wait4's `ru_maxrss`: a child inherits the
/// high-water mark of the process it was forked from (this test's, which made the files), so that would never
/// read lower than the test's own peak.
fn report(format: &str, input: &Path, output: &Path) -> Run {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pyperf-report"))
        .arg(format)
        .arg("-i")
        .arg(input)
        .arg("-o")
        .arg(output)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pyperf-report");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut peak = 0;
    let status = loop {
        // Read before asking whether it exited: the last reading is of a live process.
        peak = peak.max(peak_kib(child.id()));
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seconds = start.elapsed().as_secs_f64();
    let stderr = reader.join().expect("stderr reader");
    assert!(status.success(), "{format} failed ({status}): {stderr}");
    let output = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Run { rss_mib: peak as f64 / 1024.0, seconds, stderr, output }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write recording");
    path
}

/// The file: a million thread ids in a few MB. Each export must stay within 300 MiB (the unbounded
/// versions took 3.5 GB) and a time that a loaded debug build keeps (they took 49 s in release), show a bounded
/// number of threads and say on stderr how many it merged.
#[test]
fn a_million_thread_ids_stay_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = crafted::many_threads(1_000_000);
    let input = write(dir.path(), "threads.pyp", &bytes);
    for format in ["--gecko", "--speedscope"] {
        let output = dir.path().join("out.json");
        let r = report(format, &input, &output);
        eprintln!(
            "{format}: {} bytes in, {:.1} MiB peak RSS, {:.1} s, {} bytes out",
            bytes.len(),
            r.rss_mib,
            r.seconds,
            r.output
        );
        assert!(r.rss_mib < 300.0, "{format}: {:.1} MiB peak RSS", r.rss_mib);
        // Generous: a debug build on a busy machine takes some 80 s.
        assert!(r.seconds < 300.0, "{format}: {:.1} s", r.seconds);
        assert!(r.stderr.contains("other threads"), "{format}: no note of the merged threads: {}", r.stderr);
        // A bounded number of tracks: far from a million.
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&output).expect("read")).expect("JSON");
        let tracks = doc["threads"].as_array().or(doc["profiles"].as_array()).map_or(0, Vec::len);
        assert!((1..=1_000).contains(&tracks), "{format}: {tracks} tracks");
    }
}

/// A long recording of few threads: what an export holds must not grow with the samples. Four times the samples
/// (0.5 M, then 2 M, on 4 threads) may add at most 8 MiB to the peak RSS (the unbounded versions held 13 bytes per
/// sample in the profile, 20 MB more here, and Firefox Profiler's writer some 50 more until the end).
#[test]
fn memory_does_not_grow_with_samples() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = write(dir.path(), "small.pyp", &crafted::many_samples(500_000, 4));
    let large = write(dir.path(), "large.pyp", &crafted::many_samples(2_000_000, 4));
    for format in ["--gecko", "--speedscope"] {
        let output = dir.path().join("out.json");
        let a = report(format, &small, &output);
        let b = report(format, &large, &output);
        eprintln!(
            "{format}: 0.5 M samples {:.1} MiB, {:.1} s ({} bytes out); 2 M samples {:.1} MiB, {:.1} s ({} bytes out)",
            a.rss_mib, a.seconds, a.output, b.rss_mib, b.seconds, b.output
        );
        assert!(b.rss_mib < a.rss_mib + 8.0, "{format}: {:.1} MiB, then {:.1} MiB", a.rss_mib, b.rss_mib);
        // Generous: a debug build on a machine busy with other work took 170 s for twice as many samples.
        assert!(b.seconds < 300.0, "{format}: {:.1} s", b.seconds);
    }
}

/// Exports `bytes` in `format` through the library.
fn export(bytes: &[u8], format: Format) -> Value {
    let args = ReportArgs::with_format(format);
    let profile = Profile::load(bytes, &args.load_options().expect("options")).expect("load");
    let mut out = Vec::new();
    write_report(&args, &profile, &mut out).expect("write");
    serde_json::from_slice(&out).expect("JSON")
}

/// 300 threads: the 256 busiest have a track each, the 44 others share the last one, "other threads", with all
/// their samples; nothing is lost.
#[test]
fn threads_past_the_cap_share_one_track() {
    let bytes = crafted::many_threads(300);
    let doc = export(&bytes, Format::Speedscope);
    let profiles = doc["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 257);
    assert_eq!(profiles[256]["name"], "other threads (44 threads)");
    let busy: usize = profiles
        .iter()
        .map(|p| {
            p["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .filter(|s| s.as_array().is_some_and(|a| !a.is_empty()))
                .count()
        })
        .sum();
    assert!(busy >= 257, "{busy} samples with frames");
    // Threads that ran at once (300 threads, 10 ticks of 1 ms): the merged track's 440 samples laid end to end
    // do not set where the timelines end (440 ms), the recording's 10 ms do.
    let doc = export(&crafted::simultaneous_threads(300, 10), Format::Speedscope);
    let profiles = doc["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 257);
    let ends: Vec<u64> = profiles.iter().map(|p| p["endValue"].as_u64().expect("endValue")).collect();
    assert!(ends.iter().all(|&e| e == 10_000_000), "every timeline ends with the recording: {:?}", &ends[..2]);
    let doc = export(&bytes, Format::Gecko);
    let threads = doc["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 257);
    let total: u64 = threads.iter().map(|t| t["samples"]["length"].as_u64().expect("length")).sum();
    assert_eq!(total, 300, "every sample in some track");
    let other = threads.iter().find(|t| t["name"] == "other threads (44 threads)").expect("other threads");
    assert_eq!(other["samples"]["length"], 44);
    // The thread selected first is a real one.
    let selected = doc["meta"]["initialSelectedThreads"][0].as_u64().expect("selected") as usize;
    assert_eq!(threads[selected]["name"], "thread 1000 (python3)");
}

/// Entries far out of time order (a crafted file) still make tracks in time order.
#[test]
fn entries_far_out_of_order_stay_in_time_order() {
    let bytes = crafted::reversed(5_000);
    let doc = export(&bytes, Format::Gecko);
    let samples = &doc["threads"][0]["samples"];
    assert_eq!(samples["length"], 5_000);
    let deltas = samples["timeDeltas"].as_array().expect("deltas");
    assert!(deltas.iter().all(|d| d.as_f64().is_some_and(|d| d >= 0.0)), "time goes forward");
    let doc = export(&bytes, Format::Speedscope);
    let weights = doc["profiles"][0]["weights"].as_array().expect("weights");
    assert!(weights.iter().all(|w| w.as_u64().is_some()), "no negative weight");
}
