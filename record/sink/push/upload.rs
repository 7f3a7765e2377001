//! The upload thread: windows from a bounded queue, one HTTP/1.1 request each, retried with backoff; every
//! request within one deadline (name lookup included); the end drains the queue for a bounded time. See the
//! module docs of [`super`].

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::wire::{self, Sent, Target, Window};

/// Windows waiting for the upload thread at most; past that the oldest is dropped.
pub const QUEUE_WINDOWS: usize = 16;
/// Time the queue gets to drain at the end of the recording.
pub const FINAL_ATTEMPT: Duration = Duration::from_secs(5);
/// Deadline of one whole request: name lookup, connection, sending and the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the end of the recording waits past [`FINAL_ATTEMPT`] for the upload thread to notice its deadline
/// before leaving it behind (its requests are bounded by that deadline already).
const STOP_GRACE: Duration = Duration::from_millis(300);
/// Without an answer in this long at the end, say that pyperf waits for the server (and how to skip it).
const SAY_WAITING_AFTER: Duration = Duration::from_millis(300);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const LAST_BACKOFF: Duration = Duration::from_secs(8);

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
    /// Profiles an accepted window held that the server said it rejected (OTLP's partial success).
    pub rejected: u64,
    /// The last failure, for the summary.
    pub last_error: Option<String>,
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

pub struct Uploader {
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
    pub fn start(target: Target) -> Result<Uploader> {
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

    pub fn push(&self, w: Window) {
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
    pub fn finish(
        mut self,
        drain: Duration,
        interrupted: &dyn Fn() -> bool,
        waiting: &mut dyn FnMut(usize),
    ) -> PushCounts {
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

/// A socket's timeout ran out (Linux says EAGAIN: "Resource temporarily unavailable").
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// One attempt, all of it within `budget`: name lookup, connection, sending, the answer.
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
    let (head, body) = wire::request(t, w);
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
    // The whole answer, up to a bound: gRPC-Web's status and OTLP's partial success are in its body.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Some(left) = budget.left() else { return Sent::Retry(budget.timed_out("no answer")) };
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() > MAX_ANSWER || complete(&answer) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Sent::Retry(budget.timed_out("no answer")),
            Err(e) => return Sent::Retry(format!("no answer: {e}")),
        }
    }
    wire::judge(t.protocol, &parse_answer(&answer))
}

/// Bytes of an answer read at most (the rest is not needed: a status, a short message).
const MAX_ANSWER: usize = 64 * 1024;

/// The end of the head (after its blank line), once there is one.
fn head_end(answer: &[u8]) -> Option<usize> {
    answer.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Whether `answer` holds a whole HTTP answer: its head and the body its `Content-Length` or chunked encoding
/// says (else it ends when the server closes the connection).
fn complete(answer: &[u8]) -> bool {
    let Some(end) = head_end(answer) else { return false };
    let a = parse_answer(&answer[..end]);
    if let Some(len) = a.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        return answer.len() >= end.saturating_add(len);
    }
    if a.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return answer[end..].windows(5).any(|w| w == b"0\r\n\r\n");
    }
    // No body (1xx, 204, 304) or one that ends at the close.
    matches!(a.code, 100..=199 | 204 | 304)
}

/// The status line, headers and body (de-chunked) of an answer.
fn parse_answer(answer: &[u8]) -> wire::Answer {
    let end = head_end(answer).unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("").trim().to_string();
    let code = status_line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw = &answer[end.min(answer.len())..];
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    wire::Answer { status_line, code, headers, body }
}

/// A chunked body's data (as much of it as is there).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&raw[..eol]);
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else { break };
        if n == 0 {
            break;
        }
        let data = &raw[eol + 2..];
        out.extend_from_slice(&data[..n.min(data.len())]);
        if data.len() < n + 2 {
            break;
        }
        raw = &data[n + 2..];
    }
    out
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
            Sent::Ok { rejected, message } => {
                s.counts.sent += 1;
                if rejected > 0 {
                    s.counts.rejected += rejected;
                    s.counts.last_error = Some(format!("the server rejected {rejected} profiles: {message}"));
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::push::{Endpoint, Protocol};

    fn target(port: u16) -> Target {
        Target {
            endpoint: Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            protocol: Protocol::Ingest,
            tenant: None,
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
    fn answers_are_read_whole() {
        let a = b"HTTP/1.1 200 OK\r\nContent-Type: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert!(complete(a));
        assert!(!complete(&a[..a.len() - 3]));
        let p = parse_answer(a);
        assert_eq!((p.code, p.status_line.as_str(), p.body.as_slice()), (200, "HTTP/1.1 200 OK", &b"abcde"[..]));
        assert_eq!(p.headers[0], ("content-type".to_string(), "x".to_string()));
        let b = b"HTTP/1.1 400 Bad\r\nContent-Length: 4\r\n\r\nno";
        assert!(!complete(b));
        assert!(complete(b"HTTP/1.1 204 No\r\n\r\n"));
        assert_eq!(parse_answer(b"HTTP/1.1 400 Bad\r\nContent-Length: 4\r\n\r\nnope").body, b"nope");
        assert_eq!(parse_answer(b"").code, 0);
        assert_eq!(dechunk(b"zz\r\n"), b"");
    }
}
