//! Differential profiles (`pyperf report --diff BASE.pyp NEW.pyp`): how NEW differs from BASE, for folded stacks
//! and flame graphs, as flamegraph.pl's difffolded.pl and inferno-diff-folded make them.
//!
//! - **Normalised by the totals.** BASE's counts are scaled to NEW's total (`round(base x new_total /
//!   base_total)`, half up), as `inferno-diff-folded --normalize` and `difffolded.pl -n` do: a BASE recording
//!   twice as long does not read as everything having shrunk.
//! - **Folded** (`--folded --diff BASE`): `stack BASE_COUNT NEW_COUNT` per line, over the union of both
//!   recordings' stacks (a stack only one of them has counts 0 in the other), in byte order. That is the input
//!   `flamegraph.pl` and `inferno-flamegraph` draw as a differential flame graph. In `--mode off-cpu` and `wall`
//!   the counts are microseconds, as in plain folded output.
//! - **Flame graph** (`--flamegraph --diff BASE`): widths are NEW's (a stack only BASE has has no width, as in
//!   flamegraph.pl's differential graphs: look at `--diff NEW` with BASE as input to see what disappeared), and
//!   each frame is coloured by how its share of the total changed: red grew, blue shrank, the deeper the more
//!   (the largest change drawn is the deepest colour), white unchanged. Tooltips give both shares and the change
//!   in percentage points.
//!
//! BASE is read with the same filters and mode as NEW. Process and thread root frames are not offered with
//! `--diff` (a pid of one recording means nothing in the other).

use std::io::{self, Write};

use pyperf_format::{Merger, Tables};

use crate::folded;
use crate::hash::FxMap;
use crate::profile::{Profile, StackCount, ALL_THREADS};
use crate::tree::{Tree, ROOT};

/// Makes `new` a differential profile against `base` (loaded with the same options): both recordings' stacks in
/// one stack table, `base`'s stacks (over all threads) in [`Profile::diff_base`].
pub fn attach_base(new: &mut Profile, base: Profile) {
    let mut tables = Tables::default();
    let mut merger = Merger::default();
    let rn = tables.append(&mut merger, &new.tables, 0);
    let rb = tables.append(&mut merger, &base.tables, 0);
    let node = |r: &pyperf_format::Remap, leaf: u32| r.nodes.get(leaf as usize).copied().unwrap_or(0);
    for s in &mut new.stacks {
        s.leaf = node(&rn, s.leaf);
    }
    for (s, _, _) in &mut new.gil_stacks {
        s.leaf = node(&rn, s.leaf);
    }
    for (_, leaf) in &mut new.timeline_stacks {
        *leaf = node(&rn, *leaf);
    }
    // BASE's off-CPU reasons in NEW's list.
    let mut reasons: FxMap<String, u32> = new.reasons.iter().enumerate().map(|(i, r)| (r.clone(), i as u32)).collect();
    let reason_map: Vec<u32> = base
        .reasons
        .iter()
        .map(|r| {
            let next = new.reasons.len() as u32;
            *reasons.entry(r.clone()).or_insert_with(|| {
                new.reasons.push(r.clone());
                next
            })
        })
        .collect();
    let mut stacks: Vec<StackCount> = base
        .stacks
        .iter()
        .map(|s| StackCount {
            thread: ALL_THREADS,
            leaf: node(&rb, s.leaf),
            reason: reason_map.get(s.reason as usize).copied().unwrap_or(0),
            ..*s
        })
        .collect();
    let key = |s: &StackCount| (s.status.as_u8(), s.leaf, s.reason);
    stacks.sort_unstable_by_key(key);
    stacks.dedup_by(|s, kept| {
        let same = key(s) == key(kept);
        if same {
            kept.count = kept.count.saturating_add(s.count);
        }
        same
    });
    // The base's processes are not NEW's: only its symbols and stacks are kept.
    tables.processes.truncate(rb.first_process as usize);
    tables.stats = new.tables.stats.take();
    new.tables = tables;
    new.diff_base = Some(stacks);
    new.recorded_frames.add(base.recorded_frames);
}

