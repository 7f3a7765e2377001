//! Streaming a recording into counts: what every exporter starts from.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::ops::Bound;
use std::path::Path;

use pyperf_format::{
    off_cpu_flags, sample_flags, symbol_flags, Columns, FrameKind, GilState, Header, OffCpuInterval, OffCpuKind,
    PthreadIdMatch, Rate, Reader, Record, SampleChunk, StackStatus, Symbol, Tables, TaskWait, ThreadStateMatch,
};

use crate::error::{io_reason, ReportError};
use crate::filter::{Compiled, Filter};
use crate::hash::FxMap;
use crate::names;

/// What a report weighs (`--mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Mode {
    /// CPU samples: where CPU time goes; stack counts are samples.
    #[default]
    Cpu,
    /// Off-CPU intervals (a recording made with `--off-cpu`): where threads wait, blocked, runnable or for the
    /// GIL; stack counts are nanoseconds.
    #[value(name = "off-cpu")]
    OffCpu,
    /// Both: every thread's whole life, a CPU sample weighing one sampling period; stack counts are nanoseconds.
    Wall,
}

impl Mode {
    /// Every mode, in the order of `--help`.
    pub const ALL: [Mode; 3] = [Mode::Cpu, Mode::OffCpu, Mode::Wall];

    /// As `--mode` takes it: `cpu`, `off-cpu`, `wall`.
    pub fn key(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::OffCpu => "off-cpu",
            Mode::Wall => "wall",
        }
    }

    /// Whether stack counts are nanoseconds (off-cpu, wall) rather than samples (cpu).
    pub fn is_time(self) -> bool {
        self != Mode::Cpu
    }

    /// What the counts are, for titles: `CPU samples`, `Off-CPU time`, `Wall-clock time`.
    pub fn title(self) -> &'static str {
        match self {
            Mode::Cpu => "CPU samples",
            Mode::OffCpu => "Off-CPU time",
            Mode::Wall => "Wall-clock time",
        }
    }
}

/// Which native and kernel frames (format 1.4: `pyperf record --native` / `--kernel`) the stacks keep: `--no-native`,
/// `--no-kernel`, `--show-glue`. A frame left out joins its caller and its callee: the stack reads as if it were not
/// there. Python frames are always kept; for a recording without native or kernel frames every setting is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShowFrames {
    /// Native frames, the recorder's `[native: ...]` markers and the glue frames included (`--no-native` leaves them
    /// out).
    pub native: bool,
    /// Kernel frames (`--no-kernel` leaves them out).
    pub kernel: bool,
    /// The interpreter's own native frames between Python frames ([`FrameKind::Glue`]): calls, attribute lookups,
    /// start-up. Left out by default, so that a stack reads as its Python frames and the native code they call
    /// (`--show-glue` keeps them, with native frames).
    pub glue: bool,
}

impl Default for ShowFrames {
    fn default() -> Self {
        ShowFrames { native: true, kernel: true, glue: false }
    }
}

impl ShowFrames {
    /// Whether a frame of this kind is kept.
    pub fn shows(self, kind: FrameKind) -> bool {
        match kind {
            FrameKind::Python => true,
            FrameKind::Native | FrameKind::Marker => self.native,
            FrameKind::Glue => self.native && self.glue,
            FrameKind::Kernel => self.kernel,
            FrameKind::Task | FrameKind::Interpreter => true,
        }
    }
}

/// What to collect while reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Samples outside the filter are counted in [`Profile::all`] only.
    pub filter: Filter,
    /// Keep every matching sample's time and stack per thread (for the timeline exports), in a temporary file
    /// ([`crate::tracks`]).
    pub timeline: bool,
    /// Count stacks per thread (needed for process / thread root frames; implies `threads`). Without it
    /// every [`StackCount::thread`] is [`ALL_THREADS`], and counting is faster (an array instead of a hash map).
    pub per_thread: bool,
    /// Fill [`Profile::threads`]: samples and name per thread (the text report shows them). Without it, and
    /// without `per_thread` and `timeline`, the sample loop does not look at threads at all (fastest).
    pub threads: bool,
    /// Fill the per-state counts and time range of [`Profile::all`] and [`Profile::matched`] (the text report
    /// shows them). Sample totals are always counted. Always on with a filter, threads or a timeline.
    pub states: bool,
    /// What the stack counts weigh: samples ([`Mode::Cpu`]), or nanoseconds of off-CPU intervals
    /// ([`Mode::OffCpu`]) or of both ([`Mode::Wall`]). In [`Mode::Cpu`] off-CPU intervals are only counted
    /// ([`Profile::off_cpu_all`]).
    pub mode: Mode,
    /// Which native and kernel frames the stacks keep (format 1.4); the others are taken out of the stack table
    /// once, after reading ([`Profile::tables`]).
    pub frames: ShowFrames,
    /// Also count stacks per GIL state ([`Profile::gil_stacks`]: the pprof export labels samples with it). Needs
    /// `states` (the GIL column is read only then).
    pub gil: bool,
    /// The asyncio task view (format 1.5, on by default; `--no-async` turns it off): a sample or off-CPU interval
    /// with a task-view stack counts at it (the task chain: `[task NAME]` markers between the tasks' frames), and in
    /// [`Mode::Wall`] every suspended task's wait adds its weight at its stack. Off: the plain thread view (task
    /// stacks and waits ignored). A recording without task stacks reads the same either way.
    pub task_view: bool,
    /// Keep task names as recorded (`--exact-task-names`). Without it, names that differ only by counters aggregate:
    /// in every `[task NAME]` marker each run of ASCII digits of NAME becomes `N` (`[task request-N]`,
    /// [`names::aggregate_task_name`]), one symbol in the tables for every exporter.
    pub exact_task_names: bool,
    /// A thread slot per (thread, interpreter) (format 1.8): reports can put `[interpreter N]` at the root of each
    /// stack (`--interp-root`, [`crate::folded::Options::interp_root`]). Needs `per_thread`.
    pub interp_root: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions::new(Filter::default(), false)
    }
}

impl LoadOptions {
    /// Threads and per-thread stack counts; `timeline` for speedscope.
    pub fn new(filter: Filter, timeline: bool) -> Self {
        LoadOptions {
            filter,
            timeline,
            per_thread: true,
            threads: true,
            states: true,
            mode: Mode::Cpu,
            frames: ShowFrames::default(),
            gil: false,
            task_view: true,
            exact_task_names: false,
            interp_root: false,
        }
    }

    /// Only what folded stacks without process / thread roots need: stack counts over all threads.
    pub fn stacks_only(filter: Filter) -> Self {
        LoadOptions {
            filter,
            timeline: false,
            per_thread: false,
            threads: false,
            states: false,
            mode: Mode::Cpu,
            frames: ShowFrames::default(),
            gil: false,
            task_view: true,
            exact_task_names: false,
            interp_root: false,
        }
    }
}

/// [`StackCount::thread`] of a profile loaded without [`LoadOptions::per_thread`].
pub const ALL_THREADS: u32 = u32::MAX;

/// One OS thread seen in the samples: a tid in one process instance ([`Profile::processes`]). The main thread of a
/// process that exec'd keeps its tid but is another thread of another instance after the exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Index into [`Profile::processes`]: the process instance the thread belongs to.
    pub process: u32,
    /// The thread's name (comm) in its last sample.
    pub comm: String,
    /// Its Python name (`threading.Thread.name`) when the recorder read one (format 1.2+).
    pub python_name: Option<String>,
    /// Time of the first of its samples read (ns since the recording's start): where its Python name is looked up.
    pub first_ns: u64,
    /// All its samples.
    pub samples: u64,
    /// Its samples that passed the filter.
    pub matched: u64,
    /// Of those, the ones taken in the garbage collector (format 1.6, [`sample_flags::GC`]).
    pub gc: u64,
    /// Of those, the stolen periods (format 1.11, [`sample_flags::STOLEN`]; the time modes only count them).
    pub stolen: u64,
    /// The interpreter its samples ran in, when loaded with [`LoadOptions::interp_root`] (a thread that ran in
    /// several is one [`Thread`] per interpreter); 0 otherwise.
    pub interp: u32,
}

/// One process as the report tells them apart: a pid from the `first_seen_ns` of its process record on, until a
/// later record of the same pid (an exec, or the pid reused: FORMAT.md). A sample belongs to the latest record of
/// its pid seen by its time (the first record for a sample taken before any); a pid no record describes is one
/// instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInstance {
    /// Process id (tgid).
    pub pid: u32,
    /// Index into `tables.processes` of its record; `None` when the recording does not describe the pid.
    pub record: Option<u32>,
    /// How every report names it, unique in the profile: `python3.11 [pid 123]` (see [`Profile::process_label`]);
    /// a pid with several instances has their number and start: `python3.11 [pid 123 #2, from 1.500 s]`.
    pub label: String,
    /// All its samples.
    pub samples: u64,
    /// Its samples that passed the filter.
    pub matched: u64,
    /// Its threads in [`Profile::threads`].
    pub threads: u32,
}

/// How many matching samples (or how much time) had this stack on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackCount {
    /// Index into [`Profile::threads`], or [`ALL_THREADS`].
    pub thread: u32,
    /// How complete the stack is; stacks with different statuses are counted apart.
    pub status: StackStatus,
    /// Leaf stack node (0: no Python frames); resolve with `profile.tables.frames(leaf)`.
    pub leaf: u32,
    /// 0 for CPU samples; for off-CPU intervals, why the thread was off CPU: an index into [`Profile::reasons`],
    /// the text of the pseudo-frame below the leaf (`[off-CPU: read]`).
    pub reason: u32,
    /// Samples ([`Mode::Cpu`]), or nanoseconds ([`Mode::OffCpu`], [`Mode::Wall`]: a CPU sample weighs one sampling
    /// period, an off-CPU interval its weight).
    pub count: u64,
}

/// Per-state sample counts. The vectors have 256 entries, indexed by the raw on-disk value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCounts {
    /// Samples counted (always, whatever [`LoadOptions::states`] says).
    pub samples: u64,
    /// Samples per [`GilState`] value.
    pub gil: Vec<u64>,
    /// Samples per [`ThreadStateMatch`] value.
    pub thread_state: Vec<u64>,
    /// Samples per [`PthreadIdMatch`] value.
    pub pthread_id: Vec<u64>,
    /// Samples per [`StackStatus`] value.
    pub status: Vec<u64>,
    /// Earliest and latest sample time (ns since the recording's start).
    pub time_range: Option<(u64, u64)>,
    /// Stolen periods (format 1.11, [`sample_flags::STOLEN`]: the thread ran, the CPU did not run the machine),
    /// in every mode. No CPU time: in [`Mode::Cpu`] they are not in `samples` nor the states (left out before
    /// anything counts them, and before the filter: in `all` only); in the time modes they are samples like the
    /// others, the threads' wall time, and this says how many of them.
    pub stolen: u64,
}

