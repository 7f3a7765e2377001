//! Firefox Profiler's processed profile format (<https://profiler.firefox.com>: load the file there, or with
//! `samply load`), written with the fxprof-processed-profile crate (samply's).
//!
//! **Tracks.** One process per process instance ([`Profile::processes`]: `python3.11 [pid 123]`), one thread per
//! thread (named as every export names it: `worker-1 [tid 124]`), the main thread first. Times are real: the
//! profile's zero is the recording's wall-clock start (`meta.startTime`), each sample at the time it was taken, so
//! threads and processes line up in the timeline, and two recordings given together (`-i A -i B`) line up by the
//! wall clock.
//!
//! **Samples.** In `--mode cpu` each sample weighs one (the profiler's default "samples" weight) and carries a CPU
//! delta of one sampling period, so the call tree's totals are sample counts and the activity graph shows CPU use.
//! In `--mode off-cpu` and `--mode wall` the threads' weight type is "tracing-ms": a CPU sample weighs its period,
//! an off-CPU interval its time (at its start, its stack ending in `[off-CPU: read]`); weights are whole
//! milliseconds, the rounding carried from entry to entry so that each thread's total is exact to the millisecond.
//!
//! **Frames.** Labels named as every export names them (`handle (app.py:88)`, `deflate (libz.so.1.3)`,
//! `do_syscall_64_[k]`), in categories: Python (yellow), Native (blue; the interpreter's own glue frames too), Kernel
//! (orange), Idle (`[idle]`, transparent), Off-CPU (`[off-CPU: ...]`, light blue) and Other (pyperf's markers:
//! `[truncated]`, `[native: unmerged]`). Search and the call tree's "Merge function" work on these labels.
//!
//! **GIL state** as interval markers ("GIL" track in the marker chart): one marker per run of consecutive entries of
//! a thread in the same GIL state (`GIL held`, `GIL released`, `waiting for the GIL`, ...), from the first entry of
//! the run to the end of its last, with the state in the marker's `state` field.
//!
//! **Memory.** The tracks are [`crate::tracks`]'s: the 256 busiest threads, the others merged into one "other
//! threads" track (in a process of its own). The crate (fxprof-processed-profile) makes each track's tables
//! (stacks, frames, functions, strings) but holds no sample and no marker: each thread is written without samples
//! and with one template GIL marker per state, then its samples and markers are streamed in place of its empty
//! tables, each column made in one pass over the track's entries (in memory up to 64 KiB, then in a temporary
//! file) and copied out. So memory is the tables, whatever the number of samples; the output is byte for byte what
//! the crate writes with every sample. The profile must have been loaded with [`crate::LoadOptions::timeline`].

use std::collections::HashMap;
use std::io::{self, Seek, Write};

use fx::{
    CategoryColor, CategoryHandle, CategoryPairHandle, Frame, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, ReferenceTimestamp, SamplingInterval, StackHandle, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, Timestamp, WeightType,
};
use fxprof_processed_profile as fx;
use pyperf_format::{FrameKind, GilState};

use crate::hash::FxMap;
use crate::names::{self, escape_text};
use crate::profile::{Mode, Profile};
use crate::tracks::{Tracks, OTHER_THREADS};

/// What the Firefox Profiler export shows.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The profile's product name [default: the recorded command].
    pub name: Option<String>,
}

/// A run of one GIL state on a thread.
struct GilMarker {
    name: StringHandle,
    state: StringHandle,
    category: CategoryHandle,
}

impl StaticSchemaMarker for GilMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "GIL";
    const DESCRIPTION: Option<&'static str> = Some("The thread's GIL state, as pyperf read it at each sample");
    const CHART_LABEL: Option<&'static str> = Some("{marker.data.state}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "state",
        label: "GIL state",
        format: MarkerFieldFormat::String,
        flags: MarkerFieldFlags::SEARCHABLE,
    }];

    fn name(&self, _profile: &mut fx::Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _profile: &mut fx::Profile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, _field_index: u32) -> StringHandle {
        self.state
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        0.0
    }
}

/// How a marker names a GIL state.
fn gil_name(state: GilState) -> String {
    match state {
        GilState::ThisThread => "GIL held by this thread".to_string(),
        GilState::OtherThread => "GIL held by another thread".to_string(),
        GilState::NotLocked => "GIL released".to_string(),
        other => format!("GIL: {}", other.key()),
    }
}

