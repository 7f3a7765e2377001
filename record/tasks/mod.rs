//! asyncio tasks in the recording (`--async`, on by default): the task view of each sample and the sweep of
//! suspended tasks. Owns which task a sample runs, the chains of awaiting tasks, the stitched stacks and the sweep's
//! timing; the CPython facts and the reads are [`crate::python::asyncio`]'s, symbols the [`Symbolizer`]'s.
//!
//! A sample's task: the BPF program reports where runs of coroutine frames start on the thread's stack (their
//! frame addresses, `RawSample::coro_roots`). A task's coroutine frame is embedded in its coroutine at a fixed
//! offset, so the leafmost run root whose coroutine is a known task's is the running task (a generator driven by
//! `next()` starts a run too, leafward of it, and is no task's). Its frames are the thread stack's from that frame
//! leafward; rootward of them (the loop's `_run_once`, `Handle._run`) only the thread view keeps. Above them go
//! the tasks awaiting it, each as a `[task NAME]` boundary and its suspended coroutine chain, root task first.
//! Tasks are listed when a sample's coroutine is not among those known (at most a tenth of the time, see
//! [`refresh_gap`]). The BPF program wakes user space at once for a record of a task of a process whose tasks are
//! read, unless told its coroutine is no task's ([`Tasks::take_root_updates`], for the sampler's `task_coros`
//! map), so that a task of a few milliseconds (a request) is read while it still runs. One that ends before that
//! read (or before the wakeup, which is rationed) is not named: its sample keeps the thread view and is counted
//! (`task_unknown`).
//!
//! The sweep ([`Tasks::sweep`], `--async-rate`): every period, each suspended task that awaits no other task (the
//! leaf of its chain: where a request really waits) weighs the time since the last sweep at its stitched stack.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pyperf_format::Symbol;

use crate::mem::ProcMem;
use crate::python::asyncio::{self, AsyncioError, TaskInfo, TaskReader};
use crate::python::detect::mapped_file_path;
use crate::python::PythonProcess;
use crate::symbolizer::Symbolizer;

use pyperf_format::symbol_flags::{ASYNCIO_LOOP as LOOP_MARKER, TASK as TASK_FLAG};
/// Tasks are listed again for an unknown coroutine at most this often...
const REFRESH_MIN: Duration = Duration::from_millis(1);
/// ... and at most this share of the time (a list of 1,000 tasks takes ~6 ms; a coroutine that is no task's runs
/// on every sample of a program that drives one itself).
const REFRESH_SHARE: u32 = 10;
/// Run roots found to be no task's that user space remembers telling the program, per process, before it starts
/// over (the map forgets the oldest itself).
const NOT_TASKS_MAX: usize = 4096;
/// Stitched prefixes (awaiting tasks' frames) are read again at least this often: an awaiting task moves on.
const PREFIX_TTL: Duration = Duration::from_millis(500);
/// At the default rate, sweeps are spaced so that they take at most this share of one CPU.
pub const SWEEP_SHARE: f64 = 0.01;
/// The sweep lists a process's tasks again this often (new tasks, awaiters); in between it reads those it knows.
const LIST_EVERY: Duration = Duration::from_secs(1);
/// Awaiting tasks followed at most from a task to its root.
const MAX_DEPTH: usize = 32;

/// A suspended task's wait, as the sweep weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// Process.
    pub pid: u32,
    /// Thread whose loop runs the task (host tid), 0 unknown.
    pub tid: u32,
    /// Ns of CLOCK_MONOTONIC of the sweep.
    pub time_ns: u64,
    /// Wall time it stands for.
    pub weight_ns: u64,
    /// Stitched stack, root first.
    pub frames: Vec<u32>,
}

/// Counters for the trailer.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    /// Samples given a task stack.
    pub samples: u64,
    /// Samples with coroutine runs none of which a task read matched...
    pub unknown: u64,
    /// ... of which the tasks were listed after the sample (its task had ended by then, or it ran none)...
    pub unknown_late: u64,
    /// ... or not listed again since it (lists rationed).
    pub unknown_rationed: u64,
    /// Sweeps and waits written.
    pub sweeps: u64,
    /// Waits written.
    pub waits: u64,
    /// Time spent in sweeps, and the longest, us.
    pub sweep_us: u64,
    /// The longest sweep.
    pub sweep_max_us: u64,
    /// Task lists or chains that could not be read.
    pub read_errors: u64,
    /// Task lists read.
    pub lists: u64,
}

