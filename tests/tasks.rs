//! asyncio tasks (#31), end to end on CPython 3.11, 3.12, 3.13 (pyenv) and Debian sid's 3.13, 3.14 and 3.15:
//! `pyperf dump --async` against the workload's known tree and, on 3.14+, against CPython's own reader
//! (`asyncio.tools`, what `python -m asyncio pstree` prints) on the same parked process. Needs root.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;

/// Line of testdata/workloads/tasks.py tagged `# at:TAG`.
fn line_of(tag: &str) -> u64 {
    let text = std::fs::read_to_string(workload("tasks.py")).expect("tasks.py");
    let want = format!("# at:{tag}");
    let n = text.lines().position(|l| l.trim_end().ends_with(&want)).unwrap_or_else(|| panic!("no {want}"));
    n as u64 + 1
}

/// The last two parts of a path (`workloads/tasks.py`, not asyncio's own `asyncio/tasks.py`).
fn tail(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    format!("{}/{}", parts.get(1).unwrap_or(&""), parts[0])
}

/// A task as both readers give it: name, frames leaf first as (function, file name, line), the names of the tasks
/// awaiting it.
type Task = (String, Vec<(String, String, u64)>, Vec<String>);

/// `dump --async --json`'s tasks, by id.
fn pyperf_tasks(pid: u32) -> BTreeMap<String, Task> {
    let o = pyperf().args(["dump", "-p", &pid.to_string(), "--async", "--json"]).output().expect("run pyperf dump");
    assert!(o.status.success(), "dump --async: {}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let tasks = doc["tasks"].as_array().unwrap_or_else(|| panic!("no tasks in {doc:#}"));
    let names: BTreeMap<String, String> = tasks
        .iter()
        .map(|t| (t["id"].as_str().unwrap_or("").to_string(), t["name"].as_str().unwrap_or("").to_string()))
        .collect();
    tasks
        .iter()
        .map(|t| {
            let frames = t["frames"]
                .as_array()
                .expect("frames")
                .iter()
                .map(|f| {
                    let file = tail(f["file"].as_str().unwrap_or(""));
                    // Qualified (`Event.wait`), as asyncio.tools names them too (co_qualname).
                    (f["function"].as_str().unwrap_or("").to_string(), file, f["line"].as_u64().unwrap_or(0))
                })
                .collect();
            let mut by: Vec<String> = t["awaited_by"]
                .as_array()
                .expect("awaited_by")
                .iter()
                .map(|a| names.get(a.as_str().unwrap_or("")).cloned().unwrap_or_default())
                .collect();
            by.sort();
            assert!(!t["cut"].as_bool().unwrap_or(true), "a short chain cut: {t}");
            (t["id"].as_str().unwrap_or("").to_string(), (t["name"].as_str().unwrap_or("").to_string(), frames, by))
        })
        .collect()
}

/// CPython's own reader's tasks (testdata/workloads/asyncio_peer.py, run by `python`), by id.
fn cpython_tasks(python: &std::path::Path, pid: u32) -> BTreeMap<String, Task> {
    let o = std::process::Command::new(python)
        .arg(workload("asyncio_peer.py"))
        .arg(pid.to_string())
        .output()
        .expect("run asyncio_peer.py");
    assert!(o.status.success(), "asyncio.tools: {}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let list = doc.as_array().expect("a list");
    let names: BTreeMap<String, String> = list
        .iter()
        .map(|t| (t["id"].as_str().unwrap_or("").to_string(), t["name"].as_str().unwrap_or("").to_string()))
        .collect();
    list.iter()
        .map(|t| {
            let frames = t["frames"]
                .as_array()
                .expect("frames")
                .iter()
                .map(|f| {
                    let file = tail(f[1].as_str().unwrap_or(""));
                    (f[0].as_str().unwrap_or("").to_string(), file, f[2].as_u64().unwrap_or(0))
                })
                .collect();
            let mut by: Vec<String> = t["awaited_by"]
                .as_array()
                .expect("awaited_by")
                .iter()
                .map(|a| names.get(a.as_str().unwrap_or("")).cloned().unwrap_or_default())
                .collect();
            by.sort();
            (t["id"].as_str().unwrap_or("").to_string(), (t["name"].as_str().unwrap_or("").to_string(), frames, by))
        })
        .collect()
}

/// The parked workload's tree, as the workload's source says it must be.
fn check_tree(python: &str, tasks: &BTreeMap<String, Task>) {
    let by_name = |n: &str| -> &Task {
        tasks.values().find(|t| t.0 == n).unwrap_or_else(|| panic!("{python}: no task {n} in {tasks:#?}"))
    };
    let f = |function: &str, tag: &str| (function.to_string(), "workloads/tasks.py".to_string(), line_of(tag));
    let leaf_only = |t: &Task| t.1.iter().filter(|fr| fr.1 == "workloads/tasks.py").cloned().collect::<Vec<_>>();
    assert_eq!(tasks.len(), 14, "{python}: {tasks:#?}");
    assert_eq!(by_name("Task-1").1, vec![f("serve", "serve_still")], "{python}");
    assert!(by_name("Task-1").2.is_empty(), "{python}");
    for k in 0..3 {
        let r = by_name(&format!("request-{k}"));
        assert_eq!(r.1, vec![f("handle_request", "handle_request")], "{python}");
        assert_eq!(r.2, vec!["Task-1".to_string()], "{python}: request-{k} awaited by the root");
        let o = by_name(&format!("orders-{k}"));
        assert_eq!(leaf_only(o), vec![f("park", "park"), f("fetch_orders", "fetch_orders_still")], "{python}");
        assert_eq!(o.1[0].0, "Event.wait", "{python}: orders-{k} waits in Event.wait: {o:?}");
        assert_eq!(o.2, vec![format!("request-{k}")], "{python}: orders-{k}'s awaiter");
    }
    // gather wrapped each audit() in a task named by the default counter, awaited by its request.
    let audits: Vec<&Task> = tasks.values().filter(|t| leaf_only(t) == vec![f("audit", "audit")]).collect();
    assert_eq!(audits.len(), 3, "{python}: {tasks:#?}");
    assert!(audits.iter().all(|t| t.0.starts_with("Task-") && t.2.len() == 1 && t.2[0].starts_with("request-")));
    let shared = by_name("shared");
    assert_eq!(shared.2, vec!["first".to_string(), "second".to_string()], "{python}: a task awaited by two");
    assert_eq!(leaf_only(shared), vec![f("park", "park"), f("shared_work", "shared_still")], "{python}");
    for n in ["first", "second"] {
        assert_eq!(by_name(n).1, vec![f("waits_for", "waits_for")], "{python}");
    }
    assert_eq!(
        leaf_only(by_name("waiter")),
        vec![f("long_wait_still", "long_wait_still"), f("waiter", "waiter_still")],
        "{python}"
    );
}

fn dump_async(python: &str) {
    let _guard = serial();
    let py = interpreter(python);
    let child = Kid(start_workload(&py, "tasks.py", &["still"]));
    let pid = child.0.id();
    let ours = pyperf_tasks(pid);
    check_tree(python, &ours);
    // 3.14+: CPython's own reader agrees, task for task (ids are the task objects' addresses in both).
    if python.ends_with("3.14") || python.ends_with("3.15") {
        let theirs = cpython_tasks(&py, pid);
        assert_eq!(ours, theirs, "{python}: pyperf dump --async and asyncio.tools differ");
    }
    // Text: the tree, each task under its awaiter.
    let o = pyperf().args(["dump", "-p", &pid.to_string(), "--async"]).output().expect("run pyperf dump");
    let text = String::from_utf8_lossy(&o.stdout);
    let at = |s: &str| text.find(s).unwrap_or_else(|| panic!("{python}: no {s:?} in\n{text}"));
    assert!(at("[task Task-1]") < at("[task request-0]") && at("[task request-0]") < at("[task orders-0]"));
    assert!(text.contains("(also awaited by"), "{python}: the second awaiter of shared is named:\n{text}");
}

per_interpreter! { dump_async:
    dump_async_3_11_7("3.11.7"),
    dump_async_3_12_1("3.12.1"),
    dump_async_3_13_0("3.13.0"),
    dump_async_sid_3_13("sid-3.13"),
    dump_async_sid_3_14("sid-3.14"),
    dump_async_sid_3_15("sid-3.15"),
}

/// A Python before 3.11 has no task view: one clear line.
#[test]
fn dump_async_refuses_old_pythons() {
    let _guard = serial();
    let py = interpreter("3.10.13");
    let child = Kid(start_workload(&py, "dump.py", &[]));
    let o = pyperf().args(["dump", "-p", &child.0.id().to_string(), "--async"]).output().expect("run pyperf dump");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("3.11+") && err.lines().count() == 1, "{err}");
}
