//! The text report: what was recorded, where the time went (functions by self and total share, top stacks) and
//! the GIL / thread-state / pthread-id / stack-status breakdown.
//!
//! In [`Mode::OffCpu`] and [`Mode::Wall`] the shares are time (ms): the report starts with where the threads' time
//! went, all together and thread by thread (running: CPU samples x period; runnable, blocked, GIL wait: off-CPU
//! intervals, each split between runnable and its kind in proportion `runnable_ns / duration_ns`), then functions
//! by self and total time and the top stacks, each off-CPU one ending in its `[off-CPU: ...]` frame; the sample
//! state breakdowns are left out (they describe CPU samples: `--mode cpu`).
//!
//! Native and kernel frames (a recording made with `--native` / `--kernel`) are functions like Python ones: a native
//! function's file is its library, a kernel function's `[kernel.kallsyms]`; the summary says which kinds of frames
//! the stacks hold and which are left out, and a table gives each native library's self share (and build id). With
//! `--no-native --no-kernel` the tables hold Python functions only: time in native and kernel code is self time of
//! the Python function that called it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Write};

use pyperf_format::{FrameKind, Rate, StackStatus, Symbol};

use crate::folded::micros;
use crate::hash::FxMap;
use crate::names;
use crate::profile::{Mode, OffCpuTime, Profile, StackCount, ALL_THREADS};

/// What the text report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Rows in the function tables, the top-stacks list and the thread table.
    pub top: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { top: 20 }
    }
}

/// One function (all lines of it) and its sample counts (in [`Mode::OffCpu`] and [`Mode::Wall`]: ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionShare {
    /// `Class.method`, or a pseudo-frame such as `[idle]` or `[off-CPU: read]`.
    pub function: String,
    /// Empty for pseudo-frames.
    pub file: String,
    /// Samples where it was the leaf (running); an off-CPU interval's leaf is its `[off-CPU: ...]` frame.
    pub self_samples: u64,
    /// Samples where it was on the stack, counted once per sample even when it recurses.
    pub total_samples: u64,
}

/// Self and total counts per function over the matching samples, sorted by self count (then total, name).
/// Samples without Python frames count as self time of their pseudo-frame (`[idle]`, ...); an off-CPU interval
/// counts as self time of its `[off-CPU: ...]` frame and as total time of every function on its stack.
///
/// Linear in the recording's stack table, whatever the stacks' depths: totals come from one walk of the file's
/// tree of stack nodes, where a node adds the samples below it to its function's total only at the function's
/// outermost occurrence on the path (so a recursive function counts once per sample), never from each stack
/// walked from its leaf (a chain 20,000 frames deep sampled at every depth would be 200 million steps).
pub fn function_shares(profile: &Profile) -> Vec<FunctionShare> {
    let tables = &profile.tables;
    let nodes = tables.nodes.len();
    // Symbols of one function at different lines are one function. Names come from the file: SipHash.
    let mut function_ids: HashMap<(String, String), u32> = HashMap::new();
    let mut functions: Vec<FunctionShare> = Vec::new();
    let mut function_id = |name: String, file: String, functions: &mut Vec<FunctionShare>| -> u32 {
        let next = functions.len() as u32;
        *function_ids.entry((name, file)).or_insert_with_key(|(name, file)| {
            functions.push(FunctionShare {
                function: name.clone(),
                file: file.clone(),
                self_samples: 0,
                total_samples: 0,
            });
            next
        })
    };
    // Matching samples per leaf node (all threads and statuses): all of them below it, those that end there (CPU
    // samples) at it; those without frames go to their pseudo-frame, and off-CPU intervals end in theirs.
    let mut below: Vec<u64> = vec![0; nodes + 1];
    let mut at_node: Vec<u64> = vec![0; nodes + 1];
    for s in &profile.stacks {
        let off_cpu = s.reason != 0;
        if off_cpu {
            let text = profile.reasons.get(s.reason as usize).cloned().unwrap_or_default();
            let id = function_id(text, String::new(), &mut functions) as usize;
            functions[id].self_samples = functions[id].self_samples.saturating_add(s.count);
            functions[id].total_samples = functions[id].total_samples.saturating_add(s.count);
        }
        if s.leaf == 0 {
            if let Some(marker) = names::stack_marker(s.status, false, off_cpu) {
                let id = function_id(marker, String::new(), &mut functions) as usize;
                if !off_cpu {
                    functions[id].self_samples = functions[id].self_samples.saturating_add(s.count);
                }
                functions[id].total_samples = functions[id].total_samples.saturating_add(s.count);
            }
        } else {
            // Tables::apply checked every sample's and interval's leaf against the node table.
            below[s.leaf as usize] = below[s.leaf as usize].saturating_add(s.count);
            if !off_cpu {
                at_node[s.leaf as usize] = at_node[s.leaf as usize].saturating_add(s.count);
            }
        }
    }
    // Samples at or below each node, and the children of each node with samples below it.
    let (child_start, children) = crate::profile::children_with_samples(&profile.tables, &mut below);
    // Depth first from the empty stack, counting per function its occurrences on the current path.
    let mut function_of_symbol: FxMap<u32, u32> = FxMap::default();
    let mut on_path: Vec<u32> = Vec::new();
    // (node, its function, next child index)
    let mut stack: Vec<(u32, u32, u32)> = vec![(0, u32::MAX, child_start[0])];
    while let Some(top) = stack.last_mut() {
        let (node, function, next) = *top;
        if next < child_start[node as usize + 1] {
            top.2 += 1;
            let child = children[next as usize];
            let sym = tables.nodes[child as usize - 1].1;
            let f = match function_of_symbol.get(&sym) {
                Some(&f) => f,
                None => {
                    let (name, file) = function_of(tables.symbol(sym));
                    let f = function_id(name, file, &mut functions);
                    function_of_symbol.insert(sym, f);
                    f
                }
            };
            if on_path.len() < functions.len() {
                on_path.resize(functions.len(), 0);
            }
            let share = &mut functions[f as usize];
            share.self_samples = share.self_samples.saturating_add(at_node[child as usize]);
            if on_path[f as usize] == 0 {
                share.total_samples = share.total_samples.saturating_add(below[child as usize]);
            }
            on_path[f as usize] += 1;
            stack.push((child, f, child_start[child as usize]));
        } else {
            stack.pop();
            if function != u32::MAX {
                on_path[function as usize] -= 1;
            }
        }
    }
    functions.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
    });
    functions
}

