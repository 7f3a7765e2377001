//! The text report: what was recorded, where the time went (functions by self and total share, top stacks) and
//! the GIL / thread-state / pthread-id / stack-status breakdown.

use std::fmt::Write as _;
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
pub fn function_shares(profile: &Profile) -> Vec<FunctionShare> {
    let tables = &profile.tables;
    let mut by_stack: FxMap<(u8, u32), u64> = FxMap::default();
    for s in &profile.stacks {
        *by_stack.entry((s.status.as_u8(), s.leaf)).or_insert(0) += s.count;
    }
    // Symbols of one function at different lines are one function.
    let mut function_of_symbol: Vec<Option<u32>> = vec![None; tables.symbols.len()];
    let mut function_ids: FxMap<(String, String), u32> = FxMap::default();
    let mut functions: Vec<FunctionShare> = Vec::new();
    let mut function_id = |name: String, file: String, functions: &mut Vec<FunctionShare>| -> u32 {
        let next = functions.len() as u32;
        *function_ids.entry((name.clone(), file.clone())).or_insert_with(|| {
            functions.push(FunctionShare { function: name, file, self_samples: 0, total_samples: 0 });
            next
        })
    };
    let mut seen: Vec<u32> = Vec::new();
    let mut entries: Vec<_> = by_stack.into_iter().collect();
    entries.sort_unstable();
    for ((status, leaf), count) in entries {
        if leaf == 0 {
            let marker = names::marker(StackStatus::from_u8(status), false).unwrap_or_default();
            let id = function_id(marker, String::new(), &mut functions);
            functions[id as usize].self_samples += count;
            functions[id as usize].total_samples += count;
            continue;
        }
        seen.clear();
        for (depth, sym) in tables.frames(leaf).enumerate() {
            let id = match function_of_symbol[sym as usize] {
                Some(id) => id,
                None => {
                    let symbol = tables.symbol(sym);
                    let id = function_id(names::function_name(symbol), names::file_name(symbol), &mut functions);
                    function_of_symbol[sym as usize] = Some(id);
                    id
                }
            };
            if depth == 0 {
                functions[id as usize].self_samples += count;
            }
            if !seen.contains(&id) {
                seen.push(id);
                functions[id as usize].total_samples += count;
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

/// Renders the whole report.
pub fn render(profile: &Profile, options: &Options) -> String {
    let mut o = String::new();
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

    // --- Processes.
    let _ = writeln!(o, "\nProcesses");
    let mut pids: Vec<u32> = profile.tables.processes.iter().map(|p| p.pid).collect();
    pids.extend(profile.threads.iter().map(|t| t.pid));
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for pid in pids {
        let samples: u64 = profile.threads.iter().filter(|t| t.pid == pid).map(|t| t.samples).sum();
        let threads = profile.threads.iter().filter(|t| t.pid == pid).count();
        let _ = writeln!(
            o,
            "  {}: {}, {}",
            e(&profile.process_label(pid)),
            plural(samples, "sample"),
            plural(threads as u64, "thread")
        );
        match profile.tables.process(pid) {
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
    let row = |o: &mut String, f: &FunctionShare| {
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
        row(&mut o, f);
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
        row(&mut o, f);
    }

    // --- Top stacks.
    let stacks = top_stacks(profile);
    let _ = writeln!(o, "\nTop stacks, root first (top {} of {} unique)", top.min(stacks.len()), stacks.len());
    for (i, &(status, leaf, count)) in stacks.iter().take(top).enumerate() {
        let _ = writeln!(o, "  #{:<3} {} ({})", i + 1, plural(count, "sample"), pct(count, matched).trim());
        // A frame repeated in a row (deep recursion) is shown once with its count.
        let frames = profile.stack_names(status, leaf, true);
        let mut k = 0;
        while k < frames.len() {
            let run = frames[k..].iter().take_while(|f| **f == frames[k]).count();
            if run > 1 {
                let _ = writeln!(o, "        {}  (x{run})", e(&frames[k]));
            } else {
                let _ = writeln!(o, "        {}", e(&frames[k]));
            }
            k += run;
        }
    }

    // --- States.
    let breakdown = |o: &mut String, title: &str, rows: Vec<(String, String, u64)>| {
        let _ = writeln!(o, "\n{title}");
        if rows.is_empty() {
            let _ = writeln!(o, "  no samples");
        }
        for (key, words, n) in rows {
            let _ = writeln!(o, "  {n:>9} {}  {key:<16} {words}", pct(n, matched));
        }
    };
    let m = &profile.matched;
    breakdown(&mut o, "GIL state", m.gil_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());
    breakdown(
        &mut o,
        "Thread state: is the sampled thread the interpreter's current thread?",
        m.thread_states().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(
        &mut o,
        "pthread id: does the thread state belong to the sampled OS thread?",
        m.pthread_ids().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect(),
    );
    breakdown(&mut o, "Stack status", m.statuses().into_iter().map(|(s, n)| (s.key(), s.describe(), n)).collect());

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
            e(&profile.process_label(t.pid)),
            e(&profile.thread_label(t))
        );
    }
    o
}

/// Writes the report.
pub fn write<W: Write>(profile: &Profile, options: &Options, mut out: W) -> io::Result<()> {
    out.write_all(render(profile, options).as_bytes())?;
    out.flush()
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
