//! The `pyperf-report` binary: exit codes, one-line errors, warnings on stderr, closed pipes, and output files
//! written like recordings (never through a symlink, never over the input or another recording, 0600, complete or
//! not at all). Some tests mount a tmpfs or drop privileges: run as root (they fail, never skip, otherwise).

#[path = "support/synth.rs"]
mod synth;

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
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
    let hint = "record one with `pyperf record`, or give an existing recording's path";
    assert_error(
        &run(dir.path(), &[]),
        &format!("pyperf-report: cannot open prof.pyp: No such file or directory; {hint}"),
    );
    assert_error(
        &run(dir.path(), &["-i", "nope/x.pyp", "--folded"]),
        &format!("pyperf-report: cannot open nope/x.pyp: No such file or directory; {hint}"),
    );
    assert_error(
        &run(dir.path(), &["nope.pyp"]),
        &format!("pyperf-report: cannot open nope.pyp: No such file or directory; {hint}"),
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
        "pyperf-report: cannot read text.pyp: not a pyperf recording (wrong magic bytes); give a .pyp file written by \
         `pyperf record`",
    );

    let mut newer = synth::recording("killed");
    newer[8..10].copy_from_slice(&2u16.to_le_bytes());
    newer[10..12].copy_from_slice(&3u16.to_le_bytes());
    write(dir.path(), "newer.pyp", &newer);
    assert_error(
        &run(dir.path(), &["-i", "newer.pyp", "--speedscope"]),
        &format!(
            "pyperf-report: cannot read newer.pyp: recording format 2.3 is newer than this pyperf reads ({}.{}); \
             upgrade pyperf to read it",
            pyperf_format::MAJOR,
            pyperf_format::MINOR
        ),
    );

    // Cut inside the header chunk: nothing to report.
    write(dir.path(), "stub.pyp", &synth::recording("killed")[..40]);
    let o = run(dir.path(), &["-i", "stub.pyp"]);
    assert_eq!(o.status.code(), Some(1));
    assert_error(
        &o,
        "pyperf-report: cannot read stub.pyp: recording cut off at byte 40 after 0 complete chunks; nothing to report \
         before it (copy the whole recording)",
    );

    // Nothing on standard input.
    let o = Command::new(BIN).args(["-i", "-"]).stdin(Stdio::null()).output().expect("run");
    assert_error(&o, "pyperf-report: cannot read standard input: it is empty, not a recording");
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
    // An empty value is refused, not taken for no filter.
    assert_error(
        &run(dir.path(), &["--gil", ""]),
        "pyperf-report: --gil needs a GIL state, got an empty one; valid: no-info, error, uninitialized, released, \
         held, held-by-current, other-thread, held-no-holder, waiting",
    );
    for (flag, what) in [("--status", "stack status"), ("--thread-state", "thread state"), ("--pthread-id", "pthread")]
    {
        let o = run(dir.path(), &[flag, ""]);
        assert_eq!(o.status.code(), Some(1), "{flag} ''");
        assert!(stderr(&o).starts_with(&format!("pyperf-report: {flag} needs a {what}")), "{}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    for empty in [&["--gil", "held,"][..], &["--gil=,"], &["--pid", ""], &["--tid", ""]] {
        let o = run(dir.path(), empty);
        assert_ne!(o.status.code(), Some(0), "{empty:?}");
        assert!(o.stdout.is_empty(), "{empty:?}");
    }
    // Not a number: clap's usage error, exit code 2.
    let o = run(dir.path(), &["--pid", "abc"]);
    assert_eq!(o.status.code(), Some(2));
    // Two formats at once.
    let o = run(dir.path(), &["--folded", "--text"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn nothing_to_draw_is_an_error_for_the_flame_graph_and_speedscope_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    // speedscope cannot open a file without profiles: as for the flame graph, say why instead of writing one.
    for format in ["--flamegraph", "--speedscope"] {
        assert_error(
            &run(dir.path(), &[format, "--pid", "1"]),
            "pyperf-report: no samples to draw (none in the recording, or none matches the filters)",
        );
    }
    let o = run(dir.path(), &["--folded", "--pid", "1"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
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

/// `dir`'s entries, sorted: a failed write must leave no temporary file behind.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// `sh -c '"$0" "$@" REDIRECTION' BIN ARGS...`: the binary with a shell redirection of its own (`>&-`).
fn run_redirected(dir: &Path, redirection: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$0\" \"$@\" {redirection}"))
        .arg(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run sh")
}

fn assert_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "{what}: run this test as root");
}

/// The scenario of a shared /tmp: another user plants `out.svg -> /etc/something` and waits for root to write the
/// report. The symlink is refused; its target keeps its bytes and mode; nothing is created next to it.
#[test]
fn planted_symlink_is_refused_and_its_target_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let victim = write(dir.path(), "victim", b"precious\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    symlink(&victim, dir.path().join("out.svg")).expect("symlink");
    for args in [&["--flamegraph", "-o", "out.svg"][..], &["--folded", "-o", "out.svg", "--force"]] {
        assert_error(
            &run(dir.path(), args),
            "pyperf-report: cannot write out.svg: it is a symbolic link; not writing through it (remove it or choose \
             another name)",
        );
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious\n");
        assert_eq!(mode(&victim), 0o644);
        assert_eq!(std::fs::read_link(dir.path().join("out.svg")).expect("still a symlink"), victim);
        assert_eq!(entries(dir.path()), ["out.svg", "prof.pyp", "victim"]);
    }
    // A dangling one: its target is not created.
    symlink(dir.path().join("nowhere"), dir.path().join("dangling.svg")).expect("symlink");
    let o = run(dir.path(), &["--flamegraph", "-o", "dangling.svg"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!dir.path().join("nowhere").exists());
}

/// A hard link to the input is the input (same device and inode), whatever its name; `--force` does not change that.
#[test]
fn hard_link_to_the_input_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = synth::recording("mixed");
    let input = write(dir.path(), "prof.pyp", &bytes);
    std::fs::hard_link(&input, dir.path().join("out.folded")).expect("link");
    for args in [&["--folded", "-o", "out.folded"][..], &["prof.pyp", "-o", "out.folded", "--force"]] {
        assert_error(
            &run(dir.path(), args),
            "pyperf-report: cannot write out.folded: it is the input recording; not overwriting it",
        );
        assert_eq!(std::fs::read(&input).expect("input"), bytes);
        assert_eq!(std::fs::metadata(&input).expect("input").nlink(), 2);
        assert_eq!(entries(dir.path()), ["out.folded", "prof.pyp"]);
    }
}

/// `-i - -o FILE < FILE`: standard input is the output file; it is recognised by its inode, before it is read.
#[test]
fn standard_input_redirected_from_the_output_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = synth::recording("mixed");
    let path = write(dir.path(), "run.pyp", &bytes);
    for force in [false, true] {
        let mut args = vec!["-i", "-", "--folded", "-o", "run.pyp"];
        if force {
            args.push("--force");
        }
        let o = Command::new(BIN)
            .args(&args)
            .current_dir(dir.path())
            .stdin(File::open(&path).expect("open"))
            .output()
            .expect("run");
        assert_error(&o, "pyperf-report: cannot write run.pyp: it is the input recording; not overwriting it");
        assert_eq!(std::fs::read(&path).expect("recording"), bytes);
        assert_eq!(entries(dir.path()), ["run.pyp"]);
    }
    // Standard input from another file: fine.
    let other = write(dir.path(), "other.pyp", &bytes);
    let o = Command::new(BIN)
        .args(["-i", "-", "--folded", "-o", "out.folded"])
        .current_dir(dir.path())
        .stdin(File::open(&other).expect("open"))
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(dir.path().join("out.folded")).expect("out").contains("tool.py"));
}