/// One process's tasks.
struct Proc {
    reader: TaskReader<ProcMem>,
    gi_iframe: u64,
    /// The last list: by task, and task by coroutine.
    tasks: HashMap<u64, TaskInfo>,
    by_coro: HashMap<u64, u64>,
    listed: Option<Instant>,
    /// CLOCK_MONOTONIC ns when the last list began.
    listed_ns: u64,
    /// Tasks awaited by none in a list begun after a sample of them running: roots indeed (see `running_task`'s
    /// caller). Kept while listed.
    settled: HashSet<u64>,
    /// When each task was last seen to be the one listed (CLOCK_MONOTONIC ns; see [`asyncio::TaskReader::same`]).
    validated: HashMap<u64, u64>,
    /// Stitched prefixes (ending with the task's own boundary), by task.
    prefixes: HashMap<u64, (Instant, Vec<u32>)>,
    /// Event loop -> host tid of the thread seen running its tasks.
    loops: HashMap<u64, u32>,
    /// Threads seen running a task: their samples without one are the loop's own.
    loop_threads: HashSet<u32>,
    /// Check words of the code objects of coroutine frames, by address, since the last list (a code object a live
    /// coroutine runs is alive; one freed since may come back at the same address: the list clears them).
    checks: HashMap<u64, Option<u32>>,
    /// 3.14: the extension's section is still to be found.
    section_pending: bool,
    /// Its tasks cannot be read (said once).
    dead: bool,
    /// How long the last list took.
    list_cost: Duration,
    /// Coroutine frames of listed tasks the program knows, and run roots it was told are no task's.
    told: HashSet<u64>,
    not_tasks: HashSet<u64>,
    /// Code objects of the coroutines of tasks listed so far (what a task's run root runs).
    task_codes: HashSet<u64>,
    /// Changes for the program's map not handed out yet: (frame, known), frame 0 the process (see
    /// [`Tasks::take_root_updates`]).
    updates: Vec<(u64, Option<bool>)>,
    /// CLOCK_MONOTONIC ns of its last sweep.
    last_sweep: Option<u64>,
    /// The period's share, in 1/256, its next sweep waits for (128-383: see [`jitter`]).
    next_gap: u64,
    /// The last sweep's parts of stacks, by task ([`Proc::part`]).
    parts: HashMap<u64, Part, rustc_hash::FxBuildHasher>,
}

/// The task view of every followed process.
#[derive(Default)]
pub struct Tasks {
    procs: HashMap<u32, Proc>,
    counters: Counters,
    /// Warnings not yet handed out: (pid, text).
    warnings: Vec<(u32, String)>,
    /// Sweep period, `None`: no sweep.
    sweep_every: Option<Duration>,
    /// The symbol id of [`LOOP_MARKER`], once interned.
    loop_marker: Option<u32>,
    /// The period stretches to keep the sweep's CPU under [`SWEEP_SHARE`].
    capped: bool,
    /// Least time between sweeps the last sweep's cost asks for (`capped`), ns.
    min_gap_ns: u64,
    /// Processes removed whose frames the program still knows (frame 0 included).
    gone: Vec<(u32, Vec<u64>)>,
    stack: Vec<u32>,
}

