//! `record --push URL`: continuous profiling. Every `--push-every` seconds the profile of that window goes to a
//! Pyroscope server's HTTP ingest API, while the `.pyp` file (the other sink, see [`super::tee`]) keeps everything.
//!
//! **The request** (Grafana Pyroscope, "Pyroscope server HTTP API", docs/sources/configure-server/
//! about-server-api.md): `POST /ingest?name=APP{k=v,...}&from=UNIX_S&until=UNIX_S&spyName=pyperf&sampleRate=HZ`,
//! with a `multipart/form-data` body holding the gzip'd pprof profile in a form file field named `profile` and a
//! sample type configuration (JSON) in a field named `sample_type_config`, as pyroscope-go's uploader sends it. No
//! `format=` parameter: the server's handler (pkg/ingester/pyroscope/ingest_handler.go) tests `format=pprof` before
//! the multipart content type, and with it takes the whole body for a bare pprof, so the multipart form (and the
//! sample type configuration in it) would not parse. The name is a prefix: the server appends each sample type
//! (`APP.cpu{...}`).
//!
//! **A window** holds the samples (and off-CPU intervals) received while it was open: windows are cut by the
//! recorder's clock when the session flushes (about every half second), so a sample taken just before a cut may
//! fall in the next window. `from`/`until` are the window's wall-clock bounds in seconds, contiguous; a window
//! without samples (nothing ran) is not sent.
//!
//! **A server that is down or slow never blocks the recording.** Windows are encoded on the recording thread
//! (aggregated counts: cheap) and handed to an upload thread through a bounded queue. The upload thread retries a
//! failed window with backoff (0.5 s doubling to 8 s) while newer windows wait behind it; when the queue is full
//! the oldest window is dropped and counted. Every connection, read and write has a timeout. At the end of the
//! recording the queue gets [`FINAL_ATTEMPT`] to drain; what is left is dropped and counted. A 4xx answer (other
//! than 429) will not change on a retry: that window is dropped at once, and the answer is kept for the summary.
//! The counters go into the recording's trailer (`push_windows_sent`, `push_windows_dropped`, `push_retries`,
//! `push_bytes_sent`) and the summary line.
//!
//! Plain HTTP only (a local Grafana Alloy or Pyroscope agent, or a server inside the cluster); `https://` is
//! refused with a one-line error. `http://user:password@host/` sends Basic authentication.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pyperf_format::{OffCpuKind, Process, RecorderWarning, Stats, Symbol};
use pyperf_report::pprof::{Builder, Label};

use super::{OffCpuSample, Sample, Sink};

/// Windows waiting for the upload thread at most; past that the oldest is dropped.
pub const QUEUE_WINDOWS: usize = 16;
/// Time the queue gets to drain at the end of the recording.
pub const FINAL_ATTEMPT: Duration = Duration::from_secs(5);
/// Connect, read and write timeout of one request.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const LAST_BACKOFF: Duration = Duration::from_secs(8);

/// Where and how to push, as `pyperf record` checked it.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// The server.
    pub endpoint: Endpoint,
    /// Window length.
    pub every: Duration,
    /// Application name (the `name` parameter's prefix).
    pub app: String,
    /// Tags of the name (`{k=v,...}`), in order.
    pub labels: Vec<(String, String)>,
    /// Sampling rate in Hz (`sampleRate`), when the event is a clock.
    pub sample_rate: Option<u64>,
    /// Sampling period in ns when the event is a clock: the CPU time one sample stands for.
    pub period_ns: Option<u64>,
    /// Wall-clock start of the recording, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The recording host's architecture (names system calls in off-CPU frames).
    pub arch: String,
}

/// An `http://` URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address, as given (an IPv6 address without brackets).
    pub host: String,
    /// Port (80 when not given).
    pub port: u16,
    /// Path before `/ingest`, without a trailing `/` (empty for the root).
    pub prefix: String,
    /// `user:password` of the URL, for Basic authentication.
    pub userinfo: Option<String>,
}

