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
//! Memory: the crate keeps every sample (some 30 bytes each) until the file is written; the profile must have
//! been loaded with [`crate::LoadOptions::timeline`].

use std::collections::HashMap;
use std::io::{self, Write};

use fx::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, ReferenceTimestamp, SamplingInterval, StackHandle, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, Timestamp, WeightType,
};
use fxprof_processed_profile as fx;
use pyperf_format::{FrameKind, GilState};

use crate::names::{self, escape_text};
use crate::profile::{Mode, Profile};

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
    let mut order: Vec<usize> = (0..profile.threads.len()).collect();
    order.sort_by_key(|&i| {
        let t = &profile.threads[i];
        (t.process, t.tid != t.pid, t.first_ns, t.tid)
    });
    let mut first = true;
    for i in order {
        let (thread, Some(timeline)) = (&profile.threads[i], profile.timelines.get(i)) else { continue };
        if timeline.times.is_empty() {
            continue;
        }
        let Some(&process) = processes.get(thread.process as usize) else { continue };
        let handle = fxp.add_thread(
            process,
            thread.tid,
            Timestamp::from_nanos_since_reference(thread.first_ns),
            thread.tid == thread.pid,
        );
        fxp.set_thread_name(handle, &escape_text(&profile.thread_label(thread)));
        if time_weights {
            fxp.set_thread_samples_weight_type(handle, WeightType::TracingMs);
        }
        if first {
            fxp.add_initial_selected_thread(handle);
            first = false;
        }
        // Entries in time order (the timeline is in file order).
        let mut entries: Vec<u32> = (0..timeline.times.len() as u32).collect();
        entries.sort_by_key(|&e| timeline.times[e as usize]);
        let mut stacks: HashMap<u32, Option<StackHandle>> = HashMap::new();
        let mut memo = Stacks::default();
        let mut carry_ns: u64 = 0;
        // The open GIL run: (state, first time, end of the last entry).
        let mut run: Option<(u8, u64, u64)> = None;
        for e in entries {
            let e = e as usize;
            let (time, id) = (timeline.times[e], timeline.stacks[e]);
            let stack = match stacks.get(&id) {
                Some(s) => *s,
                None => {
                    let s = stack_of(profile, &mut fxp, handle, &categories, &mut memo, id);
                    stacks.insert(id, s);
                    s
                }
            };
            let is_interval = profile.timeline_reasons.get(id as usize).is_some_and(|&r| r != 0);
            let weight_ns = timeline.weights.get(e).copied().unwrap_or_else(|| period.unwrap_or(0));
            let cpu = if is_interval { CpuDelta::ZERO } else { CpuDelta::from_nanos(period.unwrap_or(0)) };
            let weight = if time_weights {
                // Whole milliseconds, the remainder carried to the next entry.
                carry_ns = carry_ns.saturating_add(weight_ns);
                let ms = carry_ns / 1_000_000;
                carry_ns -= ms * 1_000_000;
                i32::try_from(ms).unwrap_or(i32::MAX)
            } else {
                1
            };
            fxp.add_sample(handle, Timestamp::from_nanos_since_reference(time), stack, cpu, weight);
            let end = time.saturating_add(weight_ns.max(period.unwrap_or(0)));
            let gil = timeline.gil.get(e).copied().unwrap_or(0);
            run = match run {
                Some((state, from, _)) if state == gil => Some((state, from, end)),
                Some((state, from, to)) => {
                    gil_marker(&mut fxp, handle, &categories, state, from, to);
                    Some((gil, time, end))
                }
                None => Some((gil, time, end)),
            };
        }
        if let Some((state, from, to)) = run {
            gil_marker(&mut fxp, handle, &categories, state, from, to);
        }
    }
    serde_json::to_writer(&mut out, &fxp).map_err(io::Error::other)?;
    out.flush()
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
                let h = Some(fxp.intern_stack(thread, None, frame));
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
            FrameKind::Marker => c.other,
        };
        let info = label(fxp, &names::frame_name(sym, true), category);
        let frame = fxp.intern_frame(thread, info);
        below = Some(fxp.intern_stack(thread, below, frame));
        memo.made.insert((m, n), below);
    }
    if reason != 0 {
        let text = profile.reasons.get(reason as usize).cloned().unwrap_or_else(|| "[off-CPU]".to_string());
        let info = label(fxp, &text, c.off_cpu);
        let frame = fxp.intern_frame(thread, info);
        below = Some(fxp.intern_stack(thread, below, frame));
    }
    below
}
