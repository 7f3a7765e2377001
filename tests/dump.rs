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

#[test]
fn dump_2_7() {
    dump_of("2.7.18");
}

#[test]
fn dump_3_6() {
    dump_of("3.6.15");
}

#[test]
fn dump_3_11() {
    dump_of("3.11.7");
}

#[test]
fn dump_sid_3_13() {
    dump_of("sid-3.13");
}

#[test]
fn dump_sid_3_14() {
    dump_of("sid-3.14");
}

#[test]
fn dump_sid_3_15() {
    dump_of("sid-3.15");
}
