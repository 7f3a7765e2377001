//! Folded stacks (Brendan Gregg's collapsed format), read by flamegraph.pl, inferno, speedscope and others.
//!
//! One line per unique stack, root first: `frame;frame;frame count`, the lines in byte order (as `LC_ALL=C sort`
//! orders them, and as inferno's `--no-sort` wants them), so the output is deterministic. The count is samples in
//! [`crate::Mode::Cpu`]; in [`crate::Mode::OffCpu`] and [`crate::Mode::Wall`] it is microseconds, each line's
//! nanoseconds summed then rounded ([`micros`]; a line under half a microsecond is left out), and an off-CPU
//! interval's stack ends with its `[off-CPU: ...]` pseudo-frame. Frames are named as in
//! [`crate::names`] (`function (file:line)`); samples with no Python frames are the single frame `[idle]`; a stack
//! cut at the recorder's depth limit starts with `[truncated]`, a failed walk with `[stack error]`. `;`, `\\`,
//! control characters and bidirectional-text controls inside names are escaped ([`names::escape_folded`]).
//!
//! The output is the sum of the stacks' depths, which a small crafted file can make huge (a chain 20,000 frames
//! deep sampled at every depth: 200 million frames); [`write`] streams it from the merged tree ([`Tree`]), one root
//! context (process / thread) at a time, in time linear in the output and memory bounded by one context's tree.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::io::{self, Write};

use crate::names;
use crate::profile::{Profile, StackCount};
use crate::tree::{self, Tree, ROOT};

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
    /// Put the interpreter (`[interpreter 1]`) as a root frame, below the process and thread (needs a profile loaded
    /// with [`crate::LoadOptions::interp_root`]: else every thread reads as interpreter 0).
    pub interp_root: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { lines: true, pid_root: false, tid_root: false, interp_root: false }
    }
}

/// Unique stacks as folded text (without the count) and their counts (samples, or µs), in [`write`]'s order. Holds
/// every line in memory (the sum of the stacks' depths): for large profiles prefer [`write`], which streams.
pub fn stacks(profile: &Profile, options: &Options) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    each_line(profile, options, |joined, rest, count| {
        let mut line = joined.to_string();
        for frame in rest {
            // Every frame text is non-empty: an empty `joined` holds no frame.
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(frame);
        }
        out.push((line, count))
    });
    out
}

/// Writes the folded stacks, one `stack count` line each, streaming: memory is one root context's merged tree,
/// whatever the size of the output.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut result = Ok(());
    // Hands a full buffer to `out`; after an error nothing more is written.
    let mut spill = |buf: &mut Vec<u8>, result: &mut io::Result<()>| {
        if buf.len() >= 1 << 16 {
            if result.is_ok() {
                *result = out.write_all(buf);
            }
            buf.clear();
        }
    };
    each_line(profile, options, |joined, rest, count| {
        if result.is_err() {
            return;
        }
        buf.extend_from_slice(joined.as_bytes());
        spill(&mut buf, &mut result);
        // The frames of a very long line one by one: a line can be far larger than the tree it comes from.
        for (i, frame) in rest.iter().enumerate() {
            // Every frame text is non-empty: an empty `joined` holds no frame.
            if i > 0 || !joined.is_empty() {
                buf.push(b';');
            }
            buf.extend_from_slice(frame.as_bytes());
            spill(&mut buf, &mut result);
        }
        let _ = writeln!(buf, " {count}");
        spill(&mut buf, &mut result);
    });
    result?;
    out.write_all(&buf)?;
    out.flush()
}

/// Longest line prefix kept joined: lines are written from it in one piece, and frame by frame beyond it.
const JOINED_MAX: usize = 1 << 20;