struct Categories {
    python: CategoryPairHandle,
    native: CategoryPairHandle,
    kernel: CategoryPairHandle,
    idle: CategoryPairHandle,
    off_cpu: CategoryPairHandle,
    other: CategoryPairHandle,
    gil: CategoryHandle,
}

/// Writes `profile` as a processed Firefox Profiler profile (see the module docs).
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let period = profile.sampling_period_ns();
    let name = options.name.clone().unwrap_or_else(|| profile.recorded_command());
    let name = if name.is_empty() { "pyperf".to_string() } else { escape_text(&name) };
    let reference = ReferenceTimestamp::from_millis_since_unix_epoch(profile.header.start_time_unix_ns as f64 / 1e6);
    let interval = SamplingInterval::from_nanos(period.unwrap_or(1_000_000).max(1));
    let mut fxp = fx::Profile::new(&name, reference, interval);
    fxp.set_os_name(&format!("Linux {}", escape_text(&profile.header.kernel_release)));
    let cat = |p: &mut fx::Profile, n: &str, c: CategoryColor| CategoryPairHandle::from(p.add_category(n, c));
    let categories = Categories {
        python: cat(&mut fxp, "Python", CategoryColor::Yellow),
        native: cat(&mut fxp, "Native", CategoryColor::Blue),
        kernel: cat(&mut fxp, "Kernel", CategoryColor::Orange),
        idle: cat(&mut fxp, "Idle", CategoryColor::Transparent),
        off_cpu: cat(&mut fxp, "Off-CPU", CategoryColor::LightBlue),
        other: CategoryPairHandle::from(CategoryHandle::OTHER),
        gil: fxp.add_category("GIL", CategoryColor::Purple),
    };
    let time_weights = profile.mode != Mode::Cpu;

    // Processes, each when first seen; threads in their process, main thread first.
    let mut processes = Vec::with_capacity(profile.processes.len());
    for p in &profile.processes {
        let start = p.record.and_then(|r| profile.tables.processes.get(r as usize)).map_or(0, |r| r.first_seen_ns);
        processes.push(fxp.add_process(&escape_text(&p.label), p.pid, Timestamp::from_nanos_since_reference(start)));
    }
    // The busiest threads have a track each (past [`MAX_TRACKS`], the others share one, in a process of its own),
    // in their processes, main thread first.
    let tracks = Tracks::new(profile, None)?;
    let mut order: Vec<usize> = (0..tracks.len()).collect();
    order.sort_by_key(|&k| match tracks.thread(k).map(|i| &profile.threads[i]) {
        Some(t) => (0, t.process, t.tid != t.pid, t.first_ns, t.tid),
        None => (1, 0, true, 0, 0),
    });
    // Each track as a thread without samples: its tables (stacks, frames, functions, strings) and one GIL marker
    // per state it has, which the streamed markers copy.
    let mut first = true;
    let mut made: Vec<Made> = Vec::new();
    for k in order {
        let handle = match tracks.thread(k).map(|i| &profile.threads[i]) {
            Some(thread) => {
                let Some(&process) = processes.get(thread.process as usize) else { continue };
                let handle = fxp.add_thread(
                    process,
                    thread.tid,
                    Timestamp::from_nanos_since_reference(thread.first_ns),
                    thread.tid == thread.pid,
                );
                fxp.set_thread_name(handle, &escape_text(&profile.thread_label(thread)));
                handle
            }
            None => {
                // Started when the first of its threads was seen.
                let first_ns = tracks.merged.iter().map(|&t| profile.threads[t].first_ns).min().unwrap_or(0);
                let start = Timestamp::from_nanos_since_reference(first_ns);
                let process = fxp.add_process(OTHER_THREADS, 0, start);
                let handle = fxp.add_thread(process, 0, start, false);
                fxp.set_thread_name(handle, &format!("{OTHER_THREADS} ({} threads)", tracks.merged.len()));
                handle
            }
        };
        if time_weights {
            fxp.set_thread_samples_weight_type(handle, WeightType::TracingMs);
        }
        if first {
            fxp.add_initial_selected_thread(handle);
            first = false;
        }
        let mut stacks: FxMap<u32, Option<usize>> = FxMap::default();
        let mut memo = Stacks::default();
        let mut states: Vec<u8> = Vec::new();
        // A state's template is made when its first run ends, as its first marker was: the thread's strings come
        // in the same order as when every marker was made here.
        let mut template = |fxp: &mut fx::Profile, state: u8| {
            if !states.contains(&state) {
                states.push(state);
                gil_marker(fxp, handle, &categories, state, 0, 0);
            }
        };
        let mut run: Option<u8> = None;
        for e in tracks.entries(k) {
            if let std::collections::hash_map::Entry::Vacant(slot) = stacks.entry(e.stack) {
                let s = stack_of(profile, &mut fxp, handle, &categories, &mut memo, e.stack);
                slot.insert(s.and_then(|h| memo.index.get(&h).copied()));
            }
            match run {
                Some(state) if state == e.gil => {}
                Some(state) => template(&mut fxp, state),
                None => {}
            }
            run = Some(e.gil);
        }
        if let Some(state) = run {
            template(&mut fxp, state);
        }
        made.push(Made { track: k, stacks, states });
    }
    tracks.check()?;

    // The profile without samples and with the template markers, then each thread's samples and markers streamed
    // in their place.
    let skeleton = serde_json::to_vec(&fxp).map_err(io::Error::other)?;
    drop(fxp);
    let mut o = io::BufWriter::with_capacity(1 << 16, &mut out);
    let mut rest = &skeleton[..];
    // The threads come in the crate's order; each is known by its tid, unique in the file.
    let tid_strings = unique_tids(profile, &tracks, &made);
    while let Some(at) = find(rest, SAMPLES_KEY) {
        let tid = find(&rest[at..], TID_KEY).and_then(|i| json_string_at(&rest[at + i + TID_KEY.len()..]));
        let Some(&m) = tid.and_then(|t| tid_strings.get(&t)) else {
            return Err(io::Error::other("Firefox Profiler export: a thread of the writer is unknown"));
        };
        let Made { track: k, stacks, states } = &made[m];
        // The empty sample table: up to its first closing brace (it has no nested object).
        let close = rest[at..].iter().position(|&b| b == b'}').map(|i| at + i + 1).unwrap_or(rest.len());
        // Markers come before samples in a thread: find this thread's markers object before `at`.
        let Some(mk) = rfind(&rest[..at], MARKERS_KEY) else {
            return Err(io::Error::other("Firefox Profiler export: no markers in a thread of the writer"));
        };
        let markers_end = matching_brace(&rest[mk + MARKERS_KEY.len() - 1..]).map(|i| mk + MARKERS_KEY.len() - 1 + i);
        let Some(markers_end) = markers_end else {
            return Err(io::Error::other("Firefox Profiler export: unreadable markers in a thread of the writer"));
        };
        let templates: serde_json::Value =
            serde_json::from_slice(&rest[mk + MARKERS_KEY.len() - 1..markers_end]).map_err(io::Error::other)?;
        o.write_all(&rest[..mk + MARKERS_KEY.len() - 1])?;
        let track = Track { tracks: &tracks, k: *k, profile, period, time_weights };
        track.write_markers(&mut o, &templates, states)?;
        o.write_all(&rest[markers_end..at + SAMPLES_KEY.len() - 1])?;
        track.write_samples(&mut o, stacks)?;
        rest = &rest[close..];
    }
    o.write_all(rest)?;
    tracks.check()?;
    o.flush()?;
    drop(o);
    out.flush()
}

