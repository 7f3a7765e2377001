//! `pyperf top`, end to end: the plain tables (stdout not a terminal), the terminal view driven in a real
//! terminal (tmux: send-keys, capture-pane) with its keys and every way out restoring the terminal, and memory
//! that stays flat over a long `-a` run while Python processes come and go. Real BPF, real Python (pyenv
//! 3.11.7); run as root. tmux comes from scripts/setup; without it the terminal test fails.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PYTHON: &str = "3.11.7";

/// The function rows of the first complete table in `text` after `from`: (own %, total %, function).
fn rows(text: &str) -> Vec<(f64, f64, String)> {
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("%OWN") {
            if in_table {
                break;
            }
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 6 {
            if !out.is_empty() {
                break;
            }
            continue;
        }
        let (Ok(own), Ok(total)) = (cols[0].parse::<f64>(), cols[1].parse::<f64>()) else { break };
        // A function's name, or a whole pseudo-frame (`[off-CPU: GIL wait]`).
        let name = if cols[5].starts_with('[') { cols[5..].join(" ") } else { cols[5].to_string() };
        out.push((own, total, name));
    }
    out
}

/// A workload of its own (`python SCRIPT 120`), killed on drop, once its interpreter can be inspected: `top -p` on
/// it can then be ended by a signal without ending a command of its own (whose status pyperf would exit with).
struct Workload(Kid);

impl Workload {
    fn start(script: &str) -> Workload {
        let child = Command::new(interpreter(PYTHON)).arg(workload(script)).arg("120").spawn().expect("the workload");
        inspect_when_ready(child.id());
        Workload(Kid(child))
    }

    fn pid(&self) -> String {
        self.0 .0.id().to_string()
    }
}

/// The complete tables of plain `top` output (the last one, which may still be being written, left out).
fn complete_tables(stdout: &str) -> Vec<&str> {
    let mut t: Vec<&str> = stdout.split("pyperf top - ").skip(1).collect();
    t.pop();
    t
}