/// Calls `line(joined, rest, count)` for every line in output order (byte order of the lines): the escaped frames,
/// root first, are `joined` (joined with `;`, at most [`JOINED_MAX`] bytes) then each of `rest` after a `;`. One
/// root context (the process and thread frames, when asked for) is merged at a time.
fn each_line(profile: &Profile, options: &Options, mut line: impl FnMut(&str, &[&str], u64)) {
    let time = profile.mode.is_time();
    if !options.pid_root && !options.tid_root && !options.interp_root {
        emit(&Tree::build_stacks(profile, options.lines, &profile.stacks), &[], time, &mut line);
        return;
    }
    // The stacks are sorted by thread: one run per thread, and the escaped root frames of each (deduplicated: many
    // threads share a process frame).
    let mut texts: Vec<String> = Vec::new();
    let mut text_ids: HashMap<String, u32> = HashMap::new();
    let mut runs: Vec<(Vec<u32>, usize, usize)> = Vec::new();
    let mut start = 0;
    while start < profile.stacks.len() {
        let thread = profile.stacks[start].thread;
        let end = start + profile.stacks[start..].iter().take_while(|s| s.thread == thread).count();
        let roots = tree::root_frames(profile, options, thread)
            .iter()
            .map(|text| {
                let mut escaped = String::new();
                names::escape_folded(text, &mut escaped);
                let next = texts.len() as u32;
                *text_ids.entry(escaped).or_insert_with_key(|k| {
                    texts.push(k.clone());
                    next
                })
            })
            .collect();
        runs.push((roots, start, end));
        start = end;
    }
    // Contexts in the order of their lines: every line of a context starts with `root;root;`, and a root frame
    // holds no `;`, so comparing `root;` frame by frame orders them.
    runs.sort_by(|a, b| {
        let text = |t: &u32| texts[*t as usize].as_str();
        // Equal roots keep the threads' order (a stable sort): deterministic.
        a.0.iter()
            .zip(&b.0)
            .map(|(x, y)| key_cmp(text(x), b";", text(y), b";"))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    let mut i = 0;
    while i < runs.len() {
        // Threads with the same root frames (the same tid in two processes, without process roots) merge.
        let j = i + runs[i..].iter().take_while(|r| r.0 == runs[i].0).count();
        let stacks: Vec<&StackCount> = runs[i..j].iter().flat_map(|&(_, a, b)| &profile.stacks[a..b]).collect();
        let roots: Vec<&str> = runs[i].0.iter().map(|&t| texts[t as usize].as_str()).collect();
        emit(&Tree::build_stacks(profile, options.lines, stacks), &roots, time, &mut line);
        i = j;
    }
}

/// Compares `a + a_suffix` with `b + b_suffix`, byte by byte.
fn key_cmp(a: &str, a_suffix: &[u8], b: &str, b_suffix: &[u8]) -> Ordering {
    a.bytes().chain(a_suffix.iter().copied()).cmp(b.bytes().chain(b_suffix.iter().copied()))
}

/// Nanoseconds as the folded count of [`crate::Mode::OffCpu`] and [`crate::Mode::Wall`]: microseconds, rounded
/// to the nearest (half up).
pub fn micros(ns: u64) -> u64 {
    ns / 1000 + u64::from(ns % 1000 >= 500)
}

/// Calls `line` for every stack of `tree` below the root frames `roots`, in byte order of the lines; the counts are
/// the tree's, or (`time`) its nanoseconds in [`micros`].
///
/// The lines below a node come in two kinds per child: the child's own line (`child count`, when samples end there)
/// and the lines of its callees (all starting `child;`). Both are ordered among their siblings' by that key, which
/// is the byte order of the lines: a frame holds no `;`, so a `child;` key is no prefix of another key. Plain
/// depth-first order would differ where a frame's name is a prefix of a sibling's (`f (a.py:1)` and
/// `f (a.py:1)x`).
pub(crate) fn emit(tree: &Tree, roots: &[&str], time: bool, line: &mut impl FnMut(&str, &[&str], u64)) {
    let escaped: Vec<String> = tree
        .labels
        .iter()
        .map(|l| {
            let mut s = String::new();
            names::escape_folded(&l.text, &mut s);
            s
        })
        .collect();
    let text = |node: u32| escaped[tree.nodes[node as usize].label as usize].as_str();
    let count = |node: u32| {
        let n = tree.nodes[node as usize].self_count;
        if time {
            micros(n)
        } else {
            n
        }
    };
    // Items waiting, per open level: (node, own line or callees). Levels are contiguous in `items`.
    let mut items: Vec<(u32, bool)> = Vec::new();
    // Per open level: (first item, next item); the root level is the first.
    let mut levels: Vec<(usize, usize)> = Vec::new();
    let mut path = Path { frames: Vec::new(), joined: String::new(), ends: Vec::new() };
    for root in roots {
        path.enter(root);
    }
    let push_level = |node: u32, items: &mut Vec<(u32, bool)>, levels: &mut Vec<(usize, usize)>| {
        let first = items.len();
        for &c in tree.children(node) {
            if count(c) > 0 {
                items.push((c, true));
            }
            if !tree.children(c).is_empty() {
                items.push((c, false));
            }
        }
        let (mut da, mut db) = ([0u8; 24], [0u8; 24]);
        items[first..].sort_by(|&(a, own_a), &(b, own_b)| {
            key_cmp(
                text(a),
                suffix(own_a.then(|| count(a)), &mut da),
                text(b),
                suffix(own_b.then(|| count(b)), &mut db),
            )
        });
        levels.push((first, first));
    };
    push_level(ROOT, &mut items, &mut levels);
    while let Some(level) = levels.last_mut() {
        if level.1 == items.len() {
            // Level done: back to the caller's.
            items.truncate(level.0);
            levels.pop();
            if !levels.is_empty() {
                path.leave();
            }
            continue;
        }
        let (node, own) = items[level.1];
        level.1 += 1;
        path.enter(text(node));
        if own {
            line(&path.joined, &path.frames[path.ends.len()..], count(node));
            path.leave();
        } else {
            push_level(node, &mut items, &mut levels);
        }
    }
}

/// The frames of the current path, and as many of the first of them as fit in [`JOINED_MAX`] joined with `;` (most
/// lines are written in one piece from it).
struct Path<'a> {
    frames: Vec<&'a str>,
    joined: String,
    /// Where each joined frame ends in `joined`.
    ends: Vec<usize>,
}

impl<'a> Path<'a> {
    fn enter(&mut self, frame: &'a str) {
        // Joined while every frame before it is and the prefix stays short.
        if self.ends.len() == self.frames.len() && self.joined.len() + 1 + frame.len() <= JOINED_MAX {
            if !self.joined.is_empty() {
                self.joined.push(';');
            }
            self.joined.push_str(frame);
            self.ends.push(self.joined.len());
        }
        self.frames.push(frame);
    }

    fn leave(&mut self) {
        if self.ends.len() == self.frames.len() {
            self.ends.pop();
            self.joined.truncate(self.ends.last().copied().unwrap_or(0));
        }
        self.frames.pop();
    }
}

/// The bytes after a frame in its sort key: ` count` for its own line, `;` for its callees' lines.
fn suffix(own: Option<u64>, digits: &mut [u8; 24]) -> &[u8] {
    let Some(mut n) = own else { return b";" };
    // u64::MAX has 20 digits: they fit after the space.
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= 1;
    digits[at] = b' ';
    &digits[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_round_to_nearest() {
        assert_eq!(micros(0), 0);
        assert_eq!(micros(499), 0);
        assert_eq!(micros(500), 1);
        assert_eq!(micros(1_499), 1);
        assert_eq!(micros(1_500), 2);
        assert_eq!(micros(10_000_000), 10_000);
        assert_eq!(micros(640_000_800), 640_001);
        assert_eq!(micros(u64::MAX), u64::MAX / 1000 + 1);
    }
}
