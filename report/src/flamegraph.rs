//! An interactive SVG flame graph (open it in a web browser), drawn by pyperf itself from the merged stacks
//! ([`Tree`]): memory is the tree (one process / thread root context's at a time), never one line per stack.
//! Frames narrower than [`Options::min_width`] are not drawn, and at most [`MAX_FRAMES`], so that a small file
//! cannot make a huge picture.
//!
//! Each frame is a box whose width is its share of the samples (the samples whose stack passes through it), or in
//! [`Mode::OffCpu`] and [`Mode::Wall`] its share of the time (in ms in the subtitle and the tooltips; the off-CPU
//! leaf frames `[off-CPU: ...]` are blue). Callers are below their callees (`icicle`: above), the root `all` spans
//! everything. A box reads
//! `function (file.py:18)` (the file's base name, or its last two path components where two files share a base
//! name or it is a package's `__init__.py`); a label that does not fit is cut on the right with `..`, so the
//! function name stays visible. The tooltip and the details bar show the full path, the line, the samples and
//! the share.
//!
//! Python palette: application code red to orange, the standard library yellow, site-packages aqua, pyperf's
//! pseudo-frames (`[idle]`, `[truncated]`, `[native: unmerged]`, ...) and process / thread roots grey. Native frames
//! (a recording made with `--native`: `deflate (libz.so.1.3)`) are brown, kernel frames (`--kernel`:
//! `do_syscall_64_[k]`) orange, flamegraph.pl's kernel colour; their tooltips give the library's path (the kernel's
//! module). The shade comes from a hash of the function name: the same function always gets the same colour, no
//! randomness, so output is deterministic.
//!
//! A small embedded script (`flamegraph/flamegraph.js`) makes it interactive: click a frame to zoom into it,
//! `Reset Zoom` or Escape to go back, `Search` or Ctrl-F for a regular expression (or plain text) over the full
//! frame names, which highlights the matches and shows their share. Labels are fitted to the window's real width.
//!
//! Height: a recursion thousands of frames deep would make a picture thousands of pixels high that opens on
//! empty space above a thin tower (flamegraph.pl and inferno draw everything). Here the picture shows at most
//! [`Options::max_levels`] levels (about 900 pixels); deeper frames are in the file and appear when a frame is
//! zoomed (the view then starts just below the zoomed frame) or with `Show all levels`.
//!
//! Every text is escaped for XML, and control characters and bidirectional-text controls, which are invisible,
//! reorder what is shown or are not even legal XML, are shown as `\x1b`, `\u{202e}` escapes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use pyperf_format::FrameKind;

use crate::folded;
use crate::hash::FxMap;
use crate::names;
use crate::profile::{Mode, Profile, StackCount};
use crate::tree::{self, Tree, ROOT};

/// Message of the error [`write()`] returns for a profile with no matching sample.
pub const NO_SAMPLES: &str = "no samples to draw (none in the recording, or none matches the filters)";

/// The message of [`write()`]'s error for a profile with nothing to draw in `mode`: [`NO_SAMPLES`] for CPU samples.
pub fn nothing_to_draw(mode: Mode) -> &'static str {
    match mode {
        Mode::Cpu => NO_SAMPLES,
        Mode::OffCpu => "no off-CPU intervals to draw (none in the recording, or none matches the filters)",
        Mode::Wall => "no samples or off-CPU intervals to draw (none in the recording, or none matches the filters)",
    }
}

/// Levels (the root `all` included) drawn before zooming, by default: 50 levels of 16 pixels and the header fit
/// in a 900-pixel-high window.
pub const DEFAULT_MAX_LEVELS: usize = 50;

/// How the flame graph is drawn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// How stacks are folded (lines, process / thread roots).
    pub folded: folded::Options,
    /// Title; default: the recorded command.
    pub title: Option<String>,
    /// Width in pixels; default: fluid (fills the browser window; labels are first cut for 1200 pixels, then
    /// refitted by the script).
    pub width: Option<usize>,
    /// Frames narrower than this many pixels (at [`Options::width`], or 1200) are omitted with their callees;
    /// their samples stay in their caller's width and the header counts them. Default 0.1, as flamegraph.pl.
    pub min_width: f64,
    /// Root at the top, callees below (an icicle graph); default: root at the bottom.
    pub icicle: bool,
    /// Levels shown before zooming ([`DEFAULT_MAX_LEVELS`]); 0: all.
    pub max_levels: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            folded: folded::Options::default(),
            title: None,
            width: None,
            min_width: 0.1,
            icicle: false,
            max_levels: DEFAULT_MAX_LEVELS,
        }
    }
}

/// Writes the SVG. A profile with no matching sample is an `InvalidInput` error: there is nothing to draw.
/// In [`Mode::OffCpu`] and [`Mode::Wall`] widths are time (ns), and the subtitle and tooltips say so in ms.
///
/// Memory: the merged stacks of one root context (process / thread, with [`folded::Options::pid_root`] or
/// [`folded::Options::tid_root`]; the whole profile without) at a time. Contexts and frames narrower than
/// [`Options::min_width`] are not built or drawn, and at most [`MAX_FRAMES`] frames are drawn.
pub fn write<W: Write>(profile: &Profile, options: &Options, out: W) -> io::Result<()> {
    let plan = Plan::new(profile, &options.folded);
    if plan.total == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, nothing_to_draw(profile.mode)));
    }
    let mut title = options.title.clone().unwrap_or_else(|| profile.recorded_command());
    if title.is_empty() {
        title = "pyperf".to_string();
    }
    render(profile, &plan, &title, options, out)
}

