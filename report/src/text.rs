//! The text report: what was recorded, where the time went (functions by self and total share, top stacks) and
//! the GIL / thread-state / pthread-id / stack-status breakdown.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};

use pyperf_format::{Rate, StackStatus};

use crate::hash::FxMap;
use crate::names;
use crate::profile::Profile;

/// What the text report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Rows in the function tables, the top-stacks list and the thread table.
    pub top: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { top: 20 }
    }
}

/// One function (all lines of it) and its sample counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionShare {
    /// `Class.method`, or a pseudo-frame such as `[idle]`.
    pub function: String,
    /// Empty for pseudo-frames.
    pub file: String,
    /// Samples where it was the leaf (running).
    pub self_samples: u64,
    /// Samples where it was on the stack, counted once per sample even when it recurses.
    pub total_samples: u64,
}

/// Self and total counts per function over the matching samples, sorted by self count (then total, name).
/// Samples without Python frames count as self time of their pseudo-frame (`[idle]`, ...).
///
/// Linear in the recording's stack table, whatever the stacks' depths: totals come from one walk of the file's
/// tree of stack nodes, where a node adds the samples below it to its function's total only at the function's
/// outermost occurrence on the path (so a recursive function counts once per sample), never from each stack
/// walked from its leaf (a chain 20,000 frames deep sampled at every depth would be 200 million steps).
pub fn function_shares(profile: &Profile) -> Vec<FunctionShare> {
    let tables = &profile.tables;
    let nodes = tables.nodes.len();
    // Symbols of one function at different lines are one function. Names come from the file: SipHash.
    let mut function_ids: HashMap<(String, String), u32> = HashMap::new();
    let mut functions: Vec<FunctionShare> = Vec::new();
    let mut function_id = |name: String, file: String, functions: &mut Vec<FunctionShare>| -> u32 {
        let next = functions.len() as u32;
        *function_ids.entry((name, file)).or_insert_with_key(|(name, file)| {
            functions.push(FunctionShare {
                function: name.clone(),
                file: file.clone(),
                self_samples: 0,
                total_samples: 0,
            });
            next
        })
    };
    // Matching samples per leaf node (all threads and statuses); those without frames go to their pseudo-frame.
    let mut below: Vec<u64> = vec![0; nodes + 1];
    for s in &profile.stacks {
        if s.leaf == 0 {
            let marker = names::marker(s.status, false).unwrap_or_default();
            let id = function_id(marker, String::new(), &mut functions) as usize;
            functions[id].self_samples += s.count;
            functions[id].total_samples += s.count;
        } else {
            // Tables::apply checked every sample's leaf against the node table.
            below[s.leaf as usize] += s.count;
        }
    }
    let at_node = below.clone();
    // Samples at or below each node: a node's parent has a smaller id, so one backward pass adds subtrees up.
    for id in (1..=nodes).rev() {
        let parent = tables.nodes[id - 1].0 as usize;
        below[parent] += below[id];
    }
    // Children of each node with samples below it (counting sort by parent).
    let mut child_start = vec![0u32; nodes + 2];
    for id in 1..=nodes {
        if below[id] > 0 {
            child_start[tables.nodes[id - 1].0 as usize + 1] += 1;
        }
    }
    for i in 1..child_start.len() {
        child_start[i] += child_start[i - 1];
    }
    let mut fill = child_start.clone();
    let mut children = vec![0u32; child_start[nodes + 1] as usize];
    for id in 1..=nodes {
        if below[id] > 0 {
            let slot = &mut fill[tables.nodes[id - 1].0 as usize];
            children[*slot as usize] = id as u32;
            *slot += 1;
        }
    }
    // Depth first from the empty stack, counting per function its occurrences on the current path.
    let mut function_of_symbol: FxMap<u32, u32> = FxMap::default();
    let mut on_path: Vec<u32> = Vec::new();
    // (node, its function, next child index)
    let mut stack: Vec<(u32, u32, u32)> = vec![(0, u32::MAX, child_start[0])];
    while let Some(top) = stack.last_mut() {
        let (node, function, next) = *top;
        if next < child_start[node as usize + 1] {
            top.2 += 1;
            let child = children[next as usize];
            let sym = tables.nodes[child as usize - 1].1;
            let f = match function_of_symbol.get(&sym) {
                Some(&f) => f,
                None => {
                    let symbol = tables.symbol(sym);
                    let f = function_id(names::function_name(symbol), names::file_name(symbol), &mut functions);
                    function_of_symbol.insert(sym, f);
                    f
                }
            };
            if on_path.len() < functions.len() {
                on_path.resize(functions.len(), 0);
            }
            let share = &mut functions[f as usize];
            share.self_samples += at_node[child as usize];
            if on_path[f as usize] == 0 {
                share.total_samples += below[child as usize];
            }
            on_path[f as usize] += 1;
            stack.push((child, f, child_start[child as usize]));
        } else {
            stack.pop();
            if function != u32::MAX {
                on_path[function as usize] -= 1;
            }
        }
    }
    functions.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
    });
    functions
}

