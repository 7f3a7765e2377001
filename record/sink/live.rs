//! The live view's sink (`pyperf top`): samples and off-CPU intervals summed by function as they arrive, for a
//! recent window (one-second buckets) and since the start, per thread. What `top` draws is read from here under a
//! lock. The `.pyp` of `top -o` and a push are other sinks beside it ([`super::fanout`]).
//!
//! **Bounded memory.** Functions are interned by (qualified name, file): a program's functions, not its samples.
//! The recent window keeps `window` one-second buckets and drops older ones. Since the start, the sums of all
//! threads are kept in one table (bounded by the functions); per thread only for the [`MAX_THREADS`] threads seen
//! most recently (a host with churning processes has unboundedly many threads over time): the rest are dropped
//! from the per-thread view (counted in `threads_forgotten`), never from the totals.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Result;
use pyperf_format::{
    symbol_flags, FrameKind, GilState, OffCpuKind, Process, RecorderWarning, Stats, Symbol, ThreadName,
};
use pyperf_report::names;

use super::{OffCpuSample, Sample, Sink};

/// Threads whose since-start sums are kept one by one.
pub const MAX_THREADS: usize = 256;

/// A function as the view shows it.
#[derive(Debug, Clone)]
pub struct Function {
    /// `Class.method`, or a pseudo-frame (`[idle]`, `[off-CPU: read]`, `[native]`).
    pub name: String,
    /// Its file (empty for pseudo-frames).
    pub file: String,
    /// The first line seen for it (0 when unknown).
    pub line: u32,
}

/// Sums for one function: own (leaf) and total (on the stack) weight on CPU and off CPU, and the part of the CPU
/// total taken with the GIL held by the sampled thread.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// CPU weight (ns, or samples for a hardware event) as the leaf.
    pub own: u64,
    /// CPU weight anywhere on the stack (counted once per sample).
    pub total: u64,
    /// Of `total`, taken while the thread held the GIL.
    pub gil: u64,
    /// Off-CPU weight (ns) as the leaf.
    pub own_off: u64,
    /// Off-CPU weight anywhere on the stack.
    pub total_off: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.own += o.own;
        self.total += o.total;
        self.gil += o.gil;
        self.own_off += o.own_off;
        self.total_off += o.total_off;
    }
}

/// Per-thread sums of one period (a bucket, or since the start).
#[derive(Debug, Clone, Default)]
pub struct ThreadSums {
    /// By function id.
    pub functions: HashMap<u32, Counts>,
    /// All the thread's weight.
    pub weight: u64,
    /// CPU samples (not off-CPU intervals).
    pub samples: u64,
    /// Weight with the GIL held by this thread.
    pub gil_held: u64,
    /// Weight waiting for the GIL.
    pub gil_wait: u64,
    /// Weight without Python frames on CPU ([idle]).
    pub idle: u64,
    /// Weight off CPU (with --off-cpu).
    pub off_cpu: u64,
}

impl ThreadSums {
    fn add(&mut self, o: &ThreadSums) {
        for (f, c) in &o.functions {
            self.functions.entry(*f).or_default().add(c);
        }
        self.weight += o.weight;
        self.samples += o.samples;
        self.gil_held += o.gil_held;
        self.gil_wait += o.gil_wait;
        self.idle += o.idle;
        self.off_cpu += o.off_cpu;
    }
}

/// (pid, tid)
pub type ThreadKey = (u32, u32);

/// One second of the recent window.
#[derive(Debug, Default)]
struct Bucket {
    second: u64,
    threads: HashMap<ThreadKey, ThreadSums>,
}