/// Frames drawn at most: a few small files can make millions (2,000 threads on a 2,000-frame chain, with thread
/// roots); the frames past it are counted as not drawn.
pub const MAX_FRAMES: u64 = 200_000;

/// One root context: stacks under the same root frames, merged into one tree when drawn.
struct Context {
    /// Indices into [`Plan::root_texts`], outermost first.
    roots: Vec<u32>,
    /// Ranges of [`Profile::stacks`].
    runs: Vec<(usize, usize)>,
    /// Samples.
    total: u64,
}

/// The root contexts in drawing order (root frames in label order).
struct Plan {
    /// Root frame levels (0 to 2).
    levels: usize,
    /// Distinct root frame texts (process and thread labels).
    root_texts: Vec<FrameText>,
    contexts: Vec<Context>,
    total: u64,
    /// The root box.
    all: FrameText,
    /// Stands for labels when only the geometry is wanted.
    blank: FrameText,
}

impl Plan {
    fn new(profile: &Profile, options: &folded::Options) -> Plan {
        let pseudo = |text: &str| {
            let full = visible(text).into_owned();
            FrameText { short: full.clone(), full, color: color(Kind::Pseudo, text) }
        };
        let stacks = &profile.stacks;
        let total = stacks.iter().fold(0u64, |a, s| a.saturating_add(s.count));
        let mut plan = Plan {
            levels: options.pid_root as usize + options.tid_root as usize + options.interp_root as usize,
            root_texts: Vec::new(),
            contexts: Vec::new(),
            total,
            all: pseudo("all"),
            blank: FrameText { short: String::new(), full: String::new(), color: (0, 0, 0) },
        };
        if plan.levels == 0 {
            plan.contexts.push(Context { roots: Vec::new(), runs: vec![(0, stacks.len())], total });
            return plan;
        }
        // The stacks are sorted by thread: one run per thread.
        let mut texts: Vec<String> = Vec::new();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut start = 0;
        while start < stacks.len() {
            let thread = stacks[start].thread;
            let end = start + stacks[start..].iter().take_while(|s| s.thread == thread).count();
            let roots = tree::root_frames(profile, options, thread)
                .into_iter()
                .map(|text| {
                    let next = texts.len() as u32;
                    *ids.entry(text).or_insert_with_key(|k| {
                        texts.push(k.clone());
                        next
                    })
                })
                .collect();
            let total = stacks[start..end].iter().fold(0u64, |a, s| a.saturating_add(s.count));
            plan.contexts.push(Context { roots, runs: vec![(start, end)], total });
            start = end;
        }
        // As the merged tree orders children (label text, byte order); equal roots keep the threads' order.
        plan.contexts.sort_by(|a, b| {
            let text = |t: &u32| texts[*t as usize].as_str();
            a.roots.iter().map(text).cmp(b.roots.iter().map(text))
        });
        // Threads with the same root frames (the same tid in two processes, without process roots) merge.
        plan.contexts.dedup_by(|c, kept| {
            let same = c.roots == kept.roots;
            if same {
                kept.runs.append(&mut c.runs);
                kept.total = kept.total.saturating_add(c.total);
            }
            same
        });
        plan.root_texts = texts.iter().map(|t| pseudo(t)).collect();
        plan
    }
}

/// Lays the frames out in drawing order (depth first, callers before callees, siblings in label order), calling
/// `draw(x, samples, depth, text, base)` for each frame drawn, `x` the samples left of it, `base` (differential
/// profiles, [`Profile::diff_base`], without root frames) the base recording's samples at the same place.
struct Layout<'a, 'p, F> {
    profile: &'p Profile,
    plan: &'a Plan,
    lines: bool,
    min_samples: f64,
    /// `None` when only the geometry is wanted: no label text is made.
    ambiguous: Option<&'a FxMap<&'p str, bool>>,
    frames: u64,
    stats: Stats,
    draw: F,
}

impl<'a, 'p, F: FnMut(u64, u64, u32, &FrameText, Option<u64>)> Layout<'a, 'p, F> {
    fn new(
        profile: &'p Profile,
        plan: &'a Plan,
        options: &Options,
        min_samples: f64,
        ambiguous: Option<&'a FxMap<&'p str, bool>>,
        draw: F,
    ) -> Self {
        let stats = Stats { max_depth: 0, omitted_frames: 0, omitted_samples: 0, capped: false };
        Layout { profile, plan, lines: options.folded.lines, min_samples, ambiguous, frames: 0, stats, draw }
    }

    fn run(mut self) -> Stats {
        let plan = self.plan;
        let base = self.base().map(|b| b.iter().fold(0u64, |a, s| a.saturating_add(s.count)));
        self.frame(0, plan.total, 0, &plan.all, base);
        self.level(0, 0..plan.contexts.len(), 0);
        self.stats
    }

