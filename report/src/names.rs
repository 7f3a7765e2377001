//! How frames are shown, and how names are made safe for line-based output.
//!
//! A Python frame is `function (file:line)`: the symbol's qualified name (`Class.method`, `outer.<locals>.inner`),
//! then its file and line; without line numbers `function (file)`. A name or file the recorder had to cut
//! ends in `...`. Unresolved frames show whatever name the recorder gave them.
//!
//! Native and kernel frames (format 1.4, `record --native` / `--kernel`; [`frame_name`]):
//! - a native function is `function (library)`, the library's file name: `deflate (libz.so.1.3)`; one no symbol
//!   covers is named by its address in the library, `libfoo.so+0x1a2b (libfoo.so)`; glue frames (the interpreter's
//!   own functions between Python frames, shown with `--show-glue`) are spelled the same;
//! - a kernel function is `function_[k]` (`do_syscall_64_[k]`): the suffix perf, flamegraph.pl and inferno use,
//!   which their palettes colour as kernel code;
//! - the recorder's pseudo-frames are shown as they are named: `[native: unmerged]`, `[native: truncated]`.
//!
//! Pseudo-frames:
//! - `[idle]`: the sample has no Python frames (the thread was not running Python code), nor native or kernel frames
//!   shown; it is the only frame.
//! - `[truncated]`: root of a stack deeper than the recorder's limit (the leaf-side frames are kept).
//! - `[stack error]`: root of a stack whose walk failed part way (the frames read before it are kept).
//! - `[incomplete]`: root of a stack whose walk ended before the thread's base frame (3.15+; the frames read are
//!   kept, the callers below them are missing).
//! - `[stack status unknown-N]`: root of a stack with a status written by a newer pyperf.
//! - `[gc]` (format 1.6): a sample or off-CPU interval taken while the interpreter's cyclic garbage collector ran in
//!   its thread; after its Python frames (and task markers), before its native and kernel frames, which are the
//!   collector's own code (`pyperf report --gc` hides it). One frame of the stack table, added when a profile is
//!   loaded ([`crate::profile`]): every export shows it as the pseudo-frame it is.
//! - `[off-CPU: REASON]` (`--mode off-cpu` and `wall`): leaf of an off-CPU interval's stack, saying why the thread
//!   was off CPU ([`off_cpu_frame`]); an interval without Python frames has it as its only frame.

use pyperf_format::{symbol_flags, FrameKind, OffCpuKind, StackStatus, Symbol};

use crate::syscalls;

/// The only frame of a sample without Python frames.
pub const IDLE: &str = "[idle]";
/// The frame of a sample or interval taken in the garbage collector, after its Python frames.
pub const GC: &str = "[gc]";

/// Where the [`GC`] frame goes in a stack (root first) whose frames are of `kinds`: after its last Python frame, task
/// marker or interpreter boundary, before the native and kernel frames below them (the collector's own code); at the root (0) when it
/// has neither. Every view places it so: the reports, `top` and `--push`.
pub fn gc_index(kinds: impl IntoIterator<Item = pyperf_format::FrameKind>) -> usize {
    use pyperf_format::FrameKind;
    let mut at = 0;
    for (i, kind) in kinds.into_iter().enumerate() {
        if matches!(kind, FrameKind::Python | FrameKind::Task | FrameKind::Interpreter) {
            at = i + 1;
        }
    }
    at
}
/// The library (and name) of native frames in code generated at run time (a JIT's), as the recorder writes them.
pub const JIT: &str = pyperf_format::symbol_flags::JIT_FILE;
/// Root frame of a stack cut at the recorder's depth limit.
pub const TRUNCATED: &str = "[truncated]";
/// Root frame of a stack whose walk failed part way.
pub const STACK_ERROR: &str = "[stack error]";
/// Root frame of a stack whose walk ended before the thread's base frame.
pub const INCOMPLETE: &str = "[incomplete]";

/// The pseudo-frame put at the root of a stack with this status, if any.
pub fn marker(status: StackStatus, has_frames: bool) -> Option<String> {
    match status {
        StackStatus::Complete | StackStatus::Idle if !has_frames => Some(IDLE.to_string()),
        StackStatus::Complete | StackStatus::Idle => None,
        StackStatus::Truncated => Some(TRUNCATED.to_string()),
        StackStatus::Error => Some(STACK_ERROR.to_string()),
        StackStatus::Incomplete => Some(INCOMPLETE.to_string()),
        StackStatus::Unknown(_) => Some(format!("[stack status {}]", status.key())),
    }
}

