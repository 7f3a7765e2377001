//! Names read from a recording cannot drive the terminal or reorder what it shows: control characters (escape
//! sequences) and bidirectional-text controls in function names, files, commands, thread names, host names,
//! counters and recorder warnings come out escaped, visibly (`\x1b`, `\u{202e}`, a backslash as `\\`), in the text
//! report and in folded stacks.

#[path = "support/synth.rs"]
mod synth;

use pyperf_report::names::is_unsafe;
use pyperf_report::{folded, text, Filter, LoadOptions, Profile};

fn load() -> Profile {
    Profile::load(&synth::hostile_names()[..], &LoadOptions::new(Filter::default(), false)).expect("load")
}

/// The first character a terminal must not get, with what comes before it.
fn first_unsafe(out: &str) -> Option<String> {
    let at = out.char_indices().find(|&(_, c)| c != '\n' && is_unsafe(c))?.0;
    Some(format!("{:?}", &out[at.saturating_sub(40)..at + 4]))
}

#[test]
fn the_text_report_escapes_every_name_from_the_file() {
    let out = text::render(&load(), &text::Options::default());
    assert_eq!(first_unsafe(&out), None, "{out}");
    for shown in [
        r"host\x1b]0;pwned\x07",                         // host name
        r"python3 'evil\x1b[2J.py' \u{202e}txt.exe",     // process command (title and process list)
        r"/usr/bin/python3\r\x1b[1A",                    // interpreter
        r"/x\x1b[8m.scope",                              // cgroup
        r"newer \x1b[5m\u{202e}blink",                   // recorder warning
        r"C\u{200f}.f\x1b[31m\u{202e}red",               // function
        r"(/tmp/\u{2066}x\u{2069}.py\x1b[0m)",           // its file
        r"g\u{061c}\u{200e}\\x1b  (/tmp/b\u{2028}c.py)", // function (a backslash in it doubled) and file
        r"thread 7 (th\x1b[7m\u{202e}read)",             // thread name
        r"c\x1b[41m 1",                                  // counter
    ] {
        assert!(out.contains(shown), "{shown} not in:\n{out}");
    }
    // A backslash in a name is doubled: a name spelling `\x1b` does not read as one holding ESC.
    assert!(!out.contains(r"\u{200e}\x1b"), "{out}");
    // Top stacks too.
    assert!(out.contains(r"        C\u{200f}.f\x1b[31m\u{202e}red (/tmp/\u{2066}x\u{2069}.py\x1b[0m:3)"), "{out}");
}

#[test]
fn folded_stacks_escape_every_name_from_the_file() {
    let p = load();
    let mut o = folded::Options::default();
    o.pid_root = true;
    o.tid_root = true;
    let mut out = Vec::new();
    folded::write(&p, &o, &mut out).expect("write");
    let out = String::from_utf8(out).expect("utf-8");
    assert_eq!(first_unsafe(&out), None, "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.starts_with(
        r"python3 [pid 7];thread 7 (th\x1b[7m\u{202e}read);C\u{200f}.f\x1b[31m\u{202e}red (/tmp/\u{2066}x\u{2069}.py\x1b[0m:3);g\u{061c}\u{200e}\\x1b (/tmp/b\u{2028}c.py:4) 2"
    ), "{out}");
}
