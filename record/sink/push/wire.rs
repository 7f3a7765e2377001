//! What goes over the wire for each protocol ([`Protocol`]): the body of one window, the request that carries it,
//! and what the answer means. Every protocol is a POST over HTTP/1.1 (no HTTP/2: gRPC goes as gRPC-Web, which
//! Parca's server takes on the same port).
//!
//! - **`ingest`**: Pyroscope's `/ingest` (see [`super`]).
//! - **`connect`**: Pyroscope's Connect API, what Grafana Alloy and the Pyroscope SDKs push with:
//!   `POST /push.v1.PusherService/Push`, `Content-Type: application/proto`, a `push.v1.PushRequest` (api/push/v1/
//!   push.proto) holding one series: labels `__name__` (`process_cpu`), `service_name` (`--app`) and the `--label`s,
//!   and one sample, the window's gzip'd pprof with a random id. An error is a non-2xx status with a JSON body
//!   `{"code": ..., "message": ...}` (Connect's unary protocol).
//! - **`otlp`**: OpenTelemetry's OTLP/HTTP: `POST /v1development/profiles`, `Content-Type: application/x-protobuf`,
//!   `Content-Encoding: gzip`, an `ExportProfilesServiceRequest` (opentelemetry-proto v1.9.0, profiles
//!   `v1development`, built by [`pyperf_report::otlp::Builder`]). A 200 may carry a partial success: the profiles
//!   the collector rejected are counted, with its message. Per the OTLP specification 429, 502, 503 and 504 are
//!   worth a retry; other failures are not.
//! - **`parca`**: Parca's `parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw` as gRPC-Web
//!   (`Content-Type: application/grpc-web+proto`, the message in one length-prefixed frame): one series with
//!   labels `__name__` (`process_cpu`), `service_name` and the `--label`s, and the window's gzip'd pprof. The gRPC
//!   status comes in the headers (a trailers-only answer) or in the trailer frame of the body.
//!
//! `--push-tenant` sends `X-Scope-OrgID` (Pyroscope's and the Collector's multi-tenancy header) with every request.

use std::fmt;

/// One closed window, encoded.
pub struct Window {
    /// Wall-clock bounds, s since the Unix epoch.
    pub from_s: u64,
    pub until_s: u64,
    /// What goes out ([`wire::window_body`]).
    pub body: Vec<u8>,
}

/// How windows are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Pyroscope's `/ingest` (multipart form with the gzip'd pprof).
    #[default]
    Ingest,
    /// Pyroscope's Connect API `/push.v1.PusherService/Push`.
    Connect,
    /// OTLP/HTTP profiles, `/v1development/profiles`.
    Otlp,
    /// Parca's `WriteRaw`, as gRPC-Web.
    Parca,
}

impl Protocol {
    /// Every protocol, as `--push-protocol` names them.
    pub const ALL: [Protocol; 4] = [Protocol::Ingest, Protocol::Connect, Protocol::Otlp, Protocol::Parca];

    /// The name `--push-protocol` takes.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ingest => "ingest",
            Protocol::Connect => "connect",
            Protocol::Otlp => "otlp",
            Protocol::Parca => "parca",
        }
    }

    /// The protocol `--push-protocol NAME` or a `NAME+http://` URL names.
    pub fn named(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The path of its API after the URL's.
    pub fn path(self) -> &'static str {
        match self {
            Protocol::Ingest => "/ingest",
            Protocol::Connect => "/push.v1.PusherService/Push",
            Protocol::Otlp => "/v1development/profiles",
            Protocol::Parca => "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw",
        }
    }

    /// Whether its windows are pprof profiles (else OTLP requests).
    pub fn is_pprof(self) -> bool {
        self != Protocol::Otlp
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Pyroscope's and Parca's messages, written with prost's derive: field numbers and types as in Pyroscope's
/// api/push/v1/push.proto and api/types/v1/types.proto, and Parca's proto/parca/profilestore/v1alpha1/
/// profilestore.proto.
pub mod proto {
    #![allow(missing_docs)]
    /// `push.v1.PushRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }
    /// `push.v1.RawProfileSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawProfileSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }
    /// `types.v1.LabelPair`; Parca's `Label` is the same message.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPair {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    /// `push.v1.RawSample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        #[prost(string, tag = "2")]
        pub id: String,
    }
    /// `parca.profilestore.v1alpha1.WriteRawRequest` (its deprecated `tenant` left out).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRawRequest {
        #[prost(message, repeated, tag = "2")]
        pub series: Vec<ParcaSeries>,
        #[prost(bool, tag = "3")]
        pub normalized: bool,
    }
    /// `parca.profilestore.v1alpha1.RawProfileSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParcaSeries {
        #[prost(message, optional, tag = "1")]
        pub labels: Option<LabelSet>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<ParcaSample>,
    }
    /// `parca.profilestore.v1alpha1.LabelSet`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelSet {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
    }
    /// `parca.profilestore.v1alpha1.RawSample` (no executable infos: pyperf names its frames itself).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParcaSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
    }
}

