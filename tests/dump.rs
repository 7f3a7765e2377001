//! `pyperf dump -p PID`: every thread of a running process with its exact Python stack and state, without stopping
//! it, on 2.7, 3.6, 3.11, 3.13, 3.14 and 3.15 (the last three in the Debian sid root). Needs root.

mod common;

use common::*;
use serde_json::Value;

/// (thread name, its leaf function, the leaf's line in testdata/workloads/dump.py).
const EXPECTED: &[(&str, &str, u64)] =
    &[("napper", "nap", 28), ("waiter", "wait_lock", 33), ("left", "grab", 42), ("right", "grab", 42)];

fn dump_of(python: &str) {
    let _guard = serial();
    let py = interpreter(python);
    let mut child = start_workload(&py, "dump.py", &[]);
    let pid = child.id();
    let o = pyperf().args(["dump", "-p", &pid.to_string(), "--json"]).output().expect("run pyperf dump");
    let k = pyperf().args(["dump", "-p", &pid.to_string(), "--json", "--kernel"]).output().expect("run pyperf dump");
    let n = pyperf().args(["dump", "-p", &pid.to_string(), "--json", "--native"]).output().expect("run pyperf dump");
    // The process was not stopped: it is still there and running.
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{python}: {}", String::from_utf8_lossy(&o.stderr));
    assert!(alive, "{python}: the process died");
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let threads = doc["threads"].as_array().expect("threads");
    let by_name = |n: &str| {
        threads
            .iter()
            .find(|t| t["name"].as_str() == Some(n))
            .unwrap_or_else(|| panic!("{python}: no thread {n} in {doc:#}"))
    };
    for &(name, leaf, line) in EXPECTED {
        let t = by_name(name);
        let frames = t["frames"].as_array().unwrap_or_else(|| panic!("{python} {name}: {t}"));
        assert_eq!(frames[0]["function"].as_str(), Some(leaf), "{python} {name}: {t}");
        assert_eq!(frames[0]["line"].as_u64(), Some(line), "{python} {name}: {t}");
        assert!(frames[0]["file"].as_str().is_some_and(|f| f.ends_with("dump.py")), "{python} {name}: {t}");
        // Below it the threading module's run and bootstrap, nothing spliced in between.
        assert_eq!(frames[1]["function"].as_str(), Some("Thread.run"), "{python} {name}: {t}");
        assert_eq!(t["state"].as_str(), Some("waiting"), "{python} {name}: {t}");
        assert_ne!(t["gil"].as_str(), Some("holds"), "{python} {name}: a blocked thread holds the GIL: {t}");
    }
    // Locks: futex (never the GIL); the nap: a sleep call.
    for name in ["waiter", "left", "right"] {
        let t = by_name(name);
        assert_eq!(t["syscall"].as_str(), Some("futex"), "{python} {name}: {t}");
        assert_ne!(t["gil"].as_str(), Some("waiting"), "{python} {name}: a lock wait is not a GIL wait: {t}");
    }
    let nap = by_name("napper");
    assert!(
        ["clock_nanosleep", "select", "pselect6", "nanosleep"].contains(&nap["syscall"].as_str().unwrap_or("")),
        "{python}: {nap}"
    );
    // The busy thread: read although it runs (two reads agreed).
    let spinner = by_name("spinner");
    let frames = spinner["frames"].as_array().unwrap_or_else(|| panic!("{python}: spinner not read: {spinner}"));
    assert_eq!(frames[0]["function"].as_str(), Some("spin"), "{python}: {spinner}");
    // --kernel: a lock waiter's kernel frames (futex, innermost first) above its Python leaf.
    assert!(k.status.success(), "{python}: {}", String::from_utf8_lossy(&k.stderr));
    let kdoc: Value = serde_json::from_slice(&k.stdout).expect("JSON");
    let waiter = kdoc["threads"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"].as_str() == Some("waiter")))
        .unwrap_or_else(|| panic!("{python}: {kdoc}"));
    let frames = waiter["frames"].as_array().expect("frames");
    let kernel: Vec<&str> = frames
        .iter()
        .take_while(|f| f["kind"].as_str() == Some("kernel"))
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(kernel.iter().any(|f| f.contains("futex")), "{python}: {waiter}");
    assert_eq!(frames[kernel.len()]["function"].as_str(), Some("wait_lock"), "{python}: {waiter}");
    // --native: each blocked thread's native frames (libc's wait, the interpreter's lock and evaluation loop)
    // merged with its Python frames, which are exactly those of the dump without --native, in the same order.
    assert!(n.status.success(), "{python}: {}", String::from_utf8_lossy(&n.stderr));
    let ndoc: Value = serde_json::from_slice(&n.stdout).expect("JSON");
    let nthreads = ndoc["threads"].as_array().expect("threads");
    for &(name, _, _) in EXPECTED {
        let plain = by_name(name);
        let t = nthreads
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("{python}: no {name} with --native: {ndoc:#}"));
        assert!(t["native_missing"].is_null(), "{python} {name}: {t:#}");
        let frames = t["frames"].as_array().unwrap_or_else(|| panic!("{python} {name}: {t:#}"));
        let kinds: Vec<&str> = frames.iter().filter_map(|f| f["kind"].as_str()).collect();
        assert_eq!(kinds.first(), Some(&"native"), "{python} {name}: the leaf is native (the wait): {t:#}");
        assert!(!kinds.contains(&"marker"), "{python} {name}: merged, unwound to the end: {t:#}");
        let py = |frames: &[Value]| -> Vec<(String, u64)> {
            frames
                .iter()
                .filter(|f| f["kind"].as_str() == Some("python"))
                .map(|f| (f["function"].as_str().unwrap_or("").to_string(), f["line"].as_u64().unwrap_or(0)))
                .collect()
        };
        assert_eq!(py(frames), py(plain["frames"].as_array().expect("frames")), "{python} {name}: {t:#}");
        // Native frames between the Python leaf and the wait: the interpreter's own.
        let leaf = frames.iter().position(|f| f["kind"].as_str() == Some("python")).expect("a Python frame");
        assert!(leaf >= 2, "{python} {name}: native frames above the Python leaf: {t:#}");
    }
    let spinner = nthreads.iter().find(|t| t["name"].as_str() == Some("spinner")).expect("spinner");
    // Running (or, between two bytecodes, waiting for the GIL: then read as a blocked thread).
    assert!(
        spinner["native_missing"].is_null()
            || spinner["native_missing"].as_str().is_some_and(|m| m.contains("running")),
        "{python}: {spinner:#}"
    );
    let main = by_name("MainThread");
    let frames = main["frames"].as_array().expect("main frames");
    assert_eq!(frames[0]["function"].as_str(), Some("main"), "{python}: {main}");
    assert_eq!(frames[1]["function"].as_str(), Some("<module>"), "{python}: {main}");
}