/// A function table's (function, file) of a symbol: `Class.method` and its file; a native function and its library; a
/// kernel function and `[kernel.kallsyms]`; a recorder's marker (`[native: unmerged]`) and no file.
fn function_of(symbol: &Symbol) -> (String, String) {
    match symbol.kind() {
        FrameKind::Marker | FrameKind::Task | FrameKind::Interpreter => (names::marker_name(symbol), String::new()),
        _ => (names::function_name(symbol), names::file_name(symbol)),
    }
}

/// One native library (or executable) and its self samples (in [`Mode::OffCpu`] and [`Mode::Wall`]: ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryShare {
    /// Path as mapped.
    pub path: String,
    /// GNU build id, lower-case hex; empty when unknown.
    pub build_id: String,
    /// Matching CPU samples whose leaf frame is one of its functions.
    pub self_samples: u64,
}

/// The native libraries of a recording with native frames (format 1.4): those the recording lists and those its
/// kept native frames name, with their self samples, most first (then by path). Empty when native frames are left
/// out.
pub fn library_shares(profile: &Profile) -> Vec<LibraryShare> {
    if !profile.frames.native {
        return Vec::new();
    }
    let tables = &profile.tables;
    let mut by_path: HashMap<&str, u64> = tables.libraries().keys().map(|p| (p.as_str(), 0)).collect();
    let is_native = |s: &Symbol| matches!(s.kind(), FrameKind::Native | FrameKind::Glue);
    // Frames outside every mapping have no library: `?`.
    fn library(s: &Symbol) -> &str {
        if s.file.is_empty() {
            "?"
        } else {
            s.file.as_str()
        }
    }
    if profile.recorded_frames.native || profile.recorded_frames.glue {
        for &(_, sym) in &tables.nodes {
            let symbol = tables.symbol(sym);
            if is_native(symbol) {
                by_path.entry(library(symbol)).or_insert(0);
            }
        }
    }
    for s in &profile.stacks {
        // An off-CPU interval's leaf is its reason, and a stack without frames has none.
        if s.reason != 0 || s.leaf == 0 {
            continue;
        }
        // Tables::apply checked every leaf against the node table.
        let symbol = tables.symbol(tables.nodes[s.leaf as usize - 1].1);
        if is_native(symbol) {
            let n = by_path.entry(library(symbol)).or_insert(0);
            *n = n.saturating_add(s.count);
        }
    }
    let mut out: Vec<LibraryShare> = by_path
        .into_iter()
        .map(|(path, self_samples)| LibraryShare {
            path: path.to_string(),
            build_id: tables.libraries().get(path).cloned().unwrap_or_default(),
            self_samples,
        })
        .collect();
    out.sort_by(|a, b| b.self_samples.cmp(&a.self_samples).then_with(|| a.path.cmp(&b.path)));
    out
}

/// The summary's `jit code` line, when native frames lie in code generated at run time ([`names::JIT`]): the
/// samples taken in it, and the unwinds that stopped there for want of unwind rules (the recorder's counter).
fn jit_summary(profile: &Profile, libraries: &[LibraryShare]) -> Option<String> {
    let leaf = libraries.iter().find(|l| l.path == names::JIT)?.self_samples;
    let counter = |name: &str| profile.tables.stats.as_ref()?.counter(name);
    let mut line = format!("{} in generated code ({})", plural(leaf, "sample"), pct(leaf, profile.all.samples).trim());
    match counter("native_jit_stops") {
        Some(0) => line.push_str(", unwound through it"),
        Some(n) => line.push_str(&format!(", {n} native stacks cut there (it has no unwind rules)")),
        None => {}
    }
    Some(line)
}

/// The summary's `frames` line for a recording with native or kernel frames: the kinds the stacks hold, then those
/// left out and how to show them; `None` for a recording of Python frames only.
fn frames_summary(profile: &Profile) -> Option<String> {
    let (has, show) = (profile.recorded_frames, profile.frames);
    let native = has.native || has.glue || has.marker;
    if !native && !has.kernel {
        return None;
    }
    let mut kept = vec!["Python".to_string()];
    let mut left_out = Vec::new();
    if native && show.native {
        kept.push(match profile.tables.libraries().len() {
            0 => "native".to_string(),
            1 => "native (1 library)".to_string(),
            n => format!("native ({n} libraries)"),
        });
        if has.glue && show.glue {
            kept.push("interpreter glue".to_string());
        } else if has.glue {
            left_out.push("interpreter glue (--show-glue shows it)");
        }
    } else if native {
        left_out.push("native (--no-native)");
    }
    if has.kernel && show.kernel {
        kept.push("kernel".to_string());
    } else if has.kernel {
        left_out.push("kernel (--no-kernel)");
    }
    let mut line = kept.join(", ");
    if !left_out.is_empty() {
        line.push_str(&format!("; left out: {}", left_out.join(", ")));
    }
    Some(line)
}

/// Matching samples (or time) per unique stack and off-CPU reason, merged over threads (every
/// [`StackCount::thread`] is [`ALL_THREADS`]), most frequent first.
pub fn top_stacks(profile: &Profile) -> Vec<StackCount> {
    let mut by_stack: FxMap<(u8, u32, u32), u64> = FxMap::default();
    for s in &profile.stacks {
        let n = by_stack.entry((s.status.as_u8(), s.leaf, s.reason)).or_insert(0);
        *n = n.saturating_add(s.count);
    }
    let mut out: Vec<StackCount> = by_stack
        .into_iter()
        .map(|((st, leaf, reason), count)| StackCount {
            thread: ALL_THREADS,
            status: StackStatus::from_u8(st),
            leaf,
            reason,
            count,
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.status.as_u8().cmp(&b.status.as_u8()))
            .then(a.leaf.cmp(&b.leaf))
            .then(a.reason.cmp(&b.reason))
    });
    out
}

