//! Python in containers: processes in their own PID and mount namespaces, built here with `unshare` (a new PID
//! namespace, a new mount namespace and the Debian sid root of scripts/setup as their root, pyenv's interpreters
//! bind-mounted into it at the same path). pyperf, on the host, must give them exactly the stacks they would get on
//! the host: thread states matched by the namespace's tids, the interpreter found through the process's own root.
//! Needs root (namespaces, BPF), and a non-root run with only the capabilities pyperf needs.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use pyperf_format::StackStatus;

/// A command that runs `python` in new PID and mount namespaces whose root is the sid root (`nested`: in a PID
/// namespace inside another one).
fn contained(python: &Path, nested: bool) -> Command {
    let root = sid_root();
    let mut c = Command::new("unshare");
    c.args(["--pid", "--mount", "--fork", "--mount-proc"]).arg(format!("--root={}", root.display()));
    if nested {
        // Inside, the root is not a mount point of its own: a second PID namespace only (no /proc of its own).
        c.args(["unshare", "--pid", "--fork"]);
    }
    c.arg(container_path(python));
    c
}

/// The interpreter as the container sees it: a pyenv interpreter at its own path (bind-mounted), a sid one as
/// /usr/bin/pythonX.Y (its wrapper chroots, which a container must not do again).
fn container_path(python: &Path) -> PathBuf {
    let name = python.file_name().unwrap().to_string_lossy().to_string();
    if python.starts_with(pyenv_root()) {
        python.to_path_buf()
    } else {
        PathBuf::from("/usr/bin").join(name)
    }
}

/// The pid, on the host, of the process running `script` under `parent` (unshare's children, grandchildren).
fn host_pid_of(parent: u32, script: &str) -> u32 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if pid != parent && cmdline.contains(script) && comm.starts_with("python") && descends(pid, parent) {
                return pid;
            }
        }
        assert!(Instant::now() < end, "no python under {parent}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn descends(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..16 {
        let Some(ppid) = pyperf::proc::stat(pid).map(|s| s.ppid) else { return false };
        if ppid == ancestor {
            return true;
        }
        pid = ppid;
    }
    false
}

/// The split workload in a container, started and running: `(unshare, python's host pid)`. With `go`, it starts
/// its work once that file exists (split.py --go; the temp dir is at the same path inside).
fn start_contained(python: &Path, nested: bool, seconds: &str, go: Option<&Path>) -> (Child, u32) {
    let mut child = contained(python, nested)
        .arg(workload("split.py"))
        .args([seconds, "--threads", "2", "--thread-seconds", "1"])
        .args(go.map(|g| ["--go".as_ref(), g.as_os_str()]).into_iter().flatten())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "workload said {line:?}");
    let pid = host_pid_of(child.id(), "split.py");
    (child, pid)
}

