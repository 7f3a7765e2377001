//! Folded stacks (Brendan Gregg's collapsed format), read by flamegraph.pl, inferno, speedscope and others.
//!
//! One line per unique stack, root first: `frame;frame;frame count`, depth first with siblings ordered by name, so
//! the output is deterministic. Frames are named as in [`crate::names`] (`function (file:line)`); samples with no Python frames
//! are the single frame `[idle]`; a stack cut at the recorder's depth limit starts with `[truncated]`, a failed
//! walk with `[stack error]`. `;` and control characters inside names are escaped ([`names::escape_folded`]).

use std::fmt::Write as _;
use std::io::{self, Write};

use crate::names;
use crate::profile::Profile;
use crate::tree::Tree;

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

/// Unique stacks as folded text (without the count) and their sample counts, in [`write`]'s order. Holds every
/// line in memory: for large profiles prefer [`write`], which streams.
pub fn stacks(profile: &Profile, options: &Options) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    each_line(&Tree::build(profile, options), |line, count| out.push((line.to_string(), count)));
    out
}

/// Calls `f` with every stack's folded text and count: depth first, siblings ordered by name, so the output is
/// deterministic and a stack's callers come before it. Memory: the tree and one line.
fn each_line(tree: &Tree, mut f: impl FnMut(&str, u64)) {
    let escaped: Vec<String> = tree
        .labels
        .iter()
        .map(|l| {
            let mut s = String::new();
            names::escape_folded(&l.text, &mut s);
            s
        })
        .collect();
    // The line being built, and where each open frame starts in it.
    let mut line = String::new();
    let mut starts: Vec<usize> = Vec::new();
    tree.walk(|node, entering| {
        if !entering {
            line.truncate(starts.pop().unwrap_or(0));
            return;
        }
        starts.push(line.len());
        if !line.is_empty() {
            line.push(';');
        }
        line.push_str(&escaped[tree.nodes[node as usize].label as usize]);
        let count = tree.nodes[node as usize].self_count;
        if count > 0 {
            f(&line, count);
        }
    });
}

/// Writes the folded stacks, one `stack count` line each, streaming: memory is the merged tree, whatever the size
/// of the output.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let tree = Tree::build(profile, options);
    let mut buf = String::with_capacity(1 << 16);
    let mut result = Ok(());
    each_line(&tree, |stack, count| {
        if result.is_err() {
            return;
        }
        buf.push_str(stack);
        let _ = writeln!(buf, " {count}");
        if buf.len() >= 1 << 16 {
            result = out.write_all(buf.as_bytes());
            buf.clear();
        }
    });
    result?;
    out.write_all(buf.as_bytes())?;
    out.flush()
}
