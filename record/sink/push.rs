//! `record --push URL`: continuous profiling. Every `--push-every` seconds the profile of that window goes to a
//! Pyroscope server's HTTP ingest API, while the `.pyp` file (the other sink, see [`super::fanout`]) keeps everything.
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
//! the oldest window is dropped and counted. Every request has one deadline for all of it ([`REQUEST_TIMEOUT`]: name
//! lookup, connection, sending, answer), so a server that trickles its answer byte by byte cannot hold it longer;
//! the name lookup (getaddrinfo, which cannot be cancelled) runs on its own thread and is waited for only until
//! that deadline. At the end of the recording the queue gets [`FINAL_ATTEMPT`] to drain (a signal ends the drain
//! at once); the recording then goes on to its trailer without waiting for the upload thread, and what was not
//! sent is dropped and counted. A 4xx answer (other than 429) will not change on a retry: that window is dropped at
//! once, and the answer is kept for the summary.
//! The counters go into the recording's trailer (`push_windows`, `push_windows_sent`, `push_windows_dropped`,
//! `push_windows_unsent_at_end`, `push_retries`, `push_bytes_sent`) and the summary line.
//!
//! Plain HTTP only (a local Grafana Alloy or Pyroscope agent, or a server inside the cluster); `https://` is
//! refused with a one-line error. Credentials: `http://user:password@host/` (Basic; the password is shown and stored
//! as `***`), or, kept out of the command line (and so out of `ps` and the recording's header), the environment's
//! `PYPERF_PUSH_PASSWORD` (Basic, with the URL's `user@`) or `PYPERF_PUSH_TOKEN` (Bearer), or `--push-auth-file`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pyperf_format::{FrameKind, OffCpuKind, Process, RecorderWarning, Stats, Symbol};
use pyperf_report::names;
use pyperf_report::pprof::{Builder, Label};

use super::{OffCpuSample, Sample, Sink, TrailerCounters};

/// Windows waiting for the upload thread at most; past that the oldest is dropped.
pub const QUEUE_WINDOWS: usize = 16;
/// Time the queue gets to drain at the end of the recording.
pub const FINAL_ATTEMPT: Duration = Duration::from_secs(5);
/// Deadline of one whole request: name lookup, connection, sending and the answer's status line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the end of the recording waits past [`FINAL_ATTEMPT`] for the upload thread to notice its deadline
/// before leaving it behind (its requests are bounded by that deadline already).
const STOP_GRACE: Duration = Duration::from_millis(300);
/// Without an answer in this long at the end, say that pyperf waits for the server (and how to skip it).
const SAY_WAITING_AFTER: Duration = Duration::from_millis(300);
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
    /// The recording has off-CPU intervals (`--off-cpu`): the profiles get an `off_cpu` sample type.
    pub off_cpu: bool,
    /// Wall-clock start of the recording, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The recording host's architecture (names system calls in off-CPU frames).
    pub arch: String,
}

/// Credentials of the push: what the `Authorization` header says. Its `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `user:password`, for Basic authentication.
    Basic(String),
    /// A token, for Bearer authentication.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Basic(_) => f.write_str("Basic(***)"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

impl Auth {
    /// The `Authorization` header's value.
    fn header(&self) -> String {
        match self {
            Auth::Basic(userinfo) => format!("Basic {}", base64(userinfo.as_bytes())),
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
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
    /// The URL's user (`http://user@host` or `http://user:password@host`).
    pub user: Option<String>,
    /// The credentials: the URL's `user:password`, or what [`Endpoint::with_credentials`] found.
    pub auth: Option<Auth>,
}

/// `url` with the password of its `user:password@` shown as `***` (`http://user:***@host`), for everything that
/// stores or prints a URL given to `--push`.
pub fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else { return url.to_string() };
    let rest = &url[scheme_end..];
    // The authority ends where Endpoint::parse ends it, at the first '/': a password with a '?' or '#' in it
    // (`http://u:p#x@h`, which parse accepts and sends) is redacted too.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..scheme_end], &rest[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

/// The command line as the recording's header keeps it: the password of a `--push` URL shown as `***`.
pub fn redacted_command_line(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut push_value = false;
    for a in args {
        if push_value {
            out.push(redacted(a));
            push_value = false;
        } else if let Some(v) = a.strip_prefix("--push=") {
            out.push(format!("--push={}", redacted(v)));
        } else {
            push_value = a == "--push";
            out.push(a.clone());
        }
    }
    out
}

/// Environment variable with the password of the URL's user (Basic authentication).
pub const PASSWORD_ENV: &str = "PYPERF_PUSH_PASSWORD";
/// Environment variable with a token (Bearer authentication).
pub const TOKEN_ENV: &str = "PYPERF_PUSH_TOKEN";
/// Longest credentials file read.
const MAX_AUTH_FILE: u64 = 64 * 1024;

/// A password (base64'd into the header: anything but control characters) or, with `token`, a token (written into
/// the header as it is: visible ASCII only, a line break would end the header).
fn check_secret(what: &str, secret: &str, token: bool) -> Result<()> {
    if secret.is_empty() {
        bail!("{what} is empty");
    }
    let ok = if token { secret.bytes().all(|b| b.is_ascii_graphic()) } else { !secret.chars().any(char::is_control) };
    if !ok {
        bail!("{what} has characters a {} cannot hold", if token { "token" } else { "password" });
    }
    Ok(())
}

impl Endpoint {
    /// Parses `http://[user[:password]@]host[:port][/path]`; the error says what is wrong, in one line (the
    /// password shown as `***`).
    pub fn parse(url: &str) -> Result<Endpoint> {
        let shown = redacted(url);
        let bad = |why: &str| anyhow::anyhow!("--push {shown:?}: {why}");
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
            Some((u, h)) => (Some(u), h),
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
        let (user, auth) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((name, _)) => (Some(name.to_string()), Some(Auth::Basic(u.to_string()))),
                None => (Some(u.to_string()), None),
            },
        };
        Ok(Endpoint { host: host.to_string(), port, prefix: path.trim_end_matches('/').to_string(), user, auth })
    }