/// What a recording of the split workload in a container must show: right stacks root to leaf, the known split
/// against the workload's own timing, the threads inside, and the process's pid inside its namespace.
fn check_split(name: &str, rec: &Recording, pid: u32, stdout: &[u8], ns_pid: u32) {
    let p = rec.tables.processes.iter().find(|p| p.pid == pid).unwrap_or_else(|| panic!("{name}: {pid} not recorded"));
    assert_eq!(p.ns_pid, ns_pid, "{name}: the pid inside its namespace");
    let mine: Vec<&S> = rec.of_pid(pid);
    let idle = mine.iter().filter(|s| s.status == StackStatus::Idle).count();
    let heavy: Vec<&&S> = mine.iter().filter(|s| s.names.iter().any(|n| n == "heavy")).collect();
    let light: Vec<&&S> = mine.iter().filter(|s| s.names.iter().any(|n| n == "light")).collect();
    eprintln!("{name}: {} samples, {} heavy, {} light, {idle} idle", mine.len(), heavy.len(), light.len());
    for s in heavy.iter().chain(&light) {
        // <module> main Runner.run heavy|light [burn] (<= 3.10 names the method `run` unless the heuristic does).
        assert_eq!(s.status, StackStatus::Complete, "{name}");
        assert_eq!(&s.names[..2], ["<module>", "main"], "{name}: {:?}", s.names);
        assert!(
            s.names[2].ends_with("run") && ["heavy", "light"].contains(&s.names[3].as_str()),
            "{name}: {:?}",
            s.names
        );
        assert!(s.names.len() == 4 || s.names[4..] == ["burn"], "{name}: {:?}", s.names);
        assert_eq!(s.tid, pid, "{name}: the main thread");
    }
    assert_share(name, heavy.len(), heavy.len() + light.len(), split_truth(stdout));
    // The threads: spin -> burn under the thread bootstrap.
    let spin: Vec<&&S> = mine.iter().filter(|s| s.names.iter().any(|n| n == "spin")).collect();
    for s in &spin {
        let at = s.names.iter().position(|n| n == "spin").unwrap();
        assert!(at >= 2 && s.names[at + 1..].iter().all(|n| n == "burn"), "{name}: {:?}", s.names);
        assert!(s.names[0].ends_with("_bootstrap"), "{name}: {:?}", s.names);
    }
    let tids: HashSet<u32> = spin.iter().map(|s| s.tid).collect();
    assert!(spin.len() >= 50, "{name}: {} spin samples", spin.len());
    assert_eq!(tids.len(), 2, "{name}: the two threads inside the namespace, {tids:?}");
    assert!(!tids.contains(&pid));
    assert!(spin.iter().all(|s| s.status == StackStatus::Complete), "{name}");
    // Before the fix, every sample of a contained 3.11+ process was [idle]: there must be next to none.
    assert!(idle * 20 <= mine.len(), "{name}: {idle} of {} samples idle", mine.len());
}

/// `-p HOST_PID` of a contained process, for the versions the issue names: 3.8, 3.11, 3.12 (pyenv's, bind-mounted
/// into the container), 3.13 and 3.14 (sid's).
#[test]
fn contained_processes_by_host_pid() {
    let _guard = serial();
    for name in ["3.8.18", "3.11.7", "3.12.1", "sid-3.13", "sid-3.14", "sid-3.15"] {
        let py = interpreter(name);
        let (_dir, out) = scratch("contained.pyp");
        // The work starts once the recorder records (its start can take seconds on a loaded machine).
        let go = out.with_file_name("go");
        let (child, pid) = start_contained(&py, false, "2", Some(&go));
        let mut rec =
            pyperf().args(["record", "-F", "499", "-p"]).arg(pid.to_string()).arg("-o").arg(&out).spawn().unwrap();
        wait_recording(&out);
        std::fs::write(&go, b"").unwrap();
        let status = rec.wait().unwrap();
        let rest = child.wait_with_output().expect("workload");
        assert!(status.success() && rest.status.success(), "{name}");
        let rec = read(&out);
        check_split(name, &rec, pid, &rest.stdout, 1);
    }
}

/// `pyperf dump --native` of a contained process (its own PID and mount namespaces): the threads matched by their
/// tids inside, each lock waiter's exact Python stack under its native frames, on pyenv's 3.11 (bind-mounted) and
/// sid's 3.14 and 3.15.
#[test]
fn dump_of_a_contained_process() {
    let _guard = serial();
    for name in ["3.11.7", "sid-3.14", "sid-3.15"] {
        let py = interpreter(name);
        let mut child = contained(&py, false).arg(workload("dump.py")).stdout(Stdio::piped()).spawn().expect("unshare");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "{name}: workload said {line:?}");
        let pid = host_pid_of(child.id(), "dump.py");
        let o = pyperf().args(["dump", "--json", "--native", "-p", &pid.to_string()]).output().expect("pyperf dump");
        // The workload never ends by itself; it is its namespace's init, which unshare's end does not end.
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let _ = child.wait();
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let threads = doc["threads"].as_array().expect("threads");
        for (thread, leaf) in [("waiter", "wait_lock"), ("left", "grab"), ("right", "grab"), ("napper", "nap")] {
            let t = threads
                .iter()
                .find(|t| t["name"].as_str() == Some(thread))
                .unwrap_or_else(|| panic!("{name}: no {thread}: {doc:#}"));
            let frames = t["frames"].as_array().unwrap_or_else(|| panic!("{name} {thread}: {t:#}"));
            assert_eq!(frames[0]["kind"].as_str(), Some("native"), "{name} {thread}: {t:#}");
            assert!(frames.iter().all(|f| f["kind"].as_str() != Some("marker")), "{name} {thread}: {t:#}");
            let py: Vec<&str> = frames
                .iter()
                .filter(|f| f["kind"].as_str() == Some("python"))
                .filter_map(|f| f["function"].as_str())
                .collect();
            assert_eq!(py[..2], [leaf, "Thread.run"], "{name} {thread}: {t:#}");
        }
    }
}

