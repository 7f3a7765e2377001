//! `pyperf annotate`: a function's source with each line's share of the samples, in a terminal or as an HTML
//! heatmap.
//!
//! A function is a Python function's qualified name in one file (`Worker.run` in `/srv/app/worker.py`): its frames
//! at every line. Per line:
//! - **self**: the samples whose leaf Python frame is that function at that line (the line was running, or called
//!   into native code, or the interpreter's garbage collector ran there: frames below it that are not Python count
//!   for it);
//! - **total**: the samples with that function at that line anywhere on the stack, each sample once per line even
//!   when the function recurses.
//!
//! Shares are of every sample of the selection (the filters, as `pyperf report` has them: `--pid`, `--tid`, `--gil`,
//! `--gc`, ...), idle ones included, so that they read as the text report's. In `--mode off-cpu` and `wall` they are
//! shares of time, and an off-CPU interval counts for the line it blocked at (self) and every line on its stack
//! (total). Everything is counted in one walk of the recording's tree of stacks (linear, whatever the stacks' depths).
//!
//! Which lines are shown: the recording has a function's name and the lines its samples ran, not where it starts.
//! With its source, the function starts at the nearest `def NAME` or `class NAME` above its first sampled line
//! that is indented less than that line, and ends before the next non-blank, non-comment line indented no deeper
//! than that `def` (Python's block rule; a line of a multi-line string written at the left margin ends it early),
//! or at its last sampled line if that is later. `<module>` runs from line 1; lambdas and comprehensions
//! (`<lambda>`, `<listcomp>`), and every function without its source, from their first to their last sampled line.
//!
//! The source: the recording's copy (format 1.7, `pyperf record --source`), else the file at the recorded path on
//! this machine. When both exist and differ (by SHA-256) a warning says so and the recording's copy is shown: it is
//! what ran. Without either the lines are shown by number only. Names, paths and source text come from the recording
//! and are escaped: names and paths as everywhere else ([`names::escape_text`] in a terminal), source text with its
//! control and bidirectional-text characters shown as escapes (`\x1b`, `\u{202e}`) but its backslashes as they are;
//! in HTML everything HTML-escaped too.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::path::Path;

use pyperf_format::{symbol_flags, FrameKind};

use crate::error::{io_reason, ReportError};
use crate::flamegraph::{visible, xml};
use crate::hash::FxMap;
use crate::names;
use crate::profile::{Mode, Profile};

/// Which functions to annotate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The functions with the most self time ([`Options::top`] of them).
    Top,
    /// Functions called this: the qualified name (`Worker.run`), or its last part (`run`: every `*.run`).
    Name(String),
    /// The innermost sampled function of a file (the recorded path, or its end after a `/`: `app.py`) whose lines
    /// hold this line.
    Line {
        /// The file as given.
        file: String,
        /// The line, from 1.
        line: u32,
    },
}

impl Target {
    /// The target a command-line argument names: `FILE:LINE` (digits after the last colon), else a function name;
    /// none: [`Target::Top`].
    pub fn parse(spec: Option<&str>) -> Target {
        let Some(spec) = spec else { return Target::Top };
        if let Some((file, line)) = spec.rsplit_once(':') {
            if !file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(line) = line.parse() {
                    return Target::Line { file: file.to_string(), line };
                }
            }
        }
        Target::Name(spec.to_string())
    }
}

/// What `pyperf annotate` shows and how.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Which functions.
    pub target: Target,
    /// At most this many functions ([`Target::Top`]: the top ones by self time; a name matching several: the top ones
    /// by total time).
    pub top: usize,
    /// Colour the shares (ANSI escapes: a terminal).
    pub color: bool,
    /// An HTML page instead of text.
    pub html: bool,
    /// Read a source the recording lacks from the local disk, at its recorded path (and compare the recording's
    /// copies with the local files).
    pub local: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { target: Target::Top, top: 3, color: false, html: false, local: true }
    }
}

/// Most lines of a function shown whole; a longer extent (a crafted recording's lines far apart) shows its sampled
/// lines only.
pub const MAX_SPAN: u32 = 20_000;

/// Largest local source file read (a recorded path may name anything).
pub const MAX_LOCAL_SOURCE: u64 = 64 << 20;