/// The `__name__` of pushed series: the profile type's name as Go's CPU profiles and Alloy's agents have it.
pub const PROFILE_NAME: &str = "process_cpu";

/// What the upload thread needs to make requests.
#[derive(Clone)]
pub struct Target {
    pub endpoint: super::Endpoint,
    pub protocol: Protocol,
    /// `X-Scope-OrgID`.
    pub tenant: Option<String>,
    /// `/ingest`'s `name` (`APP{k=v,...}`).
    pub name: String,
    pub sample_rate: Option<u64>,
    /// The `sample_type_config` field's JSON.
    pub sample_type_config: String,
}

/// The series labels of the Connect and Parca pushes: `__name__`, `service_name`, then the `--label`s.
pub fn series_labels(app: &str, labels: &[(String, String)]) -> Vec<proto::LabelPair> {
    let pair = |n: &str, v: &str| proto::LabelPair { name: n.to_string(), value: v.to_string() };
    let mut out = vec![pair("__name__", PROFILE_NAME), pair("service_name", app)];
    out.extend(labels.iter().map(|(k, v)| pair(k, v)));
    out
}

/// The body of a window for `protocol`, from its encoded profile (`profile`: a gzip'd pprof, or for OTLP an
/// encoded `ExportProfilesServiceRequest`): what [`request`] sends as it is (for `ingest`, the multipart form is
/// made around it there).
pub fn window_body(protocol: Protocol, profile: Vec<u8>, labels: &[proto::LabelPair], id: &str) -> Vec<u8> {
    match protocol {
        Protocol::Ingest => profile,
        Protocol::Connect => prost::Message::encode_to_vec(&proto::PushRequest {
            series: vec![proto::RawProfileSeries {
                labels: labels.to_vec(),
                samples: vec![proto::RawSample { raw_profile: profile, id: id.to_string() }],
            }],
        }),
        Protocol::Otlp => gzip(&profile),
        Protocol::Parca => {
            let message = prost::Message::encode_to_vec(&proto::WriteRawRequest {
                series: vec![proto::ParcaSeries {
                    labels: Some(proto::LabelSet { labels: labels.to_vec() }),
                    samples: vec![proto::ParcaSample { raw_profile: profile }],
                }],
                normalized: true,
            });
            // gRPC's length-prefixed message: not compressed, length big-endian.
            let mut framed = Vec::with_capacity(message.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
            framed.extend_from_slice(&message);
            framed
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    // Writing to memory does not fail.
    let _ = gz.write_all(bytes);
    gz.finish().unwrap_or_default()
}

const BOUNDARY: &str = "pyperf-7d3f0a19b2c84e6c";

/// The pprof sample types of the pushed profiles, as (type, unit); the last is the default one (what `go tool pprof`
/// shows), the CPU one as `pyperf report --pprof` has it: `cpu` (samples x period) when the event is a clock, else
/// `samples`. `off_cpu` with `--off-cpu`, before it.
pub(super) fn sample_types(period_ns: Option<u64>, off_cpu: bool) -> Vec<(&'static str, &'static str)> {
    let off = off_cpu.then_some(("off_cpu", "nanoseconds"));
    match period_ns {
        Some(_) => [Some(("samples", "count")), off, Some(("cpu", "nanoseconds"))].into_iter().flatten().collect(),
        None => [off, Some(("samples", "count"))].into_iter().flatten().collect(),
    }
}

/// Pyroscope's sample type configuration for `types` (docs: "Sample Type Configuration"): `samples` is sampled
/// (the server takes the rate from the profile's period), `cpu` and `off_cpu` are nanoseconds already.
pub(super) fn sample_type_config(types: &[(&str, &str)]) -> String {
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

/// The request for one window: head and body.
pub fn request(t: &Target, w: &Window) -> (Vec<u8>, Vec<u8>) {
    let (path, content_type, extra, body) = match t.protocol {
        Protocol::Ingest => {
            let (query, body) = ingest(t, w);
            (format!("/ingest?{query}"), format!("multipart/form-data; boundary={BOUNDARY}"), "", body)
        }
        Protocol::Connect => (
            t.protocol.path().to_string(),
            "application/proto".to_string(),
            "Connect-Protocol-Version: 1\r\n",
            w.body.clone(),
        ),
        Protocol::Otlp => (
            t.protocol.path().to_string(),
            "application/x-protobuf".to_string(),
            "Content-Encoding: gzip\r\n",
            w.body.clone(),
        ),
        Protocol::Parca => (
            t.protocol.path().to_string(),
            "application/grpc-web+proto".to_string(),
            "X-Grpc-Web: 1\r\n",
            w.body.clone(),
        ),
    };
    let host = if t.endpoint.host.contains(':') { format!("[{}]", t.endpoint.host) } else { t.endpoint.host.clone() };
    let mut head = format!(
        "POST {}{path} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: pyperf/{}\r\n\
         Content-Type: {content_type}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n",
        t.endpoint.prefix,
        t.endpoint.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    if let Some(a) = &t.endpoint.auth {
        head.push_str(&format!("Authorization: {}\r\n", a.header()));
    }
    if let Some(tenant) = &t.tenant {
        head.push_str(&format!("X-Scope-OrgID: {tenant}\r\n"));
    }
    head.push_str("\r\n");
    (head.into_bytes(), body)
}

/// `/ingest`'s query and multipart body.
fn ingest(t: &Target, w: &Window) -> (String, Vec<u8>) {
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
    (query, body)
}

/// An HTTP answer, as read (the body up to a bound).
#[derive(Debug, Default)]
pub struct Answer {
    /// The status line, trimmed.
    pub status_line: String,
    /// Its status code, 0 when there was none.
    pub code: u16,
    /// Header (lower-case name, value), in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Answer {
    /// The value of header `name` (lower-case), the first if several.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// Taken; the number of profiles the server said it rejected (OTLP's partial success) and its message.
    Ok { rejected: u64, message: String },
    /// Worth retrying: no connection, a timeout, an overloaded or unavailable server.
    Retry(String),
    /// The server refused the request itself: a retry gets the same answer.
    Refused(String),
}

/// A message the server sent, shortened to a line.
fn shown(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let line: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    line.trim().to_string()
}

/// What an answer means for `protocol`.
pub fn judge(protocol: Protocol, a: &Answer) -> Sent {
    if a.status_line.is_empty() {
        return Sent::Retry("the server closed the connection without an answer".to_string());
    }
    let line = &a.status_line;
    let detail = || {
        // Connect's JSON error, a collector's text, an OTLP Status message: enough to say why.
        let text = shown(&a.body);
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    };
    match (protocol, a.code) {
        (Protocol::Parca, 200) => grpc_status(a),
        (Protocol::Otlp, 200..=299) => otlp_partial(&a.body),
        (_, 200..=299) => Sent::Ok { rejected: 0, message: String::new() },
        (Protocol::Otlp, 429 | 502 | 503 | 504) => Sent::Retry(format!("the server answered {line:?}{}", detail())),
        (Protocol::Otlp, 400..=599) => Sent::Refused(format!("the server refused a window: {line:?}{}", detail())),
        (_, 429 | 500..=599) => Sent::Retry(format!("the server answered {line:?}{}", detail())),
        (_, 400..=499) => Sent::Refused(format!("the server refused a window: {line:?}{}", detail())),
        _ => Sent::Retry(format!("unexpected answer {line:?}")),
    }
}

/// OTLP's `ExportProfilesServiceResponse`: a partial success says how many profiles were rejected, and why.
fn otlp_partial(body: &[u8]) -> Sent {
    let r = pyperf_report::otlp::decode_response(body);
    Sent::Ok { rejected: r.0, message: r.1 }
}

/// gRPC status codes worth a retry: UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED.
const GRPC_RETRY: [u32; 4] = [14, 8, 4, 10];

/// The gRPC-Web answer's status: in the headers (trailers-only), else in the trailer frame (flag 0x80) of the body.
fn grpc_status(a: &Answer) -> Sent {
    let mut status = a.header("grpc-status").map(str::to_string);
    let mut message = a.header("grpc-message").map(str::to_string);
    let mut at = 0;
    while status.is_none() && at + 5 <= a.body.len() {
        let flag = a.body[at];
        let len = u32::from_be_bytes([a.body[at + 1], a.body[at + 2], a.body[at + 3], a.body[at + 4]]) as usize;
        let frame = &a.body[at + 5..(at + 5).saturating_add(len).min(a.body.len())];
        if flag & 0x80 != 0 {
            for line in String::from_utf8_lossy(frame).split("\r\n") {
                if let Some((k, v)) = line.split_once(':') {
                    match k.trim().to_ascii_lowercase().as_str() {
                        "grpc-status" => status = Some(v.trim().to_string()),
                        "grpc-message" => message = Some(v.trim().to_string()),
                        _ => {}
                    }
                }
            }
        }
        at = at.saturating_add(5 + len);
    }
    let message = message.map(|m| shown(percent_decode(&m).as_bytes())).unwrap_or_default();
    match status.as_deref().map(str::parse::<u32>) {
        Some(Ok(0)) => Sent::Ok { rejected: 0, message: String::new() },
        Some(Ok(code)) if GRPC_RETRY.contains(&code) => {
            Sent::Retry(format!("the server answered gRPC status {code}: {message}"))
        }
        Some(Ok(code)) => Sent::Refused(format!("the server refused a window: gRPC status {code}: {message}")),
        _ => Sent::Retry("the server's answer has no gRPC status".to_string()),
    }
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if let (b'%', Some(&h), Some(&l)) = (b[i], b.get(i + 1), b.get(i + 2)) {
            if let (Some(h), Some(l)) = (hex(h), hex(l)) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::push::Endpoint;

    #[test]
    fn the_request_is_the_documented_one() {
        let t = Target {
            endpoint: Endpoint::parse("http://user:pw@example:4040/base").unwrap(),
            protocol: Protocol::Ingest,
            tenant: None,
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

    fn answer(code: u16, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        Answer {
            status_line: format!("HTTP/1.1 {code} X"),
            code,
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn each_protocol_has_its_request() {
        let mut t = Target {
            endpoint: Endpoint::parse("http://h:4318/base").unwrap(),
            protocol: Protocol::Otlp,
            tenant: Some("team-a".into()),
            name: String::new(),
            sample_rate: None,
            sample_type_config: String::new(),
        };
        let labels = series_labels("svc", &[("env".into(), "prod".into())]);
        for (p, path, kind) in [
            (Protocol::Otlp, "/base/v1development/profiles", "application/x-protobuf"),
            (Protocol::Connect, "/base/push.v1.PusherService/Push", "application/proto"),
            (
                Protocol::Parca,
                "/base/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw",
                "application/grpc-web+proto",
            ),
        ] {
            t.protocol = p;
            let body = window_body(p, b"PROFILE".to_vec(), &labels, "id-1");
            let (head, sent) = request(&t, &Window { from_s: 1, until_s: 2, body: body.clone() });
            let head = String::from_utf8(head).unwrap();
            assert!(head.starts_with(&format!("POST {path} HTTP/1.1\r\n")), "{head}");
            assert!(head.contains(&format!("Content-Type: {kind}\r\n")), "{head}");
            assert!(head.contains("X-Scope-OrgID: team-a\r\n"), "{head}");
            assert_eq!(sent, body);
        }
        // OTLP: gzip'd; Connect: a PushRequest; Parca: one uncompressed gRPC frame of a WriteRawRequest.
        assert_eq!(&window_body(Protocol::Otlp, b"x".to_vec(), &labels, "")[..2], &[0x1f, 0x8b]);
        let c = window_body(Protocol::Connect, b"PROFILE".to_vec(), &labels, "id-1");
        let c = <proto::PushRequest as prost::Message>::decode(&c[..]).unwrap();
        assert_eq!(c.series[0].samples[0].raw_profile, b"PROFILE");
        assert_eq!(c.series[0].samples[0].id, "id-1");
        let names: Vec<_> = c.series[0].labels.iter().map(|l| (l.name.as_str(), l.value.as_str())).collect();
        assert_eq!(names, [("__name__", PROFILE_NAME), ("service_name", "svc"), ("env", "prod")]);
        let f = window_body(Protocol::Parca, b"PROFILE".to_vec(), &labels, "");
        assert_eq!(f[0], 0);
        assert_eq!(u32::from_be_bytes([f[1], f[2], f[3], f[4]]) as usize, f.len() - 5);
        let w = <proto::WriteRawRequest as prost::Message>::decode(&f[5..]).unwrap();
        assert_eq!(w.series[0].samples[0].raw_profile, b"PROFILE");
        assert_eq!(w.series[0].labels.as_ref().unwrap().labels.len(), 3);
    }

    #[test]
    fn answers_are_judged_per_protocol() {
        let ok = Sent::Ok { rejected: 0, message: String::new() };
        assert_eq!(judge(Protocol::Connect, &answer(200, &[], b"")), ok);
        assert!(matches!(judge(Protocol::Connect, &answer(503, &[], b"")), Sent::Retry(_)));
        let e = judge(Protocol::Connect, &answer(400, &[], br#"{"code":"invalid_argument","message":"no name"}"#));
        assert!(matches!(&e, Sent::Refused(m) if m.contains("invalid_argument")), "{e:?}");
        // OTLP retries only what its specification says.
        assert!(matches!(judge(Protocol::Otlp, &answer(503, &[], b"")), Sent::Retry(_)));
        assert!(matches!(judge(Protocol::Otlp, &answer(500, &[], b"")), Sent::Refused(_)));
        assert!(matches!(judge(Protocol::Ingest, &answer(500, &[], b"")), Sent::Retry(_)));
        // gRPC-Web: trailers-only, or a trailer frame.
        assert_eq!(judge(Protocol::Parca, &answer(200, &[("grpc-status", "0")], b"")), ok);
        let e =
            judge(Protocol::Parca, &answer(200, &[("grpc-status", "3"), ("grpc-message", "missing%20__name__")], b""));
        assert!(matches!(&e, Sent::Refused(m) if m.ends_with("gRPC status 3: missing __name__")), "{e:?}");
        let trailer = b"grpc-status:14\r\ngrpc-message:down\r\n";
        let mut body = vec![0, 0, 0, 0, 0];
        body.push(0x80);
        body.extend_from_slice(&(trailer.len() as u32).to_be_bytes());
        body.extend_from_slice(trailer);
        assert!(matches!(judge(Protocol::Parca, &answer(200, &[], &body)), Sent::Retry(m) if m.contains("14: down")));
        assert!(matches!(judge(Protocol::Parca, &answer(200, &[], b"")), Sent::Retry(_)));
        assert!(matches!(judge(Protocol::Ingest, &Answer::default()), Sent::Retry(_)));
        assert_eq!(percent_decode("a%20b%zz%"), "a b%zz%");
    }
}
