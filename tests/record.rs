//! End to end: the real BPF program samples real Python processes; we read back what `pyperf record` wrote.
//! Needs root (CI is root). Interpreters: pyenv's 3.11.7 (shared libpython, PIE) and Debian's python3.11
//! (interpreter in a non-PIE executable with .symtab stripped).

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use pyperf_format::{GilState, StackStatus};

const HEAVY: &[&str] = &["<module>", "main", "Runner.run", "heavy", "burn"];
const LIGHT: &[&str] = &["<module>", "main", "Runner.run", "light", "burn"];

/// Records `split.py` under `-- CMD` and checks frames, work split, GIL state and threads.
fn split_workload(python: &str) {
    let _guard = serial();
    let py = interpreter(python);
    let (_dir, out) = scratch("split.pyp");
    let o = run(pyperf()
        .args(["record", "-F", "499", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(workload("split.py"))
        .args(["3", "--threads", "2", "--thread-seconds", "1.5"]));
    assert!(o.status.success(), "pyperf record failed: {:?}", o.status);
    let truth = split_truth(&o.stdout);
    let rec = read(&out);
    assert!(rec.warnings.is_empty(), "{:?}", rec.warnings);
    let stats = rec.tables.stats.clone().expect("trailer");
    assert_eq!(stats.samples as usize, rec.samples.len());
    assert_eq!(rec.tables.processes.len(), 1, "{:?}", rec.tables.processes);
    let pid = rec.tables.processes[0].pid;
    assert!(rec.tables.processes[0].python_version.starts_with("3.11."));

    // Root to leaf, exactly, for the leaf function of both branches.
    let heavy = rec.with_frame("heavy");
    let light = rec.with_frame("light");
    assert!(heavy.len() > 300, "only {} heavy samples", heavy.len());
    let exact = |v: &[&S], want: &[&str]| v.iter().filter(|s| s.names == want).count();
    assert!(exact(&heavy, HEAVY) * 10 >= heavy.len() * 9, "heavy stacks: {:?}", &heavy[..5]);
    assert!(exact(&light, LIGHT) * 10 >= light.len() * 9, "light stacks: {:?}", &light[..5]);

    // heavy does 3x the work of light; the samples split as the workload's own CPU clock did.
    assert_share(python, heavy.len(), heavy.len() + light.len(), truth);

    // Single-threaded and CPU-bound: the sampled thread holds the GIL.
    let main_phase: Vec<&S> = rec.samples.iter().filter(|s| s.names.iter().any(|n| n == "Runner.run")).collect();
    let held = main_phase.iter().filter(|s| s.gil == GilState::ThisThread).count();
    assert!(held * 100 >= main_phase.len() * 95, "GIL held in {held} of {}", main_phase.len());
    let complete = main_phase.iter().filter(|s| s.status == StackStatus::Complete).count();
    assert!(complete * 100 >= main_phase.len() * 99, "{complete} complete of {}", main_phase.len());

    // The two spin threads: distinct tids, none of them the main thread.
    let main_tids: HashSet<u32> = main_phase.iter().map(|s| s.tid).collect();
    assert_eq!(main_tids, HashSet::from([pid]));
    let spin_tids: HashSet<u32> = rec.with_frame("spin").iter().map(|s| s.tid).collect();
    assert_eq!(spin_tids.len(), 2, "spin threads {spin_tids:?}");
    assert!(!spin_tids.contains(&pid));
    for s in rec.with_frame("spin") {
        assert_eq!(
            s.names[..2],
            ["Thread._bootstrap".to_string(), "Thread._bootstrap_inner".to_string()],
            "{:?}",
            s.names
        );
    }
}

per_interpreter! { split_workload:
    split_pyenv_3_11("3.11.7"),
    split_debian_3_11("debian-3.11"),
}

#[test]
fn command_exit_status_is_propagated() {
    let _guard = serial();
    let (_dir, out) = scratch("exit.pyp");
    let py = interpreter("3.11.7");
    let o = run(pyperf().args(["record", "-o"]).arg(&out).arg("--").arg(&py).args(["-c", "import sys; sys.exit(3)"]));
    assert_eq!(o.status.code(), Some(3));
    assert!(out.exists());
    let o = run(pyperf().args(["record", "-o"]).arg(&out).arg("--").arg(&py).args(["-c", "pass"]));
    assert_eq!(o.status.code(), Some(0));
    assert!(out.with_extension("pyp.old").exists(), "the previous recording is kept");
}

#[test]
fn attach_to_running_pid() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let mut child = start_workload(&py, "split.py", &["30"]);
    let (_dir, out) = scratch("pid.pyp");
    // Until the target has had 2 s of CPU (~400 samples at 199 Hz), however long a loaded machine takes.
    let mut rec =
        pyperf().args(["record", "-F", "199", "-p", &child.id().to_string(), "-o"]).arg(&out).spawn().unwrap();
    wait_recording(&out);
    wait_cpu(child.id(), 2.0);
    let status = interrupt(&mut rec);
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.success());
    let rec = read(&out);
    let mine = rec.of_pid(child.id());
    assert!(mine.len() > 200, "{} samples", mine.len());
    assert!(mine.iter().all(|s| s.names.first().map(String::as_str) == Some("<module>")));
    assert!(rec.with_frame("Runner.run").len() * 10 >= mine.len() * 9);
}