impl Default for StateCounts {
    fn default() -> Self {
        StateCounts {
            samples: 0,
            stolen: 0,
            gil: vec![0; 256],
            thread_state: vec![0; 256],
            pthread_id: vec![0; 256],
            status: vec![0; 256],
            time_range: None,
        }
    }
}

impl StateCounts {
    fn nonzero<T>(counts: &[u64], from: impl Fn(u8) -> T) -> Vec<(T, u64)> {
        (0..=255u8).filter(|&r| counts[r as usize] > 0).map(|r| (from(r), counts[r as usize])).collect()
    }

    /// GIL states with samples, in on-disk order.
    pub fn gil_states(&self) -> Vec<(GilState, u64)> {
        Self::nonzero(&self.gil, GilState::from_u8)
    }
    /// Thread-state matches with samples, in on-disk order.
    pub fn thread_states(&self) -> Vec<(ThreadStateMatch, u64)> {
        Self::nonzero(&self.thread_state, ThreadStateMatch::from_u8)
    }
    /// pthread-id matches with samples, in on-disk order.
    pub fn pthread_ids(&self) -> Vec<(PthreadIdMatch, u64)> {
        Self::nonzero(&self.pthread_id, PthreadIdMatch::from_u8)
    }
    /// Stack statuses with samples, in on-disk order.
    pub fn statuses(&self) -> Vec<(StackStatus, u64)> {
        Self::nonzero(&self.status, StackStatus::from_u8)
    }
    /// Samples with this stack status.
    pub fn count(&self, status: StackStatus) -> u64 {
        self.status[status.as_u8() as usize]
    }
}

use crate::tracks::Entry;
pub use crate::tracks::Timeline;

/// Off-CPU time of some intervals (one thread's, or all those read or matched), in ns. An interval's weight is
/// split between runnable and its kind in proportion `runnable_ns / duration_ns` ([`split_weight`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffCpuTime {
    /// Intervals.
    pub intervals: u64,
    /// Of them, those shorter than the recording's minimum, kept by sampling (each weighs the minimum).
    pub sampled: u64,
    /// Of them, those begun before the recording (or before their thread was followed).
    pub before_start: u64,
    /// Of them, those cut at the recording's end.
    pub open_at_end: u64,
    /// Their weights' sum: `runnable_ns + blocked_ns + gil_ns + other_ns`.
    pub weight_ns: u64,
    /// Runnable: woken (or preempted), waiting for a CPU.
    pub runnable_ns: u64,
    /// Blocked: sleeping, waiting for I/O, a lock, ... (kinds `blocked` and `disk`).
    pub blocked_ns: u64,
    /// The part of `blocked_ns` in uninterruptible sleep (kind `disk`: disk I/O, page faults).
    pub disk_ns: u64,
    /// Waiting for the GIL.
    pub gil_ns: u64,
    /// Off CPU for a reason this pyperf does not know (kind unknown, or a newer recorder's).
    pub other_ns: u64,
    /// The weight of those walked in the garbage collector (format 1.6, [`off_cpu_flags::GC`]), whatever the kind.
    pub gc_ns: u64,
}

impl OffCpuTime {
    /// Counts one interval.
    pub fn add(&mut self, iv: &OffCpuInterval) {
        self.intervals += 1;
        self.sampled += u64::from(iv.weight_ns > iv.duration_ns);
        self.before_start += u64::from(iv.flags & off_cpu_flags::BEFORE_START != 0);
        self.open_at_end += u64::from(iv.flags & off_cpu_flags::OPEN_AT_END != 0);
        let weight = iv.weight_ns;
        self.weight_ns = self.weight_ns.saturating_add(weight);
        if iv.flags & off_cpu_flags::GC != 0 {
            self.gc_ns = self.gc_ns.saturating_add(weight);
        }
        let (runnable, rest) = match iv.kind {
            OffCpuKind::Runnable => (weight, 0),
            _ => split_weight(weight, iv.duration_ns, iv.runnable_ns),
        };
        self.runnable_ns = self.runnable_ns.saturating_add(runnable);
        let bucket = match iv.kind {
            OffCpuKind::Runnable => &mut self.runnable_ns,
            OffCpuKind::Blocked => &mut self.blocked_ns,
            OffCpuKind::Disk => {
                self.disk_ns = self.disk_ns.saturating_add(rest);
                &mut self.blocked_ns
            }
            OffCpuKind::Gil => &mut self.gil_ns,
            OffCpuKind::Unknown0 | OffCpuKind::Unknown(_) => &mut self.other_ns,
        };
        *bucket = bucket.saturating_add(rest);
    }
}

/// Suspended asyncio tasks' waits (format 1.5, the recorder's task sweep): how many and the wall time they stand for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskWaitTime {
    /// Waits (one per task and sweep, or several identical ones of a sweep summed).
    pub waits: u64,
    /// Their weights' sum, ns.
    pub weight_ns: u64,
}

impl TaskWaitTime {
    /// Counts one wait.
    pub fn add(&mut self, w: &TaskWait) {
        self.waits += 1;
        self.weight_ns = self.weight_ns.saturating_add(w.weight_ns);
    }

    /// Adds another's counts.
    pub fn add_all(&mut self, other: &TaskWaitTime) {
        self.waits = self.waits.saturating_add(other.waits);
        self.weight_ns = self.weight_ns.saturating_add(other.weight_ns);
    }
}

/// An interval's weight split into (runnable part, rest), in proportion `runnable / duration` (rounded to the
/// nearest ns): a sampled interval weighing more than its duration keeps its proportions. `runnable` past the
/// duration counts as the whole of it; a zero duration is all rest.
pub fn split_weight(weight_ns: u64, duration_ns: u64, runnable_ns: u64) -> (u64, u64) {
    if duration_ns == 0 {
        return (0, weight_ns);
    }
    let runnable = runnable_ns.min(duration_ns) as u128;
    let part = ((weight_ns as u128 * runnable + duration_ns as u128 / 2) / duration_ns as u128) as u64;
    (part, weight_ns - part)
}

/// A recording, aggregated.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The recording's header: what was recorded, where, how.
    pub header: Header,
    /// (major, minor) of the file.
    pub version: (u16, u16),
    /// Symbols, stack nodes, processes and trailer, as read: resolve [`StackCount::leaf`] with them. When frames
    /// were left out ([`LoadOptions::frames`], [`Profile::frames`]), `tables.nodes` is the stack table without them
    /// (each stack its frames that are kept, in order), and every leaf in the profile is one of its nodes.
    pub tables: Tables,
    /// What the reader noticed (cut-off file, missing trailer, unknown chunks), one line each.
    pub warnings: Vec<String>,
    /// The filter the profile was loaded with.
    pub filter: Filter,
    /// Process instances, by pid then start: one per process record, and one per pid without a record that has
    /// samples. Filled when loaded with threads ([`LoadOptions::threads`]); without, only the records, with no
    /// sample counts.
    pub processes: Vec<ProcessInstance>,
    /// Threads in order of first sample.
    pub threads: Vec<Thread>,
    /// Matching samples per (thread, status, leaf), sorted by those.
    pub stacks: Vec<StackCount>,
    /// Every sample read.
    pub all: StateCounts,
    /// The samples that passed the filter.
    pub matched: StateCounts,
    /// Every thread's entries when loaded with `timeline`; `None` otherwise.
    pub timeline: Option<Timeline>,
    /// (status, leaf) of the stacks the timelines refer to.
    pub timeline_stacks: Vec<(StackStatus, u32)>,
    /// [`StackCount::reason`] of each of `timeline_stacks` (0: a CPU sample's stack).
    pub timeline_reasons: Vec<u32>,
    /// What the stack counts weigh (the [`LoadOptions::mode`] it was loaded with).
    pub mode: Mode,
    /// Off-CPU pseudo-frames (`[off-CPU: read]`), indexed by [`StackCount::reason`]; entry 0 (CPU samples) is empty.
    pub reasons: Vec<String>,
    /// Every off-CPU interval read, whatever the filter (in every mode).
    pub off_cpu_all: OffCpuTime,
    /// The off-CPU intervals that passed the filter ([`Mode::OffCpu`] and [`Mode::Wall`]; zero in [`Mode::Cpu`]).
    pub off_cpu_matched: OffCpuTime,
    /// The matching off-CPU intervals of each thread (same index as `threads`), in [`Mode::OffCpu`] and
    /// [`Mode::Wall`] when loaded with threads; empty otherwise.
    pub thread_off_cpu: Vec<OffCpuTime>,
    /// Which native and kernel frames the stacks keep ([`LoadOptions::frames`]).
    pub frames: ShowFrames,
    /// The kinds of frames the recording's stacks hold, as read (whatever [`Profile::frames`] keeps).
    pub recorded_frames: FrameKinds,
    /// [`Profile::stacks`] split by GIL state (a sample's, or an off-CPU interval's at its switch-in) and span (format
    /// 1.10: the OpenTelemetry span the thread was in), sorted; filled only when loaded with [`LoadOptions::gil`].
    pub gil_stacks: Vec<GilStack>,
    /// `--diff BASE`: the stacks of the base recording, over all threads, their leaves in these tables (see
    /// [`crate::diff`]); `None` otherwise.
    pub diff_base: Option<Vec<StackCount>>,
    /// The recordings merged into this profile (`-i A -i B`: their names as given); empty for one recording.
    pub sources: Vec<String>,
    /// Every suspended asyncio task's wait read (format 1.5), whatever the filter and mode (none with `--no-async`).
    pub task_waits_all: TaskWaitTime,
    /// The waits counted in the stacks: those that passed the filter, in [`Mode::Wall`] with the task view.
    pub task_waits_matched: TaskWaitTime,
    /// CPU samples that passed the filter per interpreter id (format 1.8; 0 the main interpreter, every sample of a
    /// file before 1.8), by id.
    pub interpreters: Vec<(u32, u64)>,
    /// Off-CPU time (interval weights, ns) that passed the filter per interpreter id, in the time modes (format 1.9;
    /// 0 for every interval of a file before 1.9), by id.
    pub interpreters_off_cpu: Vec<(u32, u64)>,
    /// CPU samples that passed the filter per span (format 1.10: the OpenTelemetry span the thread was in), most
    /// first (ties by span); empty when the recording has none.
    pub spans: Vec<(pyperf_format::SpanLink, u64)>,
}