impl Endpoint {
    /// Parses `http://[user:password@]host[:port][/path]`; the error says what is wrong, in one line.
    pub fn parse(url: &str) -> Result<Endpoint> {
        let bad = |why: &str| anyhow::anyhow!("--push {url:?}: {why}");
        if url.starts_with("https://") {
            return Err(bad(
                "https is not supported; push to a plain http endpoint (a local Grafana Alloy or Pyroscope agent, \
                 or a server reachable over http, e.g. http://localhost:4040)",
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| bad("give an http:// URL, e.g. http://localhost:4040"))?;
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the URL has spaces or control characters"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) {
            return Err(bad("give the server's base URL, without a query (pyperf adds /ingest?...)"));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in the host"))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(bad("unexpected text after the IPv6 address")),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| bad("the port must be 1-65535"))?,
            None => 80,
        };
        Ok(Endpoint { host: host.to_string(), port, prefix: path.trim_end_matches('/').to_string(), userinfo })
    }

    /// `http://host:port` for messages (never the password).
    pub fn shown(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}{}", self.host, self.port, self.prefix)
        } else {
            format!("http://{}:{}{}", self.host, self.port, self.prefix)
        }
    }
}

/// Checks a `--label k=v`: Pyroscope's label names are `[a-zA-Z_][a-zA-Z0-9_.]*`; values may not hold the
/// characters that delimit the name's tags.
pub fn parse_label(text: &str) -> Result<(String, String)> {
    let Some((k, v)) = text.split_once('=') else {
        bail!("--label {text:?}: give KEY=VALUE, e.g. --label env=staging");
    };
    let mut chars = k.chars();
    let key_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !key_ok {
        bail!("--label {text:?}: a label name is letters, digits, _ and . (not starting with a digit)");
    }
    if v.is_empty() || v.chars().any(|c| "{},=".contains(c) || c.is_control()) {
        bail!("--label {text:?}: a label value is not empty and has none of {{ }} , = nor control characters");
    }
    Ok((k.to_string(), v.to_string()))
}

/// Checks `--app NAME`: the name's prefix, without the characters of the tag syntax.
pub fn check_app(name: &str) -> Result<()> {
    if name.is_empty() || name.chars().any(|c| "{},=".contains(c) || c.is_whitespace() || c.is_control()) {
        bail!("--app {name:?}: give a name without spaces and without {{ }} , =, e.g. --app checkout-service");
    }
    Ok(())
}

/// What the upload thread counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushCounts {
    /// Windows the server accepted.
    pub sent: u64,
    /// Windows given up: queue full, refused by the server, or still queued when the final attempt ended.
    pub dropped: u64,
    /// Failed attempts (each retried or dropped).
    pub retries: u64,
    /// Bytes of accepted request bodies.
    pub bytes: u64,
    /// The last failure, for the summary.
    pub last_error: Option<String>,
}

/// One closed window, encoded.
struct Window {
    from_s: u64,
    until_s: u64,
    body: Vec<u8>,
}

struct Shared {
    queue: VecDeque<Window>,
    counts: PushCounts,
    /// Set at the end: send what is queued until then, then stop.
    deadline: Option<Instant>,
}

struct Uploader {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic of the upload thread must not stop the recording: its state is plain counters and a queue.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Uploader {
    fn start(target: Target) -> Result<Uploader> {
        let shared = Arc::new((
            Mutex::new(Shared { queue: VecDeque::new(), counts: PushCounts::default(), deadline: None }),
            Condvar::new(),
        ));
        let theirs = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name("pyperf-push".into()).spawn(move || upload_loop(&theirs, &target))?;
        Ok(Uploader { shared, thread: Some(thread) })
    }

    fn push(&self, w: Window) {
        let (m, cv) = &*self.shared;
        let mut s = lock(m);
        if s.queue.len() >= QUEUE_WINDOWS {
            s.queue.pop_front();
            s.counts.dropped += 1;
            s.counts.last_error.get_or_insert_with(|| "the queue was full".to_string());
        }
        s.queue.push_back(w);
        cv.notify_all();
    }

    /// Gives the queue [`FINAL_ATTEMPT`], then stops the thread; returns the counts.
    fn finish(mut self) -> PushCounts {
        let (m, cv) = &*self.shared;
        lock(m).deadline = Some(Instant::now() + FINAL_ATTEMPT);
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            // Bounded: the thread stops at the deadline, after at most one more request's timeouts.
            let _ = t.join();
        }
        let mut s = lock(m);
        let left = s.queue.len() as u64;
        if left > 0 {
            s.counts.dropped += left;
            s.queue.clear();
        }
        s.counts.clone()
    }
}

/// What the upload thread needs to make requests.
#[derive(Clone)]
struct Target {
    endpoint: Endpoint,
    name: String,
    sample_rate: Option<u64>,
}

