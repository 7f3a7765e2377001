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

mod endpoint;
mod upload;
mod wire;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pyperf_format::{FrameKind, OffCpuKind, Process, RecorderWarning, Stats, Symbol};
use pyperf_report::names;
use pyperf_report::otlp::{self, ProcessInfo, ProfileType, SampleAttributes};
use pyperf_report::pprof::{Builder, Label};

pub use endpoint::{redacted, redacted_command_line, Auth, Endpoint, PASSWORD_ENV, TOKEN_ENV};
use upload::Uploader;
pub use upload::{DrainEnd, PushCounts, FINAL_ATTEMPT, QUEUE_WINDOWS, REQUEST_TIMEOUT};
pub use wire::Protocol;
use wire::{sample_type_config, sample_types, Target, Window};

use super::{OffCpuSample, Sample, Sink, TrailerCounters};

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
    /// The recording host's name (OTLP's `host.name`).
    pub hostname: String,
    /// How windows are sent.
    pub protocol: Protocol,
    /// `--push-tenant`: the `X-Scope-OrgID` header.
    pub tenant: Option<String>,
    /// `--app` was given (OTLP's `service.name` is then `app`, else each process's script).
    pub app_given: bool,
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
const RESERVED_LABELS: &[&str] =
    &["service_name", "pyroscope_spy", "pid", "tid", "thread", "gil", "process", "trace_id", "span_id"];

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
    /// The OpenTelemetry span it ran in.
    span: Option<pyperf_format::SpanLink>,
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
    /// The processes (OTLP's resources), by pid.
    processes: HashMap<u32, Process>,
    /// The series labels of the Connect and Parca pushes.
    series_labels: Vec<wire::proto::LabelPair>,
    /// `--off-cpu-min` (OTLP's off-CPU period).
    off_cpu_min_ns: u64,
}

/// Where the locations of a window's stacks are made: the pprof or the OTLP builder.
trait Locations {
    fn frame(&mut self, symbol: &Symbol) -> u64;
    fn pseudo(&mut self, name: &str) -> u64;
}

impl Locations for Builder {
    fn frame(&mut self, symbol: &Symbol) -> u64 {
        self.location(symbol, true)
    }
    fn pseudo(&mut self, name: &str) -> u64 {
        self.pseudo_location(name)
    }
}

impl Locations for otlp::Builder {
    fn frame(&mut self, symbol: &Symbol) -> u64 {
        self.location(symbol)
    }
    fn pseudo(&mut self, name: &str) -> u64 {
        self.pseudo_location(name)
    }
}