impl Tasks {
    /// Task views of the processes added; `sweep_hz` > 0 also weighs suspended tasks that often, and with `capped`
    /// (the default rate, not one the user chose) less often when a sweep costs more than [`SWEEP_SHARE`] of a CPU
    /// at that rate (many tasks): each sweep's weights are the time since the last one, so the totals stay right.
    pub fn new(sweep_hz: u32, capped: bool) -> Tasks {
        Tasks {
            sweep_every: (sweep_hz > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(sweep_hz))),
            capped,
            ..Tasks::default()
        }
    }

    /// Follows the tasks of `p`, if its version's are readable (3.11+). A 3.14 process whose `_asyncio` is not
    /// loaded yet is followed too: its section is looked for when it runs coroutines.
    pub fn add_process(&mut self, p: &PythonProcess) {
        self.procs.remove(&p.pid);
        let Some(layout) = asyncio::layout_for(p.row) else { return };
        let Ok(mem) = ProcMem::open(p.pid, p.mapped_addr()) else { return };
        let mut layout = *layout;
        // 3.14: looked for when needed (the extension loads with `import asyncio`).
        let mut section_pending = layout.section == asyncio::DebugSection::Extension;
        if layout.section == asyncio::DebugSection::Interpreter {
            let file = mapped(p.pid, &|path| Path::new(path) == p.interpreter).unwrap_or_default();
            match asyncio::read_section(&file).map(|s| asyncio::with_section(&layout, &s)) {
                Some(Ok(l)) => layout = l,
                Some(Err(why)) => {
                    self.say(p.pid, why);
                    return;
                }
                None => {
                    self.say(p.pid, format!("no {} section in {}", asyncio::SECTION, p.interpreter.display()));
                    return;
                }
            }
            section_pending = false;
        }
        let reader = TaskReader::new(mem, p.pid, p.row, layout, p.addrs.runtime, p.addrs.interp_head);
        self.procs.insert(
            p.pid,
            Proc {
                gi_iframe: u64::try_from(layout.gen_iframe).unwrap_or(0),
                reader,
                section_pending,
                tasks: HashMap::new(),
                by_coro: HashMap::new(),
                listed: None,
                listed_ns: 0,
                settled: HashSet::new(),
                validated: HashMap::new(),
                prefixes: HashMap::new(),
                loops: HashMap::new(),
                loop_threads: HashSet::new(),
                checks: HashMap::new(),
                dead: false,
                list_cost: Duration::ZERO,
                told: HashSet::new(),
                not_tasks: HashSet::new(),
                task_codes: HashSet::new(),
                updates: Vec::new(),
                last_sweep: None,
                next_gap: 256,
                parts: HashMap::default(),
            },
        );
    }

    /// Says once why `pid`'s tasks are not read.
    fn say(&mut self, pid: u32, why: String) {
        self.warnings.push((pid, format!("asyncio tasks of this process are not read (plain stacks): {why}")));
    }

    /// Stops following a process that exited.
    pub fn remove_process(&mut self, pid: u32) {
        if let Some(pr) = self.procs.remove(&pid) {
            self.gone.push((pid, pr.told.into_iter().collect()));
        }
    }

    /// What the BPF program should know of run roots since the last call (`Sampler::set_task_root`): (pid, frame,
    /// known), known `Some(true)` a listed task's coroutine frame, `Some(false)` no task's, `None` forgotten;
    /// frame 0 `Some(true)`: the process's tasks are read (its unknown coroutines are worth a wakeup).
    pub fn take_root_updates(&mut self) -> Vec<(u32, u64, Option<bool>)> {
        let mut out = Vec::new();
        for (pid, frames) in self.gone.drain(..) {
            out.extend(frames.into_iter().map(|f| (pid, f, None)));
        }
        for (&pid, pr) in &mut self.procs {
            out.extend(pr.updates.drain(..).map(|(f, k)| (pid, f, k)));
        }
        out
    }

    /// Warnings to hand to the recording (each once): (pid, text).
    pub fn take_warnings(&mut self) -> Vec<(u32, String)> {
        std::mem::take(&mut self.warnings)
    }

    /// Whether a followed process has had asyncio tasks.
    pub fn any_tasks(&self) -> bool {
        self.procs.values().any(|p| !p.dead && p.listed.is_some() && !p.tasks.is_empty())
    }

    /// What the trailer says.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The trailer's counters, named as format 1.5 lists them.
    pub fn trailer(&self) -> Vec<(String, u64)> {
        let c = self.counters;
        let mut v = vec![
            ("task_samples", c.samples),
            ("task_unknown", c.unknown),
            ("task_unknown_late", c.unknown_late),
            ("task_unknown_rationed", c.unknown_rationed),
            ("task_read_errors", c.read_errors),
        ];
        if self.sweep_every.is_some() {
            v.extend([
                ("task_sweeps", c.sweeps),
                ("task_waits", c.waits),
                ("task_sweep_us", c.sweep_us),
                ("task_sweep_max_us", c.sweep_max_us),
            ]);
        }
        v.into_iter().map(|(k, n)| (k.to_string(), n)).collect()
    }

    /// The task view of sample `s`, whose thread view the symbolizer just returned (`sym.last_stack()`). `None`: no
    /// task view (not an asyncio thread, or its task could not be told).
    pub fn stack(
        &mut self,
        sym: &mut Symbolizer,
        s: &crate::sampler::RawSample<'_>,
        new_symbol: &mut dyn FnMut(u32, &Symbol),
    ) -> Option<&[u32]> {
        let pr = self.procs.get_mut(&s.pid)?;
        if pr.dead {
            return None;
        }
        // The run roots of its coroutine frames, leaf first (frame index, frame address): on the stack, not the heap
        // (this runs for every sample of a followed process).
        let mut buf = [(0usize, 0u64); crate::abi::TASK_ROOTS];
        let mut n = 0;
        for (slot, root) in buf.iter_mut().zip(s.coro_roots.leaf_first()) {
            *slot = root;
            n += 1;
        }
        let roots = &buf[..n];
        let found = if roots.is_empty() {
            None
        } else {
            match pr.running_task(s, roots) {
                Some(hit) => Some(hit),
                // A list older than the sample may not know its task; a newer one would (rationed: a generator
                // that is no task's misses on every sample).
                None if pr.listed_ns < s.time_ns
                    && pr.listed.is_none_or(|t| t.elapsed() >= refresh_gap(pr.list_cost)) =>
                {
                    if let Err(why) = pr.list(&mut self.counters) {
                        self.warnings.extend(why.map(|w| (s.pid, w)));
                    }
                    pr.running_task(s, roots)
                }
                None => None,
            }
        };
        // The task at that address may have ended since it was listed and another taken its place (memory is
        // reused, often by a task of the same shape): checked when not seen to be the same since the sample.
        let found = match found {
            Some((_, task)) if pr.validated.get(&task).is_none_or(|&v| v < s.time_ns) => {
                let same = pr.tasks.get(&task).is_some_and(|t| pr.reader.same(&[t]) == [true]);
                if same {
                    pr.validated.insert(task, crate::clock::monotonic_ns());
                    found
                } else {
                    // Which one ran at the sample cannot be told: the thread view, counted.
                    if let Err(why) = pr.list(&mut self.counters) {
                        self.warnings.extend(why.map(|w| (s.pid, w)));
                    }
                    None
                }
            }
            other => other,
        };
        // A task awaited by none in a list begun before this sample: the list may have caught its creator between
        // creating it and awaiting it (the process runs while it is read; on a busy machine that step can take
        // milliseconds, and the list taken again at once caught it too: an orders task showed as a root for 10 ms).
        // It runs now, so its creator has since yielded: a list begun from now on shows who awaits it. Once per
        // task: one awaited by none in such a list is a root indeed.
        let unawaited = |pr: &Proc, task: u64| pr.tasks.get(&task).is_some_and(|t| t.awaited_by.is_empty());
        let found = match found {
            Some((_, task)) if !pr.settled.contains(&task) && unawaited(pr, task) && pr.listed_ns < s.time_ns => {
                if let Err(why) = pr.list(&mut self.counters) {
                    self.warnings.extend(why.map(|w| (s.pid, w)));
                }
                pr.prefixes.remove(&task);
                pr.running_task(s, roots)
            }
            other => other,
        };
        if let Some((_, task)) = found {
            if pr.listed_ns > s.time_ns && unawaited(pr, task) {
                pr.settled.insert(task);
            }
        }
        let Some((index, task)) = found else {
            if !roots.is_empty() && !pr.tasks.is_empty() {
                self.counters.unknown += 1;
                if pr.listed_ns > s.time_ns {
                    self.counters.unknown_late += 1;
                } else {
                    self.counters.unknown_rationed += 1;
                }
            }
            // Listed since the sample and still no task's: the program need not wake user space for it again. Unless
            // its code is a task's: then it is likely a task that ended before the list, whose address the next task
            // of that kind takes (which must wake us).
            if let Some(&(index, root)) = roots.last().filter(|_| pr.listed_ns > s.time_ns) {
                if s.frames.get(index).is_some_and(|f| !pr.task_codes.contains(&f.code)) {
                    pr.tell_not_task(root);
                }
            }
            if !pr.loop_threads.contains(&s.tid) {
                return None;
            }
            let marker = *self.loop_marker.get_or_insert_with(|| sym.intern(marker(LOOP_MARKER.into()), new_symbol));
            self.stack.clear();
            self.stack.push(marker);
            self.stack.extend_from_slice(sym.last_stack());
            return Some(&self.stack);
        };
        let pos = sym.position_of(s, index)?;
        pr.loop_threads.insert(s.tid);
        if let Some(t) = pr.tasks.get(&task) {
            pr.loops.insert(t.event_loop, s.tid);
        }
        let Some(prefix) = pr.prefix(task, sym, &mut self.counters, s.pid, new_symbol) else {
            self.counters.unknown += 1;
            return None;
        };
        self.stack.clear();
        self.stack.extend_from_slice(&prefix);
        self.stack.extend_from_slice(sym.last_stack().get(pos..)?);
        self.counters.samples += 1;
        Some(&self.stack)
    }

    /// Whether a sweep is due at `now` (CLOCK_MONOTONIC ns).
    pub fn sweep_due(&self, now: u64) -> bool {
        let Some(every) = self.sweep_every else { return false };
        let gap = (every.as_nanos() as u64).max(self.min_gap_ns);
        self.procs.values().any(|p| p.last_sweep.is_none_or(|t| now.saturating_sub(t) >= gap * p.next_gap / 256))
    }

    /// Weighs every suspended leaf task of every process whose period is over: its wait since the last sweep.
    pub fn sweep(&mut self, sym: &mut Symbolizer, now: u64, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> Vec<Wait> {
        let Some(every) = self.sweep_every else { return Vec::new() };
        let every_ns = (every.as_nanos() as u64).max(self.min_gap_ns);
        let started = Instant::now();
        let cpu_before = thread_cpu_ns();
        let mut out = Vec::new();
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            let Some(pr) = self.procs.get_mut(&pid) else { continue };
            if pr.dead {
                continue;
            }
            let weight = match pr.last_sweep {
                Some(t) if now.saturating_sub(t) < every_ns * pr.next_gap / 256 => continue,
                // A late sweep stands for two periods at most: the rest was not looked at.
                Some(t) => now.saturating_sub(t).min(2 * every_ns),
                None => every_ns,
            };
            pr.last_sweep = Some(now);
            pr.next_gap = jitter(now);
            // Listed again once a second (new tasks, who awaits whom); in between, the tasks known are read in
            // batches, a few system calls for all of them.
            if pr.listed.is_none_or(|t| t.elapsed() >= LIST_EVERY) {
                if let Err(why) = pr.list(&mut self.counters) {
                    self.warnings.extend(why.map(|w| (pid, w)));
                    continue;
                }
            }
            // Tasks replaced by others at their addresses since the list are dropped (the next list finds the new).
            let infos: Vec<&TaskInfo> = pr.tasks.values().collect();
            let same = pr.reader.same(&infos);
            let replaced: Vec<u64> = infos.iter().zip(same).filter(|(_, ok)| !ok).map(|(t, _)| t.addr).collect();
            for t in replaced {
                pr.tasks.remove(&t);
                pr.prefixes.remove(&t);
            }
            let now_ns = crate::clock::monotonic_ns();
            for t in pr.tasks.keys() {
                pr.validated.insert(*t, now_ns);
            }
            let addrs: Vec<u64> = pr.tasks.keys().copied().collect();
            let swept = pr.reader.sweep(&addrs);
            let mut chains: HashMap<u64, asyncio::Swept> = HashMap::new();
            for (t, s) in addrs.into_iter().zip(swept) {
                match s {
                    Some(s) if s.pending => {
                        chains.insert(t, s);
                    }
                    // Done, cancelled, or gone: no longer waits anywhere.
                    Some(_) => {
                        pr.tasks.remove(&t);
                    }
                    None => self.counters.read_errors += 1,
                }
            }
            pr.by_coro.retain(|_, t| chains.contains_key(t));
            pr.tell_tasks();
            // Leaves: suspended tasks no other task waits for.
            let awaiting: HashSet<u64> =
                chains.keys().filter_map(|t| pr.tasks.get(t)).flat_map(|t| t.awaited_by.iter().copied()).collect();
            let mut leaves: Vec<u64> =
                chains.iter().filter(|(t, s)| !s.running && !awaiting.contains(t)).map(|(&t, _)| t).collect();
            leaves.sort_unstable();
            // Each task's part of a stack (its boundary and its chain's symbols) is made again only when its name,
            // awaiters or frames changed since the last sweep: most tasks wait where they waited.
            let mut parts: FastMap<u64, Part> = FastMap::default();
            let mut merged: FastMap<u32, FastMap<Vec<u32>, u64>> = FastMap::default();
            let mut frames: Vec<u32> = Vec::new();
            for t in leaves {
                frames.clear();
                for &(task, others) in pr.path_to_root(t).iter().rev() {
                    let p = match parts.entry(task) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(pr.part(task, others, chains.get(&task), sym, pid, new_symbol))
                        }
                    };
                    frames.extend_from_slice(&p.ids);
                }
                let tid = pr.tasks.get(&t).and_then(|i| pr.loops.get(&i.event_loop)).copied().unwrap_or(0);
                let by_stack = merged.entry(tid).or_default();
                match by_stack.get_mut(frames.as_slice()) {
                    Some(w) => *w += weight,
                    None => {
                        by_stack.insert(frames.clone(), weight);
                    }
                }
            }
            pr.parts = parts;
            for (tid, by_stack) in merged {
                for (frames, weight_ns) in by_stack {
                    out.push(Wait { pid, tid, time_ns: now, weight_ns, frames });
                }
            }
        }
        let us = started.elapsed().as_micros() as u64;
        if self.capped {
            let cost = thread_cpu_ns().saturating_sub(cpu_before);
            self.min_gap_ns = (cost as f64 / SWEEP_SHARE) as u64;
        }
        self.counters.sweeps += 1;
        self.counters.waits += out.len() as u64;
        self.counters.sweep_us += us;
        self.counters.sweep_max_us = self.counters.sweep_max_us.max(us);
        out
    }
}