const BOUNDARY: &str = "pyperf-7d3f0a19b2c84e6c";

/// Pyroscope's sample type configuration for the types pyperf sends (docs: "Sample Type Configuration").
const SAMPLE_TYPE_CONFIG: &str = r#"{"samples":{"units":"samples","aggregation":"sum","display-name":"cpu_samples","sampled":true},"cpu":{"units":"samples","aggregation":"sum","display-name":"cpu","sampled":true},"off_cpu":{"units":"samples","aggregation":"sum","display-name":"off_cpu","sampled":false}}"#;

fn percent_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The request for one window: head and body.
fn request(t: &Target, w: &Window) -> (Vec<u8>, Vec<u8>) {
    let mut body = Vec::with_capacity(w.body.len() + 1024);
    let part = |body: &mut Vec<u8>, field: &str, file: &str, kind: &str, data: &[u8]| {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{file}\"\r\n\
                 Content-Type: {kind}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    };
    part(&mut body, "profile", "profile.pb.gz", "application/octet-stream", &w.body);
    part(&mut body, "sample_type_config", "sample_type_config.json", "application/json", SAMPLE_TYPE_CONFIG.as_bytes());
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    let mut query = String::from("name=");
    percent_encode(&t.name, &mut query);
    query.push_str(&format!("&from={}&until={}&spyName=pyperf", w.from_s, w.until_s));
    if let Some(hz) = t.sample_rate {
        query.push_str(&format!("&sampleRate={hz}"));
    }
    let host = if t.endpoint.host.contains(':') { format!("[{}]", t.endpoint.host) } else { t.endpoint.host.clone() };
    let mut head = format!(
        "POST {}/ingest?{query} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: pyperf/{}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {}\r\nConnection: close\r\n",
        t.endpoint.prefix,
        t.endpoint.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    if let Some(u) = &t.endpoint.userinfo {
        head.push_str(&format!("Authorization: Basic {}\r\n", base64(u.as_bytes())));
    }
    head.push_str("\r\n");
    (head.into_bytes(), body)
}

/// How one attempt ended.
enum Sent {
    Ok,
    /// Worth retrying: no connection, a timeout, 5xx, 429.
    Retry(String),
    /// The server refused the request itself (4xx): a retry gets the same answer.
    Refused(String),
}

fn send(t: &Target, w: &Window, timeout: Duration) -> Sent {
    let addrs = match (t.endpoint.host.as_str(), t.endpoint.port).to_socket_addrs() {
        Ok(a) => a.collect::<Vec<_>>(),
        Err(e) => return Sent::Retry(format!("cannot resolve {}: {e}", t.endpoint.host)),
    };
    let mut last = String::from("no address");
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect: {e}"),
        }
    }
    let Some(mut s) = stream else { return Sent::Retry(last) };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let (head, body) = request(t, w);
    if let Err(e) = s.write_all(&head).and_then(|()| s.write_all(&body)).and_then(|()| s.flush()) {
        return Sent::Retry(format!("sending failed: {e}"));
    }
    // The status line is all that matters; the body is read up to a bound and ignored.
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() > 4096 || answer.windows(2).any(|w| w == b"\r\n") {
                    break;
                }
            }
            Err(e) => return Sent::Retry(format!("no answer: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&answer);
    let line = line.lines().next().unwrap_or("").trim().to_string();
    let code: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    match code {
        200..=299 => Sent::Ok,
        429 | 500..=599 => Sent::Retry(format!("the server answered {line:?}")),
        400..=499 => Sent::Refused(format!("the server refused a window: {line:?}")),
        _ if line.is_empty() => Sent::Retry("the server closed the connection without an answer".to_string()),
        _ => Sent::Retry(format!("unexpected answer {line:?}")),
    }
}

fn upload_loop(shared: &(Mutex<Shared>, Condvar), target: &Target) {
    let (m, cv) = shared;
    let mut backoff = FIRST_BACKOFF;
    loop {
        // The front window, once there is one (or the end).
        let (from_s, until_s, body, deadline) = {
            let mut s = lock(m);
            loop {
                if let Some(w) = s.queue.front() {
                    break (w.from_s, w.until_s, w.body.clone(), s.deadline);
                }
                if s.deadline.is_some() {
                    return;
                }
                s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        let timeout = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(IO_TIMEOUT),
                _ => return,
            },
            None => IO_TIMEOUT,
        };
        let w = Window { from_s, until_s, body };
        let outcome = send(target, &w, timeout);
        let mut s = lock(m);
        // The window may have been dropped meanwhile (queue full): only the same one is taken off.
        let same = s.queue.front().is_some_and(|f| f.from_s == from_s && f.until_s == until_s);
        match outcome {
            Sent::Ok => {
                s.counts.sent += 1;
                s.counts.bytes += w.body.len() as u64;
                if same {
                    s.queue.pop_front();
                }
                backoff = FIRST_BACKOFF;
            }
            Sent::Refused(e) => {
                s.counts.retries += 1;
                s.counts.dropped += 1;
                s.counts.last_error = Some(e);
                if same {
                    s.queue.pop_front();
                }
            }
            Sent::Retry(e) => {
                s.counts.retries += 1;
                s.counts.last_error = Some(e);
                // Wait before the next attempt, unless the end comes first (it is the final attempt's deadline).
                // New windows arriving do not cut the wait short; the end does (its deadline bounds it).
                let until = Instant::now() + backoff;
                loop {
                    let now = Instant::now();
                    let end = match s.deadline {
                        Some(d) => until.min(d),
                        None => until,
                    };
                    if now >= end {
                        break;
                    }
                    let had_deadline = s.deadline.is_some();
                    s = cv.wait_timeout(s, end - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                    if !had_deadline && s.deadline.is_some() {
                        break;
                    }
                }
                backoff = (backoff * 2).min(LAST_BACKOFF);
            }
        }
    }
}

/// Counts of one window: per (pid, tid, gil, stack, off-CPU reason).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    pid: u32,
    tid: u32,
    gil: u8,
    frames: Box<[u32]>,
    /// The `[off-CPU: ...]` leaf of an interval; empty for a CPU sample.
    reason: String,
}

/// The push sink: see the module docs.
pub struct PushSink {
    options: PushOptions,
    symbols: Vec<Symbol>,
    libraries: Vec<(String, String)>,
    /// The first process's interpreter (path, build id): the profiles' main binary.
    main: Option<(String, String)>,
    comms: HashMap<(u32, u32), String>,
    /// (samples, off-CPU ns) per key in the open window.
    window: HashMap<Key, (u64, u64)>,
    /// Index of the open window (from the recording's start).
    index: u64,
    started: Instant,
    uploader: Uploader,
    samples: u64,
    off_cpu: u64,
    windows: u64,
}

impl PushSink {
    /// Starts the upload thread.
    pub fn new(options: PushOptions) -> Result<PushSink> {
        let mut name = options.app.clone();
        name.push('{');
        name.push_str(&options.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","));
        name.push('}');
        let target = Target { endpoint: options.endpoint.clone(), name, sample_rate: options.sample_rate };
        Ok(PushSink {
            uploader: Uploader::start(target)?,
            options,
            symbols: Vec::new(),
            libraries: Vec::new(),
            main: None,
            comms: HashMap::new(),
            window: HashMap::new(),
            index: 0,
            started: Instant::now(),
            samples: 0,
            off_cpu: 0,
            windows: 0,
        })
    }

    /// Closes every window whose end has passed (the first with what was received; any others are empty).
    fn close_due(&mut self) {
        let every = self.options.every.as_nanos().max(1) as u64;
        let now = self.started.elapsed().as_nanos() as u64;
        while (self.index + 1).saturating_mul(every) <= now {
            self.close_window();
        }
    }

    fn close_window(&mut self) {
        let every = self.options.every.as_nanos().max(1) as u64;
        let from_ns = self.options.start_unix_ns.saturating_add(self.index.saturating_mul(every));
        let until_ns = from_ns.saturating_add(every);
        self.index += 1;
        let counts = std::mem::take(&mut self.window);
        // A window without samples is not sent: the server has no data for that time, which is the truth.
        if counts.is_empty() {
            return;
        }
        let body = self.encode(&counts, from_ns, every);
        self.windows += 1;
        self.uploader.push(Window { from_s: from_ns / 1_000_000_000, until_s: until_ns / 1_000_000_000, body });
    }

    fn encode(&self, counts: &HashMap<Key, (u64, u64)>, from_ns: u64, duration_ns: u64) -> Vec<u8> {
        let period = self.options.period_ns.unwrap_or(0) as i64;
        let mut b = Builder::new(
            &[("samples", "count"), ("cpu", "nanoseconds"), ("off_cpu", "nanoseconds")],
            ("cpu", "nanoseconds"),
            period,
        );
        b.set_time(from_ns as i64, duration_ns as i64);
        match &self.main {
            Some((path, id)) => b.set_main(path, id),
            None => b.set_main("python", ""),
        }
        for (path, id) in &self.libraries {
            b.add_library(path, id);
        }
        // In a fixed order, so that a window's encoding does not depend on the hash map's.
        let mut keys: Vec<(&Key, &(u64, u64))> = counts.iter().collect();
        keys.sort_unstable_by(|a, b| {
            (a.0.pid, a.0.tid, a.0.gil, &a.0.frames, &a.0.reason).cmp(&(
                b.0.pid,
                b.0.tid,
                b.0.gil,
                &b.0.frames,
                &b.0.reason,
            ))
        });
        let mut locations = Vec::new();
        for (k, &(samples, off_ns)) in keys {
            locations.clear();
            if !k.reason.is_empty() {
                locations.push(b.pseudo_location(&k.reason));
            }
            if k.frames.is_empty() && k.reason.is_empty() {
                locations.push(b.pseudo_location("[idle]"));
            }
            for &id in k.frames.iter().rev() {
                match self.symbols.get(id as usize) {
                    Some(sym) => locations.push(b.location(sym, true)),
                    None => locations.push(b.pseudo_location("[unknown symbol]")),
                }
            }
            let thread = self.comms.get(&(k.pid, k.tid)).map(String::as_str).unwrap_or("");
            let gil = pyperf_format::GilState::from_u8(k.gil).key();
            let labels = [
                Label::Num("pid", i64::from(k.pid), ""),
                Label::Num("tid", i64::from(k.tid), ""),
                Label::Str("thread", thread),
                Label::Str("gil", &gil),
            ];
            let cpu = (samples as i64).saturating_mul(period);
            b.add_sample(&locations, &[samples as i64, cpu, off_ns as i64], &labels);
        }
        let mut out = Vec::new();
        // Writing to memory does not fail.
        let _ = b.write_gz(&mut out);
        out
    }

    /// Pushes the last window, gives the queue its final attempt and stops the upload thread; returns the trailer
    /// counters and the summary line.
    pub fn close(mut self) -> (Vec<(String, u64)>, String) {
        self.close_due();
        if !self.window.is_empty() {
            self.close_window();
        }
        let windows = self.windows;
        let shown = self.options.endpoint.shown();
        let c = self.uploader.finish();
        let counters = vec![
            ("push_windows".to_string(), windows),
            ("push_windows_sent".to_string(), c.sent),
            ("push_windows_dropped".to_string(), c.dropped),
            ("push_retries".to_string(), c.retries),
            ("push_bytes_sent".to_string(), c.bytes),
        ];
        let mut line = format!("pyperf: push: {} of {windows} windows sent to {shown}", c.sent);
        if c.dropped > 0 {
            line.push_str(&format!(", {} dropped", c.dropped));
        }
        if c.retries > 0 {
            line.push_str(&format!(", {} failed attempts", c.retries));
        }
        if let (true, Some(e)) = (c.dropped > 0 || c.retries > 0, &c.last_error) {
            line.push_str(&format!(" (last: {e})"));
        }
        (counters, line)
    }
}