/// A random (version 4) UUID: the id of a Connect push's sample.
fn uuid4() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No random bytes (a kernel before 3.17): the time and the pid keep ids apart well enough.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
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
            protocol: options.protocol,
            tenant: options.tenant.clone(),
            name,
            sample_rate: options.sample_rate,
            sample_type_config: sample_type_config(&sample_types(options.period_ns, options.off_cpu)),
        };
        Ok(PushSink {
            uploader: Uploader::start(target)?,
            series_labels: wire::series_labels(&options.app, &options.labels),
            processes: HashMap::new(),
            off_cpu_min_ns: 0,
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

    /// The body of a window, for the protocol.
    fn encode(&self, counts: &HashMap<Key, (u64, u64)>, from_ns: u64, duration_ns: u64) -> Vec<u8> {
        let profile = if self.options.protocol.is_pprof() {
            self.encode_pprof(counts, from_ns, duration_ns)
        } else {
            self.encode_otlp(counts, from_ns, duration_ns)
        };
        wire::window_body(self.options.protocol, profile, &self.series_labels, &uuid4())
    }

    /// The keys of a window in a fixed order, so that its encoding does not depend on the hash map's.
    fn sorted(counts: &HashMap<Key, (u64, u64)>) -> Vec<(&Key, &(u64, u64))> {
        let mut keys: Vec<(&Key, &(u64, u64))> = counts.iter().collect();
        keys.sort_unstable_by(|a, b| {
            (a.0.pid, a.0.tid, a.0.gil, &a.0.frames, &a.0.reason, a.0.gc, a.0.span).cmp(&(
                b.0.pid,
                b.0.tid,
                b.0.gil,
                &b.0.frames,
                &b.0.reason,
                b.0.gc,
                b.0.span,
            ))
        });
        keys
    }

    /// The locations of a key's stack, leaf first, as every export shows it: the `[off-CPU: ...]` leaf of an
    /// interval, `[idle]` for a sample without frames, `[gc]` where reports put it.
    fn stack<L: Locations>(&self, k: &Key, b: &mut L, locations: &mut Vec<u64>) {
        locations.clear();
        if !k.reason.is_empty() {
            locations.push(b.pseudo(&k.reason));
        }
        if k.frames.is_empty() && k.reason.is_empty() {
            locations.push(b.pseudo("[idle]"));
        }
        let gc_at = k.gc.then(|| {
            let kind = |id: u32| self.symbols.get(id as usize).map_or(FrameKind::Marker, Symbol::kind);
            names::gc_index(k.frames.iter().map(|&id| kind(id)))
        });
        for frame in leaf_first(&k.frames, gc_at) {
            match frame.map(|id| self.symbols.get(id as usize)) {
                None => locations.push(b.pseudo(names::GC)),
                Some(Some(sym)) => locations.push(b.frame(sym)),
                Some(None) => locations.push(b.pseudo("[unknown symbol]")),
            }
        }
    }

    /// A window as an OTLP request (encoded, not yet compressed): a resource per process, a `cpu` profile (or
    /// `samples` when the event is no clock) and with `--off-cpu` an `off_cpu` one.
    fn encode_otlp(&self, counts: &HashMap<Key, (u64, u64)>, from_ns: u64, duration_ns: u64) -> Vec<u8> {
        let cpu = match self.options.period_ns {
            Some(p) => ProfileType { sample: ("cpu", "nanoseconds"), period: p as i64 },
            None => ProfileType { sample: ("samples", "count"), period: 1 },
        };
        let off = ProfileType { sample: ("off_cpu", "nanoseconds"), period: self.off_cpu_min_ns as i64 };
        let mut b = otlp::Builder::new(&[cpu, off], true);
        b.set_time(from_ns, duration_ns);
        b.set_host(&self.options.hostname, &self.options.arch);
        match &self.main {
            Some((path, id)) => b.set_main(path, id),
            None => b.set_main("python", ""),
        }
        for (path, id) in &self.libraries {
            b.add_library(path, id);
        }
        let service = self.options.app_given.then_some(self.options.app.as_str());
        let mut resources: HashMap<u32, usize> = HashMap::new();
        let mut locations = Vec::new();
        for (k, &(samples, off_ns)) in Self::sorted(counts) {
            let resource = *resources.entry(k.pid).or_insert_with(|| {
                let p = self.processes.get(&k.pid);
                let info = ProcessInfo {
                    pid: k.pid,
                    command: p.map_or(&[][..], |p| p.command.as_slice()),
                    interpreter_path: p.map_or("", |p| p.interpreter_path.as_str()),
                    python_version: p.map_or("", |p| p.python_version.as_str()),
                    cgroup: p.map_or("", |p| p.cgroup.as_str()),
                };
                b.add_resource(Some(&info), service, &self.options.labels)
            });
            self.stack(k, &mut b, &mut locations);
            let thread = self.comms.get(&(k.pid, k.tid)).map(String::as_str).unwrap_or("");
            let gil = pyperf_format::GilState::from_u8(k.gil).key();
            let attributes = SampleAttributes { thread: Some((k.tid, thread)), gil: Some(&gil), span: k.span };
            if samples > 0 {
                let value = (samples as i64).saturating_mul(self.options.period_ns.unwrap_or(1) as i64);
                b.add_sample(resource, 0, &locations, value, &attributes);
            }
            if off_ns > 0 {
                b.add_sample(resource, 1, &locations, off_ns as i64, &attributes);
            }
        }
        otlp::encode(&b.finish())
    }

    fn encode_pprof(&self, counts: &HashMap<Key, (u64, u64)>, from_ns: u64, duration_ns: u64) -> Vec<u8> {
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
        let mut locations = Vec::new();
        let mut values = Vec::with_capacity(types.len());
        for (k, &(samples, off_ns)) in Self::sorted(counts) {
            self.stack(k, &mut b, &mut locations);
            let thread = self.comms.get(&(k.pid, k.tid)).map(String::as_str).unwrap_or("");
            let gil = pyperf_format::GilState::from_u8(k.gil).key();
            let ids = k.span.map(|l| (l.trace_hex(), l.span_hex()));
            let mut labels = vec![
                Label::Num("pid", i64::from(k.pid), ""),
                Label::Num("tid", i64::from(k.tid), ""),
                Label::Str("thread", thread),
                Label::Str("gil", &gil),
            ];
            if let Some((trace, span)) = &ids {
                labels.push(Label::Str("trace_id", trace));
                labels.push(Label::Str("span_id", span));
            }
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
        let mut counters = counters;
        if self.options.protocol == Protocol::Otlp {
            counters.push(("push_profiles_rejected".to_string(), c.rejected));
        }
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
        if c.rejected > 0 {
            line.push_str(&format!(", {} profiles rejected by the server", c.rejected));
        }
        if let (true, Some(e)) = (c.dropped > 0 || c.retries > 0 || c.rejected > 0, &c.last_error) {
            line.push_str(&format!(" (last: {e})"));
        }
        (counters, line)
    }
}

impl Sink for PushSink {
    fn process(&mut self, p: &Process) -> Result<()> {
        self.processes.insert(p.pid, p.clone());
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
        // A stolen period is no CPU time: the server's `cpu` profile is the threads' CPU time.
        if s.stolen {
            return;
        }
        self.comms.entry((s.pid, s.tid)).or_insert_with(|| s.comm.to_string());
        let key = Key {
            pid: s.pid,
            tid: s.tid,
            gil: s.gil.as_u8(),
            frames: s.view().into(),
            reason: String::new(),
            gc: s.in_gc,
            span: s.span,
        };
        self.window.entry(key).or_default().0 += 1;
    }

    fn start_off_cpu(&mut self, min_ns: u64) -> Result<()> {
        self.off_cpu_min_ns = min_ns;
        Ok(())
    }

    fn off_cpu(&mut self, o: &OffCpuSample<'_>) {
        self.off_cpu += 1;
        let s = &o.sample;
        let reason = pyperf_report::names::off_cpu_frame(o.kind, o.syscall, &self.options.arch);
        let reason = if reason.is_empty() && o.kind == OffCpuKind::Runnable { "[off-CPU]".to_string() } else { reason };
        let key = Key {
            pid: s.pid,
            tid: s.tid,
            gil: s.gil.as_u8(),
            frames: s.view().into(),
            reason,
            gc: s.in_gc,
            span: s.span,
        };
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
