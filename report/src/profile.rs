//! Streaming a recording into counts: what every exporter starts from.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::ops::Bound;
use std::path::Path;

use pyperf_format::{
    Columns, GilState, Header, PthreadIdMatch, Rate, Reader, SampleChunk, StackStatus, Tables, ThreadStateMatch,
};

use crate::error::{io_reason, ReportError};
use crate::filter::{Compiled, Filter};
use crate::hash::FxMap;
use crate::names;

/// What to collect while reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Samples outside the filter are counted in [`Profile::all`] only.
    pub filter: Filter,
    /// Keep every matching sample's time and stack per thread (for the speedscope timeline).
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
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions::new(Filter::default(), false)
    }
}

impl LoadOptions {
    /// Threads and per-thread stack counts; `timeline` for speedscope.
    pub fn new(filter: Filter, timeline: bool) -> Self {
        LoadOptions { filter, timeline, per_thread: true, threads: true, states: true }
    }

    /// Only what folded stacks without process / thread roots need: stack counts over all threads.
    pub fn stacks_only(filter: Filter) -> Self {
        LoadOptions { filter, timeline: false, per_thread: false, threads: false, states: false }
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

/// How many matching samples had this stack on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackCount {
    /// Index into [`Profile::threads`], or [`ALL_THREADS`].
    pub thread: u32,
    /// How complete the stack is; stacks with different statuses are counted apart.
    pub status: StackStatus,
    /// Leaf stack node (0: no Python frames); resolve with `profile.tables.frames(leaf)`.
    pub leaf: u32,
    /// Samples.
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
}

impl Default for StateCounts {
    fn default() -> Self {
        StateCounts {
            samples: 0,
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

/// One thread's matching samples in file order (sort by time before use): parallel columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Sample times, ns since the recording's start.
    pub times: Vec<u64>,
    /// Index into [`Profile::timeline_stacks`].
    pub stacks: Vec<u32>,
}

/// A recording, aggregated.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The recording's header: what was recorded, where, how.
    pub header: Header,
    /// (major, minor) of the file.
    pub version: (u16, u16),
    /// Symbols, stack nodes, processes and trailer, as read: resolve [`StackCount::leaf`] with them.
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
    /// Per thread (same index as `threads`) when loaded with `timeline`; empty otherwise.
    pub timelines: Vec<Timeline>,
    /// (status, leaf) of the stacks the timelines refer to.
    pub timeline_stacks: Vec<(StackStatus, u32)>,
}

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
    slot: u32,
    epoch: u64,
    from: u64,
    last: u64,
}

const EMPTY_CACHE: CachedThread = CachedThread { pid: 0, tid: 0, slot: u32::MAX, epoch: 0, from: 0, last: 0 };

struct Aggregator {
    filter: Compiled,
    timeline: bool,
    per_thread: bool,
    track_threads: bool,
    states: bool,
    /// Without per-thread counts: samples per leaf, one vector per status 0..4, grown as stacks are defined.
    dense: [Vec<u64>; 4],
    /// (pid, tid, record) -> thread slot, record [`NO_RECORD`] while the pid has none. The file chooses pids and
    /// tids freely: SipHash, which crafted values cannot make collide.
    thread_ids: HashMap<(u32, u32, u32), u32>,
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
    timelines: Vec<Timeline>,
    timeline_ids: FxMap<(u8, u32), u32>,
    timeline_stacks: Vec<(StackStatus, u32)>,
    /// Per thread: (chunk number, comm index) of its last sample, to name threads without comparing strings
    /// per sample.
    comm_mark: Vec<(u64, u32)>,
    touched: Vec<u32>,
    chunk_no: u64,
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
    fn new(options: &LoadOptions) -> Self {
        Aggregator {
            filter: options.filter.compile(),
            timeline: options.timeline,
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
            timelines: Vec::new(),
            timeline_ids: FxMap::default(),
            timeline_stacks: Vec::new(),
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
        }
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
                self.thread_ids.remove(&(t.pid, t.tid, NO_RECORD));
                self.thread_ids.insert((t.pid, t.tid, record), slot);
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
    fn thread(&mut self, pid: u32, tid: u32, time: u64) -> u32 {
        let c = self.thread_cache[tid as usize % THREAD_CACHE];
        if c.pid == pid
            && c.tid == tid
            && c.slot != u32::MAX
            && c.epoch == self.epoch
            && c.from <= time
            && time <= c.last
        {
            return c.slot;
        }
        self.thread_miss(pid, tid, time)
    }

    #[cold]
    fn thread_miss(&mut self, pid: u32, tid: u32, time: u64) -> u32 {
        let (record, from, last) = self.record_at(pid, time);
        let next = self.threads.len() as u32;
        let slot = *self.thread_ids.entry((pid, tid, record)).or_insert(next);
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
            });
            self.thread_records.push(record);
            self.comm_mark.push((u64::MAX, 0));
            if self.timeline {
                self.timelines.push(Timeline::default());
            }
            if record == NO_RECORD {
                self.pending.entry(pid).or_default().push(slot);
            }
        }
        self.thread_cache[tid as usize % THREAD_CACHE] = CachedThread { pid, tid, slot, epoch: self.epoch, from, last };
        slot
    }

    #[inline(always)]
    fn count(&mut self, slot: u32, status: u8, leaf: u32, nodes: usize) {
        if !self.per_thread {
            if let Some(v) = self.dense.get_mut(status as usize) {
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
            let slot = if THREADS { self.thread(pids[i], tids[i], time) } else { 0 };
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
            let (st, leaf) = (sts[i], leaves[i]);
            if FILTERING {
                all.add(gil, ts, pt, st);
                if !self.filter.matches(pids[i], tids[i], gil, ts, pt, st) {
                    continue;
                }
                mlo = mlo.min(time);
                mhi = mhi.max(time);
            }
            if THREADS {
                self.threads[s].matched += 1;
            }
            if STATES {
                matched.add(gil, ts, pt, st);
            } else {
                matched.samples += 1;
            }
            self.count(slot, st, leaf, nodes);
            if THREADS && self.timeline {
                let next = self.timeline_stacks.len() as u32;
                let id = *self.timeline_ids.entry((st, leaf)).or_insert(next);
                if id == next {
                    self.timeline_stacks.push((StackStatus::from_u8(st), leaf));
                }
                let t = &mut self.timelines[s];
                t.times.push(time);
                t.stacks.push(id);
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
        let mut agg = Aggregator::new(options);
        reader.set_columns(agg.columns());
        let notes = pyperf_format::scan(&mut reader, &mut tables, |tables, chunk| agg.add(tables, chunk))?;
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
        let mut stacks: Vec<StackCount> = agg
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
            .map(|(thread, status, leaf, count)| StackCount {
                thread,
                status: StackStatus::from_u8(status),
                leaf,
                count,
            })
            .collect();
        stacks.sort_unstable_by_key(|s| (s.thread, s.status.as_u8(), s.leaf));
        let mut threads = agg.threads;
        for t in &mut threads {
            t.python_name = tables.thread_name(t.pid, t.tid, t.first_ns).map(str::to_string);
        }
        let processes = instances(&tables.processes, &mut threads, &agg.thread_records);
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
            timelines: agg.timelines,
            timeline_stacks: agg.timeline_stacks,
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
        match self.header.rate {
            Rate::Frequency(hz) if hz > 0 => Some((1_000_000_000 / hz).max(1)),
            Rate::Period(ns) if ns > 0 && self.header.event == "cpu-clock" => Some(ns),
            _ => None,
        }
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