const SAMPLES_KEY: &[u8] = b"\"samples\":{";
const MARKERS_KEY: &[u8] = b"\"markers\":{";
const TID_KEY: &[u8] = b"\"tid\":\"";

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// The JSON string at the start of `b` (after its opening quote), up to its closing quote (tids have no escapes).
fn json_string_at(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == b'"')?;
    String::from_utf8(b[..end].to_vec()).ok()
}

/// The end (one past) of the JSON object that `b` starts with, strings skipped.
fn matching_brace(b: &[u8]) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &c) in b.iter().enumerate() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The tid each thread has in the file (the crate makes them unique as `124`, `124.1`, ... in the order threads
/// are added), to its index in `made`.
fn unique_tids(profile: &Profile, tracks: &Tracks, made: &[Made]) -> HashMap<String, usize> {
    let mut next: HashMap<u32, u32> = HashMap::new();
    let mut out = HashMap::new();
    for (m, made) in made.iter().enumerate() {
        let tid = tracks.thread(made.track).map_or(0, |i| profile.threads[i].tid);
        let text = match next.get_mut(&tid) {
            Some(n) => {
                let t = format!("{tid}.{n}");
                *n += 1;
                t
            }
            None => {
                next.insert(tid, 1);
                tid.to_string()
            }
        };
        out.insert(text, m);
    }
    out
}

/// A track's thread as made in the writer without samples.
struct Made {
    /// The track (index in [`Tracks`]).
    track: usize,
    /// Its stack index of each timeline stack (`None`: no frame).
    stacks: FxMap<u32, Option<usize>>,
    /// Its GIL states, in the order of their template markers.
    states: Vec<u8>,
}

/// One track being written.
struct Track<'a> {
    tracks: &'a Tracks,
    k: usize,
    profile: &'a Profile,
    period: Option<u64>,
    time_weights: bool,
}

