//! pprof: google/pprof's profile.proto, gzip'd (`go tool pprof`, Grafana Pyroscope, Parca, Polar Signals, the
//! OpenTelemetry profiling tools).
//!
//! **Sample types.** In `--mode cpu`: `samples/count` and `cpu/nanoseconds` (samples x the sampling period; left out
//! when the event is no clock, `-e cycles -c N`, whose samples are no fixed time), as Go's own CPU profiles have
//! them. `--mode off-cpu`: `off_cpu/nanoseconds` (each interval's weight). `--mode wall`: `wall/nanoseconds` (a CPU
//! sample weighs one period). The last type is the default one. `period_type`/`period` are the sampling period,
//! `time_nanos` the recording's wall-clock start, `duration_nanos` its length.
//!
//! **Frames.** One `Function` per (qualified name, file): a Python function with its source file; a native
//! function with its library's path; a kernel function with `[kernel.kallsyms]`; pseudo-frames (`[idle]`,
//! `[truncated]`, `[off-CPU: read]`, `[native: unmerged]`) with no file. One `Location` per (function, line) (per
//! function with `--no-lines`); a native frame's location names the `Mapping` of its library, with the library's
//! GNU build id when the recording has it (`record --native`), a kernel frame the `[kernel.kallsyms]` mapping.
//! pyperf names frames itself, so every mapping says it has functions, file names and line numbers: pprof never
//! tries to symbolize them again. A sample's locations are its stack, leaf first, as the other exports show it
//! (the `[off-CPU: ...]` pseudo-frame is the leaf, a `[truncated]`-like marker the root).
//!
//! **Labels.** Every sample carries `pid` and `tid` (numbers), `thread` (the thread's Python name, else its OS
//! name), `process` (`python3.11 [pid 123]`) and `gil` (the GIL state as `--gil` spells it: `held-by-current`,
//! `released`, ...); a sample that ran in an OpenTelemetry span (format 1.10) `trace_id` and `span_id` (lowercase
//! hex, as W3C trace context writes them). `go tool pprof -tagfocus gil=released`, Pyroscope's label filters and the like select on them.
//!
//! Names hold no control or bidirectional-text characters (shown as escapes, as in the text report). The output
//! is deterministic: the same recording gives the same bytes (the gzip header has no time).

use std::collections::HashMap;
use std::io::{self, Write};

use pyperf_format::{FrameKind, GilState, Symbol};

use crate::names::{self, escape_text};
use crate::profile::{Mode, Profile, StackCount, ALL_THREADS};

/// profile.proto's messages (google/pprof, proto/profile.proto), written with prost's derive: field numbers and
/// types as there.
pub mod proto {
    #![allow(missing_docs)]
    /// A profile: what [`super::Builder`] writes.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// A sample's label.
#[derive(Debug, Clone, Copy)]
pub enum Label<'a> {
    /// (key, value).
    Str(&'a str, &'a str),
    /// (key, number, unit: `""` for none).
    Num(&'a str, i64, &'a str),
}

/// The file name of kernel frames' mapping and functions.
const KERNEL: &str = "[kernel.kallsyms]";

/// Where a frame is, as the pprof and OTLP exports name it: a Python function with its source file and line (the
/// interpreter's mapping), a native or kernel function with its library (`[kernel.kallsyms]` for the kernel's), or
/// one of pyperf's pseudo-frames. Names escaped.
pub(crate) enum Site {
    /// A Python frame; `line` 0 without lines.
    Python { name: String, file: String, line: i64 },
    /// A native (glue included) or kernel frame, and the library it is in.
    Native { name: String, library: String },
    /// `[task ...]`, `[interpreter N]`, `[native: truncated]`.
    Pseudo(String),
}