    /// Takes the credentials from `--push-auth-file` or the environment (`env` reads a variable): at most one
    /// way of giving them, the URL's password included. The file's first line is `Bearer TOKEN`, `USER:PASSWORD`,
    /// or, with the URL's `user@`, the password alone.
    pub fn with_credentials(
        mut self,
        auth_file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Endpoint> {
        let password = env(PASSWORD_ENV).filter(|v| !v.is_empty());
        let token = env(TOKEN_ENV).filter(|v| !v.is_empty());
        let mut ways = Vec::new();
        if self.auth.is_some() {
            ways.push("a password in the URL");
        }
        if password.is_some() {
            ways.push(PASSWORD_ENV);
        }
        if token.is_some() {
            ways.push(TOKEN_ENV);
        }
        if auth_file.is_some() {
            ways.push("--push-auth-file");
        }
        if ways.len() > 1 {
            bail!("--push: credentials given {} ways ({}); give them one way", ways.len(), ways.join(", "));
        }
        if let Some(p) = password {
            let Some(user) = &self.user else {
                bail!("{PASSWORD_ENV} is set: give the user in the URL, e.g. --push http://USER@host:4040");
            };
            check_secret(PASSWORD_ENV, &p, false)?;
            self.auth = Some(Auth::Basic(format!("{user}:{p}")));
        } else if let Some(t) = token {
            check_secret(TOKEN_ENV, &t, true)?;
            self.auth = Some(Auth::Bearer(t));
        } else if let Some(path) = auth_file {
            let what = format!("--push-auth-file {}", path.display());
            let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{what}: cannot open it: {e}"))?;
            let mut text = String::new();
            file.take(MAX_AUTH_FILE)
                .read_to_string(&mut text)
                .map_err(|e| anyhow::anyhow!("{what}: cannot read it as text: {e}"))?;
            let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
            check_secret(&what, line, false)?;
            self.auth = Some(if let Some(t) = line.strip_prefix("Bearer ") {
                check_secret(&what, t.trim(), true)?;
                Auth::Bearer(t.trim().to_string())
            } else if let Some(user) = &self.user {
                if line.contains(':') {
                    bail!("{what}: the URL names the user already; put only the password in the file");
                }
                Auth::Basic(format!("{user}:{line}"))
            } else if line.contains(':') {
                Auth::Basic(line.to_string())
            } else {
                bail!("{what}: give `USER:PASSWORD` or `Bearer TOKEN` on its first line (or the user in the URL)");
            });
        }
        Ok(self)
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

/// Longest `--app` name, in bytes: Pyroscope's default limit of a label value is 2048 bytes (the name becomes the
/// `service_name` label, and `APP.cpu` the metric name); far more than any real name.
pub const MAX_APP: usize = 1024;
/// Longest label name and value, in bytes (Pyroscope's defaults: 1024 and 2048).
pub const MAX_LABEL_NAME: usize = 1024;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE: usize = 2048;
/// Most `--label`s: Pyroscope refuses a series with more than 30 label names by default, and adds its own
/// (`__name__`, `service_name`, the profile type's, the samples' `pid`/`tid`/`thread`/`gil`).
pub const MAX_LABELS: usize = 15;
/// Label names the push sets itself (the samples' labels) or that Pyroscope derives from the request: a
/// `--label` of that name would clash with them. Names starting with `__` are Pyroscope's (and Prometheus's) too.
const RESERVED_LABELS: &[&str] = &["service_name", "pyroscope_spy", "pid", "tid", "thread", "gil", "process"];

/// Checks a `--label k=v`: Pyroscope's label names are `[a-zA-Z_][a-zA-Z0-9_.]*`, not reserved; values may not hold
/// the characters that delimit the name's tags.
pub fn parse_label(text: &str) -> Result<(String, String)> {
    let shown: String = text.chars().take(40).collect();
    let shown = if shown.len() < text.len() { format!("{shown}...") } else { shown };
    let Some((k, v)) = text.split_once('=') else {
        bail!("--label {shown:?}: give KEY=VALUE, e.g. --label env=staging");
    };
    let mut chars = k.chars();
    let key_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if !key_ok {
        bail!("--label {shown:?}: a label name is letters, digits, _ and . (not starting with a digit)");
    }
    if k.starts_with("__") || RESERVED_LABELS.contains(&k) {
        bail!(
            "--label {shown:?}: {k:?} is a reserved label name (names starting with __, and {}); choose another name",
            RESERVED_LABELS.join(", ")
        );
    }
    if v.is_empty() || v.chars().any(|c| "{},=".contains(c) || c.is_control()) {
        bail!("--label {shown:?}: a label value is not empty and has none of {{ }} , = nor control characters");
    }
    if k.len() > MAX_LABEL_NAME || v.len() > MAX_LABEL_VALUE {
        bail!("--label {shown:?}: at most {MAX_LABEL_NAME} bytes of name and {MAX_LABEL_VALUE} of value");
    }
    Ok((k.to_string(), v.to_string()))
}

/// Checks every `--label` and the set of them: no name twice, at most [`MAX_LABELS`].
pub fn parse_labels(texts: &[String]) -> Result<Vec<(String, String)>> {
    if texts.len() > MAX_LABELS {
        bail!("--label: {} labels, at most {MAX_LABELS} (Pyroscope limits the labels of a series)", texts.len());
    }
    let labels = texts.iter().map(|l| parse_label(l)).collect::<Result<Vec<_>>>()?;
    let mut seen = HashSet::new();
    for (k, _) in &labels {
        if !seen.insert(k.as_str()) {
            bail!("--label {k}=...: the label {k:?} is given twice; give each name once");
        }
    }
    Ok(labels)
}

/// Checks `--app NAME`: the name's prefix, without the characters of the tag syntax, at most [`MAX_APP`] bytes.
pub fn check_app(name: &str) -> Result<()> {
    if name.len() > MAX_APP {
        bail!("--app: a name of {} bytes; give at most {MAX_APP}", name.len());
    }
    if name.is_empty() || name.chars().any(|c| "{},=".contains(c) || c.is_whitespace() || c.is_control()) {
        bail!("--app {name:?}: give a name without spaces and without {{ }} , =, e.g. --app checkout-service");
    }
    Ok(())
}
/// How the drain at the end of the recording ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DrainEnd {
    /// Everything queued was sent or given up on before the deadline.
    #[default]
    Done,
    /// [`FINAL_ATTEMPT`] passed with windows unsent.
    TimedOut,
    /// A signal (Ctrl-C) ended it.
    Interrupted,
}

/// What the upload thread counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushCounts {
    /// Windows the server accepted.
    pub sent: u64,
    /// Windows given up: queue full, refused by the server, or still queued when the final attempt ended.
    pub dropped: u64,
    /// Of `dropped`: windows still unsent when the drain at the end stopped.
    pub unsent_at_end: u64,
    /// How the drain at the end ended.
    pub drain: DrainEnd,
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
    /// Set when the end stops waiting: the thread must stop at once and count nothing more.
    stop: bool,
    /// The upload thread has not returned yet.
    running: bool,
}

struct Uploader {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic of the upload thread must not stop the recording: its state is plain counters and a queue.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Clears [`Shared::running`] when the upload thread returns (or panics), so the end stops waiting for it.
struct Exit<'a>(&'a (Mutex<Shared>, Condvar));

impl Drop for Exit<'_> {
    fn drop(&mut self) {
        lock(&self.0 .0).running = false;
        self.0 .1.notify_all();
    }
}