/// The share of the period (in 1/256, from half to one and a half) the next sweep of a process waits: sweeps at a
/// fixed period alias with a program's own periodic waits (a 100 ms sleep sampled every 20 ms is seen for 5 or 6
/// sweeps depending on the phase, which drifts slowly: the wall view's split of a 0.1 s / 0.3 s cycle was off by up
/// to 0.1). Each sweep weighs the time since the one before, so the totals are unchanged. From the clock's low bits,
/// mixed: no generator needed for this.
fn jitter(now_ns: u64) -> u64 {
    let mut x = now_ns ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    128 + x % 256
}

/// Least time between two lists for unknown coroutines, given what the last one took.
fn refresh_gap(list_cost: Duration) -> Duration {
    (list_cost * REFRESH_SHARE).max(REFRESH_MIN)
}

/// A task's part of the sweep's stacks: its boundary and its coroutine chain's symbols, and what they were made
/// from.
#[derive(Debug, Clone, Default)]
struct Part {
    name: String,
    others: usize,
    frames: Vec<asyncio::CoroFrame>,
    ids: Vec<u32>,
}

/// Maps of the sweep, keyed by addresses and symbol ids: FxHash, not SipHash.
type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

impl Proc {
    /// `task`'s part of the sweep's stacks, from the last sweep's when its name, awaiters and frames are the same.
    fn part(
        &mut self,
        task: u64,
        others: usize,
        swept: Option<&asyncio::Swept>,
        sym: &mut Symbolizer,
        pid: u32,
        new_symbol: &mut dyn FnMut(u32, &Symbol),
    ) -> Part {
        let name = self.tasks.get(&task).map_or("", |t| t.name.as_str());
        let frames: &[asyncio::CoroFrame] = swept.map_or(&[], |s| s.frames.as_slice());
        if let Some(p) = self.parts.remove(&task) {
            if p.name == name && p.others == others && p.frames == frames {
                return p;
            }
        }
        let name = name.to_string();
        let mut ids = vec![sym.intern(marker(boundary(&name, others)), new_symbol)];
        let frames = frames.to_vec();
        self.symbolize(sym, pid, &frames, &mut ids, new_symbol);
        Part { name, others, frames, ids }
    }