/// One line of an annotated function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Line number, from 1.
    pub line: u32,
    /// Self samples (or ns): the function's frame at this line was the leaf Python frame.
    pub self_count: u64,
    /// Total samples (or ns): the function at this line was on the stack (once per sample).
    pub total_count: u64,
    /// The line's text (tabs expanded, line end removed), when the source is known and has this line.
    pub text: Option<String>,
}

/// Where an annotation's source text came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOrigin {
    /// The recording's copy (format 1.7), with its SHA-256 in hex.
    Recording {
        /// `sha256sum` of the file.
        sha256: String,
    },
    /// The file at the recorded path on this machine (the recording has no copy).
    Local {
        /// Why the recording has none, in words.
        why_not_recorded: String,
    },
    /// Neither: line numbers only.
    Unavailable {
        /// Why, in words: why the recording has no copy and why no local file was read.
        why: String,
    },
}

/// One function, annotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// Qualified name as reports show it (`Worker.run`).
    pub function: String,
    /// The file as recorded.
    pub file: String,
    /// Line of its `def` (or `class`), found in the source; `None` when unknown (no source, a lambda, a module).
    pub def_line: Option<u32>,
    /// Its samples where its frame was the leaf Python frame.
    pub self_count: u64,
    /// Its samples where it was on the stack (once per sample).
    pub total_count: u64,
    /// The lines shown, in order: every line of its extent (at most [`MAX_SPAN`]) and every sampled line; a gap
    /// between two is lines left out.
    pub lines: Vec<Line>,
    /// Where the text of `lines` came from.
    pub source: SourceOrigin,
}

/// What [`annotate`] found: the annotations, and what to tell the user besides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotated {
    /// The functions, in the order shown.
    pub annotations: Vec<Annotation>,
    /// The samples (or ns) of the selection: what shares are of.
    pub selection: u64,
    /// What the counts weigh.
    pub mode: Mode,
    /// Said before the annotations (`3 functions match 'run': ...`).
    pub notes: Vec<String>,
    /// For standard error (a local file that differs from the recording's copy), one line each.
    pub warnings: Vec<String>,
}

/// A function's identity: (qualified name as shown, file as recorded).
type FunctionKey = (String, String);

/// Per-function counts gathered in one walk.
#[derive(Debug, Default, Clone)]
struct Counts {
    /// The symbol's own name (`run` of `Worker.run`): what its `def` says.
    base_name: String,
    self_count: u64,
    total_count: u64,
    /// line -> (self, total).
    lines: std::collections::BTreeMap<u32, (u64, u64)>,
}