/// Writes numbers as a JSON array (a column of a table whose columns are written one after the other, made in one
/// pass over the entries): in memory up to [`Column::IN_MEMORY`] bytes, then in a temporary file.
struct Column {
    buf: Vec<u8>,
    file: Option<std::fs::File>,
    first: bool,
}

impl Column {
    const IN_MEMORY: usize = 1 << 16;

    fn new() -> Column {
        Column { buf: b"[".to_vec(), file: None, first: true }
    }

    /// Moves what is in memory to the file once there is enough of it.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= Self::IN_MEMORY {
            let file = match &mut self.file {
                Some(f) => f,
                None => self.file.insert(tempfile::tempfile()?),
            };
            file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn push(&mut self, value: impl std::fmt::Display) -> io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.buf.push(b',');
        }
        write!(self.buf, "{value}")?;
        self.spill()
    }

    fn push_json(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.buf.push(b',');
        }
        serde_json::to_writer(&mut self.buf, value).map_err(io::Error::other)?;
        self.spill()
    }

    /// Writes `"key":[...]` to `o`.
    fn copy_to(mut self, key: &str, o: &mut impl Write) -> io::Result<()> {
        self.buf.push(b']');
        write!(o, "\"{key}\":")?;
        if let Some(mut file) = self.file.take() {
            file.seek(io::SeekFrom::Start(0))?;
            io::copy(&mut file, o)?;
        }
        o.write_all(&self.buf)
    }
}