    /// Symbol ids of coroutine frames read from memory.
    fn symbolize(
        &mut self,
        sym: &mut Symbolizer,
        pid: u32,
        frames: &[asyncio::CoroFrame],
        out: &mut Vec<u32>,
        new_symbol: &mut dyn FnMut(u32, &Symbol),
    ) {
        for f in frames {
            let check = *self.checks.entry(f.code).or_insert_with(|| sym.code_check(pid, f.code));
            out.extend(sym.live_frame(pid, f.code, check, f.instr, new_symbol));
        }
    }

    /// The running task of a sample: the leafmost run root whose coroutine is a listed task's, and whose code
    /// is that coroutine's (an address reused by another coroutine since the list is not taken for it).
    fn running_task(&self, s: &crate::sampler::RawSample<'_>, roots: &[(usize, u64)]) -> Option<(usize, u64)> {
        roots.iter().find_map(|&(index, frame)| {
            let task = *self.by_coro.get(&frame.checked_sub(self.gi_iframe)?)?;
            let code = s.frames.get(index)?.code;
            let t = self.tasks.get(&task)?;
            (t.coro_code == 0 || t.coro_code == code).then_some((index, task))
        })
    }

    /// Lists the process's tasks again. `Err(Some(text))`: a warning to say once; `Err(None)`: not now.
    fn list(&mut self, counters: &mut Counters) -> Result<(), Option<String>> {
        let started = Instant::now();
        let result = self.list_now(counters);
        self.list_cost = started.elapsed();
        if result.is_ok() {
            self.tell_tasks();
        } else if self.dead && self.told.remove(&0) {
            // Its tasks are no longer read: its unknown coroutines are worth no wakeup.
            self.updates.push((0, None));
        }
        result
    }

