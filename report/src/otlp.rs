//! OTLP profiles: an OpenTelemetry `ExportProfilesServiceRequest` (protobuf), what an OTLP endpoint's
//! `/v1development/profiles` takes (the OpenTelemetry Collector with its profiles feature gate, Grafana Pyroscope).
//!
//! **Version.** opentelemetry-proto v1.9.0's profiles signal, `v1development` (alpha): the messages are the
//! `opentelemetry-proto` crate's, generated from the official definitions, not written here. A later version of the
//! signal may move fields; the version is pinned in Cargo.toml and said in `--help` and docs/outputs.md.
//!
//! **Resources.** One `ResourceProfiles` per process (instance) of the recording, with the semantic conventions'
//! attributes: `service.name` (the script the interpreter runs, else its executable's name), `host.name`,
//! `host.arch`, `process.pid`, `process.executable.path` (the interpreter), `process.command_line`,
//! `process.runtime.name` (`cpython`) and `process.runtime.version`, and `container.id` and `k8s.pod.uid` where the
//! process's cgroup path says so. Stacks not kept per thread (a profile loaded without threads) go to one resource
//! with the host's attributes only. Each has one scope, `pyperf` with its version, and one profile.
//!
//! **Profile.** Its sample type as the pprof export's last (default) one: `cpu`/`nanoseconds` (samples x the
//! sampling period; `samples`/`count` for an event that is no clock), `off_cpu`/`nanoseconds`, `wall`/`nanoseconds`,
//! with the same period type and period; `time_unix_nano` the recording's start, `duration_nano` its length. A
//! sample is a stack count: its stack (locations leaf first, the same frames and pseudo-frames as the other exports),
//! one value, and the attributes `thread.id`, `thread.name` and `pyperf.gil` (the GIL state as `--gil` spells it,
//! when loaded with GIL states) and, for a sample that ran in an OpenTelemetry span (format 1.10), a link (the
//! dictionary's `link_table`: its trace and span ids). Functions, locations and mappings are named as in the pprof export: a Python frame's
//! function with its source file and line, a native one with its library (the mapping, with its GNU build id as
//! `process.executable.build_id.gnu`), kernel frames with `[kernel.kallsyms]`; each location says which with the
//! semantic conventions' `profile.frame.type` (`cpython`, `native`, `kernel`; none on pyperf's pseudo-frames such as
//! `[idle]` or `[off-CPU: read]`).
//!
//! The output is deterministic: the same recording gives the same bytes.

use std::collections::HashMap;
use std::io::{self, Write};

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use pyperf_format::Symbol;

use crate::names::escape_text;
use crate::pprof::{each_sample, Locate, Site};
use crate::profile::{Mode, Profile};

/// What the OTLP export shows.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// One location per (function, line); without, one per function.
    pub lines: bool,
}

/// The dictionary being built: every table starts with its zero value, as the protocol requires.
struct Dictionary {
    d: otlp::ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<(i32, i32), i32>,
    locations: HashMap<(i32, i64, i32), i32>,
    mappings: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, String), i32>,
    links: HashMap<pyperf_format::SpanLink, i32>,
    /// The mapping of Python frames and pseudo-frames: the first process's interpreter.
    main: i32,
    lines: bool,
}

impl Dictionary {
    fn new(lines: bool) -> Dictionary {
        let mut d = Dictionary {
            d: otlp::ProfilesDictionary {
                mapping_table: vec![otlp::Mapping::default()],
                location_table: vec![otlp::Location::default()],
                function_table: vec![otlp::Function::default()],
                link_table: vec![otlp::Link::default()],
                string_table: Vec::new(),
                attribute_table: vec![otlp::KeyValueAndUnit::default()],
                stack_table: vec![otlp::Stack::default()],
            },
            strings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            mappings: HashMap::new(),
            stacks: HashMap::new(),
            attributes: HashMap::new(),
            links: HashMap::new(),
            main: 0,
            lines,
        };
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key = self.string(key);
        let (id, any) = match value {
            Value::Str(s) => (format!("s{s}"), any_value::Value::StringValue(s.to_string())),
            Value::Int(n) => (format!("i{n}"), any_value::Value::IntValue(n)),
        };
        if let Some(&i) = self.attributes.get(&(key, id.clone())) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(otlp::KeyValueAndUnit {
            key_strindex: key,
            value: Some(AnyValue { value: Some(any) }),
            unit_strindex: 0,
        });
        self.attributes.insert((key, id), i);
        i
    }

