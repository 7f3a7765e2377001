//! `record --push` and `top --push`: continuous profiling to a Pyroscope server's ingest API. No Pyroscope server can be installed
//! here: the tests run a loopback server that implements the documented request (`POST /ingest?name=&from=&until=`,
//! a multipart/form-data body with the gzip'd pprof in the `profile` field), decodes each profile with prost and
//! keeps what arrived. It dispatches as Pyroscope's handler does: `format=pprof` would make the whole body a bare
//! pprof (and a multipart body would fail to parse there), so the server refuses that combination. Real BPF, real Python (pyenv 3.11.7); run as root.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
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
    /// The `Authorization` header, if any.
    auth: String,
    /// The profile's default sample type and each sample type's (type, unit).
    default_type: String,
    types: Vec<(String, String)>,
    /// The gzip'd pprof as sent.
    gz: Vec<u8>,
}

/// How the server behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Answer,
    /// Accepts and never answers.
    Hang,
    /// Accepts and answers one byte every 2 s, never a whole line.
    Trickle,
    /// Closes its first N connections unanswered (a server still starting: each attempt fails whatever the
    /// timing), then answers.
    DownFor(usize),
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
    let (mut length, mut boundary, mut auth) = (0usize, String::new(), String::new());
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
            "authorization" => auth = v.trim().to_string(),
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
        auth,
        default_type: str_of(p.default_sample_type),
        types: p.sample_type.iter().map(|t| (str_of(t.r#type), str_of(t.unit))).collect(),
        gz,
    });
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

/// A loopback server on `port` (0: any) from `after` on; returns its port and what it received.
fn server(listener: TcpListener, mode: Mode) -> Arc<Mutex<Vec<Got>>> {
    server_counting(listener, mode).0
}

/// [`server`], also counting the connections it accepted.
fn server_counting(listener: TcpListener, mode: Mode) -> (Arc<Mutex<Vec<Got>>>, Arc<AtomicUsize>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let (theirs, counted) = (Arc::clone(&got), Arc::clone(&connections));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut s in listener.incoming().flatten() {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            match mode {
                Mode::DownFor(k) if n < k => drop(s),
                Mode::Answer | Mode::DownFor(_) => handle(s, &theirs),
                Mode::Hang => held.push(s),
                Mode::Trickle => {
                    std::thread::spawn(move || {
                        while s.write_all(b"H").is_ok() {
                            std::thread::sleep(Duration::from_secs(2));
                        }
                    });
                }
            }
        }
    });
    (got, connections)
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
    // Every CPU sample of the file was pushed, in one window or another (not the periods stolen by the host).
    let pushed: i64 = got.iter().map(|w| w.samples).sum();
    assert_eq!(pushed as usize, rec.cpu_samples(), "pushed {pushed}, recorded {} (CPU time)", rec.cpu_samples());
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
    // A CPU recording's profile opens on its CPU time (not an all-zero off_cpu), in units that are its values'.
    for w in &got {
        assert_eq!(w.default_type, "cpu", "window from {}", w.from);
        let want = [("samples".into(), "count".into()), ("cpu".into(), "nanoseconds".into())];
        assert_eq!(w.types, want, "window from {}", w.from);
    }
    let busiest = got.iter().max_by_key(|w| w.samples).expect("a window");
    if let Some(top) = go_pprof_top(&busiest.gz) {
        let total = top.lines().find(|l| l.contains(" total")).unwrap_or_else(|| panic!("{top}"));
        assert!(!total.contains("of 0 total"), "go tool pprof shows no samples: {top}");
        assert!(top.contains("heavy"), "{top}");
    }
    assert!(
        stderr.contains(&format!("push: {} of {} windows sent to http://127.0.0.1:{port}", got.len(), got.len())),
        "{stderr}"
    );
}