/// `-a` finds the Python processes of every container: two at once (pyenv's 3.8 and sid's 3.14), each pid 1 in its
/// own namespace, the second one nested (a PID namespace inside another). Both are pid 1 where they live, as is
/// the host's init, which is not Python: the recording keeps them apart by host pid, and `report --pid 1` selects
/// the contained ones.
#[test]
fn all_processes_finds_every_container_and_keeps_their_pids_apart() {
    let _guard = serial();
    let (a_py, b_py) = (interpreter("3.8.18"), interpreter("sid-3.14"));
    let (_dir, out) = scratch("all.pyp");
    // Recording from before the containers start to after they end (not a fixed -d a loaded machine could
    // outlast).
    let mut rec_cmd = pyperf().args(["record", "-a", "-F", "499", "-o"]).arg(&out).spawn().unwrap();
    wait_recording(&out);
    let (a, a_pid) = start_contained(&a_py, false, "2", None);
    let (b, b_pid) = start_contained(&b_py, true, "2", None);
    let (a_out, b_out) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let status = interrupt(&mut rec_cmd);
    assert!(status.success());
    let rec = read(&out);
    check_split("-a, 3.8 in a container", &rec, a_pid, &a_out.stdout, 1);
    check_split("-a, 3.14 in a nested container", &rec, b_pid, &b_out.stdout, 1);
    for pid in [a_pid, b_pid] {
        let p = rec.tables.processes.iter().find(|p| p.pid == pid).unwrap();
        assert!(!p.cgroup.is_empty(), "{pid}: cgroup");
    }
    // By the pid inside: both containers' init (host pid 1 is not Python: not recorded).
    let folded = run(pyperf().args(["report", "--folded", "--pid-root", "--no-lines", "--pid", "1", "-i"]).arg(&out));
    let folded = String::from_utf8(folded.stdout).unwrap();
    for pid in [a_pid, b_pid] {
        assert!(folded.contains(&format!("[pid {pid}, 1 in its namespace]")), "{folded}");
    }
    let only_a = run(pyperf().args(["report", "--folded", "--pid"]).arg(a_pid.to_string()).arg("-i").arg(&out));
    let only_a_total: usize = String::from_utf8(only_a.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .sum();
    // (CPU samples: the periods stolen by the host are in the file, not in the CPU view.)
    assert_eq!(only_a_total, rec.of_pid(a_pid).iter().filter(|s| !s.stolen).count());
}

/// pyperf run by an ordinary user with only CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (file capabilities on a copy of
/// the binary) records a root-owned Python process; with one missing it says which.
#[test]
fn runs_as_a_user_with_only_the_needed_capabilities() {
    let _guard = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("pyperf");
    std::fs::copy(env!("CARGO_BIN_EXE_pyperf"), &bin).unwrap();
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    chmod(dir.path(), 0o777);
    chmod(&bin, 0o755);
    let as_nobody = |caps: &str, python: &str| -> (std::process::Output, u32) {
        let set = Command::new("setcap").arg(caps).arg(&bin).output().expect("setcap (scripts/setup installs it)");
        assert!(set.status.success(), "setcap: {}", String::from_utf8_lossy(&set.stderr));
        let py = interpreter(python);
        let mut target = start_workload(&py, "split.py", &["30"]);
        let pid = target.id();
        let out = dir.path().join("user.pyp");
        let _ = std::fs::remove_file(&out);
        // Until the target has had 1 s of CPU (~99 samples), however long a loaded machine takes.
        let o = record_for_cpu(
            Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
                .arg(&bin)
                .args(["record", "-p"])
                .arg(pid.to_string())
                .arg("-o")
                .arg(&out),
            &out,
            pid,
            1.0,
        );
        let _ = target.kill();
        let _ = target.wait();
        (o, pid)
    };
    // Debian's interpreter: every file it maps is readable by anyone.
    let (o, _) = as_nobody("cap_bpf,cap_perfmon,cap_sys_ptrace+ep", "debian-3.11");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = read(&dir.path().join("user.pyp"));
    let burn = rec.with_frame("burn").len();
    assert!(burn > 20, "{burn} samples in burn");
    assert!(rec.samples.iter().filter(|s| s.names.iter().any(|n| n == "burn")).all(|s| s.names[0] == "<module>"));
    // A capability missing: said, in one line, before anything starts.
    let (o, _) = as_nobody("cap_bpf,cap_perfmon+ep", "debian-3.11");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("missing capability CAP_SYS_PTRACE (to read the memory of processes)"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // pyenv's interpreter lives under /root (0700): its libpython cannot be read without CAP_DAC_READ_SEARCH.
    let (o, pid) = as_nobody("cap_bpf,cap_perfmon,cap_sys_ptrace+ep", "3.11.7");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("the interpreter of process {pid}: run as root, or grant CAP_DAC_READ_SEARCH too")),
        "{err}"
    );
}