    /// Hands the program the coroutine frames of the tasks now known, and forgets those of tasks gone.
    fn tell_tasks(&mut self) {
        let mut frames: HashSet<u64> = self.by_coro.keys().map(|c| c + self.gi_iframe).collect();
        // Frame 0, the process: told once it has had tasks, and kept (a process between two bursts of requests).
        if !frames.is_empty() || self.told.contains(&0) {
            frames.insert(0);
        }
        for &f in frames.difference(&self.told) {
            self.updates.push((f, Some(true)));
            self.not_tasks.remove(&f);
        }
        for &f in self.told.difference(&frames) {
            self.updates.push((f, None));
        }
        self.told = frames;
    }

    /// Tells the program that run root `frame` is no task's (the program forgets the oldest such roots itself).
    fn tell_not_task(&mut self, frame: u64) {
        if self.told.contains(&frame) || !self.not_tasks.insert(frame) {
            return;
        }
        if self.not_tasks.len() > NOT_TASKS_MAX {
            self.not_tasks.clear();
        }
        self.updates.push((frame, Some(false)));
    }

    fn list_now(&mut self, counters: &mut Counters) -> Result<(), Option<String>> {
        self.listed = Some(Instant::now());
        self.listed_ns = crate::clock::monotonic_ns();
        if self.section_pending {
            // (3.14: `_asyncio` is mapped once asyncio is imported; the samples of coroutines say it may be now.)
            match find_extension(self.reader.pid()) {
                Ok(Some(l)) => match asyncio::with_section(self.reader.layout(), &l) {
                    Ok(layout) => {
                        self.reader.set_layout(layout);
                        self.section_pending = false;
                    }
                    Err(why) => {
                        self.dead = true;
                        return Err(Some(format!("asyncio tasks of this process are not read (plain stacks): {why}")));
                    }
                },
                Ok(None) => return Err(None),
                Err(why) => {
                    self.dead = true;
                    return Err(Some(format!("asyncio tasks of this process are not read (plain stacks): {why}")));
                }
            }
        }
        counters.lists += 1;
        match self.reader.tasks() {
            Ok(list) => {
                self.by_coro = list.iter().map(|t| (t.coro, t.addr)).collect();
                // (Bounded: a program has few kinds of task; one making new code objects for ever starts over.)
                if self.task_codes.len() > NOT_TASKS_MAX {
                    self.task_codes.clear();
                }
                self.task_codes.extend(list.iter().map(|t| t.coro_code).filter(|&c| c != 0));
                // Not trusted until read again (`same`, at a task's first sample): the list is read while the process
                // runs, so a task may have ended and another taken its address by the time a sample is stitched.
                self.validated.clear();
                let old = std::mem::replace(&mut self.tasks, list.into_iter().map(|t| (t.addr, t)).collect());
                keep_same_tasks(&old, &self.tasks, &mut self.prefixes, &mut self.settled);
                self.checks.clear();
                Ok(())
            }
            Err(AsyncioError::NotImported) => Err(None),
            Err(AsyncioError::Unsupported(why)) => {
                self.dead = true;
                Err(Some(format!("asyncio tasks of this process are not read (plain stacks): {why}")))
            }
            Err(AsyncioError::Unreadable(_)) => {
                counters.read_errors += 1;
                Err(None)
            }
        }
    }

    /// The tasks from `task` up to its root task, each with the number of its other awaiters: one awaiter is
    /// followed (the lowest address, so that the choice is stable), the others are counted in the boundary's name.
    fn path_to_root(&self, task: u64) -> Vec<(u64, usize)> {
        let mut chain: Vec<(u64, usize)> = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = task;
        while chain.len() < MAX_DEPTH && seen.insert(cur) {
            let Some(t) = self.tasks.get(&cur) else { break };
            let known: Vec<u64> = t.awaited_by.iter().copied().filter(|a| self.tasks.contains_key(a)).collect();
            let others = known.len().saturating_sub(1) + t.other_awaiters as usize;
            chain.push((cur, others));
            match known.iter().min() {
                Some(&next) => cur = next,
                None => break,
            }
        }
        chain
    }