per_interpreter! { dump_of:
    dump_2_7("2.7.18"),
    dump_3_6("3.6.15"),
    dump_3_11("3.11.7"),
    dump_sid_3_13("sid-3.13"),
    dump_sid_3_14("sid-3.14"),
    dump_sid_3_15("sid-3.15"),
}

/// Every JSON key `dump --help` names is one a real `--json` output has, and every key the output has is named.
#[test]
fn help_names_the_json_keys() {
    let _guard = serial();
    let help = pyperf().args(["dump", "--help"]).output().expect("pyperf dump --help");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    // The --json paragraph (wrapped or not): up to the next option.
    let start = help.find("--json").expect("--json in the help");
    let end = help[start..].find("--kernel").map_or(help.len(), |e| start + e);
    let named: std::collections::BTreeSet<String> =
        help[start..end].split('"').skip(1).step_by(2).map(str::to_string).collect();
    assert!(named.contains("tid") && named.contains("frames"), "{help}");
    let mut child = start_workload(&interpreter("3.11.7"), "dump.py", &[]);
    let o = pyperf()
        .args(["dump", "-p", &child.id().to_string(), "--json", "--native", "--kernel"])
        .output()
        .expect("run pyperf dump");
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    fn keys(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut produced = std::collections::BTreeSet::new();
    keys(&doc, &mut produced);
    assert_eq!(named, produced, "dump --help against a real --json output");
}

/// The state letter of /proc/PID/stat.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `dump -p` of what is not a Python process says what it is; a thread's id dumps its process, with a note.
#[test]
fn dump_says_what_a_pid_is() {
    let _guard = serial();
    // kthreadd.
    let o = pyperf().args(["dump", "-p", "2"]).output().expect("run pyperf dump");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pid 2 is a kernel thread, not a Python process"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A child that exited and that this test does not reap (yet).
    let mut zombie = std::process::Command::new("true").spawn().expect("spawn true");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while state_of(zombie.id()) != Some('Z') {
        assert!(std::time::Instant::now() < deadline, "true did not exit");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = pyperf().args(["dump", "-p", &zombie.id().to_string()]).output().expect("run pyperf dump");
    let _ = zombie.wait();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pid {} is a zombie (exited, not reaped", zombie.id())), "{err}");
    // A thread of a Python process: the process, said.
    let mut child = start_workload(&interpreter("3.11.7"), "dump.py", &[]);
    let pid = child.id();
    let tid: u32 = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .find(|&t| t != pid)
        .expect("a thread");
    let o = pyperf().args(["dump", "-p", &tid.to_string(), "--json"]).output().expect("run pyperf dump");
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("pid {tid} is a thread of process {pid}; dumping process {pid}")), "{err}");
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(doc["pid"].as_u64(), Some(u64::from(pid)), "{doc:#}");
    let threads = doc["threads"].as_array().expect("threads");
    assert!(threads.iter().any(|t| t["tid"].as_u64() == Some(u64::from(tid))), "{doc:#}");
}

/// pyperf with only CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE, run by another user than the process's: `dump
/// --native` and `dump --kernel` give the Python stacks, the frames they cannot read marked so with the reason (and
/// said once on stderr), instead of failing on "Permission denied" or showing nothing; `record --kernel` says at
/// the start, in one line, that kernel frames will be unnamed and what to do.
#[test]
fn dump_with_only_capabilities_marks_what_it_cannot_read() {
    let _guard = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("pyperf");
    std::fs::copy(env!("CARGO_BIN_EXE_pyperf"), &bin).unwrap();
    let chmod = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    chmod(dir.path(), 0o777);
    chmod(&bin, 0o755);
    let set = std::process::Command::new("setcap")
        .arg("cap_bpf,cap_perfmon,cap_sys_ptrace+ep")
        .arg(&bin)
        .output()
        .expect("setcap (scripts/setup installs it)");
    assert!(set.status.success(), "setcap: {}", String::from_utf8_lossy(&set.stderr));
    // Debian's interpreter: every file it maps is readable by anyone.
    let mut child = start_workload(&interpreter("debian-3.11"), "dump.py", &[]);
    let pid = child.id().to_string();
    let as_nobody = |args: &[&str]| {
        run(std::process::Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(&bin)
            .args(args))
    };
    let native = as_nobody(&["dump", "-p", &pid, "--json", "--native"]);
    let kernel = as_nobody(&["dump", "-p", &pid, "--json", "--kernel"]);
    let out = dir.path().join("k.pyp");
    let record = as_nobody(&["record", "-p", &pid, "-d", "1", "--kernel", "-o", out.to_str().unwrap()]);
    let _ = child.kill();
    let _ = child.wait();
    for (what, o, key, warning) in [
        ("--native", &native, "native_missing", "warning: --native: native frames of"),
        ("--kernel", &kernel, "kernel_missing", "warning: --kernel: kernel frames of"),
    ] {
        assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().filter(|l| l.contains(warning)).count(), 1, "{what}: {err}");
        let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        for &(name, leaf, _) in EXPECTED {
            let t = doc["threads"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["name"].as_str() == Some(name)))
                .unwrap_or_else(|| panic!("{what}: no {name}: {doc:#}"));
            assert!(t[key].as_str().is_some_and(|m| m.contains("permission denied")), "{what} {name}: {t:#}");
            let frames = t["frames"].as_array().unwrap_or_else(|| panic!("{what} {name}: {t:#}"));
            assert_eq!(frames[0]["function"].as_str(), Some(leaf), "{what} {name}: {t:#}");
        }
    }
    assert!(record.status.success(), "{}", String::from_utf8_lossy(&record.stderr));
    let err = String::from_utf8_lossy(&record.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("kernel frames will be unnamed")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("CAP_SYSLOG"), "{err}");
}