/// Everything the view reads.
#[derive(Debug)]
pub struct Live {
    /// Interned functions; ids index this.
    pub functions: Vec<Function>,
    function_ids: HashMap<(String, String), u32>,
    /// Symbol id (dense, from the session) to function id.
    symbol_function: Vec<u32>,
    /// The kind of each symbol id's frame (where a `[gc]` frame goes).
    symbol_kind: Vec<FrameKind>,
    /// Recent buckets, oldest first.
    buckets: VecDeque<Bucket>,
    /// Window length in seconds.
    pub window: u64,
    /// Since the start (or the last reset), all threads.
    pub since_start: ThreadSums,
    /// Since the start, per thread (the MAX_THREADS most recently seen), with when each was last seen.
    per_thread: HashMap<ThreadKey, (u64, ThreadSums)>,
    /// Threads dropped from `per_thread` to keep it bounded.
    pub threads_forgotten: u64,
    /// Thread names (comm, or the Python name when read).
    pub thread_names: HashMap<ThreadKey, String>,
    /// Process names (the command's program).
    pub processes: HashMap<u32, String>,
    /// Seconds since the recording started, as of the last sample.
    pub now_s: u64,
    /// When the since-start sums began (s since the recording started).
    pub since_s: u64,
    /// Weight of one CPU sample (ns, or 1 for a hardware event: then weights are sample counts).
    pub sample_weight: u64,
    /// The recording has off-CPU intervals.
    pub off_cpu: bool,
    /// The architecture, to name system calls.
    arch: String,
    /// Pseudo-functions by name.
    pseudo: HashMap<String, u32>,
}

impl Live {
    /// An empty view state: a recent window of `window` seconds; each CPU sample weighs `sample_weight`.
    pub fn new(window: u64, sample_weight: u64, arch: &str) -> Live {
        Live {
            functions: Vec::new(),
            function_ids: HashMap::new(),
            symbol_function: Vec::new(),
            symbol_kind: Vec::new(),
            buckets: VecDeque::new(),
            window: window.max(1),
            since_start: ThreadSums::default(),
            per_thread: HashMap::new(),
            threads_forgotten: 0,
            thread_names: HashMap::new(),
            processes: HashMap::new(),
            now_s: 0,
            since_s: 0,
            sample_weight: sample_weight.max(1),
            off_cpu: false,
            arch: arch.to_string(),
            pseudo: HashMap::new(),
        }
    }

    fn intern(&mut self, name: String, file: String, line: u32) -> u32 {
        let key = (name, file);
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u32;
        self.functions.push(Function { name: key.0.clone(), file: key.1.clone(), line });
        self.function_ids.insert(key, id);
        id
    }

    fn pseudo(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.pseudo.get(name) {
            return id;
        }
        let id = self.intern(name.to_string(), String::new(), 0);
        self.pseudo.insert(name.to_string(), id);
        id
    }

    /// Symbol `id` (dense, in order) is `sym`.
    pub fn symbol(&mut self, id: u32, sym: &Symbol) {
        // Task boundaries are pseudo-frames (no file), aggregated as reports do (`[task request-N]`): one row per
        // kind of task, not per request.
        let f = if sym.flags & symbol_flags::TASK != 0 {
            let name = names::aggregate_task_name(&sym.name).unwrap_or_else(|| sym.name.clone());
            self.pseudo(&name)
        } else {
            self.intern(names::function_name(sym), names::file_name(sym), sym.line)
        };
        let i = id as usize;
        if self.symbol_function.len() <= i {
            self.symbol_function.resize(i + 1, u32::MAX);
            self.symbol_kind.resize(i + 1, FrameKind::Marker);
        }
        self.symbol_function[i] = f;
        self.symbol_kind[i] = sym.kind();
    }

    /// The functions of the stack `view` (symbol ids, root first) into `out`, with a `[gc]` frame where reports put
    /// it when the sample was taken in the garbage collector.
    fn stack(&mut self, view: &[u32], in_gc: bool, out: &mut Vec<u32>) {
        out.clear();
        let gc_at = in_gc.then(|| {
            let kind = |id: u32| self.symbol_kind.get(id as usize).copied().unwrap_or(FrameKind::Marker);
            names::gc_index(view.iter().map(|&id| kind(id)))
        });
        let gc = gc_at.map(|_| self.pseudo(names::GC));
        for (i, &id) in view.iter().enumerate() {
            if gc_at == Some(i) {
                out.extend(gc);
            }
            match self.symbol_function.get(id as usize) {
                Some(&f) if f != u32::MAX => out.push(f),
                _ => {}
            }
        }
        if gc_at == Some(view.len()) {
            out.extend(gc);
        }
    }