#[test]
fn all_processes_picks_up_a_process_started_later() {
    let _guard = serial();
    let (_dir, out) = scratch("all.pyp");
    let mut rec_proc = pyperf().args(["record", "-a", "-F", "199", "-o"]).arg(&out).spawn().unwrap();
    // Started once the recorder records, and recorded to its end (not a fixed -d a loaded machine could outlast).
    wait_recording(&out);
    let py = interpreter("3.11.7");
    let mut child = start_workload(&py, "split.py", &["30"]);
    let pid = child.id();
    // 1.5 s of its CPU: ~300 samples at 199 Hz, less the time until a scan finds it.
    wait_cpu(pid, 1.5);
    assert!(interrupt(&mut rec_proc).success());
    let _ = child.kill();
    let _ = child.wait();
    let rec = read(&out);
    assert!(rec.tables.processes.iter().any(|p| p.pid == pid), "{:?}", rec.tables.processes);
    let mine = rec.of_pid(pid);
    assert!(mine.len() > 100, "{} samples of the late process", mine.len());
    assert!(mine.iter().any(|s| s.names.iter().any(|n| n == "heavy")));
}

#[test]
fn clear_errors_and_no_file_on_failed_start() {
    let _guard = serial();
    let (dir, out) = scratch("fail.pyp");
    // No such process.
    let o = run(pyperf().args(["record", "-p", "999999999", "-o"]).arg(&out));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("999999999") && err.contains("no such process"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Not a Python process.
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let o = run(pyperf().args(["record", "-p", &sleeper.id().to_string(), "-o"]).arg(&out));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a Python process"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists(), "a failed start left {}", out.display());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn unprivileged_user_gets_a_clear_error() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    // A directory the unprivileged user may write to, so that only the missing privilege can fail.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = dir.path().join("x.pyp");
    let o = run(std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(env!("CARGO_BIN_EXE_pyperf"))
        .args(["record", "-a", "-d", "1", "-o"])
        .arg(&out));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("root") && err.contains("CAP_BPF"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

/// A seccomp filter refusing bpf() (as a container's default profile does) is one line naming seccomp and what to
/// do, before anything runs, not libbpf's log: pyperf run as root under a filter that fails bpf() with EPERM.
#[test]
fn a_seccomp_filter_refusing_bpf_is_one_clear_line() {
    use std::os::unix::process::CommandExt;
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pyp");
    let mut cmd = pyperf();
    cmd.args(["record", "-d", "1", "-o"]).arg(&out).args(["--", "/bin/true"]);
    // SAFETY: between fork and exec only prctl(2), async-signal-safe, on a filter that lives in this closure's
    // frame for the call.
    unsafe {
        cmd.pre_exec(|| {
            // ld [nr]; jeq __NR_bpf ? ret ERRNO(EPERM) : ret ALLOW (x86-64's numbers).
            let filter = [
                libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 },
                libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: 321 },
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x0005_0000 | libc::EPERM as u32 },
                libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 },
            ];
            let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const _ as usize, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = run(&mut cmd);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refuses the bpf() system call") && err.contains("seccomp"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists(), "a refused start left {}", out.display());
}

/// The command may come without `--`; what to run next is said at the end; `-d` beyond reason is one clear line;
/// a closed stderr costs nothing (`eprintln!` would have panicked and lost the recording).
#[test]
fn command_without_dashes_next_step_long_duration_and_closed_stderr() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("nodash.pyp");
    // To the command's end: a -d of 1 s could end before a loaded machine got the command to `burn`.
    let o = run(pyperf().args(["record", "-o"]).arg(&out).arg(&py).arg(workload("split.py")).arg("2"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pyperf: next: pyperf report {}", out.display())), "{err}");
    let rec = read(&out);
    assert!(rec.with_frame("burn").len() > 20, "the command without -- was recorded");

    let o = run(pyperf().args(["record", "-d", "1e19", "-o"]).arg(&out).arg(&py).arg("-c").arg("1"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "pyperf: --duration must be a positive number of seconds, at most 1e9"
    );

    let (_dir2, closed) = scratch("closed.pyp");
    let script = format!(
        "exec '{}' record -o '{}' '{}' '{}' 2 2>&-",
        env!("CARGO_BIN_EXE_pyperf"),
        closed.display(),
        py.display(),
        workload("split.py").display()
    );
    let o = run(std::process::Command::new("sh").arg("-c").arg(&script));
    assert_ne!(o.status.code(), Some(101), "pyperf panicked");
    let rec = read(&closed);
    assert!(rec.tables.stats.is_some(), "a complete recording, trailer included");
    assert!(rec.with_frame("burn").len() > 20);
}

// ---- issue 13: the recorder's edges ------------------------------------------------------------------------

/// A Python command that ignores SIGINT (and with `term`, SIGTERM too), says `ready` once it does, and burns CPU
/// for a minute.
fn stubborn(py: &Path, term: bool) -> Vec<String> {
    let ignore = if term { "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" } else { "" };
    let script = format!(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n{ignore}print('ready', flush=True)\n\
         t = time.time()\nwhile time.time() - t < 60:\n    pass\n"
    );
    vec![py.display().to_string(), "-c".into(), script]
}

/// pyperf with stderr read line by line as it comes, each with the time it arrived.
struct Watched {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<(Instant, String)>,
}

impl Watched {
    fn spawn(cmd: &mut Command) -> Watched {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start pyperf");
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("pyperf: | {line}");
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Watched { child, lines, seen: Vec::new() }
    }

    /// Waits (at most `limit`) for a stderr line containing `what`; returns when it came.
    fn line(&mut self, what: &str, limit: Duration) -> Instant {
        let until = Instant::now() + limit;
        if let Some((t, _)) = self.seen.iter().find(|(_, l)| l.contains(what)) {
            return *t;
        }
        while let Ok((t, line)) = self.lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let found = line.contains(what);
            self.seen.push((t, line));
            if found {
                return t;
            }
        }
        self.kill();
        panic!("no line with {what:?} within {limit:?}: {:?}", self.seen);
    }

    /// Waits (at most `limit`) for pyperf to exit, then for the rest of its stderr.
    fn wait(&mut self, limit: Duration) -> (ExitStatus, Instant, Vec<String>) {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let at = Instant::now();
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(l);
                }
                return (status, at, self.seen.iter().map(|(_, l)| l.clone()).collect());
            }
            if Instant::now() >= until {
                self.kill();
                panic!("pyperf did not exit within {limit:?}: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The command pyperf started (its only child).
    fn workload(&self) -> Option<u32> {
        let pid = self.child.id();
        let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        list.split_whitespace().next()?.parse().ok()
    }

    /// Ends pyperf and the command it started (a failed test must not leave them behind).
    fn kill(&mut self) {
        if let Some(w) = self.workload() {
            signal(w, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// The recording is complete (trailer) and `pyperf report` reads it without a warning.
fn complete_and_reportable(out: &Path) {
    assert!(read(out).tables.stats.is_some(), "no trailer in {}", out.display());
    let o = run(pyperf().args(["report", "-i"]).arg(out));
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `-d` with a command that ignores SIGINT: the recording is finished at the deadline, then the command gets
/// SIGINT, SIGTERM 2 s later; pyperf exits 0 and says what it did. Before: SIGINT only, then a wait for the command
/// to end (a minute here), exit 130.
#[test]
fn duration_ends_a_command_ignoring_sigint_with_sigterm() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("sigint.pyp");
    let start = Instant::now();
    let mut p =
        Watched::spawn(pyperf().args(["record", "-d", "1", "-o"]).arg(&out).arg("--").args(stubborn(&py, false)));
    let (status, ended, lines) = p.wait(Duration::from_secs(30));
    let took = ended - start;
    eprintln!("pyperf took {took:?}");
    assert_eq!(status.code(), Some(0), "{lines:?}");
    // 1 s of recording, 2 s of grace after SIGINT, plus start-up: far from the command's minute.
    assert!(took < Duration::from_secs(12), "{took:?}");
    let wrote = lines.iter().position(|l| l.starts_with("pyperf: wrote ")).expect("summary");
    let said = lines.iter().position(|l| l.starts_with("pyperf: --duration reached; ")).expect("what it did");
    assert!(wrote < said, "the file is finished before the command is ended: {lines:?}");
    assert!(lines[said].contains("stopped the command with SIGTERM"), "{}", lines[said]);
    complete_and_reportable(&out);
}

/// A command that ignores SIGINT and SIGTERM gets SIGKILL after two grace periods.
#[test]
fn duration_kills_a_command_ignoring_sigint_and_sigterm() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("sigkill.pyp");
    let start = Instant::now();
    let mut p =
        Watched::spawn(pyperf().args(["record", "-d", "1", "-o"]).arg(&out).arg("--").args(stubborn(&py, true)));
    p.line("pyperf: wrote ", Duration::from_secs(30));
    let workload = p.workload().expect("the command still runs once the file is written");
    let (status, ended, lines) = p.wait(Duration::from_secs(30));
    eprintln!("pyperf took {:?}", ended - start);
    assert_eq!(status.code(), Some(0), "{lines:?}");
    assert!(ended - start < Duration::from_secs(15));
    assert!(
        lines.iter().any(|l| l.starts_with("pyperf: --duration reached; killed the command with SIGKILL")),
        "{lines:?}"
    );
    assert!(gone(workload), "the command {workload} outlived pyperf");
    complete_and_reportable(&out);
}

/// pyperf's own SIGTERM always works: during the grace periods it kills the command at once and ends.
#[test]
fn sigterm_during_the_escalation_ends_pyperf_at_once() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("hurry.pyp");
    let mut p =
        Watched::spawn(pyperf().args(["record", "-d", "1", "-o"]).arg(&out).arg("--").args(stubborn(&py, true)));
    p.line("pyperf: wrote ", Duration::from_secs(30));
    let workload = p.workload().expect("the command still runs once the file is written");
    // Into the grace period after SIGINT.
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    signal(p.child.id(), libc::SIGTERM);
    let (status, ended, lines) = p.wait(Duration::from_secs(20));
    eprintln!("pyperf ended {:?} after SIGTERM", ended - sent);
    assert!(ended - sent < Duration::from_secs(1), "{:?}", ended - sent);
    assert_eq!(status.code(), Some(0), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("killed the command with SIGKILL (pyperf got another")), "{lines:?}");
    assert!(gone(workload), "the command {workload} outlived pyperf");
    complete_and_reportable(&out);
}

/// A rate above the kernel's maximum: one line naming the limit and what to do (before: perf_event_open's
/// EINVAL, twice, and no hint). The command is not started.
#[test]
fn excessive_rate_is_one_line_with_the_kernel_limit() {
    let _guard = serial();
    let max = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").unwrap().trim().to_string();
    let (dir, out) = scratch("rate.pyp");
    let marker = dir.path().join("ran");
    let o = run(pyperf().args(["record", "-F", "1000000", "-o"]).arg(&out).args(["--", "touch"]).arg(&marker));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("perf_event_max_sample_rate") && err.contains(&format!("{max} Hz")), "{err}");
    assert!(err.contains("-F 1000000") && err.matches("Invalid argument").count() <= 1, "{err}");
    assert!(!marker.exists() && !out.exists());
}

/// No BTF, unreadable BTF, or a file that is not BTF: one line before anything starts. PYPERF_TEST_BTF_PATH moves
/// where pyperf reads the kernel's field offsets.
#[test]
fn missing_btf_is_one_line_before_anything_starts() {
    let _guard = serial();
    let (dir, out) = scratch("btf.pyp");
    let marker = dir.path().join("ran");
    let missing = dir.path().join("no-vmlinux");
    let not_btf = dir.path().join("not-btf");
    std::fs::write(&not_btf, b"this is not BTF, and long enough to hold a BTF header").unwrap();
    for (btf, expect) in [
        (missing.as_path(), format!("this kernel exposes no BTF ({} is missing)", missing.display())),
        (dir.path(), format!("cannot read the kernel's BTF ({}: ", dir.path().display())),
        (
            not_btf.as_path(),
            format!(
                "cannot find the kernel fields pyperf reads in the kernel's BTF ({}: not valid BTF",
                not_btf.display()
            ),
        ),
    ] {
        let o = run(pyperf()
            .env("PYPERF_TEST_BTF_PATH", btf)
            .args(["record", "-o"])
            .arg(&out)
            .args(["--", "touch"])
            .arg(&marker));
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(&expect) && err.contains("BTF"), "{err}");
        assert!(!marker.exists() && !out.exists());
    }
}

/// Start-up: libbpf never parses the kernel's BTF (~15 ms) unless a program needs it to attach (the off-CPU
/// tracepoints): the program has no CO-RE relocation, pyperf gives the kernel's field offsets itself
/// (record/sampler/kernel.rs). A relocation that creeps back in fails this. The off-CPU run shows that the log line
/// looked for is libbpf's.
#[test]
fn no_kernel_btf_parse_by_libbpf_at_start() {
    let _guard = serial();
    let (_dir, out) = scratch("nobtf.pyp");
    for (extra, parsed) in [(None, false), (Some("--off-cpu"), true)] {
        let o = run(pyperf()
            .env("PYPERF_LIBBPF_DEBUG", "1")
            .args(["record", "-d", "0.1", "-o"])
            .arg(&out)
            .args(extra)
            .args(["--", "true"]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert_eq!(err.contains("loaded kernel BTF"), parsed, "{extra:?}: {err}");
        assert!(!err.contains("CO-RE relocating"), "{err}");
    }
}

/// Under sudo (root with SUDO_UID / SUDO_GID) the recording goes to the user who ran sudo, but only where that
/// user could have created it: in a directory only root may write (/etc/profile.d) it stays root's, with a note
/// (before: a user allowed to sudo only `pyperf record` could plant a file of theirs there, e.g. a login script).
/// Without sudo it stays root's; a previous recording moved to .old keeps its owner.
#[test]
fn recording_under_sudo_belongs_to_the_sudo_user_only_where_they_could_create_it() {
    use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
    let _guard = serial();
    let py = interpreter("3.11.7");
    let top = tempfile::tempdir().unwrap();
    let owner = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };
    let record = |out: &Path, sudo: bool| {
        let mut cmd = pyperf();
        if sudo {
            cmd.env("SUDO_UID", "65534").env("SUDO_GID", "65534");
        } else {
            cmd.env_remove("SUDO_UID").env_remove("SUDO_GID");
        }
        let o = run(cmd.args(["record", "-o"]).arg(out).arg("--").arg(&py).args(["-c", "pass"]));
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // A directory of theirs: the file is theirs.
    let theirs = top.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chown(&theirs, Some(65534), Some(65534)).unwrap();
    let out = theirs.join("sudo.pyp");
    let err = record(&out, true);
    assert_eq!(owner(&out), (65534, 65534, 0o600));
    assert!(!err.contains("stays root's"), "{err}");
    let err = record(&out, false);
    assert_eq!(owner(&out), (0, 0, 0o600));
    assert_eq!(owner(&out.with_extension("pyp.old")), (65534, 65534, 0o600));
    assert!(!err.contains("stays root's"), "{err}");

    // Root's 0755 directory: root's file, and one line says why.
    let roots = top.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = roots.join("x.sh");
    let err = record(&out, true);
    assert_eq!(owner(&out).0, 0, "root's directory: the file went to the sudo user");
    let note: Vec<&str> = err.lines().filter(|l| l.contains("stays root's")).collect();
    assert_eq!(note.len(), 1, "{err}");
    assert!(note[0].contains(&out.display().to_string()) && note[0].contains("uid 65534"), "{err}");
    // And with a file of root's there (the attack: root's file moved to .old, the user's in its place): both
    // stay root's.
    std::fs::write(&out, b"root's script").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    record(&out, true);
    assert_eq!(owner(&out).0, 0);
    assert_eq!(owner(&out.with_extension("sh.old")), (0, 0, 0o644));
    assert_eq!(std::fs::read(out.with_extension("sh.old")).unwrap(), b"root's script");

    // A sticky world-writable directory (/tmp): root's file there stays root's; a new name is theirs.
    let tmp = top.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = tmp.join("p.pyp");
    std::fs::write(&out, b"root's").unwrap();
    record(&out, true);
    assert_eq!(owner(&out).0, 0);
    record(&tmp.join("q.pyp"), true);
    assert_eq!(owner(&tmp.join("q.pyp")), (65534, 65534, 0o600));
}

/// pyperf's own CPU time (user + system) and that of the processes it waited for, from wait4.
fn run_with_cpu(cmd: &mut Command) -> (ExitStatus, f64, String) {
    // Waited for by wait4 below, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain wait4(2) on our own child.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32);
    eprintln!("{err}");
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (std::os::unix::process::ExitStatusExt::from_raw(status), secs(usage.ru_utime) + secs(usage.ru_stime), err)
}

/// A command that becomes Python only after a while: pyperf waits for it without a busy loop (before: a scan of
/// every process every 0.5 ms for 2 s, a CPU-second), and the summary's duration counts from the command's
/// start (before: from when it became Python).
#[test]
fn waiting_for_a_command_to_become_python_costs_little_and_counts_from_its_start() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("late.pyp");
    // 0.3 s of its CPU time (not of wall time, which a loaded machine would give a varying share of the CPU).
    let script = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n";
    let late = format!("sleep 1.5; exec '{}' -c '{script}'", py.display());
    let (status, late_cpu, err) =
        run_with_cpu(pyperf().args(["record", "-o"]).arg(&out).args(["--", "sh", "-c", &late]));
    assert!(status.success(), "{err}");
    // The same Python at once: pyperf's own start-up (the BPF load, the interpreter's inspection) and the
    // Python's CPU, which the late run has too.
    let (status, direct_cpu, err2) =
        run_with_cpu(pyperf().args(["record", "-o"]).arg(&out).arg("--").arg(&py).args(["-c", script]));
    assert!(status.success(), "{err2}");
    eprintln!("CPU: command that sleeps 1.5 s first {late_cpu:.3} s, Python at once {direct_cpu:.3} s");
    assert!(late_cpu - direct_cpu < 0.2, "waiting 1.5 s cost {:.3} s of CPU", late_cpu - direct_cpu);
    let summary = err.lines().find(|l| l.starts_with("pyperf: ") && l.contains(" samples, ")).expect("summary");
    let secs: f64 = summary["pyperf: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(secs >= 1.5, "{summary}");
}

/// Odd arguments and closed standard streams: one line on stderr and exit code 1 (pyperf's checks) or 2 (the
/// command line does not parse), never a panic (101).
#[test]
fn odd_arguments_and_closed_streams_never_panic() {
    let _guard = serial();
    let (dir, out) = scratch("args.pyp");
    let o = out.to_str().unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["-F", "0", "-o", o, "true"], 1, "the sampling rate must be above 0"),
        (&["-c", "0", "-o", o, "true"], 1, "the sampling rate must be above 0"),
        (&["-d", "nan", "-o", o, "true"], 1, "--duration must be a positive number"),
        (&["-d", "-1", "-o", o, "true"], 1, "--duration must be a positive number"),
        (&["-d", "inf", "-o", o, "true"], 1, "--duration must be a positive number"),
        (&["--ringbuf-kib", "0", "-o", o, "true"], 1, "--ringbuf-kib must be between 4 and"),
        (&["--ringbuf-kib", "99999999999", "-o", o, "true"], 1, "--ringbuf-kib must be between 4 and"),
        (&["--ringbuf-kib", "18446744073709551615", "-o", o, "true"], 1, "--ringbuf-kib must be between"),
        (&["-p", "0", "-o", o], 1, "no such process: 0"),
        (&["-p", "4294967295", "-o", o], 1, "no such process: 4294967295"),
        (&["-p", "-1", "-o", o], 2, "invalid value '-1' for '--pid <PID>'"),
        (&["-p", "4294967296", "-o", o], 2, "invalid value '4294967296'"),
        (&["-o", "", "true"], 2, "--output"),
        (&["-F", "-5", "-o", o, "true"], 2, "invalid value '-5'"),
        (&["-e", "nope", "-o", o, "true"], 2, "possible values: cpu-clock, cycles"),
        (&["-c", "18446744073709551615", "-o", o, "true"], 1, "the kernel refused the sampling period"),
        (&["-a", "-p", "1", "-o", o], 2, "cannot be used with"),
        (&["-o", o], 2, "required"),
    ];
    for &(args, code, expect) in cases {
        let o = run(pyperf().arg("record").args(args));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("pyperf: ") && err.contains(expect), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} left {}", out.display());
    }
    // Closed stdout or stdin: a complete recording (and an error still on stderr, in one line).
    let py = interpreter("3.11.7");
    for (i, redirect) in [">&-", "<&-", ">&- <&-"].into_iter().enumerate() {
        let rec = dir.path().join(format!("closed{i}.pyp"));
        let script = format!(
            "exec '{}' record -d 1 -o '{}' '{}' '{}' 2 {redirect}",
            env!("CARGO_BIN_EXE_pyperf"),
            rec.display(),
            py.display(),
            workload("split.py").display()
        );
        let o = run(Command::new("sh").arg("-c").arg(&script));
        assert_eq!(o.status.code(), Some(0), "{redirect}");
        assert!(read(&rec).tables.stats.is_some(), "{redirect}: a complete recording");
        let o = run(Command::new("sh").arg("-c").arg(format!(
            "exec '{}' record -F 0 -o '{}' true {redirect}",
            env!("CARGO_BIN_EXE_pyperf"),
            rec.display()
        )));
        assert_eq!(o.status.code(), Some(1), "{redirect}");
        assert_eq!(String::from_utf8_lossy(&o.stderr).trim(), "pyperf: the sampling rate must be above 0");
    }
}

// ---- issue 29: signals, concurrent recorders, odd commands and targets ------------------------------------------

/// Waits (at most a minute) for `what` to hold: starting takes from a few hundred milliseconds to seconds (the
/// BPF program's load), more on a busy machine.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let limit = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < limit, "not within a minute: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A Python command that burns CPU for a minute, for pyperf to be stopped while recording it.
fn busy(py: &Path) -> Vec<String> {
    let script = "import time\nt = time.time()\nwhile time.time() - t < 60:\n    pass\n";
    vec![py.display().to_string(), "-c".into(), script.into()]
}

/// SIGHUP (the terminal or ssh session closed) ends a recording as SIGTERM does: file complete, trailer included.
/// Before: SIGHUP's default action killed pyperf, and the file had no trailer.
#[test]
fn sighup_ends_the_recording_with_its_trailer() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("hup.pyp");
    let mut p = Watched::spawn(pyperf().args(["record", "-o"]).arg(&out).arg("--").args(busy(&py)));
    // Recording: the first flush put the header on disk.
    until("recording", || std::fs::metadata(&out).is_ok_and(|m| m.len() > 0));
    signal(p.child.id(), libc::SIGHUP);
    let (status, _, lines) = p.wait(Duration::from_secs(30));
    assert!(lines.iter().any(|l| l.contains("wrote")), "{lines:?}");
    assert_ne!(status.code(), None, "pyperf was killed by the signal: {lines:?}");
    complete_and_reportable(&out);
}

/// `nohup pyperf record ...` (SIGHUP ignored when pyperf starts): it stays ignored, so a closed terminal ends
/// neither the recording nor the command, which runs to its end (exit 0; stopped, it would end with
/// KeyboardInterrupt).
#[test]
fn an_ignored_sighup_stays_ignored() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("nohup.pyp");
    let script = "import time\nt = time.process_time() + 1.0\nwhile time.process_time() < t:\n    pass\n";
    let mut p = Watched::spawn(
        Command::new("sh")
            .args(["-c", "trap '' HUP; exec \"$@\"", "sh", env!("CARGO_BIN_EXE_pyperf"), "record", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&py)
            .args(["-c", script]),
    );
    let pid = p.child.id();
    until("pyperf's own handlers", || {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.ends_with("pyperf"))
            && catches(pid, libc::SIGINT)
    });
    assert!(!catches(pid, libc::SIGHUP), "SIGHUP, ignored by nohup, is handled");
    signal(pid, libc::SIGHUP);
    let (status, _, lines) = p.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "the command did not run to its end: {lines:?}");
    complete_and_reportable(&out);
}