/// Counts every Python function's lines over the profile's stacks: a depth-first walk of the tree of stack nodes
/// with, per function and per (function, line), the number of their frames on the current path (a node adds the
/// samples below it to a total only at the outermost such frame), and the nearest Python frame of the path (which
/// the samples ending at a node count as self for).
fn count(profile: &Profile) -> (Vec<FunctionKey>, Vec<Counts>) {
    let tables = &profile.tables;
    let nodes = tables.nodes.len();
    let mut below: Vec<u64> = vec![0; nodes + 1];
    let mut at_node: Vec<u64> = vec![0; nodes + 1];
    for s in &profile.stacks {
        if s.leaf != 0 {
            below[s.leaf as usize] = below[s.leaf as usize].saturating_add(s.count);
            at_node[s.leaf as usize] = at_node[s.leaf as usize].saturating_add(s.count);
        }
    }
    let (child_start, children) = crate::profile::children_with_samples(tables, &mut below);

    // Symbol -> (function, line slot), or None for frames that are not Python code.
    let mut keys: Vec<FunctionKey> = Vec::new();
    let mut counts: Vec<Counts> = Vec::new();
    let mut function_ids: HashMap<FunctionKey, u32> = HashMap::new();
    let mut line_ids: FxMap<(u32, u32), u32> = FxMap::default();
    let mut line_of: Vec<(u32, u32)> = Vec::new();
    // Every symbol's slot, before the walk (the symbol table is bounded by the file; the walk then only indexes).
    let slots: Vec<Option<u32>> = tables
        .symbols
        .iter()
        .map(|s| {
            if s.kind() != FrameKind::Python || s.flags & symbol_flags::UNRESOLVED != 0 {
                return None;
            }
            let key = (names::function_name(s), s.file.clone());
            let next = keys.len() as u32;
            let f = *function_ids.entry(key).or_insert_with_key(|key| {
                keys.push(key.clone());
                counts.push(Counts { base_name: s.name.clone(), ..Counts::default() });
                next
            });
            let next = line_of.len() as u32;
            Some(*line_ids.entry((f, s.line)).or_insert_with(|| {
                line_of.push((f, s.line));
                next
            }))
        })
        .collect();
    let mut fn_on_path: Vec<u32> = vec![0; keys.len()];
    let mut line_on_path: Vec<u32> = vec![0; line_of.len()];
    let mut line_total: Vec<u64> = vec![0; line_of.len()];
    let mut line_self: Vec<u64> = vec![0; line_of.len()];
    let mut fn_total: Vec<u64> = vec![0; keys.len()];
    // (node, its line slot or u32::MAX, nearest Python line slot on the path or u32::MAX, next child index)
    let mut stack: Vec<(u32, u32, u32, u32)> = vec![(0, u32::MAX, u32::MAX, child_start[0])];
    while let Some(top) = stack.last_mut() {
        let (node, own, python, next) = *top;
        if next < child_start[node as usize + 1] {
            top.3 += 1;
            let child = children[next as usize];
            let sym = tables.nodes[child as usize - 1].1;
            let own = slots.get(sym as usize).copied().flatten();
            let python = match own {
                Some(l) => {
                    let f = line_of[l as usize].0 as usize;
                    if line_on_path[l as usize] == 0 {
                        line_total[l as usize] = line_total[l as usize].saturating_add(below[child as usize]);
                    }
                    if fn_on_path[f] == 0 {
                        fn_total[f] = fn_total[f].saturating_add(below[child as usize]);
                    }
                    line_on_path[l as usize] += 1;
                    fn_on_path[f] += 1;
                    l
                }
                None => python,
            };
            if python != u32::MAX {
                line_self[python as usize] = line_self[python as usize].saturating_add(at_node[child as usize]);
            }
            stack.push((child, own.unwrap_or(u32::MAX), python, child_start[child as usize]));
        } else {
            stack.pop();
            if own != u32::MAX {
                line_on_path[own as usize] -= 1;
                fn_on_path[line_of[own as usize].0 as usize] -= 1;
            }
        }
    }
    for (l, &(f, line)) in line_of.iter().enumerate() {
        let c = &mut counts[f as usize];
        let (s, t) = (line_self.get(l).copied().unwrap_or(0), line_total.get(l).copied().unwrap_or(0));
        c.self_count = c.self_count.saturating_add(s);
        let entry = c.lines.entry(line).or_insert((0, 0));
        entry.0 = entry.0.saturating_add(s);
        entry.1 = entry.1.saturating_add(t);
    }
    for (f, c) in counts.iter_mut().enumerate() {
        c.total_count = fn_total.get(f).copied().unwrap_or(0);
    }
    (keys, counts)
}

/// A file's source as found: its lines, or why there are none.
#[derive(Debug, Clone)]
struct Source {
    lines: Option<Vec<String>>,
    origin: SourceOrigin,
}

/// The lines of a source file: split at `\n`, `\r\n` or a lone `\r` (as Python counts lines), decoded as UTF-8
/// (bad bytes replaced), tabs expanded to stops of 8.
fn split_lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut rest: &str = &text;
    while !rest.is_empty() {
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        out.push(expand_tabs(&rest[..end]));
        rest = &rest[end..];
        if rest.starts_with("\r\n") {
            rest = &rest[2..];
        } else if !rest.is_empty() {
            rest = &rest[1..];
        }
    }
    out
}