/// Which kinds of frames besides Python ones a recording's stacks hold (format 1.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameKinds {
    /// Native frames ([`FrameKind::Native`]).
    pub native: bool,
    /// The interpreter's glue frames ([`FrameKind::Glue`]).
    pub glue: bool,
    /// The recorder's `[native: ...]` markers ([`FrameKind::Marker`]).
    pub marker: bool,
    /// Kernel frames ([`FrameKind::Kernel`]).
    pub kernel: bool,
    /// Asyncio task markers ([`FrameKind::Task`], format 1.5): the recording has task-view stacks.
    pub task: bool,
    /// Interpreter boundaries ([`FrameKind::Interpreter`], format 1.8): threads called into subinterpreters.
    pub interpreter: bool,
}

impl FrameKinds {
    /// The kinds of the frames of the stack table of `tables` (of the nodes, not of every symbol).
    pub fn of(tables: &Tables) -> FrameKinds {
        let mut k = FrameKinds::default();
        // Most recordings have Python frames only: one look at the symbols says so.
        if tables.symbols.iter().all(|s| s.kind() == FrameKind::Python) {
            return k;
        }
        for &(_, sym) in &tables.nodes {
            match tables.symbol(sym).kind() {
                FrameKind::Python => {}
                FrameKind::Native => k.native = true,
                FrameKind::Glue => k.glue = true,
                FrameKind::Marker => k.marker = true,
                FrameKind::Kernel => k.kernel = true,
                FrameKind::Task => k.task = true,
                FrameKind::Interpreter => k.interpreter = true,
            }
        }
        k
    }

    /// Whether it holds frames of `kind` (always for [`FrameKind::Python`]).
    pub fn has(self, kind: FrameKind) -> bool {
        match kind {
            FrameKind::Python => true,
            FrameKind::Native => self.native,
            FrameKind::Glue => self.glue,
            FrameKind::Marker => self.marker,
            FrameKind::Kernel => self.kernel,
            FrameKind::Task => self.task,
            FrameKind::Interpreter => self.interpreter,
        }
    }

    /// Adds the kinds `other` has (several recordings as one).
    pub fn add(&mut self, other: FrameKinds) {
        self.native |= other.native;
        self.glue |= other.glue;
        self.marker |= other.marker;
        self.kernel |= other.kernel;
        self.task |= other.task;
        self.interpreter |= other.interpreter;
    }
}

/// Per symbol of `tables`, the symbol its frames become: `None` for a frame `show` leaves out, else the symbol itself,
/// or for a task marker whose name aggregates (unless `exact_task_names`) the one symbol of its aggregated name
/// ([`names::aggregate_task_name`]), added to the symbols when the recording has none. `None` overall when every
/// frame stays as it is.
fn canonical_symbols(tables: &mut Tables, show: ShowFrames, exact_task_names: bool) -> Option<Vec<Option<u32>>> {
    let mut canonical: Vec<Option<u32>> = Vec::with_capacity(tables.symbols.len());
    let mut changed = false;
    // Aggregated task markers by name: one symbol each, the recording's own if it has it.
    let mut task_ids: HashMap<Symbol, u32> = HashMap::new();
    if !exact_task_names {
        for (i, sym) in tables.symbols.iter().enumerate() {
            if sym.kind() == FrameKind::Task {
                task_ids.entry(sym.clone()).or_insert(i as u32);
            }
        }
    }
    for i in 0..tables.symbols.len() {
        let sym = &tables.symbols[i];
        let kind = sym.kind();
        if !show.shows(kind) {
            canonical.push(None);
            changed = true;
            continue;
        }
        let aggregated = match kind {
            FrameKind::Task if !exact_task_names => names::aggregate_task_name(&sym.name),
            _ => None,
        };
        let Some(name) = aggregated else {
            canonical.push(Some(i as u32));
            continue;
        };
        changed = true;
        let target = Symbol { scope: String::new(), name, file: String::new(), line: 0, flags: sym.flags };
        let next = tables.symbols.len() as u32;
        let id = *task_ids.entry(target).or_insert_with_key(|target| {
            tables.symbols.push(target.clone());
            next
        });
        canonical.push(Some(id));
    }
    changed.then_some(canonical)
}

/// Rewrites the stack table of `tables` with every frame as [`canonical_symbols`] says: a frame left out joins its
/// caller and callee (a stack of left-out frames only becomes node 0, no frames), a task marker becomes its aggregated
/// one, and stacks that became equal are one node. Returns, per node of the table as it was (0 included), the node it
/// became; `None` when no frame changes (the table is untouched). One step per node: every stack of the profile is
/// then one lookup away, and every exporter sees the same symbols.
fn canonicalize_frames(tables: &mut Tables, show: ShowFrames, exact_task_names: bool) -> Option<Vec<u32>> {
    let canonical = canonical_symbols(tables, show, exact_task_names)?;
    let mut map = vec![0u32; tables.nodes.len() + 1];
    let mut nodes: Vec<(u32, u32)> = Vec::new();
    let mut ids: FxMap<(u32, u32), u32> = FxMap::default();
    for (i, &(parent, sym)) in tables.nodes.iter().enumerate() {
        // Parents come before their children (Tables::apply checked it): the parent's new node is known.
        let at = map[parent as usize];
        map[i + 1] = match canonical[sym as usize] {
            None => at,
            Some(sym) => {
                let next = nodes.len() as u32 + 1;
                *ids.entry((at, sym)).or_insert_with(|| {
                    nodes.push((at, sym));
                    next
                })
            }
        };
    }
    tables.nodes = nodes;
    Some(map)
}

/// Adds each node's samples up into its ancestors (`below[id]`, indexed by node id with 0 the empty stack, holds the
/// samples ending at the node; afterwards those at or below it) and returns the children of each node that has
/// samples below it, as `(child_start, children)`: node `i`'s are `children[child_start[i]..child_start[i + 1]]`.
/// A node's parent has a smaller id (Tables::apply checked it): one backward pass sums, a counting sort groups.
pub(crate) fn children_with_samples(tables: &Tables, below: &mut [u64]) -> (Vec<u32>, Vec<u32>) {
    let nodes = tables.nodes.len();
    // Sums saturate: a crafted file's off-CPU weights can be anything.
    for id in (1..=nodes).rev() {
        let parent = tables.nodes[id - 1].0 as usize;
        below[parent] = below[parent].saturating_add(below[id]);
    }
    let mut child_start = vec![0u32; nodes + 2];
    for id in 1..=nodes {
        if below[id] > 0 {
            child_start[tables.nodes[id - 1].0 as usize + 1] += 1;
        }
    }
    for i in 1..child_start.len() {
        child_start[i] += child_start[i - 1];
    }
    let mut fill = child_start.clone();
    let mut children = vec![0u32; child_start[nodes + 1] as usize];
    for id in 1..=nodes {
        if below[id] > 0 {
            let slot = &mut fill[tables.nodes[id - 1].0 as usize];
            children[*slot as usize] = id as u32;
            *slot += 1;
        }
    }
    (child_start, children)
}

/// The `[gc]` pseudo-frame's symbol ([`names::GC`]): a marker, shown as its name by every export (and kept whatever
/// [`ShowFrames`] says: it is added after frames are left out).
fn gc_symbol() -> Symbol {
    let flags = symbol_flags::NATIVE | symbol_flags::MARKER;
    Symbol { scope: String::new(), name: names::GC.to_string(), file: String::new(), line: 0, flags }
}

/// Adds the stacks of the leaves counted in the garbage collector ([`Aggregator::gc_leaf`]) to the stack table: for
/// each leaf of `origins` (as read; `map` gives its node in the table as it is now, [`canonicalize_frames`]), its
/// stack with a `[gc]` frame after its last Python frame or task marker, before the native and kernel frames below
/// them (the collector's own code), or at the root when it has neither. Returns each one's node; one step per frame.
fn add_gc_frames(tables: &mut Tables, origins: &[u32], map: Option<&[u32]>) -> Vec<u32> {
    if origins.is_empty() {
        return Vec::new();
    }
    let gc = gc_symbol();
    let gc_id = match tables.symbols.iter().position(|s| *s == gc) {
        Some(i) => i as u32,
        None => {
            tables.symbols.push(gc);
            tables.symbols.len() as u32 - 1
        }
    };
    // Existing nodes are reused: a stack met again (or a crafted file's own `[gc]` frames) is one node.
    let mut ids: FxMap<(u32, u32), u32> =
        tables.nodes.iter().enumerate().map(|(i, &node)| (node, i as u32 + 1)).collect();
    let mut chain: Vec<(u32, u32)> = Vec::new();
    let mut out = Vec::with_capacity(origins.len());
    for &origin in origins {
        let leaf = map.map_or(origin, |m| m.get(origin as usize).copied().unwrap_or(0));
        // (node, symbol) root first; callers have smaller ids (Tables::apply checked it, and every table made from
        // it keeps it), so the walk ends.
        chain.clear();
        let mut node = leaf;
        while let Some(&(parent, sym)) = node.checked_sub(1).and_then(|i| tables.nodes.get(i as usize)) {
            chain.push((node, sym));
            if parent >= node {
                break;
            }
            node = parent;
        }
        chain.reverse();
        let split = names::gc_index(chain.iter().map(|&(_, sym)| tables.symbol(sym).kind()));
        let mut at = split.checked_sub(1).map_or(0, |i| chain[i].0);
        for sym in std::iter::once(gc_id).chain(chain[split..].iter().map(|&(_, sym)| sym)) {
            let next = tables.nodes.len() as u32 + 1;
            at = *ids.entry((at, sym)).or_insert_with(|| {
                tables.nodes.push((at, sym));
                next
            });
        }
        out.push(at);
    }
    out
}

/// The timelines' stacks with their leaves mapped through `map` ([`canonicalize_frames`], [`add_gc_frames`]); stacks
/// that became the same are merged, and the timeline renumbers its entries as they are read.
fn remap_timelines(
    map: impl Fn(u32) -> u32,
    timeline: &mut Timeline,
    stacks: &mut Vec<(StackStatus, u32)>,
    reasons: &mut Vec<u32>,
) {
    let mut ids: FxMap<(u8, u32, u32), u32> = FxMap::default();
    let mut renumber: Vec<u32> = Vec::with_capacity(stacks.len());
    let (mut kept_stacks, mut kept_reasons) = (Vec::new(), Vec::new());
    for (i, &(status, leaf)) in stacks.iter().enumerate() {
        let (leaf, reason) = (map(leaf), reasons.get(i).copied().unwrap_or(0));
        let next = kept_stacks.len() as u32;
        let id = *ids.entry((status.as_u8(), leaf, reason)).or_insert_with(|| {
            kept_stacks.push((status, leaf));
            kept_reasons.push(reason);
            next
        });
        renumber.push(id);
    }
    if kept_stacks.len() < stacks.len() {
        timeline.renumber(renumber);
    }
    *stacks = kept_stacks;
    *reasons = kept_reasons;
}

