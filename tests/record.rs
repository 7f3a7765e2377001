//! End to end: the real BPF program samples real Python processes; we read back what `pyperf record` wrote.
//! Needs root (CI is root). Interpreters: pyenv's 3.11.7 (shared libpython, PIE) and Debian's python3.11
//! (interpreter in a non-PIE executable with .symtab stripped).

mod common;

use std::collections::HashSet;
use std::time::Duration;

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

#[test]
fn split_pyenv_3_11() {
    split_workload("3.11.7");
}

#[test]
fn split_debian_3_11() {
    split_workload("debian-3.11");
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
    let o = run(pyperf().args(["record", "-F", "199", "-d", "2", "-p", &child.id().to_string(), "-o"]).arg(&out));
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success());
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
    let mut rec_proc = pyperf().args(["record", "-a", "-F", "199", "-d", "4", "-o"]).arg(&out).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let py = interpreter("3.11.7");
    let mut child = start_workload(&py, "split.py", &["1.5"]);
    let pid = child.id();
    child.wait().unwrap();
    assert!(rec_proc.wait().unwrap().success());
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

/// The command may come without `--`; what to run next is said at the end; `-d` beyond reason is one clear line;
/// a closed stderr costs nothing (`eprintln!` would have panicked and lost the recording).
#[test]
fn command_without_dashes_next_step_long_duration_and_closed_stderr() {
    let _guard = serial();
    let py = interpreter("3.11.7");
    let (_dir, out) = scratch("nodash.pyp");
    let o = run(pyperf().args(["record", "-d", "1", "-o"]).arg(&out).arg(&py).arg(workload("split.py")).arg("2"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pyperf: next: pyperf report -i {}", out.display())), "{err}");
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
        "exec '{}' record -d 1 -o '{}' '{}' '{}' 2 2>&-",
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