    fn mapping(&mut self, file: &str, build_id: &str) -> i32 {
        if let Some(&i) = self.mappings.get(file) {
            return i;
        }
        let filename_strindex = self.string(file);
        let attribute_indices = if build_id.is_empty() {
            Vec::new()
        } else {
            vec![self.attribute("process.executable.build_id.gnu", Value::Str(build_id))]
        };
        let i = self.d.mapping_table.len() as i32;
        self.d.mapping_table.push(otlp::Mapping { filename_strindex, attribute_indices, ..Default::default() });
        self.mappings.insert(file.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: &str) -> i32 {
        let key = (self.string(name), self.string(file));
        if let Some(&i) = self.functions.get(&key) {
            return i;
        }
        let i = self.d.function_table.len() as i32;
        self.d.function_table.push(otlp::Function {
            name_strindex: key.0,
            system_name_strindex: 0,
            filename_strindex: key.1,
            start_line: 0,
        });
        self.functions.insert(key, i);
        i
    }

    /// The location of `function` at `line` in `mapping`; `kind` its `profile.frame.type` (none for pyperf's
    /// pseudo-frames).
    fn location_of(&mut self, function: i32, line: i64, mapping: i32, kind: Option<&str>) -> i32 {
        if let Some(&i) = self.locations.get(&(function, line, mapping)) {
            return i;
        }
        let attribute_indices =
            kind.map(|k| vec![self.attribute("profile.frame.type", Value::Str(k))]).unwrap_or_default();
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(otlp::Location {
            mapping_index: mapping,
            address: 0,
            lines: vec![otlp::Line { function_index: function, line, column: 0 }],
            attribute_indices,
        });
        self.locations.insert((function, line, mapping), i);
        i
    }

    /// The link of a span: its trace and span ids, big-endian (as W3C trace context orders their bytes).
    fn link(&mut self, span: pyperf_format::SpanLink) -> i32 {
        if let Some(&i) = self.links.get(&span) {
            return i;
        }
        let i = self.d.link_table.len() as i32;
        self.d.link_table.push(otlp::Link {
            trace_id: span.trace_id.to_be_bytes().to_vec(),
            span_id: span.span_id.to_be_bytes().to_vec(),
        });
        self.links.insert(span, i);
        i
    }

    fn stack(&mut self, locations_leaf_first: &[u64]) -> i32 {
        let key: Vec<i32> = locations_leaf_first.iter().map(|&l| l as i32).collect();
        if let Some(&i) = self.stacks.get(&key) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(otlp::Stack { location_indices: key.clone() });
        self.stacks.insert(key, i);
        i
    }
}

impl Locate for Dictionary {
    fn frame(&mut self, symbol: &Symbol) -> u64 {
        let at = match Site::of(symbol, self.lines) {
            Site::Python { name, file, line } => {
                let f = self.function(&name, &file);
                self.location_of(f, line, self.main, Some("cpython"))
            }
            Site::Native { name, library } => {
                let f = self.function(&name, &library);
                let m = self.mapping(&library, "");
                let kind = if Site::is_kernel(&library) { "kernel" } else { "native" };
                self.location_of(f, 0, m, Some(kind))
            }
            Site::Pseudo(name) => return self.pseudo(&name),
        };
        at as u64
    }