impl Sink for PushSink {
    fn process(&mut self, p: &Process) -> Result<()> {
        if self.main.is_none() && !p.interpreter_path.is_empty() {
            self.main = Some((p.interpreter_path.clone(), p.build_id.clone()));
        }
        Ok(())
    }

    fn warning(&mut self, _w: &RecorderWarning) -> Result<()> {
        Ok(())
    }

    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        // Ids are dense and in order (the trait's contract); a gap would only leave names unknown, never wrong.
        if id as usize == self.symbols.len() {
            self.symbols.push(symbol.clone());
        }
    }

    fn library(&mut self, path: &str, build_id: &str) {
        self.libraries.push((path.to_string(), build_id.to_string()));
    }

    fn sample(&mut self, s: &Sample<'_>) {
        self.samples += 1;
        self.comms.entry((s.pid, s.tid)).or_insert_with(|| s.comm.to_string());
        let key = Key { pid: s.pid, tid: s.tid, gil: s.gil.as_u8(), frames: s.frames.into(), reason: String::new() };
        self.window.entry(key).or_default().0 += 1;
    }

    fn start_off_cpu(&mut self, _min_ns: u64) -> Result<()> {
        Ok(())
    }

    fn off_cpu(&mut self, o: &OffCpuSample<'_>) {
        self.off_cpu += 1;
        let s = &o.sample;
        let reason = pyperf_report::names::off_cpu_frame(o.kind, o.syscall, &self.options.arch);
        let reason = if reason.is_empty() && o.kind == OffCpuKind::Runnable { "[off-CPU]".to_string() } else { reason };
        let key = Key { pid: s.pid, tid: s.tid, gil: s.gil.as_u8(), frames: s.frames.into(), reason };
        let e = self.window.entry(key).or_default();
        e.1 = e.1.saturating_add(o.weight_ns);
    }

    fn off_cpu_intervals(&self) -> u64 {
        self.off_cpu
    }

    fn samples(&self) -> u64 {
        self.samples
    }

    fn flush(&mut self) -> Result<()> {
        self.close_due();
        Ok(())
    }

    fn finish(self: Box<Self>, _stats: &Stats) -> Result<Option<String>> {
        Ok(Some(self.close().1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://localhost:4040").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str(), e.userinfo), ("localhost", 4040, "", None));
        let e = Endpoint::parse("http://u:p@10.0.0.1/pyroscope/").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str()), ("10.0.0.1", 80, "/pyroscope"));
        assert_eq!(e.userinfo.as_deref(), Some("u:p"));
        assert_eq!(e.shown(), "http://10.0.0.1:80/pyroscope");
        let e = Endpoint::parse("http://[::1]:4040").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4040));
        for bad in ["https://x", "ftp://x", "http://", "http://h:0", "http://h:99999", "http://h/ingest?x=1", "x"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        assert!(Endpoint::parse("https://x").unwrap_err().to_string().contains("https is not supported"));
    }

    #[test]
    fn labels_and_names() {
        assert_eq!(parse_label("env=staging").unwrap(), ("env".into(), "staging".into()));
        assert_eq!(parse_label("a.b_c=v-1/2").unwrap(), ("a.b_c".into(), "v-1/2".into()));
        for bad in ["env", "=v", "1x=v", "e nv=v", "env=", "env=a,b", "env=a}", "env=a=b"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
        assert!(check_app("svc.api").is_ok());
        for bad in ["", "a b", "a{", "a,b"] {
            assert!(check_app(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn base64_matches_the_rfc_examples() {
        for (i, o) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")]
        {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn the_request_is_the_documented_one() {
        let t = Target {
            endpoint: Endpoint::parse("http://user:pw@example:4040/base").unwrap(),
            name: "app{env=a b}".into(),
            sample_rate: Some(99),
        };
        let (head, body) = request(&t, &Window { from_s: 10, until_s: 20, body: b"PPROF".to_vec() });
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with(
            "POST /base/ingest?name=app%7Benv%3Da%20b%7D&from=10&until=20&spyName=pyperf&sampleRate=99 \
             HTTP/1.1\r\n"
        ));
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(head.contains("Authorization: Basic dXNlcjpwdw==\r\n"));
        let body = String::from_utf8(body).unwrap();
        assert!(body.contains(
            "name=\"profile\"; filename=\"profile.pb.gz\"\r\nContent-Type: application/octet-stream\r\n\r\nPPROF\r\n"
        ));
        assert!(body.contains("name=\"sample_type_config\""));
        assert!(body.ends_with(&format!("--{BOUNDARY}--\r\n")));
    }

    /// A server that never answers costs the recording at most the final attempt (plus one timeout).
    #[test]
    fn a_hanging_server_is_bounded() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _hold = std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming().flatten() {
                held.push(s);
            }
        });
        let target = Target {
            endpoint: Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            name: "x{}".into(),
            sample_rate: None,
        };
        let up = Uploader::start(target).unwrap();
        for i in 0..(QUEUE_WINDOWS as u64 + 4) {
            up.push(Window { from_s: i, until_s: i + 1, body: vec![0; 10] });
        }
        let t = Instant::now();
        let c = up.finish();
        assert!(t.elapsed() < FINAL_ATTEMPT + IO_TIMEOUT + Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(c.sent, 0);
        assert_eq!(c.dropped, QUEUE_WINDOWS as u64 + 4, "{c:?}");
    }
}