impl Site {
    /// The site of `symbol`, with its line when `lines`.
    pub(crate) fn of(symbol: &Symbol, lines: bool) -> Site {
        let name = escape_text(&names::function_name(symbol));
        match symbol.kind() {
            FrameKind::Python => Site::Python {
                name,
                file: escape_text(&names::file_name(symbol)),
                line: if lines { i64::from(symbol.line) } else { 0 },
            },
            FrameKind::Native | FrameKind::Glue => Site::Native { name, library: escape_text(&symbol.file) },
            FrameKind::Kernel => Site::Native { name, library: KERNEL.to_string() },
            FrameKind::Marker | FrameKind::Task | FrameKind::Interpreter => Site::Pseudo(names::marker_name(symbol)),
        }
    }

    /// Whether a native site is the kernel's.
    pub(crate) fn is_kernel(library: &str) -> bool {
        library == KERNEL
    }
}

/// One profile being built: strings, functions, locations and mappings interned.
#[derive(Debug, Default)]
pub struct Builder {
    p: proto::Profile,
    strings: HashMap<String, i64>,
    /// (name, file) -> function id.
    functions: HashMap<(i64, i64), u64>,
    /// (function, line, mapping) -> location id.
    locations: HashMap<(u64, i64, u64), u64>,
    /// File name -> mapping id.
    mappings: HashMap<String, u64>,
    /// The mapping of Python frames and pseudo-frames ([`Builder::set_main`]), 0 for none.
    main: u64,
}