    fn pseudo(&mut self, name: &str) -> u64 {
        let f = self.function(&escape_text(name), "");
        self.location_of(f, 0, self.main, None) as u64
    }
}

/// An attribute's value.
enum Value<'a> {
    Str(&'a str),
    Int(i64),
}

fn key_value(key: &str, value: Value<'_>) -> KeyValue {
    let value = match value {
        Value::Str(s) => any_value::Value::StringValue(s.to_string()),
        Value::Int(n) => any_value::Value::IntValue(n),
    };
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
}

/// The semantic conventions' `host.arch` of a `uname -m`.
fn host_arch(machine: &str) -> &str {
    match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// What a process's cgroup path says of its container: (`container.id`, `k8s.pod.uid`). A container id is the
/// 64-hex-digit name Docker, containerd and CRI-O give the cgroup (`docker-ID.scope`, `cri-containerd-ID.scope`,
/// `crio-ID.scope`, `/docker/ID`); a pod uid the kubelet's `pod<UID>` (`kubepods-burstable-pod<UID with _>.slice`).
pub fn container_of(cgroup: &str) -> (Option<String>, Option<String>) {
    let mut id = None;
    let mut pod = None;
    for part in cgroup.split('/') {
        let name = part.strip_suffix(".scope").or_else(|| part.strip_suffix(".slice")).unwrap_or(part);
        if let Some(hex) = name.rsplit(['-', ':']).next() {
            if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                id = Some(hex.to_ascii_lowercase());
            }
        }
        if let Some(at) = name.rfind("pod") {
            let uid = name[at + 3..].replace('_', "-");
            let uuid = uid.len() == 36
                && uid.bytes().enumerate().all(|(i, b)| {
                    if [8, 13, 18, 23].contains(&i) {
                        b == b'-'
                    } else {
                        b.is_ascii_hexdigit()
                    }
                });
            if uuid {
                pod = Some(uid.to_ascii_lowercase());
            }
        }
    }
    (id, pod)
}

/// `service.name`: the script a Python process runs (`app.py`, or the module of `-m pkg.mod`), else its executable's
/// name.
fn service_name(command: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let exe = command.first().map(|c| base(c)).unwrap_or_else(|| "python".into());
    if !exe.starts_with("python") {
        return exe; // gunicorn, uwsgi, a frozen or embedding program: its own name
    }
    let mut args = command.iter().skip(1);
    while let Some(a) = args.next() {
        if a == "-m" {
            if let Some(m) = args.next() {
                return m.clone();
            }
        } else if a == "-c" {
            break;
        } else if !a.starts_with('-') {
            return base(a);
        }
    }
    exe
}

/// A profile type of a [`Builder`]: its sample type (`(type, unit)`, also its period type) and period.
#[derive(Debug, Clone, Copy)]
pub struct ProfileType<'a> {
    /// `(type, unit)`, e.g. `("cpu", "nanoseconds")`.
    pub sample: (&'a str, &'a str),
    /// The sampling period in the sample type's unit (the minimum interval kept for `off_cpu`).
    pub period: i64,
}

/// What the resource of a process says of it (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ProcessInfo<'a> {
    /// Process id.
    pub pid: u32,
    /// Its command line.
    pub command: &'a [String],
    /// The interpreter's path.
    pub interpreter_path: &'a str,
    /// `3.12.1`.
    pub python_version: &'a str,
    /// Its cgroup path (`container.id`, `k8s.pod.uid`).
    pub cgroup: &'a str,
}

/// A sample's attributes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleAttributes<'a> {
    /// (`thread.id`, `thread.name`).
    pub thread: Option<(u32, &'a str)>,
    /// `pyperf.gil`, as `--gil` spells the state.
    pub gil: Option<&'a str>,
    /// The OpenTelemetry span it ran in: the sample's link (the dictionary's `link_table`).
    pub span: Option<pyperf_format::SpanLink>,
}

/// An `ExportProfilesServiceRequest` being built: one dictionary for all of it, one resource per process, one
/// profile per profile type that has samples. The `--otlp` export and `record --push` in OTLP build theirs here.
pub struct Builder {
    d: Dictionary,
    types: Vec<(otlp::ValueType, i64)>,
    host: Vec<KeyValue>,
    scope_version: String,
    time_unix_nano: u64,
    duration_nano: u64,
    /// Per resource: its attributes and its samples per profile type.
    resources: Vec<(Vec<KeyValue>, Vec<Vec<otlp::Sample>>)>,
}

