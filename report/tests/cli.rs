//! The `pyperf-report` binary: exit codes, one-line errors, warnings on stderr, closed pipes.

#[path = "support/synth.rs"]
mod synth;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_pyperf-report");

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).args(args).current_dir(dir).output().expect("run pyperf-report")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

/// Fails with exit code 1 and exactly this one line on stderr, nothing on stdout.
fn assert_error(o: &Output, line: &str) {
    assert_eq!(stderr(o), format!("{line}\n"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(o.stdout.is_empty());
}

#[test]
fn missing_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_error(&run(dir.path(), &[]), "pyperf-report: cannot open prof.pyp: No such file or directory");
    assert_error(
        &run(dir.path(), &["-i", "nope/x.pyp", "--folded"]),
        "pyperf-report: cannot open nope/x.pyp: No such file or directory",
    );
}

#[test]
fn default_input_is_prof_pyp() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("killed"));
    let o = run(dir.path(), &[]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(text.starts_with("Recording\n"), "{text}");
    assert!(text.contains("/usr/bin/python3.12 -u serve.py --port 8080"));
}

#[test]
fn directory_empty_file_wrong_magic_newer_major() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("d.pyp")).expect("mkdir");
    assert_error(
        &run(dir.path(), &["-i", "d.pyp"]),
        "pyperf-report: cannot open d.pyp: is a directory, not a recording",
    );

    write(dir.path(), "empty.pyp", b"");
    assert_error(
        &run(dir.path(), &["-i", "empty.pyp"]),
        "pyperf-report: cannot open empty.pyp: file is empty, not a recording",
    );

    write(dir.path(), "text.pyp", b"this is not a recording at all\n");
    assert_error(
        &run(dir.path(), &["-i", "text.pyp"]),
        "pyperf-report: cannot read text.pyp: not a pyperf recording (wrong magic bytes)",
    );

    let mut newer = synth::recording("killed");
    newer[8..10].copy_from_slice(&2u16.to_le_bytes());
    newer[10..12].copy_from_slice(&3u16.to_le_bytes());
    write(dir.path(), "newer.pyp", &newer);
    assert_error(
        &run(dir.path(), &["-i", "newer.pyp", "--speedscope"]),
        "pyperf-report: cannot read newer.pyp: recording format 2.3 is newer than this pyperf reads (1.1); \
         upgrade pyperf to read it",
    );

    // Cut inside the header chunk: nothing to report.
    write(dir.path(), "stub.pyp", &synth::recording("killed")[..40]);
    let o = run(dir.path(), &["-i", "stub.pyp"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("pyperf-report: cannot read stub.pyp: recording cut off at byte"), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1);
}

#[test]
fn warnings_go_to_stderr_and_into_the_text_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = synth::recording("cutoff");
    write(dir.path(), "cut.pyp", &bytes);
    let o = run(dir.path(), &["-i", "cut.pyp", "--folded"]);
    assert_eq!(o.status.code(), Some(0));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    let cut = format!("pyperf-report: warning: recording cut off at byte {}", bytes.len());
    assert!(lines[0].starts_with(&cut), "{err}");
    assert!(lines[1].starts_with("pyperf-report: warning: recording has no trailer"), "{err}");
    assert!(!o.stdout.is_empty());

    let o = run(dir.path(), &["-i", "cut.pyp"]);
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(text.contains(&format!("\nWarnings\n  recording cut off at byte {}", bytes.len())), "{text}");
}

#[test]
fn bad_filter_keys_list_the_valid_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("killed"));
    assert_error(
        &run(dir.path(), &["--gil", "held,nope"]),
        "pyperf-report: unknown GIL state 'nope'; valid: no-info, error, uninitialized, released, held, \
         held-by-current, other-thread, held-no-holder, waiting",
    );
    assert_error(
        &run(dir.path(), &["--status", "running"]),
        "pyperf-report: unknown stack status 'running'; valid: complete, error, truncated, idle, incomplete",
    );
    // Not a number: clap's usage error, exit code 2.
    let o = run(dir.path(), &["--pid", "abc"]);
    assert_eq!(o.status.code(), Some(2));
    // Two formats at once.
    let o = run(dir.path(), &["--folded", "--text"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn nothing_to_draw_is_an_error_for_the_flame_graph_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    assert_error(
        &run(dir.path(), &["--flamegraph", "--pid", "1"]),
        "pyperf-report: no samples to draw (none in the recording, or none matches the filters)",
    );
    let o = run(dir.path(), &["--folded", "--pid", "1"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    let o = run(dir.path(), &["--speedscope", "--pid", "1"]);
    assert_eq!(o.status.code(), Some(0));
    let o = run(dir.path(), &["--pid", "1"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("pid 1: 0 of 1200 samples"));
}

#[test]
fn output_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let o = run(dir.path(), &["--flamegraph", "-o", "out.svg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let svg = std::fs::read_to_string(dir.path().join("out.svg")).expect("svg");
    assert!(svg.starts_with("<?xml"));
    assert!(svg.trim_end().ends_with("</svg>"));

    assert_error(
        &run(dir.path(), &["--folded", "-o", "missing/out.folded"]),
        "pyperf-report: cannot write missing/out.folded: No such file or directory",
    );
    assert_error(
        &run(dir.path(), &["--folded", "-o", "./prof.pyp"]),
        "pyperf-report: cannot write ./prof.pyp: it is the input recording; not overwriting it",
    );
    // An unreadable input leaves an existing output alone.
    write(dir.path(), "old.folded", b"old\n");
    let o = run(dir.path(), &["-i", "nope.pyp", "--folded", "-o", "old.folded"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(dir.path().join("old.folded")).expect("old"), b"old\n");
}

#[test]
fn standard_input() {
    let mut child = Command::new(BIN)
        .args(["-i", "-", "--folded"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(&synth::recording("newer-minor")).expect("feed");
    drop(stdin);
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "<module> (/x/job.py:1) 5\n<module> (/x/job.py:1);step (/x/job.py:2) 15\n"
    );
}

/// `pyperf-report ... | head`: the reader goes away; that is success, silently.
#[test]
fn closed_pipe_is_success() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Enough output to fill the pipe (64 KiB) so the writer must see the reader go.
    let path = write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    for format in ["--speedscope", "--flamegraph", "--text", "--folded"] {
        let mut child = Command::new(BIN)
            .args(["-i", path.to_str().expect("utf-8 path"), format])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut first = [0u8; 10];
        stdout.read_exact(&mut first).expect("some output");
        drop(stdout);
        let o = child.wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{format}");
    }
}