impl Builder {
    /// A profile with these sample types (`(type, unit)`, e.g. `("cpu", "nanoseconds")`; the last is the default
    /// one) and sampling period.
    pub fn new(sample_types: &[(&str, &str)], period_type: (&str, &str), period: i64) -> Builder {
        let mut b = Builder::default();
        b.string("");
        let types: Vec<proto::ValueType> =
            sample_types.iter().map(|(t, u)| proto::ValueType { r#type: b.string(t), unit: b.string(u) }).collect();
        b.p.default_sample_type = types.last().map_or(0, |t| t.r#type);
        b.p.sample_type = types;
        b.p.period_type = Some(proto::ValueType { r#type: b.string(period_type.0), unit: b.string(period_type.1) });
        b.p.period = period;
        b
    }

    /// The profile's wall-clock start (ns since the Unix epoch) and length.
    pub fn set_time(&mut self, time_nanos: i64, duration_nanos: i64) {
        self.p.time_nanos = time_nanos;
        self.p.duration_nanos = duration_nanos;
    }

    /// Index of `s` in the string table.
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn mapping(&mut self, file: &str, build_id: &str) -> u64 {
        if let Some(&id) = self.mappings.get(file) {
            return id;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let (filename, build_id) = (self.string(file), self.string(build_id));
        self.p.mapping.push(proto::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..Default::default()
        });
        self.mappings.insert(file.to_string(), id);
        id
    }

    /// The main binary (the Python interpreter): the first mapping, which pprof names the profile by, and the
    /// mapping of Python frames and pseudo-frames. Call before any other mapping is made.
    pub fn set_main(&mut self, path: &str, build_id: &str) {
        self.main = self.mapping(path, build_id);
    }

    /// A native library (path as mapped, GNU build id in hex or empty): the mapping of its frames' locations.
    pub fn add_library(&mut self, path: &str, build_id: &str) {
        self.mapping(path, build_id);
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (self.string(name), self.string(file));
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        // No system name: pprof then takes the name as already demangled. With the same name in both, it would "clean
        // up" names that look like C++ to it: `<module>` became an empty name.
        self.p.function.push(proto::Function { id, name: key.0, system_name: 0, filename: key.1, start_line: 0 });
        self.functions.insert(key, id);
        id
    }

    fn location_of(&mut self, function: u64, line: i64, mapping: u64) -> u64 {
        if let Some(&id) = self.locations.get(&(function, line, mapping)) {
            return id;
        }
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(proto::Location {
            id,
            mapping_id: mapping,
            address: 0,
            line: vec![proto::Line { function_id: function, line }],
            is_folded: false,
        });
        self.locations.insert((function, line, mapping), id);
        id
    }

    /// The location of a frame: its function (named as [`names`] names it) and, with `lines`, its line.
    pub fn location(&mut self, symbol: &Symbol, lines: bool) -> u64 {
        match Site::of(symbol, lines) {
            Site::Python { name, file, line } => {
                let f = self.function(&name, &file);
                self.location_of(f, line, self.main)
            }
            Site::Native { name, library } => {
                let f = self.function(&name, &library);
                let m = self.mapping(&library, "");
                self.location_of(f, 0, m)
            }
            Site::Pseudo(name) => self.pseudo_location(&name),
        }
    }

    /// The location of one of pyperf's pseudo-frames (`[idle]`, `[off-CPU: read]`): a function of that name.
    pub fn pseudo_location(&mut self, name: &str) -> u64 {
        let f = self.function(&escape_text(name), "");
        self.location_of(f, 0, self.main)
    }

    fn sample(&mut self, locations_leaf_first: &[u64], values: &[i64], labels: &[Label<'_>]) -> proto::Sample {
        let label = labels
            .iter()
            .map(|l| match *l {
                Label::Str(k, v) => proto::Label { key: self.string(k), str: self.string(v), ..Default::default() },
                Label::Num(k, n, unit) => {
                    proto::Label { key: self.string(k), num: n, num_unit: self.string(unit), ..Default::default() }
                }
            })
            .collect();
        proto::Sample { location_id: locations_leaf_first.to_vec(), value: values.to_vec(), label }
    }

    /// A sample: its stack (locations, leaf first), one value per sample type, its labels.
    pub fn add_sample(&mut self, locations_leaf_first: &[u64], values: &[i64], labels: &[Label<'_>]) {
        let s = self.sample(locations_leaf_first, values, labels);
        self.p.sample.push(s);
    }

    /// A sample written to `out` at once (an encoded `Profile.sample` field) instead of kept: a profile's samples
    /// hold every stack in full, which can be far larger than the recording. Finish with [`Builder::write_rest`].
    pub fn write_sample<W: Write>(
        &mut self,
        out: &mut W,
        locations_leaf_first: &[u64],
        values: &[i64],
        labels: &[Label<'_>],
    ) -> io::Result<()> {
        let s = self.sample(locations_leaf_first, values, labels);
        let mut buf = Vec::with_capacity(s.location_id.len() * 2 + 64);
        prost::encoding::message::encode(2, &s, &mut buf);
        out.write_all(&buf)
    }

    /// Everything but the samples written with [`Builder::write_sample`], encoded: appended to them it makes the
    /// profile (protobuf fields may come in any order; repeated ones add up).
    pub fn write_rest<W: Write>(&self, out: &mut W) -> io::Result<()> {
        out.write_all(&prost::Message::encode_to_vec(&self.p))
    }

    /// The profile as built so far (for tests and for tools that want it unencoded).
    pub fn profile(&self) -> &proto::Profile {
        &self.p
    }

    /// Writes the profile, gzip'd (the header without a time, so equal profiles give equal bytes).
    pub fn write_gz<W: Write>(&self, out: W) -> io::Result<()> {
        let bytes = prost::Message::encode_to_vec(&self.p);
        let mut gz = flate2::GzBuilder::new().mtime(0).write(out, flate2::Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?.flush()
    }
}

/// Frames the samples of a pprof export may hold at most (the sum of their stacks' depths): pprof tools load a
/// profile whole (`go tool pprof` needs some 8 bytes per frame, and more), and a small crafted recording can ask for
/// billions. A profile past it is refused before anything is written ([`frames_needed`]).
pub const MAX_FRAMES: u64 = 1 << 27;

/// The frames the samples of `profile`'s pprof export hold: the sum of the depths of its stack counts (with their
/// pseudo-frames).
pub fn frames_needed(profile: &Profile) -> u64 {
    let nodes = &profile.tables.nodes;
    // Parents come before their children in a checked table.
    let mut depth = vec![0u64; nodes.len() + 1];
    for (i, &(parent, _)) in nodes.iter().enumerate() {
        depth[i + 1] = depth.get(parent as usize).copied().unwrap_or(0) + 1;
    }
    let of = |s: &StackCount| depth.get(s.leaf as usize).copied().unwrap_or(0) + 2;
    let stacks: Box<dyn Iterator<Item = &StackCount>> = if profile.gil_stacks.is_empty() {
        Box::new(profile.stacks.iter())
    } else {
        Box::new(profile.gil_stacks.iter().map(|(s, _, _)| s))
    };
    stacks.fold(0u64, |a, s| a.saturating_add(of(s)))
}

/// What the pprof export shows.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// One location per (function, line); without, one per function.
    pub lines: bool,
}

/// Writes `profile` as a gzip'd pprof profile (see the module docs); a profile whose samples would hold more than
/// [`MAX_FRAMES`] frames is an `InvalidInput` error, before anything is written. Loaded with threads and per-thread counts for
/// the pid/tid/thread/process labels, with [`crate::LoadOptions::gil`] for the gil label (as `--pprof` loads it);
/// without, those labels are left out.
pub fn write<W: Write>(profile: &Profile, options: &Options, out: W) -> io::Result<()> {
    let frames = frames_needed(profile);
    if frames > MAX_FRAMES {
        let e = format!("a pprof profile of this recording would hold {frames} frames, more than {MAX_FRAMES}");
        return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
    }
    let period = profile.sampling_period_ns();
    let (types, period_type, period_value): (Vec<(&str, &str)>, (&str, &str), i64) = match profile.mode {
        Mode::Cpu => match period {
            Some(p) => (vec![("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), p as i64),
            None => (vec![("samples", "count")], ("samples", "count"), 1),
        },
        Mode::OffCpu => {
            (vec![("off_cpu", "nanoseconds")], ("off_cpu", "nanoseconds"), profile.off_cpu_min_ns().unwrap_or(0) as i64)
        }
        Mode::Wall => (vec![("wall", "nanoseconds")], ("wall", "nanoseconds"), period.unwrap_or(0) as i64),
    };
    let mut b = Builder::new(&types, period_type, period_value);
    // Fast compression: a pprof profile is mostly repeated stacks, which compress well at any level, and the
    // export should cost little more than reading the recording.
    let mut gz = flate2::GzBuilder::new().mtime(0).write(out, flate2::Compression::fast());
    b.set_time(profile.header.start_time_unix_ns as i64, profile.duration_ns() as i64);
    // The first process's interpreter as the main binary (pprof says "Main binary filename not available" without
    // one); "python" when the recording names none.
    let main = profile.tables.processes.iter().find(|p| !p.interpreter_path.is_empty());
    b.set_main(
        &escape_text(main.map_or("python", |p| p.interpreter_path.as_str())),
        main.map_or("", |p| p.build_id.as_str()),
    );
    for (path, build_id) in profile.tables.libraries() {
        b.add_library(&escape_text(path), build_id);
    }
    let thread_labels: Vec<(String, String)> = profile
        .threads
        .iter()
        .map(|t| {
            let name = t.python_name.clone().unwrap_or_else(|| t.comm.clone());
            (escape_text(&name), escape_text(&profile.process_label_of(t)))
        })
        .collect();
    let mut locate = Locator { b, lines: options.lines };
    each_sample(profile, &mut locate, |locate, c| {
        let count = c.count.min(i64::MAX as u64) as i64;
        let values: Vec<i64> = match (profile.mode, period) {
            (Mode::Cpu, Some(p)) => vec![count, count.saturating_mul(p as i64)],
            _ => vec![count],
        };
        let mut labels = Vec::with_capacity(5);
        let gil_key = c.gil.map(|g| g.key());
        if let Some((index, t)) = c.thread {
            let (name, process) = &thread_labels[index];
            labels.push(Label::Num("pid", i64::from(t.pid), ""));
            labels.push(Label::Num("tid", i64::from(t.tid), ""));
            labels.push(Label::Str("thread", name));
            labels.push(Label::Str("process", process));
        }
        let span = c.span.map(|l| (l.trace_hex(), l.span_hex()));
        if let Some((trace, span)) = &span {
            labels.push(Label::Str("trace_id", trace));
            labels.push(Label::Str("span_id", span));
        }
        if let Some(k) = &gil_key {
            labels.push(Label::Str("gil", k));
        }
        // Streamed: memory is the functions and locations, not the stacks.
        locate.b.write_sample(&mut gz, c.locations, &values, &labels)
    })?;
    locate.b.write_rest(&mut gz)?;
    gz.finish()?.flush()
}

/// pprof's locations of frames, with or without lines.
struct Locator {
    b: Builder,
    lines: bool,
}

impl Locate for Locator {
    fn frame(&mut self, symbol: &Symbol) -> u64 {
        self.b.location(symbol, self.lines)
    }
    fn pseudo(&mut self, name: &str) -> u64 {
        self.b.pseudo_location(name)
    }
}

/// What an export of aggregated samples (pprof, OTLP) makes of frames: an id per frame and per pseudo-frame (its
/// location), each asked once per symbol.
pub(crate) trait Locate {
    /// The location of a frame of the recording.
    fn frame(&mut self, symbol: &Symbol) -> u64;
    /// The location of one of pyperf's pseudo-frames (`[idle]`, `[off-CPU: read]`).
    fn pseudo(&mut self, name: &str) -> u64;
}

/// One aggregated sample of an export.
pub(crate) struct Counted<'a> {
    /// Its stack's locations, leaf first, as every export shows a stack: an off-CPU interval's `[off-CPU: ...]`
    /// pseudo-frame at the leaf, `[idle]` alone, `[truncated]`-like markers at the root.
    pub locations: &'a [u64],
    /// Samples, or ns in the time modes.
    pub count: u64,
    /// Its thread (index into [`Profile::threads`]) when loaded per thread.
    pub thread: Option<(usize, &'a crate::profile::Thread)>,
    /// Its GIL state when loaded with [`crate::LoadOptions::gil`].
    pub gil: Option<GilState>,
    /// The OpenTelemetry span it ran in (format 1.10), when loaded with [`crate::LoadOptions::gil`].
    pub span: Option<pyperf_format::SpanLink>,
}

/// Calls `f` with each aggregated sample of `profile` (its stack counts, per GIL state when loaded with them), the
/// locations made by `locate`, each symbol's once.
pub(crate) fn each_sample<L: Locate>(
    profile: &Profile,
    locate: &mut L,
    mut f: impl FnMut(&mut L, &Counted<'_>) -> io::Result<()>,
) -> io::Result<()> {
    type Keyed<'p> = (&'p StackCount, Option<GilState>, Option<pyperf_format::SpanLink>);
    let keyed: Vec<Keyed<'_>> = if profile.gil_stacks.is_empty() {
        profile.stacks.iter().map(|s| (s, None, None)).collect()
    } else {
        profile.gil_stacks.iter().map(|(s, g, l)| (s, Some(*g), *l)).collect()
    };
    // Each symbol's location, once (None: not yet made).
    let mut located: Vec<Option<u64>> = vec![None; profile.tables.symbols.len()];
    let mut ids = Vec::new();
    let mut locations = Vec::new();
    for (s, gil, span) in keyed {
        locations.clear();
        if s.reason != 0 {
            let reason = profile.reasons.get(s.reason as usize).map(String::as_str).unwrap_or("[off-CPU]");
            locations.push(locate.pseudo(reason));
        }
        profile.tables.frames_root_first(s.leaf, &mut ids);
        for &id in ids.iter().rev() {
            let loc = match located.get(id as usize).copied().flatten() {
                Some(l) => l,
                None => {
                    let l = locate.frame(profile.tables.symbol(id));
                    if let Some(slot) = located.get_mut(id as usize) {
                        *slot = Some(l);
                    }
                    l
                }
            };
            locations.push(loc);
        }
        // At the root, as in every export: `[idle]` alone, `[truncated]` below the frames.
        if let Some(m) = names::stack_marker(s.status, s.leaf != 0, s.reason != 0) {
            locations.push(locate.pseudo(&m));
        }
        let thread =
            profile.threads.get(s.thread as usize).filter(|_| s.thread != ALL_THREADS).map(|t| (s.thread as usize, t));
        f(locate, &Counted { locations: &locations, count: s.count, thread, gil, span })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use std::io::Read;

    fn decode(bytes: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut raw).expect("gzip");
        proto::Profile::decode(&raw[..]).expect("decode")
    }

    #[test]
    fn builder_round_trip() {
        let mut b = Builder::new(&[("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), 10_000_000);
        b.set_time(5, 7);
        b.add_library("/lib/libz.so.1", "abcd");
        let sym = |name: &str, file: &str, line: u32, flags: u32| Symbol {
            scope: String::new(),
            name: name.into(),
            file: file.into(),
            line,
            flags,
        };
        let f = b.location(&sym("f", "/a.py", 3, 0), true);
        let f2 = b.location(&sym("f", "/a.py", 3, 0), true);
        let g = b.location(&sym("f", "/a.py", 4, 0), true);
        let z = b.location(&sym("deflate", "/lib/libz.so.1", 0, pyperf_format::symbol_flags::NATIVE), true);
        let k = b.location(&sym("schedule", KERNEL, 0, pyperf_format::symbol_flags::KERNEL), true);
        let idle = b.pseudo_location("[idle]");
        assert_eq!(f, f2);
        assert_ne!(f, g);
        b.add_sample(&[z, f], &[2, 20_000_000], &[Label::Num("pid", 7, ""), Label::Str("gil", "released")]);
        b.add_sample(&[k, g], &[1, 10_000_000], &[]);
        b.add_sample(&[idle], &[1, 10_000_000], &[]);
        let mut out = Vec::new();
        b.write_gz(&mut out).unwrap();
        let mut again = Vec::new();
        b.write_gz(&mut again).unwrap();
        assert_eq!(out, again, "deterministic");
        let p = decode(&out);
        assert_eq!(p, *b.profile());
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!((s(p.sample_type[1].r#type), s(p.sample_type[1].unit)), ("cpu", "nanoseconds"));
        assert_eq!(s(p.default_sample_type), "cpu");
        assert_eq!((p.time_nanos, p.duration_nanos, p.period), (5, 7, 10_000_000));
        // Two functions named f in one file are one function, with two locations (lines 3 and 4).
        assert_eq!(p.function.iter().filter(|f| s(f.name) == "f").count(), 1);
        assert_eq!(p.location.len(), 5);
        let zl = &p.location[(z - 1) as usize];
        let m = &p.mapping[(zl.mapping_id - 1) as usize];
        assert_eq!((s(m.filename), s(m.build_id)), ("/lib/libz.so.1", "abcd"));
        assert!(m.has_functions);
        let kl = &p.location[(k - 1) as usize];
        assert_eq!(s(p.mapping[(kl.mapping_id - 1) as usize].filename), KERNEL);
        assert_eq!(p.sample[0].label.len(), 2);
        assert_eq!(s(p.sample[0].label[1].str), "released");
        assert_eq!(p.sample[0].label[0].num, 7);
        // Every id a sample or line refers to exists.
        for smp in &p.sample {
            for id in &smp.location_id {
                assert!(p.location.iter().any(|l| l.id == *id));
            }
        }
    }
}
