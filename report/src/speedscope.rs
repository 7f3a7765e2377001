//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): open the file at
//! <https://www.speedscope.app> or with the `speedscope` command.
//!
//! One "sampled" profile per thread, named `python3.11 [pid 123] thread 124 (comm)`, its samples in time order
//! with weights in nanoseconds: each sample weighs the time to that thread's next sample (the last one: the
//! sampling period), so speedscope's "Time Order" view is the real timeline of the thread. A thread that sleeps
//! between two samples (no sample while off the CPU) shows its last stack over the whole gap. Frames are shared
//! between profiles and carry name, file and line.
//!
//! The profile must have been loaded with [`crate::LoadOptions::timeline`].

use std::io::{self, Write};

use crate::hash::FxMap;
use crate::names;
use crate::profile::Profile;

/// The `$schema` of every file written: the speedscope file-format schema it follows.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Used when the event is not a clock (cycles) and a thread has a single sample.
const FALLBACK_LAST_WEIGHT_NS: u64 = 1_000_000;

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

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// Writes the speedscope JSON.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    if profile.timelines.len() != profile.threads.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the recording was loaded without per-thread timelines (LoadOptions::timeline)",
        ));
    }
    let tables = &profile.tables;

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
    let mut symbol_frames: Vec<Option<u32>> = vec![None; tables.symbols.len()];
    let mut ids = Vec::new();
    let stacks: Vec<String> = profile
        .timeline_stacks
        .iter()
        .map(|&(status, leaf)| {
            let mut list: Vec<u32> = Vec::new();
            if let Some(m) = names::marker(status, leaf != 0) {
                list.push(frame(m, None, 0, &mut frames));
            }
            tables.frames_root_first(leaf, &mut ids);
            for &sym in &ids {
                let id = match symbol_frames[sym as usize] {
                    Some(id) => id,
                    None => {
                        let s = tables.symbol(sym);
                        let line = if options.lines { s.line } else { 0 };
                        let id = frame(names::function_name(s), Some(names::file_name(s)), line, &mut frames);
                        symbol_frames[sym as usize] = Some(id);
                        id
                    }
                };
                list.push(id);
            }
            let text: Vec<String> = list.iter().map(|i| i.to_string()).collect();
            format!("[{}]", text.join(","))
        })
        .collect();

    let name = options.name.clone().unwrap_or_else(|| profile.recorded_command());
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

    let mut order: Vec<usize> =
        (0..profile.threads.len()).filter(|&t| !profile.timelines[t].times.is_empty()).collect();
    order.sort_by_key(|&t| (profile.threads[t].pid, profile.threads[t].tid));
    let period = profile.sampling_period_ns();
    for (n, &t) in order.iter().enumerate() {
        let thread = &profile.threads[t];
        let timeline = &profile.timelines[t];
        // Samples arrive in file order, which CPUs make slightly out of time order: sort (stably) by time.
        let mut idx: Vec<u32> = (0..timeline.times.len() as u32).collect();
        idx.sort_by_key(|&i| timeline.times[i as usize]);
        let times: Vec<u64> = idx.iter().map(|&i| timeline.times[i as usize]).collect();
        let last_weight = period.unwrap_or_else(|| match times.len() {
            0 | 1 => FALLBACK_LAST_WEIGHT_NS,
            k => times[k - 1] - times[k - 2],
        });
        let start = times[0];
        let end = times[times.len() - 1].saturating_add(last_weight);
        let label = format!("{} {}", profile.process_label(thread.pid), profile.thread_label(thread));
        writeln!(
            o,
            "{{\"type\":\"sampled\",\"name\":{},\"unit\":\"nanoseconds\",\"startValue\":{start},\"endValue\":{end},",
            json(&label)
        )?;
        writeln!(o, "\"samples\":[")?;
        for (k, &i) in idx.iter().enumerate() {
            let sep = if k + 1 < idx.len() { "," } else { "" };
            writeln!(o, "{}{sep}", stacks[timeline.stacks[i as usize] as usize])?;
        }
        writeln!(o, "],")?;
        write!(o, "\"weights\":[")?;
        for k in 0..times.len() {
            let w = if k + 1 < times.len() { times[k + 1] - times[k] } else { last_weight };
            let sep = if k + 1 < times.len() { "," } else { "" };
            let nl = if k % 16 == 15 && k + 1 < times.len() { "\n" } else { "" };
            write!(o, "{w}{sep}{nl}")?;
        }
        let sep = if n + 1 < order.len() { "," } else { "" };
        writeln!(o, "]}}{sep}")?;
    }
    writeln!(o, "]}}")?;
    o.flush()?;
    drop(o);
    out.flush()
}