impl Uploader {
    fn start(target: Target) -> Result<Uploader> {
        let shared = Arc::new((
            Mutex::new(Shared {
                queue: VecDeque::new(),
                counts: PushCounts::default(),
                deadline: None,
                stop: false,
                running: true,
            }),
            Condvar::new(),
        ));
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("pyperf-push".into()).spawn(move || {
            let _exit = Exit(&theirs);
            upload_loop(&theirs, &target, &mut Resolver::new());
        })?;
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

    /// Gives the queue `drain` to empty, less when `interrupted` says so (checked every 50 ms), then leaves the
    /// upload thread behind whatever it is doing (its requests end at that deadline anyway; a name lookup may not,
    /// and the process ends soon after); returns the counts. `waiting` is called once if the drain takes a while,
    /// with the windows still queued.
    fn finish(mut self, drain: Duration, interrupted: &dyn Fn() -> bool, waiting: &mut dyn FnMut(usize)) -> PushCounts {
        let (m, cv) = &*self.shared;
        let start = Instant::now();
        let end = start + drain;
        let mut s = lock(m);
        s.deadline = Some(end);
        cv.notify_all();
        let mut said = false;
        let how = loop {
            if !s.running {
                break DrainEnd::Done;
            }
            if interrupted() {
                break DrainEnd::Interrupted;
            }
            let now = Instant::now();
            if now >= end + STOP_GRACE {
                break DrainEnd::TimedOut;
            }
            if !said && now >= start + SAY_WAITING_AFTER {
                said = true;
                let n = s.queue.len();
                drop(s);
                waiting(n);
                s = lock(m);
                continue;
            }
            let slice = (end + STOP_GRACE - now).min(Duration::from_millis(50));
            s = cv.wait_timeout(s, slice).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        };
        s.stop = true;
        let left = s.queue.len() as u64;
        s.queue.clear();
        s.counts.dropped += left;
        s.counts.unsent_at_end = left;
        s.counts.drain = if how == DrainEnd::Done && left > 0 { DrainEnd::TimedOut } else { how };
        let running = s.running;
        let counts = s.counts.clone();
        drop(s);
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            // Joined only when it has returned already; otherwise it is left to end on its own.
            if !running {
                let _ = t.join();
            }
        }
        counts
    }
}

