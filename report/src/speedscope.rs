//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): open the file at
//! <https://www.speedscope.app> or with the `speedscope` command.
//!
//! One "sampled" profile per thread, named `python3.11 [pid 123] thread 124 (comm)` (through
//! [`Profile::thread_label`]), the busiest thread (most samples; ties: lowest pid, then tid) first and opened
//! first (`activeProfileIndex`), the others by samples, descending. Frames are shared between profiles and carry
//! name, file and line: a native frame's file is its library (`/usr/lib/x86_64-linux-gnu/libz.so.1.3`), a kernel
//! frame's `[kernel.kallsyms]`; pyperf's pseudo-frames (`[idle]`, `[native: unmerged]`) have none.
//!
//! **What a weight means: CPU time.** A sample says the thread was on a CPU when it was taken; it stands for one
//! sampling period P of CPU time, so every sample weighs exactly P nanoseconds, whatever the time to the thread's
//! next sample. P is the recording's period when the event is a clock (`cpu-clock`, or any event recorded with
//! `-F HZ`: 1 s / HZ). For an event counted in units other than time (`cycles -c N`) one sample's time is not
//! known: P is estimated as the median gap between two consecutive samples of one thread, over all threads (most
//! gaps are those of threads running without pause, one period apart; a thread that sleeps adds one long gap per
//! sleep), or 1 ms when no thread has two samples at different times. Totals are then samples x P: speedscope's
//! Left Heavy and Sandwich views give the same shares as the text report.
//!
//! **Time between samples is not CPU time.** Where a thread has no sample for longer than P (it slept or waited,
//! or its samples there do not match the filters), the profile has an empty sample (no frames) weighing the gap:
//! speedscope's own notion of idle time (not the `[idle]` frame, which is a sample on a CPU outside Python code).
//! The Time Order view shows it blank, at its place in time; Left Heavy, Sandwich and the thread list leave it out
//! of their totals and percentages. Every thread's timeline starts at the recording's start (`startValue` 0) and
//! ends at the same time (the last sample's end over all threads, or the recording's duration when longer), so
//! the Time Order views of two threads line up. Two details keep the timeline readable: a sample that comes at
//! most P/8 after the previous one's period ended is drawn right after it (timer jitter, not a sleep: no sliver
//! of idle time); and consecutive samples of one stack drawn back to back are written as one sample weighing
//! their sum (speedscope merges them anyway). So a sample is drawn up to P/8 before its real time, or after it by
//! the overlap of samples that came less than P apart (two CPUs' timers seeing a migrating thread), until the
//! thread's next idle gap puts it back on time.
//!
//! **Off-CPU and wall-clock time** ([`Mode::OffCpu`], [`Mode::Wall`]). In wall mode a thread's profile is its
//! whole life in time order: its CPU samples, each weighing one period P (a clock event: wall mode refuses the
//! others), and its off-CPU intervals, each a sample at its start weighing the interval's weight, with the
//! interval's stack and its `[off-CPU: ...]` pseudo-frame as leaf; time in neither is idle time as above. So the
//! Time Order view is real time, and Left Heavy shows where the thread's wall-clock time went. In off-cpu mode the
//! profile has the intervals only (the time on CPU is idle time there), drawn at their real times (no jitter
//! allowance). An interval shorter than the recording's `--off-cpu-min` was sampled and weighs the minimum: it is
//! drawn that long, and what follows it is drawn late by the difference until the thread's next idle gap. The busiest
//! thread is the one with the most CPU samples in wall mode, the most off-CPU time in off-cpu mode, and the file's
//! name says the mode (`app.py (wall-clock time)`).
//!
//! "evented" profiles (open and close events at real times) would allow the same gaps natively, but each
//! sample of a thread that runs in short bursts costs two events of some 35 bytes per frame, against a few
//! bytes per frame here, and speedscope turns them into the same samples on import.
//!
//! Names: control characters and bidirectional-text controls (which could make a frame read as another) are
//! shown as visible escapes (`\n`, `\x01`, `\u202e`); see [`visible`].
//!
//! Memory: the frames, a frame number per symbol and a flag per stack-table node; the samples are read from the
//! tracks' temporary file ([`crate::tracks`]: the 256 busiest threads, the others merged into one "other threads"
//! profile, last) and the file is written as it is made, each sample's frames read from the stack table (time
//! linear in the input and the output, however deep the stacks). For an event that is not a clock, 4 bytes per
//! sample more while P is estimated.
//!
//! The profile must have been loaded with [`crate::LoadOptions::timeline`].

