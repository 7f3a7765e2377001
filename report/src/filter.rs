//! Which samples a report covers, and whether their garbage collection shows (`--gc`).

use std::collections::HashSet;

use pyperf_format::{GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

use crate::error::ReportError;

/// What a report does with the samples and off-CPU intervals taken in the interpreter's cyclic garbage collector
/// (format 1.6, [`pyperf_format::sample_flags::GC`]): `pyperf report --gc MODE`. A recording without the flag reads
/// the same in every mode but `only` (which keeps nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GcMode {
    /// Keep them, with a `[gc]` frame after their Python frames ([`crate::names::GC`]).
    #[default]
    Mark,
    /// Keep them, without the `[gc]` frame: the stacks as the threads had them.
    Hide,
    /// Keep only them (with the `[gc]` frame): where the collections ran.
    Only,
    /// Leave them out: the program without its collections.
    Drop,
}

impl GcMode {
    /// Every mode, in the order of `--help`.
    pub const ALL: [GcMode; 4] = [GcMode::Mark, GcMode::Hide, GcMode::Only, GcMode::Drop];

    /// As `--gc` takes it: `mark`, `hide`, `only`, `drop`.
    pub fn key(self) -> &'static str {
        match self {
            GcMode::Mark => "mark",
            GcMode::Hide => "hide",
            GcMode::Only => "only",
            GcMode::Drop => "drop",
        }
    }

    /// The mode of a key ([`GcMode::key`]).
    pub fn from_key(key: &str) -> Option<GcMode> {
        GcMode::ALL.into_iter().find(|m| m.key() == key)
    }

    /// Whether a sample or interval taken in the collector gets a `[gc]` frame.
    pub fn marks(self) -> bool {
        matches!(self, GcMode::Mark | GcMode::Only)
    }

    /// Whether a sample or interval passes, taken in the collector (`in_gc`) or not.
    #[inline]
    pub fn keeps(self, in_gc: bool) -> bool {
        match self {
            GcMode::Mark | GcMode::Hide => true,
            GcMode::Only => in_gc,
            GcMode::Drop => !in_gc,
        }
    }
}

/// Selects samples (and off-CPU intervals, by pid, tid, GIL state, stack status and garbage collection; a
/// thread-state or pthread-id condition selects samples only). An empty list means "any"; within a list any value
/// matches; all lists must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Processes (`--pid`): host pids, or pids inside a process's own PID namespace (a container's). The namespace
    /// pids need the recording's process records: they take effect when a profile is loaded ([`Filter::matches`]
    /// alone knows host pids only).
    pub pids: Vec<u32>,
    /// Threads (`--tid`).
    pub tids: Vec<u32>,
    /// GIL states (`--gil`).
    pub gil: Vec<GilState>,
    /// Thread-state matches (`--thread-state`).
    pub thread_state: Vec<ThreadStateMatch>,
    /// pthread-id matches (`--pthread-id`).
    pub pthread_id: Vec<PthreadIdMatch>,
    /// Stack statuses (`--status`).
    pub status: Vec<StackStatus>,
    /// Samples and intervals taken in the garbage collector (`--gc`): marked (default), kept without their `[gc]`
    /// frame, kept alone or left out.
    pub gc: GcMode,
    /// Traces (`--trace-id`, format 1.10): only samples and intervals that ran in a span of one of them.
    pub traces: Vec<u128>,
    /// Spans (`--span-id`): only samples and intervals that ran in one of them.
    pub spans: Vec<u64>,
}