/// Whether `pid` has a handler for `sig` (SigCgt of /proc/PID/status).
fn catches(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(mask, 16).is_ok_and(|m| m & (1 << (sig - 1)) != 0)
}

/// SIGINT, SIGTERM or SIGHUP while pyperf starts (as soon as it handles them: while it loads the BPF program; or
/// just after the output file was created): the file is then either a complete recording (header and trailer)
/// with the previous one kept as .old, or untouched (the previous one back in place); never a file cut short,
/// never the previous recording lost, never pyperf killed by the signal. Before: SIGHUP (and any of them before
/// the handlers were installed, after the file was made) killed pyperf there, leaving an empty file.
#[test]
fn a_signal_during_the_start_leaves_a_complete_recording_or_the_previous_one() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (dir, out) = scratch("start.pyp");
    let old = dir.path().join("start.pyp.old");
    let mut untouched = 0;
    for sig in [libc::SIGHUP, libc::SIGTERM, libc::SIGINT] {
        // None: as soon as pyperf handles the signal; else that long after the previous file was moved aside.
        for delay_ms in [None, Some(0), Some(2), Some(20)] {
            std::fs::write(&old, b"older").unwrap();
            std::fs::write(&out, b"previous").unwrap();
            let mut p = Watched::spawn(pyperf().args(["record", "-o"]).arg(&out).arg("--").args(busy(&py)));
            let pid = p.child.id();
            match delay_ms {
                None => until("pyperf handles the signal", || catches(pid, sig)),
                Some(ms) => {
                    // The previous file moved aside: the new one is being made (the start goes on from there).
                    until("the previous file moved aside", || std::fs::read(&old).is_ok_and(|b| b == b"previous"));
                    std::thread::sleep(Duration::from_millis(ms));
                }
            }
            signal(pid, sig);
            let (status, _, lines) = p.wait(Duration::from_secs(30));
            let what = format!("signal {sig} {delay_ms:?} ms after the start: {status:?} {lines:?}");
            if std::fs::read(&out).unwrap() == b"previous" {
                assert_eq!(std::fs::read(&old).unwrap(), b"older", "the older .old was lost: {what}");
                assert!(lines.iter().any(|l| l.contains("stopped by a signal before recording started")), "{what}");
                untouched += 1;
            } else {
                assert!(read(&out).tables.stats.is_some(), "no trailer: {what}");
                assert_eq!(std::fs::read(&old).unwrap(), b"previous", "{what}");
            }
            assert_ne!(status.code(), None, "pyperf was killed by the signal: {what}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "{what}");
            if let Some(w) = p.workload() {
                signal(w, libc::SIGKILL);
            }
        }
    }
    // Signals during the BPF program's load (hundreds of milliseconds) undid the start at least once.
    assert!(untouched > 0, "no start was undone");
}