    /// Whether a frame of `samples` is drawn; if not, it counts as omitted (with its callees).
    fn shown(&mut self, samples: u64) -> bool {
        if (samples as f64) < self.min_samples {
            self.stats.omitted_frames += 1;
            self.stats.omitted_samples = self.stats.omitted_samples.saturating_add(samples);
            return false;
        }
        true
    }

    /// The base recording's stacks of a differential profile drawn without root frames.
    fn base(&self) -> Option<&'p [StackCount]> {
        self.profile.diff_base.as_deref().filter(|_| self.plan.levels == 0)
    }

    fn frame(&mut self, x: u64, samples: u64, depth: u32, text: &FrameText, base: Option<u64>) -> bool {
        if self.frames >= MAX_FRAMES {
            self.stats.capped = true;
            self.stats.omitted_frames += 1;
            self.stats.omitted_samples = self.stats.omitted_samples.saturating_add(samples);
            return false;
        }
        self.frames += 1;
        self.stats.max_depth = self.stats.max_depth.max(depth);
        (self.draw)(x, samples, depth, text, base);
        true
    }

    /// The root frames of `level` over `contexts` (which share the levels above), starting at `x`.
    fn level(&mut self, level: usize, contexts: std::ops::Range<usize>, mut x: u64) {
        let plan = self.plan;
        if level == plan.levels {
            // Equal roots were merged: one context.
            for c in contexts {
                self.context(&plan.contexts[c], x);
                x = x.saturating_add(plan.contexts[c].total);
            }
            return;
        }
        let mut i = contexts.start;
        while i < contexts.end {
            let root = plan.contexts[i].roots[level];
            let j = i + plan.contexts[i..contexts.end].iter().take_while(|c| c.roots[level] == root).count();
            let total = plan.contexts[i..j].iter().fold(0u64, |a, c| a.saturating_add(c.total));
            let text = plan.root_texts.get(root as usize).unwrap_or(&plan.blank);
            // A narrow context is not even built.
            if self.shown(total) && self.frame(x, total, level as u32 + 1, text, None) {
                self.level(level + 1, i..j, x);
            }
            x = x.saturating_add(total);
            i = j;
        }
    }

    /// The frames of one context, below its root frames, starting at `x`.
    fn context(&mut self, context: &Context, x: u64) {
        let profile = self.profile;
        let stacks = context.runs.iter().flat_map(|&(a, b)| profile.stacks.get(a..b).unwrap_or(&[]));
        let tree = Tree::build_stacks(profile, self.lines, stacks);
        let base = self.base().map(|b| crate::diff::base_totals(&tree, &Tree::build_stacks(profile, self.lines, b)));
        let texts = match self.ambiguous {
            Some(ambiguous) => frame_texts(profile, &tree, self.lines, ambiguous),
            None => Vec::new(),
        };
        let plan = self.plan;
        let levels = plan.levels as u32;
        let mut stack: Vec<(u32, u64)> = Vec::new();
        let mut kids: Vec<(u32, u64)> = Vec::new();
        let mut expand = |this: &mut Self, node: u32, x: u64, stack: &mut Vec<(u32, u64)>| {
            kids.clear();
            let mut at = x;
            for &child in tree.children(node) {
                let total = tree.nodes[child as usize].total;
                if this.shown(total) {
                    kids.push((child, at));
                }
                // An omitted frame keeps its place: its samples stay in the caller's width.
                at = at.saturating_add(total);
            }
            stack.extend(kids.iter().rev());
        };
        expand(self, ROOT, x, &mut stack);
        while let Some((node, x)) = stack.pop() {
            let n = &tree.nodes[node as usize];
            let text = texts.get(n.label as usize).unwrap_or(&plan.blank);
            let b = base.as_ref().map(|b| b.get(node as usize).copied().unwrap_or(0));
            if self.frame(x, n.total, n.depth + levels, text, b) {
                expand(self, node, x, &mut stack);
            }
        }
    }
}

/// Base names met with more than one distinct file among the frames of the matching stacks. Each stack-table
/// node is visited once.
fn ambiguous_bases(profile: &Profile) -> FxMap<&str, bool> {
    let tables = &profile.tables;
    let mut node_seen = vec![false; tables.nodes.len() + 1];
    // Python frames only: native ones show their library's file name whatever other libraries are called.
    let mut symbol_seen: Vec<bool> = tables.symbols.iter().map(|s| s.kind() != FrameKind::Python).collect();
    let mut seen: FxMap<&str, &str> = FxMap::default();
    let mut ambiguous: FxMap<&str, bool> = FxMap::default();
    for s in &profile.stacks {
        let mut node = s.leaf;
        while let Some(flag) = node_seen.get_mut(node as usize).filter(|f| node != 0 && !**f) {
            *flag = true;
            let Some(&(parent, sym)) = tables.nodes.get(node as usize - 1) else { break };
            node = parent;
            match symbol_seen.get_mut(sym as usize) {
                Some(f) if !*f => *f = true,
                _ => continue,
            }
            let file = tables.symbol(sym).file.as_str();
            let base = base_name(file);
            match seen.get(base) {
                Some(&other) if other != file => {
                    ambiguous.insert(base, true);
                }
                Some(_) => {}
                None => {
                    seen.insert(base, file);
                }
            }
        }
    }
    ambiguous
}