/// `base` scaled to `new_total / base_total`, rounded half up.
pub fn scale(base: u64, base_total: u64, new_total: u64) -> u64 {
    if base_total == 0 {
        return base;
    }
    ((base as u128 * new_total as u128 * 2 + base_total as u128) / (base_total as u128 * 2)).min(u64::MAX as u128)
        as u64
}

/// The lines of `tree` (escaped, in byte order) with their counts.
fn lines(tree: &Tree, time: bool) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    folded::emit(tree, &[], time, &mut |joined: &str, rest: &[&str], count: u64| {
        let mut line = joined.to_string();
        for frame in rest {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(frame);
        }
        out.push((line, count));
    });
    out
}

/// Writes `stack BASE NEW` lines (see the module docs). `profile` must have [`Profile::diff_base`].
pub fn write_folded<W: Write>(profile: &Profile, options: &folded::Options, mut out: W) -> io::Result<()> {
    let base = profile.diff_base.as_deref().unwrap_or(&[]);
    let time = profile.mode.is_time();
    let new_lines = lines(&Tree::build_stacks(profile, options.lines, &profile.stacks), time);
    let base_lines = lines(&Tree::build_stacks(profile, options.lines, base), time);
    let total = |v: &[(String, u64)]| v.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
    let (new_total, base_total) = (total(&new_lines), total(&base_lines));
    let mut w = io::BufWriter::with_capacity(1 << 16, &mut out);
    let (mut i, mut j) = (0, 0);
    // Both lists are in byte order: one merge pass.
    while i < new_lines.len() || j < base_lines.len() {
        let order = match (new_lines.get(i), base_lines.get(j)) {
            (Some(a), Some(b)) => a.0.as_bytes().cmp(b.0.as_bytes()),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        let (line, b, n) = match order {
            std::cmp::Ordering::Less => {
                i += 1;
                (&new_lines[i - 1].0, 0, new_lines[i - 1].1)
            }
            std::cmp::Ordering::Greater => {
                j += 1;
                (&base_lines[j - 1].0, base_lines[j - 1].1, 0)
            }
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
                (&new_lines[i - 1].0, base_lines[j - 1].1, new_lines[i - 1].1)
            }
        };
        writeln!(w, "{line} {} {n}", scale(b, base_total, new_total))?;
    }
    w.flush()?;
    drop(w);
    out.flush()
}

/// For each node of `new`, the total of the node at the same path (same frame texts from the root) in `base`, 0
/// where `base` has none.
pub fn base_totals(new: &Tree, base: &Tree) -> Vec<u64> {
    let mut out = vec![0u64; new.nodes.len()];
    if let (Some(n), Some(b)) = (out.get_mut(ROOT as usize), base.nodes.get(ROOT as usize)) {
        *n = b.total;
    }
    fn text(t: &Tree, node: u32) -> &str {
        t.labels[t.nodes[node as usize].label as usize].text.as_str()
    }
    let mut work = vec![(ROOT, ROOT)];
    while let Some((a, b)) = work.pop() {
        // Children are in label-text order in both trees: merge-join them.
        let (ka, kb) = (new.children(a), base.children(b));
        let (mut i, mut j) = (0, 0);
        while i < ka.len() && j < kb.len() {
            match text(new, ka[i]).as_bytes().cmp(text(base, kb[j]).as_bytes()) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    out[ka[i] as usize] = base.nodes[kb[j] as usize].total;
                    work.push((ka[i], kb[j]));
                    i += 1;
                    j += 1;
                }
            }
        }
    }
    out
}

/// The fill colour of a frame whose share went from `base_share` to `new_share` (fractions), `max` the largest
/// change drawn: red grew, blue shrank, white unchanged.
pub fn color(new_share: f64, base_share: f64, max: f64) -> (u8, u8, u8) {
    let d = new_share - base_share;
    let t = if max > 0.0 { (d.abs() / max).clamp(0.0, 1.0) } else { 0.0 };
    let fade = (255.0 - 200.0 * t).round() as u8;
    if d > 0.0 {
        (255, fade, fade)
    } else if d < 0.0 {
        (fade, fade, 255)
    } else {
        (255, 255, 255)
    }
}