impl Track<'_> {
    /// What each entry of the track is as a sample: (time, stack, CPU delta in µs, weight) and the end of its
    /// time, in time order; the weights in whole milliseconds in the time modes, the rounding carried.
    fn for_each(&self, mut f: impl FnMut(u64, u32, u64, i32, u64, u8) -> io::Result<()>) -> io::Result<()> {
        let period = self.period.unwrap_or(0);
        let mut carry_ns: u64 = 0;
        for e in self.tracks.entries(self.k) {
            let is_interval = self.profile.timeline_reasons.get(e.stack as usize).is_some_and(|&r| r != 0);
            let weight_ns = e.weight.unwrap_or(period);
            // A stolen period (wall mode) is the thread's time without a CPU, as an interval's.
            let cpu = if is_interval || e.stolen { 0 } else { period / 1000 };
            let weight = if self.time_weights {
                // Whole milliseconds, the remainder carried to the next entry.
                carry_ns = carry_ns.saturating_add(weight_ns);
                let ms = carry_ns / 1_000_000;
                carry_ns -= ms * 1_000_000;
                i32::try_from(ms).unwrap_or(i32::MAX)
            } else {
                1
            };
            let end = e.time.saturating_add(weight_ns.max(period));
            f(e.time, e.stack, cpu, weight, end, e.gil)?;
        }
        Ok(())
    }

    /// The samples table, as the crate writes it for samples in time order.
    fn write_samples(&self, o: &mut impl Write, stacks: &FxMap<u32, Option<usize>>) -> io::Result<()> {
        let (mut stack, mut time, mut weight, mut cpu) = (Column::new(), Column::new(), Column::new(), Column::new());
        let (mut n, mut prev) = (0u64, 0u64);
        self.for_each(|t, s, c, w, _, _| {
            n += 1;
            match stacks.get(&s).copied().flatten() {
                Some(i) => stack.push(i)?,
                None => stack.push("null")?,
            }
            time.push_json(&((t - prev) as f64 / 1_000_000.0))?;
            prev = t;
            weight.push(w)?;
            cpu.push(c)
        })?;
        let weight_type = if self.time_weights { "tracing-ms" } else { "samples" };
        write!(o, "{{\"length\":{n},\"weightType\":\"{weight_type}\",")?;
        stack.copy_to("stack", o)?;
        o.write_all(b",")?;
        time.copy_to("timeDeltas", o)?;
        o.write_all(b",")?;
        weight.copy_to("weight", o)?;
        o.write_all(b",")?;
        cpu.copy_to("threadCPUDelta", o)?;
        o.write_all(b"}")
    }

    /// The markers table: one GIL marker per run of entries in one state, each a copy of its state's template
    /// (the markers the crate wrote, in the order of `states`) with its own times.
    fn write_markers(&self, o: &mut impl Write, templates: &serde_json::Value, states: &[u8]) -> io::Result<()> {
        let column = |key: &str| templates.get(key).and_then(|v| v.as_array()).cloned().unwrap_or_default();
        let (categories, data, names, phases) = (column("category"), column("data"), column("name"), column("phase"));
        if [categories.len(), data.len(), names.len(), phases.len()].iter().any(|&n| n != states.len()) {
            return Err(io::Error::other("Firefox Profiler export: unexpected marker table of the writer"));
        }
        // A marker's data as the crate writes it: its type first, then its fields.
        let data: Vec<String> = data
            .iter()
            .map(|d| {
                let mut text = format!("{{\"type\":{}", d.get("type").map(|t| t.to_string()).unwrap_or_default());
                if let Some(map) = d.as_object() {
                    for (key, value) in map.iter().filter(|(key, _)| key.as_str() != "type") {
                        text.push_str(&format!(",{}:{value}", serde_json::Value::from(key.as_str())));
                    }
                }
                text.push('}');
                text
            })
            .collect();
        let mut cols: Vec<Column> = (0..6).map(|_| Column::new()).collect();
        let mut n = 0u64;
        let mut emit = |cols: &mut [Column], state: u8, from: u64, to: u64| -> io::Result<()> {
            let i = states.iter().position(|&s| s == state).unwrap_or(0);
            n += 1;
            cols[0].push(&categories[i])?;
            cols[1].push(&data[i])?;
            cols[2].push_json(&(to.max(from) as f64 / 1_000_000.0))?;
            cols[3].push(&names[i])?;
            cols[4].push(&phases[i])?;
            cols[5].push_json(&(from as f64 / 1_000_000.0))
        };
        // The open run: (state, first time, end of the last entry).
        let mut run: Option<(u8, u64, u64)> = None;
        self.for_each(|time, _, _, _, end, gil| {
            run = match run {
                Some((state, from, _)) if state == gil => Some((state, from, end)),
                Some((state, from, to)) => {
                    emit(&mut cols, state, from, to)?;
                    Some((gil, time, end))
                }
                None => Some((gil, time, end)),
            };
            Ok(())
        })?;
        if let Some((state, from, to)) = run {
            emit(&mut cols, state, from, to)?;
        }
        write!(o, "{{\"length\":{n},")?;
        let mut cols = cols.into_iter();
        for (i, key) in ["category", "data", "endTime", "name", "phase", "startTime"].iter().enumerate() {
            if i > 0 {
                o.write_all(b",")?;
            }
            if let Some(c) = cols.next() {
                c.copy_to(key, o)?;
            }
        }
        o.write_all(b"}")
    }
}

fn gil_marker(fxp: &mut fx::Profile, thread: fx::ThreadHandle, c: &Categories, state: u8, from: u64, to: u64) {
    let state = GilState::from_u8(state);
    let name = fxp.intern_string(&gil_name(state));
    let key = fxp.intern_string(&state.key());
    let timing = MarkerTiming::Interval(
        Timestamp::from_nanos_since_reference(from),
        Timestamp::from_nanos_since_reference(to.max(from)),
    );
    fxp.add_marker(thread, timing, GilMarker { name, state: key, category: c.gil });
}