#[test]
fn a_server_down_for_a_while_gets_the_windows_later() {
    let _g = serial();
    // Its first two connections fail unanswered, whenever they come (a fixed time down would race pyperf's start
    // on a busy machine: no attempt would fail).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let got = server(listener, Mode::DownFor(2));
    let (o, out, _dir, _) = record(port, "5", &[]);
    assert!(o.status.success());
    let rec = read(&out);
    let got = got.lock().unwrap().clone();
    let pushed: i64 = got.iter().map(|w| w.samples).sum();
    assert_eq!(pushed as usize, rec.cpu_samples(), "nothing lost while the server was down");
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
    // The sampler never waited on the network: nothing lost, and the work split is sampled as without --push
    // (heavy is 3/4 of the work; counts, not a rate: a busy machine gives the workload less CPU).
    assert_eq!(stats.lost_samples, 0);
    let heavy = rec.with_frame("heavy").len();
    assert!(heavy * 2 > rec.samples.len() && heavy > 20, "{heavy} heavy samples of {}", rec.samples.len());
    let windows = counter(&rec, "push_windows");
    assert!(windows >= 3);
    assert_eq!(counter(&rec, "push_windows_sent"), 0);
    assert_eq!(counter(&rec, "push_windows_dropped"), windows);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(&format!("push: 0 of {windows} windows sent")) && stderr.contains("dropped"), "{stderr}");
}

#[test]
fn bad_push_flags_are_one_line_errors_before_anything_starts() {
    let huge_app = "a".repeat(100 * 1024);
    for (args, want) in [
        (vec!["--push", "https://h:4040"], "https is not supported"),
        (vec!["--push", "localhost:4040"], "give an http:// URL"),
        (vec!["--push", "http://h", "--push-every", "0"], "--push-every must be between 1 and 3600"),
        (vec!["--push", "http://h", "--label", "env"], "give KEY=VALUE"),
        (vec!["--push", "http://h", "--app", "a b"], "--app"),
        (vec!["--push", "http://h", "--label", "a=1", "--label", "a=2"], "given twice"),
        (vec!["--push", "http://h", "--label", "__name__=x"], "reserved label name"),
        (vec!["--push", "http://h", "--label", "tid=1"], "reserved label name"),
        (vec!["--push", "http://h", "--label", "service_name=x"], "reserved label name"),
        (vec!["--push", "http://h", "--app", huge_app.as_str()], "give at most 1024"),
        (vec!["--push", "http://u:pw@h", "--push-auth-file", "/nonexistent"], "give them one way"),
        (vec!["--push", "http://h", "--push-auth-file", "/nonexistent/auth"], "cannot open it"),
    ] {
        let (_dir, out) = scratch("x.pyp");
        let o = pyperf().arg("record").args(&args).arg("-o").arg(&out).args(["--", "true"]).output().expect("run");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want) && err.trim_end().lines().count() == 1, "{args:?}: {err}");
        assert!(err.len() < 400, "a short line: {err}");
        assert!(!out.exists(), "{args:?} created the output");
    }
}

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `go tool pprof -top` of a gzip'd profile, with its caches in a temporary home; None (after a loud message) when
/// go is missing off CI.
fn go_pprof_top(gz: &[u8]) -> Option<String> {
    let home = tempfile::tempdir().expect("home");
    let file = home.path().join("window.pb.gz");
    std::fs::write(&file, gz).expect("write the profile");
    let out = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&file)
        .env("HOME", home.path())
        .env("GOCACHE", home.path().join("cache"))
        .env("GOPATH", home.path().join("go"))
        .env("PPROF_TMPDIR", home.path())
        .output();
    match out {
        Ok(o) => {
            assert!(o.status.success(), "go tool pprof: {}", String::from_utf8_lossy(&o.stderr));
            Some(String::from_utf8_lossy(&o.stdout).into())
        }
        Err(e) => {
            assert!(!on_ci(), "go tool pprof: {e}: install golang-go (scripts/setup does)");
            eprintln!("SKIPPED: go tool pprof not available ({e}); install golang-go");
            None
        }
    }
}