/// The time one request may take, all of it.
struct Budget {
    until: Instant,
    allowed: Duration,
}

impl Budget {
    fn new(allowed: Duration) -> Budget {
        Budget { until: Instant::now() + allowed, allowed }
    }

    /// What is left, None when nothing is.
    fn left(&self) -> Option<Duration> {
        self.until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }

    fn timed_out(&self, what: &str) -> String {
        let s = self.allowed.as_secs_f64();
        if s < 0.1 {
            // What was left of the drain at the end.
            format!("{what}: timed out after {} ms", self.allowed.as_millis())
        } else if (s - s.round()).abs() < 0.05 {
            format!("{what}: timed out after {s:.0} s")
        } else {
            format!("{what}: timed out after {s:.1} s")
        }
    }
}

/// A name lookup's result.
type Lookup = io::Result<Vec<SocketAddr>>;

/// Name lookups, each on a thread of its own: getaddrinfo cannot be cancelled, and a dead DNS server makes it take
/// some 10 s; a request waits for it only until its deadline. At most one lookup runs: the next request waits for
/// the same one.
struct Resolver {
    lookup: fn(&str, u16) -> Lookup,
    pending: Option<mpsc::Receiver<Lookup>>,
}

impl Resolver {
    fn new() -> Resolver {
        Resolver { lookup: |h, p| (h, p).to_socket_addrs().map(Iterator::collect), pending: None }
    }

    fn resolve(&mut self, host: &str, port: u16, budget: &Budget) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let rx = match self.pending.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = mpsc::channel();
                let (h, lookup) = (host.to_string(), self.lookup);
                std::thread::Builder::new()
                    .name("pyperf-resolve".into())
                    .spawn(move || {
                        let _ = tx.send(lookup(&h, port));
                    })
                    .map_err(|e| format!("cannot resolve {host}: {e}"))?;
                rx
            }
        };
        match rx.recv_timeout(budget.left().unwrap_or_default()) {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.pending = Some(rx);
                Err(budget.timed_out(&format!("cannot resolve {host}")))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("cannot resolve {host}: the lookup failed")),
        }
    }
}

/// What the upload thread needs to make requests.
#[derive(Clone)]
struct Target {
    endpoint: Endpoint,
    name: String,
    sample_rate: Option<u64>,
    /// The `sample_type_config` field's JSON.
    sample_type_config: String,
}

const BOUNDARY: &str = "pyperf-7d3f0a19b2c84e6c";

