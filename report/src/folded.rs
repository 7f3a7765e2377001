//! Folded stacks (Brendan Gregg's collapsed format), read by flamegraph.pl, inferno, speedscope and others.
//!
//! One line per unique stack, root first: `frame;frame;frame count`, sorted by the stack text so the output is
//! deterministic. Frames are named as in [`crate::names`] (`function (file:line)`); samples with no Python frames
//! are the single frame `[idle]`; a stack cut at the recorder's depth limit starts with `[truncated]`, a failed
//! walk with `[stack error]`. `;` and control characters inside names are escaped ([`names::escape_folded`]).

use std::fmt::Write as _;
use std::io::{self, Write};

use crate::hash::FxMap;
use crate::names;
use crate::profile::Profile;

/// Process root frame (`pid_root`) of a profile loaded without [`crate::LoadOptions::per_thread`].
pub const ALL_PROCESSES: &str = "[all processes]";
/// Thread root frame (`tid_root`) of a profile loaded without [`crate::LoadOptions::per_thread`].
pub const ALL_THREADS: &str = "[all threads]";

/// How the stacks are folded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Keep line numbers (`f (a.py:12)`); without them frames of one function at different lines merge
    /// (`f (a.py)`).
    pub lines: bool,
    /// Put the process (`python3.11 [pid 123]`) as the root frame.
    pub pid_root: bool,
    /// Put the thread (`thread 124 (comm)`) as a root frame (below the process when both are on).
    pub tid_root: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { lines: true, pid_root: false, tid_root: false }
    }
}

/// Unique stacks as folded text (without the count) and their sample counts, sorted by the text.
pub fn stacks(profile: &Profile, options: &Options) -> Vec<(String, u64)> {
    // Merge what the options do not tell apart before naming anything.
    let mut merged: FxMap<(u32, u32, u8, u32), u64> = FxMap::default();
    for s in &profile.stacks {
        let pid = match profile.threads.get(s.thread as usize) {
            Some(thread) if options.pid_root => thread.pid,
            _ => 0,
        };
        let slot = if options.tid_root { s.thread } else { u32::MAX };
        *merged.entry((pid, slot, s.status.as_u8(), s.leaf)).or_insert(0) += s.count;
    }

    let tables = &profile.tables;
    let mut symbol_names: Vec<Option<String>> = vec![None; tables.symbols.len()];
    let mut process_names: FxMap<u32, String> = FxMap::default();
    let mut ids = Vec::new();
    let mut lines: Vec<(String, u64)> = Vec::with_capacity(merged.len());
    for ((pid, slot, status, leaf), count) in merged {
        let mut line = String::new();
        let push = |line: &mut String, frame: &str| {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(frame);
        };
        let known = (slot as usize) < profile.threads.len() || !options.tid_root;
        if options.pid_root {
            let name = process_names.entry(pid).or_insert_with(|| {
                let mut s = String::new();
                let label = if known { profile.process_label(pid) } else { ALL_PROCESSES.to_string() };
                names::escape_folded(&label, &mut s);
                s
            });
            push(&mut line, name);
        }
        if options.tid_root {
            let mut s = String::new();
            match profile.threads.get(slot as usize) {
                Some(thread) => names::escape_folded(&profile.thread_label(thread), &mut s),
                None => s.push_str(ALL_THREADS),
            }
            push(&mut line, &s);
        }
        if let Some(m) = names::marker(pyperf_format::StackStatus::from_u8(status), leaf != 0) {
            push(&mut line, &m);
        }
        tables.frames_root_first(leaf, &mut ids);
        for &id in &ids {
            let name = symbol_names[id as usize].get_or_insert_with(|| {
                let mut s = String::new();
                names::escape_folded(&names::frame_name(tables.symbol(id), options.lines), &mut s);
                s
            });
            push(&mut line, name);
        }
        lines.push((line, count));
    }
    lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // Different leaves can fold to the same text (merged lines, equal roots): add them up.
    let mut out: Vec<(String, u64)> = Vec::with_capacity(lines.len());
    for (line, count) in lines {
        match out.last_mut() {
            Some(last) if last.0 == line => last.1 += count,
            _ => out.push((line, count)),
        }
    }
    out
}

/// Writes the folded stacks, one `stack count` line each.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let mut buf = String::with_capacity(1 << 16);
    for (stack, count) in stacks(profile, options) {
        buf.push_str(&stack);
        let _ = writeln!(buf, " {count}");
        if buf.len() >= 1 << 16 {
            out.write_all(buf.as_bytes())?;
            buf.clear();
        }
    }
    out.write_all(buf.as_bytes())?;
    out.flush()
}