    /// The stitched prefix of `task`: from its root task down, each task's boundary and the suspended frames of
    /// the awaiting ones, ending with `task`'s own boundary.
    fn prefix(
        &mut self,
        task: u64,
        sym: &mut Symbolizer,
        counters: &mut Counters,
        pid: u32,
        new_symbol: &mut dyn FnMut(u32, &Symbol),
    ) -> Option<Vec<u32>> {
        if let Some((_, p)) = self.prefixes.get(&task).filter(|(at, _)| at.elapsed() < PREFIX_TTL) {
            return Some(p.clone());
        }
        let chain = self.path_to_root(task);
        let mut out = Vec::new();
        for (i, &(t, others)) in chain.iter().enumerate().rev() {
            let name = self.tasks.get(&t).map(|t| t.name.clone()).unwrap_or_default();
            out.push(sym.intern(marker(boundary(&name, others)), new_symbol));
            if i > 0 {
                let coro = self.tasks.get(&t).map(|t| t.coro).unwrap_or(0);
                let (frames, _) = self.reader.chain(coro);
                if frames.is_empty() {
                    // The awaiting task ended since the sample (it is read up to a poll later), or a read failed:
                    // the prefix read before stands (who awaits a running task does not change while it runs, nor
                    // where), else the sample keeps its thread view.
                    counters.read_errors += 1;
                    return self.prefixes.get(&task).map(|(_, p)| p.clone());
                }
                self.symbolize(sym, pid, &frames, &mut out, new_symbol);
            }
        }
        // A task awaited by none is not kept: its prefix is its boundary alone (nothing to save), and a list that
        // missed its awaiter (read while the process ran) must not make it a root for PREFIX_TTL.
        if chain.len() > 1 {
            self.prefixes.insert(task, (Instant::now(), out.clone()));
        }
        Some(out)
    }
}

/// Keeps, of the stitched prefixes and settled roots remembered by task address, those of the tasks the `new` list
/// has at the same address as the `old` one did. By address alone, a request task's prefix (`[task Task-1]; serve;
/// [task request-9]`), made from one of its samples, was handed for up to [`PREFIX_TTL`] to the orders task that
/// took the request's address once it ended: that task's `fetch_orders; compute; crunch` under the request's boundary
/// (tests/tasks.rs on 3.12, ~1 run in 40 under load).
fn keep_same_tasks(
    old: &HashMap<u64, TaskInfo>,
    new: &HashMap<u64, TaskInfo>,
    prefixes: &mut HashMap<u64, (Instant, Vec<u32>)>,
    settled: &mut HashSet<u64>,
) {
    let same = |t: &u64| matches!((old.get(t), new.get(t)), (Some(a), Some(b)) if a.same_task(b));
    prefixes.retain(|t, _| same(t));
    settled.retain(same);
}

/// The CPU time of the calling thread, ns (CLOCK_THREAD_CPUTIME_ID): what a sweep costs, not the time it waited.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, which lives for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The boundary's text: `[task NAME]`, `[task NAME (+K awaiters)]`; a task whose name could not be read `[task ?]`.
pub fn boundary(name: &str, others: usize) -> String {
    let name = if name.is_empty() { "?" } else { name };
    match others {
        0 => format!("[task {name}]"),
        k => format!("[task {name} (+{k} awaiters)]"),
    }
}

/// A task pseudo-frame.
fn marker(name: String) -> Symbol {
    Symbol { scope: String::new(), name, file: String::new(), line: 0, flags: TASK_FLAG }
}

/// The file `pid` maps under a path `which` accepts, as pyperf can open it (through the process's root or its
/// `map_files`: a process in a container or a chroot names files by its own root).
fn mapped(pid: u32, which: &dyn Fn(&str) -> bool) -> Option<PathBuf> {
    let maps = crate::proc::maps(pid).ok()?;
    let entries = crate::proc::parse_maps(&maps);
    let path = entries.iter().find(|m| which(&m.path))?.path.clone();
    let same: Vec<&crate::proc::MapsEntry> = entries.iter().filter(|m| m.path == path).collect();
    Some(mapped_file_path(pid, &path, &same))
}

/// 3.14: the `.AsyncioDebug` section of the `_asyncio` extension `pid` maps, if it maps it yet.
fn find_extension(pid: u32) -> Result<Option<[u64; 13]>, String> {
    let is_extension = |p: &str| p.rsplit('/').next().is_some_and(|f| f.starts_with(asyncio::EXTENSION_PREFIX));
    let Some(file) = mapped(pid, &is_extension) else { return Ok(None) };
    match asyncio::read_section(&file) {
        Some(s) => Ok(Some(s)),
        None => Err(format!("no {} section in the _asyncio module ({})", asyncio::SECTION, file.display())),
    }
}