    /// The bucket of second `s`, made (and the window moved) if needed.
    fn bucket(&mut self, s: u64) -> &mut Bucket {
        if s > self.now_s {
            self.now_s = s;
        }
        let oldest = self.now_s.saturating_sub(self.window - 1);
        while self.buckets.front().is_some_and(|b| b.second < oldest) {
            self.buckets.pop_front();
        }
        // A late sample (an off-CPU interval ends after later samples) goes in its second's bucket if it is still
        // in the window, else in the oldest one.
        let s = s.max(oldest);
        let pos = self.buckets.iter().position(|b| b.second >= s);
        match pos {
            Some(p) if self.buckets[p].second == s => &mut self.buckets[p],
            Some(p) => {
                self.buckets.insert(p, Bucket { second: s, threads: HashMap::new() });
                &mut self.buckets[p]
            }
            None => {
                self.buckets.push_back(Bucket { second: s, threads: HashMap::new() });
                self.buckets.back_mut().expect("just pushed")
            }
        }
    }

    /// Adds one stack's weight: `functions` root first (ids), `leaf` the pseudo-frame below them, if any.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        time_ns: u64,
        thread: ThreadKey,
        functions: &[u32],
        weight: u64,
        gil: GilState,
        sample: bool,
        off: bool,
    ) {
        let mut sums = ThreadSums { weight, ..ThreadSums::default() };
        if sample {
            sums.samples = 1;
        }
        let held = matches!(gil, GilState::ThisThread);
        if held {
            sums.gil_held = weight;
        }
        if matches!(gil, GilState::Waiting) {
            sums.gil_wait = weight;
        }
        if off {
            sums.off_cpu = weight;
        }
        let gil_w = if held { weight } else { 0 };
        for (i, &f) in functions.iter().enumerate() {
            // Recursion: a function counts once in a stack's total.
            let first = !functions[..i].contains(&f);
            let c = sums.functions.entry(f).or_default();
            let (own, total) = if off { (&mut c.own_off, &mut c.total_off) } else { (&mut c.own, &mut c.total) };
            if first {
                *total += weight;
            }
            if i + 1 == functions.len() {
                *own += weight;
            }
            if first && !off {
                c.gil += gil_w;
            }
        }
        if functions.last().is_some_and(|&f| self.functions[f as usize].name == names::IDLE) {
            sums.idle = weight;
        }
        let second = time_ns / 1_000_000_000;
        let now = self.now_s.max(second);
        self.bucket(second).threads.entry(thread).or_default().add(&sums);
        self.since_start.add(&sums);
        if !self.per_thread.contains_key(&thread) && self.per_thread.len() >= MAX_THREADS {
            // Forget the thread seen longest ago.
            if let Some(old) = self.per_thread.iter().min_by_key(|(_, (seen, _))| *seen).map(|(k, _)| *k) {
                self.per_thread.remove(&old);
                self.thread_names.remove(&old);
                self.threads_forgotten += 1;
            }
        }
        let e = self.per_thread.entry(thread).or_default();
        e.0 = now;
        e.1.add(&sums);
        // Names of threads neither in the window nor kept since the start are not needed any more.
        if self.thread_names.len() > 2 * MAX_THREADS {
            let keep: std::collections::HashSet<ThreadKey> = self
                .per_thread
                .keys()
                .copied()
                .chain(self.buckets.iter().flat_map(|b| b.threads.keys().copied()))
                .collect();
            self.thread_names.retain(|k, _| keep.contains(k));
            let pids: std::collections::HashSet<u32> = keep.iter().map(|k| k.0).collect();
            self.processes.retain(|p, _| pids.contains(p));
        }
    }

    /// One CPU sample of `functions` (ids, root first), for tests.
    #[cfg(test)]
    pub fn add_for_test(&mut self, time_ns: u64, thread: ThreadKey, functions: &[u32], gil: GilState) {
        let w = self.sample_weight;
        self.add(time_ns, thread, functions, w, gil, true, false);
    }

    /// Forgets the since-start sums (the `r` key).
    pub fn reset(&mut self) {
        self.since_start = ThreadSums::default();
        self.per_thread.clear();
        self.since_s = self.now_s;
    }

    /// Sums of the recent window (`recent`) or since the start, of the threads `keep` accepts.
    pub fn sums(&self, recent: bool, keep: &dyn Fn(ThreadKey) -> bool) -> ThreadSums {
        let mut out = ThreadSums::default();
        if recent {
            let oldest = self.now_s.saturating_sub(self.window - 1);
            for b in self.buckets.iter().filter(|b| b.second >= oldest) {
                for (k, t) in &b.threads {
                    if keep(*k) {
                        out.add(t);
                    }
                }
            }
        } else {
            let all = self.per_thread.keys().all(|&k| keep(k));
            if all {
                return self.since_start.clone();
            }
            for (k, (_, t)) in &self.per_thread {
                if keep(*k) {
                    out.add(t);
                }
            }
        }
        out
    }

    /// The threads with weight in the recent window or kept since the start, sorted.
    pub fn threads(&self) -> Vec<ThreadKey> {
        let mut t: Vec<ThreadKey> = self
            .per_thread
            .keys()
            .copied()
            .chain(self.buckets.iter().flat_map(|b| b.threads.keys().copied()))
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Functions interned (a measure of the memory the view holds).
    pub fn function_count(&self) -> usize {
        self.functions.len()
    }
}