/// Task chains the text report lists at most.
const TASK_CHAINS: usize = 10;

/// One asyncio task chain and what its stacks weigh ([`task_chains`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskChain {
    /// The tasks, root task first, as their `[task NAME]` markers name them (aggregated unless the profile was loaded
    /// with exact names): `Task-N`, `request-N`, `orders-N (+1 awaiters)`; or `[asyncio loop]` alone.
    pub tasks: Vec<String>,
    /// Matching samples (in [`Mode::OffCpu`] and [`Mode::Wall`]: ns) of the stacks of this chain.
    pub count: u64,
}

/// The task chains of the profile's stacks (format 1.5, the task view): for every stack with task markers, the
/// sequence of its markers root to leaf, weighed; the busiest first. Empty for a recording without task stacks (or
/// loaded with `--no-async`).
pub fn task_chains(profile: &Profile) -> Vec<TaskChain> {
    let tables = &profile.tables;
    if !tables.symbols.iter().any(|s| s.kind() == FrameKind::Task) {
        return Vec::new();
    }
    // Per leaf, its chain's index (None: no marker); the stacks share leaves across threads and reasons.
    let mut of_leaf: FxMap<u32, Option<usize>> = FxMap::default();
    let mut chain_ids: HashMap<Vec<u32>, usize> = HashMap::new();
    let mut chains: Vec<TaskChain> = Vec::new();
    let mut ids = Vec::new();
    for st in &profile.stacks {
        let id = *of_leaf.entry(st.leaf).or_insert_with(|| {
            tables.frames_root_first(st.leaf, &mut ids);
            let markers: Vec<u32> =
                ids.iter().copied().filter(|&s| tables.symbol(s).kind() == FrameKind::Task).collect();
            if markers.is_empty() {
                return None;
            }
            let next = chains.len();
            Some(*chain_ids.entry(markers).or_insert_with_key(|markers| {
                let tasks =
                    markers.iter().map(|&s| names::task_of_marker(&tables.symbol(s).name).to_string()).collect();
                chains.push(TaskChain { tasks, count: 0 });
                next
            }))
        });
        if let Some(c) = id {
            chains[c].count = chains[c].count.saturating_add(st.count);
        }
    }
    // Chains of symbols that read the same (a crafted file's twins) are one.
    let mut merged: Vec<TaskChain> = Vec::with_capacity(chains.len());
    let mut by_text: HashMap<Vec<String>, usize> = HashMap::new();
    for c in chains {
        match by_text.get(&c.tasks) {
            Some(&i) => merged[i].count = merged[i].count.saturating_add(c.count),
            None => {
                by_text.insert(c.tasks.clone(), merged.len());
                merged.push(c);
            }
        }
    }
    merged.retain(|c| c.count > 0);
    merged.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tasks.cmp(&b.tasks)));
    merged
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "    -".to_string()
    } else {
        format!("{:5.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// `2024-05-01 12:00:00.000 UTC`.
pub fn format_time(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let millis = (unix_ns % 1_000_000_000) / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{millis:03} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Nanoseconds as milliseconds to the microsecond: `1234.568` (rounded as the folded microseconds).
pub fn format_ms(ns: u64) -> String {
    let us = micros(ns);
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// A short duration in the unit that shows it whole: `1.000 ms` (whole microseconds from 1 ms on), `500 µs`,
/// `400 ns`.
pub fn format_short(ns: u64) -> String {
    match ns {
        ns if ns % 1000 != 0 => format!("{ns} ns"),
        ns if ns < 1_000_000 => format!("{} µs", ns / 1000),
        ns => format!("{} ms", format_ms(ns)),
    }
}

/// `2.500 s`.
pub fn format_duration(ns: u64) -> String {
    format!("{}.{:03} s", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000_000)
}

fn format_rate(event: &str, rate: Rate) -> String {
    match rate {
        Rate::Frequency(hz) => format!("{event} at {hz} Hz per CPU"),
        Rate::Period(n) if event == "cpu-clock" => format!("{event}, one sample every {n} ns"),
        Rate::Period(n) => format!("{event}, one sample every {n} events"),
    }
}

/// Renders the whole report. Every text that comes from the recording (names, files, commands, thread names,
/// warnings) is escaped ([`names::escape_text`]): it cannot drive the terminal or reorder what is shown.
pub fn render(profile: &Profile, options: &Options) -> String {
    let mut o = String::new();
    render_into(profile, options, &mut o);
    o
}

/// [`render`] into any text sink; errors of the sink end nothing early (the caller keeps them).
fn render_into<O: fmt::Write>(profile: &Profile, options: &Options, o: &mut O) {
    let h = &profile.header;
    let e = names::escape_text;
    let top = options.top;
    // Native libraries' self samples: the summary's `jit code` line and the libraries table.
    let libraries = library_shares(profile);

    // --- What was recorded.
    let _ = writeln!(o, "Recording");
    let mut field = |name: &str, value: String| {
        let _ = writeln!(o, "  {name:<13} {value}");
    };
    if !profile.sources.is_empty() {
        let list: Vec<String> = profile.sources.iter().map(|s| e(s)).collect();
        field("recordings", format!("{} as one: {}", list.len(), list.join(", ")));
    }
    field("command", e(&profile.recorded_command()));
    field(
        "recorded by",
        format!("pyperf {} (file format {}.{})", e(&h.pyperf_version), profile.version.0, profile.version.1),
    );
    field("host", format!("{} (kernel {}, {})", e(&h.hostname), e(&h.kernel_release), e(&h.arch)));
    field("started", format_time(h.start_time_unix_ns));
    field("event", format_rate(&e(&h.event), h.rate));
    let stats = profile.tables.stats.as_ref();
    field(
        "duration",
        match stats {
            Some(_) => format_duration(profile.duration_ns()),
            None => format!("{} (span of the samples; no trailer)", format_duration(profile.duration_ns())),
        },
    );
    // The samples counted, and the stolen periods (format 1.11): left out of them in the CPU mode, among them in
    // the time modes.
    let (read, stolen) = (profile.all.samples, profile.all.stolen);
    let cpu_mode = profile.mode == Mode::Cpu;
    let all_read = if cpu_mode { read.saturating_add(stolen) } else { read };
    let below = if stats.is_some() { ": late clock, below" } else { "" };
    let stolen_note = match stolen {
        0 => String::new(),
        _ if cpu_mode => format!(" and {} (no CPU time, left out{below})", plural(stolen, "stolen period")),
        _ => format!(", of which {} (wall time, no CPU time{below})", plural(stolen, "stolen period")),
    };
    match stats {
        Some(s) if s.samples != all_read => {
            field("samples", format!("{read}{stolen_note} read ({} written according to the trailer)", s.samples))
        }
        _ => field("samples", format!("{read}{stolen_note}")),
    }
    match stats {
        Some(s) => {
            let taken = s.samples.saturating_add(s.lost_samples);
            field(
                "lost",
                format!("{} samples ({} of {taken} taken)", s.lost_samples, pct(s.lost_samples, taken).trim()),
            )
        }
        None => field("lost", "unknown (no trailer)".into()),
    }
    let truncated = profile.all.count(StackStatus::Truncated);
    field("truncated", format!("{truncated} stacks ({} of samples)", pct(truncated, read).trim()));
    match stats {
        Some(s) => {
            field("lost symbols", s.lost_symbols.to_string());
            field("errors", s.errors.to_string());
            // Samples a subinterpreter made unreadable: say why their stacks are errors.
            let ambiguous = s.counter("bpf_interp_ambiguous").unwrap_or(0);
            if ambiguous > 0 {
                field(
                    "interpreters",
                    format!(
                        "{} of a thread claimed by thread states of several interpreters, none known to run (CPython \
                         before 3.13 cannot say; 3.13+ in the instant it switches): no frames, [stack error]",
                        plural(ambiguous, "sample")
                    ),
                );
            }
            // Samples taken late because the CPU did not run this machine (the recorder's cpu-clock catch-up): say
            // what the periods they stand for are, and where they count.
            let counter = |name: &str| s.counter(name).unwrap_or(0);
            let late = counter("clock_late_samples");
            if late > 0 {
                let added = counter("clock_periods_added");
                let counted = if profile.version < (1, 11) {
                    "counted as CPU samples (a recording before format 1.11 does not tell them apart)"
                } else if cpu_mode {
                    "wall time, not CPU time: left out here (--mode wall counts them)"
                } else {
                    "counted as the threads' wall time (running), not CPU time (--mode cpu leaves them out)"
                };
                field(
                    "late clock",
                    format!(
                        "{} taken when the CPU ran this machine again (a hypervisor's steal) {} for the {} {} \
                         missed ({} of the samples written): their threads ran, without a CPU; {counted}",
                        plural(late, "sample"),
                        if late == 1 { "stands" } else { "stand" },
                        plural(added, "period"),
                        if late == 1 { "it" } else { "they" },
                        pct(added, s.samples).trim()
                    ),
                );
            }
            // The off-CPU counters have their own line.
            let shown = |k: &str| profile.off_cpu_min_ns().is_none() || !OFF_CPU_COUNTERS.contains(&k);
            let list: Vec<String> =
                s.counters.iter().filter(|(k, _)| shown(k)).map(|(k, v)| format!("{} {v}", e(k))).collect();
            if !list.is_empty() {
                field("counters", list.join(", "));
            }
        }
        None => {
            field("lost symbols", "unknown (no trailer)".into());
            field("errors", "unknown (no trailer)".into());
        }
    }
    if let Some(frames) = frames_summary(profile) {
        field("frames", frames);
    }
    if let Some(jit) = jit_summary(profile, &libraries) {
        field("jit code", jit);
    }
    // Format 1.7 (`record --source`): the recording carries its source files; `pyperf annotate` shows them.
    let sources = profile.tables.sources();
    if !sources.is_empty() {
        let stored = sources.values().filter(|f| f.is_stored()).count();
        let bytes: usize = sources.values().map(|f| f.content.len()).sum();
        let files = |n: usize| if n == 1 { "1 file".to_string() } else { format!("{n} files") };
        let missing = sources.len() - stored;
        let not = if missing > 0 { format!(", {} not (annotate says why)", files(missing)) } else { String::new() };
        let kib = bytes as f64 / 1024.0;
        field("sources", format!("{} stored ({kib:.1} KiB){not}: `pyperf annotate` shows their lines", files(stored)));
    }
    if let Some(min) = profile.off_cpu_min_ns() {
        let (mut intervals, minimum) = off_cpu_summary(profile, min);
        if profile.mode == Mode::Cpu {
            intervals.push_str(" (--mode off-cpu or wall reports them)");
        }
        field("off-CPU", intervals);
        field("off-CPU min", minimum);
    }

    // --- Processes: a pid that exec'd or was reused is listed once per process record (instance).
    let _ = writeln!(o, "\nProcesses");
    if profile.processes.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for instance in &profile.processes {
        let _ = writeln!(
            o,
            "  {}: {}, {}",
            e(&instance.label),
            plural(instance.samples, "sample"),
            plural(instance.threads as u64, "thread")
        );
        match instance.record.and_then(|r| profile.tables.processes.get(r as usize)) {
            Some(p) => {
                let command = crate::profile::join_command(&p.command);
                let command = if command.is_empty() { "(not read)".to_string() } else { e(&command) };
                let _ = writeln!(o, "    command      {command}");
                let _ = writeln!(o, "    python       {}", e(&p.python_version));
                let build =
                    if p.build_id.is_empty() { String::new() } else { format!(" (build id {})", e(&p.build_id)) };
                let _ = writeln!(o, "    interpreter  {}{build}", e(&p.interpreter_path));
                let _ = writeln!(o, "    first seen   {} after the start", format_duration(p.first_seen_ns));
                if p.ns_pid != 0 && p.ns_pid != p.pid {
                    let _ = writeln!(o, "    namespace    pid {} in its own PID namespace (a container)", p.ns_pid);
                }
                if !p.cgroup.is_empty() {
                    let _ = writeln!(o, "    cgroup       {}", e(&p.cgroup));
                }
            }
            None => {
                let _ = writeln!(o, "    (the recording does not describe this process)");
            }
        }
    }

    // --- Warnings.
    if !profile.warnings.is_empty() {
        let _ = writeln!(o, "\nWarnings");
        for w in &profile.warnings {
            let _ = writeln!(o, "  {}", e(w));
        }
    }

    // --- Filter.
    let matched = profile.matched.samples;
    let filter = profile.filter.describe();
    if !filter.is_empty() {
        let _ = writeln!(o, "\nFilter");
        let _ = write!(o, "  {}: {matched} of {read} samples ({})", filter.join(", "), pct(matched, read).trim());
        if profile.mode.is_time() {
            let (m, all) = (profile.off_cpu_matched.intervals, profile.off_cpu_all.intervals);
            let _ = write!(o, ", {m} of {} ({})", plural(all, "off-CPU interval"), pct(m, all).trim());
        }
        let _ = writeln!(o);
    }
    let mode = profile.mode;
    // What the shares are of: samples, or the matching time.
    let whole = if mode.is_time() { profile.total() } else { matched };
    let amount = |n: u64| if mode.is_time() { format_ms(n) } else { n.to_string() };
    if mode.is_time() {
        render_time(profile, top, o);
    }
    render_gc(profile, top, o);
    render_interpreters(profile, o);
    render_traces(profile, o);

    // --- Functions.
    let functions = function_shares(profile);
    let row = |o: &mut O, f: &FunctionShare| {
        let location = if f.file.is_empty() { String::new() } else { format!("  ({})", e(&f.file)) };
        let _ = writeln!(
            o,
            "  {:>9} {}  {:>9} {}  {}{location}",
            amount(f.self_samples),
            pct(f.self_samples, whole),
            amount(f.total_samples),
            pct(f.total_samples, whole),
            e(&f.function)
        );
    };
    let (header, by) = if mode.is_time() {
        ("    SELF ms      %   TOTAL ms      %  FUNCTION  (FILE)", "time")
    } else {
        ("       SELF      %      TOTAL      %  FUNCTION  (FILE)", "samples")
    };
    let _ = writeln!(o, "\nFunctions by self {by} (top {} of {})", top.min(functions.len()), functions.len());
    let _ = writeln!(o, "{header}");
    for f in functions.iter().take(top) {
        row(o, f);
    }
    let mut by_total = functions.clone();
    by_total.sort_by(|a, b| {
        b.total_samples
            .cmp(&a.total_samples)
            .then(b.self_samples.cmp(&a.self_samples))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
    });
    let _ = writeln!(o, "\nFunctions by total {by} (top {} of {})", top.min(by_total.len()), by_total.len());
    let _ = writeln!(o, "{header}");
    for f in by_total.iter().take(top) {
        row(o, f);
    }

    // --- Native libraries.
    if !libraries.is_empty() {
        let _ =
            writeln!(o, "\nNative libraries by self {by} (top {} of {})", top.min(libraries.len()), libraries.len());
        let head = if mode.is_time() { "    SELF ms      %" } else { "       SELF      %" };
        let _ = writeln!(o, "{head}  LIBRARY  (BUILD ID)");
        for l in libraries.iter().take(top) {
            let id = if l.build_id.is_empty() { String::new() } else { format!("  ({})", e(&l.build_id)) };
            let _ = writeln!(o, "  {:>9} {}  {}{id}", amount(l.self_samples), pct(l.self_samples, whole), e(&l.path));
        }
    }

    // --- Top stacks.
    let stacks = top_stacks(profile);
    let which = match mode {
        Mode::Cpu => "Top stacks",
        Mode::OffCpu => "Top off-CPU stacks by time",
        Mode::Wall => "Top stacks by wall-clock time",
    };
    let _ = writeln!(o, "\n{which}, root first (top {} of {} unique)", top.min(stacks.len()), stacks.len());
    // Frame texts, escaped once per symbol (and deduplicated, so that equal texts compare as equal ids): a deep
    // recursion shown once costs its depth in steps, not its depth times its name.
    let mut frame_texts: Vec<String> = Vec::new();
    let mut text_ids: HashMap<String, u32> = HashMap::new();
    let mut symbol_texts: FxMap<u32, u32> = FxMap::default();
    let mut intern = |text: String, texts: &mut Vec<String>| -> u32 {
        let next = texts.len() as u32;
        *text_ids.entry(text).or_insert_with_key(|t| {
            texts.push(e(t));
            next
        })
    };
    let mut ids: Vec<u32> = Vec::new();
    let mut shown: Vec<u32> = Vec::new();
    for (i, st) in stacks.iter().take(top).enumerate() {
        let (status, leaf, count) = (st.status, st.leaf, st.count);
        if mode.is_time() {
            let _ = writeln!(o, "  #{:<3} {} ms ({})", i + 1, format_ms(count), pct(count, whole).trim());
        } else {
            let _ = writeln!(o, "  #{:<3} {} ({})", i + 1, plural(count, "sample"), pct(count, matched).trim());
        }
        shown.clear();
        if let Some(m) = names::stack_marker(status, leaf != 0, st.reason != 0) {
            shown.push(intern(m, &mut frame_texts));
        }
        profile.tables.frames_root_first(leaf, &mut ids);
        for &sym in &ids {
            let id = match symbol_texts.get(&sym) {
                Some(&id) => id,
                None => {
                    let id = intern(names::frame_name(profile.tables.symbol(sym), true), &mut frame_texts);
                    symbol_texts.insert(sym, id);
                    id
                }
            };
            shown.push(id);
        }
        if st.reason != 0 {
            let text = profile.reasons.get(st.reason as usize).cloned().unwrap_or_default();
            shown.push(intern(text, &mut frame_texts));
        }
        // A frame repeated in a row (deep recursion) is shown once with its count.
        let mut k = 0;
        while k < shown.len() {
            let run = shown[k..].iter().take_while(|&&f| f == shown[k]).count();
            let text = &frame_texts[shown[k] as usize];
            if run > 1 {
                let _ = writeln!(o, "        {text}  (x{run})");
            } else {
                let _ = writeln!(o, "        {text}");
            }
            k += run;
        }
    }

    // --- Task chains (asyncio, format 1.5).
    let chains = task_chains(profile);
    if !chains.is_empty() {
        let shown = chains.len().min(TASK_CHAINS);
        let _ = writeln!(
            o,
            "
Busiest task chains, root task first (top {shown} of {})",
            chains.len()
        );
        let head = if mode.is_time() { "    TIME ms      %" } else { "    SAMPLES      %" };
        let _ = writeln!(o, "{head}  CHAIN");
        for c in chains.iter().take(TASK_CHAINS) {
            let chain = c.tasks.iter().map(|t| e(t)).collect::<Vec<_>>().join(" > ");
            let _ = writeln!(o, "  {:>9} {}  {chain}", amount(c.count), pct(c.count, whole));
        }
    }

    if mode.is_time() {
        // The sample states describe CPU samples: --mode cpu shows them.
        return;
    }

    // --- States.
    let breakdown = |o: &mut O, title: &str, rows: Vec<(String, String, u64)>| {
        let _ = writeln!(o, "\n{title}");
        if rows.is_empty() {
            let _ = writeln!(o, "  no samples");
        }
        for (key, words, n) in rows {
            let _ = writeln!(o, "  {n:>9} {}  {key:<16} {words}", pct(n, matched));
        }
    };
    let m = &profile.matched;
    breakdown(o, "GIL state", m.gil_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());
    breakdown(
        o,
        "Thread state: is the sampled thread the interpreter's current thread?",
        m.thread_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(
        o,
        "pthread id: does the thread state belong to the sampled OS thread?",
        m.pthread_ids().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(o, "Stack status", m.statuses().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());

    // --- Threads.
    let mut threads: Vec<_> = profile.threads.iter().filter(|t| t.matched > 0).collect();
    threads.sort_by(|a, b| b.matched.cmp(&a.matched).then(a.pid.cmp(&b.pid)).then(a.tid.cmp(&b.tid)));
    let _ = writeln!(o, "\nThreads (top {} of {})", top.min(threads.len()), threads.len());
    for t in threads.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:>9} {}  {}  {}",
            t.matched,
            pct(t.matched, matched),
            e(&profile.process_label_of(t)),
            e(&profile.thread_label(t))
        );
    }
}

/// The trailer's off-CPU counters (format 1.3+), shown on their own line of the summary.
const OFF_CPU_COUNTERS: [&str; 6] = [
    "off_cpu_intervals",
    "off_cpu_short",
    "off_cpu_sampled",
    "off_cpu_lost",
    "off_cpu_unreadable",
    "off_cpu_open_at_end",
];

/// The summary's `off-CPU` and `off-CPU min` lines: intervals read and the trailer's off-CPU counters, in words.
fn off_cpu_summary(profile: &Profile, min_ns: u64) -> (String, String) {
    let read = profile.off_cpu_all.intervals;
    let stats = profile.tables.stats.as_ref();
    let counter = |name: &str| stats.and_then(|s| s.counter(name));
    let mut intervals = match counter("off_cpu_intervals") {
        Some(written) if written != read => {
            format!("{read} intervals read ({written} written according to the trailer)")
        }
        _ => plural(read, "interval"),
    };
    let rest: Vec<String> = [
        ("off_cpu_lost", "lost"),
        ("off_cpu_unreadable", "with an unreadable stack"),
        ("off_cpu_open_at_end", "open at the end"),
    ]
    .iter()
    .filter_map(|&(name, words)| counter(name).map(|n| format!("{n} {words}")))
    .collect();
    if !rest.is_empty() {
        intervals.push_str(&format!(", {}", rest.join(", ")));
    }
    if stats.is_none() {
        intervals.push_str(" (no trailer: lost and other counts unknown)");
    }
    let min = format_short(min_ns);
    let minimum = match (counter("off_cpu_short"), counter("off_cpu_sampled")) {
        (Some(short), Some(sampled)) => {
            format!("{min}: shorter intervals sampled, {sampled} kept (weighing {min} each), {short} left out")
        }
        _ => format!("{min}: shorter intervals sampled (a kept one weighs {min})"),
    };
    (intervals, minimum)
}

/// Rows of a time breakdown (ms, % of the wall-clock time): wall, running (`running`: CPU samples x period; `None`
/// when a sample is no fixed time; `stolen` of the samples are periods the host stole), runnable, blocked (of which
/// disk), GIL wait, and other when there is some.
fn time_rows<O: fmt::Write>(
    o: &mut O,
    indent: &str,
    (samples, stolen): (u64, u64),
    running: Option<u64>,
    off: &OffCpuTime,
) {
    let wall = running.unwrap_or(0).saturating_add(off.weight_ns);
    let row = |o: &mut O, name: &str, ns: Option<u64>, note: String| {
        let (value, share) = match ns {
            Some(ns) => (format_ms(ns), pct(ns, wall)),
            None => ("?".to_string(), "    ?".to_string()),
        };
        let note = if note.is_empty() { String::new() } else { format!("  {note}") };
        let _ = writeln!(o, "{indent}{name:<9}{value:>12} ms  {share}{note}");
    };
    let wall_name = if running.is_some() { "wall" } else { "off-CPU" };
    row(o, wall_name, Some(wall), String::new());
    let mut sampled = match running {
        Some(_) => plural(samples, "sample"),
        None => format!("{}, each of unknown time", plural(samples, "sample")),
    };
    if stolen > 0 {
        sampled.push_str(&format!(", {stolen} of them stolen by the host (running without a CPU)"));
    }
    row(o, "running", running, sampled);
    row(o, "runnable", Some(off.runnable_ns), String::new());
    let disk = if off.disk_ns > 0 { format!("of which disk {} ms", format_ms(off.disk_ns)) } else { String::new() };
    row(o, "blocked", Some(off.blocked_ns), disk);
    row(o, "GIL wait", Some(off.gil_ns), String::new());
    if off.other_ns > 0 {
        row(o, "other", Some(off.other_ns), "reason unknown".to_string());
    }
}

/// The time sections of [`Mode::OffCpu`] and [`Mode::Wall`]: where all matching threads' time went, then each
/// thread's.
fn render_time<O: fmt::Write>(profile: &Profile, top: usize, o: &mut O) {
    let e = names::escape_text;
    let period = profile.sampling_period_ns();
    let running = |samples: u64| period.map(|p| samples.saturating_mul(p));
    let m = &profile.off_cpu_matched;
    let what = match profile.mode {
        Mode::Wall => "Wall-clock time",
        _ => "Off-CPU time",
    };
    let per_sample = match period {
        Some(p) => format!("a CPU sample weighs {} ms", format_ms(p)),
        None => format!("a CPU sample of {} is no fixed time", e(&profile.header.event)),
    };
    let _ = writeln!(o, "\n{what} (--mode {}): ms, and % of the threads' wall-clock time", profile.mode.key());
    let _ = writeln!(o, "  all threads ({per_sample}, an off-CPU interval its duration or the minimum)");
    let matched = (profile.matched.samples, profile.matched.stolen);
    time_rows(o, "    ", matched, running(profile.matched.samples), m);
    let mut notes = vec![plural(m.intervals, "off-CPU interval")];
    if m.sampled > 0 {
        let min = profile.off_cpu_min_ns().map(format_short).unwrap_or_default();
        notes.push(format!("{} shorter than {min}, weighing {min} (sampled)", m.sampled));
    }
    if m.before_start > 0 {
        notes.push(format!("{} begun before the recording (counted from its start)", m.before_start));
    }
    if m.open_at_end > 0 {
        notes.push(format!("{} still open at its end (counted to it)", m.open_at_end));
    }
    let _ = writeln!(o, "  {}", notes.join("; "));
    let waits = &profile.task_waits_matched;
    if profile.mode == Mode::Wall && waits.waits > 0 {
        // Suspended tasks wait side by side: their time is not any thread's, and may add up to more than the threads'.
        let _ = writeln!(
            o,
            "  {}, {} ms: where suspended asyncio tasks waited (beside the threads' time)",
            plural(waits.waits, "task wait"),
            format_ms(waits.weight_ns)
        );
    }

    // Threads with matching samples or intervals, the busiest first: the most time on CPU, then in all (wall: a
    // thread's wall-clock time is its life, about the same for every thread that lived through the recording), or
    // the most time off CPU (off-cpu).
    let off = |t: usize| profile.thread_off_cpu.get(t).cloned().unwrap_or_default();
    let mut threads: Vec<(usize, (u64, u64), OffCpuTime)> = profile
        .threads
        .iter()
        .enumerate()
        .filter(|(t, th)| th.matched > 0 || off(*t).intervals > 0)
        .map(|(t, th)| {
            let o = off(t);
            let key = match profile.mode {
                Mode::Wall => (th.matched, o.weight_ns),
                _ => (o.weight_ns, th.matched),
            };
            (t, key, o)
        })
        .collect();
    threads.sort_by(|a, b| {
        let (ta, tb) = (&profile.threads[a.0], &profile.threads[b.0]);
        b.1.cmp(&a.1).then(ta.pid.cmp(&tb.pid)).then(ta.tid.cmp(&tb.tid))
    });
    let by = match profile.mode {
        Mode::Wall => "CPU time, then wall-clock time",
        _ => "off-CPU time",
    };
    let _ = writeln!(o, "\nThreads by {by} (top {} of {})", top.min(threads.len()), threads.len());
    for (t, _, off) in threads.iter().take(top) {
        let th = &profile.threads[*t];
        let _ = writeln!(o, "  {} {}", e(&profile.process_label_of(th)), e(&profile.thread_label(th)));
        time_rows(o, "    ", (th.matched, th.stolen), running(th.matched), off);
    }
}

/// Samples or time in the garbage collector (format 1.6), and all of them, of a thread or a process.
#[derive(Debug, Clone, Copy, Default)]
struct GcShare {
    gc: u64,
    all: u64,
}

impl GcShare {
    fn add(&mut self, other: GcShare) {
        self.gc = self.gc.saturating_add(other.gc);
        self.all = self.all.saturating_add(other.all);
    }
}

/// A thread's (index into [`Profile::threads`]) matching samples or time in the garbage collector, and all of them:
/// samples in [`Mode::Cpu`]; off-CPU time in [`Mode::OffCpu`]; in [`Mode::Wall`] both, a CPU sample weighing one
/// sampling period (none when a sample is no fixed time, as in the wall-clock totals).
fn gc_share(profile: &Profile, t: usize) -> GcShare {
    let th = &profile.threads[t];
    let off = profile.thread_off_cpu.get(t).cloned().unwrap_or_default();
    match profile.mode {
        Mode::Cpu => GcShare { gc: th.gc, all: th.matched },
        Mode::OffCpu => GcShare { gc: off.gc_ns, all: off.weight_ns },
        Mode::Wall => {
            let period = profile.sampling_period_ns().unwrap_or(0);
            let running = |n: u64| n.saturating_mul(period);
            GcShare {
                gc: running(th.gc).saturating_add(off.gc_ns),
                all: running(th.matched).saturating_add(off.weight_ns),
            }
        }
    }
}

/// The garbage collection section (format 1.6), when some matching sample or interval was taken in the collector:
/// per process, then per thread (the `top` busiest collectors of each), its share in the collector.
fn render_gc<O: fmt::Write>(profile: &Profile, top: usize, o: &mut O) {
    let e = names::escape_text;
    let shares: Vec<GcShare> = (0..profile.threads.len()).map(|t| gc_share(profile, t)).collect();
    if shares.iter().all(|s| s.gc == 0) {
        return;
    }
    // Per process instance: its share summed over its threads, and its collecting threads.
    let mut processes: BTreeMap<u32, (GcShare, Vec<usize>)> = BTreeMap::new();
    for (t, share) in shares.iter().enumerate() {
        let p = processes.entry(profile.threads[t].process).or_default();
        p.0.add(*share);
        if share.gc > 0 {
            p.1.push(t);
        }
    }
    let mut processes: Vec<(GcShare, Vec<usize>)> = processes.into_values().filter(|(s, _)| s.gc > 0).collect();
    // The busiest collector first (the map gave them in instance order: a stable tie-break).
    processes.sort_by_key(|(s, _)| std::cmp::Reverse(s.gc));
    let what = if profile.mode.is_time() { "time" } else { "samples taken" };
    let _ = writeln!(o, "\nGarbage collection: {what} in the interpreter's cyclic garbage collector ({})", names::GC);
    let of = |s: GcShare, place: &str| {
        let amount = match profile.mode {
            Mode::Cpu => format!("{} of {}", s.gc, plural(s.all, "sample")),
            _ => format!("{} ms of {} ms", format_ms(s.gc), format_ms(s.all)),
        };
        format!("{amount}{place} ({})", pct(s.gc, s.all).trim())
    };
    for (share, mut threads) in processes {
        let label = threads.first().map(|&t| profile.process_label_of(&profile.threads[t])).unwrap_or_default();
        let _ = writeln!(o, "  {}: {}", e(&label), of(share, " in the collector"));
        threads.sort_by(|&a, &b| {
            shares[b].gc.cmp(&shares[a].gc).then(profile.threads[a].tid.cmp(&profile.threads[b].tid))
        });
        for &t in threads.iter().take(top) {
            let _ = writeln!(o, "    {}: {}", e(&profile.thread_label(&profile.threads[t])), of(shares[t], ""));
        }
        if threads.len() > top {
            let _ = writeln!(o, "    ... {} more collecting threads", threads.len() - top);
        }
    }
}

/// The interpreters section (format 1.8), when the matching CPU samples (or, in the time modes, off-CPU intervals,
/// 1.9) ran in more than one interpreter (subinterpreters): each interpreter's share of them, by id (0: the main
/// interpreter).
fn render_interpreters<O: fmt::Write>(profile: &Profile, o: &mut O) {
    let (cpu, off) = (&profile.interpreters, &profile.interpreters_off_cpu);
    let mut ids: Vec<u32> = cpu.iter().chain(off).map(|&(id, _)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() < 2 {
        return;
    }
    let all: u64 = cpu.iter().map(|&(_, n)| n).sum();
    let all_off: u64 = off.iter().map(|&(_, n)| n).sum();
    let what = if all_off > 0 { "CPU samples and off-CPU time" } else { "CPU samples" };
    let _ = writeln!(
        o,
        "\nInterpreters: {what} per interpreter (0 is the main one; --interp-root shows their stacks apart)"
    );
    for id in ids {
        let n = cpu.iter().find(|c| c.0 == id).map_or(0, |c| c.1);
        let _ = write!(o, "  {}: {} ({})", names::interpreter_marker(id), plural(n, "sample"), pct(n, all).trim());
        if all_off > 0 {
            let ns = off.iter().find(|c| c.0 == id).map_or(0, |c| c.1);
            let _ = write!(o, ", off-CPU {} ({})", format_duration(ns), pct(ns, all_off).trim());
        }
        let _ = writeln!(o);
    }
}

/// Traces shown at most in the traces section.
const TOP_TRACES: usize = 10;

/// The traces section (format 1.10), when CPU samples ran in OpenTelemetry spans: the traces with the most samples,
/// each with its share of the matching samples and its spans (`--trace-id` keeps one).
fn render_traces<O: fmt::Write>(profile: &Profile, o: &mut O) {
    if profile.spans.is_empty() {
        return;
    }
    let all = profile.matched.samples;
    let mut traces: std::collections::HashMap<u128, (u64, usize)> = std::collections::HashMap::new();
    for (l, n) in &profile.spans {
        let t = traces.entry(l.trace_id).or_insert((0, 0));
        t.0 += n;
        t.1 += 1;
    }
    let in_spans: u64 = profile.spans.iter().map(|s| s.1).sum();
    let mut traces: Vec<(u128, (u64, usize))> = traces.into_iter().collect();
    traces.sort_unstable_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let _ = writeln!(
        o,
        "\nTraces: {} of {} ran in OpenTelemetry spans ({}), of {} ({} shown, most samples first; --trace-id keeps one)",
        plural(in_spans, "sample"),
        all,
        pct(in_spans, all).trim(),
        plural(traces.len() as u64, "trace"),
        traces.len().min(TOP_TRACES)
    );
    for (trace, (n, spans)) in traces.iter().take(TOP_TRACES) {
        let _ = writeln!(
            o,
            "  {trace:032x}  {} ({}), {}",
            plural(*n, "sample"),
            pct(*n, all).trim(),
            plural(*spans as u64, "span")
        );
    }
}

/// Writes the report, streaming: it can be large (the top stacks of a deep recording), and is never held whole.
pub fn write<W: Write>(profile: &Profile, options: &Options, out: W) -> io::Result<()> {
    let mut sink = Sink { out, buf: String::with_capacity(1 << 16), err: None };
    render_into(profile, options, &mut sink);
    if let Some(err) = sink.err {
        return Err(err);
    }
    sink.out.write_all(sink.buf.as_bytes())?;
    sink.out.flush()
}

/// Text to an `io::Write`, in 64 KiB pieces; the first error is kept and ends the writing.
struct Sink<W: Write> {
    out: W,
    buf: String,
    err: Option<io::Error>,
}

impl<W: Write> fmt::Write for Sink<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.err.is_some() {
            return Err(fmt::Error);
        }
        self.buf.push_str(s);
        if self.buf.len() >= 1 << 16 {
            if let Err(e) = self.out.write_all(self.buf.as_bytes()) {
                self.err = Some(e);
                return Err(fmt::Error);
            }
            self.buf.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(format_time(1_714_564_800_123_456_789), "2024-05-01 12:00:00.123 UTC");
        assert_eq!(format_time(951_782_400_000_000_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(format_duration(2_500_000_000), "2.500 s");
        assert_eq!(format_ms(1_234_567_890), "1234.568");
        assert_eq!(format_ms(499), "0.000");
        assert_eq!(format_ms(1_500), "0.002");
        assert_eq!(format_short(1_000_000), "1.000 ms");
        assert_eq!(format_short(2_500_000), "2.500 ms");
        assert_eq!(format_short(500_000), "500 µs");
        assert_eq!(format_short(400), "400 ns");
        assert_eq!(format_short(1_000_001), "1000001 ns");
        assert_eq!(format_short(0), "0 µs");
    }
}