/// The pprof sample types of the pushed profiles, as (type, unit); the last is the default one (what `go tool pprof`
/// shows), the CPU one as `pyperf report --pprof` has it: `cpu` (samples x period) when the event is a clock, else
/// `samples`. `off_cpu` with `--off-cpu`, before it.
fn sample_types(period_ns: Option<u64>, off_cpu: bool) -> Vec<(&'static str, &'static str)> {
    let off = off_cpu.then_some(("off_cpu", "nanoseconds"));
    match period_ns {
        Some(_) => [Some(("samples", "count")), off, Some(("cpu", "nanoseconds"))].into_iter().flatten().collect(),
        None => [off, Some(("samples", "count"))].into_iter().flatten().collect(),
    }
}

/// Pyroscope's sample type configuration for `types` (docs: "Sample Type Configuration"): `samples` is sampled
/// (the server takes the rate from the profile's period), `cpu` and `off_cpu` are nanoseconds already.
fn sample_type_config(types: &[(&str, &str)]) -> String {
    let entries: Vec<String> = types
        .iter()
        .map(|(t, _)| match *t {
            "samples" => {
                r#""samples":{"units":"samples","aggregation":"sum","display-name":"cpu_samples","sampled":true}"#
                    .to_string()
            }
            other => format!(
                r#""{other}":{{"units":"nanoseconds","aggregation":"sum","display-name":"{other}","sampled":false}}"#
            ),
        })
        .collect();
    format!("{{{}}}", entries.join(","))
}

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
    part(
        &mut body,
        "sample_type_config",
        "sample_type_config.json",
        "application/json",
        t.sample_type_config.as_bytes(),
    );
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
    if let Some(a) = &t.endpoint.auth {
        head.push_str(&format!("Authorization: {}\r\n", a.header()));
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

/// A socket's timeout ran out (Linux says EAGAIN: "Resource temporarily unavailable").
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// One attempt, all of it within `budget`: name lookup, connection, sending, the answer's status line.
fn send(t: &Target, w: &Window, budget: &Budget, resolver: &mut Resolver) -> Sent {
    let addrs = match resolver.resolve(&t.endpoint.host, t.endpoint.port, budget) {
        Ok(a) => a,
        Err(e) => return Sent::Retry(e),
    };
    let mut last = String::from("no address");
    let mut stream = None;
    for a in addrs {
        let Some(left) = budget.left() else {
            last = budget.timed_out("cannot connect");
            break;
        };
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if is_timeout(&e) => last = budget.timed_out("cannot connect"),
            Err(e) => last = format!("cannot connect: {e}"),
        }
    }
    let Some(mut s) = stream else { return Sent::Retry(last) };
    let (head, body) = request(t, w);
    // Each write and read waits at most what is left of the budget: a server taking a byte at a time cannot
    // stretch the request past it.
    for part in [&head, &body] {
        let mut at = 0;
        while at < part.len() {
            let Some(left) = budget.left() else { return Sent::Retry(budget.timed_out("sending failed")) };
            let _ = s.set_write_timeout(Some(left));
            match s.write(&part[at..]) {
                Ok(0) => return Sent::Retry("sending failed: the server closed the connection".to_string()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Sent::Retry(budget.timed_out("sending failed")),
                Err(e) => return Sent::Retry(format!("sending failed: {e}")),
            }
        }
    }
    // The status line is all that matters; the body is read up to a bound and ignored.
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let Some(left) = budget.left() else { return Sent::Retry(budget.timed_out("no answer")) };
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() > 4096 || answer.windows(2).any(|w| w == b"\r\n") {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Sent::Retry(budget.timed_out("no answer")),
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

fn upload_loop(shared: &(Mutex<Shared>, Condvar), target: &Target, resolver: &mut Resolver) {
    let (m, cv) = shared;
    let mut backoff = FIRST_BACKOFF;
    loop {
        // The front window, once there is one (or the end).
        let (from_s, until_s, body, deadline) = {
            let mut s = lock(m);
            loop {
                if s.stop {
                    return;
                }
                if let Some(w) = s.queue.front() {
                    break (w.from_s, w.until_s, w.body.clone(), s.deadline);
                }
                if s.deadline.is_some() {
                    return;
                }
                s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        // The whole request within REQUEST_TIMEOUT, and within the end's deadline once there is one.
        let budget = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Budget::new(left.min(REQUEST_TIMEOUT)),
                _ => return,
            },
            None => Budget::new(REQUEST_TIMEOUT),
        };
        let w = Window { from_s, until_s, body };
        let outcome = send(target, &w, &budget, resolver);
        let mut s = lock(m);
        if s.stop {
            // The end has counted what is left as unsent and gone on.
            return;
        }
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
    /// Taken in the garbage collector: a `[gc]` frame where reports put it.
    gc: bool,
}

/// The frames of a stack (root first) leaf first, as pprof lists locations, with `None` for a `[gc]` frame put
/// before root-first index `gc_at` ([`names::gc_index`]).
fn leaf_first(frames: &[u32], gc_at: Option<usize>) -> Vec<Option<u32>> {
    let mut out: Vec<Option<u32>> = frames.iter().map(|&id| Some(id)).collect();
    if let Some(at) = gc_at.filter(|&at| at <= out.len()) {
        out.insert(at, None);
    }
    out.reverse();
    out
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
        let target = Target {
            endpoint: options.endpoint.clone(),
            name,
            sample_rate: options.sample_rate,
            sample_type_config: sample_type_config(&sample_types(options.period_ns, options.off_cpu)),
        };
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
        let types = sample_types(self.options.period_ns, self.options.off_cpu);
        // The period as `pyperf report --pprof` gives it: CPU time per sample for a clock, else one sample.
        let mut b = match self.options.period_ns {
            Some(p) => Builder::new(&types, ("cpu", "nanoseconds"), p as i64),
            None => Builder::new(&types, ("samples", "count"), 1),
        };
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
            (a.0.pid, a.0.tid, a.0.gil, &a.0.frames, &a.0.reason, a.0.gc).cmp(&(
                b.0.pid,
                b.0.tid,
                b.0.gil,
                &b.0.frames,
                &b.0.reason,
                b.0.gc,
            ))
        });
        let mut locations = Vec::new();
        let mut values = Vec::with_capacity(types.len());
        for (k, &(samples, off_ns)) in keys {
            locations.clear();
            if !k.reason.is_empty() {
                locations.push(b.pseudo_location(&k.reason));
            }
            if k.frames.is_empty() && k.reason.is_empty() {
                locations.push(b.pseudo_location("[idle]"));
            }
            let gc_at = k.gc.then(|| {
                let kind = |id: u32| self.symbols.get(id as usize).map_or(FrameKind::Marker, Symbol::kind);
                names::gc_index(k.frames.iter().map(|&id| kind(id)))
            });
            for frame in leaf_first(&k.frames, gc_at) {
                match frame.map(|id| self.symbols.get(id as usize)) {
                    None => locations.push(b.pseudo_location(names::GC)),
                    Some(Some(sym)) => locations.push(b.location(sym, true)),
                    Some(None) => locations.push(b.pseudo_location("[unknown symbol]")),
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
            values.clear();
            for (t, _) in &types {
                values.push(match *t {
                    "samples" => samples as i64,
                    "off_cpu" => off_ns as i64,
                    _ => (samples as i64).saturating_mul(self.options.period_ns.unwrap_or(0) as i64),
                });
            }
            b.add_sample(&locations, &values, &labels);
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
        // A signal from here on (a Ctrl-C after the one that ended the recording, or the first one after -d)
        // ends the drain at once.
        let signals_before = crate::signals::received();
        let interrupted = || crate::signals::received() > signals_before;
        let drain = FINAL_ATTEMPT;
        let mut waiting = |queued: usize| {
            crate::say!(
                "pyperf: push: waiting up to {} s for {shown} to take the last {queued} window{} (Ctrl-C to skip)",
                drain.as_secs(),
                if queued == 1 { "" } else { "s" }
            );
        };
        let c = self.uploader.finish(drain, &interrupted, &mut waiting);
        let counters = vec![
            ("push_windows".to_string(), windows),
            ("push_windows_sent".to_string(), c.sent),
            ("push_windows_dropped".to_string(), c.dropped),
            ("push_windows_unsent_at_end".to_string(), c.unsent_at_end),
            ("push_retries".to_string(), c.retries),
            ("push_bytes_sent".to_string(), c.bytes),
        ];
        let mut line = format!("pyperf: push: {} of {windows} windows sent to {shown}", c.sent);
        if c.dropped > 0 {
            line.push_str(&format!(", {} dropped", c.dropped));
        }
        if c.unsent_at_end > 0 {
            match c.drain {
                DrainEnd::Interrupted => line.push_str(&format!(
                    " ({} of them unsent: the final {} s drain was interrupted)",
                    c.unsent_at_end,
                    drain.as_secs()
                )),
                _ => line.push_str(&format!(
                    " ({} of them unsent when the final {} s drain ran out)",
                    c.unsent_at_end,
                    drain.as_secs()
                )),
            }
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
        let key = Key {
            pid: s.pid,
            tid: s.tid,
            gil: s.gil.as_u8(),
            frames: s.view().into(),
            reason: String::new(),
            gc: s.in_gc,
        };
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
        let key = Key { pid: s.pid, tid: s.tid, gil: s.gil.as_u8(), frames: s.view().into(), reason, gc: s.in_gc };
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

    fn finish_beside(self: Box<Self>, _stats: &Stats) -> Result<(TrailerCounters, Option<String>)> {
        let (counters, line) = self.close();
        Ok((counters, Some(line)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://localhost:4040").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str(), e.auth), ("localhost", 4040, "", None));
        let e = Endpoint::parse("http://u:p@10.0.0.1/pyroscope/").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str()), ("10.0.0.1", 80, "/pyroscope"));
        assert_eq!((e.user.as_deref(), &e.auth), (Some("u"), &Some(Auth::Basic("u:p".into()))));
        assert!(!format!("{e:?}").contains("u:p"), "{e:?}");
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
        for reserved in ["__name__=x", "__anything=x", "service_name=x", "tid=1", "gil=x", "pid=1", "thread=x"] {
            let e = parse_label(reserved).unwrap_err().to_string();
            assert!(e.contains("reserved label name"), "{reserved}: {e}");
        }
        assert!(parse_label(&format!("k={}", "v".repeat(MAX_LABEL_VALUE + 1))).is_err());
        let twice = parse_labels(&["a=1".into(), "a=2".into()]).unwrap_err().to_string();
        assert!(twice.contains("given twice"), "{twice}");
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("k{i}=v")).collect();
        assert!(parse_labels(&many).is_err());
        assert_eq!(parse_labels(&many[..MAX_LABELS]).unwrap().len(), MAX_LABELS);
        assert!(check_app("svc.api").is_ok());
        assert!(check_app(&"a".repeat(MAX_APP)).is_ok());
        for bad in ["", "a b", "a{", "a,b", &"a".repeat(MAX_APP + 1)] {
            assert!(check_app(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gc_frame_is_placed_leaf_first() {
        assert_eq!(leaf_first(&[1, 2, 3], None), [Some(3), Some(2), Some(1)]);
        assert_eq!(leaf_first(&[1, 2, 3], Some(2)), [Some(3), None, Some(2), Some(1)]);
        assert_eq!(leaf_first(&[1, 2], Some(2)), [None, Some(2), Some(1)]);
        assert_eq!(leaf_first(&[1, 2], Some(0)), [Some(2), Some(1), None]);
        assert_eq!(leaf_first(&[], Some(0)), [None]);
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
            sample_type_config: sample_type_config(&sample_types(Some(1), false)),
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

    fn target(port: u16) -> Target {
        Target {
            endpoint: Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            name: "x{}".into(),
            sample_rate: None,
            sample_type_config: "{}".into(),
        }
    }

    /// A server that never answers costs the recording at most the final attempt.
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
        let up = Uploader::start(target(port)).unwrap();
        for i in 0..(QUEUE_WINDOWS as u64 + 4) {
            up.push(Window { from_s: i, until_s: i + 1, body: vec![0; 10] });
        }
        let t = Instant::now();
        let c = up.finish(FINAL_ATTEMPT, &|| false, &mut |_| {});
        assert!(t.elapsed() < FINAL_ATTEMPT + Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(c.sent, 0);
        assert_eq!(c.dropped, QUEUE_WINDOWS as u64 + 4, "{c:?}");
        assert_eq!((c.unsent_at_end, c.drain), (QUEUE_WINDOWS as u64, DrainEnd::TimedOut), "{c:?}");
    }

    /// A server that answers one byte every 2 s: each request ends at its own deadline (no read timeout ever
    /// fires), and the end of the recording at the drain's, or at once when interrupted.
    #[test]
    fn a_trickling_server_is_bounded_by_the_request_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    while s.write_all(b"H").is_ok() {
                        std::thread::sleep(Duration::from_secs(2));
                    }
                });
            }
        });
        let up = Uploader::start(target(port)).unwrap();
        up.push(Window { from_s: 0, until_s: 1, body: vec![0; 10] });
        // The first attempt fails by its deadline, and the second one starts: wait for that (generous limit).
        let t = Instant::now();
        while connections.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            assert!(t.elapsed() < Duration::from_secs(30), "no second attempt");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(t.elapsed() >= REQUEST_TIMEOUT, "{:?}", t.elapsed());
        let e = lock(&up.shared.0).counts.last_error.clone().unwrap_or_default();
        assert_eq!(e, "no answer: timed out after 3 s");
        // Interrupted: the end does not wait for the drain.
        let t = Instant::now();
        let c = up.finish(FINAL_ATTEMPT, &|| t.elapsed() > Duration::from_millis(200), &mut |_| {});
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!((c.sent, c.dropped, c.unsent_at_end, c.drain), (0, 1, 1, DrainEnd::Interrupted), "{c:?}");
    }

    /// A name lookup that hangs (a dead DNS server) costs a request its deadline only, and one lookup runs at a
    /// time.
    #[test]
    fn a_slow_name_lookup_is_bounded() {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut r = Resolver {
            lookup: |_, _| {
                STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(30));
                Ok(Vec::new())
            },
            pending: None,
        };
        for _ in 0..2 {
            let t = Instant::now();
            let e = r.resolve("pyroscope.example", 4040, &Budget::new(Duration::from_millis(300))).unwrap_err();
            assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
            assert_eq!(e, "cannot resolve pyroscope.example: timed out after 0.3 s");
        }
        assert_eq!(Budget::new(Duration::from_millis(40)).timed_out("x"), "x: timed out after 40 ms");
        assert_eq!(Budget::new(Duration::from_secs(3)).timed_out("x"), "x: timed out after 3 s");
        assert_eq!(STARTED.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(r.resolve("::1", 80, &Budget::new(Duration::ZERO)).unwrap(), vec!["[::1]:80".parse().unwrap()]);
    }

    #[test]
    fn passwords_are_redacted_and_credentials_come_one_way() {
        assert_eq!(redacted("http://u:secret@h:4040/x"), "http://u:***@h:4040/x");
        assert_eq!(redacted("http://u@h"), "http://u@h");
        assert_eq!(redacted("http://h/a@b"), "http://h/a@b");
        assert_eq!(redacted("http://u:p#x@h"), "http://u:***@h");
        assert_eq!(redacted("http://u:p?x@h/y"), "http://u:***@h/y");
        let err = Endpoint::parse("http://u:p#x@h:0").unwrap_err().to_string();
        assert!(!err.contains("p#x"), "{err}");
        let argv: Vec<String> =
            ["pyperf", "record", "--push", "http://u:pw@h", "--push=http://v:pw2@h", "--", "x", "http://w:keep@h"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let shown = redacted_command_line(&argv);
        assert_eq!(shown[3], "http://u:***@h");
        assert_eq!(shown[4], "--push=http://v:***@h");
        assert!(!shown.join(" ").contains("pw"), "{shown:?}");
        let err = Endpoint::parse("http://u:secret@h:0").unwrap_err().to_string();
        assert!(!err.contains("secret") && err.contains("u:***@"), "{err}");

        let none = |_: &str| None;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let url = Endpoint::parse("http://ops@h").unwrap();
        let e = url.clone().with_credentials(None, env(&[(PASSWORD_ENV, "pw")])).unwrap();
        assert_eq!(e.auth, Some(Auth::Basic("ops:pw".into())));
        let e = Endpoint::parse("http://h").unwrap().with_credentials(None, env(&[(TOKEN_ENV, "t0k")])).unwrap();
        assert_eq!(e.auth.unwrap().header(), "Bearer t0k");
        let bare = Endpoint::parse("http://h").unwrap();
        assert!(bare.clone().with_credentials(None, env(&[(PASSWORD_ENV, "pw")])).is_err());
        assert!(bare.clone().with_credentials(None, env(&[(TOKEN_ENV, "a\r\nX: y")])).is_err());
        let both = Endpoint::parse("http://u:p@h").unwrap().with_credentials(None, env(&[(TOKEN_ENV, "t")]));
        assert!(both.unwrap_err().to_string().contains("give them one way"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth");
        for (text, base, want) in [
            ("Bearer abc\n", "http://h", Auth::Bearer("abc".into())),
            ("u:p w\n", "http://h", Auth::Basic("u:p w".into())),
            ("pw\r\n", "http://ops@h", Auth::Basic("ops:pw".into())),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Endpoint::parse(base).unwrap().with_credentials(Some(&file), none).unwrap();
            assert_eq!(e.auth, Some(want), "{text:?}");
        }
        std::fs::write(&file, "justapassword").unwrap();
        assert!(bare.with_credentials(Some(&file), none).is_err());
    }

    #[test]
    fn sample_types_default_to_cpu_and_units_match() {
        assert_eq!(sample_types(Some(10), false), [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!(
            sample_types(Some(10), true),
            [("samples", "count"), ("off_cpu", "nanoseconds"), ("cpu", "nanoseconds")]
        );
        assert_eq!(sample_types(None, false), [("samples", "count")]);
        assert_eq!(sample_types(None, true), [("off_cpu", "nanoseconds"), ("samples", "count")]);
        let c = sample_type_config(&sample_types(Some(10), true));
        assert!(
            c.contains(r#""cpu":{"units":"nanoseconds""#) && c.contains(r#""off_cpu":{"units":"nanoseconds""#),
            "{c}"
        );
    }
}