/// The interpreter's file replaced on disk after the process started (an upgrade, or in a container the same path
/// naming another file): the process is read through the file it really mapped, not what the path names now.
#[test]
fn an_interpreter_replaced_on_disk_is_read_through_its_mapping() {
    let _guard = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("python3.11");
    std::fs::copy(interpreter("debian-3.11"), &exe).unwrap();
    let mut target = start_workload(&exe, "split.py", &["30"]);
    // Replaced by another program at the same path (a new inode; the process keeps the old one mapped).
    let other = dir.path().join("other");
    std::fs::copy("/bin/ls", &other).unwrap();
    std::fs::rename(&other, &exe).unwrap();
    let (_d, out) = scratch("replaced.pyp");
    // Until the target has had 1 s of CPU (~99 samples), however long a loaded machine takes.
    let o = record_for_cpu(
        pyperf().args(["record", "-p"]).arg(target.id().to_string()).arg("-o").arg(&out),
        &out,
        target.id(),
        1.0,
    );
    let _ = target.kill();
    let _ = target.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = read(&out);
    assert_eq!(rec.tables.processes[0].python_version, "3.11.2");
    let burn = rec.with_frame("burn");
    assert!(burn.len() > 20, "{} samples in burn", burn.len());
    assert!(burn.iter().all(|s| s.names[..2] == ["<module>", "main"]));
}

/// `-G PATH` records the Python processes of one cgroup (and those below it), including one that starts there
/// while recording, and nothing else.
#[test]
fn cgroup_limits_recording_to_its_processes() {
    let _guard = serial();
    // A cgroup of our own, in the unified hierarchy (at the root on a v2 system, under unified/ on a hybrid one).
    let base = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("cgroup.procs").exists())
        .expect("a cgroup v2 hierarchy");
    let name = format!("pyperf-test-{}", std::process::id());
    let dir = base.join(&name);
    std::fs::create_dir(&dir).expect("create a cgroup (run as root)");
    struct Cleanup(PathBuf, PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Ok(procs) = std::fs::read_to_string(self.1.join("cgroup.procs")) {
                for pid in procs.lines() {
                    let _ = std::fs::write(self.0.join("cgroup.procs"), pid);
                }
            }
            let _ = std::fs::remove_dir(&self.1);
        }
    }
    let _cleanup = Cleanup(base.clone(), dir.clone());
    let py = interpreter("3.12.1");
    let mut inside = start_workload(&py, "split.py", &["3600"]);
    let mut outside = start_workload(&py, "split.py", &["3600"]);
    std::fs::write(dir.join("cgroup.procs"), inside.id().to_string()).unwrap();
    let (_d, out) = scratch("cgroup.pyp");
    let mut rec_cmd =
        pyperf().args(["record", "-F", "499", "-G"]).arg(format!("/{name}")).arg("-o").arg(&out).spawn().unwrap();
    wait_recording(&out);
    // One more, started in the cgroup while recording; the recording ends after it (not at a fixed -d a loaded
    // machine could reach first).
    let later = Command::new("sh")
        .arg("-c")
        .arg(format!("echo $$ > {}/cgroup.procs && exec \"$0\" \"$1\" 1", dir.display()))
        .arg(&py)
        .arg(workload("split.py"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let later_pid = later.id();
    let _ = later.wait_with_output();
    assert!(interrupt(&mut rec_cmd).success());
    for c in [&mut inside, &mut outside] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let rec = read(&out);
    let pids: HashSet<u32> = rec.tables.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, HashSet::from([inside.id(), later_pid]), "only the cgroup's processes");
    for pid in [inside.id(), later_pid] {
        let p = rec.tables.processes.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(p.cgroup, format!("/{name}"));
        assert!(rec.of_pid(pid).iter().any(|s| s.names.iter().any(|n| n == "burn")), "{pid}: no samples in burn");
    }
    let o = run(pyperf().args(["record", "-G", "/no-such-cgroup-here", "-o"]).arg(&out));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no cgroup /no-such-cgroup-here under /sys/fs/cgroup"));
}