/// One task as `dump --async` shows it.
#[derive(Debug, Clone)]
pub struct TreeTask {
    /// The task object's address (its id).
    pub addr: u64,
    /// Its name (`?` when unreadable).
    pub name: String,
    /// Its coroutine runs now.
    pub running: bool,
    /// The kernel tid of the thread whose list holds it (3.14+, the process's PID namespace), 0 unknown.
    pub ns_tid: u32,
    /// Its coroutine chain, root first (the task's coroutine, then what it awaits, to where it waits).
    pub frames: Vec<Symbol>,
    /// The chain was longer than could be read.
    pub cut: bool,
    /// Tasks awaiting it.
    pub awaited_by: Vec<u64>,
    /// Other awaiters (futures that are not tasks).
    pub other_awaiters: u32,
}

/// Every task of `p` now, with its coroutine chain and awaiters (`dump --async`). `Err`: a line saying why not.
pub fn tree(p: &PythonProcess) -> Result<Vec<TreeTask>, String> {
    let mut tasks = Tasks::new(0, false);
    tasks.add_process(p);
    if let Some((_, why)) = tasks.warnings.first() {
        return Err(why.clone());
    }
    let Some(pr) = tasks.procs.get_mut(&p.pid) else {
        return Err(format!("Python {} has no asyncio tasks pyperf can read (3.11+)", p.version_string()));
    };
    let mut counters = Counters::default();
    match pr.list(&mut counters) {
        Ok(()) => {}
        Err(Some(why)) => return Err(why),
        Err(None) if pr.section_pending => {
            return Err("asyncio is not imported (its _asyncio module is not loaded)".to_string())
        }
        Err(None) => {
            return Err(if pr.listed.is_some() && counters.read_errors > 0 {
                "its tasks could not be read (the process changed while being read, or exited): try again".into()
            } else {
                "asyncio is not imported".into()
            })
        }
    }
    let mut sym = Symbolizer::new();
    sym.add_process(p).map_err(|e| format!("cannot read the memory of process {}: {e}", p.pid))?;
    let mut table: Vec<Symbol> = Vec::new();
    let mut out: Vec<TreeTask> = Vec::new();
    let mut list: Vec<&TaskInfo> = pr.tasks.values().collect();
    list.sort_by_key(|t| t.addr);
    for t in list {
        let (chain, cut) = pr.reader.chain(t.coro);
        let ids: Vec<u32> = chain
            .iter()
            .filter_map(|f| {
                let check = sym.code_check(p.pid, f.code);
                sym.live_frame(p.pid, f.code, check, f.instr, &mut |id, s| {
                    if table.len() <= id as usize {
                        table.resize(id as usize + 1, marker(String::new()));
                    }
                    table[id as usize] = s.clone();
                })
            })
            .collect();
        out.push(TreeTask {
            addr: t.addr,
            name: if t.name.is_empty() { "?".into() } else { t.name.clone() },
            running: t.running,
            ns_tid: t.ns_tid,
            frames: ids.iter().filter_map(|&i| table.get(i as usize).cloned()).collect(),
            cut,
            awaited_by: t.awaited_by.clone(),
            other_awaiters: t.other_awaiters,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::asyncio::Identity;

    fn task(addr: u64, name: &str, coro: u64, code: u64, name_obj: u64) -> TaskInfo {
        TaskInfo {
            addr,
            name: name.into(),
            coro,
            coro_code: code,
            event_loop: 0x10,
            running: false,
            awaited_by: Vec::new(),
            other_awaiters: 0,
            ns_tid: 0,
            identity: Identity::of(name_obj, name.as_bytes()),
        }
    }

    fn by_addr(tasks: &[TaskInfo]) -> HashMap<u64, TaskInfo> {
        tasks.iter().map(|t| (t.addr, t.clone())).collect()
    }

    /// A prefix or settled root is kept for the task it was made for, not handed to the next task at its address.
    #[test]
    fn a_new_task_at_an_old_address_gets_nothing_of_the_old_one() {
        let (handle, fetch) = (0x7000, 0x7100);
        let old = by_addr(&[
            task(0xa000, "request-9", 0xc000, handle, 0xe000),
            task(0xb000, "orders-9", 0xc800, fetch, 0xe800),
            task(0xd000, "Task-1", 0xcc00, 0x7200, 0xec00),
        ]);
        // request-9 and orders-9 ended; orders-12 took request-9's address, orders-13 orders-9's with its
        // coroutine and name object where orders-9's were (freed memory is reused by objects of the same size).
        let new = by_addr(&[
            task(0xa000, "orders-12", 0xc400, fetch, 0xe400),
            task(0xb000, "orders-13", 0xc800, fetch, 0xe800),
            task(0xd000, "Task-1", 0xcc00, 0x7200, 0xec00),
        ]);
        let now = Instant::now();
        let mut prefixes: HashMap<u64, (Instant, Vec<u32>)> =
            [0xa000, 0xb000, 0xd000, 0xf000].into_iter().map(|t| (t, (now, vec![1, 2, 3]))).collect();
        let mut settled: HashSet<u64> = [0xa000, 0xb000, 0xd000, 0xf000].into_iter().collect();
        keep_same_tasks(&old, &new, &mut prefixes, &mut settled);
        assert_eq!(prefixes.keys().copied().collect::<HashSet<u64>>(), HashSet::from([0xd000]));
        assert_eq!(settled, HashSet::from([0xd000]));
    }
}