/// The bit of a stand-in leaf while reading ([`Aggregator::gc_leaf`]): a leaf with a `[gc]` frame added.
const GC_LEAF: u32 = 1 << 31;

/// Stack counts are keyed by thread slot, status and leaf packed into a u64 (one multiply to hash); slots past
/// 2^24 (never seen in practice) go to a second map.
const SLOT_BITS: u32 = 24;

#[inline]
fn pack(slot: u32, status: u8, leaf: u32) -> u64 {
    ((slot as u64) << 40) | ((status as u64) << 32) | leaf as u64
}

/// Direct-mapped cache of (pid, tid, time range) -> thread slot, indexed by the tid's low bits.
const THREAD_CACHE: usize = 1024;

/// The record of a thread whose pid has no process record (yet).
const NO_RECORD: u32 = u32::MAX;

/// A thread-cache entry: samples of (pid, tid) taken in `from..=last` go to `slot`, as long as no process record of
/// the pid has been read since (`epoch`).
#[derive(Clone, Copy)]
struct CachedThread {
    pid: u32,
    tid: u32,
    interp: u32,
    slot: u32,
    epoch: u64,
    from: u64,
    last: u64,
}

const EMPTY_CACHE: CachedThread =
    CachedThread { pid: 0, tid: 0, interp: 0, slot: u32::MAX, epoch: 0, from: 0, last: 0 };

struct Aggregator {
    filter: Compiled,
    timeline: bool,
    per_thread: bool,
    track_threads: bool,
    states: bool,
    /// Without per-thread counts: samples per leaf, one vector per status 0..4, grown as stacks are defined.
    dense: [Vec<u64>; 4],
    /// (pid, tid, record, interpreter) -> thread slot, record [`NO_RECORD`] while the pid has none, interpreter 0
    /// unless [`LoadOptions::interp_root`]. The file chooses pids and
    /// tids freely: SipHash, which crafted values cannot make collide.
    thread_ids: HashMap<(u32, u32, u32, u32), u32>,
    thread_cache: Vec<CachedThread>,
    threads: Vec<Thread>,
    /// Per thread slot: its process record (index into `tables.processes`), or [`NO_RECORD`].
    thread_records: Vec<u32>,
    /// Per pid with records: (first_seen_ns, record index), ordered.
    pid_records: HashMap<u32, BTreeSet<(u64, u32)>>,
    /// Slots of the threads of pids without a record so far: the pid's first record takes them.
    pending: HashMap<u32, Vec<u32>>,
    /// Process records looked at so far.
    records_seen: usize,
    /// Bumped when a pid gets another record: the time ranges in the thread cache may have changed.
    epoch: u64,
    counts: FxMap<u64, u64>,
    counts_far: FxMap<(u32, u8, u32), u64>,
    all: StateCounts,
    matched: StateCounts,
    timelines: Timeline,
    timeline_ids: FxMap<(u8, u32, u32), u32>,
    timeline_stacks: Vec<(StackStatus, u32)>,
    timeline_reasons: Vec<u32>,
    mode: Mode,
    /// Stolen periods ([`sample_flags::STOLEN`]) count as samples: in the time modes only (they are the threads'
    /// wall time, no CPU time).
    count_stolen: bool,
    /// In [`Mode::Wall`], what a CPU sample weighs ([`Profile::sampling_period_ns`]); `None` otherwise, or when a
    /// sample is no fixed time (then samples are left out of the weights).
    sample_ns: Option<u64>,
    /// Samples go into the timelines (not in [`Mode::OffCpu`]).
    sample_timeline: bool,
    /// `Header::arch`, for system call names.
    arch: String,
    /// Pseudo-frame texts by (kind, system call) met, and their ids in `reasons` (one per distinct text).
    reason_of: FxMap<(u8, i32), u32>,
    reason_ids: HashMap<String, u32>,
    reasons: Vec<String>,
    /// Matching interval weights per (thread slot or [`ALL_THREADS`], status, leaf, reason).
    off_counts: FxMap<(u32, u8, u32, u32), u64>,
    /// With [`LoadOptions::gil`]: (thread or ALL_THREADS, status, leaf, reason, GIL state) -> samples / ns.
    by_gil: bool,
    gil_counts: FxMap<(u32, u8, u32, u32, u8, u32), u64>,
    off_all: OffCpuTime,
    off_matched: OffCpuTime,
    thread_off: Vec<OffCpuTime>,
    /// [`LoadOptions::task_view`].
    task_view: bool,
    task_waits_all: TaskWaitTime,
    task_waits_matched: TaskWaitTime,
    /// With [`LoadOptions::gil`]: the task waits' ns per (thread or ALL_THREADS, status, leaf), apart from
    /// `gil_counts`, whose CPU samples (reason 0, as the waits) are multiplied by the sample's weight.
    task_gil_counts: FxMap<(u32, u8, u32), u64>,
    /// Samples and intervals taken in the garbage collector get a `[gc]` frame ([`GcMode::marks`]).
    mark_gc: bool,
    /// Their leaves: each is counted at a stand-in leaf, [`GC_LEAF`] | an index into `gc_origin`, the leaf it was
    /// taken at (one per leaf). [`Profile::load`] makes them nodes once the stack table is complete.
    gc_leaves: FxMap<u32, u32>,
    gc_origin: Vec<u32>,
    /// Per thread: (chunk number, comm index) of its last sample, to name threads without comparing strings
    /// per sample.
    comm_mark: Vec<(u64, u32)>,
    touched: Vec<u32>,
    chunk_no: u64,
    /// [`LoadOptions::interp_root`]: a thread slot per (thread, interpreter).
    interp_root: bool,
    /// Matching CPU samples per interpreter id (small ids, the usual ones), and the others.
    interp_counts: [u64; 16],
    interp_far: FxMap<u32, u64>,
    /// Weight (ns) of the matching off-CPU intervals per interpreter (time modes).
    interp_off: FxMap<u32, u64>,
    /// Matching CPU samples per span number (format 1.10).
    link_counts: FxMap<u32, u64>,
}

/// Per-chunk state counts: fixed arrays indexed by a u8 need no bounds checks.
struct Local {
    gil: [u64; 256],
    thread_state: [u64; 256],
    pthread_id: [u64; 256],
    status: [u64; 256],
    samples: u64,
}

impl Local {
    fn new() -> Box<Self> {
        Box::new(Local { gil: [0; 256], thread_state: [0; 256], pthread_id: [0; 256], status: [0; 256], samples: 0 })
    }

    #[inline]
    fn add(&mut self, gil: u8, thread_state: u8, pthread_id: u8, status: u8) {
        self.samples += 1;
        self.gil[gil as usize] += 1;
        self.thread_state[thread_state as usize] += 1;
        self.pthread_id[pthread_id as usize] += 1;
        self.status[status as usize] += 1;
    }

    fn add_to(&self, c: &mut StateCounts) {
        c.samples += self.samples;
        for (dst, src) in [
            (&mut c.gil, &self.gil),
            (&mut c.thread_state, &self.thread_state),
            (&mut c.pthread_id, &self.pthread_id),
            (&mut c.status, &self.status),
        ] {
            for (d, s) in dst.iter_mut().zip(src.iter()) {
                *d += s;
            }
        }
    }
}

impl Aggregator {
    fn new(options: &LoadOptions, header: &Header) -> Self {
        let sample_ns = match options.mode {
            Mode::Wall => period_of(header),
            Mode::Cpu | Mode::OffCpu => None,
        };
        Aggregator {
            filter: options.filter.compile(),
            timeline: options.timeline,
            interp_root: options.interp_root,
            interp_counts: [0; 16],
            link_counts: FxMap::default(),
            interp_far: FxMap::default(),
            interp_off: FxMap::default(),
            per_thread: options.per_thread,
            track_threads: options.threads || options.per_thread || options.timeline,
            states: options.states,
            dense: Default::default(),
            thread_ids: HashMap::new(),
            thread_cache: vec![EMPTY_CACHE; THREAD_CACHE],
            threads: Vec::new(),
            thread_records: Vec::new(),
            pid_records: HashMap::new(),
            pending: HashMap::new(),
            records_seen: 0,
            epoch: 0,
            counts: FxMap::default(),
            counts_far: FxMap::default(),
            all: StateCounts::default(),
            matched: StateCounts::default(),
            timelines: Timeline::default(),
            timeline_ids: FxMap::default(),
            timeline_stacks: Vec::new(),
            timeline_reasons: Vec::new(),
            mode: options.mode,
            count_stolen: options.mode.is_time(),
            sample_ns,
            sample_timeline: options.timeline && (options.mode == Mode::Cpu || sample_ns.is_some()),
            arch: header.arch.clone(),
            reason_of: FxMap::default(),
            reason_ids: HashMap::new(),
            reasons: vec![String::new()],
            off_counts: FxMap::default(),
            by_gil: options.gil && options.states,
            gil_counts: FxMap::default(),
            off_all: OffCpuTime::default(),
            off_matched: OffCpuTime::default(),
            thread_off: Vec::new(),
            task_view: options.task_view,
            task_waits_all: TaskWaitTime::default(),
            task_waits_matched: TaskWaitTime::default(),
            task_gil_counts: FxMap::default(),
            mark_gc: options.filter.gc.marks(),
            gc_leaves: FxMap::default(),
            gc_origin: Vec::new(),
            comm_mark: Vec::new(),
            touched: Vec::new(),
            chunk_no: 0,
        }
    }

    /// The sample columns `add` reads: the rest are skipped by the reader, undecoded.
    fn columns(&self) -> Columns {
        let (threads, filtering) = (self.track_threads, self.filter.active);
        let states = self.states || threads || filtering;
        Columns {
            time: states || threads,
            cpu: false,
            pid: threads || filtering,
            tid: threads || filtering,
            comm: threads,
            states,
            task_stack: self.task_view,
            // Always: the threads count their collections even when the stacks do not show them (--gc hide).
            flags: true,
            // Always: the per-interpreter counts (the text report's shares).
            interp: true,
            // Always: the spans' shares (an empty column costs nothing).
            link: true,
        }
    }

    /// The leaf a sample or interval taken in the garbage collector at `leaf` is counted at, when collections are
    /// marked: a stand-in for `leaf` with a `[gc]` frame ([`Aggregator::gc_leaves`]); `leaf` itself otherwise (and
    /// for a leaf too large to stand in for, which no real stack table reaches: 2^31 nodes).
    #[inline]
    fn gc_leaf(&mut self, leaf: u32, in_gc: bool) -> u32 {
        if !in_gc || !self.mark_gc || leaf >= GC_LEAF {
            return leaf;
        }
        let next = GC_LEAF | self.gc_origin.len() as u32;
        *self.gc_leaves.entry(leaf).or_insert_with(|| {
            self.gc_origin.push(leaf);
            next
        })
    }