/// A sink that feeds a [`Live`] view.
pub struct LiveSink {
    live: Arc<Mutex<Live>>,
    samples: u64,
    intervals: u64,
    stack: Vec<u32>,
}

impl LiveSink {
    /// Feeds `live`.
    pub fn new(live: Arc<Mutex<Live>>) -> LiveSink {
        LiveSink { live, samples: 0, intervals: 0, stack: Vec::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // A panic while drawing leaves the sums as they were: still usable.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Locks `live` (a poisoned lock is still usable: the sums are only ever added to).
pub fn lock(live: &Mutex<Live>) -> MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sink for LiveSink {
    fn process(&mut self, p: &Process) -> Result<()> {
        let name = p.command.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string()).unwrap_or_default();
        self.lock().processes.insert(p.pid, name);
        Ok(())
    }
    fn warning(&mut self, _w: &RecorderWarning) -> Result<()> {
        Ok(())
    }
    fn thread_names(&mut self, names: &[ThreadName]) -> Result<()> {
        {
            let mut live = self.lock();
            for n in names {
                // Only threads the view knows of (a name for a thread never sampled would only take memory).
                if let Some(v) = live.thread_names.get_mut(&(n.pid, n.tid)) {
                    *v = n.name.clone();
                }
            }
        }
        Ok(())
    }
    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        self.lock().symbol(id, symbol);
    }
    fn sample(&mut self, s: &Sample<'_>) {
        self.samples += 1;
        // A stolen period is no CPU time, and the view's wall time counts CPU samples and off-CPU intervals only:
        // left out of both (the .pyp keeps it for the report's wall mode).
        if s.stolen {
            return;
        }
        let mut stack = std::mem::take(&mut self.stack);
        {
            let mut live = self.lock();
            live.stack(s.view(), s.in_gc, &mut stack);
            if stack.is_empty() {
                let idle = live.pseudo(names::IDLE);
                stack.push(idle);
            }
            live.thread_names.entry((s.pid, s.tid)).or_insert_with(|| s.comm.to_string());
            let w = live.sample_weight;
            live.add(s.time_ns, (s.pid, s.tid), &stack, w, s.gil, true, false);
        }
        self.stack = stack;
    }
    fn start_off_cpu(&mut self, _min_ns: u64) -> Result<()> {
        self.lock().off_cpu = true;
        Ok(())
    }
    fn off_cpu(&mut self, o: &OffCpuSample<'_>) {
        self.intervals += 1;
        let s = &o.sample;
        let mut stack = std::mem::take(&mut self.stack);
        {
            let mut live = self.lock();
            live.stack(s.view(), s.in_gc, &mut stack);
            let frame = names::off_cpu_frame(o.kind, o.syscall, &live.arch.clone());
            let leaf = live.pseudo(&frame);
            stack.push(leaf);
            live.thread_names.entry((s.pid, s.tid)).or_insert_with(|| s.comm.to_string());
            let gil = if o.kind == OffCpuKind::Gil { GilState::Waiting } else { s.gil };
            // Where the interval ended: a long one counts in that second (the view is of recent time, not exact
            // placement; the .pyp keeps its start).
            live.add(s.time_ns, (s.pid, s.tid), &stack, o.weight_ns, gil, false, true);
        }
        self.stack = stack;
    }
    fn off_cpu_intervals(&self) -> u64 {
        self.intervals
    }
    fn samples(&self) -> u64 {
        self.samples
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// The view is drawn from the [`Live`] it shares: nothing to say at the end.
    fn finish(self: Box<Self>, _stats: &Stats) -> Result<Option<String>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> Symbol {
        Symbol { scope: String::new(), name: name.into(), file: "a.py".into(), line: 1, flags: 0 }
    }

    #[test]
    fn own_total_and_window() {
        let mut l = Live::new(2, 10, "x86_64");
        for (i, n) in ["main", "work", "spin"].iter().enumerate() {
            l.symbol(i as u32, &sym(n));
        }
        // main > work > spin, then main > work > work (recursion counted once in total)
        l.add(0, (1, 1), &[0, 1, 2], 10, GilState::ThisThread, true, false);
        l.add(500_000_000, (1, 2), &[0, 1, 1], 10, GilState::NotLocked, true, false);
        let all = l.sums(true, &|_| true);
        assert_eq!(all.functions[&0], Counts { own: 0, total: 20, gil: 10, ..Counts::default() });
        assert_eq!(all.functions[&1], Counts { own: 10, total: 20, gil: 10, ..Counts::default() });
        assert_eq!(all.functions[&2], Counts { own: 10, total: 10, gil: 10, ..Counts::default() });
        assert_eq!(all.gil_held, 10);
        let t2 = l.sums(true, &|k| k.1 == 2);
        assert!(!t2.functions.contains_key(&2));
        // Three seconds later the window (2 s) no longer holds them; since the start does.
        l.add(3_000_000_000, (1, 1), &[0], 10, GilState::NoInfo, true, false);
        let recent = l.sums(true, &|_| true);
        assert_eq!(recent.weight, 10);
        assert_eq!(l.sums(false, &|_| true).weight, 30);
        assert_eq!(l.sums(false, &|k| k.1 == 2).weight, 10);
        l.reset();
        assert_eq!(l.sums(false, &|_| true).weight, 0);
    }

    /// A sample taken in the collector gets `[gc]` where reports put it: after the last Python frame, before the
    /// native frames below it (or at the root without Python frames).
    #[test]
    fn gc_frame_goes_after_the_python_frames() {
        let mut l = Live::new(2, 10, "x86_64");
        let native = |n: &str| Symbol { flags: symbol_flags::NATIVE, ..sym(n) };
        l.symbol(0, &sym("main"));
        l.symbol(1, &sym("alloc"));
        l.symbol(2, &native("gc_collect_main"));
        let names = |l: &mut Live, view: &[u32], gc: bool| {
            let mut out = Vec::new();
            l.stack(view, gc, &mut out);
            out.iter().map(|&f| l.functions[f as usize].name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(&mut l, &[0, 1, 2], true), ["main", "alloc", "[gc]", "gc_collect_main"]);
        assert_eq!(names(&mut l, &[0, 1], true), ["main", "alloc", "[gc]"]);
        assert_eq!(names(&mut l, &[2], true), ["[gc]", "gc_collect_main"]);
        assert_eq!(names(&mut l, &[0, 1, 2], false), ["main", "alloc", "gc_collect_main"]);
    }

    #[test]
    fn per_thread_memory_is_bounded() {
        let mut l = Live::new(1, 1, "x86_64");
        l.symbol(0, &sym("f"));
        for t in 0..(MAX_THREADS as u32 * 4) {
            l.add(u64::from(t) * 1_000_000_000, (t, t), &[0], 1, GilState::NoInfo, true, false);
            l.thread_names.insert((t, t), format!("t{t}"));
        }
        assert_eq!(l.per_thread.len(), MAX_THREADS);
        assert!(l.thread_names.len() <= 2 * MAX_THREADS + 1);
        assert!(l.buckets.len() <= 1);
        assert_eq!(l.threads_forgotten, 3 * MAX_THREADS as u64);
        // The totals lose nothing.
        assert_eq!(l.sums(false, &|_| true).weight, 4 * MAX_THREADS as u64);
    }
}