/// Runs `pyperf top ARGS` with stdout a pipe (the plain tables) until `enough` holds of its complete tables and its
/// pid (asked every 100 ms, for at most `limit`), then ends it as Ctrl-C does; its output.
fn top_until(args: &[&str], limit: Duration, mut enough: impl FnMut(&[&str], u32) -> bool) -> std::process::Output {
    use std::sync::{Arc, Mutex};
    let mut top = pyperf()
        .arg("top")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pyperf top");
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let stdout = stdout.clone();
        let mut out = top.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n @ 1..) = std::io::Read::read(&mut out, &mut buf) {
                stdout.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&stdout.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let t0 = Instant::now();
    while !enough(&complete_tables(&text()), top.id()) {
        let done = top.try_wait().expect("pyperf top's status");
        assert!(done.is_none() && t0.elapsed() < limit, "not enough within {limit:?} ({done:?}):\n{}", text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: plain kill(2) of a child this test started and has not waited for yet.
    assert_eq!(unsafe { libc::kill(top.id() as i32, libc::SIGINT) }, 0, "SIGINT to pyperf top");
    let mut out = top.wait_with_output().expect("pyperf top");
    reader.join().expect("reader");
    out.stdout = std::mem::take(&mut *stdout.lock().unwrap_or_else(|e| e.into_inner()));
    out
}

#[test]
fn plain_tables_when_stdout_is_not_a_terminal() {
    let _guard = serial();
    let (_dir, file) = scratch("top.pyp");
    let target = Workload::start("top.py");
    // The worker's first samples may come a few tables late on a busy machine (the thread's start): from the first
    // table with hot_a first and hot_b on, each has both threads' functions in their proportions, and so has the
    // since-start table. It runs until three such tables have come.
    let steady = |t: &&str| {
        let r = rows(t);
        r.first().is_some_and(|r| r.2 == "hot_a") && r.iter().any(|r| r.2 == "hot_b")
    };
    let file_arg = file.to_str().expect("UTF-8 path");
    let out = top_until(&["--interval", "1", "--rows", "6", "-o", file_arg, "-p", &target.pid()], STEP * 4, |t, _| {
        t.iter().position(steady).is_some_and(|first| t.len() - first >= 3)
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    let tables: Vec<&str> = stdout.split("pyperf top - ").skip(1).collect();
    let last = tables.last().expect("a table");
    assert!(last.contains("since start"), "{last}");
    for t in &tables {
        assert!(rows(t).len() <= 6, "--rows 6: {t}");
    }
    let first = tables.iter().position(steady).expect("a table with hot_a first and hot_b");
    assert!(first + 4 <= tables.len(), "hot_b only from table {first} of {}", tables.len());
    for t in &tables[first..] {
        let r = rows(t);
        assert_eq!(r.first().map(|r| r.2.as_str()), Some("hot_a"), "the hot function first: {t}");
        assert!(r[0].0 > 50.0, "hot_a's own share: {r:?}");
        assert!(r.iter().any(|r| r.2 == "hot_b" && r.0 > 2.0 && r.0 < 40.0), "the worker's function: {r:?}");
    }
    // -o: the recording `record -o` would have written, readable by the report.
    let rep = pyperf().arg("report").arg(&file).args(["--folded"]).output().expect("pyperf report");
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let folded = String::from_utf8_lossy(&rep.stdout);
    let count = |pred: &dyn Fn(&str) -> bool| -> u64 {
        folded.lines().filter(|l| pred(l)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
    };
    let (hot, all) = (count(&|l| l.contains("hot_a")), count(&|_| true));
    // Every sample the summary counts (how many a busy machine lets the workload run for), mostly hot_a's.
    let said: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pyperf: ")?.split(", ").nth(1)?.strip_suffix(" samples")?.parse().ok())
        .expect("the summary's sample count");
    // (The folded counts are CPU time: the periods stolen by the host are in the file and the summary, not in them.)
    let stolen = read(&file).samples.iter().filter(|s| s.stolen).count() as u64;
    assert_eq!(all + stolen, said, "the -o recording's samples ({stolen} stolen)\n{folded}");
    assert!(hot > 0 && hot * 2 > all, "hot_a's samples in the -o recording: {hot} of {all}\n{folded}");
}

/// A tmux server of its own (its socket in a temporary directory), one window of 150x40 running bash.
struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start() -> Tmux {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("tmux.sock");
        let t = Tmux { socket, _dir: dir };
        let ok = t
            .cmd(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "40", "bash --norc --noprofile"])
            .status()
            .unwrap_or_else(|e| panic!("tmux is needed (scripts/setup installs it): {e}"));
        assert!(ok.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).args(args);
        c
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().expect("tmux send-keys").success());
    }

    fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p", "-t", "top"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn alternate_screen(&self) -> bool {
        let out = self.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"]).output().expect("tmux display");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// The pane's title, which an OSC 0 or 2 written to the terminal sets.
    fn title(&self) -> String {
        let out = self.cmd(&["display", "-p", "-t", "top", "#{pane_title}"]).output().expect("tmux display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits up to `limit` for `pred` on the screen; the screen and the time it took.
    fn wait(&self, limit: Duration, what: &str, pred: impl Fn(&str) -> bool) -> (String, Duration) {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            // A capture can catch the view mid-redraw (a frame is a few KB, which tmux takes from the pty in
            // pieces): new rows above, the last frame's below (seen once: a table "sorted by total" whose lower
            // half was the previous second's). The screen counts once it holds still for a moment.
            if pred(&s) && {
                std::thread::sleep(Duration::from_millis(100));
                self.screen() == s
            } {
                return (s, t0.elapsed());
            }
            assert!(t0.elapsed() < limit, "{what}: not within {limit:?}; the screen:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

/// Runs `pyperf top ARGS` in the tmux window, between two `stty -a` (kept in `dir`), and ends with DONE-`n`.
fn start_top(t: &Tmux, dir: &Path, n: u32, args: &str) {
    let pyperf = env!("CARGO_BIN_EXE_pyperf");
    let d = dir.display();
    t.line(&format!("clear; stty -a > {d}/before-{n}; {pyperf} top {args}; stty -a > {d}/after-{n}; echo DONE-{n}"));
}

/// The view has ended: DONE-`n` is printed, the terminal is out of the alternate screen and its settings are the
/// ones it had before.
fn check_restored(t: &Tmux, dir: &Path, n: u32, how: &str) -> String {
    let (screen, _) = t.wait(Duration::from_secs(15), &format!("{how}: the end"), |s| {
        s.lines().any(|l| l.trim() == format!("DONE-{n}"))
    });
    assert!(!t.alternate_screen(), "{how}: still on the alternate screen:\n{screen}");
    let before = std::fs::read_to_string(dir.join(format!("before-{n}"))).expect("stty before");
    let after = std::fs::read_to_string(dir.join(format!("after-{n}"))).expect("stty after");
    assert_eq!(before, after, "{how}: the terminal's settings were not restored");
    screen
}

/// The first data row of the view on `screen`.
fn first_row(screen: &str) -> Option<(f64, f64, String)> {
    rows(screen).into_iter().next()
}

/// The view's second line (time, window, mode, sort, filter).
fn head(screen: &str) -> Option<&str> {
    screen.lines().nth(1)
}

fn table_of(screen: &str) -> Vec<String> {
    let mut lines: Vec<String> = screen.lines().skip(2).map(str::to_string).collect();
    lines.retain(|l| !l.trim().is_empty() && !l.starts_with("q quit"));
    lines
}

/// Both threads' functions are in the view's table: the worker has been sampled too.
fn both_threads(screen: &str) -> bool {
    let r = rows(screen);
    r.iter().any(|r| r.2 == "hot_a") && r.iter().any(|r| r.2 == "hot_b")
}

/// The function names of the view's table on `screen`.
fn names(screen: &str) -> Vec<String> {
    rows(screen).into_iter().map(|r| r.2).collect()
}

/// How long a step of the terminal test may take: generous, for a debug build on a busy machine. Each step waits
/// for the screen it asserts, so a fast machine never waits this long.
const STEP: Duration = Duration::from_secs(30);

/// The pid of the `pyperf top` the tmux window's shell runs (its child), for a SIGTERM that reaches that one only.
fn top_pid(t: &Tmux) -> Option<u32> {
    let out = t.cmd(&["display", "-p", "-t", "top", "#{pane_pid}"]).output().ok()?;
    let shell: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    children(shell).into_iter().find(|(_, comm)| comm == "pyperf").map(|(pid, _)| pid)
}

/// The one child of `pid` (the command `pyperf top -- CMD` runs), if it has exactly one.
fn child_of(pid: u32) -> Option<u32> {
    match children(pid).as_slice() {
        [(child, _)] => Some(*child),
        _ => None,
    }
}

/// The children of `parent`: (pid, command name).
fn children(parent: u32) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`: the comm may hold spaces, so read after its last ')'.
            let (head, rest) = stat.rsplit_once(')')?;
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            let comm = head.split_once('(')?.1.to_string();
            (ppid == parent).then_some((pid, comm))
        })
        .collect()
}

#[test]
fn terminal_view_keys_and_every_way_out() {
    let _guard = serial();
    let python = interpreter(PYTHON);
    let work = workload("top.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Tmux::start();
    // bash's prompt: it reads what is typed from then on.
    t.wait(STEP, "bash's prompt", |s| !s.trim().is_empty());
    let cmd = format!("-- {} {} 120", python.display(), work.display());

    // 1. Keys, then q. The keys are pressed once both threads have samples (the worker's come later than the
    // main thread's, and slowly on a busy machine), and each key's effect is waited for.
    start_top(&t, dir.path(), 1, &cmd);
    let (screen, took) = t.wait(STEP, "the view with hot_a first and the worker's hot_b", |s| {
        s.starts_with("pyperf top - ") && first_row(s).is_some_and(|r| r.2 == "hot_a") && both_threads(s)
    });
    eprintln!("hot_a first and hot_b seen after {took:?}:\n{screen}");
    assert!(t.alternate_screen(), "the view is on the alternate screen");
    assert!(screen.contains("q quit"), "the key help: {screen}");

    t.keys(&["t"]);
    let (screen, _) = t.wait(STEP, "sort by total, with hot_b", |s| s.contains("sort: total") && both_threads(s));
    let r = rows(&screen);
    assert!(r.windows(2).all(|w| w[0].1 >= w[1].1), "sorted by total: {screen}");
    let b = r.iter().position(|r| r.2 == "hot_b").expect("hot_b");
    assert!(r[..b].iter().any(|r| r.0 == 0.0), "callers (no own time) before hot_b: {screen}");
    t.keys(&["o"]);
    t.wait(STEP, "sort by own", |s| s.contains("sort: own"));

    // f: the process, then its main thread (only hot_a's stack), then the worker (only hot_b's).
    t.keys(&["f"]);
    t.wait(STEP, "process filter", |s| head(s).is_some_and(|l| l.contains("process python")));
    t.keys(&["f"]);
    let (screen, _) = t.wait(STEP, "main thread filter, with hot_a", |s| {
        head(s).is_some_and(|l| l.contains("thread MainThread")) && names(s).contains(&"hot_a".to_string())
    });
    assert!(!names(&screen).contains(&"hot_b".to_string()), "{screen}");
    t.keys(&["f"]);
    let (screen, _) = t.wait(STEP, "worker filter, with hot_b", |s| {
        head(s).is_some_and(|l| l.contains("thread worker")) && names(s).contains(&"hot_b".to_string())
    });
    assert!(!names(&screen).contains(&"hot_a".to_string()), "{screen}");
    t.keys(&["a"]);
    t.wait(STEP, "all threads", |s| head(s).is_some_and(|l| l.contains("all threads")));

    // p: the table stands still (the header says PAUSED) until p again. That nothing changes is seen once an
    // unpaused table would have changed: after more than two refreshes of 1 s, and once the workload has run (on a
    // busy machine it may get little CPU meanwhile) for new samples.
    t.keys(&["p"]);
    let (paused, _) = t.wait(STEP, "paused", |s| s.contains("PAUSED"));
    let target = top_pid(&t).and_then(child_of).expect("the workload pyperf top runs");
    let cpu0 = cpu_time(target).expect("the workload's CPU time");
    let t0 = Instant::now();
    let (later, _) = t.wait(STEP, "2.5 s and 0.5 s of the workload's CPU, paused", |_| {
        t0.elapsed() >= Duration::from_millis(2500)
            && cpu_time(target).is_some_and(|c| c >= cpu0 + Duration::from_millis(500))
    });
    assert!(later.contains("PAUSED"), "{later}");
    assert_eq!(table_of(&paused), table_of(&later), "paused, the table changed");
    t.keys(&["p"]);
    t.wait(STEP, "running again", |s| !s.contains("PAUSED") && table_of(s) != table_of(&paused));

    t.keys(&["q"]);
    let screen = check_restored(&t, dir.path(), 1, "q");
    assert!(screen.contains("since start"), "the since-start table after the view: {screen}");

    // 2. Ctrl-C.
    start_top(&t, dir.path(), 2, &cmd);
    t.wait(STEP, "the view (2)", |s| s.starts_with("pyperf top - ") && first_row(s).is_some_and(|r| r.2 == "hot_a"));
    assert!(t.alternate_screen());
    t.keys(&["C-c"]);
    check_restored(&t, dir.path(), 2, "Ctrl-C");

    // 3. The target exits (the command ends by itself after 3 s). The view is up before the command starts.
    start_top(&t, dir.path(), 3, &format!("-- {} {} 3", python.display(), work.display()));
    t.wait(STEP, "the view (3)", |s| s.starts_with("pyperf top - ") || s.lines().any(|l| l.trim() == "DONE-3"));
    check_restored(&t, dir.path(), 3, "the target's exit");

    // 4. SIGTERM from elsewhere, to this test's `pyperf top` only.
    start_top(&t, dir.path(), 4, &cmd);
    t.wait(STEP, "the view (4)", |s| s.starts_with("pyperf top - ") && first_row(s).is_some_and(|r| r.2 == "hot_a"));
    assert!(t.alternate_screen());
    let pid = top_pid(&t).expect("the pyperf top the shell runs");
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0, "kill {pid}");
    check_restored(&t, dir.path(), 4, "SIGTERM");

    // 5. An error at the start (no such process): one line, the terminal as it was.
    start_top(&t, dir.path(), 5, "-p 999999999");
    let screen = check_restored(&t, dir.path(), 5, "an error");
    assert!(screen.contains("pyperf: "), "{screen}");
}

/// What the functions of testdata/workloads/hostile_names.py look like, escaped: (a part of the name before
/// anything to escape, the escaped name).
const HOSTILE: [(&str, &str); 6] = [
    ("title", r"title\x1b]0;PWNED\x07"),
    ("clear", r"clear\x1b[2J\x1b[H"),
    ("csi", r"csi\x9b31mred"),
    ("bidi", r"bidi\u{202e}evil"),
    ("fake", r"fake\n  99.9    99.9        999        999   100  FAKEROW (x.py:1)"),
    ("in_hostile_file", r"in_hostile_file (/tmp/file\x1b]0;FILEPWNED\x07.py:"),
];

/// Whether `c` could drive a terminal or reorder what it shows (a line end aside).
fn unsafe_char(c: char) -> bool {
    c != '\n' && pyperf_report::names::is_unsafe(c)
}

/// Function names that hold an OSC setting the title, a clear-screen, a C1 CSI, a bidi override, a newline and a
/// fake row, and wide characters, in the terminal view (tmux): shown escaped, one row each, the pane's title and
/// the screen untouched, a wide name cut by columns so that it does not wrap.
#[test]
fn hostile_names_cannot_drive_the_terminal() {
    let _guard = serial();
    let python = interpreter(PYTHON);
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Tmux::start();
    t.wait(STEP, "bash's prompt", |s| !s.trim().is_empty());
    let title = t.title();
    let cmd = format!("-- {} {} 120", python.display(), workload("hostile_names.py").display());
    start_top(&t, dir.path(), 1, &cmd);
    t.wait(STEP, "the view", |s| s.starts_with("pyperf top - "));
    // Since the start: every function stays on the table once sampled.
    t.keys(&["w"]);
    let (screen, _) = t.wait(STEP, "every hostile name escaped, in a whole view", |s| {
        s.starts_with("pyperf top - ")
            && head(s).is_some_and(|l| l.contains("since start"))
            && s.contains("q quit")
            && HOSTILE.iter().all(|(_, escaped)| s.contains(escaped))
            && s.contains("emoji_\u{1f525}\u{1f525}")
            && s.contains("wide_計算")
    });
    eprintln!("{screen}");
    assert_eq!(t.title(), title, "a name set the pane's title");
    // The fake row is part of its name's line; no table row is made of it.
    for l in screen.lines().filter(|l| l.contains("FAKEROW")) {
        assert!(l.contains(r"fake\n"), "a line of its own: {l}\n{screen}");
    }
    assert!(!rows(&screen).iter().any(|r| r.2 == "FAKEROW"), "{screen}");
    // 60 CJK characters twice: more than the 150 columns, cut to them (a cut by characters would wrap).
    let wide = screen.lines().find(|l| l.contains("wide_")).expect("the wide name");
    assert!(wide.ends_with('~'), "the wide name cut at the pane's width: {wide}\n{screen}");
    assert!(pyperf_report::names::display_width(wide) <= 150, "{wide}");
    t.keys(&["q"]);
    let screen = check_restored(&t, dir.path(), 1, "q");
    assert!(screen.contains(HOSTILE[0].1), "the since-start table, escaped: {screen}");
    assert_eq!(t.title(), title, "the since-start table set the pane's title");
}

/// The same names in the plain tables (stdout not a terminal): nothing in them that could drive a terminal, each
/// name on its own row, escaped as everywhere.
#[test]
fn hostile_names_in_the_plain_tables() {
    let _guard = serial();
    let target = Workload::start("hostile_names.py");
    // Until three of the names have been sampled (the check below), however slowly a busy machine runs it.
    let sampled =
        |t: &[&str]| HOSTILE.iter().filter(|(start, _)| t.iter().any(|t| t.contains(&format!("  {start}")))).count();
    let out = top_until(&["--interval", "1", "--rows", "40", "-p", &target.pid()], STEP * 4, |t, _| sampled(t) >= 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!out.stdout.contains(&0x1b), "an ESC on stdout: {}", String::from_utf8_lossy(&out.stdout));
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 tables");
    eprintln!("{stdout}\n{stderr}");
    let bad: Vec<&str> = stdout.lines().filter(|l| l.chars().any(unsafe_char)).collect();
    assert!(bad.is_empty(), "control or bidi characters: {bad:?}");
    // Each name that was sampled is shown escaped, whole, on its line (the fake row too).
    let mut seen = 0;
    for (start, escaped) in HOSTILE {
        let lines: Vec<&str> = stdout.lines().filter(|l| l.contains(&format!("  {start}"))).collect();
        for l in &lines {
            assert!(l.contains(escaped), "{start}: {l}");
        }
        seen += usize::from(!lines.is_empty());
    }
    assert!(seen >= 3, "hostile names sampled: {seen}\n{stdout}");
    for l in stdout.lines().filter(|l| l.contains("FAKEROW")) {
        assert!(l.contains(r"fake\n"), "a line of its own: {l}");
    }
    for l in stdout.lines() {
        assert!(pyperf_report::names::display_width(l) <= 200, "wider than the table's 200 columns: {l}");
    }
}

/// VmRSS of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// `top -a` while a short-lived Python process (two threads, names of its own, functions of its own module) starts
/// every 100 ms: its resident memory stays flat once it has seen the first hundred come and go. Measured by the
/// churn's own count, not by time: a loaded machine starts fewer processes a second, and starts pyperf slower.
#[test]
fn memory_stays_flat_with_churning_processes() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    // Processes started after the view first shows the churn's function: the RSS peaks of [EARLY, LATE) and of
    // [LATE, END] are compared.
    const EARLY: u64 = 100;
    const LATE: u64 = 300;
    const END: u64 = 450;
    let _guard = serial();
    let python = interpreter(PYTHON);
    // Prints the number of processes it has started, a line each; runs until killed.
    let mut churn = Command::new(&python)
        .arg("-c")
        .arg(
            r#"
import subprocess, sys, time
child = '''
import threading, time, os
def busy(end):
    x = 0
    while time.time() < end:
        x = (x + 1) & 0xFFFF
end = time.time() + 0.3
t = threading.Thread(target=busy, args=(end,), name="w-%d" % os.getpid())
t.start()
busy(end)
t.join()
'''
procs = []
started = 0
while True:
    procs.append(subprocess.Popen([sys.executable, "-c", child]))
    started += 1
    sys.stdout.write("%d\n" % started)
    sys.stdout.flush()
    procs = [p for p in procs if p.poll() is None]
    time.sleep(0.1)
"#,
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("the churn");
    let churned = Arc::new(AtomicU64::new(0));
    {
        let churned = churned.clone();
        let out = churn.stdout.take().expect("the churn's stdout");
        std::thread::spawn(move || {
            for n in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
                churned.store(n.trim().parse().unwrap_or(0), Ordering::SeqCst);
            }
        });
    }
    let t0 = Instant::now();
    while churned.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < STEP, "the churn started no process within {STEP:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // From the first table with the churn's function (from then on pyperf follows the churn), every second: (processes
    // started since, RSS KiB, tables so far), until END more have come and gone.
    let mut base = None;
    let mut samples = Vec::new();
    let mut next = Instant::now();
    // Rows enough for the churn's functions among those of whatever other Python runs on the host meanwhile.
    let out = top_until(&["-a", "--interval", "1", "--rows", "100"], Duration::from_secs(600), |t, pid| {
        let churned = churned.load(Ordering::SeqCst);
        if base.is_none() && t.iter().any(|t| t.contains("busy")) {
            base = Some(churned);
        }
        let Some(base) = base else { return false };
        if Instant::now() >= next {
            next = Instant::now() + Duration::from_secs(1);
            samples.push((churned - base, rss_kib(pid), t.len()));
        }
        churned - base >= END
    });
    let _ = churn.kill();
    let _ = churn.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("(processes, RSS KiB, tables): {samples:?}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    let peak = |from: u64, to: u64| samples.iter().filter(|s| (from..to).contains(&s.0)).map(|s| s.1).max();
    let (Some(early), Some(late)) = (peak(EARLY, LATE), peak(LATE, u64::MAX)) else {
        panic!("RSS samples from {EARLY} to {LATE} processes and after: {samples:?}")
    };
    // The tables kept coming while memory was measured.
    let at_late = samples.iter().find(|s| s.0 >= LATE).map_or(0, |s| s.2);
    let tables = complete_tables(&String::from_utf8_lossy(&out.stdout)).len();
    assert!(tables > at_late, "no table after {LATE} processes: {samples:?}");
    // Flat: the peak of the last processes no higher (give or take 1 MiB of allocator noise) than that of the
    // earlier ones. Not the spread of all samples: `-a` follows every Python on the host, and on a shared machine
    // the others' come and go too, moving RSS a few MiB down and up again.
    assert!(late <= early + 1024, "RSS grew from a peak of {early} KiB to {late} KiB: {samples:?}");
}

/// `--off-cpu`: the view counts wall-clock time; the worker's sleeps show as `[off-CPU: clock_nanosleep]` (its
/// own share of the two threads' time about a quarter) and waits for the GIL as `[off-CPU: GIL wait]`.
#[test]
fn off_cpu_wall_view() {
    let _guard = serial();
    let target = Workload::start("top.py");
    // Until three tables have the worker's sleeps (the shares below are those of the since-start table after them).
    let out = top_until(&["--off-cpu", "--interval", "1", "--rows", "12", "-p", &target.pid()], STEP * 4, |t, _| {
        t.iter().filter(|t| t.contains("[off-CPU: clock_nanosleep]")).count() >= 3
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    let last = stdout.split("pyperf top - ").last().expect("a table");
    assert!(last.contains("wall (CPU + off-CPU) time") && last.contains("of wall time: off-CPU"), "{last}");
    let r = rows(last);
    let sleep = r.iter().find(|r| r.2 == "[off-CPU: clock_nanosleep]").map(|r| r.0);
    assert!(sleep.is_some_and(|s| s > 10.0 && s < 45.0), "the worker's sleeps: {r:?}");
    // hot_a's total, not its own share: on a busy machine much of the main thread's time in it is spent waiting
    // for a CPU (`[off-CPU: runnable]` under hot_a), and that is still its wall-clock time.
    assert!(r.iter().any(|r| r.2 == "hot_a" && r.1 > 20.0), "{r:?}");
}