/// Another recording at the output path (told by its magic bytes, whatever its name) is kept unless `--force`.
#[test]
fn existing_recording_is_replaced_only_with_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let old = synth::recording("killed");
    let target = write(dir.path(), "flame.svg", &old);
    assert_error(
        &run(dir.path(), &["--flamegraph", "-o", "flame.svg"]),
        "pyperf-report: cannot write flame.svg: it is a pyperf recording; not replacing it (--force replaces it)",
    );
    assert_eq!(std::fs::read(&target).expect("kept"), old);
    assert_eq!(entries(dir.path()), ["flame.svg", "prof.pyp"]);

    let o = run(dir.path(), &["--flamegraph", "-o", "flame.svg", "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&target).expect("replaced").starts_with("<?xml"));
    assert_eq!(mode(&target), 0o600);
    assert_eq!(entries(dir.path()), ["flame.svg", "prof.pyp"]);

    // --force means nothing without -o.
    let o = run(dir.path(), &["--force"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Created 0600 (as recordings: stacks reveal code and command lines) whatever the umask; an existing report
/// (not a recording) is replaced, and its looser mode is not kept.
#[test]
fn output_is_created_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let o = run_redirected(dir.path(), "", &["--folded", "-o", "new.folded"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(mode(&dir.path().join("new.folded")), 0o600);
    // A umask that would take the owner's read permission away.
    let o = Command::new("sh")
        .args(["-c", "umask 0477 && exec \"$0\" --folded -o masked.folded"])
        .arg(BIN)
        .current_dir(dir.path())
        .output()
        .expect("sh");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(mode(&dir.path().join("masked.folded")), 0o600);

    let old = write(dir.path(), "old.folded", b"an older report\n");
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let o = run(dir.path(), &["--folded", "-o", "old.folded"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(mode(&old), 0o600);
    assert_eq!(std::fs::read(&old).expect("new"), std::fs::read(dir.path().join("new.folded")).expect("new"));
    assert_eq!(entries(dir.path()), ["masked.folded", "new.folded", "old.folded", "prof.pyp"]);
}

/// A directory, a FIFO (nobody reads it: writing would block, or hand the report to whoever planted it) and a
/// device at the output path are refused at once, before the input is read.
#[test]
fn non_regular_outputs_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    assert_error(
        &run(dir.path(), &["--folded", "-o", "sub"]),
        "pyperf-report: cannot write sub: it is a directory; give the report a file name (-o DIR/NAME)",
    );
    let fifo = Command::new("mkfifo").arg(dir.path().join("fifo")).status().expect("mkfifo");
    assert!(fifo.success());
    for target in ["fifo", "/dev/null"] {
        assert_error(
            &run(dir.path(), &["--folded", "-o", target]),
            &format!(
                "pyperf-report: cannot write {target}: it is not a regular file; -o writes regular files only \
                 (redirect standard output instead)"
            ),
        );
    }
    assert!(std::fs::symlink_metadata("/dev/null").expect("/dev/null").file_type().is_char_device());
}

/// A tmpfs mounted for one test, unmounted however the test ends.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        assert_root("mounting a tmpfs");
        std::fs::create_dir(at).expect("mkdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(at)
            .status()
            .expect("mount");
        assert!(status.success(), "mount -t tmpfs failed");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The disk fills while the report is written: the error is one line, the previous report is byte-identical and
/// no temporary file is left (the report goes to a temporary file renamed over the old one only when complete).
#[test]
fn full_disk_leaves_the_old_output_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let mnt = dir.path().join("mnt");
    let _tmpfs = Tmpfs::mount(&mnt, "64k");
    let old: Vec<u8> = (0..3000u32).flat_map(|i| (i as u8).to_le_bytes()).collect();
    let target = write(&mnt, "flame.svg", &old);
    // 48 KiB of the 64: the ~32 KiB flame graph does not fit in what is left.
    write(&mnt, "filler", &vec![7u8; 48 << 10]);
    let o = run(dir.path(), &["--flamegraph", "-o", "mnt/flame.svg"]);
    assert_error(&o, "pyperf-report: cannot write mnt/flame.svg: No space left on device");
    assert_eq!(std::fs::read(&target).expect("old"), old);
    assert_eq!(entries(&mnt), ["filler", "flame.svg"]);

    // With room, the same command replaces it: the failure was the full disk.
    std::fs::remove_file(mnt.join("filler")).expect("rm");
    let o = run(dir.path(), &["--flamegraph", "-o", "mnt/flame.svg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&target).expect("new").trim_end().ends_with("</svg>"));
    assert_eq!(entries(&mnt), ["flame.svg"]);
}

/// The output file is writable but its directory is not: the report cannot be put in place by a rename, and
/// says so in one line; the file is left as it was.
#[test]
fn unwritable_directory_is_one_clear_error() {
    assert_root("running as nobody");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let input = write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).expect("mkdir");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let target = write(&ro, "out.folded", b"old\n");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN, "--folded", "-o", "ro/out.folded"])
        .current_dir(dir.path())
        .output()
        .expect("setpriv");
    assert_error(
        &o,
        "pyperf-report: cannot write ro/out.folded: cannot create a file in ro (Permission denied); the report is \
         written to a new file there, then renamed over the old one, so the directory must be writable",
    );
    assert_eq!(std::fs::read(&target).expect("old"), b"old\n");
    assert_eq!(entries(&ro), ["out.folded"]);
}

/// `--no-native`, `--no-kernel` and `--show-glue` on a recording without native or kernel frames: accepted without a
/// word, the same report. On one with them, they change the stacks (the golden tests have what into what).
#[test]
fn native_frame_options_are_accepted_silently() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    write(dir.path(), "native.pyp", &synth::recording("native"));
    let plain = run(dir.path(), &["--folded"]);
    assert!(plain.status.success() && plain.stderr.is_empty(), "{}", stderr(&plain));
    for options in
        [&["--no-native"][..], &["--no-kernel"], &["--show-glue"], &["--no-native", "--no-kernel", "--show-glue"]]
    {
        let args: Vec<&str> = ["--folded"].iter().chain(options).copied().collect();
        let o = run(dir.path(), &args);
        assert!(o.status.success() && o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
        assert_eq!(o.stdout, plain.stdout, "{args:?}");
        let args: Vec<&str> = args.into_iter().chain(["native.pyp"]).collect();
        let o = run(dir.path(), &args);
        assert!(o.status.success() && o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
    }
    let help = String::from_utf8(run(dir.path(), &["--help"]).stdout).expect("utf-8");
    for flag in ["--no-native", "--no-kernel", "--show-glue"] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

/// `pyperf report prof.pyp` is `pyperf report -i prof.pyp`; both at once is a usage error.
#[test]
fn positional_recording() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "run.pyp", &synth::recording("mixed"));
    let by_flag = run(dir.path(), &["-i", "run.pyp", "--folded"]);
    let positional = run(dir.path(), &["run.pyp", "--folded"]);
    assert_eq!(by_flag.status.code(), Some(0), "{}", stderr(&by_flag));
    assert_eq!(positional.status.code(), Some(0), "{}", stderr(&positional));
    assert!(!positional.stdout.is_empty());
    assert_eq!(positional.stdout, by_flag.stdout);
    // After the flags too, and `-` for standard input.
    assert_eq!(run(dir.path(), &["--folded", "run.pyp"]).stdout, by_flag.stdout);
    let o = Command::new(BIN)
        .args(["--folded", "-"])
        .stdin(File::open(dir.path().join("run.pyp")).expect("open"))
        .output()
        .expect("run");
    assert_eq!(o.stdout, by_flag.stdout);

    let o = run(dir.path(), &["-i", "run.pyp", "run.pyp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(
        stderr(&o).starts_with("error: the argument '--input <FILE>' cannot be used with '[RECORDING]...'\n"),
        "{}",
        stderr(&o)
    );
}

/// Every option with a default shows it in --help.
#[test]
fn help_shows_the_defaults() {
    let o = run(Path::new("/"), &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8(o.stdout).expect("utf-8");
    let line = |start: &str| {
        help.lines().find(|l| l.trim_start().starts_with(start)).unwrap_or_else(|| panic!("no {start}: {help}"))
    };
    assert!(line("[RECORDING]").ends_with("[default: prof.pyp]"), "{help}");
    assert!(line("-i, --input <FILE>").ends_with("[default: prof.pyp]"), "{help}");
    assert!(line("--text").ends_with("[default]"), "{help}");
    assert!(line("-o, --output <FILE>").ends_with("[default: standard output]"), "{help}");
    assert!(line("--top <N>").ends_with("[default: 20]"), "{help}");
    let mode = line("--mode <MODE>");
    assert!(mode.ends_with("[default: cpu]"), "{help}");
    for value in ["cpu: CPU samples", "off-cpu: time off CPU", "wall: both"] {
        assert!(mode.contains(value), "{help}");
    }
    assert!(line("--title <TEXT>").ends_with("[default: the recorded command]"), "{help}");
    let gc = line("--gc <MODE>");
    assert!(gc.ends_with("[default: mark]"), "{help}");
    for value in ["mark: kept, with a `[gc]` frame", "hide: kept, without it", "only: only them", "drop: left out"] {
        assert!(gc.contains(value), "{help}");
    }
}

/// `script` runs a command with a pseudo-terminal as standard output; its output (CR LF line ends) comes back on
/// its own standard output, and with -e its exit code is the command's.
fn run_in_terminal(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let command: Vec<String> = std::iter::once(BIN).chain(args.iter().copied()).map(quote).collect();
    let o = Command::new("script")
        .args(["-qec", &command.join(" "), "/dev/null"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n"))
}

/// SVG and JSON to a terminal are refused with a hint (at once: the input is not read); text and folded stacks
/// are for terminals; `-o` and a pipe are fine.
#[test]
fn flamegraph_and_speedscope_to_a_terminal_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    let (code, out) = run_in_terminal(dir.path(), &["--flamegraph"]);
    assert_eq!(
        out,
        "pyperf-report: not writing an SVG flame graph to a terminal: use -o flame.svg (or redirect standard output)\n"
    );
    assert_eq!(code, Some(1));
    let (code, out) = run_in_terminal(dir.path(), &["--speedscope", "-i", "missing.pyp"]);
    assert_eq!(
        out,
        "pyperf-report: not writing speedscope JSON to a terminal: use -o prof.speedscope.json (or redirect standard \
         output)\n"
    );
    assert_eq!(code, Some(1));

    let (code, out) = run_in_terminal(dir.path(), &["--flamegraph", "-o", "flame.svg"]);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    assert!(std::fs::read_to_string(dir.path().join("flame.svg")).expect("svg").starts_with("<?xml"));
    let (code, out) = run_in_terminal(dir.path(), &["--folded"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("tool.py"), "{out}");
    let o = run(dir.path(), &["--flamegraph"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Standard output on a full device: one line, exit code 1, for the report and for --help.
#[test]
fn full_standard_output_is_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    for args in [&["--folded"][..], &["--flamegraph"], &["--text"], &["--help"], &["--version"]] {
        let o = run_redirected(dir.path(), ">/dev/full", args);
        assert_eq!(stderr(&o), "pyperf-report: cannot write standard output: No space left on device\n", "{args:?}");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
    }
}

/// Started with standard output closed (`>&-`): the report would vanish (the runtime puts /dev/null there), so it
/// is an error, before the input is read. `-o FILE` needs no standard output.
#[test]
fn closed_standard_output_is_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("mixed"));
    for args in [&["--folded"][..], &["--text", "-i", "missing.pyp"], &["--help"]] {
        let o = run_redirected(dir.path(), ">&-", args);
        assert_eq!(stderr(&o), "pyperf-report: cannot write standard output: it is closed\n", "{args:?}");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
    }
    let o = run_redirected(dir.path(), ">&-", &["--folded", "-o", "out.folded"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(dir.path().join("out.folded")).expect("out").contains("tool.py"));
    // And with standard error closed too: no panic, the exit code still tells.
    let o = run_redirected(dir.path(), ">&- 2>&-", &["--folded"]);
    assert_eq!(o.status.code(), Some(1));
}

/// `--mode off-cpu` and `--mode wall` need off-CPU data, and wall a time per CPU sample: one line each, in every
/// format, before anything is written.
#[test]
fn modes_that_cannot_report_a_recording_are_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("killed"));
    let none =
        "pyperf-report: prof.pyp has no off-CPU data (recorded without --off-cpu): use --mode cpu, or record with \
                pyperf record --off-cpu";
    for mode in ["off-cpu", "wall"] {
        for format in ["--text", "--folded", "--speedscope", "--flamegraph"] {
            assert_error(&run(dir.path(), &[format, "--mode", mode, "-o", "out"]), none);
            assert!(!dir.path().join("out").exists());
        }
    }
    let o = Command::new(BIN)
        .args(["-i", "-", "--mode", "wall", "--folded"])
        .stdin(File::open(dir.path().join("prof.pyp")).expect("open"))
        .output()
        .expect("run");
    assert_error(&o, &none.replace("prof.pyp", "standard input"));

    // Samples of a cycles counter are no fixed time: no wall-clock time, but off-CPU time is fine.
    write(dir.path(), "cycles.pyp", &synth::small_offcpu("cycles", pyperf_format::Rate::Period(100_000)));
    let cycles = "pyperf-report: cycles.pyp was recorded with -e cycles -c 100000: a CPU sample is no fixed time, so \
                  it cannot be added to off-CPU time for --mode wall; use --mode off-cpu or --mode cpu (or record \
                  with -F HZ)";
    assert_error(&run(dir.path(), &["cycles.pyp", "--mode", "wall"]), cycles);
    let o = Command::new(BIN)
        .args(["-i", "-", "--mode", "wall"])
        .stdin(File::open(dir.path().join("cycles.pyp")).expect("open"))
        .output()
        .expect("run");
    assert_error(&o, &cycles.replace("cycles.pyp", "standard input"));
    let o = run(dir.path(), &["cycles.pyp", "--mode", "off-cpu", "--folded"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "f (/t.py:3);[off-CPU: read] 60000\nf (/t.py:3);[off-CPU: runnable] 38000\n"
    );
    let o = run(dir.path(), &["cycles.pyp", "--mode", "off-cpu"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("a CPU sample of cycles is no fixed time"), "{text}");
    assert!(text.contains("    running             ? ms      ?  2 samples, each of unknown time\n"), "{text}");

    // cpu mode reads any recording, and a clock event reports wall-clock time.
    write(dir.path(), "clock.pyp", &synth::small_offcpu("cpu-clock", pyperf_format::Rate::Period(1_000_000)));
    let o = run(dir.path(), &["clock.pyp", "--mode", "wall", "--folded"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "f (/t.py:3) 2000\nf (/t.py:3);[off-CPU: read] 60000\nf (/t.py:3);[off-CPU: runnable] 38000\n"
    );
    assert_eq!(run(dir.path(), &["prof.pyp", "--mode", "cpu"]).status.code(), Some(0));

    // Not a mode: clap's usage error, exit code 2, listing the modes.
    let o = run(dir.path(), &["--mode", "offcpu"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("[possible values: cpu, off-cpu, wall]"), "{}", stderr(&o));
}

/// Nothing matches: the flame graph and speedscope say so in the mode's words.
#[test]
fn nothing_to_draw_in_off_cpu_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "prof.pyp", &synth::recording("offcpu"));
    for format in ["--flamegraph", "--speedscope"] {
        assert_error(
            &run(dir.path(), &[format, "--mode", "off-cpu", "--pid", "1"]),
            "pyperf-report: no off-CPU intervals to draw (none in the recording, or none matches the filters)",
        );
        assert_error(
            &run(dir.path(), &[format, "--mode", "wall", "--tid", "1"]),
            "pyperf-report: no samples or off-CPU intervals to draw (none in the recording, or none matches the \
             filters)",
        );
    }
    // A thread-state filter selects samples only: off-CPU intervals have none.
    let o = run(dir.path(), &["--folded", "--mode", "off-cpu", "--thread-state", "current"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let o = run(dir.path(), &["--folded", "--mode", "wall", "--thread-state", "current", "--tid", "501"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("[off-CPU"));
}

/// `--gc MODE` in every export: mark (the default) adds `[gc]` frames, hide keeps the samples without them, only keeps
/// the collector's samples, drop leaves them out; several recordings and a diff keep them apart the same way. A bad
/// or empty mode is one line listing the modes.
#[test]
fn gc_modes_and_a_bad_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gc.pyp", &synth::recording("gc"));
    let stdout = |args: &[&str]| {
        let o = run(dir.path(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        String::from_utf8(o.stdout).expect("utf-8")
    };
    let total = |folded: &str| -> u64 {
        folded.lines().map(|l| l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).expect("count")).sum()
    };
    let gc_lines = |folded: &str| folded.lines().filter(|l| l.contains("[gc]")).count();
    for (mode, marked) in [(None, 5), (Some("mark"), 5), (Some("hide"), 0)] {
        let mut args = vec!["gc.pyp", "--folded"];
        args.extend(mode.iter().flat_map(|m| ["--gc", m]));
        let folded = stdout(&args);
        assert_eq!(total(&folded), 105, "{mode:?}");
        assert_eq!(gc_lines(&folded), marked, "{mode:?}: {folded}");
    }
    let only = stdout(&["gc.pyp", "--folded", "--gc", "only"]);
    assert_eq!((total(&only), gc_lines(&only), only.lines().count()), (40, 5, 5), "{only}");
    let drop = stdout(&["gc.pyp", "--folded", "--gc", "drop"]);
    assert_eq!((total(&drop), gc_lines(&drop)), (65, 0), "{drop}");
    for format in ["--text", "--speedscope", "--pprof", "--gecko", "--flamegraph"] {
        let out = |mode: &str| {
            let o = run(dir.path(), &["gc.pyp", format, "--gc", mode, "-o", "out"]);
            assert_eq!(o.status.code(), Some(0), "{format} {mode}: {}", stderr(&o));
            std::fs::read(dir.path().join("out")).expect("output")
        };
        let has_gc = |bytes: &[u8]| bytes.windows(4).any(|w| w == b"[gc]");
        if format != "--pprof" {
            assert!(has_gc(&out("mark")) && has_gc(&out("only")), "{format}");
            assert!(!has_gc(&out("drop")), "{format}");
        }
    }
    // Several recordings as one, and a diff: the same frames.
    write(dir.path(), "gc2.pyp", &synth::recording("gc"));
    let twice = stdout(&["-i", "gc.pyp", "-i", "gc2.pyp", "--folded", "--gc", "only"]);
    assert_eq!(total(&twice), 80);
    let diff = stdout(&["gc.pyp", "--diff", "gc.pyp", "--folded"]);
    assert_eq!(gc_lines(&diff), 5, "{diff}");
    let text = stdout(&["gc.pyp", "--gc", "hide"]);
    assert!(text.contains("  python3.13 [pid 800]: 40 of 105 samples in the collector (38.1%)\n"), "{text}");
    assert!(text.contains("  garbage collection not marked (--gc hide): 105 of 105 samples (100.0%)\n"), "{text}");
    // A recording without garbage collection flags: no section, and nothing in it is in the collector.
    write(dir.path(), "old.pyp", &synth::recording("killed"));
    assert!(!stdout(&["old.pyp"]).contains("Garbage collection"));
    assert_eq!(stdout(&["old.pyp", "--folded", "--gc", "only"]), "");

    let modes = "valid: mark, hide, only, drop";
    assert_error(
        &run(dir.path(), &["gc.pyp", "--gc", "marked"]),
        &format!("pyperf-report: unknown garbage collection mode 'marked'; {modes}"),
    );
    assert_error(
        &run(dir.path(), &["gc.pyp", "--gc", ""]),
        &format!("pyperf-report: --gc needs a garbage collection mode, got an empty one; {modes}"),
    );
}