fn expand_tabs(line: &str) -> String {
    if !line.contains('\t') {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut col = 0;
    for c in line.chars() {
        if c == '\t' {
            let n = 8 - col % 8;
            out.extend(std::iter::repeat_n(' ', n));
            col += n;
        } else {
            out.push(c);
            col += 1;
        }
    }
    out
}

/// Reads a local file named by a recording: a regular file only (a FIFO or a device named by a crafted recording
/// must not block or stream forever), at most [`MAX_LOCAL_SOURCE`] bytes.
fn read_local(path: &str) -> Result<Vec<u8>, String> {
    if path.is_empty() || path.starts_with('<') {
        return Err("not a file (the interpreter's own code)".to_string());
    }
    let file = crate::output::open_regular(Path::new(path)).map_err(|e| io_reason(&e))?;
    let mut bytes = Vec::new();
    file.take(MAX_LOCAL_SOURCE + 1).read_to_end(&mut bytes).map_err(|e| io_reason(&e))?;
    if bytes.len() as u64 > MAX_LOCAL_SOURCE {
        return Err(format!("larger than {} MiB", MAX_LOCAL_SOURCE >> 20));
    }
    Ok(bytes)
}

/// The source of `file` (as recorded): the recording's copy, else the local file (see the module doc); warnings
/// for `warnings`.
fn find_source(profile: &Profile, file: &str, local: bool, warnings: &mut Vec<String>) -> Source {
    let shown = names::escape_text(file);
    let recorded = profile.tables.sources().get(file);
    let local_bytes = || if local { read_local(file) } else { Err("not looked for (--no-local)".to_string()) };
    let why_not_recorded = match recorded {
        Some(f) if f.is_stored() => {
            let sha = pyperf_format::sha256(&f.content);
            if sha[..] != f.sha256[..] {
                warnings.push(format!("the recording's copy of {shown} does not match its SHA-256: not used"));
                "its copy is damaged".to_string()
            } else {
                if let Ok(here) = local_bytes() {
                    let here_sha = pyperf_format::hex(&pyperf_format::sha256(&here));
                    if here_sha != f.sha256_hex() {
                        warnings.push(format!(
                            "{shown} on this machine differs from the recording's copy (sha256 {} here, {} recorded): \
                             showing the recording's copy, which is what ran",
                            &here_sha[..12],
                            &f.sha256_hex()[..12]
                        ));
                    }
                }
                return Source {
                    lines: Some(split_lines(&f.content)),
                    origin: SourceOrigin::Recording { sha256: f.sha256_hex() },
                };
            }
        }
        Some(f) => format!("the recorder could not read it: {}", f.error),
        None if profile.tables.sources().is_empty() => "recorded without --source".to_string(),
        None => "not among the files the recording holds".to_string(),
    };
    match local_bytes() {
        Ok(bytes) => Source { lines: Some(split_lines(&bytes)), origin: SourceOrigin::Local { why_not_recorded } },
        Err(e) => Source {
            lines: None,
            origin: SourceOrigin::Unavailable {
                why: format!("not in the recording ({why_not_recorded}), and {shown} on this machine: {e}"),
            },
        },
    }
}

/// Indentation of a line (columns of leading spaces, tabs already expanded); `None` for a blank or comment-only one.
fn indent(line: &str) -> Option<usize> {
    let trimmed = line.trim_start_matches([' ', '\x0c']);
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    Some(line.len() - trimmed.len())
}

/// Whether `line` is `def NAME`, `async def NAME` or `class NAME`.
fn defines(line: &str, name: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("async").filter(|r| r.starts_with([' ', '\t'])).map_or(t, str::trim_start);
    let Some(rest) = t.strip_prefix("def").or_else(|| t.strip_prefix("class")) else { return false };
    if !rest.starts_with([' ', '\t']) {
        return false;
    }
    let rest = rest.trim_start();
    rest.strip_prefix(name).is_some_and(|after| after.trim_start().starts_with(['(', ':', '[']))
}

/// (def line, first shown, last shown) of a function whose sampled lines run from `lo` to `hi` (see the module
/// doc).
fn extent(base_name: &str, lo: u32, hi: u32, lines: Option<&[String]>) -> (Option<u32>, u32, u32) {
    let lo = lo.max(1);
    if base_name == "<module>" {
        return (None, 1, hi.max(1));
    }
    let Some(lines) = lines else { return (None, lo, hi) };
    if base_name.starts_with('<') || lo as usize > lines.len() {
        return (None, lo, hi);
    }
    // (Within the file: a crafted recording's last line may be billions.)
    let last_known = hi.min(lines.len() as u32);
    let first_indent = (lo..=last_known).find_map(|l| lines.get(l as usize - 1).and_then(|t| indent(t)));
    let Some(first_indent) = first_indent else { return (None, lo, hi) };
    let def = (1..=lo).rev().find(|&l| {
        let text = &lines[l as usize - 1];
        defines(text, base_name) && indent(text).is_some_and(|i| i < first_indent || l == lo)
    });
    let Some(def) = def else { return (None, lo, hi) };
    let def_indent = indent(&lines[def as usize - 1]).unwrap_or(0);
    let mut end = def;
    for l in def + 1..=lines.len() as u32 {
        match indent(&lines[l as usize - 1]) {
            None => {}
            Some(i) if i > def_indent => end = l,
            Some(_) => break,
        }
    }
    (Some(def), def, end.max(hi))
}

/// Whether a function (qualified name `function`, own name `base`) answers to the name asked for.
fn name_matches(asked: &str, function: &str, base: &str) -> bool {
    function == asked || base == asked || function.strip_suffix(asked).is_some_and(|head| head.ends_with('.'))
}

/// Whether a recorded path answers to the file asked for: equal, or ending in `/FILE`.
fn file_matches(asked: &str, file: &str) -> bool {
    let asked = asked.strip_prefix("./").unwrap_or(asked);
    file == asked || file.strip_suffix(asked).is_some_and(|head| head.ends_with('/'))
}

/// The functions `options` asks for, annotated; an error (nothing matches, no samples) says what to try.
pub fn annotate(profile: &Profile, options: &Options) -> Result<Annotated, ReportError> {
    let selection = profile.total();
    if selection == 0 {
        return Err(ReportError::Empty(
            "no samples to annotate (none in the recording, or none matches the filters): check the filters, or \
             `pyperf report` to see what was recorded"
                .to_string(),
        ));
    }
    let (keys, counts) = count(profile);
    let top = options.top.max(1);
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    let mut sources: HashMap<String, Source> = HashMap::new();
    let mut source_of = |file: &str, warnings: &mut Vec<String>| -> Source {
        sources.entry(file.to_string()).or_insert_with(|| find_source(profile, file, options.local, warnings)).clone()
    };
    // The first and last known line with samples (line 0, unknown, only when no other has any).
    let sampled = |f: usize| -> Option<(u32, u32)> {
        let lines = &counts[f].lines;
        let last = *lines.keys().next_back()?;
        Some((lines.keys().copied().find(|&l| l > 0).unwrap_or(0), last))
    };
    let chosen: Vec<usize> = match &options.target {
        Target::Top => {
            let mut order: Vec<usize> = (0..keys.len()).filter(|&f| counts[f].self_count > 0).collect();
            order.sort_by(|&a, &b| {
                counts[b]
                    .self_count
                    .cmp(&counts[a].self_count)
                    .then(counts[b].total_count.cmp(&counts[a].total_count))
                    .then_with(|| keys[a].cmp(&keys[b]))
            });
            if order.is_empty() {
                return Err(ReportError::Empty(
                    "no Python function has samples in the selection (only idle or unnamed frames): try other \
                     filters, or `pyperf report`"
                        .to_string(),
                ));
            }
            if order.len() > top {
                let which = if top == 1 { "the function".to_string() } else { format!("the {top} functions") };
                notes.push(format!(
                    "{which} with the most self time, of {} with some (--top N for more, or name one)",
                    order.len()
                ));
            }
            order.truncate(top);
            order
        }
        Target::Name(asked) => {
            let mut order: Vec<usize> = (0..keys.len())
                .filter(|&f| counts[f].total_count > 0 && name_matches(asked, &keys[f].0, &counts[f].base_name))
                .collect();
            order.sort_by(|&a, &b| {
                counts[b]
                    .total_count
                    .cmp(&counts[a].total_count)
                    .then(counts[b].self_count.cmp(&counts[a].self_count))
                    .then_with(|| keys[a].cmp(&keys[b]))
            });
            if order.is_empty() {
                return Err(ReportError::Empty(format!(
                    "no sampled function is called '{}': give the name as `pyperf report` shows it (Class.method, or \
                     method), a FILE:LINE, or nothing for the top functions",
                    names::escape_text(asked)
                )));
            }
            if order.len() > 1 {
                let shown = order.len().min(top);
                let more = if order.len() > top { format!(" (--top {} for all)", order.len()) } else { String::new() };
                notes.push(format!(
                    "{} functions match '{}': {} by total share{more}",
                    order.len(),
                    names::escape_text(asked),
                    if shown == order.len() { "each".to_string() } else { format!("the first {shown}") },
                ));
            }
            order.truncate(top);
            order
        }
        Target::Line { file, line } => {
            // The innermost function whose shown lines hold the line: the smallest extent.
            let mut best: Option<(u32, usize)> = None;
            let mut in_file = 0;
            for f in 0..keys.len() {
                if counts[f].total_count == 0 || !file_matches(file, &keys[f].1) {
                    continue;
                }
                in_file += 1;
                let Some((lo, hi)) = sampled(f) else { continue };
                let source = source_of(&keys[f].1, &mut warnings);
                let (_, first, last) = extent(&counts[f].base_name, lo, hi, source.lines.as_deref());
                if (first..=last).contains(line) && best.is_none_or(|(span, _)| last - first < span) {
                    best = Some((last - first, f));
                }
            }
            match best {
                Some((_, f)) => vec![f],
                None if in_file == 0 => {
                    return Err(ReportError::Empty(format!(
                        "no sampled function is in a file called {}: give the path as `pyperf report` shows it (or its \
                         end, app.py), a function name, or nothing for the top functions",
                        names::escape_text(file)
                    )))
                }
                None => {
                    return Err(ReportError::Empty(format!(
                        "no sampled function of {} spans line {line}: give a line of one of its sampled functions \
                         (`pyperf report` lists them), or a function name",
                        names::escape_text(file),
                    )))
                }
            }
        }
    };
    let mut annotations = Vec::with_capacity(chosen.len());
    for f in chosen {
        let (function, file) = keys[f].clone();
        let c = &counts[f];
        let Some((lo, hi)) = sampled(f) else { continue };
        let source = source_of(&file, &mut warnings);
        let (def_line, first, last) = extent(&c.base_name, lo, hi, source.lines.as_deref());
        // The extent, and every sampled line (line 0, unknown, too); a crafted recording's lines may be billions
        // apart: past MAX_SPAN lines only the sampled ones are shown.
        let whole = last.saturating_sub(first) < MAX_SPAN;
        let span = (first..=last).take_while(|_| whole);
        let mut numbers: Vec<u32> = span.chain(c.lines.keys().copied()).collect();
        numbers.sort_unstable();
        numbers.dedup();
        let lines = numbers
            .into_iter()
            .map(|l| {
                let (self_count, total_count) = c.lines.get(&l).copied().unwrap_or((0, 0));
                let text = source.lines.as_ref().and_then(|s| s.get(l.checked_sub(1)? as usize)).cloned();
                Line { line: l, self_count, total_count, text }
            })
            .collect();
        annotations.push(Annotation {
            function,
            file,
            def_line,
            self_count: c.self_count,
            total_count: c.total_count,
            lines,
            source: source.origin,
        });
    }
    // Line 0 (unknown) has no text and sorts first: keep it, a sample there is a sample.
    Ok(Annotated { annotations, selection, mode: profile.mode, notes, warnings })
}

/// `12.3%`, `<0.1%` for a share too small to show, empty for none.
fn percent(count: u64, of: u64) -> String {
    if count == 0 || of == 0 {
        return String::new();
    }
    let p = count as f64 * 100.0 / of as f64;
    if p < 0.05 {
        "<0.1%".to_string()
    } else {
        format!("{p:.1}%")
    }
}

/// A count as the header says it: `70 samples`, or time in ms.
fn amount(count: u64, mode: Mode) -> String {
    match mode {
        Mode::Cpu if count == 1 => "1 sample".to_string(),
        Mode::Cpu => format!("{count} samples"),
        _ => format!("{:.1} ms", count as f64 / 1e6),
    }
}

/// The header lines of an annotation (title, counts, source), names and paths made safe by `shown`
/// ([`names::escape_text`] for a terminal; [`visible`] for HTML, which then escapes the whole line), shared by the text
/// and HTML outputs.
fn header(a: &Annotation, of: &Annotated, shown: impl Fn(&str) -> String) -> (String, String, String) {
    let title = match a.def_line {
        Some(l) => format!("{} in {}, def at line {l}", shown(&a.function), shown(&a.file)),
        None => format!("{} in {}", shown(&a.function), shown(&a.file)),
    };
    let what = match of.mode {
        Mode::Cpu => "CPU samples",
        Mode::OffCpu => "off-CPU time",
        Mode::Wall => "wall-clock time",
    };
    let counts = format!(
        "{}: {} self ({}), {} total ({}) of {} {what} in the selection",
        shown(&a.function),
        amount(a.self_count, of.mode),
        percent_or_zero(a.self_count, of.selection),
        amount(a.total_count, of.mode),
        percent_or_zero(a.total_count, of.selection),
        match of.mode {
            Mode::Cpu => of.selection.to_string(),
            _ => format!("{:.1} ms", of.selection as f64 / 1e6),
        },
    );
    let source = match &a.source {
        SourceOrigin::Recording { sha256 } => format!("source: the recording's copy (sha256 {sha256})"),
        SourceOrigin::Local { why_not_recorded } => {
            format!("source: {} on this machine (not in the recording: {why_not_recorded})", shown(&a.file))
        }
        SourceOrigin::Unavailable { why } => format!("source: unavailable, line numbers only: {why}"),
    };
    (title, counts, source)
}

fn percent_or_zero(count: u64, of: u64) -> String {
    let p = percent(count, of);
    if p.is_empty() {
        "0.0%".to_string()
    } else {
        p
    }
}

/// The ANSI colour of a share (fraction of the selection), for the terminal: bold red from 10%, red from 2%,
/// yellow from 0.5%, none below.
fn ansi(count: u64, of: u64) -> &'static str {
    let p = if of == 0 { 0.0 } else { count as f64 / of as f64 };
    if p >= 0.10 {
        "\x1b[1;31m"
    } else if p >= 0.02 {
        "\x1b[31m"
    } else if p >= 0.005 {
        "\x1b[33m"
    } else {
        ""
    }
}