/// A second (and third) pyperf on a live recording's path is refused in one line naming the first; the first's
/// file stays where it is and is complete. Before: the second moved the live file to .old and the third overwrote
/// that .old, while the first said "wrote".
#[test]
fn a_second_recorder_on_the_same_output_is_refused() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (dir, out) = scratch("shared.pyp");
    let mut first = Watched::spawn(pyperf().args(["record", "-o"]).arg(&out).arg("--").args(busy(&py)));
    until("recording", || std::fs::metadata(&out).is_ok_and(|m| m.len() > 0));
    let pid = first.child.id();
    let others: Vec<_> = (0..2)
        .map(|_| run(pyperf().args(["record", "-o"]).arg(&out).arg("--").arg(&py).args(["-c", "pass"])))
        .collect();
    let moved = dir.path().join("shared.pyp.old").exists();
    signal(pid, libc::SIGINT);
    let (_, _, lines) = first.wait(Duration::from_secs(30));
    for o in others {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("is being recorded by another pyperf") && err.contains(&format!("pid {pid}")), "{err}");
    }
    assert!(!moved, "the live recording was moved aside");
    assert!(lines.iter().any(|l| l.contains("wrote")), "{lines:?}");
    complete_and_reportable(&out);
    assert!(read(&out).samples.len() > 5, "the first recorder's samples are in its file");
}