impl Builder {
    /// A request with these profile types; with `lines`, one location per (function, line).
    pub fn new(types: &[ProfileType<'_>], lines: bool) -> Builder {
        let mut d = Dictionary::new(lines);
        let types = types
            .iter()
            .map(|t| {
                let v = otlp::ValueType { type_strindex: d.string(t.sample.0), unit_strindex: d.string(t.sample.1) };
                (v, t.period)
            })
            .collect();
        Builder {
            d,
            types,
            host: Vec::new(),
            scope_version: env!("CARGO_PKG_VERSION").to_string(),
            time_unix_nano: 0,
            duration_nano: 0,
            resources: Vec::new(),
        }
    }

    /// The profiles' wall-clock start (ns since the Unix epoch) and length.
    pub fn set_time(&mut self, time_unix_nano: u64, duration_nano: u64) {
        self.time_unix_nano = time_unix_nano;
        self.duration_nano = duration_nano;
    }

    /// The host every resource names: its name and `uname -m`.
    pub fn set_host(&mut self, hostname: &str, machine: &str) {
        self.host = vec![
            key_value("host.name", Value::Str(&escape_text(hostname))),
            key_value("host.arch", Value::Str(host_arch(machine))),
        ];
    }

    /// The version the instrumentation scope `pyperf` says (the recorder's, for an export of a recording).
    pub fn set_scope_version(&mut self, version: &str) {
        self.scope_version = version.trim_start_matches("pyperf ").to_string();
    }

    /// The interpreter: the mapping of Python frames and pseudo-frames. Call before any other mapping is made.
    pub fn set_main(&mut self, path: &str, build_id: &str) {
        self.d.main = self.d.mapping(&escape_text(path), build_id);
    }

    /// A native library (path as mapped, GNU build id in hex or empty).
    pub fn add_library(&mut self, path: &str, build_id: &str) {
        self.d.mapping(&escape_text(path), build_id);
    }

    /// The location of a frame.
    pub fn location(&mut self, symbol: &Symbol) -> u64 {
        self.d.frame(symbol)
    }

    /// The location of one of pyperf's pseudo-frames (`[idle]`, `[off-CPU: read]`).
    pub fn pseudo_location(&mut self, name: &str) -> u64 {
        self.d.pseudo(name)
    }

    /// A resource for a process (None: samples not kept per process, the host's attributes only); `service` names
    /// the service instead of the process's command, `extra` are more attributes (`record --push --label`).
    /// Returns its index for [`Builder::add_sample`].
    pub fn add_resource(
        &mut self,
        process: Option<&ProcessInfo<'_>>,
        service: Option<&str>,
        extra: &[(String, String)],
    ) -> usize {
        let mut attributes: Vec<KeyValue> = self.host.clone();
        let mut service_name_of = String::from("python");
        if let Some(p) = process {
            attributes.push(key_value("process.pid", Value::Int(i64::from(p.pid))));
            if !p.interpreter_path.is_empty() || !p.command.is_empty() {
                let command: Vec<String> = p.command.iter().map(|a| escape_text(a)).collect();
                service_name_of = service_name(&command);
                attributes.push(key_value("process.executable.path", Value::Str(&escape_text(p.interpreter_path))));
                attributes.push(key_value("process.command_line", Value::Str(&command.join(" "))));
                attributes.push(key_value("process.runtime.name", Value::Str("cpython")));
                attributes.push(key_value("process.runtime.version", Value::Str(p.python_version)));
                let (container, pod) = container_of(p.cgroup);
                if let Some(id) = container {
                    attributes.push(key_value("container.id", Value::Str(&id)));
                }
                if let Some(uid) = pod {
                    attributes.push(key_value("k8s.pod.uid", Value::Str(&uid)));
                }
            }
        }
        attributes.insert(0, key_value("service.name", Value::Str(service.unwrap_or(&service_name_of))));
        for (k, v) in extra {
            attributes.push(key_value(k, Value::Str(v)));
        }
        self.resources.push((attributes, vec![Vec::new(); self.types.len()]));
        self.resources.len() - 1
    }

    /// A sample of profile type `kind` (index into the types given to [`Builder::new`]) in `resource`: its stack
    /// (locations, leaf first), its value, its attributes.
    pub fn add_sample(
        &mut self,
        resource: usize,
        kind: usize,
        locations_leaf_first: &[u64],
        value: i64,
        attributes: &SampleAttributes<'_>,
    ) {
        let stack_index = self.d.stack(locations_leaf_first);
        let mut attribute_indices = Vec::with_capacity(3);
        if let Some((tid, name)) = attributes.thread {
            attribute_indices.push(self.d.attribute("thread.id", Value::Int(i64::from(tid))));
            attribute_indices.push(self.d.attribute("thread.name", Value::Str(&escape_text(name))));
        }
        if let Some(g) = attributes.gil {
            attribute_indices.push(self.d.attribute("pyperf.gil", Value::Str(g)));
        }
        let link_index = attributes.span.map_or(0, |l| self.d.link(l));
        let sample = otlp::Sample {
            stack_index,
            attribute_indices,
            link_index,
            values: vec![value],
            timestamps_unix_nano: vec![],
        };
        if let Some(per_kind) = self.resources.get_mut(resource).and_then(|(_, s)| s.get_mut(kind)) {
            per_kind.push(sample);
        }
    }

    /// The request: resources without samples left out.
    pub fn finish(self) -> ExportProfilesServiceRequest {
        let scope =
            InstrumentationScope { name: "pyperf".into(), version: self.scope_version.clone(), ..Default::default() };
        let mut resource_profiles = Vec::new();
        for (attributes, per_kind) in self.resources {
            let profiles: Vec<otlp::Profile> = per_kind
                .into_iter()
                .zip(&self.types)
                .filter(|(samples, _)| !samples.is_empty())
                .map(|(samples, &(t, period))| otlp::Profile {
                    sample_type: Some(t),
                    samples,
                    time_unix_nano: self.time_unix_nano,
                    duration_nano: self.duration_nano,
                    period_type: Some(t),
                    period,
                    ..Default::default()
                })
                .collect();
            if profiles.is_empty() {
                continue;
            }
            resource_profiles.push(otlp::ResourceProfiles {
                resource: Some(Resource { attributes, ..Default::default() }),
                scope_profiles: vec![otlp::ScopeProfiles {
                    scope: Some(scope.clone()),
                    profiles,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        ExportProfilesServiceRequest { resource_profiles, dictionary: Some(self.d.d) }
    }
}

/// An `ExportProfilesServiceResponse`'s partial success: (profiles rejected, the server's message). An empty or
/// undecodable answer is a full success (the specification lets a server answer 200 with nothing).
pub fn decode_response(body: &[u8]) -> (u64, String) {
    match <ExportProfilesServiceResponse as prost::Message>::decode(body) {
        Ok(r) => r.partial_success.map_or((0, String::new()), |p| (p.rejected_profiles.max(0) as u64, p.error_message)),
        Err(_) => (0, String::new()),
    }
}

/// `request` encoded (protobuf).
pub fn encode(request: &ExportProfilesServiceRequest) -> Vec<u8> {
    prost::Message::encode_to_vec(request)
}

/// Writes `profile` as an OTLP `ExportProfilesServiceRequest` (see the module docs); refused like the pprof export
/// when its stacks would hold more than [`crate::pprof::MAX_FRAMES`] frames.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let frames = crate::pprof::frames_needed(profile);
    if frames > crate::pprof::MAX_FRAMES {
        let e = format!(
            "an OTLP profile of this recording would hold {frames} frames, more than {}",
            crate::pprof::MAX_FRAMES
        );
        return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
    }
    let request = request(profile, options);
    out.write_all(&prost::Message::encode_to_vec(&request))?;
    out.flush()
}

/// The request `write` encodes.
pub fn request(profile: &Profile, options: &Options) -> ExportProfilesServiceRequest {
    let period = profile.sampling_period_ns();
    // A stack count is samples in cpu mode (times the period: ns, when the event is a clock), else ns.
    let (kind, per_count) = match (profile.mode, period) {
        (Mode::Cpu, Some(p)) => (("cpu", "nanoseconds"), p),
        (Mode::Cpu, None) => (("samples", "count"), 1),
        (Mode::OffCpu, _) => (("off_cpu", "nanoseconds"), 1),
        (Mode::Wall, _) => (("wall", "nanoseconds"), 1),
    };
    let value_of = |n: u64| n.saturating_mul(per_count).min(i64::MAX as u64) as i64;
    let period_value = match profile.mode {
        Mode::OffCpu => profile.off_cpu_min_ns().unwrap_or(0) as i64,
        _ => period.unwrap_or(1) as i64,
    };
    let mut b = Builder::new(&[ProfileType { sample: kind, period: period_value }], options.lines);
    let header = &profile.header;
    b.set_time(header.start_time_unix_ns, profile.duration_ns());
    b.set_host(&header.hostname, &header.arch);
    b.set_scope_version(&header.pyperf_version);
    let main = profile.tables.processes.iter().find(|p| !p.interpreter_path.is_empty());
    b.set_main(main.map_or("python", |p| p.interpreter_path.as_str()), main.map_or("", |p| p.build_id.as_str()));
    for (path, build_id) in profile.tables.libraries() {
        b.add_library(path, build_id);
    }
    // A resource per process instance (index into profile.processes), in the order of their first sample; one for
    // stacks not kept per thread.
    let mut resources: HashMap<usize, usize> = HashMap::new();
    let mut samples = Vec::new();
    let _ = each_sample(profile, &mut b.d, |_, c| {
        let process = c.thread.map_or(usize::MAX, |(_, t)| t.process as usize);
        let name = c.thread.map(|(_, t)| (t.tid, t.python_name.as_deref().unwrap_or(&t.comm).to_string()));
        samples.push((process, c.locations.to_vec(), value_of(c.count), name, c.gil.map(|g| g.key()), c.span));
        Ok(())
    });
    // Resources in process order, so that the output does not depend on the order of the stacks.
    let mut processes: Vec<usize> = samples.iter().map(|s| s.0).collect();
    processes.sort_unstable();
    processes.dedup();
    for process in processes {
        let instance = profile.processes.get(process);
        let record = instance.and_then(|p| p.record).and_then(|r| profile.tables.processes.get(r as usize));
        let info = instance.map(|p| ProcessInfo {
            pid: p.pid,
            command: record.map_or(&[][..], |r| r.command.as_slice()),
            interpreter_path: record.map_or("", |r| r.interpreter_path.as_str()),
            python_version: record.map_or("", |r| r.python_version.as_str()),
            cgroup: record.map_or("", |r| r.cgroup.as_str()),
        });
        resources.insert(process, b.add_resource(info.as_ref(), None, &[]));
    }
    for (process, locations, value, thread, gil, span) in samples {
        let attributes = SampleAttributes {
            thread: thread.as_ref().map(|(tid, name)| (*tid, name.as_str())),
            gil: gil.as_deref(),
            span,
        };
        b.add_sample(resources[&process], 0, &locations, value, &attributes);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_and_pods_from_cgroup_paths() {
        let id = "4f1c3a0b9d2e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";
        assert_eq!(container_of(&format!("/system.slice/docker-{id}.scope")), (Some(id.to_string()), None));
        assert_eq!(container_of(&format!("/docker/{id}")), (Some(id.to_string()), None));
        let k8s = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_4f5a_6b7c_8d9e_0f1a2b3c4d5e.slice/\
             cri-containerd-{id}.scope"
        );
        assert_eq!(
            container_of(&k8s),
            (Some(id.to_string()), Some("0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e".to_string()))
        );
        assert_eq!(container_of("/user.slice/user-0.slice/session-1.scope"), (None, None));
        assert_eq!(container_of(""), (None, None));
    }

    #[test]
    fn service_names() {
        let c = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(service_name(&c(&["/usr/bin/python3", "-u", "/srv/app/main.py", "--port", "80"])), "main.py");
        assert_eq!(service_name(&c(&["python3", "-m", "uvicorn", "app:app"])), "uvicorn");
        assert_eq!(service_name(&c(&["/usr/bin/python3", "-c", "pass"])), "python3");
        assert_eq!(service_name(&c(&["/usr/local/bin/gunicorn", "app:app"])), "gunicorn");
        assert_eq!(service_name(&[]), "python");
    }
}