/// `-p` of a thread id follows the thread's process and says so; a kernel thread and a zombie are refused, each
/// with its own reason, before anything is written.
#[test]
fn p_of_a_thread_a_kernel_thread_or_a_zombie() {
    let _guard = serial();
    let py = interpreter("3.12.1");
    // The threads run until killed: the recording below waits for their CPU time.
    let mut target = start_workload(&py, "split.py", &["1", "--threads", "2", "--thread-seconds", "3600"]);
    let pid = target.id();
    // A thread of it: wait for the spin threads (after the 1 s of CPU of Runner.run).
    let end = Instant::now() + Duration::from_secs(60);
    let tid = loop {
        let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&t| t != pid)
            .collect();
        if let Some(&t) = tids.first() {
            break t;
        }
        assert!(Instant::now() < end, "no thread");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_d, out) = scratch("thread.pyp");
    // Until the process has had 1 s of CPU (~99 samples), however long a loaded machine takes.
    let o = record_for_cpu(pyperf().args(["record", "-p"]).arg(tid.to_string()).arg("-o").arg(&out), &out, pid, 1.0);
    let _ = target.kill();
    let _ = target.wait();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pyperf: {tid} is a thread of process {pid}: profiling the process")), "{err}");
    let rec = read(&out);
    assert_eq!(rec.tables.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![pid]);
    assert!(rec.samples.len() > 50, "{} samples", rec.samples.len());

    // kthreadd is pid 2 on every Linux.
    let o = run(pyperf().args(["record", "-d", "1", "-p", "2", "-o"]).arg(&out));
    assert!(!o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim(), "pyperf: process 2 is a kernel thread: it runs no Python");

    // A zombie: a child that exited and that its parent (sh, busy sleeping) has not reaped.
    let mut parent = Command::new("sh").args(["-c", "sleep 0.1 & exec sleep 60"]).spawn().unwrap();
    // Until the child has exited (state Z), however long a loaded machine takes.
    let until = Instant::now() + Duration::from_secs(30);
    let zombie: u32 = loop {
        let child = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", parent.id()))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
        let state =
            |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?.rsplit_once(") ")?.1.chars().next();
        if let Some(pid) = child.filter(|&pid| state(pid) == Some('Z')) {
            break pid;
        }
        assert!(Instant::now() < until, "no exited child of sh within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = run(pyperf().args(["record", "-d", "1", "-p"]).arg(zombie.to_string()).arg("-o").arg(&out));
    let _ = parent.kill();
    let _ = parent.wait();
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        format!("pyperf: process {zombie} has exited (a zombie its parent has not reaped yet)")
    );
}

/// pyperf itself in a PID namespace of its own cannot see the host pids the BPF program reports: it refuses to
/// start, in one line saying what to do, rather than record nothing.
#[test]
fn pyperf_in_a_pid_namespace_of_its_own_refuses_to_start() {
    let (_dir, out) = scratch("inside.pyp");
    let o = run(Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_pyperf"))
        .args(["record", "-a", "-d", "1", "-o"])
        .arg(&out));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.trim(),
        "pyperf: pyperf runs in a PID namespace of its own (a container): it must see the host's processes; run it \
         on the host, or in a container sharing the host's PID namespace (--pid=host)"
    );
    assert!(!out.exists(), "nothing written");
}