// Geometry, in pixels unless said otherwise.
/// Width the labels are first cut for when the picture is fluid.
const FLUID_BASIS: f64 = 1200.0;
/// Left and right margin, in percent of the width (6 pixels at 1200).
const PAD_PCT: f64 = 0.5;
/// One level: a 15-pixel box and a 1-pixel gap.
const ROW: usize = 16;
const BOX_HEIGHT: usize = 15;
/// Where the frames start: below the title, the legend and the details bar.
const TOP: usize = 78;
const BOTTOM: usize = 10;
const FONT_SIZE: f64 = 12.0;
/// Monospace advance width guessed for the first cut (DejaVu Sans Mono: 0.602 em); the script measures the
/// real one.
const CHAR_WIDTH: f64 = 0.6 * FONT_SIZE;
/// Space left of the label (the text's `dx`) and kept right of it.
const TEXT_PAD: f64 = 3.0;

/// What a label is drawn with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FrameText {
    /// `function (file.py:18)`, made visible (control characters escaped).
    short: String,
    /// `function (/full/path/file.py:18)`, made visible.
    full: String,
    /// Fill colour.
    color: (u8, u8, u8),
}

/// Which part of a program a frame belongs to (its colour family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The application: red to orange.
    App,
    /// The standard library: yellow.
    Stdlib,
    /// Installed packages (site-packages, dist-packages): aqua.
    Package,
    /// pyperf's pseudo-frames, process and thread roots, the root `all`: grey.
    Pseudo,
    /// Off-CPU pseudo-frames (`[off-CPU: read]`): blue.
    OffCpu,
    /// Native frames (machine code of the process: C extensions, libraries, the interpreter): brown.
    Native,
    /// Kernel frames: orange, as flamegraph.pl's (and inferno's) `_[k]` frames.
    Kernel,
}

/// Application, standard library or installed package, from the frame's file, as inferno's Python palette does:
/// a `site-packages` (or Debian's `dist-packages`) directory is a package; a `pythonX.Y` directory or a frozen
/// or built-in module is the standard library; anything else is the application.
fn kind_of_file(file: &str) -> Kind {
    let parts = || file.split(['/', '\\']);
    if parts().any(|p| p == "site-packages" || p == "dist-packages") {
        Kind::Package
    } else if parts().any(|p| {
        p.strip_prefix("python")
            .or_else(|| p.strip_prefix("Python"))
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    }) || file.starts_with("<frozen")
        || file.starts_with("<built-in")
    {
        Kind::Stdlib
    } else {
        Kind::App
    }
}

/// 64-bit FNV-1a: a fixed, portable hash, so colours never change between runs, machines or versions.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The colour of a frame: its kind's hue, the shade from a hash of the function name (not the line: one function
/// keeps one colour).
fn color(kind: Kind, function: &str) -> (u8, u8, u8) {
    let h = fnv1a(function);
    let v = |shift: u32| ((h >> shift) & 0xffff) as f64 / 65535.0;
    let (v1, v2, v3) = (v(0), v(16), v(32));
    let c = |base: f64, range: f64, v: f64| (base + range * v).round() as u8;
    match kind {
        Kind::App => (c(215.0, 40.0, v1), c(60.0, 110.0, v2), c(40.0, 45.0, v3)),
        Kind::Stdlib => (c(200.0, 40.0, v1), c(185.0, 45.0, v1), c(50.0, 40.0, v2)),
        Kind::Package => (c(50.0, 60.0, v1), c(165.0, 55.0, v2), c(165.0, 55.0, v2)),
        Kind::Pseudo => {
            let g = c(175.0, 35.0, v1);
            (g, g, g)
        }
        Kind::OffCpu => (c(70.0, 40.0, v1), c(120.0, 50.0, v1), c(200.0, 50.0, v2)),
        Kind::Native => (c(150.0, 45.0, v1), c(95.0, 40.0, v1), c(40.0, 30.0, v2)),
        // flamegraph.pl's `orange`: one value for red and green, no blue.
        Kind::Kernel => (c(190.0, 65.0, v1), c(90.0, 65.0, v1), 0),
    }
}

/// The file as a label shows it: its base name, or the last two components for a base name shared by several
/// files of the profile or too generic to say anything (`__init__.py`, `__main__.py`).
fn short_file<'a>(file: &'a str, ambiguous: &FxMap<&str, bool>) -> &'a str {
    let base = base_name(file);
    let generic = matches!(base.trim_end_matches("..."), "__init__.py" | "__main__.py");
    if !(generic || ambiguous.get(base).copied().unwrap_or(false)) {
        return base;
    }
    let dir = &file[..file.len() - base.len()];
    match dir.trim_end_matches('/').rfind('/') {
        Some(at) => &file[at + 1..],
        None => file,
    }
}