use std::borrow::Cow;
use std::io::{self, Write};

use pyperf_format::FrameKind;

use crate::hash::FxMap;
use crate::names;
use crate::profile::{Mode, Profile};
use crate::tracks::{Tracks, OTHER_THREADS};

/// The `$schema` of every file written: the speedscope file-format schema it follows.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// A sample's weight when the event is not a clock and no thread has two samples at different times.
const FALLBACK_PERIOD_NS: u64 = 1_000_000;

/// A sample that comes at most P / JITTER after the previous sample's period ended is drawn right after it.
const JITTER: u64 = 8;

/// What the speedscope file shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Frames per line (`f` at `a.py:12`); without, one frame per function.
    pub lines: bool,
    /// Name of the whole file; default: the recorded command.
    pub name: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options { lines: true, name: None }
    }
}

/// `name` as text a person sees as it is: control characters become `\n`, `\r`, `\t` or `\xNN`, bidirectional-text
/// controls and line / paragraph separators `\uNNNN` (Python's `repr` escapes). JSON escaping alone would keep
/// them: speedscope would show a newline, or text reordered by a U+202E (right-to-left override). Backslashes are
/// kept as they are, as in the text report.
pub fn visible(name: &str) -> Cow<'_, str> {
    use std::fmt::Write as _;
    if !name.chars().any(names::is_unsafe) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if names::is_unsafe(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `s` made [`visible`], as a JSON string.
fn json(s: &str) -> String {
    serde_json::to_string(&visible(s)).unwrap_or_else(|_| "\"\"".to_string())
}

/// One track's entries in time order ([`Tracks::entries`]): (time, index into [`Profile::timeline_stacks`],
/// weight).
fn ordered(tracks: &Tracks, k: usize, period: u64) -> impl Iterator<Item = (u64, u32, u64)> + '_ {
    tracks.entries(k).map(move |e| (e.time, e.stack, e.weight.unwrap_or(period)))
}

/// The weight of one sample, P (see the module documentation).
pub fn sample_weight_ns(profile: &Profile) -> u64 {
    match Tracks::new(profile, None) {
        Ok(tracks) => weight_of_samples(profile, &tracks),
        Err(_) => profile.sampling_period_ns().unwrap_or(FALLBACK_PERIOD_NS).max(1),
    }
}

/// [`sample_weight_ns`] over the threads of `tracks` (the merged ones' gaps, of several threads, left out when
/// any thread has its own track).
fn weight_of_samples(profile: &Profile, tracks: &Tracks) -> u64 {
    if let Some(period) = profile.sampling_period_ns() {
        return period.max(1);
    }
    // Gaps past u32 (4.3 s) are never the typical one: clamping them keeps 4 bytes per gap.
    let mut gaps: Vec<u32> = Vec::new();
    let own = if tracks.threads.is_empty() { tracks.len() } else { tracks.threads.len() };
    for k in 0..own {
        let mut last: Option<u64> = None;
        for (time, _, _) in ordered(tracks, k, 0) {
            if let Some(gap) = last.map(|l| time - l).filter(|&g| g > 0) {
                gaps.push(gap.min(u32::MAX as u64) as u32);
            }
            last = Some(time);
        }
    }
    if gaps.is_empty() {
        return FALLBACK_PERIOD_NS;
    }
    let mid = gaps.len() / 2;
    let (_, median, _) = gaps.select_nth_unstable(mid);
    (*median as u64).max(1)
}