    /// Takes the process records read since the last call into account (records come before the samples of
    /// their process: the recorder writes one when it starts following the process).
    fn learn_processes(&mut self, processes: &[pyperf_format::Process]) {
        for (i, p) in processes.iter().enumerate().skip(self.records_seen) {
            let record = i as u32;
            let list = self.pid_records.entry(p.pid).or_default();
            list.insert((p.first_seen_ns, record));
            if list.len() > 1 {
                self.epoch += 1;
                continue;
            }
            // The pid's first record: the threads seen before it belong to it.
            for slot in self.pending.remove(&p.pid).unwrap_or_default() {
                let t = &self.threads[slot as usize];
                self.thread_ids.remove(&(t.pid, t.tid, NO_RECORD, t.interp));
                self.thread_ids.insert((t.pid, t.tid, record, t.interp), slot);
                self.thread_records[slot as usize] = record;
            }
        }
        self.records_seen = processes.len();
    }

    /// The record a sample of `pid` at `time` belongs to (the latest one by then, else the earliest), and the
    /// times for which that stays the answer.
    fn record_at(&self, pid: u32, time: u64) -> (u32, u64, u64) {
        let Some(list) = self.pid_records.get(&pid) else { return (NO_RECORD, 0, u64::MAX) };
        let before = list.range(..=(time, u32::MAX)).next_back();
        let Some(&(start, record)) = before.or_else(|| list.first()) else { return (NO_RECORD, 0, u64::MAX) };
        let from = if before.is_some() { start } else { 0 };
        // The next record starts after `time` (it would have been chosen otherwise), so above 0.
        let last =
            list.range((Bound::Excluded((time, u32::MAX)), Bound::Unbounded)).next().map_or(u64::MAX, |n| n.0 - 1);
        (record, from, last)
    }

    #[inline]
    fn thread(&mut self, pid: u32, tid: u32, interp: u32, time: u64) -> u32 {
        let c = self.thread_cache[tid as usize % THREAD_CACHE];
        if c.pid == pid
            && c.tid == tid
            && c.interp == interp
            && c.slot != u32::MAX
            && c.epoch == self.epoch
            && c.from <= time
            && time <= c.last
        {
            return c.slot;
        }
        self.thread_miss(pid, tid, interp, time)
    }

    #[cold]
    fn thread_miss(&mut self, pid: u32, tid: u32, interp: u32, time: u64) -> u32 {
        let (record, from, last) = self.record_at(pid, time);
        let next = self.threads.len() as u32;
        let slot = *self.thread_ids.entry((pid, tid, record, interp)).or_insert(next);
        if slot == next {
            self.threads.push(Thread {
                pid,
                tid,
                process: 0,
                comm: String::new(),
                python_name: None,
                first_ns: time,
                samples: 0,
                matched: 0,
                gc: 0,
                stolen: 0,
                interp,
            });
            self.thread_records.push(record);
            self.comm_mark.push((u64::MAX, 0));
            if self.mode.is_time() {
                self.thread_off.push(OffCpuTime::default());
            }
            if record == NO_RECORD {
                self.pending.entry(pid).or_default().push(slot);
            }
        }
        self.thread_cache[tid as usize % THREAD_CACHE] =
            CachedThread { pid, tid, interp, slot, epoch: self.epoch, from, last };
        slot
    }

    #[inline(always)]
    fn count(&mut self, slot: u32, status: u8, leaf: u32, nodes: usize) {
        if !self.per_thread {
            // Stand-ins for leaves with a `[gc]` frame are far above the table: they go to the map.
            if let Some(v) = self.dense.get_mut(status as usize).filter(|_| leaf < GC_LEAF) {
                match v.get_mut(leaf as usize) {
                    Some(c) => *c += 1,
                    None => {
                        // Tables::apply checked leaf <= nodes.
                        v.resize(nodes.max(leaf as usize) + 1, 0);
                        v[leaf as usize] += 1;
                    }
                }
                return;
            }
            *self.counts_far.entry((ALL_THREADS, status, leaf)).or_insert(0) += 1;
            return;
        }
        if slot >> SLOT_BITS == 0 {
            *self.counts.entry(pack(slot, status, leaf)).or_insert(0) += 1;
        } else {
            *self.counts_far.entry((slot, status, leaf)).or_insert(0) += 1;
        }
    }

    fn add(&mut self, tables: &Tables, c: &SampleChunk) {
        if self.filter.active {
            self.filter.learn(&tables.processes);
            self.filter.learn_links(&tables.links);
        }
        if self.track_threads {
            self.learn_processes(&tables.processes);
        }
        // The two questions asked of every sample get their own copy of the loop.
        match (self.track_threads, self.filter.active, self.states) {
            (true, true, _) => self.add_impl::<true, true, true>(tables, c),
            (true, false, _) => self.add_impl::<true, false, true>(tables, c),
            (false, true, _) => self.add_impl::<false, true, true>(tables, c),
            (false, false, true) => self.add_impl::<false, false, true>(tables, c),
            (false, false, false) => self.add_impl::<false, false, false>(tables, c),
        }
    }

    fn add_impl<const THREADS: bool, const FILTERING: bool, const STATES: bool>(
        &mut self,
        tables: &Tables,
        c: &SampleChunk,
    ) {
        let nodes = tables.nodes.len();
        let n = c.len();
        // The reader decoded exactly the columns `Aggregator::columns` asked for, each with `n` entries; the
        // others are empty and never indexed (the const parameters gate every use). Slicing lets the compiler
        // drop bounds checks.
        fn col<T>(v: &[T], on: bool, n: usize) -> &[T] {
            if on {
                &v[..n]
            } else {
                &v[..0]
            }
        }
        let (pids, tids) = (col(&c.pid, THREADS || FILTERING, n), col(&c.tid, THREADS || FILTERING, n));
        let comms = col(&c.comm, THREADS, n);
        let deltas = col(&c.time_delta_ns, STATES || THREADS, n);
        let (gils, tss, pts) = (col(&c.gil, STATES, n), col(&c.thread_state, STATES, n), col(&c.pthread_id, STATES, n));
        let (sts, leaves) = (&c.status[..n], &c.stack[..n]);
        // The task view's stacks: empty when off, or for a file before 1.5 (no column).
        let task_leaves =
            if self.task_view && c.task_stack.len() == n { &c.task_stack[..n] } else { &c.task_stack[..0] };
        // The sample flags: empty for a file before 1.6 (no column).
        let flags = if c.flags.len() == n { &c.flags[..n] } else { &c.flags[..0] };
        // The interpreter ids: empty for a file before 1.8 (no column: all the main interpreter's).
        let interps = if c.interp.len() == n { &c.interp[..n] } else { &c.interp[..0] };
        // The spans: empty for a file before 1.10, or a chunk none of whose samples ran in one.
        let links = if c.link.len() == n { &c.link[..n] } else { &c.link[..0] };
        let chunk_no = self.chunk_no;
        self.chunk_no += 1;
        let mut all = Local::new();
        let mut matched = Local::new();
        let mut time = c.base_time_ns;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let (mut mlo, mut mhi) = (u64::MAX, 0u64);
        for i in 0..n {
            if STATES || THREADS {
                time = time.wrapping_add(deltas[i] as u64);
                lo = lo.min(time);
                hi = hi.max(time);
            }
            let flag = flags.get(i).copied().unwrap_or(0);
            let stolen = flag & sample_flags::STOLEN != 0;
            if stolen {
                self.all.stolen += 1;
                if !self.count_stolen {
                    // Not CPU time: left out before anything else counts it.
                    continue;
                }
            }
            let interp = interps.get(i).copied().unwrap_or(0);
            let slot = if THREADS {
                self.thread(pids[i], tids[i], if self.interp_root { interp } else { 0 }, time)
            } else {
                0
            };
            let s = slot as usize;
            if THREADS {
                self.threads[s].samples += 1;
                let mark = &mut self.comm_mark[s];
                if mark.0 != chunk_no {
                    self.touched.push(slot);
                }
                *mark = (chunk_no, comms[i]);
            }
            let (gil, ts, pt) = if STATES { (gils[i], tss[i], pts[i]) } else { (0, 0, 0) };
            let (st, leaf) = (sts[i], task_leaves.get(i).copied().filter(|&t| t != 0).unwrap_or(leaves[i]));
            let in_gc = flag & sample_flags::GC != 0;
            if FILTERING {
                all.add(gil, ts, pt, st);
                if !self.filter.matches(pids[i], tids[i], gil, ts, pt, st, in_gc)
                    || !self.filter.matches_link(links.get(i).copied().unwrap_or(0))
                {
                    continue;
                }
                mlo = mlo.min(time);
                mhi = mhi.max(time);
            }
            if THREADS {
                self.threads[s].matched += 1;
                self.threads[s].gc += u64::from(in_gc);
                self.threads[s].stolen += u64::from(stolen);
            }
            self.matched.stolen += u64::from(stolen);
            let leaf = self.gc_leaf(leaf, in_gc);
            match self.interp_counts.get_mut(interp as usize) {
                Some(c) => *c += 1,
                None => *self.interp_far.entry(interp).or_insert(0) += 1,
            }
            if let Some(&l) = links.get(i).filter(|&&l| l != 0) {
                *self.link_counts.entry(l).or_insert(0) += 1;
            }
            if STATES {
                matched.add(gil, ts, pt, st);
            } else {
                matched.samples += 1;
            }
            self.count(slot, st, leaf, nodes);
            if STATES && self.by_gil {
                let thread = if self.per_thread { slot } else { ALL_THREADS };
                let link = links.get(i).copied().unwrap_or(0);
                *self.gil_counts.entry((thread, st, leaf, 0, gil, link)).or_insert(0) += 1;
            }
            if THREADS && self.sample_timeline {
                let id = self.timeline_stack(st, leaf, 0);
                self.timelines.push(Entry { thread: slot, time, stack: id, gil, weight: self.sample_ns, stolen });
            }
        }
        if FILTERING {
            all.add_to(&mut self.all);
        } else {
            // Every sample matched: counted once, in `matched`.
            (mlo, mhi) = (lo, hi);
            matched.add_to(&mut self.all);
        }
        matched.add_to(&mut self.matched);
        for slot in self.touched.drain(..) {
            let (_, comm) = self.comm_mark[slot as usize];
            let name = c.comms.get(comm as usize).map(String::as_str).unwrap_or("");
            let thread = &mut self.threads[slot as usize];
            if thread.comm != name {
                thread.comm = name.to_string();
            }
        }
        widen(&mut self.all.time_range, lo, hi);
        widen(&mut self.matched.time_range, mlo, mhi);
    }
}