/// The marker of a stack with this status, for a CPU sample (`off_cpu` false: [`marker`]) or an off-CPU interval:
/// an interval without Python frames has none (its `[off-CPU: ...]` frame says enough; `[idle]` would claim it
/// was on a CPU).
pub fn stack_marker(status: StackStatus, has_frames: bool, off_cpu: bool) -> Option<String> {
    match status {
        StackStatus::Complete | StackStatus::Idle if off_cpu && !has_frames => None,
        _ => marker(status, has_frames),
    }
}

/// How every off-CPU pseudo-frame starts.
pub const OFF_CPU_PREFIX: &str = "[off-CPU: ";

/// The leaf pseudo-frame of an off-CPU interval: why the thread was off CPU. `[off-CPU: GIL wait]`,
/// `[off-CPU: runnable]` (preempted, waiting for a CPU), the system call it blocked in (`[off-CPU: read]`,
/// `[off-CPU: futex]`; numbers named on x86_64 recordings, else `[off-CPU: syscall 7]`), else `[off-CPU: blocked]`
/// or `[off-CPU: disk]` (uninterruptible sleep). A kind of a newer recorder is named by its key
/// (`[off-CPU: unknown-9]`); an unknown one by its system call, else `[off-CPU: unknown]`.
pub fn off_cpu_frame(kind: OffCpuKind, syscall: i32, arch: &str) -> String {
    let reason = match kind {
        OffCpuKind::Gil => "GIL wait".to_string(),
        OffCpuKind::Runnable => "runnable".to_string(),
        OffCpuKind::Unknown(_) => kind.key(),
        OffCpuKind::Blocked | OffCpuKind::Disk | OffCpuKind::Unknown0 => {
            syscalls::name(syscall, arch).unwrap_or_else(|| kind.key())
        }
    };
    format!("{OFF_CPU_PREFIX}{reason}]")
}

/// `Class.method`, with `...` when the recorder cut the name.
pub fn function_name(sym: &Symbol) -> String {
    let mut name = sym.qualified_name();
    if sym.flags & symbol_flags::NAME_CUT != 0 {
        name.push_str("...");
    }
    name
}

/// The file, with `...` when the recorder cut it, `?` when there is none.
pub fn file_name(sym: &Symbol) -> String {
    let mut file = if sym.file.is_empty() { "?".to_string() } else { sym.file.clone() };
    if sym.flags & symbol_flags::FILE_CUT != 0 {
        file.push_str("...");
    }
    file
}

/// The suffix of a kernel frame's name (`do_syscall_64_[k]`), as perf writes it and flamegraph.pl and inferno
/// colour it.
pub const KERNEL_SUFFIX: &str = "_[k]";

/// A native frame's library as frames show it: its file name (`libz.so.1.3`), `?` when unknown, with `...` when the
/// recorder cut the path.
pub fn library_name(sym: &Symbol) -> String {
    let file = sym.file.rsplit('/').next().unwrap_or("");
    let mut name = if file.is_empty() { "?".to_string() } else { file.to_string() };
    if sym.flags & symbol_flags::FILE_CUT != 0 {
        name.push_str("...");
    }
    name
}

/// A frame as every report names it:
/// - Python: `function (file:line)`, or `function (file)` without lines or when the line is unknown (0);
/// - native (glue too): `function (library)`, the library's file name ([`library_name`]);
/// - kernel: `function_[k]` ([`KERNEL_SUFFIX`]);
/// - a recorder's marker: its name, `[native: unmerged]` (bracketed if a crafted file's is not).
///
/// A frame never ends in a bare number (which folded-stack readers would take for a sample count): a location in
/// parentheses or a bracket ends it.
pub fn frame_name(sym: &Symbol, lines: bool) -> String {
    match sym.kind() {
        FrameKind::Python => {
            let (function, file) = (function_name(sym), file_name(sym));
            if lines && sym.line != 0 {
                format!("{function} ({file}:{})", sym.line)
            } else {
                format!("{function} ({file})")
            }
        }
        FrameKind::Native | FrameKind::Glue => format!("{} ({})", function_name(sym), library_name(sym)),
        FrameKind::Kernel => format!("{}{KERNEL_SUFFIX}", function_name(sym)),
        FrameKind::Marker | FrameKind::Task | FrameKind::Interpreter => marker_name(sym),
    }
}