/// What a thread's profile is made of, in order: (stack, weight), `None` for idle time (an empty sample).
struct Pieces<I: Iterator<Item = (u64, u32, u64)>> {
    samples: std::iter::Peekable<I>,
    /// Samples that come this late after the previous one's period still join it.
    jitter: u64,
    /// Where the profile ends: idle time fills up to it after the last sample.
    end: u64,
    /// How far the timeline is drawn.
    pos: u64,
}

impl<I: Iterator<Item = (u64, u32, u64)>> Pieces<I> {
    fn new(samples: I, jitter: u64, end: u64) -> Self {
        Pieces { samples: samples.peekable(), jitter, end, pos: 0 }
    }
}

impl<I: Iterator<Item = (u64, u32, u64)>> Iterator for Pieces<I> {
    type Item = (Option<u32>, u64);

    fn next(&mut self) -> Option<(Option<u32>, u64)> {
        if let Some(&(time, stack, _)) = self.samples.peek() {
            if time > self.pos.saturating_add(self.jitter) {
                let idle = time - self.pos;
                self.pos = time;
                return Some((None, idle));
            }
            // This sample and the next ones of the same stack that follow it without a gap.
            let mut weight = 0u64;
            while let Some((_, _, w)) = self.samples.next() {
                weight = weight.saturating_add(w);
                self.pos = self.pos.saturating_add(w);
                match self.samples.peek() {
                    Some(&(t, s, _)) if s == stack && t <= self.pos.saturating_add(self.jitter) => {}
                    _ => break,
                }
            }
            return Some((Some(stack), weight));
        }
        if self.pos < self.end {
            let idle = self.end - self.pos;
            self.pos = self.end;
            return Some((None, idle));
        }
        None
    }
}