impl Aggregator {
    /// The timeline stack id of (status, leaf, reason).
    fn timeline_stack(&mut self, status: u8, leaf: u32, reason: u32) -> u32 {
        let next = self.timeline_stacks.len() as u32;
        let id = *self.timeline_ids.entry((status, leaf, reason)).or_insert(next);
        if id == next {
            self.timeline_stacks.push((StackStatus::from_u8(status), leaf));
            self.timeline_reasons.push(reason);
        }
        id
    }

    /// The reason id of an interval of this kind in this system call: one per distinct pseudo-frame text.
    fn reason(&mut self, kind: OffCpuKind, syscall: i32) -> u32 {
        // What the text depends on: the system call only for the kinds named by it.
        let syscall = match kind {
            OffCpuKind::Blocked | OffCpuKind::Disk | OffCpuKind::Unknown0 => syscall.max(-1),
            OffCpuKind::Runnable | OffCpuKind::Gil | OffCpuKind::Unknown(_) => -1,
        };
        let key = (kind.as_u8(), syscall);
        if let Some(&id) = self.reason_of.get(&key) {
            return id;
        }
        let text = names::off_cpu_frame(kind, syscall, &self.arch);
        let next = self.reasons.len() as u32;
        let id = *self.reason_ids.entry(text).or_insert_with_key(|text| {
            self.reasons.push(text.clone());
            next
        });
        self.reason_of.insert(key, id);
        id
    }

    /// Counts a chunk of off-CPU intervals: all of them in `off_all`; in off-cpu and wall modes the matching ones
    /// per thread and per (thread, stack, reason), and in the timelines.
    fn add_off_cpu(&mut self, tables: &Tables, intervals: &[OffCpuInterval]) {
        for iv in intervals {
            self.off_all.add(iv);
        }
        if !self.mode.is_time() {
            return;
        }
        if self.filter.active {
            self.filter.learn(&tables.processes);
            self.filter.learn_links(&tables.links);
        }
        if self.track_threads {
            self.learn_processes(&tables.processes);
        }
        for iv in intervals {
            let interp = if self.interp_root { iv.interp } else { 0 };
            let slot = if self.track_threads { self.thread(iv.pid, iv.tid, interp, iv.start_ns) } else { ALL_THREADS };
            let s = slot as usize;
            if self.track_threads && self.threads[s].samples == 0 && self.threads[s].comm != iv.comm {
                // A thread seen in no sample (yet): named by its intervals.
                self.threads[s].comm = iv.comm.clone();
            }
            let in_gc = iv.flags & off_cpu_flags::GC != 0;
            if self.filter.active
                && (!self.filter.matches_interval(iv.pid, iv.tid, iv.gil.as_u8(), iv.status.as_u8(), in_gc)
                    || !self.filter.matches_link(iv.link))
            {
                continue;
            }
            self.off_matched.add(iv);
            if self.track_threads {
                self.thread_off[s].add(iv);
            }
            let off = self.interp_off.entry(iv.interp).or_insert(0);
            *off = off.saturating_add(iv.weight_ns);
            let reason = self.reason(iv.kind, iv.syscall);
            let leaf = if self.task_view && iv.task_stack != 0 { iv.task_stack } else { iv.stack };
            let leaf = self.gc_leaf(leaf, in_gc);
            let status = iv.status.as_u8();
            let key = (if self.per_thread { slot } else { ALL_THREADS }, status, leaf, reason);
            let count = self.off_counts.entry(key).or_insert(0);
            *count = count.saturating_add(iv.weight_ns);
            if self.by_gil {
                let count = self.gil_counts.entry((key.0, status, leaf, reason, iv.gil.as_u8(), iv.link)).or_insert(0);
                *count = count.saturating_add(iv.weight_ns);
            }
            if self.track_threads && self.timeline {
                let id = self.timeline_stack(status, leaf, reason);
                let (time, gil, weight) = (iv.start_ns, iv.gil.as_u8(), Some(iv.weight_ns));
                self.timelines.push(Entry { thread: slot, time, stack: id, gil, weight, stolen: false });
            }
        }
    }
}

impl Aggregator {
    /// Counts a chunk of suspended asyncio tasks' waits (format 1.5): all of them in `task_waits_all`; in wall mode
    /// with the task view the matching ones at their stacks (complete, no reason: a task waits where its leaf frame
    /// awaits), per thread (the one running the task's event loop) and in the timelines. Never in cpu and off-cpu
    /// modes: a suspended task uses no CPU and is no thread's off-CPU time.
    fn add_task_waits(&mut self, tables: &Tables, waits: &[TaskWait]) {
        if !self.task_view {
            return;
        }
        for w in waits {
            self.task_waits_all.add(w);
        }
        if self.mode != Mode::Wall {
            return;
        }
        if self.filter.active {
            self.filter.learn(&tables.processes);
        }
        if self.track_threads {
            self.learn_processes(&tables.processes);
        }
        let status = StackStatus::Complete.as_u8();
        for w in waits {
            if self.filter.active && !self.filter.matches_task_wait(w.pid, w.tid) {
                continue;
            }
            self.task_waits_matched.add(w);
            let slot = if self.track_threads { self.thread(w.pid, w.tid, 0, w.time_ns) } else { ALL_THREADS };
            let key = (if self.per_thread { slot } else { ALL_THREADS }, status, w.stack, 0);
            let count = self.off_counts.entry(key).or_insert(0);
            *count = count.saturating_add(w.weight_ns);
            if self.by_gil {
                let count = self.task_gil_counts.entry((key.0, status, w.stack)).or_insert(0);
                *count = count.saturating_add(w.weight_ns);
            }
            if self.track_threads && self.timeline {
                let id = self.timeline_stack(status, w.stack, 0);
                let entry = Entry {
                    thread: slot,
                    time: w.time_ns,
                    stack: id,
                    gil: 0,
                    weight: Some(w.weight_ns),
                    stolen: false,
                };
                self.timelines.push(entry);
            }
        }
    }
}

/// A stack count of one GIL state and span ([`Profile::gil_stacks`]).
pub type GilStack = (StackCount, GilState, Option<pyperf_format::SpanLink>);

/// Sorts GIL-keyed stack counts and adds up equal ones (stacks that became equal when frames were left out, or in
/// several recordings).
pub(crate) fn sort_gil_stacks(v: &mut Vec<GilStack>) {
    let key = |(s, g, l): &GilStack| (s.thread, s.status.as_u8(), s.leaf, s.reason, g.as_u8(), *l);
    v.sort_unstable_by_key(key);
    v.dedup_by(|a, kept| {
        let same = key(a) == key(kept);
        if same {
            kept.0.count = kept.0.count.saturating_add(a.0.count);
        }
        same
    });
}

/// The time one sample stands for, when the event is a clock ([`Profile::sampling_period_ns`]).
fn period_of(header: &Header) -> Option<u64> {
    match header.rate {
        Rate::Frequency(hz) if hz > 0 => Some((1_000_000_000 / hz).max(1)),
        Rate::Period(ns) if ns > 0 && header.event == "cpu-clock" => Some(ns),
        _ => None,
    }
}

fn widen(range: &mut Option<(u64, u64)>, lo: u64, hi: u64) {
    if lo > hi {
        return;
    }
    *range = Some(match *range {
        Some((a, b)) => (a.min(lo), b.max(hi)),
        None => (lo, hi),
    });
}