/// The `[interpreter N]` frame of interpreter `id` (format 1.8, [`pyperf_format::symbol_flags::INTERPRETER`]): the
/// recorder's boundary marker, and the root `--interp-root` adds.
pub fn interpreter_marker(id: u32) -> String {
    format!("{}{id}]", pyperf_format::symbol_flags::INTERPRETER_MARKER_PREFIX)
}

/// A `[task NAME]` marker's name (format 1.5, [`pyperf_format::symbol_flags::TASK`]) with the counters of NAME
/// aggregated: each maximal run of ASCII digits becomes `N` (`[task request-36]` -> `[task request-N]`, `[task
/// Task-17 (+2 awaiters)]` -> `[task Task-N (+2 awaiters)]`: the awaiters suffix is kept). `None` when it stays as it
/// is (no digits in NAME, `[asyncio loop]`, not a task marker).
pub fn aggregate_task_name(marker: &str) -> Option<String> {
    let inner = marker.strip_prefix(symbol_flags::TASK_MARKER_PREFIX)?.strip_suffix(']')?;
    let (name, suffix) = split_awaiters(inner);
    if !name.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut out = String::with_capacity(marker.len());
    out.push_str(symbol_flags::TASK_MARKER_PREFIX);
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out.push_str(suffix);
    out.push(']');
    Some(out)
}

/// A task marker's inside split into (NAME, ` (+K awaiters)` suffix or "").
fn split_awaiters(inner: &str) -> (&str, &str) {
    if let Some(open) = inner.rfind(" (+") {
        let tail = &inner[open + 3..];
        if let Some(k) = tail.strip_suffix(" awaiters)") {
            if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) {
                return inner.split_at(open);
            }
        }
    }
    (inner, "")
}

/// The name of the task a `[task NAME]` marker enters, as the task chains of the text report show it: NAME with its
/// awaiters suffix (`request-N (+1 awaiters)`); `[asyncio loop]` as it is.
pub fn task_of_marker(marker: &str) -> &str {
    marker.strip_prefix(symbol_flags::TASK_MARKER_PREFIX).and_then(|m| m.strip_suffix(']')).unwrap_or(marker)
}

/// A recorder's marker frame ([`FrameKind::Marker`]) as shown: its name, `[native: unmerged]`; in brackets if it has
/// none (a crafted file), so that it reads as a pseudo-frame and never ends in a number.
pub fn marker_name(sym: &Symbol) -> String {
    let name = function_name(sym);
    if name.starts_with('[') && name.ends_with(']') {
        name
    } else {
        format!("[{name}]")
    }
}

/// Whether `c` must not reach a terminal (or a line-based file) as it is: control characters (C0, DEL, C1:
/// escape sequences, newlines, carriage returns), the bidirectional-text controls that reorder what a terminal
/// or an editor shows (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source"), and the Unicode
/// line and paragraph separators, which some programs take for line ends.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// Appends `name` made safe for one frame of a folded-stack line: `;` (the frame separator) becomes `\x3b`,
/// unsafe characters ([`is_unsafe`]: newlines, tabs, escape sequences, bidirectional overrides) become `\n`,
/// `\r`, `\t` or `\xNN` / `\u{NNNN}`, and a backslash becomes `\\`, so the escaping is unambiguous and the
/// line format cannot break.
pub fn escape_folded(name: &str, out: &mut String) {
    for c in name.chars() {
        match c {
            ';' => out.push_str(r"\x3b"),
            '\\' => out.push_str(r"\\"),
            c if is_unsafe(c) => escape_char(c, out),
            c => out.push(c),
        }
    }
}