/// Writes the annotations: text (coloured with [`Options::color`]) or, with [`Options::html`], an HTML page.
pub fn write<W: Write>(annotated: &Annotated, options: &Options, out: W) -> io::Result<()> {
    if options.html {
        write_html(annotated, out)
    } else {
        write_text(annotated, options.color, out)
    }
}

fn write_text<W: Write>(annotated: &Annotated, color: bool, mut out: W) -> io::Result<()> {
    let (bold, reset) = if color { ("\x1b[1m", "\x1b[0m") } else { ("", "") };
    for note in &annotated.notes {
        writeln!(out, "{note}")?;
    }
    for (i, a) in annotated.annotations.iter().enumerate() {
        if i > 0 || !annotated.notes.is_empty() {
            writeln!(out)?;
        }
        let (title, counts, source) = header(a, annotated, names::escape_text);
        writeln!(out, "{bold}{title}{reset}")?;
        writeln!(out, "  {counts}")?;
        writeln!(out, "  {source}")?;
        let width = a.lines.last().map_or(4, |l| l.line.to_string().len().max(4));
        writeln!(out, "  {:>7}  {:>7}  {:>width$}  source", "self", "total", "line")?;
        let mut previous: Option<u32> = None;
        for l in &a.lines {
            if previous.is_some_and(|p| l.line > p + 1) {
                writeln!(out, "  {:>7}  {:>7}  {:>width$}", "", "", "...")?;
            }
            previous = Some(l.line);
            let s = percent(l.self_count, annotated.selection);
            let t = percent(l.total_count, annotated.selection);
            let (sc, tc) = if color {
                (ansi(l.self_count, annotated.selection), ansi(l.total_count, annotated.selection))
            } else {
                ("", "")
            };
            let (sr, tr) = (if sc.is_empty() { "" } else { reset }, if tc.is_empty() { "" } else { reset });
            // Source text: control and bidirectional characters shown as escapes (`\x1b`), as in the HTML; its
            // backslashes kept as they are (code is full of them; doubling them, as names are, would misquote it).
            let text = l.text.as_deref().map(visible).unwrap_or_default();
            let line = format!("  {sc}{s:>7}{sr}  {tc}{t:>7}{tr}  {:>width$}  {text}", l.line);
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    Ok(())
}

/// The HTML page: one section per function, a table of its lines, each row's background as hot as its self share
/// (of the hottest line's) and the total cell as its total share. Self-contained: no script, no external resource.
fn write_html<W: Write>(annotated: &Annotated, mut out: W) -> io::Result<()> {
    let esc = |s: &str| {
        let mut o = String::with_capacity(s.len());
        xml(&visible(s), &mut o);
        o
    };
    let mut page = String::with_capacity(16 << 10);
    page.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>pyperf annotate</title>\n<style>\n\
         body { font-family: sans-serif; margin: 1em 2em; color: #222; }\n\
         h2 { font-size: 1.1em; margin: 1.5em 0 0.3em; font-family: monospace; }\n\
         p { margin: 0.2em 0; }\n\
         table.lines { border-collapse: collapse; margin-top: 0.5em; font-family: monospace; font-size: 13px; }\n\
         table.lines td { padding: 0 0.6em; white-space: pre; }\n\
         table.lines th { text-align: right; padding: 0 0.6em; border-bottom: 1px solid #999; }\n\
         td.self, td.total, td.line { text-align: right; color: #555; }\n\
         td.line { color: #999; border-right: 1px solid #ccc; }\n\
         td.code { text-align: left; }\n\
         </style>\n</head>\n<body>\n<h1>pyperf annotate</h1>\n",
    );
    for note in &annotated.notes {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", esc(note));
    }
    for (i, a) in annotated.annotations.iter().enumerate() {
        let (title, counts, source) = header(a, annotated, |s| visible(s).into_owned());
        let _ = writeln!(page, "<section class=\"function\" id=\"f{i}\">\n<h2>{}</h2>", esc(&title));
        let _ = writeln!(page, "<p class=\"counts\">{}</p>", esc(&counts));
        let _ = writeln!(page, "<p class=\"source\">{}</p>", esc(&source));
        page.push_str(
            "<table class=\"lines\">\n<tr><th>self</th><th>total</th><th>line</th><th style=\"text-align:left\">source</th></tr>\n",
        );
        let hottest = a.lines.iter().map(|l| l.self_count).max().unwrap_or(0).max(1);
        let mut previous: Option<u32> = None;
        for l in &a.lines {
            if previous.is_some_and(|p| l.line > p + 1) {
                page.push_str("<tr class=\"gap\"><td></td><td></td><td class=\"line\">...</td><td></td></tr>\n");
            }
            previous = Some(l.line);
            let share =
                |c: u64| if annotated.selection == 0 { 0.0 } else { c as f64 * 100.0 / annotated.selection as f64 };
            let heat = l.self_count as f64 / hottest as f64;
            let row_bg = if l.self_count > 0 {
                format!(" style=\"background: rgba(255, 80, 0, {:.3})\"", 0.08 + 0.55 * heat)
            } else {
                String::new()
            };
            let total_bg = if l.total_count > 0 {
                format!(" style=\"background: rgba(255, 160, 0, {:.3})\"", 0.08 + 0.5 * share(l.total_count) / 100.0)
            } else {
                String::new()
            };
            let _ = writeln!(
                page,
                "<tr id=\"f{i}-l{n}\" data-line=\"{n}\" data-self=\"{s:.1}\" data-total=\"{t:.1}\"{row_bg}><td class=\"self\">{sp}</td><td class=\"total\"{total_bg}>{tp}</td><td class=\"line\">{n}</td><td class=\"code\">{code}</td></tr>",
                n = l.line,
                s = share(l.self_count),
                t = share(l.total_count),
                sp = percent(l.self_count, annotated.selection),
                tp = percent(l.total_count, annotated.selection),
                code = esc(l.text.as_deref().unwrap_or("")),
            );
        }
        page.push_str("</table>\n</section>\n");
    }
    page.push_str("</body>\n</html>\n");
    out.write_all(page.as_bytes())
}