/// Writes the speedscope JSON.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    let Some(timeline) = &profile.timeline else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the recording was loaded without per-thread timelines (LoadOptions::timeline)",
        ));
    };
    let tables = &profile.tables;
    let threads = profile.threads.len();

    // Shared frames: one per symbol (per function without lines), plus the pseudo-frames, numbered in the order
    // the stacks first use them.
    let mut frame_ids: FxMap<(String, String, u32), u32> = FxMap::default();
    let mut frames: Vec<String> = Vec::new();
    let mut frame = |name: String, file: Option<String>, line: u32, frames: &mut Vec<String>| -> u32 {
        let key = (name, file.clone().unwrap_or_default(), line);
        if let Some(&id) = frame_ids.get(&key) {
            return id;
        }
        let id = frames.len() as u32;
        let mut text = format!("{{\"name\":{}", json(&key.0));
        if let Some(f) = &file {
            text.push_str(&format!(",\"file\":{}", json(f)));
        }
        if line != 0 {
            text.push_str(&format!(",\"line\":{line}"));
        }
        text.push('}');
        frames.push(text);
        frame_ids.insert(key, id);
        id
    };
    // Frames are numbered as the stacks, in order and root first, first use them. A file node once numbered has
    // its whole path numbered: each stack numbers only its frames below its deepest numbered node, so this is
    // linear in the file, not in the sum of the stacks' depths.
    let mut symbol_frames: Vec<Option<u32>> = vec![None; tables.symbols.len()];
    let mut numbered = vec![false; tables.nodes.len() + 1];
    // Each stack's marker frame and off-CPU reason frame (u32::MAX: none); its frames are read from the file's
    // stack table when written.
    let mut markers: Vec<u32> = Vec::with_capacity(profile.timeline_stacks.len());
    let mut reason_frames: Vec<u32> = Vec::with_capacity(profile.timeline_stacks.len());
    let mut path: Vec<u32> = Vec::new();
    for (i, &(status, leaf)) in profile.timeline_stacks.iter().enumerate() {
        let reason = profile.timeline_reasons.get(i).copied().unwrap_or(0);
        markers.push(match names::stack_marker(status, leaf != 0, reason != 0) {
            Some(m) => frame(m, None, 0, &mut frames),
            None => u32::MAX,
        });
        path.clear();
        let mut node = leaf;
        while node != 0 && !numbered.get(node as usize).copied().unwrap_or(true) {
            let Some(&(parent, sym)) = tables.nodes.get(node as usize - 1) else { break };
            numbered[node as usize] = true;
            path.push(sym);
            node = parent;
        }
        for &sym in path.iter().rev() {
            if symbol_frames.get(sym as usize).copied().flatten().is_none() {
                let s = tables.symbol(sym);
                let line = if options.lines { s.line } else { 0 };
                let id = match s.kind() {
                    // A recorder's pseudo-frame (a native marker, an asyncio task), as pyperf's own: no file.
                    FrameKind::Marker | FrameKind::Task | FrameKind::Interpreter => {
                        frame(names::marker_name(s), None, 0, &mut frames)
                    }
                    // A native frame's file is its library, a kernel frame's `[kernel.kallsyms]`.
                    _ => frame(names::function_name(s), Some(names::file_name(s)), line, &mut frames),
                };
                if let Some(slot) = symbol_frames.get_mut(sym as usize) {
                    *slot = Some(id);
                }
            }
        }
        reason_frames.push(match profile.reasons.get(reason as usize).filter(|_| reason != 0) {
            Some(text) => frame(text.clone(), None, 0, &mut frames),
            None => u32::MAX,
        });
    }

    // Busiest thread first: speedscope opens the first profile (activeProfileIndex 0). Busiest: the most samples
    // (cpu), the most samples on CPU (wall: every thread's timeline spans its whole life), the most time off CPU
    // (off-cpu). Past [`MAX_TRACKS`] threads, the least busy share one profile, last.
    let busy: Vec<u64> = match profile.mode {
        Mode::Cpu => crate::tracks::entries_per_thread(profile)?,
        Mode::Wall => profile.threads.iter().map(|t| t.matched).collect(),
        Mode::OffCpu => {
            let mut total = vec![0u64; threads];
            timeline.for_each(|e| {
                if let Some(sum) = total.get_mut(e.thread as usize) {
                    *sum = sum.saturating_add(e.weight.unwrap_or(0));
                }
            })?;
            total
        }
    };
    let tracks = Tracks::new(profile, Some(&busy))?;

    // What a sample weighs in cpu mode (in the others each entry has its weight), and how late an entry may come
    // and still be drawn right after the one before.
    let (period, jitter) = match profile.mode {
        Mode::Cpu => {
            let period = weight_of_samples(profile, &tracks);
            (period, period / JITTER)
        }
        Mode::Wall => (0, profile.sampling_period_ns().unwrap_or(0) / JITTER),
        Mode::OffCpu => (0, 0),
    };

    // Every timeline ends where the last one does (or the recording, when longer): Time Order views line up.
    // Not the merged track's: its threads ran at the same time, so its pieces laid end to end (its time axis is
    // theirs one after another, not real time) would stretch every other timeline with idle time.
    let mut end = profile.tables.stats.as_ref().map(|s| s.duration_ns).unwrap_or(0);
    for k in 0..tracks.threads.len() {
        let mut pieces = Pieces::new(ordered(&tracks, k, period), jitter, 0);
        pieces.by_ref().for_each(drop);
        end = end.max(pieces.pos);
    }

    let name = match (&options.name, profile.mode) {
        (Some(name), _) => name.clone(),
        (None, Mode::Cpu) => profile.recorded_command(),
        (None, Mode::OffCpu) => format!("{} (off-CPU time)", profile.recorded_command()),
        (None, Mode::Wall) => format!("{} (wall-clock time)", profile.recorded_command()),
    };
    let mut ids: Vec<u32> = Vec::new();
    let mut o = io::BufWriter::with_capacity(1 << 16, &mut out);
    writeln!(o, "{{\"$schema\":{},", json(SCHEMA))?;
    writeln!(o, "\"name\":{},", json(&name))?;
    writeln!(o, "\"exporter\":\"pyperf report\",")?;
    writeln!(o, "\"activeProfileIndex\":0,")?;
    writeln!(o, "\"shared\":{{\"frames\":[")?;
    for (i, f) in frames.iter().enumerate() {
        let sep = if i + 1 < frames.len() { "," } else { "" };
        writeln!(o, "{f}{sep}")?;
    }
    writeln!(o, "]}},")?;
    writeln!(o, "\"profiles\":[")?;
    for n in 0..tracks.len() {
        let label = match tracks.thread(n).map(|t| &profile.threads[t]) {
            Some(thread) => format!("{} {}", profile.process_label_of(thread), profile.thread_label(thread)),
            None => format!("{OTHER_THREADS} ({} threads)", tracks.merged.len()),
        };
        writeln!(
            o,
            "{{\"type\":\"sampled\",\"name\":{},\"unit\":\"nanoseconds\",\"startValue\":0,\"endValue\":{end},",
            json(&label)
        )?;
        // Samples, then their weights: the pieces are made twice rather than kept.
        writeln!(o, "\"samples\":[")?;
        for (k, (stack, _)) in Pieces::new(ordered(&tracks, n, period), jitter, end).enumerate() {
            o.write_all(if k > 0 { b",\n[" } else { b"[" })?;
            if let Some(s) = stack {
                // The frames leaf first into one reused buffer, then written root first: time is the output's.
                ids.clear();
                if let Some(&r) = reason_frames.get(s as usize).filter(|&&r| r != u32::MAX) {
                    ids.push(r);
                }
                let mut node = profile.timeline_stacks.get(s as usize).map_or(0, |&(_, leaf)| leaf);
                while let Some(&(parent, sym)) = node.checked_sub(1).and_then(|i| tables.nodes.get(i as usize)) {
                    ids.push(symbol_frames.get(sym as usize).copied().flatten().unwrap_or(0));
                    node = parent;
                }
                if let Some(&m) = markers.get(s as usize).filter(|&&m| m != u32::MAX) {
                    ids.push(m);
                }
                for (i, id) in ids.iter().rev().enumerate() {
                    if i > 0 {
                        o.write_all(b",")?;
                    }
                    write!(o, "{id}")?;
                }
            }
            o.write_all(b"]")?;
        }
        writeln!(o, "\n],")?;
        write!(o, "\"weights\":[")?;
        for (k, (_, weight)) in Pieces::new(ordered(&tracks, n, period), jitter, end).enumerate() {
            let sep = match k {
                0 => "",
                k if k % 16 == 0 => ",\n",
                _ => ",",
            };
            write!(o, "{sep}{weight}")?;
        }
        let sep = if n + 1 < tracks.len() { "," } else { "" };
        writeln!(o, "]}}{sep}")?;
    }
    writeln!(o, "]}}")?;
    tracks.check()?;
    o.flush()?;
    drop(o);
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_escapes_controls_and_bidi() {
        assert_eq!(visible("plain größe 計算.py"), "plain größe 計算.py");
        assert!(matches!(visible("plain"), Cow::Borrowed(_)));
        assert_eq!(visible("a\nb\tc\rd\u{1}\u{7f}\u{85}"), r"a\nb\tc\rd\x01\x7f\x85");
        assert_eq!(visible("evil\u{202e}yp.txt"), r"evil\u202eyp.txt");
        let all = "\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{200e}\u{200f}\u{61c}";
        assert_eq!(
            visible(all),
            r"\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c",
            "every bidirectional control"
        );
        assert_eq!(visible("a\u{2028}b\u{2029}"), r"a\u2028b\u2029");
        // Backslashes as they are (as in the text report).
        assert_eq!(visible(r"C:\x"), r"C:\x");
        // JSON keeps the escapes as text: no raw control or bidi character once parsed.
        let parsed: String = serde_json::from_str(&json("x\u{202e}y\nz")).expect("json");
        assert_eq!(parsed, r"x\u202ey\nz");
    }
}