impl Profile {
    /// Reads a whole recording from `input`. A file cut off after its header reports what it has, with a
    /// warning; other damage is an error.
    pub fn load<R: Read>(input: R, options: &LoadOptions) -> Result<Profile, pyperf_format::Error> {
        let mut reader = Reader::new(input)?;
        let header = reader.header().clone();
        let version = reader.version();
        let mut tables = Tables::default();
        let mut agg = Aggregator::new(options, &header);
        reader.set_columns(agg.columns());
        let notes = pyperf_format::scan_records(&mut reader, &mut tables, |tables, record| match record {
            Record::Samples(chunk) => agg.add(tables, chunk),
            Record::OffCpu { intervals, .. } => agg.add_off_cpu(tables, intervals),
            Record::TaskWaits(waits) => agg.add_task_waits(tables, waits),
            _ => {}
        })?;
        let mut warnings = Vec::new();
        if version.1 > pyperf_format::MINOR && version.0 == pyperf_format::MAJOR {
            warnings.push(format!(
                "recording format {}.{} is newer than this pyperf reads ({}.{}): what it added is ignored",
                version.0,
                version.1,
                pyperf_format::MAJOR,
                pyperf_format::MINOR
            ));
        }
        warnings.extend(notes.warnings);
        warnings.extend(tables.warnings.iter().map(|w| match w.pid {
            0 => format!("recorder: {}", w.text),
            pid => format!("recorder, pid {pid}: {}", w.text),
        }));
        // What a CPU sample weighs: one (cpu), nothing (off-cpu), its period (wall).
        let sample_weight = match options.mode {
            Mode::Cpu => Some(1),
            Mode::OffCpu => None,
            Mode::Wall => agg.sample_ns,
        };
        if options.mode == Mode::Wall && agg.sample_ns.is_none() && agg.matched.samples > 0 {
            warnings.push(format!(
                "a sample of {} is no fixed time ({}): wall-clock time leaves the CPU samples out",
                header.event,
                match header.rate {
                    Rate::Period(n) => format!("one every {n} events"),
                    Rate::Frequency(hz) => format!("{hz} Hz"),
                }
            ));
        }
        let samples = agg
            .counts
            .into_iter()
            .map(|(k, count)| ((k >> 40) as u32, (k >> 32) as u8, k as u32, count))
            .chain(agg.counts_far.into_iter().map(|((t, s, l), count)| (t, s, l, count)))
            .chain(agg.dense.iter().enumerate().flat_map(|(status, v)| {
                v.iter()
                    .enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(move |(leaf, &n)| (ALL_THREADS, status as u8, leaf as u32, n))
            }))
            .filter_map(|(thread, status, leaf, count)| {
                Some(StackCount {
                    thread,
                    status: StackStatus::from_u8(status),
                    leaf,
                    reason: 0,
                    count: count.saturating_mul(sample_weight?),
                })
            });
        let intervals = agg.off_counts.into_iter().map(|((thread, status, leaf, reason), count)| StackCount {
            thread,
            status: StackStatus::from_u8(status),
            leaf,
            reason,
            count,
        });
        let mut stacks: Vec<StackCount> = samples.chain(intervals).collect();
        let mut gil_stacks: Vec<GilStack> = agg
            .gil_counts
            .into_iter()
            .filter_map(|((thread, status, leaf, reason, gil, link), count)| {
                // CPU samples weigh as in `stacks`; intervals their ns.
                let count = if reason == 0 { count.saturating_mul(sample_weight?) } else { count };
                let status = StackStatus::from_u8(status);
                let span = tables.link(link).copied();
                Some((StackCount { thread, status, leaf, reason, count }, GilState::from_u8(gil), span))
            })
            .chain(agg.task_gil_counts.into_iter().map(|((thread, status, leaf), count)| {
                let status = StackStatus::from_u8(status);
                (StackCount { thread, status, leaf, reason: 0, count }, GilState::NoInfo, None)
            }))
            .collect();
        let recorded_frames = FrameKinds::of(&tables);
        let (mut timeline, mut timeline_stacks, mut timeline_reasons) =
            (agg.timelines, agg.timeline_stacks, agg.timeline_reasons);
        timeline.finish();
        let canonical = canonicalize_frames(&mut tables, options.frames, options.exact_task_names);
        let gc_nodes = add_gc_frames(&mut tables, &agg.gc_origin, canonical.as_deref());
        if canonical.is_some() || !gc_nodes.is_empty() {
            // Counted by leaf node, so what was counted needs nothing more than each leaf's new node (a stand-in's:
            // its node with the `[gc]` frame).
            let leaf_of = |leaf: u32| -> u32 {
                match leaf.checked_sub(GC_LEAF) {
                    Some(k) => gc_nodes.get(k as usize).copied().unwrap_or(0),
                    None => canonical.as_ref().map_or(leaf, |map| map.get(leaf as usize).copied().unwrap_or(0)),
                }
            };
            for s in &mut stacks {
                s.leaf = leaf_of(s.leaf);
            }
            for (s, _, _) in &mut gil_stacks {
                s.leaf = leaf_of(s.leaf);
            }
            remap_timelines(leaf_of, &mut timeline, &mut timeline_stacks, &mut timeline_reasons);
        }
        let key = |s: &StackCount| (s.thread, s.status.as_u8(), s.leaf, s.reason);
        stacks.sort_unstable_by_key(key);
        // Stacks that differed only in frames left out are one now (without, every key is unique already).
        stacks.dedup_by(|s, kept| {
            let same = key(s) == key(kept);
            if same {
                kept.count = kept.count.saturating_add(s.count);
            }
            same
        });
        sort_gil_stacks(&mut gil_stacks);
        let mut threads = agg.threads;
        for t in &mut threads {
            t.python_name = tables.thread_name(t.pid, t.tid, t.first_ns).map(str::to_string);
        }
        let processes = instances(&tables.processes, &mut threads, &agg.thread_records);
        let mut interpreters: Vec<(u32, u64)> =
            (0..16u32).zip(agg.interp_counts).chain(agg.interp_far).filter(|&(_, n)| n > 0).collect();
        interpreters.sort_unstable();
        let mut interpreters_off_cpu: Vec<(u32, u64)> = agg.interp_off.into_iter().filter(|&(_, ns)| ns > 0).collect();
        interpreters_off_cpu.sort_unstable();
        let mut spans: Vec<(pyperf_format::SpanLink, u64)> =
            agg.link_counts.into_iter().filter_map(|(l, n)| Some((*tables.link(l)?, n))).collect();
        spans.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(Profile {
            header,
            version,
            tables,
            warnings,
            filter: options.filter.clone(),
            processes,
            threads,
            stacks,
            all: agg.all,
            matched: agg.matched,
            timeline: options.timeline.then_some(timeline),
            timeline_stacks,
            timeline_reasons,
            mode: options.mode,
            reasons: agg.reasons,
            off_cpu_all: agg.off_all,
            off_cpu_matched: agg.off_matched,
            thread_off_cpu: agg.thread_off,
            frames: options.frames,
            recorded_frames,
            gil_stacks,
            diff_base: None,
            sources: Vec::new(),
            task_waits_all: agg.task_waits_all,
            task_waits_matched: agg.task_waits_matched,
            interpreters,
            interpreters_off_cpu,
            spans,
        })
    }

    /// Opens and reads the recording at `path` (`-` for standard input). Errors name the path.
    pub fn open(path: &Path, options: &LoadOptions) -> Result<Profile, ReportError> {
        let shown = path.display().to_string();
        if path == Path::new("-") {
            return Profile::load(BufReader::with_capacity(1 << 16, io::stdin().lock()), options)
                .map_err(|err| ReportError::Read { path: "standard input".into(), err });
        }
        let open_err = |reason: String| ReportError::Open { path: shown.clone(), reason };
        let file = File::open(path).map_err(|e| open_err(io_reason(&e)))?;
        let meta = file.metadata().map_err(|e| open_err(io_reason(&e)))?;
        if meta.is_dir() {
            return Err(open_err("is a directory, not a recording".into()));
        }
        if meta.is_file() && meta.len() == 0 {
            return Err(open_err("file is empty, not a recording".into()));
        }
        Profile::load(BufReader::with_capacity(1 << 16, file), options)
            .map_err(|err| ReportError::Read { path: shown, err })
    }

    /// The recorded command: the workload, else the profiled processes' commands, else pyperf's command line.
    pub fn recorded_command(&self) -> String {
        if !self.header.workload.is_empty() {
            return join_command(&self.header.workload);
        }
        let mut commands: Vec<String> = Vec::new();
        // A set: a crafted file may hold many thousands of records.
        let mut seen: HashSet<&[String]> = HashSet::new();
        for p in &self.tables.processes {
            if seen.insert(&p.command) {
                let c = join_command(&p.command);
                if !c.is_empty() {
                    commands.push(c);
                }
            }
        }
        if !commands.is_empty() {
            return commands.join(", ");
        }
        join_command(&self.header.command_line)
    }

    /// The label of `pid`'s process (see [`ProcessInstance::label`]): `python3.11 [pid 123]`, the process command's
    /// program name (else its main thread's name) and its pid (and its pid in its own PID namespace when that
    /// differs: `python3.13 [pid 4242, 1 in its namespace]`). A pid that exec'd or was reused has several
    /// instances: this is its latest one; [`Profile::process_label_of`] names a thread's own.
    pub fn process_label(&self, pid: u32) -> String {
        let end = self.processes.partition_point(|p| p.pid <= pid);
        match end.checked_sub(1).map(|i| &self.processes[i]) {
            Some(p) if p.pid == pid => p.label.clone(),
            _ => format!("[pid {pid}]"),
        }
    }

    /// The label of the process instance `thread` belongs to ([`ProcessInstance::label`]).
    pub fn process_label_of(&self, thread: &Thread) -> String {
        match self.processes.get(thread.process as usize) {
            Some(p) if p.pid == thread.pid => p.label.clone(),
            _ => self.process_label(thread.pid),
        }
    }

    /// `worker-1 [tid 124]` with the thread's Python name, else `thread 124 (comm)`. Every output names threads
    /// through this.
    pub fn thread_label(&self, thread: &Thread) -> String {
        match &thread.python_name {
            Some(name) => format!("{name} [tid {}]", thread.tid),
            None => format!("thread {} ({})", thread.tid, thread.comm),
        }
    }

    /// Recording length: the trailer's, else the span of the sample times.
    pub fn duration_ns(&self) -> u64 {
        match &self.tables.stats {
            Some(s) => s.duration_ns,
            None => self.all.time_range.map(|(a, b)| b - a).unwrap_or(0),
        }
    }

    /// Time between two samples of one thread running all the time, when the event is a clock.
    pub fn sampling_period_ns(&self) -> Option<u64> {
        period_of(&self.header)
    }

    /// The recording's `--off-cpu-min` in ns when it has off-CPU data (recorded with `--off-cpu`), else `None`.
    pub fn off_cpu_min_ns(&self) -> Option<u64> {
        self.tables.off_cpu_min_ns()
    }

    /// The sum of the matching stacks' counts: samples ([`Mode::Cpu`]) or ns.
    pub fn total(&self) -> u64 {
        self.stacks.iter().fold(0u64, |a, s| a.saturating_add(s.count))
    }

    /// The frames of a stack count, root first, as display names (see [`names`]): its marker, frames and, for an
    /// off-CPU interval, its `[off-CPU: ...]` pseudo-frame.
    pub fn stack_count_names(&self, s: &StackCount, lines: bool) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(m) = names::stack_marker(s.status, s.leaf != 0, s.reason != 0) {
            out.push(m);
        }
        let mut ids = Vec::new();
        self.tables.frames_root_first(s.leaf, &mut ids);
        out.extend(ids.iter().map(|&id| names::frame_name(self.tables.symbol(id), lines)));
        if s.reason != 0 {
            out.push(self.reasons.get(s.reason as usize).cloned().unwrap_or_default());
        }
        out
    }

    /// Frames of a stack, ROOT FIRST, as display names (see [`names`]), including the `[idle]` /
    /// `[truncated]` / `[stack error]` markers.
    pub fn stack_names(&self, status: StackStatus, leaf: u32, lines: bool) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(m) = names::marker(status, leaf != 0) {
            out.push(m);
        }
        let mut ids = Vec::new();
        self.tables.frames_root_first(leaf, &mut ids);
        out.extend(ids.iter().map(|&id| names::frame_name(self.tables.symbol(id), lines)));
        out
    }
}