/// After the last `/` (the whole name without one, or when it ends in `/`).
fn base_name(file: &str) -> &str {
    match file.rsplit_once('/') {
        Some((_, base)) if !base.is_empty() => base,
        _ => file,
    }
}

/// The label texts and colours of the tree's labels (same index as [`Tree::labels`]); `ambiguous` from
/// [`ambiguous_bases`].
fn frame_texts(profile: &Profile, tree: &Tree, lines: bool, ambiguous: &FxMap<&str, bool>) -> Vec<FrameText> {
    let tables = &profile.tables;
    tree.labels
        .iter()
        .map(|label| {
            let full = visible(&label.text).into_owned();
            let symbol = label.symbol.map(|s| tables.symbol(s));
            match symbol.map(|sym| (sym, sym.kind())) {
                // The label is `function (libz.so.1.3)` or `function_[k]`; the tooltip names the library's path or the
                // kernel's module.
                Some((sym, kind @ (FrameKind::Native | FrameKind::Glue | FrameKind::Kernel))) => {
                    let function = names::function_name(sym);
                    let (full, kind) = match kind {
                        FrameKind::Kernel => (format!("{} ({})", label.text, names::file_name(sym)), Kind::Kernel),
                        _ => (format!("{function} ({})", names::file_name(sym)), Kind::Native),
                    };
                    let short = visible(&label.text).into_owned();
                    FrameText { short, full: visible(&full).into_owned(), color: color(kind, &function) }
                }
                // `[unknown code 0x...]` and other bracketed names are pyperf's, not the program's.
                Some((sym, FrameKind::Python)) if !label.text.starts_with('[') => {
                    let function = names::function_name(sym);
                    let file = names::file_name(sym);
                    let file = short_file(&file, ambiguous);
                    let short = if lines && sym.line != 0 {
                        format!("{function} ({file}:{})", sym.line)
                    } else {
                        format!("{function} ({file})")
                    };
                    let color = color(kind_of_file(&sym.file), &function);
                    FrameText { short: visible(&short).into_owned(), full, color }
                }
                _ => {
                    let kind = if label.text.starts_with(names::OFF_CPU_PREFIX) { Kind::OffCpu } else { Kind::Pseudo };
                    FrameText { short: full.clone(), color: color(kind, &label.text), full }
                }
            }
        })
        .collect()
}