/// `name` made safe for one line of human-facing output (the text report, `dump`, `top`'s view and tables,
/// messages on a terminal): unsafe characters ([`is_unsafe`]) escaped visibly as in [`escape_folded`] (`\x1b`,
/// `\n`, `\u{202e}`), and a backslash doubled (`\\`), so that a name read from a recording or a process can
/// neither drive the terminal nor reorder or hide what is shown around it, and a name spelling `\x1b` itself
/// cannot pass for an escaped ESC.
pub fn escape_text(name: &str) -> String {
    if !name.chars().any(|c| c == '\\' || is_unsafe(c)) {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c == '\\' {
            out.push_str(r"\\");
        } else if is_unsafe(c) {
            escape_char(c, &mut out);
        } else {
            out.push(c);
        }
    }
    out
}

/// The columns `s` takes on a terminal: two for wide characters (CJK, most emoji), none for combining marks.
/// `s` should be escaped ([`escape_text`]): control characters have no width of their own.
pub fn display_width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` (escaped, [`escape_text`]) cut to at most `width` terminal columns ([`display_width`]), a cut one ending
/// in `~`.
pub fn fit_width(s: &str, width: usize) -> String {
    if display_width(s) <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::with_capacity(width * 2);
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > width - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    // A sequence (emoji with a variation selector, joined emoji) may take more than its characters' sum.
    while display_width(&out) > width - 1 {
        out.pop();
    }
    out.push('~');
    out
}

/// Appends the visible escape of an unsafe character: `\n`, `\r`, `\t`, `\xNN` below U+0100, else `\u{NNNN}`.
pub(crate) fn escape_char(c: char, out: &mut String) {
    use std::fmt::Write;
    match c {
        '\n' => out.push_str(r"\n"),
        '\r' => out.push_str(r"\r"),
        '\t' => out.push_str(r"\t"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(scope: &str, name: &str, file: &str, line: u32, flags: u32) -> Symbol {
        Symbol { scope: scope.into(), name: name.into(), file: file.into(), line, flags }
    }

    /// Every run of digits of a task's name is one `N`; the awaiters suffix, `[asyncio loop]` and names without digits
    /// stay as they are.
    #[test]
    fn task_names_aggregate_their_counters() {
        let agg = |m: &str| aggregate_task_name(m);
        assert_eq!(agg("[task request-36]").as_deref(), Some("[task request-N]"));
        assert_eq!(agg("[task Task-17]").as_deref(), Some("[task Task-N]"));
        assert_eq!(agg("[task 12ab345c6]").as_deref(), Some("[task NabNcN]"));
        assert_eq!(agg("[task orders-3 (+12 awaiters)]").as_deref(), Some("[task orders-N (+12 awaiters)]"));
        assert_eq!(agg("[task v2 (+x awaiters)]").as_deref(), Some("[task vN (+x awaiters)]"), "not a suffix");
        assert_eq!(agg("[task main (+1 awaiters)]"), None);
        assert_eq!(agg("[task worker]"), None);
        assert_eq!(agg("[asyncio loop]"), None);
        assert_eq!(agg("[task 7"), None, "no closing bracket: not a marker");
        assert_eq!(agg("[task ١٢]"), None, "ASCII digits only");
        assert_eq!(task_of_marker("[task request-N (+1 awaiters)]"), "request-N (+1 awaiters)");
        assert_eq!(task_of_marker("[asyncio loop]"), "[asyncio loop]");
        let marker = sym("", "[task request-N]", "", 0, symbol_flags::TASK);
        assert_eq!(frame_name(&marker, true), "[task request-N]");
    }

    #[test]
    fn frame_names() {
        assert_eq!(frame_name(&sym("Cls", "run", "/a/b.py", 12, 0), true), "Cls.run (/a/b.py:12)");
        assert_eq!(frame_name(&sym("Cls", "run", "/a/b.py", 12, 0), false), "Cls.run (/a/b.py)");
        assert_eq!(frame_name(&sym("", "<module>", "x.py", 0, 0), true), "<module> (x.py)");
        assert_eq!(frame_name(&sym("", "f", "", 3, 0), true), "f (?:3)");
        assert_eq!(
            frame_name(&sym("", "very_lo", "/very/lo", 3, symbol_flags::NAME_CUT | symbol_flags::FILE_CUT), true),
            "very_lo... (/very/lo...:3)"
        );
    }

    #[test]
    fn native_and_kernel_frame_names() {
        use symbol_flags::{GLUE, KERNEL, MARKER, NATIVE, UNRESOLVED};
        let libz = "/usr/lib/x86_64-linux-gnu/libz.so.1.3";
        assert_eq!(frame_name(&sym("", "deflate", libz, 0, NATIVE), true), "deflate (libz.so.1.3)");
        assert_eq!(frame_name(&sym("", "deflate", libz, 7, NATIVE), false), "deflate (libz.so.1.3)", "no line");
        assert_eq!(
            frame_name(&sym("", "libfoo.so+0x1a2b", "/opt/libfoo.so", 0, NATIVE | UNRESOLVED), true),
            "libfoo.so+0x1a2b (libfoo.so)"
        );
        assert_eq!(frame_name(&sym("", "[unknown]", "", 0, NATIVE | UNRESOLVED), true), "[unknown] (?)");
        assert_eq!(
            frame_name(&sym("", "PyObject_Call", "python3.12", 0, NATIVE | GLUE), true),
            "PyObject_Call (python3.12)"
        );
        assert_eq!(
            frame_name(&sym("", "x", "/very/lo", 0, NATIVE | symbol_flags::NAME_CUT | symbol_flags::FILE_CUT), true),
            "x... (lo...)"
        );
        assert_eq!(frame_name(&sym("", "do_syscall_64", "[kernel.kallsyms]", 0, KERNEL), true), "do_syscall_64_[k]");
        assert_eq!(frame_name(&sym("", "nft_do_chain", "[nf_tables]", 0, KERNEL | NATIVE), true), "nft_do_chain_[k]");
        assert_eq!(frame_name(&sym("", "[native: unmerged]", "", 0, NATIVE | MARKER), true), "[native: unmerged]");
        assert_eq!(frame_name(&sym("", "odd 12", "", 0, NATIVE | MARKER), true), "[odd 12]");
        // GLUE and MARKER mean nothing on a Python frame.
        assert_eq!(frame_name(&sym("", "f", "a.py", 3, GLUE | MARKER), true), "f (a.py:3)");
    }

    #[test]
    fn folded_escaping() {
        let mut out = String::new();
        escape_folded("a;b\nc\\d\te\r\u{1}\u{85}ü;", &mut out);
        assert_eq!(out, r"a\x3bb\nc\\d\te\r\x01\x85ü\x3b");
        assert!(!out.contains(';') && !out.contains('\n'));
        let mut plain = String::new();
        escape_folded("größe (/tmp/計算.py:3)", &mut plain);
        assert_eq!(plain, "größe (/tmp/計算.py:3)");
        assert_eq!(escape_text("a;b\nc"), r"a;b\nc");
    }

    #[test]
    fn a_backslash_is_escaped_so_escapes_are_unambiguous() {
        // A name spelling `\x1b` (four characters) and one holding ESC must not read the same.
        assert_eq!(escape_text(r"a\x1b"), r"a\\x1b");
        assert_eq!(escape_text("a\u{1b}"), r"a\x1b");
        assert_ne!(escape_text(r"a\x1b"), escape_text("a\u{1b}"));
        assert_eq!(escape_text(r"C:\dir\n"), r"C:\\dir\\n");
        // The same as the folded output's escaping, but for `;`.
        let mut folded = String::new();
        escape_folded("x\\y\u{1b}\u{202e}", &mut folded);
        assert_eq!(escape_text("x\\y\u{1b}\u{202e}"), folded);
    }

    #[test]
    fn widths_count_terminal_columns() {
        assert_eq!(display_width("hot_a"), 5);
        assert_eq!(display_width("計算"), 4, "CJK: two columns each");
        assert_eq!(display_width("\u{1f525}x"), 3, "an emoji: two columns");
        assert_eq!(display_width("e\u{301}"), 1, "a combining mark: none");
        assert_eq!(fit_width("hot_a", 5), "hot_a");
        assert_eq!(fit_width("hot_a", 4), "hot~");
        // Cut by columns, not characters: 計算計算 (8 columns) in 5 is 計算 and the mark.
        assert_eq!(fit_width("計算計算", 5), "計算~");
        assert_eq!(fit_width("計算計算", 6), "計算~", "a wide character does not fit in the one column left");
        assert_eq!(fit_width("\u{1f525}\u{1f525}\u{1f525}", 4), "\u{1f525}~");
        assert_eq!(fit_width("ae\u{301}bcd", 3), "ae\u{301}~", "the combining mark stays with its letter");
        for w in 0..12 {
            for s in ["計算_関数_計算", "\u{1f525}a\u{1f525}b", "plain_name_x", "e\u{301}e\u{301}e\u{301}e\u{301}"]
            {
                assert!(display_width(&fit_width(s, w)) <= w, "{s:?} in {w}: {:?}", fit_width(s, w));
            }
        }
    }

    #[test]
    fn terminal_controls_and_bidi_overrides_are_escaped() {
        let hostile = "a\u{1b}[31mred\u{7}\u{202e}evil\u{2066}x\u{2069}\u{200e}\u{200f}\u{61c}\u{2028}\u{9b}";
        let want = r"a\x1b[31mred\x07\u{202e}evil\u{2066}x\u{2069}\u{200e}\u{200f}\u{061c}\u{2028}\x9b";
        assert_eq!(escape_text(hostile), want);
        let mut folded = String::new();
        escape_folded(hostile, &mut folded);
        assert_eq!(folded, want);
        assert!(!escape_text(hostile).chars().any(is_unsafe));
        // Ordinary non-ASCII text, including right-to-left scripts, is left alone.
        for plain in ["größe", "計算", "مرحبا", "שלום", "a\u{200d}b"] {
            assert_eq!(escape_text(plain), plain);
        }
    }

    #[test]
    fn off_cpu_frames() {
        let f = |kind, syscall| off_cpu_frame(kind, syscall, "x86_64");
        assert_eq!(f(OffCpuKind::Gil, 202), "[off-CPU: GIL wait]");
        assert_eq!(f(OffCpuKind::Runnable, 0), "[off-CPU: runnable]");
        assert_eq!(f(OffCpuKind::Blocked, 0), "[off-CPU: read]");
        assert_eq!(f(OffCpuKind::Blocked, 202), "[off-CPU: futex]");
        assert_eq!(f(OffCpuKind::Blocked, 230), "[off-CPU: clock_nanosleep]");
        assert_eq!(f(OffCpuKind::Blocked, 23), "[off-CPU: select]");
        assert_eq!(f(OffCpuKind::Disk, 74), "[off-CPU: fsync]");
        assert_eq!(f(OffCpuKind::Blocked, -1), "[off-CPU: blocked]");
        assert_eq!(f(OffCpuKind::Disk, -1), "[off-CPU: disk]");
        assert_eq!(f(OffCpuKind::Blocked, 400), "[off-CPU: syscall 400]");
        assert_eq!(f(OffCpuKind::Unknown0, -1), "[off-CPU: unknown]");
        assert_eq!(f(OffCpuKind::Unknown0, 7), "[off-CPU: poll]");
        assert_eq!(f(OffCpuKind::Unknown(9), 7), "[off-CPU: unknown-9]");
        assert_eq!(off_cpu_frame(OffCpuKind::Blocked, 0, "aarch64"), "[off-CPU: syscall 0]");
        assert!(f(OffCpuKind::Blocked, 0).starts_with(OFF_CPU_PREFIX));
        assert_eq!(stack_marker(StackStatus::Complete, false, true), None);
        assert_eq!(stack_marker(StackStatus::Idle, false, true), None);
        assert_eq!(stack_marker(StackStatus::Complete, false, false).as_deref(), Some("[idle]"));
        assert_eq!(stack_marker(StackStatus::Error, false, true).as_deref(), Some("[stack error]"));
        assert_eq!(stack_marker(StackStatus::Truncated, true, true).as_deref(), Some("[truncated]"));
    }

    #[test]
    fn markers() {
        assert_eq!(marker(StackStatus::Idle, false).as_deref(), Some("[idle]"));
        assert_eq!(marker(StackStatus::Complete, false).as_deref(), Some("[idle]"));
        assert_eq!(marker(StackStatus::Complete, true), None);
        assert_eq!(marker(StackStatus::Truncated, true).as_deref(), Some("[truncated]"));
        assert_eq!(marker(StackStatus::Error, false).as_deref(), Some("[stack error]"));
        assert_eq!(marker(StackStatus::Incomplete, true).as_deref(), Some("[incomplete]"));
        assert_eq!(marker(StackStatus::Unknown(9), true).as_deref(), Some("[stack status unknown-9]"));
    }
}