/// Per thread: the stack handle of each (root marker, stack-table node) made so far, so that every node is made
/// once per thread whatever the depth of the stacks through it (time linear in the distinct nodes, as speedscope's).
#[derive(Default)]
struct Stacks {
    made: HashMap<(u32, u32), Option<StackHandle>>,
    /// Each stack's index in the thread's stack table: handles are numbered as the table grows, and every stack of
    /// the thread is made here.
    index: HashMap<StackHandle, usize>,
    /// Root markers' texts, by index (the first part of the key).
    markers: Vec<String>,
}

/// The stack of timeline stack `id` on `thread`: its marker (root), frames and off-CPU reason (leaf), as
/// [`Profile::stack_count_names`] names them; `None` for no frame at all.
fn stack_of(
    profile: &Profile,
    fxp: &mut fx::Profile,
    thread: fx::ThreadHandle,
    c: &Categories,
    memo: &mut Stacks,
    id: u32,
) -> Option<StackHandle> {
    let &(status, leaf) = profile.timeline_stacks.get(id as usize)?;
    let reason = profile.timeline_reasons.get(id as usize).copied().unwrap_or(0);
    let label = |fxp: &mut fx::Profile, text: &str, category_pair: CategoryPairHandle| FrameInfo {
        frame: Frame::Label(fxp.intern_string(&escape_text(text))),
        category_pair,
        flags: FrameFlags::empty(),
    };
    // The root marker, made once per thread.
    let marker = names::stack_marker(status, leaf != 0, reason != 0);
    let m = match &marker {
        None => u32::MAX,
        Some(text) => match memo.markers.iter().position(|t| t == text) {
            Some(i) => i as u32,
            None => {
                memo.markers.push(text.clone());
                (memo.markers.len() - 1) as u32
            }
        },
    };
    let root = match &marker {
        None => None,
        Some(text) => match memo.made.get(&(m, 0)) {
            Some(&h) => h,
            None => {
                let category = if text == names::IDLE { c.idle } else { c.other };
                let info = label(fxp, text, category);
                let frame = fxp.intern_frame(thread, info);
                let h = Some(intern(fxp, memo, thread, None, frame));
                memo.made.insert((m, 0), h);
                h
            }
        },
    };
    // The nodes from the leaf up to the first one made already (or the root), then made root first.
    let mut missing = Vec::new();
    let mut node = leaf;
    let mut below = root;
    while node != 0 {
        if let Some(&h) = memo.made.get(&(m, node)) {
            below = h;
            break;
        }
        missing.push(node);
        node = profile.tables.nodes.get(node as usize - 1).map_or(0, |&(parent, _)| parent);
    }
    for &n in missing.iter().rev() {
        let Some(&(_, sid)) = profile.tables.nodes.get(n as usize - 1) else { continue };
        let sym = profile.tables.symbol(sid);
        let category = match sym.kind() {
            FrameKind::Python => c.python,
            FrameKind::Native | FrameKind::Glue => c.native,
            FrameKind::Kernel => c.kernel,
            FrameKind::Marker | FrameKind::Task | FrameKind::Interpreter => c.other,
        };
        let info = label(fxp, &names::frame_name(sym, true), category);
        let frame = fxp.intern_frame(thread, info);
        below = Some(intern(fxp, memo, thread, below, frame));
        memo.made.insert((m, n), below);
    }
    if reason != 0 {
        let text = profile.reasons.get(reason as usize).cloned().unwrap_or_else(|| "[off-CPU]".to_string());
        let info = label(fxp, &text, c.off_cpu);
        let frame = fxp.intern_frame(thread, info);
        below = Some(intern(fxp, memo, thread, below, frame));
    }
    below
}

/// `fxp.intern_stack`, the stack's index recorded.
fn intern(
    fxp: &mut fx::Profile,
    memo: &mut Stacks,
    thread: fx::ThreadHandle,
    parent: Option<StackHandle>,
    frame: fx::FrameHandle,
) -> StackHandle {
    let h = fxp.intern_stack(thread, parent, frame);
    let next = memo.index.len();
    memo.index.entry(h).or_insert(next);
    h
}