/// Characters never shown raw: control characters (C0, DEL, C1; most C0 ones are not even legal in XML 1.0),
/// bidirectional-text controls (they reorder the text around them: a file name could pass for another),
/// line / paragraph separators, the byte-order mark and the two non-characters XML forbids.
fn hidden(c: char) -> bool {
    names::is_unsafe(c) || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

/// `s` with the [`hidden`] characters shown as escapes, spelled as everywhere else ([`names::escape_char`]):
/// `\n`, `\r`, `\t`, `\x1b`, `\u{202e}`.
pub(crate) fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            names::escape_char(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Appends `s` escaped for XML text and attribute values (either quote). `s` must already be [`visible`].
pub(crate) fn xml(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Never reached for visible text; kept so that nothing illegal can reach the file.
            c if hidden(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

/// The label as it fits in `px` pixels of monospace text: whole, or cut on the right with `..` (at least two
/// characters before it), or empty. The script does the same with the measured font width.
fn fit(label: &str, px: f64) -> Cow<'_, str> {
    let room = ((px - 2.0 * TEXT_PAD) / CHAR_WIDTH).floor();
    let room = if room > 0.0 { room as usize } else { 0 };
    if label.chars().count() <= room {
        Cow::Borrowed(label)
    } else if room >= 4 {
        let mut s: String = label.chars().take(room - 2).collect();
        s.push_str("..");
        Cow::Owned(s)
    } else {
        Cow::Borrowed("")
    }
}

/// `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds as milliseconds to the microsecond: `1,234.568 ms`.
fn millis(ns: u64) -> String {
    let us = folded::micros(ns);
    format!("{}.{:03} ms", thousands(us / 1000), us % 1000)
}

/// A width as the tooltips and the header say it: `1,234 samples`, or (off-cpu, wall) `1,234.568 ms`.
fn amount(mode: Mode, n: u64) -> String {
    if mode.is_time() {
        millis(n)
    } else {
        format!("{} samples", thousands(n))
    }
}

fn percent(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}

/// What the header says about the frames drawn.
struct Stats {
    /// Deepest level drawn (0: the root alone).
    max_depth: u32,
    /// Frames omitted (subtree roots only) and their samples.
    omitted_frames: u64,
    omitted_samples: u64,
    /// Frames were left out past [`MAX_FRAMES`].
    capped: bool,
}

fn render<W: Write>(profile: &Profile, plan: &Plan, title: &str, options: &Options, mut out: W) -> io::Result<()> {
    let total = plan.total;
    let basis = options.width.map(|w| w as f64).unwrap_or(FLUID_BASIS);
    let area_px = basis * (100.0 - 2.0 * PAD_PCT) / 100.0;
    let min_samples = options.min_width.max(0.0) * total as f64 / area_px;
    // The header needs the depth and what is left out: the layout is made twice (without texts first) rather
    // than kept.
    let base_total = profile.diff_base.as_ref().map(|b| b.iter().fold(0u64, |a, s| a.saturating_add(s.count)));
    // A differential graph's deepest colour is its largest change of share among the frames drawn.
    let mut max_change = 0f64;
    let stats = Layout::new(profile, plan, options, min_samples, None, |_: u64, n: u64, _: u32, _: &FrameText, b| {
        if let (Some(b), Some(bt)) = (b, base_total) {
            max_change = max_change.max((n as f64 / total as f64 - b as f64 / bt.max(1) as f64).abs());
        }
    })
    .run();
    let all_levels = stats.max_depth as usize + 1;
    let levels = if options.max_levels == 0 { all_levels } else { all_levels.min(options.max_levels.max(2)) };
    let height = TOP + levels * ROW + BOTTOM;

    let mut s = String::with_capacity(1 << 16);
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
    match options.width {
        Some(w) => {
            let _ = write!(s, "<svg version=\"1.1\" width=\"{w}\" height=\"{height}\" viewBox=\"0 0 {w} {height}\"");
        }
        None => {
            let _ = write!(s, "<svg version=\"1.1\" width=\"100%\" height=\"{height}\"");
        }
    }
    s.push_str(" xmlns=\"http://www.w3.org/2000/svg\" xmlns:fg=\"urn:pyperf:flamegraph\" class=\"");
    s.push_str(if options.icicle { "icicle" } else { "flame" });
    s.push_str("\">\n");
    let mode = profile.mode;
    s.push_str(match mode {
        Mode::Cpu => {
            "<!-- Flame graph drawn by pyperf report: open it in a web browser. A box is a frame, its width the \
             share of samples whose stack passes through it. Click to zoom, Ctrl-F to search. -->\n"
        }
        Mode::OffCpu => {
            "<!-- Off-CPU flame graph drawn by pyperf report: open it in a web browser. A box is a frame, its width \
             the share of the time threads spent off CPU with it on their stack; the leaf [off-CPU: ...] frames say \
             why. Click to zoom, Ctrl-F to search. -->\n"
        }
        Mode::Wall => {
            "<!-- Wall-clock flame graph drawn by pyperf report: open it in a web browser. A box is a frame, its \
             width the share of the threads' time, on CPU or off it ([off-CPU: ...] frames), with it on their \
             stack. Click to zoom, Ctrl-F to search. -->\n"
        }
    });
    s.push_str(STYLE);
    s.push_str("<title>");
    xml(&visible(title), &mut s);
    s.push_str("</title>\n");
    let _ = writeln!(s, "<rect id=\"background\" x=\"0\" y=\"0\" width=\"100%\" height=\"{height}\"/>");
    s.push_str("<text id=\"title\" x=\"50%\" y=\"24\">");
    xml(&visible(title), &mut s);
    s.push_str("</text>\n");
    let _ = writeln!(s, "<text id=\"unzoom\" class=\"button h\" x=\"{PAD_PCT}%\" y=\"24\">Reset Zoom</text>");
    let _ = writeln!(s, "<text id=\"search\" class=\"button\" x=\"{}%\" y=\"24\">Search</text>", 100.0 - PAD_PCT);
    let legend_end = match base_total {
        // The colours say grew or shrank, not which code a frame is.
        Some(bt) => {
            let mut x = 10;
            for (rgb, name) in [((255, 55, 55), "grew"), ((55, 55, 255), "shrank")] {
                let _ = writeln!(
                    s,
                    "<rect class=\"legend\" x=\"{x}\" y=\"35\" width=\"11\" height=\"11\" \
                     fill=\"rgb({},{},{})\"/><text class=\"legend\" x=\"{}\" y=\"44\">{name}</text>",
                    rgb.0,
                    rgb.1,
                    rgb.2,
                    x + 15
                );
                x += 15 + 7 * name.len() + 14;
            }
            let text = format!("(share of the total; widths: the new recording; base: {})", amount(mode, bt));
            let _ = writeln!(s, "<text class=\"legend\" x=\"{x}\" y=\"44\">{text}</text>");
            x + 8 * text.chars().count()
        }
        None => legend(&mut s, profile),
    };
    let _ = write!(s, "<text id=\"subtitle\" x=\"{}\" y=\"44\">", legend_end + 16);
    match mode {
        Mode::Cpu => {
            let _ = write!(s, "{} samples", thousands(total));
        }
        Mode::OffCpu | Mode::Wall => {
            let _ = write!(s, "{}: {}", mode.title(), millis(total));
        }
    }
    if stats.omitted_frames > 0 {
        let omitted = match mode {
            Mode::Cpu => thousands(stats.omitted_samples),
            Mode::OffCpu | Mode::Wall => millis(stats.omitted_samples),
        };
        let _ = write!(
            s,
            "; {} in {} frames narrower than {} px not drawn ({:.2}%)",
            omitted,
            thousands(stats.omitted_frames),
            options.min_width,
            percent(stats.omitted_samples, total)
        );
        if stats.capped {
            let _ = write!(s, " (at most {} frames drawn)", thousands(MAX_FRAMES));
        }
    }
    s.push_str("</text>\n");
    let _ = writeln!(s, "<text id=\"matched\" x=\"{}%\" y=\"44\"></text>", 100.0 - PAD_PCT);
    let _ = writeln!(
        s,
        "<text id=\"details\" x=\"{PAD_PCT}%\" y=\"64\">Click a frame to zoom, Ctrl-F to search; hover for details.</text>"
    );
    let more = if levels < all_levels {
        format!("Levels 1-{} of {} shown: click a frame to go deeper", levels - 1, all_levels - 1)
    } else {
        String::new()
    };
    // The hint ends left of the button (15 characters and a gap).
    let _ = writeln!(s, "<text id=\"levels\" x=\"{}%\" dx=\"-125\" y=\"64\">{more}</text>", 100.0 - PAD_PCT);
    let _ = writeln!(
        s,
        "<text id=\"all-levels\" class=\"button{}\" x=\"{}%\" y=\"64\">Show all levels</text>",
        if levels < all_levels { "" } else { " h" },
        100.0 - PAD_PCT
    );
    let _ = writeln!(s, "<g id=\"frames\" fg:total=\"{total}\">");

    let span = 100.0 - 2.0 * PAD_PCT;
    let mut result = Ok(());
    let ambiguous = ambiguous_bases(profile);
    Layout::new(
        profile,
        plan,
        options,
        min_samples,
        Some(&ambiguous),
        |x: u64, samples: u64, depth: u32, t: &FrameText, base: Option<u64>| {
            if result.is_err() {
                return;
            }
            let (label, full) = (t.short.as_str(), t.full.as_str());
            let rgb = match (base, base_total) {
                (Some(b), Some(bt)) => {
                    crate::diff::color(samples as f64 / total as f64, b as f64 / bt.max(1) as f64, max_change)
                }
                _ => t.color,
            };
            let level = depth as usize;
            let x_pct = PAD_PCT + span * x as f64 / total as f64;
            let w_pct = span * samples as f64 / total as f64;
            let shown = level < levels;
            let y = if options.icicle { TOP + level * ROW } else { TOP + (levels.saturating_sub(1 + level)) * ROW };
            let _ = write!(
                s,
                "<g class=\"f{}\" fg:x=\"{x}\" fg:w=\"{samples}\" fg:d=\"{depth}\"",
                if shown { "" } else { " h" }
            );
            let text = fit(label, w_pct / 100.0 * basis);
            if text != label {
                s.push_str(" fg:l=\"");
                xml(label, &mut s);
                s.push('"');
            }
            s.push_str("><title>");
            xml(full, &mut s);
            match (base, base_total) {
                (Some(b), Some(bt)) => {
                    let (now, before) = (percent(samples, total), percent(b, bt));
                    let _ = write!(
                        s,
                        " (new: {}, {now:.2}%; base: {}, {before:.2}%; {:+.2} points)</title>",
                        amount(mode, samples),
                        amount(mode, b),
                        now - before
                    );
                }
                _ => {
                    let _ = write!(s, " ({}, {:.2}%)</title>", amount(mode, samples), percent(samples, total));
                }
            }
            let _ = write!(
                s,
                "<rect x=\"{x_pct:.4}%\" y=\"{y}\" width=\"{w_pct:.4}%\" height=\"{BOX_HEIGHT}\" \
             fill=\"rgb({},{},{})\"/><text x=\"{x_pct:.4}%\" dx=\"{TEXT_PAD}\" y=\"{}\">",
                rgb.0,
                rgb.1,
                rgb.2,
                y + 11
            );
            xml(&text, &mut s);
            s.push_str("</text></g>\n");
            if s.len() >= 1 << 16 {
                result = out.write_all(s.as_bytes());
                s.clear();
            }
        },
    )
    .run();
    result?;
    s.push_str("</g>\n");
    let _ = writeln!(
        s,
        "<script type=\"text/ecmascript\"><![CDATA[\nvar pyperfConfig = {{icicle: {}, levels: {}, maxDepth: {}, \
         top: {TOP}, row: {ROW}, bottom: {BOTTOM}, pad: {PAD_PCT}, total: {total}}};\n{}]]></script>",
        options.icicle,
        if options.max_levels == 0 { 0 } else { options.max_levels.max(2) },
        stats.max_depth,
        SCRIPT
    );
    s.push_str("</svg>\n");
    out.write_all(s.as_bytes())?;
    out.flush()
}

/// The colour legend, left of the subtitle; returns where it ends.
fn legend(s: &mut String, profile: &Profile) -> usize {
    let mut entries =
        vec![(Kind::App, "application"), (Kind::Stdlib, "standard library"), (Kind::Package, "site-packages")];
    // Only the kinds the stacks show: the legend of a Python-only recording stays as it was.
    let (has, show) = (profile.recorded_frames, profile.frames);
    if (has.native || has.glue) && show.native {
        entries.push((Kind::Native, "native"));
    }
    if has.kernel && show.kernel {
        entries.push((Kind::Kernel, "kernel"));
    }
    entries.push((Kind::Pseudo, "pyperf"));
    if profile.mode.is_time() {
        entries.push((Kind::OffCpu, "off-CPU"));
    }
    let mut x = 10;
    for (kind, name) in entries {
        let (r, g, b) = color(kind, "legend");
        let _ = writeln!(
            s,
            "<rect class=\"legend\" x=\"{x}\" y=\"35\" width=\"11\" height=\"11\" fill=\"rgb({r},{g},{b})\"/>\
             <text class=\"legend\" x=\"{}\" y=\"44\">{name}</text>",
            x + 15
        );
        x += 15 + 7 * name.len() + 14;
    }
    x
}

const STYLE: &str = r#"<style type="text/css">
text { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; fill: #000; }
#title { text-anchor: middle; font-family: sans-serif; font-size: 17px; }
#subtitle { fill: #555; }
#matched, #search, #levels, #all-levels { text-anchor: end; }
#details, #levels, text.legend { fill: #333; }
#background { fill: #f6f6f0; }
.button { cursor: pointer; fill: #1a4f9c; text-decoration: underline; }
.f { cursor: pointer; }
.f:hover rect { stroke: #000; stroke-width: 0.7; }
.f text { pointer-events: none; }
.f.p { opacity: 0.55; }
.h { display: none; }
</style>
"#;

const SCRIPT: &str = include_str!("flamegraph/flamegraph.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_cut_on_the_right() {
        let label = "process_request (handlers.py:18)";
        assert_eq!(fit(label, 1000.0), label);
        // 20 characters of room: 18 kept and `..`.
        let px = 20.5 * CHAR_WIDTH + 2.0 * TEXT_PAD;
        assert_eq!(fit(label, px), "process_request (h..");
        assert_eq!(fit(label, 3.0 * CHAR_WIDTH + 2.0 * TEXT_PAD), "");
        assert_eq!(fit("größe (計算.py:3)", 1000.0), "größe (計算.py:3)");
        assert_eq!(fit("größe (計算.py:3)", 7.5 * CHAR_WIDTH + 2.0 * TEXT_PAD), "größe..");
    }

    #[test]
    fn hostile_text_is_made_visible_and_escaped() {
        let name = "a\u{1b}[31mb\u{202e}c<&>\"'\n\u{7f}\u{85}\u{2067}\u{fffe}";
        let v = visible(name);
        assert_eq!(v, "a\\x1b[31mb\\u{202e}c<&>\"'\\n\\x7f\\x85\\u{2067}\\u{fffe}");
        let mut out = String::new();
        xml(&v, &mut out);
        assert_eq!(out, "a\\x1b[31mb\\u{202e}c&lt;&amp;&gt;&quot;&#39;\\n\\x7f\\x85\\u{2067}\\u{fffe}");
        assert!(matches!(visible("größe (/tmp/計算.py:3)"), Cow::Borrowed(_)));
    }

    #[test]
    fn palette() {
        assert_eq!(kind_of_file("/srv/app/handlers.py"), Kind::App);
        assert_eq!(kind_of_file("/usr/lib/python3.11/json/decoder.py"), Kind::Stdlib);
        assert_eq!(kind_of_file("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py"), Kind::Stdlib);
        assert_eq!(kind_of_file("<frozen importlib._bootstrap>"), Kind::Stdlib);
        assert_eq!(kind_of_file("/v/.venv/lib/python3.12/site-packages/requests/api.py"), Kind::Package);
        assert_eq!(kind_of_file("/usr/lib/python3/dist-packages/yaml/__init__.py"), Kind::Package);
        assert_eq!(kind_of_file("/home/me/python/tool.py"), Kind::App);
        // Stable: the same name always gets the same colour; the line does not matter.
        assert_eq!(color(Kind::App, "main"), color(Kind::App, "main"));
        assert_eq!(color(Kind::App, "main"), (216, 149, 57));
        let (r, g, b) = color(Kind::Pseudo, "[idle]");
        assert!(r == g && g == b);
        // Kernel frames as flamegraph.pl's: orange, red 100 above green, no blue.
        for name in ["do_syscall_64", "ksys_read", "x"] {
            let (r, g, b) = color(Kind::Kernel, name);
            assert!((190..=255).contains(&r) && r - g == 100 && b == 0, "{name}: {r},{g},{b}");
            // Native frames brown: darker than any application frame's red.
            let (r, g, b) = color(Kind::Native, name);
            assert!(r < 215 && g < r && b < g, "{name}: {r},{g},{b}");
        }
    }

    #[test]
    fn short_file_names() {
        let mut ambiguous = FxMap::default();
        ambiguous.insert("util.py", true);
        assert_eq!(short_file("/srv/app/handlers.py", &ambiguous), "handlers.py");
        assert_eq!(short_file("/srv/app/util.py", &ambiguous), "app/util.py");
        assert_eq!(short_file("/srv/requests/__init__.py", &ambiguous), "requests/__init__.py");
        assert_eq!(short_file("__init__.py", &ambiguous), "__init__.py");
        assert_eq!(short_file("<frozen importlib._bootstrap>", &ambiguous), "<frozen importlib._bootstrap>");
        assert_eq!(short_file("/srv/dir/", &ambiguous), "/srv/dir/");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }

    #[test]
    fn the_script_cannot_end_its_cdata_section() {
        assert!(!SCRIPT.contains("]]>"));
    }
}
