//! `record --push`: continuous profiling to a Pyroscope server's ingest API. No Pyroscope server can be installed
//! here: the tests run a loopback server that implements the documented request (`POST /ingest?name=&from=&until=`,
//! a multipart/form-data body with the gzip'd pprof in the `profile` field), decodes each profile with prost and
//! keeps what arrived. It dispatches as Pyroscope's handler does: `format=pprof` would make the whole body a bare
//! pprof (and a multipart body would fail to parse there), so the server refuses that combination. Real BPF, real Python (pyenv 3.11.7); run as root.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use prost::Message;
use pyperf_report::pprof::proto;

/// One window as the server received it.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    from: u64,
    until: u64,
    format: String,
    /// Sum of the first value (samples) of every sample.
    samples: i64,
    /// Sum of the cpu values (ns).
    cpu_ns: i64,
    /// Leaf-to-root function names of each sample, with its sample count.
    stacks: Vec<(Vec<String>, i64)>,
    /// Label keys seen.
    label_keys: Vec<String>,
}

/// How the server behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Answer,
    /// Accepts and never answers.
    Hang,
}

fn query(target: &str) -> BTreeMap<String, String> {
    let q = target.split_once('?').map(|(_, q)| q).unwrap_or("");
    q.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), percent_decode(v))).collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("hex");
            out.push(u8::from_str_radix(hex, 16).expect("hex"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("utf-8")
}

/// The `profile` part of a multipart body.
fn profile_part(body: &[u8], boundary: &str) -> Vec<u8> {
    let find = |hay: &[u8], needle: &[u8], from: usize| -> Option<usize> {
        hay[from..].windows(needle.len()).position(|w| w == needle).map(|p| p + from)
    };
    let start = find(body, b"name=\"profile\"", 0).expect("a profile field");
    let data = find(body, b"\r\n\r\n", start).expect("part headers") + 4;
    let end = find(body, format!("\r\n--{boundary}").as_bytes(), data).expect("part end");
    body[data..end].to_vec()
}

fn handle(mut s: TcpStream, got: &Mutex<Vec<Got>>) {
    let mut reader = BufReader::new(s.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("request line");
    let target = line.split_whitespace().nth(1).expect("target").to_string();
    assert!(line.starts_with("POST /ingest?"), "{line:?}");
    let (mut length, mut boundary) = (0usize, String::new());
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).expect("header");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').expect("header");
        match k.to_ascii_lowercase().as_str() {
            "content-length" => length = v.trim().parse().expect("length"),
            "content-type" => {
                assert!(v.trim().starts_with("multipart/form-data"), "{v}");
                boundary = v.split("boundary=").nth(1).expect("boundary").trim().to_string();
            }
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    let q = query(&target);
    // Pyroscope tests `format` before the content type: with format=pprof the body is taken as a bare pprof.
    assert!(
        !q.contains_key("format"),
        "format={:?} would make Pyroscope read the multipart body as a bare pprof",
        q.get("format")
    );
    let gz = profile_part(&body, &boundary);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut raw).expect("gzip");
    let p = proto::Profile::decode(&raw[..]).expect("a pprof profile");
    let str_of = |i: i64| p.string_table.get(i as usize).cloned().unwrap_or_default();
    let types: Vec<String> = p.sample_type.iter().map(|t| str_of(t.r#type)).collect();
    let cpu = types.iter().position(|t| t == "cpu");
    let funcs: BTreeMap<u64, String> = p.function.iter().map(|f| (f.id, str_of(f.name))).collect();
    let locs: BTreeMap<u64, Vec<String>> = p
        .location
        .iter()
        .map(|l| (l.id, l.line.iter().map(|ln| funcs.get(&ln.function_id).cloned().unwrap_or_default()).collect()))
        .collect();
    let mut label_keys: Vec<String> = Vec::new();
    let stacks = p
        .sample
        .iter()
        .map(|s| {
            for l in &s.label {
                let k = str_of(l.key);
                if !label_keys.contains(&k) {
                    label_keys.push(k);
                }
            }
            let names = s.location_id.iter().flat_map(|id| locs.get(id).cloned().unwrap_or_default()).collect();
            (names, s.value[0])
        })
        .collect();
    got.lock().unwrap().push(Got {
        name: q.get("name").cloned().unwrap_or_default(),
        from: q["from"].parse().expect("from"),
        until: q["until"].parse().expect("until"),
        format: q.get("format").cloned().unwrap_or_default(),
        samples: p.sample.iter().map(|s| s.value[0]).sum(),
        cpu_ns: cpu.map_or(0, |c| p.sample.iter().map(|s| s.value[c]).sum()),
        stacks,
        label_keys,
    });
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

/// A loopback server on `port` (0: any) from `after` on; returns its port and what it received.
fn server(listener: TcpListener, mode: Mode) -> Arc<Mutex<Vec<Got>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let theirs = Arc::clone(&got);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            match mode {
                Mode::Answer => handle(s, &theirs),
                Mode::Hang => held.push(s),
            }
        }
    });
    got
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn record(
    port: u16,
    seconds: &str,
    extra: &[&str],
) -> (std::process::Output, std::path::PathBuf, tempfile::TempDir, Duration) {
    let py = interpreter("3.11.7");
    let (dir, out) = scratch("push.pyp");
    let url = format!("http://127.0.0.1:{port}");
    let t = Instant::now();
    let o = run(pyperf()
        .args(["record", "-F", "199", "--push", &url, "--push-every", "1", "--app", "split", "--label", "env=test"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(workload("split.py"))
        .arg(seconds));
    let took = t.elapsed();
    (o, out, dir, took)
}

fn counter(rec: &Recording, name: &str) -> u64 {
    let stats = rec.tables.stats.as_ref().expect("trailer");
    stats.counters.iter().find(|(k, _)| k == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {name}: {stats:?}"))
}

#[test]
fn windows_arrive_in_order_and_hold_the_samples() {
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let got = server(listener, Mode::Answer);
    let (o, out, _dir, _) = record(port, "4", &[]);
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    let rec = read(&out);
    let got = got.lock().unwrap().clone();
    assert!(got.len() >= 4, "{} windows", got.len());
    for w in &got {
        assert_eq!(w.name, "split{env=test}");
        assert_eq!(w.format, "", "no format parameter (the multipart body is the pprof form)");
        assert_eq!(w.until, w.from + 1, "{w:?}");
        assert!(w.label_keys.iter().any(|k| k == "tid") && w.label_keys.iter().any(|k| k == "gil"), "{w:?}");
        // cpu = samples x period (1/199 s).
        assert_eq!(w.cpu_ns, w.samples * (1_000_000_000 / 199), "{w:?}");
    }
    // In order and contiguous.
    for pair in got.windows(2) {
        assert_eq!(pair[1].from, pair[0].until, "{:?} then {:?}", pair[0].from, pair[1].from);
    }
    // Every sample of the file was pushed, in one window or another.
    let pushed: i64 = got.iter().map(|w| w.samples).sum();
    assert_eq!(pushed as usize, rec.samples.len(), "pushed {pushed}, recorded {}", rec.samples.len());
    // The workload's hot function, with its callers, leaf first.
    let heavy: i64 = got
        .iter()
        .flat_map(|w| &w.stacks)
        .filter(|(names, _)| names.iter().any(|n| n == "heavy"))
        .map(|(_, n)| n)
        .sum();
    assert!(heavy > 100, "heavy in {heavy} pushed samples");
    assert_eq!(counter(&rec, "push_windows_sent") as usize, got.len());
    assert_eq!(counter(&rec, "push_windows_dropped"), 0);
    assert!(
        stderr.contains(&format!("push: {} of {} windows sent to http://127.0.0.1:{port}", got.len(), got.len())),
        "{stderr}"
    );
}

#[test]
fn a_server_down_for_a_while_gets_the_windows_later() {
    let _g = serial();
    let port = free_port();
    // Nothing listens for the first 2.5 s: connections are refused.
    let got = Arc::new(Mutex::new(None));
    let theirs = Arc::clone(&got);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the same port again");
        *theirs.lock().unwrap() = Some(server(listener, Mode::Answer));
    });
    let (o, out, _dir, _) = record(port, "5", &[]);
    assert!(o.status.success());
    let rec = read(&out);
    let got = got.lock().unwrap().clone().expect("server started");
    let got = got.lock().unwrap().clone();
    let pushed: i64 = got.iter().map(|w| w.samples).sum();
    assert_eq!(pushed as usize, rec.samples.len(), "nothing lost while the server was down");
    for pair in got.windows(2) {
        assert_eq!(pair[1].from, pair[0].until);
    }
    assert!(counter(&rec, "push_retries") > 0);
    assert_eq!(counter(&rec, "push_windows_dropped"), 0);
}

#[test]
fn a_hanging_server_neither_stalls_nor_loses_the_recording() {
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let _got = server(listener, Mode::Hang);
    let (o, out, _dir, took) = record(port, "3", &[]);
    assert!(o.status.success());
    let rec = read(&out);
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    let stats = rec.tables.stats.clone().expect("a complete file, with its trailer");
    // The workload runs 3 s of CPU (longer on a loaded machine: the recording's duration); the push adds at most
    // its final attempt (5 s) and one timeout (3 s); 4 s for pyperf's start and end in a debug build under load.
    let recorded = Duration::from_nanos(stats.duration_ns);
    assert!(took < recorded + Duration::from_secs(12), "took {took:?}, of which {recorded:?} recording");
    assert_eq!(stats.samples as usize, rec.samples.len());
    // The sampler never waited on the network: the work split is sampled as without --push.
    assert!(rec.with_frame("heavy").len() > 300, "{} heavy samples", rec.with_frame("heavy").len());
    let windows = counter(&rec, "push_windows");
    assert!(windows >= 3);
    assert_eq!(counter(&rec, "push_windows_sent"), 0);
    assert_eq!(counter(&rec, "push_windows_dropped"), windows);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(&format!("push: 0 of {windows} windows sent")) && stderr.contains("dropped"), "{stderr}");
}

#[test]
fn bad_push_flags_are_one_line_errors_before_anything_starts() {
    for (args, want) in [
        (vec!["--push", "https://h:4040"], "https is not supported"),
        (vec!["--push", "localhost:4040"], "give an http:// URL"),
        (vec!["--push", "http://h", "--push-every", "0"], "--push-every must be between 1 and 3600"),
        (vec!["--push", "http://h", "--label", "env"], "give KEY=VALUE"),
        (vec!["--push", "http://h", "--app", "a b"], "--app"),
    ] {
        let (_dir, out) = scratch("x.pyp");
        let o = pyperf().arg("record").args(&args).arg("-o").arg(&out).args(["--", "true"]).output().expect("run");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want) && err.trim_end().lines().count() == 1, "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} created the output");
    }
}