/// The process instances of a recording (see [`ProcessInstance`]), by pid then start, and each thread's own
/// (`Thread::process`). `thread_records`: each thread's record, [`NO_RECORD`] for a pid no record describes.
fn instances(
    records: &[pyperf_format::Process],
    threads: &mut [Thread],
    thread_records: &[u32],
) -> Vec<ProcessInstance> {
    // (pid, start, record): one per record, one per pid without records (its threads have NO_RECORD).
    let mut keys: Vec<(u32, u64, u32)> =
        records.iter().enumerate().map(|(i, p)| (p.pid, p.first_seen_ns, i as u32)).collect();
    keys.extend(
        threads.iter().zip(thread_records).filter(|(_, &r)| r == NO_RECORD).map(|(t, _)| (t.pid, 0, NO_RECORD)),
    );
    keys.sort_unstable();
    keys.dedup();
    let mut of_record = vec![u32::MAX; records.len()];
    let mut of_pid: HashMap<u32, u32> = HashMap::new();
    for (i, &(pid, _, record)) in keys.iter().enumerate() {
        match records.get(record as usize) {
            Some(_) => of_record[record as usize] = i as u32,
            None => {
                of_pid.insert(pid, i as u32);
            }
        }
    }
    let mut out: Vec<ProcessInstance> = keys
        .iter()
        .map(|&(pid, _, record)| ProcessInstance {
            pid,
            record: (record != NO_RECORD).then_some(record),
            label: String::new(),
            samples: 0,
            matched: 0,
            threads: 0,
        })
        .collect();
    // The main thread (tid = pid) of each instance, whose name stands in for a command the recorder could not read.
    let mut main_thread: Vec<Option<u32>> = vec![None; out.len()];
    for (slot, (t, &record)) in threads.iter_mut().zip(thread_records).enumerate() {
        let i = match record {
            NO_RECORD => of_pid.get(&t.pid).copied(),
            r => of_record.get(r as usize).copied(),
        };
        // Every thread's record and pid are among the keys.
        let Some(i) = i.filter(|&i| (i as usize) < out.len()) else { continue };
        t.process = i;
        let p = &mut out[i as usize];
        p.samples += t.samples;
        p.matched += t.matched;
        p.threads += 1;
        if t.tid == t.pid {
            main_thread[i as usize] = Some(slot as u32);
        }
    }
    // Labels; a pid with several instances numbers them and gives their start.
    let mut start = 0;
    while start < out.len() {
        let pid = out[start].pid;
        let end = start + out[start..].iter().take_while(|p| p.pid == pid).count();
        for (k, i) in (start..end).enumerate() {
            let record = out[i].record.and_then(|r| records.get(r as usize));
            let program = record
                .and_then(|p| p.command.first())
                .map(|arg0| arg0.rsplit('/').next().unwrap_or(arg0).to_string())
                .filter(|s| !s.is_empty())
                .or_else(|| main_thread[i].map(|slot| threads[slot as usize].comm.clone()))
                .filter(|s| !s.is_empty());
            let mut inside = format!("pid {pid}");
            if end - start > 1 {
                inside.push_str(&format!(" #{}", k + 1));
            }
            // A process in another PID namespace (a container) is also known by its pid there.
            if let Some(n) = record.map(|p| p.ns_pid).filter(|&n| n != 0 && n != pid) {
                inside.push_str(&format!(", {n} in its namespace"));
            }
            if let (true, Some(r)) = (end - start > 1, record) {
                let ns = r.first_seen_ns;
                inside.push_str(&format!(", from {}.{:03} s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000_000));
            }
            out[i].label = match program {
                Some(p) => format!("{p} [{inside}]"),
                None => format!("[{inside}]"),
            };
        }
        start = end;
    }
    out
}

/// Joins a command line with spaces, quoting arguments that need it for a shell.
pub fn join_command(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain =
                !a.is_empty() && a.chars().all(|c| c.is_alphanumeric() || "-_./=:,+@%^".contains(c) || !c.is_ascii());
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(kind: OffCpuKind, duration_ns: u64, runnable_ns: u64, weight_ns: u64, flags: u8) -> OffCpuInterval {
        OffCpuInterval {
            pid: 1,
            tid: 1,
            start_ns: 0,
            duration_ns,
            runnable_ns,
            weight_ns,
            kind,
            syscall: -1,
            gil: GilState::NotLocked,
            status: StackStatus::Complete,
            stack: 0,
            flags,
            comm: String::new(),
            task_stack: 0,
            interp: 0,
            link: 0,
        }
    }

    #[test]
    fn weights_split_in_proportion() {
        // 200 ms blocked, the last 20 ms of it runnable.
        assert_eq!(split_weight(200_000_000, 200_000_000, 20_000_000), (20_000_000, 180_000_000));
        // A sampled interval (0.2 ms, weighing the 1 ms minimum) keeps its proportions.
        assert_eq!(split_weight(1_000_000, 200_000, 50_000), (250_000, 750_000));
        // Rounded to the nearest ns: 10 x 1/3 = 3.33, 10 x 2/3 = 6.67.
        assert_eq!(split_weight(10, 3, 1), (3, 7));
        assert_eq!(split_weight(10, 3, 2), (7, 3));
        // Runnable past the duration is the whole of it; a zero duration is all its kind's.
        assert_eq!(split_weight(5, 4, 9), (5, 0));
        assert_eq!(split_weight(5, 0, 0), (0, 5));
        assert_eq!(split_weight(0, 10, 5), (0, 0));
        // No overflow at the extremes.
        assert_eq!(split_weight(u64::MAX, u64::MAX, u64::MAX), (u64::MAX, 0));
        assert_eq!(split_weight(u64::MAX, u64::MAX, u64::MAX / 2), (u64::MAX / 2, u64::MAX / 2 + 1));
    }

    #[test]
    fn off_cpu_time_by_kind() {
        let mut t = OffCpuTime::default();
        t.add(&iv(OffCpuKind::Blocked, 200, 20, 200, 0));
        t.add(&iv(OffCpuKind::Runnable, 30, 30, 30, 0));
        // Runnable all through, whatever runnable_ns says.
        t.add(&iv(OffCpuKind::Runnable, 30, 0, 30, off_cpu_flags::BEFORE_START));
        t.add(&iv(OffCpuKind::Disk, 40, 10, 40, off_cpu_flags::OPEN_AT_END));
        // The collector waiting for the GIL inside its own collection.
        t.add(&iv(OffCpuKind::Gil, 70, 10, 70, off_cpu_flags::GC));
        // Sampled: weighs 100 though 20 long.
        t.add(&iv(OffCpuKind::Unknown0, 20, 0, 100, 0));
        t.add(&iv(OffCpuKind::Unknown(9), 10, 5, 10, 3));
        let want = OffCpuTime {
            intervals: 7,
            sampled: 1,
            before_start: 2,
            open_at_end: 2,
            weight_ns: 200 + 30 + 30 + 40 + 70 + 100 + 10,
            runnable_ns: 20 + 30 + 30 + 10 + 10 + 5,
            blocked_ns: 180 + 30,
            disk_ns: 30,
            gil_ns: 60,
            other_ns: 100 + 5,
            gc_ns: 70,
        };
        assert_eq!(t, want);
        assert_eq!(t.weight_ns, t.runnable_ns + t.blocked_ns + t.gil_ns + t.other_ns);
    }

    /// Frames left out join their caller and callee: each node becomes the node of its kept frames; stacks that
    /// differ only in left-out frames become one node; a stack of left-out frames only becomes 0.
    #[test]
    fn hidden_frames_join_caller_and_callee() {
        use pyperf_format::{symbol_flags, Symbol};
        let sym =
            |name: &str, flags| Symbol { scope: String::new(), name: name.into(), file: String::new(), line: 0, flags };
        let mut t = Tables::default();
        // 0 py, 1 native, 2 glue, 3 kernel, 4 py
        t.symbols = vec![
            sym("a", 0),
            sym("n", symbol_flags::NATIVE),
            sym("g", symbol_flags::NATIVE | symbol_flags::GLUE),
            sym("k", symbol_flags::KERNEL),
            sym("b", 0),
        ];
        // 1 a; 2 a;n; 3 a;n;k; 4 a;g; 5 a;g;b; 6 a;b; 7 n (root); 8 n;k
        t.nodes = vec![(0, 0), (1, 1), (2, 3), (1, 2), (4, 4), (1, 4), (0, 1), (7, 3)];
        let before = t.clone();
        assert_eq!(canonicalize_frames(&mut t, ShowFrames { native: true, kernel: true, glue: true }, false), None);
        assert_eq!(t.nodes, before.nodes, "nothing left out: untouched");

        let map = canonicalize_frames(&mut t, ShowFrames::default(), false).expect("glue left out");
        // 1 a; 2 a;n; 3 a;n;k; 4 a;b; 5 n; 6 n;k
        assert_eq!(t.nodes, vec![(0, 0), (1, 1), (2, 3), (1, 4), (0, 1), (5, 3)]);
        assert_eq!(map, vec![0, 1, 2, 3, 1, 4, 4, 5, 6], "a;g is a, a;g;b and a;b are one");

        let mut t = before.clone();
        let map = canonicalize_frames(&mut t, ShowFrames { native: false, kernel: false, glue: true }, false).unwrap();
        assert_eq!(t.nodes, vec![(0, 0), (1, 4)]);
        assert_eq!(map, vec![0, 1, 1, 1, 1, 2, 2, 0, 0], "native and kernel only: no frames");

        let mut t = before;
        let map = canonicalize_frames(&mut t, ShowFrames { native: false, kernel: true, glue: false }, false).unwrap();
        assert_eq!(t.nodes, vec![(0, 0), (1, 3), (1, 4), (0, 3)]);
        assert_eq!(map, vec![0, 1, 1, 2, 1, 3, 3, 0, 4]);
    }

    /// Task markers whose names differ only by counters become one symbol (the recording's own when it has the
    /// aggregated name, else one added) and their stacks one node; exact names leave the table alone.
    #[test]
    fn task_markers_aggregate_into_one_symbol() {
        use pyperf_format::{symbol_flags, Symbol};
        let sym =
            |name: &str, flags| Symbol { scope: String::new(), name: name.into(), file: String::new(), line: 0, flags };
        let task = |name: &str| sym(name, symbol_flags::TASK);
        let mut t = Tables::default();
        // 0 [task request-3], 1 [task request-12], 2 handle, 3 [asyncio loop], 4 [task a (+2 awaiters)]
        t.symbols = vec![
            task("[task request-3]"),
            task("[task request-12]"),
            sym("handle", 0),
            task("[asyncio loop]"),
            task("[task a (+2 awaiters)]"),
        ];
        // 1 r3; 2 r3;handle; 3 r12; 4 r12;handle; 5 loop; 6 a
        t.nodes = vec![(0, 0), (1, 2), (0, 1), (3, 2), (0, 3), (0, 4)];
        let before = t.clone();
        assert_eq!(canonicalize_frames(&mut t, ShowFrames::default(), true), None, "exact names");
        assert_eq!((t.nodes.clone(), t.symbols.len()), (before.nodes.clone(), 5));

        let map = canonicalize_frames(&mut t, ShowFrames::default(), false).expect("aggregated");
        assert_eq!(t.symbols.len(), 6);
        assert_eq!(t.symbols[5], task("[task request-N]"));
        assert_eq!(t.nodes, vec![(0, 5), (1, 2), (0, 3), (0, 4)]);
        assert_eq!(map, vec![0, 1, 2, 1, 2, 3, 4]);

        // A recording that has the aggregated name already: that symbol, none added.
        let mut t = before;
        t.symbols.push(task("[task request-N]"));
        canonicalize_frames(&mut t, ShowFrames::default(), false).expect("aggregated");
        assert_eq!((t.symbols.len(), t.nodes[0]), (6, (0, 5)));
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::ALL.map(Mode::key), ["cpu", "off-cpu", "wall"]);
        assert!(!Mode::Cpu.is_time() && Mode::OffCpu.is_time() && Mode::Wall.is_time());
        for mode in Mode::ALL {
            use clap::ValueEnum;
            assert_eq!(mode.to_possible_value().expect("value").get_name(), mode.key());
        }
        assert_eq!(Mode::default(), Mode::Cpu);
    }
}