/// pyperf with stderr read line by line as it comes.
struct Watched {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watched {
    fn spawn(cmd: &mut Command) -> Watched {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start pyperf");
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("pyperf: | {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watched { child, lines, seen: Vec::new() }
    }

    /// Waits (at most `limit`) for a stderr line containing `what`.
    fn line(&mut self, what: &str, limit: Duration) {
        let until = Instant::now() + limit;
        if self.seen.iter().any(|l| l.contains(what)) {
            return;
        }
        while let Ok(line) = self.lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let found = line.contains(what);
            self.seen.push(line);
            if found {
                return;
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("no line with {what:?} within {limit:?}: {:?}", self.seen);
    }

    /// Waits (at most `limit`) for pyperf to exit; returns its status, how long that took and all of its stderr.
    fn wait(&mut self, limit: Duration) -> (ExitStatus, Duration, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let took = start.elapsed();
                // The reading thread ends with the pipe.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(l);
                }
                return (status, took, self.seen.join("\n"));
            }
            if start.elapsed() >= limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("pyperf did not exit within {limit:?} (a hang): {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on the process this test started (still running: not yet waited for).
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

fn trickling_recording(extra: &[&str]) -> (Watched, Arc<AtomicUsize>, Kid, tempfile::TempDir, std::path::PathBuf) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (_got, connections) = server_counting(listener, Mode::Trickle);
    // A Python process to record with `-p`, busy until the test ends it.
    let target = Kid(start_workload(&interpreter("3.11.7"), "split.py", &["60"]));
    let (dir, out) = scratch("trickle.pyp");
    let w = Watched::spawn(
        pyperf()
            .args(["record", "-p", &target.0.id().to_string(), "--push"])
            .arg(format!("http://127.0.0.1:{port}"))
            .args(["--push-every", "1"])
            .args(extra)
            .arg("-o")
            .arg(&out),
    );
    (w, connections, target, dir, out)
}

/// A server that accepts and answers a byte every 2 s (no read timeout ever fires) holds neither the recording
/// nor its end: each request has one deadline, and the end waits for the server 5 s at most; the file is complete.
#[test]
fn a_trickling_server_never_holds_the_end_of_the_recording() {
    let _g = serial();
    let (mut w, connections, _target, _dir, out) = trickling_recording(&["-d", "2"]);
    // 2 s of recording, the 5 s drain, the start (BPF load) and a busy machine's slack; before each request had its
    // own deadline this never ended.
    let (status, took, stderr) = w.wait(Duration::from_secs(45));
    assert!(status.success(), "{stderr}");
    assert!(took < Duration::from_secs(25), "took {took:?}: {stderr}");
    assert!(connections.load(Ordering::SeqCst) >= 1, "the server saw no request");
    let rec = read(&out);
    let stats = rec.tables.stats.clone().expect("a complete file, with its trailer");
    assert_eq!(stats.samples as usize, rec.samples.len());
    assert_eq!(stats.lost_samples, 0);
    assert!(!rec.with_frame("heavy").is_empty(), "{} samples, none in heavy", rec.samples.len());
    assert_eq!(counter(&rec, "push_windows_sent"), 0);
    assert_eq!(counter(&rec, "push_windows_dropped"), counter(&rec, "push_windows"));
    assert!(counter(&rec, "push_windows_unsent_at_end") >= 1);
    assert!(stderr.contains("unsent when the final 5 s drain ran out"), "{stderr}");
    // The last attempt had what was left of the drain, a fraction of a second to 3 s.
    assert!(stderr.contains("(last: no answer: timed out after "), "{stderr}");
    assert!(!stderr.contains("Resource temporarily unavailable"), "{stderr}");
}

/// The drain at the end is waited for only until a signal: Ctrl-C ends the recording (with windows still queued),
/// a second Ctrl-C during the drain ends pyperf at once, with its file complete.
#[test]
fn a_second_ctrl_c_ends_the_drain_at_once() {
    let _g = serial();
    let (mut w, connections, _target, _dir, out) = trickling_recording(&[]);
    // A first request is under way (and trickling), so the last windows will queue behind it.
    let t = Instant::now();
    while connections.load(Ordering::SeqCst) < 1 {
        assert!(t.elapsed() < Duration::from_secs(30), "no request reached the server: {:?}", w.seen);
        std::thread::sleep(Duration::from_millis(20));
    }
    w.signal(libc::SIGINT);
    w.line("Ctrl-C to skip", Duration::from_secs(20));
    w.signal(libc::SIGINT);
    let (status, took, stderr) = w.wait(Duration::from_secs(30));
    assert!(status.success(), "{stderr}");
    // The drain had some 4.7 s left; the file's end and the exit take milliseconds.
    assert!(took < Duration::from_secs(3), "took {took:?} after the second Ctrl-C: {stderr}");
    assert!(stderr.contains("the final 5 s drain was interrupted"), "{stderr}");
    let rec = read(&out);
    assert!(rec.tables.stats.is_some(), "a complete file, with its trailer");
    assert!(counter(&rec, "push_windows_unsent_at_end") >= 1);
}

/// `user:password@` is not stored (the header's command line) nor printed; credentials from the environment or a
/// file never reach the command line and arrive as the Authorization header.
#[test]
fn push_credentials_stay_out_of_the_recording() {
    let _g = serial();
    let py = interpreter("3.11.7");
    let run_with = |url: &str, extra: &[&str], env: &[(&str, &str)]| {
        let (dir, out) = scratch("auth.pyp");
        let mut cmd = pyperf();
        cmd.args(["record", "--push", url, "--push-every", "1"]).args(extra).arg("-o").arg(&out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = run(cmd.arg("--").arg(&py).arg(workload("split.py")).arg("1.5"));
        assert!(o.status.success());
        (o, out, dir)
    };
    let start = || {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        (port, server(listener, Mode::Answer))
    };
    let basic = |userinfo: &str| {
        // RFC 4648 base64 by hand (the test crate has no base64): only for the short strings used here.
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let b = userinfo.as_bytes();
        let mut out = String::from("Basic ");
        for c in b.chunks(3) {
            let n = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for i in 0..4 {
                out.push(if i <= c.len() { T[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        out
    };

    // In the URL: sent, but stored and shown as ***.
    let (port, got) = start();
    let (o, out, _dir) = run_with(&format!("http://alice:s3cret-pw@127.0.0.1:{port}"), &[], &[]);
    let (header, _, _, _) = read_each(&out, |_, _, _| ());
    let line = header.command_line.join(" ");
    assert!(!line.contains("s3cret-pw"), "the password is in the recording: {line}");
    assert!(line.contains(&format!("http://alice:***@127.0.0.1:{port}")), "{line}");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("s3cret-pw"));
    let got = got.lock().unwrap().clone();
    assert!(!got.is_empty());
    assert!(got.iter().all(|w| w.auth == basic("alice:s3cret-pw")), "{:?}", got[0].auth);

    // From the environment: the URL names the user only.
    let (port, got) = start();
    let (_, out, _dir) = run_with(&format!("http://bob@127.0.0.1:{port}"), &[], &[("PYPERF_PUSH_PASSWORD", "env-pw")]);
    let (header, _, _, _) = read_each(&out, |_, _, _| ());
    assert!(!header.command_line.join(" ").contains("env-pw"));
    let got = got.lock().unwrap().clone();
    assert!(!got.is_empty() && got.iter().all(|w| w.auth == basic("bob:env-pw")), "{got:?}");

    // The credentials are pyperf's: the command it starts does not inherit them (its exit status is pyperf's).
    let (port, _got) = start();
    let (_dir, out) = scratch("env.pyp");
    let check = "import os, sys, time\nt = time.process_time() + 0.3\nwhile time.process_time() < t: pass\n\
                 sys.exit(3 if {'PYPERF_PUSH_PASSWORD', 'PYPERF_PUSH_TOKEN'} & set(os.environ) else 0)";
    let o = run(pyperf()
        .args(["record", "--push", &format!("http://bob@127.0.0.1:{port}"), "--push-every", "1", "-o"])
        .arg(&out)
        .env("PYPERF_PUSH_PASSWORD", "env-pw")
        .args(["--", py.to_str().expect("utf-8"), "-c", check]));
    assert!(o.status.success(), "the command saw the credentials: {:?}", o.status);

    // From a file: a Bearer token.
    let (port, got) = start();
    let (keep, file) = scratch("token");
    std::fs::write(&file, "Bearer tok-123\n").expect("write the token file");
    let (_, _, _dir) =
        run_with(&format!("http://127.0.0.1:{port}"), &["--push-auth-file", file.to_str().expect("utf-8")], &[]);
    drop(keep);
    let got = got.lock().unwrap().clone();
    assert!(!got.is_empty() && got.iter().all(|w| w.auth == "Bearer tok-123"), "{got:?}");
}

/// `top --push`: the live view pushes as `record` does (the same plan and fan-out of sinks). Run as a plain table
/// (stdout a pipe) over a started command, until windows holding 50 samples of the workload's hot function have
/// reached the server; then Ctrl-C. The last windows are sent in the final drain, the counters reach `top -o`'s trailer, and
/// the view's last table is printed (the workload's loop first).
#[test]
fn top_pushes_the_windows_of_its_view() {
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let got = server(listener, Mode::Answer);
    let (_dir, out) = scratch("top-push.pyp");
    let mut top = pyperf()
        .args(["top", "-F", "199", "--interval", "0.5", "--push"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--push-every", "1", "--app", "split", "--label", "env=test", "-o"])
        .arg(&out)
        .arg("--")
        .arg(interpreter("3.11.7"))
        .arg(workload("split.py"))
        .arg("120")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pyperf top");
    // Both pipes drained meanwhile, so that pyperf never blocks on a full one.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = r.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(top.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(top.stderr.take().expect("stderr")));
    // Until 50 samples through heavy have reached the server: by then the loop's leaf leads the view's table.
    let heavy = |w: &Got| -> i64 {
        w.stacks.iter().filter(|(names, _)| names.iter().any(|n| n == "heavy")).map(|(_, n)| *n).sum()
    };
    let t = Instant::now();
    while got.lock().unwrap().iter().map(heavy).sum::<i64>() < 50 {
        if t.elapsed() > Duration::from_secs(120) || top.try_wait().expect("wait").is_some() {
            let _ = top.kill();
            let _ = top.wait();
            panic!("no window with heavy reached the server: {}", stderr.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = interrupt(&mut top);
    let (stdout, stderr) = (stdout.join().expect("stdout"), stderr.join().expect("stderr"));
    eprintln!("{stdout}\n{stderr}");
    // pyperf ends the command it started, and exits with its status (a SIGINT'd Python's).
    assert!(status.code().is_some(), "{status:?}: {stderr}");
    let got = got.lock().unwrap().clone();
    for w in &got {
        assert_eq!(w.name, "split{env=test}");
        assert_eq!(w.until, w.from + 1, "{w:?}");
        assert_eq!(w.cpu_ns, w.samples * (1_000_000_000 / 199), "{w:?}");
    }
    assert!(
        stderr.contains(&format!("push: {} of {} windows sent to http://127.0.0.1:{port}", got.len(), got.len())),
        "{stderr}"
    );
    // The file is the recording: its trailer has the push's counters, and every sample it holds was pushed.
    let rec = read(&out);
    assert_eq!(counter(&rec, "push_windows_sent") as usize, got.len());
    let pushed: i64 = got.iter().map(|w| w.samples).sum();
    assert_eq!(pushed as usize, rec.cpu_samples(), "pushed {pushed}, recorded {} (CPU time)", rec.cpu_samples());
    // The last table: since the start, sorted by own time, so the loop's leaf (`burn`, heavy's and light's callee)
    // first, 50 samples or more. Not `heavy` itself: its own time is a sample or none, behind the start-up's
    // one-sample functions (seen on a busy machine: 20 rows without it).
    let last = stdout.rsplit("pyperf top - ").next().unwrap_or_default();
    let first_row = last.lines().find(|l| l.contains(" (") && l.trim_start().starts_with(char::is_numeric));
    assert!(last.contains("since start") && first_row.is_some_and(|r| r.contains(" burn (")), "{last}");
}

/// `top`'s push flags are `record`'s, checked by the same code before anything starts; a usage error names top's
/// own `--help`.
#[test]
fn top_push_flags_are_checked_as_records() {
    for (args, code, want) in [
        (vec!["--push", "https://h:4040"], 1, "https is not supported"),
        (vec!["--push", "http://h", "--push-every", "0"], 1, "--push-every must be between 1 and 3600"),
        (vec!["--push", "http://h", "--label", "tid=1"], 1, "reserved label name"),
        (vec!["--label", "a=1"], 2, "(pyperf top --help)"),
    ] {
        let o = pyperf().arg("top").args(&args).args(["--", "true"]).stdin(Stdio::null()).output().expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want) && err.trim_end().lines().count() == 1, "{args:?}: {err}");
    }
}

/// The loopback receiver of the other protocols (tests/support/push_receiver.py: Python's protobuf runtime and
/// OpenTelemetry's own classes decode what pyperf sends, as the real servers do), in `mode`.
struct Receiver {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn start(mode: &str) -> Receiver {
        // The virtual environment with opentelemetry-proto and protobuf (scripts/setup makes it).
        let venv = std::env::var_os("PYPERF_OTEL_VENV")
            .map_or_else(|| repo().join("target/otel-venv"), std::path::PathBuf::from);
        let python = venv.join("bin/python");
        assert!(python.exists(), "{} is missing: run scripts/setup", python.display());
        let mut child = Command::new(&python)
            .arg(repo().join("tests/support/push_receiver.py"))
            .arg(mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the receiver");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("the receiver's port");
        let port = first.trim().strip_prefix("port ").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
            panic!("the receiver did not start: {first:?}");
        });
        let lines = Arc::new(Mutex::new(Vec::new()));
        let theirs = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
                theirs.lock().unwrap().push(v);
            }
        });
        Receiver { child, port, lines }
    }

    /// What it received, each request's record; none refused.
    fn taken(&self) -> Vec<serde_json::Value> {
        let got = self.lines.lock().unwrap().clone();
        for g in &got {
            assert!(g.get("error").is_none(), "the receiver refused a request: {g}");
        }
        got
    }
}

/// `record` of split.py pushing to `url`.
fn record_to(url: &str, seconds: &str, extra: &[&str]) -> (std::process::Output, Recording) {
    let (_dir, out) = scratch("push.pyp");
    let o = run(pyperf()
        .args(["record", "-F", "199", "--push", url, "--push-every", "1", "--app", "split", "--label", "env=test"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(interpreter("3.11.7"))
        .arg(workload("split.py"))
        .arg(seconds));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = read(&out);
    (o, rec)
}

/// A pushed pprof's summary (push_receiver.py's `pprof`), checked against the recording's settings: the CPU
/// sample type is the default one and cpu = samples x period. Returns its sample count.
fn checked_pprof(p: &serde_json::Value) -> i64 {
    assert_eq!(p["default"], "cpu", "{p}");
    assert_eq!(p["types"], serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"]]), "{p}");
    let (samples, cpu) = (p["totals"][0].as_i64().unwrap(), p["totals"][1].as_i64().unwrap());
    assert_eq!(cpu, samples * (1_000_000_000 / 199), "{p}");
    samples
}

/// The function names of a pushed pprof's stacks that hold `name`, with their sample counts.
fn pprof_samples_in(p: &serde_json::Value, name: &str) -> i64 {
    let samples = p["samples"].as_array().unwrap();
    samples
        .iter()
        .filter(|s| s["stack"].as_array().unwrap().iter().any(|f| f == name))
        .map(|s| s["values"][0].as_i64().unwrap())
        .sum()
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &c)| n | (u32::from(val(c)) << (18 - 6 * i)));
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// `--push-protocol otlp`: each window an `ExportProfilesServiceRequest` that OpenTelemetry's own classes decode, its
/// resource the workload's process with the semantic conventions' attributes and `--app`/`--label`, its `cpu`
/// profile holding every recorded sample (in one window or another), with thread and GIL attributes; the tenant
/// header on every request.
#[test]
fn otlp_windows_hold_the_process_and_its_samples() {
    let _g = serial();
    let r = Receiver::start("answer");
    let url = format!("http://127.0.0.1:{}", r.port);
    let (o, rec) = record_to(&url, "4", &["--push-protocol", "otlp", "--push-tenant", "team-a"]);
    let got = r.taken();
    assert!(got.len() >= 3, "{} requests", got.len());
    let process = &rec.tables.processes[0];
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname").trim().to_string();
    let period = 1_000_000_000 / 199;
    let (mut pushed, mut heavy) = (0i64, 0i64);
    for g in &got {
        assert_eq!((g["protocol"].as_str(), g["tenant"].as_str()), (Some("otlp"), Some("team-a")), "{g}");
        let resources = g["request"]["resources"].as_array().unwrap();
        assert_eq!(resources.len(), 1, "one process: {g}");
        let res = &resources[0];
        let a = &res["attributes"];
        assert_eq!(a["service.name"], "split", "{a}");
        assert_eq!(a["env"], "test", "{a}");
        assert_eq!(a["process.pid"], process.pid, "{a}");
        assert_eq!(a["process.runtime.name"], "cpython", "{a}");
        assert_eq!(a["process.runtime.version"], "3.11.7", "{a}");
        assert_eq!(a["process.executable.path"], process.interpreter_path.as_str(), "{a}");
        assert_eq!(a["host.name"], hostname.as_str(), "{a}");
        assert_eq!(res["scope"][0], "pyperf");
        let profiles = res["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 1, "a CPU recording has one profile per window: {g}");
        let p = &profiles[0];
        assert_eq!(p["sample_type"], serde_json::json!(["cpu", "nanoseconds"]));
        assert_eq!(p["period"], period);
        for s in p["samples"].as_array().unwrap() {
            let v = s["value"].as_i64().unwrap();
            assert_eq!(v % period, 0, "cpu = samples x period: {s}");
            pushed += v / period;
            assert!(s["attributes"]["thread.id"].as_i64().is_some() && s["attributes"]["pyperf.gil"].is_string());
            if s["stack"].as_array().unwrap().iter().any(|f| f.as_str().is_some_and(|f| f.starts_with("heavy ("))) {
                heavy += v / period;
            }
        }
    }
    assert_eq!(pushed as usize, rec.cpu_samples(), "every recorded CPU sample pushed once");
    assert!(heavy > 100, "heavy in {heavy} pushed samples");
    assert_eq!(counter(&rec, "push_windows_sent") as usize, got.len());
    assert_eq!(counter(&rec, "push_profiles_rejected"), 0);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("push: {0} of {0} windows sent to http://127.0.0.1:{1}", got.len(), r.port)),
        "{stderr}"
    );
}

/// An OTLP collector that answers 503, closes every connection unanswered, or never answers: the recording is
/// whole and its windows counted as dropped; one that takes the windows but rejects profiles (a partial success)
/// has them counted.
#[test]
fn otlp_collector_failures_never_touch_the_recording() {
    let _g = serial();
    for mode in ["status:503", "close", "hang", "partial"] {
        let r = Receiver::start(mode);
        let url = format!("otlp+http://127.0.0.1:{}", r.port);
        let (o, rec) = record_to(&url, "2", &[]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!rec.samples.is_empty(), "{mode}: {stderr}");
        assert!(rec.tables.stats.is_some(), "{mode}: the trailer");
        let windows = counter(&rec, "push_windows");
        assert!(windows >= 1, "{mode}");
        let attempts = r.lines.lock().unwrap().len() as u64;
        assert!(attempts >= 1, "{mode}: no request reached the collector");
        if mode == "partial" {
            assert_eq!(counter(&rec, "push_windows_sent"), windows, "{mode}");
            assert_eq!(counter(&rec, "push_profiles_rejected"), windows, "{mode}");
            assert!(stderr.contains("rejected") && stderr.contains("one profile too old"), "{mode}: {stderr}");
        } else {
            assert_eq!(counter(&rec, "push_windows_sent"), 0, "{mode}");
            assert_eq!(counter(&rec, "push_windows_dropped"), windows, "{mode}");
            assert!(counter(&rec, "push_retries") >= 1, "{mode}");
            assert!(stderr.contains(&format!("0 of {windows} windows sent")), "{mode}: {stderr}");
        }
        if mode == "status:503" {
            assert!(stderr.contains("503"), "{stderr}");
        }
    }
}

/// `--push-protocol connect`: Pyroscope's `push.v1.PushRequest`, its series labelled `__name__`, `service_name` and
/// the `--label`s, one pprof per window with a fresh id; every recorded sample pushed; `go tool pprof` opens a
/// window on its CPU time.
#[test]
fn connect_pushes_are_pyroscope_push_requests() {
    let _g = serial();
    let r = Receiver::start("answer");
    let url = format!("http://127.0.0.1:{}", r.port);
    let (_o, rec) = record_to(&url, "4", &["--push-protocol", "connect", "--push-tenant", "team-a"]);
    let got = r.taken();
    assert!(got.len() >= 3, "{} requests", got.len());
    let mut ids = std::collections::HashSet::new();
    let (mut pushed, mut heavy) = (0, 0);
    for g in &got {
        assert_eq!((g["protocol"].as_str(), g["tenant"].as_str()), (Some("connect"), Some("team-a")), "{g}");
        let series = g["series"].as_array().unwrap();
        assert_eq!(series.len(), 1);
        let labels = &series[0]["labels"];
        assert_eq!(labels, &serde_json::json!({"__name__": "process_cpu", "service_name": "split", "env": "test"}));
        let samples = series[0]["samples"].as_array().unwrap();
        assert_eq!(samples.len(), 1);
        let id = samples[0]["id"].as_str().unwrap();
        assert!(id.len() == 36 && id.as_bytes()[14] == b'4', "a version 4 UUID: {id}");
        assert!(ids.insert(id.to_string()), "id {id} twice");
        pushed += checked_pprof(&samples[0]["profile"]);
        heavy += pprof_samples_in(&samples[0]["profile"], "heavy");
    }
    assert_eq!(pushed as usize, rec.cpu_samples(), "every recorded CPU sample pushed once");
    assert!(heavy > 100, "heavy in {heavy} pushed samples");
    let busiest = got
        .iter()
        .map(|g| &g["series"][0]["samples"][0]["profile"])
        .max_by_key(|p| p["totals"][0].as_i64().unwrap())
        .unwrap();
    if let Some(top) = go_pprof_top(&base64_decode(busiest["gz"].as_str().unwrap())) {
        assert!(!top.contains("of 0 total") && top.contains("heavy"), "{top}");
    }
}

/// `parca+http://`: Parca's WriteRaw as gRPC-Web, checked as Parca's normalizer checks it (a `__name__`, Prometheus
/// label names, sequential ids in the pprof); the gRPC status read from the trailer frame.
#[test]
fn parca_writeraw_goes_as_grpc_web() {
    let _g = serial();
    let r = Receiver::start("answer");
    let url = format!("parca+http://127.0.0.1:{}", r.port);
    let (o, rec) = record_to(&url, "3", &[]);
    let got = r.taken();
    assert!(got.len() >= 2, "{} requests", got.len());
    let mut pushed = 0;
    for g in &got {
        assert_eq!(g["protocol"], "parca", "{g}");
        assert_eq!(g["normalized"], true, "{g}");
        let series = &g["series"][0];
        assert_eq!(series["labels"]["__name__"], "process_cpu");
        assert_eq!(series["labels"]["service_name"], "split");
        pushed += checked_pprof(&series["samples"][0]["profile"]);
    }
    assert_eq!(pushed as usize, rec.cpu_samples(), "every recorded CPU sample pushed once");
    assert_eq!(counter(&rec, "push_windows_sent") as usize, got.len());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("failed attempts"), "{stderr}");
    // Parca's label names have no dots: refused before anything starts.
    let o = run(pyperf().args(["record", "--push", &url, "--label", "a.b=c", "--", "true"]));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Parca's label names"), "{o:?}");
}

/// OTLP push of an OpenTelemetry-instrumented service (testdata/workloads/traced.py, the SDK from
/// target/otel-site): the pushed samples that ran in a span carry it as a link, and every linked span is one the
/// service logged.
#[test]
fn otlp_windows_link_samples_to_the_services_spans() {
    let _g = serial();
    let site = otel_site();
    let r = Receiver::start("answer");
    let (_dir, out) = scratch("traced.pyp");
    let url = format!("otlp+http://127.0.0.1:{}", r.port);
    let o = run(pyperf()
        .args(["record", "-F", "499", "--push", &url, "--push-every", "1", "-o"])
        .arg(&out)
        .arg("--")
        .arg(interpreter("3.12.1"))
        .arg(workload("traced.py"))
        .args(["asyncio", "40"])
        .env("PYTHONPATH", &site));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let logged: std::collections::HashSet<(String, String)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a span line");
            (v["trace_id"].as_str().unwrap().to_string(), v["span_id"].as_str().unwrap().to_string())
        })
        .collect();
    let (mut linked, mut all) = (0, 0);
    for g in r.taken() {
        for res in g["request"]["resources"].as_array().unwrap() {
            for p in res["profiles"].as_array().unwrap() {
                for s in p["samples"].as_array().unwrap() {
                    all += 1;
                    if let Some(link) = s.get("link") {
                        let key = (link[0].as_str().unwrap().to_string(), link[1].as_str().unwrap().to_string());
                        assert!(logged.contains(&key), "a pushed link {key:?} is none of the service's spans");
                        linked += 1;
                    }
                }
            }
        }
    }
    assert!(linked >= 20 && linked < all, "{linked} of {all} pushed samples linked");
}