/// A command or arguments that are not UTF-8 are run as they are; the header shows them with U+FFFD. Before:
/// refused by the argument parser (and the header's command line would have panicked).
#[test]
fn arguments_that_are_not_utf8_are_passed_as_they_are() {
    use std::os::unix::ffi::OsStrExt;
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("bytes.pyp");
    let o = run(pyperf()
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .args(["-c", "import os, sys; print(os.fsencode(sys.argv[1]).hex())"])
        .arg(std::ffi::OsStr::from_bytes(b"a\xffb")));
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "61ff62", "the argument reached the command unchanged");
    let (header, tables, _, _) = read_each(&out, |_, _, _| ());
    assert!(tables.stats.is_some(), "a complete recording");
    assert_eq!(header.workload.last().map(String::as_str), Some("a\u{fffd}b"), "{:?}", header.workload);
    assert!(header.command_line.iter().any(|a| a == "a\u{fffd}b"), "{:?}", header.command_line);
}

/// `-p PID` of a process the kernel will not let even root inspect (a container's or sandbox's init holding
/// capabilities pyperf lacks), or of pid 1 that is simply not Python: one line that does not tell root to run as
/// root. Before: "permission denied inspecting process 1 (run as root or with CAP_SYS_PTRACE)", as root.
#[test]
fn pid_1_as_root_is_not_told_to_run_as_root() {
    let _guard = serial();
    let (dir, out) = scratch("one.pyp");
    let o = run(pyperf().args(["record", "-p", "1", "-d", "1", "-o"]).arg(&out));
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.success() {
        return; // pid 1 is a Python process here: nothing to say
    }
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!err.contains("run as root"), "{err}");
    assert!(err.contains("process 1"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// libbpf's own messages reach the user only when a load fails and pyperf shows the reason, or with
/// PYPERF_LIBBPF_DEBUG: `dump --native` without CAP_BPF (its register iterator cannot load) says so in pyperf's
/// one line and dumps the stacks. Before: three `libbpf: ...` lines of libbpf's default logger came first.
#[test]
fn libbpf_lines_are_not_printed_when_a_load_fails() {
    let _guard = serial();
    let py = interpreter("debian-3.11");
    let mut target = start_workload(&py, "dump.py", &[]);
    let o = run(Command::new("setpriv")
        .args(["--bounding-set=-all,+perfmon,+sys_ptrace,+dac_read_search", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_pyperf"))
        .args(["dump", "--native", "-p", &target.id().to_string()]));
    let _ = target.kill();
    let _ = target.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.lines().any(|l| l.starts_with("libbpf")), "{err}");
    // The iterator's load failed (what this test is about), and pyperf said so in its own words.
    assert!(err.contains("frame pointers"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Thread "), "the stacks were dumped all the same");
}

/// A start that fails once the output exists (here: the command cannot be run) leaves the directory as it was,
/// the older FILE.old included. Before: FILE was put back, but FILE.old had been replaced by it.
#[test]
fn a_failed_start_keeps_the_older_old_file() {
    let _guard = serial();
    let (dir, out) = scratch("fails.pyp");
    let old = dir.path().join("fails.pyp.old");
    std::fs::write(&out, b"previous").unwrap();
    std::fs::write(&old, b"older").unwrap();
    let o = run(pyperf().args(["record", "-o"]).arg(&out).arg("--").arg(dir.path().join("no-such-command")));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot run") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"previous");
    assert_eq!(std::fs::read(&old).unwrap(), b"older");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}