/// The interpreter's file replaced by a FIFO after it started, read by pyperf with only its capabilities (so
/// /proc/PID/map_files is closed and the path is what is left): `dump` ends with an error instead of blocking in
/// open() forever.
#[test]
fn an_interpreter_replaced_by_a_fifo_does_not_block_dump() {
    let _guard = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let chmod = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    chmod(dir.path(), 0o777);
    let bin = dir.path().join("pyperf");
    std::fs::copy(env!("CARGO_BIN_EXE_pyperf"), &bin).unwrap();
    chmod(&bin, 0o755);
    let set = std::process::Command::new("setcap")
        .arg("cap_bpf,cap_perfmon,cap_sys_ptrace+ep")
        .arg(&bin)
        .output()
        .expect("setcap (scripts/setup installs it)");
    assert!(set.status.success(), "setcap: {}", String::from_utf8_lossy(&set.stderr));
    let exe = dir.path().join("python3.11");
    std::fs::copy(interpreter("debian-3.11"), &exe).unwrap();
    let mut child = start_workload(&exe, "dump.py", &[]);
    std::fs::remove_file(&exe).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&exe).status().is_ok_and(|s| s.success()));
    let o = run(std::process::Command::new("timeout")
        .args(["-s", "KILL", "60", "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&bin)
        .args(["dump", "-p", &child.id().to_string()]));
    let _ = child.kill();
    let _ = child.wait();
    // Killed by the timeout (a signal status, or 137); a refusal is an ordinary failure.
    assert!(o.status.code().is_some_and(|c| c != 137), "dump blocked: {:?}", o.status);
}