/// Matching samples per unique stack (merged over threads): (status, leaf, count), most frequent first.
pub fn top_stacks(profile: &Profile) -> Vec<(StackStatus, u32, u64)> {
    let mut by_stack: FxMap<(u8, u32), u64> = FxMap::default();
    for s in &profile.stacks {
        *by_stack.entry((s.status.as_u8(), s.leaf)).or_insert(0) += s.count;
    }
    let mut out: Vec<_> = by_stack.into_iter().map(|((st, leaf), n)| (StackStatus::from_u8(st), leaf, n)).collect();
    out.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.as_u8().cmp(&b.0.as_u8())).then(a.1.cmp(&b.1)));
    out
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "    -".to_string()
    } else {
        format!("{:5.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// `2024-05-01 12:00:00.000 UTC`.
pub fn format_time(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let millis = (unix_ns % 1_000_000_000) / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{millis:03} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `2.500 s`.
pub fn format_duration(ns: u64) -> String {
    format!("{}.{:03} s", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000_000)
}

fn format_rate(event: &str, rate: Rate) -> String {
    match rate {
        Rate::Frequency(hz) => format!("{event} at {hz} Hz per CPU"),
        Rate::Period(n) if event == "cpu-clock" => format!("{event}, one sample every {n} ns"),
        Rate::Period(n) => format!("{event}, one sample every {n} events"),
    }
}

/// Renders the whole report. Every text that comes from the recording (names, files, commands, thread names,
/// warnings) is escaped ([`names::escape_text`]): it cannot drive the terminal or reorder what is shown.
pub fn render(profile: &Profile, options: &Options) -> String {
    let mut o = String::new();
    render_into(profile, options, &mut o);
    o
}

/// [`render`] into any text sink; errors of the sink end nothing early (the caller keeps them).
fn render_into<O: fmt::Write>(profile: &Profile, options: &Options, o: &mut O) {
    let h = &profile.header;
    let e = names::escape_text;
    let top = options.top;

    // --- What was recorded.
    let _ = writeln!(o, "Recording");
    let mut field = |name: &str, value: String| {
        let _ = writeln!(o, "  {name:<13} {value}");
    };
    field("command", e(&profile.recorded_command()));
    field(
        "recorded by",
        format!("pyperf {} (file format {}.{})", e(&h.pyperf_version), profile.version.0, profile.version.1),
    );
    field("host", format!("{} (kernel {}, {})", e(&h.hostname), e(&h.kernel_release), e(&h.arch)));
    field("started", format_time(h.start_time_unix_ns));
    field("event", format_rate(&e(&h.event), h.rate));
    let stats = profile.tables.stats.as_ref();
    field(
        "duration",
        match stats {
            Some(_) => format_duration(profile.duration_ns()),
            None => format!("{} (span of the samples; no trailer)", format_duration(profile.duration_ns())),
        },
    );
    let read = profile.all.samples;
    match stats {
        Some(s) if s.samples != read => {
            field("samples", format!("{read} read ({} written according to the trailer)", s.samples))
        }
        _ => field("samples", read.to_string()),
    }
    match stats {
        Some(s) => {
            let taken = s.samples.saturating_add(s.lost_samples);
            field(
                "lost",
                format!("{} samples ({} of {taken} taken)", s.lost_samples, pct(s.lost_samples, taken).trim()),
            )
        }
        None => field("lost", "unknown (no trailer)".into()),
    }
    let truncated = profile.all.count(StackStatus::Truncated);
    field("truncated", format!("{truncated} stacks ({} of samples)", pct(truncated, read).trim()));
    match stats {
        Some(s) => {
            field("lost symbols", s.lost_symbols.to_string());
            field("errors", s.errors.to_string());
            if !s.counters.is_empty() {
                let list: Vec<String> = s.counters.iter().map(|(k, v)| format!("{} {v}", e(k))).collect();
                field("counters", list.join(", "));
            }
        }
        None => {
            field("lost symbols", "unknown (no trailer)".into());
            field("errors", "unknown (no trailer)".into());
        }
    }

    // --- Processes: a pid that exec'd or was reused is listed once per process record (instance).
    let _ = writeln!(o, "\nProcesses");
    if profile.processes.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for instance in &profile.processes {
        let _ = writeln!(
            o,
            "  {}: {}, {}",
            e(&instance.label),
            plural(instance.samples, "sample"),
            plural(instance.threads as u64, "thread")
        );
        match instance.record.and_then(|r| profile.tables.processes.get(r as usize)) {
            Some(p) => {
                let command = crate::profile::join_command(&p.command);
                let command = if command.is_empty() { "(not read)".to_string() } else { e(&command) };
                let _ = writeln!(o, "    command      {command}");
                let _ = writeln!(o, "    python       {}", e(&p.python_version));
                let build =
                    if p.build_id.is_empty() { String::new() } else { format!(" (build id {})", e(&p.build_id)) };
                let _ = writeln!(o, "    interpreter  {}{build}", e(&p.interpreter_path));
                let _ = writeln!(o, "    first seen   {} after the start", format_duration(p.first_seen_ns));
                if p.ns_pid != 0 && p.ns_pid != p.pid {
                    let _ = writeln!(o, "    namespace    pid {} in its own PID namespace (a container)", p.ns_pid);
                }
                if !p.cgroup.is_empty() {
                    let _ = writeln!(o, "    cgroup       {}", e(&p.cgroup));
                }
            }
            None => {
                let _ = writeln!(o, "    (the recording does not describe this process)");
            }
        }
    }

    // --- Warnings.
    if !profile.warnings.is_empty() {
        let _ = writeln!(o, "\nWarnings");
        for w in &profile.warnings {
            let _ = writeln!(o, "  {}", e(w));
        }
    }

    // --- Filter.
    let matched = profile.matched.samples;
    let filter = profile.filter.describe();
    if !filter.is_empty() {
        let _ = writeln!(o, "\nFilter");
        let _ = writeln!(o, "  {}: {matched} of {read} samples ({})", filter.join(", "), pct(matched, read).trim());
    }

    // --- Functions.
    let functions = function_shares(profile);
    let row = |o: &mut O, f: &FunctionShare| {
        let location = if f.file.is_empty() { String::new() } else { format!("  ({})", e(&f.file)) };
        let _ = writeln!(
            o,
            "  {:>9} {}  {:>9} {}  {}{location}",
            f.self_samples,
            pct(f.self_samples, matched),
            f.total_samples,
            pct(f.total_samples, matched),
            e(&f.function)
        );
    };
    let header = "       SELF      %      TOTAL      %  FUNCTION  (FILE)";
    let _ = writeln!(o, "\nFunctions by self samples (top {} of {})", top.min(functions.len()), functions.len());
    let _ = writeln!(o, "{header}");
    for f in functions.iter().take(top) {
        row(o, f);
    }
    let mut by_total = functions.clone();
    by_total.sort_by(|a, b| {
        b.total_samples
            .cmp(&a.total_samples)
            .then(b.self_samples.cmp(&a.self_samples))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
    });
    let _ = writeln!(o, "\nFunctions by total samples (top {} of {})", top.min(by_total.len()), by_total.len());
    let _ = writeln!(o, "{header}");
    for f in by_total.iter().take(top) {
        row(o, f);
    }

    // --- Top stacks.
    let stacks = top_stacks(profile);
    let _ = writeln!(o, "\nTop stacks, root first (top {} of {} unique)", top.min(stacks.len()), stacks.len());
    // Frame texts, escaped once per symbol (and deduplicated, so that equal texts compare as equal ids): a deep
    // recursion shown once costs its depth in steps, not its depth times its name.
    let mut frame_texts: Vec<String> = Vec::new();
    let mut text_ids: HashMap<String, u32> = HashMap::new();
    let mut symbol_texts: FxMap<u32, u32> = FxMap::default();
    let mut intern = |text: String, texts: &mut Vec<String>| -> u32 {
        let next = texts.len() as u32;
        *text_ids.entry(text).or_insert_with_key(|t| {
            texts.push(e(t));
            next
        })
    };
    let mut ids: Vec<u32> = Vec::new();
    let mut shown: Vec<u32> = Vec::new();
    for (i, &(status, leaf, count)) in stacks.iter().take(top).enumerate() {
        let _ = writeln!(o, "  #{:<3} {} ({})", i + 1, plural(count, "sample"), pct(count, matched).trim());
        shown.clear();
        if let Some(m) = names::marker(status, leaf != 0) {
            shown.push(intern(m, &mut frame_texts));
        }
        profile.tables.frames_root_first(leaf, &mut ids);
        for &sym in &ids {
            let id = match symbol_texts.get(&sym) {
                Some(&id) => id,
                None => {
                    let id = intern(names::frame_name(profile.tables.symbol(sym), true), &mut frame_texts);
                    symbol_texts.insert(sym, id);
                    id
                }
            };
            shown.push(id);
        }
        // A frame repeated in a row (deep recursion) is shown once with its count.
        let mut k = 0;
        while k < shown.len() {
            let run = shown[k..].iter().take_while(|&&f| f == shown[k]).count();
            let text = &frame_texts[shown[k] as usize];
            if run > 1 {
                let _ = writeln!(o, "        {text}  (x{run})");
            } else {
                let _ = writeln!(o, "        {text}");
            }
            k += run;
        }
    }

    // --- States.
    let breakdown = |o: &mut O, title: &str, rows: Vec<(String, String, u64)>| {
        let _ = writeln!(o, "\n{title}");
        if rows.is_empty() {
            let _ = writeln!(o, "  no samples");
        }
        for (key, words, n) in rows {
            let _ = writeln!(o, "  {n:>9} {}  {key:<16} {words}", pct(n, matched));
        }
    };
    let m = &profile.matched;
    breakdown(o, "GIL state", m.gil_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());
    breakdown(
        o,
        "Thread state: is the sampled thread the interpreter's current thread?",
        m.thread_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(
        o,
        "pthread id: does the thread state belong to the sampled OS thread?",
        m.pthread_ids().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(o, "Stack status", m.statuses().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());

    // --- Threads.
    let mut threads: Vec<_> = profile.threads.iter().filter(|t| t.matched > 0).collect();
    threads.sort_by(|a, b| b.matched.cmp(&a.matched).then(a.pid.cmp(&b.pid)).then(a.tid.cmp(&b.tid)));
    let _ = writeln!(o, "\nThreads (top {} of {})", top.min(threads.len()), threads.len());
    for t in threads.iter().take(top) {
        let _ = writeln!(
            o,
            "  {:>9} {}  {}  {}",
            t.matched,
            pct(t.matched, matched),
            e(&profile.process_label_of(t)),
            e(&profile.thread_label(t))
        );
    }
}

/// Writes the report, streaming: it can be large (the top stacks of a deep recording), and is never held whole.
pub fn write<W: Write>(profile: &Profile, options: &Options, out: W) -> io::Result<()> {
    let mut sink = Sink { out, buf: String::with_capacity(1 << 16), err: None };
    render_into(profile, options, &mut sink);
    if let Some(err) = sink.err {
        return Err(err);
    }
    sink.out.write_all(sink.buf.as_bytes())?;
    sink.out.flush()
}

/// Text to an `io::Write`, in 64 KiB pieces; the first error is kept and ends the writing.
struct Sink<W: Write> {
    out: W,
    buf: String,
    err: Option<io::Error>,
}

impl<W: Write> fmt::Write for Sink<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.err.is_some() {
            return Err(fmt::Error);
        }
        self.buf.push_str(s);
        if self.buf.len() >= 1 << 16 {
            if let Err(e) = self.out.write_all(self.buf.as_bytes()) {
                self.err = Some(e);
                return Err(fmt::Error);
            }
            self.buf.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(format_time(1_714_564_800_123_456_789), "2024-05-01 12:00:00.123 UTC");
        assert_eq!(format_time(951_782_400_000_000_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(format_duration(2_500_000_000), "2.500 s");
    }
}