/// Parses ids of `digits` hex digits (`--trace-id` 32, `--span-id` 16), each item possibly a comma-separated list.
fn parse_ids(
    items: &[String],
    flag: &'static str,
    digits: usize,
    example: &'static str,
) -> Result<Vec<u128>, ReportError> {
    let mut out = Vec::new();
    for item in items {
        for id in item.split(',').map(str::trim) {
            let ok = id.len() == digits && id.bytes().all(|b| b.is_ascii_hexdigit());
            let v = u128::from_str_radix(id, 16).ok().filter(|_| ok).ok_or_else(|| ReportError::BadId {
                flag,
                given: id.to_string(),
                digits,
                example,
            })?;
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

macro_rules! key_parser {
    ($fn_name:ident, $ty:ident, $what:literal, $flag:literal) => {
        /// Parses state keys (see the format crate's `key()`), each item possibly a comma-separated list.
        /// `unknown-N` names a raw value a newer recorder may write. An empty key (`--gil ''`, `--gil held,`) is
        /// refused: taken as no key, it would silently mean no filter at all.
        pub fn $fn_name<S: AsRef<str>>(keys: &[S]) -> Result<Vec<$ty>, ReportError> {
            let mut out = Vec::new();
            for item in keys {
                for key in item.as_ref().split(',').map(str::trim) {
                    if key.is_empty() {
                        return Err(ReportError::EmptyKey { flag: $flag, what: $what, valid: $ty::keys().join(", ") });
                    }
                    let parsed = $ty::from_key(key).or_else(|| {
                        key.strip_prefix("unknown-")
                            .and_then(|n| n.parse::<u8>().ok())
                            .map($ty::from_u8)
                            .filter(|s| matches!(s, $ty::Unknown(_)))
                    });
                    match parsed {
                        Some(state) => {
                            if !out.contains(&state) {
                                out.push(state)
                            }
                        }
                        None => {
                            return Err(ReportError::UnknownKey {
                                what: $what,
                                key: key.to_string(),
                                valid: $ty::keys().join(", "),
                            })
                        }
                    }
                }
            }
            Ok(out)
        }
    };
}

impl Filter {
    /// Parses `--trace-id` values: 32 hex digits each.
    pub fn parse_trace_ids(items: &[String]) -> Result<Vec<u128>, ReportError> {
        parse_ids(items, "--trace-id", 32, "4bf92f3577b34da6a3ce929d0e0e4736")
    }

    /// Parses `--span-id` values: 16 hex digits each.
    pub fn parse_span_ids(items: &[String]) -> Result<Vec<u64>, ReportError> {
        Ok(parse_ids(items, "--span-id", 16, "00f067aa0ba902b7")?.into_iter().map(|v| v as u64).collect())
    }

    key_parser!(parse_gil, GilState, "GIL state", "--gil");
    key_parser!(parse_thread_state, ThreadStateMatch, "thread state", "--thread-state");
    key_parser!(parse_pthread_id, PthreadIdMatch, "pthread id match", "--pthread-id");
    key_parser!(parse_status, StackStatus, "stack status", "--status");

    /// Parses `--gc`'s value ([`GcMode::key`]); anything else is an error listing the modes.
    pub fn parse_gc(key: &str) -> Result<GcMode, ReportError> {
        let valid = || GcMode::ALL.map(GcMode::key).join(", ");
        match key.trim() {
            "" => Err(ReportError::EmptyKey { flag: "--gc", what: "garbage collection mode", valid: valid() }),
            k => GcMode::from_key(k).ok_or_else(|| ReportError::UnknownKey {
                what: "garbage collection mode",
                key: k.to_string(),
                valid: valid(),
            }),
        }
    }

    /// True when every sample passes (`--gc hide` shows them differently, but keeps them all).
    pub fn is_empty(&self) -> bool {
        matches!(self.gc, GcMode::Mark | GcMode::Hide)
            && self.pids.is_empty()
            && self.tids.is_empty()
            && self.gil.is_empty()
            && self.thread_state.is_empty()
            && self.pthread_id.is_empty()
            && self.status.is_empty()
            && self.traces.is_empty()
            && self.spans.is_empty()
    }

    /// Whether a sample with these values passes (`in_gc`: taken in the garbage collector).
    #[allow(clippy::too_many_arguments)]
    pub fn matches(
        &self,
        pid: u32,
        tid: u32,
        gil: GilState,
        thread_state: ThreadStateMatch,
        pthread_id: PthreadIdMatch,
        status: StackStatus,
        in_gc: bool,
    ) -> bool {
        let (ts, pt) = (thread_state.as_u8(), pthread_id.as_u8());
        self.compile().matches(pid, tid, gil.as_u8(), ts, pt, status.as_u8(), in_gc)
    }

    /// What the filter selects, in words, one item per condition (empty for no filter).
    pub fn describe(&self) -> Vec<String> {
        fn list<T>(items: &[T], f: impl Fn(&T) -> String) -> String {
            items.iter().map(f).collect::<Vec<_>>().join(" or ")
        }
        let mut out = Vec::new();
        if !self.pids.is_empty() {
            out.push(format!("pid {}", list(&self.pids, |p| p.to_string())));
        }
        if !self.tids.is_empty() {
            out.push(format!("tid {}", list(&self.tids, |p| p.to_string())));
        }
        if !self.gil.is_empty() {
            out.push(format!("GIL {}", list(&self.gil, |s| s.key())));
        }
        if !self.thread_state.is_empty() {
            out.push(format!("thread state {}", list(&self.thread_state, |s| s.key())));
        }
        if !self.pthread_id.is_empty() {
            out.push(format!("pthread id {}", list(&self.pthread_id, |s| s.key())));
        }
        if !self.status.is_empty() {
            out.push(format!("stack status {}", list(&self.status, |s| s.key())));
        }
        if !self.traces.is_empty() {
            out.push(format!("trace {}", list(&self.traces, |t| format!("{t:032x}"))));
        }
        if !self.spans.is_empty() {
            out.push(format!("span {}", list(&self.spans, |t| format!("{t:016x}"))));
        }
        match self.gc {
            GcMode::Mark => {}
            GcMode::Hide => out.push("garbage collection not marked (--gc hide)".to_string()),
            GcMode::Only => out.push("in the garbage collector (--gc only)".to_string()),
            GcMode::Drop => out.push("not in the garbage collector (--gc drop)".to_string()),
        }
        out
    }

    pub(crate) fn compile(&self) -> Compiled {
        fn table(raw: impl Iterator<Item = u8>) -> Option<Box<[bool; 256]>> {
            let mut t = Box::new([false; 256]);
            let mut any = false;
            for r in raw {
                t[r as usize] = true;
                any = true;
            }
            any.then_some(t)
        }
        let mut pids = self.pids.clone();
        pids.sort_unstable();
        let mut tids = self.tids.clone();
        tids.sort_unstable();
        Compiled {
            active: !self.is_empty(),
            learned: 0,
            namespaced: HashSet::new(),
            pids,
            tids,
            gil: table(self.gil.iter().map(|s| s.as_u8())),
            thread_state: table(self.thread_state.iter().map(|s| s.as_u8())),
            pthread_id: table(self.pthread_id.iter().map(|s| s.as_u8())),
            status: table(self.status.iter().map(|s| s.as_u8())),
            gc: self.gc,
            traces: self.traces.clone(),
            spans: self.spans.clone(),
            links_learned: 0,
            links: vec![false],
        }
    }
}

/// A filter in the shape the sample loop wants.
pub(crate) struct Compiled {
    pub active: bool,
    /// The pids asked for (sorted), which may be namespace pids.
    pids: Vec<u32>,
    /// The host pids of processes whose namespace pid was asked for ([`Compiled::learn`]). A set: a crafted file
    /// may hold many thousands of such records (and chooses the pids, hence SipHash).
    namespaced: HashSet<u32>,
    /// Process records already looked at by `learn`.
    learned: usize,
    tids: Vec<u32>,
    gil: Option<Box<[bool; 256]>>,
    thread_state: Option<Box<[bool; 256]>>,
    pthread_id: Option<Box<[bool; 256]>>,
    status: Option<Box<[bool; 256]>>,
    gc: GcMode,
    traces: Vec<u128>,
    spans: Vec<u64>,
    /// Spans already looked at by `learn_links`, and whether each span number passes (index 0: no span).
    links_learned: usize,
    links: Vec<bool>,
}

impl Compiled {
    /// Takes the process records read so far into account: a requested pid that is a process's pid inside its
    /// own PID namespace selects that process (by its host pid) too.
    pub fn learn(&mut self, processes: &[pyperf_format::Process]) {
        if self.learned >= processes.len() || self.pids.is_empty() {
            return;
        }
        for p in &processes[self.learned..] {
            if p.ns_pid != 0 && p.ns_pid != p.pid && self.pids.binary_search(&p.ns_pid).is_ok() {
                self.namespaced.insert(p.pid);
            }
        }
        self.learned = processes.len();
    }

    /// Takes the spans read so far into account (`--trace-id`, `--span-id`).
    pub fn learn_links(&mut self, links: &[pyperf_format::SpanLink]) {
        if self.links_learned >= links.len() {
            return;
        }
        for l in &links[self.links_learned..] {
            let trace = self.traces.is_empty() || self.traces.contains(&l.trace_id);
            let span = self.spans.is_empty() || self.spans.contains(&l.span_id);
            self.links.push(trace && span);
        }
        self.links_learned = links.len();
    }

    /// Whether a sample or interval that ran in span number `link` (0: none) passes the span conditions.
    #[inline]
    pub fn matches_link(&self, link: u32) -> bool {
        (self.traces.is_empty() && self.spans.is_empty()) || self.links.get(link as usize).copied().unwrap_or(false)
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn matches(
        &self,
        pid: u32,
        tid: u32,
        gil: u8,
        thread_state: u8,
        pthread_id: u8,
        status: u8,
        in_gc: bool,
    ) -> bool {
        fn ok(t: &Option<Box<[bool; 256]>>, v: u8) -> bool {
            t.as_ref().is_none_or(|t| t[v as usize])
        }
        (self.pids.is_empty()
            || self.pids.binary_search(&pid).is_ok()
            || (!self.namespaced.is_empty() && self.namespaced.contains(&pid)))
            && (self.tids.is_empty() || self.tids.binary_search(&tid).is_ok())
            && ok(&self.gil, gil)
            && ok(&self.thread_state, thread_state)
            && ok(&self.pthread_id, pthread_id)
            && ok(&self.status, status)
            && self.gc.keeps(in_gc)
    }

    /// Whether an off-CPU interval with these values passes. Intervals have no thread-state or pthread-id match:
    /// a filter on either selects samples only.
    pub fn matches_interval(&self, pid: u32, tid: u32, gil: u8, status: u8, in_gc: bool) -> bool {
        self.thread_state.is_none() && self.pthread_id.is_none() && self.matches(pid, tid, gil, 0, 0, status, in_gc)
    }

    /// Whether a suspended asyncio task's wait (format 1.5) passes: it has no GIL state, thread-state or pthread-id
    /// match (a filter on any of them selects samples and intervals only), its stack is complete, and it is no
    /// collection (a suspended task runs nothing).
    pub fn matches_task_wait(&self, pid: u32, tid: u32) -> bool {
        self.gil.is_none() && self.matches_interval(pid, tid, 0, 0, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_comma_lists() {
        let gil = Filter::parse_gil(&["held,released", "held", "unknown-200"]).unwrap();
        assert_eq!(gil, vec![GilState::ThisThread, GilState::NotLocked, GilState::Unknown(200)]);
        assert_eq!(Filter::parse_status(&["idle"]).unwrap(), vec![StackStatus::Idle]);
    }

    #[test]
    fn unknown_key_lists_valid_keys() {
        let err = Filter::parse_gil(&["hold"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown GIL state 'hold'; valid: no-info, error, uninitialized, released, held, held-by-current, \
             other-thread, held-no-holder, waiting"
        );
        // A known value spelled as unknown-N is not accepted as "unknown".
        assert!(Filter::parse_gil(&["unknown-4"]).is_err());
        assert!(Filter::parse_pthread_id(&["nope"]).unwrap_err().to_string().contains("match, mismatch"));
    }

    #[test]
    fn trace_and_span_ids_are_hex_of_their_length() {
        let t = Filter::parse_trace_ids(&["4bf92f3577b34da6a3ce929d0e0e4736,4BF92F3577B34DA6A3CE929D0E0E4736".into()]);
        assert_eq!(t.unwrap(), vec![0x4bf92f3577b34da6a3ce929d0e0e4736]);
        assert_eq!(Filter::parse_span_ids(&["00f067aa0ba902b7".into()]).unwrap(), vec![0x00f067aa0ba902b7]);
        let e = Filter::parse_trace_ids(&["xyz".into()]).unwrap_err().to_string();
        assert_eq!(
            e,
            "--trace-id \"xyz\": give 32 hex digits, as W3C trace context writes the id (e.g. \
             4bf92f3577b34da6a3ce929d0e0e4736)"
        );
        assert!(Filter::parse_span_ids(&["4bf92f3577b34da6a3ce929d0e0e4736".into()]).is_err());
        assert!(Filter::parse_trace_ids(&["+bf92f3577b34da6a3ce929d0e0e4736".into()]).is_err());
    }

    #[test]
    fn an_empty_key_is_refused_not_taken_for_no_filter() {
        let err = Filter::parse_gil(&[""]).unwrap_err().to_string();
        assert_eq!(
            err,
            "--gil needs a GIL state, got an empty one; valid: no-info, error, uninitialized, released, held, \
             held-by-current, other-thread, held-no-holder, waiting"
        );
        for keys in [&["held,"][..], &[" "], &[","], &["held", ""], &["held,,released"]] {
            assert!(Filter::parse_gil(keys).is_err(), "{keys:?}");
        }
        assert!(Filter::parse_status(&[""]).unwrap_err().to_string().starts_with("--status needs a stack status"));
        assert!(Filter::parse_thread_state(&[""]).unwrap_err().to_string().starts_with("--thread-state needs"));
        assert!(Filter::parse_pthread_id(&[""]).unwrap_err().to_string().starts_with("--pthread-id needs"));
        // No flag at all is no filter.
        assert_eq!(Filter::parse_gil::<&str>(&[]).unwrap(), vec![]);
    }

    #[test]
    fn matching() {
        let f = Filter { pids: vec![10, 20], gil: vec![GilState::ThisThread], ..Default::default() };
        let m = |pid, gil| {
            f.matches(pid, 1, gil, ThreadStateMatch::Match, PthreadIdMatch::Match, StackStatus::Complete, false)
        };
        assert!(m(10, GilState::ThisThread));
        assert!(m(20, GilState::ThisThread));
        assert!(!m(30, GilState::ThisThread));
        assert!(!m(10, GilState::NotLocked));
        assert!(Filter::default().is_empty());
        assert!(Filter::default().matches(
            1,
            2,
            GilState::Error,
            ThreadStateMatch::Mismatch,
            PthreadIdMatch::Null,
            StackStatus::Idle,
            true
        ));
        assert_eq!(f.describe(), vec!["pid 10 or 20", "GIL held"]);
    }

    /// `--gc`: mark and hide keep every sample (no filter), only and drop select by the flag, every export through
    /// the same `matches`; a bad or empty value lists the modes.
    #[test]
    fn gc_modes() {
        let m = |gc, in_gc| {
            let f = Filter { gc, ..Default::default() };
            let (ts, pt) = (ThreadStateMatch::Match, PthreadIdMatch::Match);
            f.matches(1, 1, GilState::ThisThread, ts, pt, StackStatus::Complete, in_gc)
        };
        for (gc, plain, collecting, empty) in [
            (GcMode::Mark, true, true, true),
            (GcMode::Hide, true, true, true),
            (GcMode::Only, false, true, false),
            (GcMode::Drop, true, false, false),
        ] {
            assert_eq!((m(gc, false), m(gc, true)), (plain, collecting), "{gc:?}");
            assert_eq!(Filter { gc, ..Default::default() }.is_empty(), empty, "{gc:?}");
            assert_eq!(Filter::parse_gc(gc.key()).unwrap(), gc);
            let c = Filter { gc, ..Default::default() }.compile();
            assert!(!c.matches_task_wait(1, 1) || gc != GcMode::Only, "a task wait is no collection");
        }
        assert_eq!(GcMode::default(), GcMode::Mark);
        assert!(GcMode::Mark.marks() && GcMode::Only.marks() && !GcMode::Hide.marks() && !GcMode::Drop.marks());
        assert_eq!(Filter::default().describe(), Vec::<String>::new());
        let f = Filter { pids: vec![3], gc: GcMode::Drop, ..Default::default() };
        assert_eq!(f.describe(), vec!["pid 3", "not in the garbage collector (--gc drop)"]);
        assert_eq!(
            Filter::parse_gc("marked").unwrap_err().to_string(),
            "unknown garbage collection mode 'marked'; valid: mark, hide, only, drop"
        );
        assert_eq!(
            Filter::parse_gc(" ").unwrap_err().to_string(),
            "--gc needs a garbage collection mode, got an empty one; valid: mark, hide, only, drop"
        );
    }
}
