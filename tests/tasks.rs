//! asyncio tasks (#31), end to end on CPython 3.11, 3.12, 3.13 (pyenv) and Debian sid's 3.13, 3.14 and 3.15:
//! `pyperf dump --async` against the workload's known tree and, on 3.14+, against CPython's own reader
//! (`asyncio.tools`, what `python -m asyncio pstree` prints) on the same parked process. Needs root.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;

/// Line of testdata/workloads/tasks.py tagged `# at:TAG`.
fn line_of(tag: &str) -> u64 {
    line_in("tasks.py", tag)
}

/// Line of testdata/workloads/SCRIPT tagged `# at:TAG`.
fn line_in(script: &str, tag: &str) -> u64 {
    let text = std::fs::read_to_string(workload(script)).expect("workload");
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

/// Tasks as JSON objects with "id", "name", "frames" (leaf first, each made a frame by `frame`) and "awaited_by"
/// (ids), by id, awaiters by name.
fn tasks_of(list: &[Value], frame: impl Fn(&Value) -> (String, String, u64)) -> BTreeMap<String, Task> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let names: BTreeMap<String, String> = list.iter().map(|t| (text(&t["id"]), text(&t["name"]))).collect();
    list.iter()
        .map(|t| {
            let frames = t["frames"].as_array().expect("frames").iter().map(&frame).collect();
            let mut by: Vec<String> = t["awaited_by"]
                .as_array()
                .expect("awaited_by")
                .iter()
                .map(|a| names.get(&text(a)).cloned().unwrap_or_default())
                .collect();
            by.sort();
            (text(&t["id"]), (text(&t["name"]), frames, by))
        })
        .collect()
}

/// `dump --async --json`'s tasks, by id.
fn pyperf_tasks(pid: u32) -> BTreeMap<String, Task> {
    let o = pyperf().args(["dump", "-p", &pid.to_string(), "--async", "--json"]).output().expect("run pyperf dump");
    assert!(o.status.success(), "dump --async: {}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let tasks = doc["tasks"].as_array().unwrap_or_else(|| panic!("no tasks in {doc:#}"));
    for t in tasks {
        assert!(!t["cut"].as_bool().unwrap_or(true), "a short chain cut: {t}");
    }
    // Qualified (`Event.wait`), as asyncio.tools names them too (co_qualname).
    tasks_of(tasks, |f| {
        let function = f["function"].as_str().unwrap_or("").to_string();
        (function, tail(f["file"].as_str().unwrap_or("")), f["line"].as_u64().unwrap_or(0))
    })
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
    tasks_of(doc.as_array().expect("a list"), |f| {
        (f[0].as_str().unwrap_or("").to_string(), tail(f[1].as_str().unwrap_or("")), f[2].as_u64().unwrap_or(0))
    })
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

/// `pyperf report -i REC ARGS`: its standard output.
fn report(rec: &std::path::Path, args: &[&str]) -> String {
    let o = pyperf().arg("report").arg("-i").arg(rec).args(args).output().expect("run pyperf report");
    assert!(o.status.success(), "pyperf report {args:?}: {}", String::from_utf8_lossy(&o.stderr).trim());
    String::from_utf8(o.stdout).expect("UTF-8 report")
}

/// Folded lines: (frames root first, count).
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack.split(';').map(str::to_string).collect(), n.parse().ok()?))
        })
        .collect()
}

/// A folded frame `name (file:line)` as (name, line); a pseudo-frame (`[task X]`) as (itself, 0).
fn frame(f: &str) -> (String, u64) {
    match f.rsplit_once(" (") {
        Some((name, rest)) if !f.starts_with('[') => {
            let line = rest.trim_end_matches(')').rsplit(':').next().and_then(|l| l.parse().ok()).unwrap_or(0);
            (name.to_string(), line)
        }
        _ => (f.to_string(), 0),
    }
}

/// Whether a task-view stack of a `crunch` sample is one of the two the workload makes, exactly: names, task
/// boundaries and the lines of every suspended frame (and of the running frames rootward of the leaf).
fn stitched_right(stack: &[String]) -> bool {
    let fr: Vec<(String, u64)> = stack.iter().map(|f| frame(f)).collect();
    let is = |i: usize, name: &str, tag: &str| fr.get(i).is_some_and(|f| f.0 == name && f.1 == line_of(tag));
    let task = |i: usize, prefix: &str| fr.get(i).is_some_and(|f| f.0.starts_with(prefix) && f.0.ends_with(']'));
    let number = |i: usize, stem: &str| -> Option<u64> {
        let f = fr.get(i)?;
        let n = f.0.strip_prefix(&format!("[task {stem}-"))?.strip_suffix(']')?;
        n.bytes().all(|b| b.is_ascii_digit()).then(|| n.parse().ok()).flatten()
    };
    let leaf = |i: usize| fr.len() == i + 1 && fr[i].0 == "crunch";
    // A request's orders task: root task, its gather, the request, its gather, the orders task running; request-K
    // makes orders-K (a task that took an ended one's address once got that one's names).
    let orders = fr.len() == 8
        && fr[0].0 == "[task Task-1]"
        && is(1, "serve", "serve")
        && number(2, "request").is_some_and(|k| number(4, "orders") == Some(k))
        && is(3, "handle_request", "handle_request")
        && is(5, "fetch_orders", "fetch_orders")
        && is(6, "compute", "compute")
        && leaf(7);
    // The shared task, awaited by `first` and `second`: one followed, the other counted.
    let shared = fr.len() == 5
        && (fr[0].0 == "[task first]" || fr[0].0 == "[task second]")
        && is(1, "waits_for", "waits_for")
        && task(2, "[task shared (+1 awaiters)")
        && is(3, "shared_work", "shared_work")
        && leaf(4);
    orders || shared
}

fn record_tasks(python: &str) {
    let _guard = serial();
    let py = interpreter(python);
    let mut child = Kid(start_workload(&py, "tasks.py", &[]));
    let pid = child.0.id();
    let (_dir, out) = scratch("tasks.pyp");
    // Enough CPU for several batches of requests (each ~0.7 s) and ~20 cycles of the waiter (0.4 s each: its split
    // is sampled by sweeps, fewer cycles gave +-0.1). The workload's clock
    // of its waits covers the recording: reset once the recorder records, read before it stops.
    let mut rec = Kid(pyperf()
        .args(["record", "-p", &pid.to_string(), "--off-cpu", "--async-rate", "50", "-F", "199", "-o"])
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run pyperf record"));
    wait_recording(&out);
    // SAFETY: plain kill(2) of the workload this test started.
    unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
    wait_cpu(pid, 8.0);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.0.stdout.as_mut().expect("stdout")), &mut line)
        .expect("the workload's waits");
    assert!(interrupt(&mut rec.0).success(), "{python}: record failed");
    let secs = |key: &str| -> f64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{python}: workload said {line:?}"))
    };
    let (short, long) = (secs("short"), secs("long"));

    // CPU, task view, exact names: every stitched crunch stack is one the workload makes.
    let exact = folded(&report(&out, &["--folded", "--exact-task-names"]));
    let crunch: Vec<&(Vec<String>, u64)> =
        exact.iter().filter(|(s, _)| s.last().is_some_and(|f| frame(f).0 == "crunch")).collect();
    let total: u64 = crunch.iter().map(|(_, n)| n).sum();
    let stitched: u64 = crunch.iter().filter(|(s, _)| s[0].starts_with("[task ")).map(|(_, n)| n).sum();
    let wrong: Vec<&&(Vec<String>, u64)> =
        crunch.iter().filter(|(s, _)| s[0].starts_with("[task ") && !stitched_right(s)).collect();
    assert!(total >= 100, "{python}: only {total} crunch samples:\n{exact:?}");
    assert!(wrong.is_empty(), "{python}: wrongly stitched stacks: {wrong:#?}");
    assert!(stitched * 100 >= total * 95, "{python}: {stitched} of {total} crunch samples stitched:\n{crunch:#?}");
    // Tasks ended and new ones came: several batches of requests, each named on its own.
    let orders: std::collections::BTreeSet<&str> = crunch
        .iter()
        .filter_map(|(s, _)| s.get(4))
        .filter(|f| f.starts_with("[task orders-"))
        .map(|f| f.as_str())
        .collect();
    assert!(orders.len() >= 6, "{python}: tasks of one batch only: {orders:?}");

    // Aggregated by default: counters become N, one tower.
    let agg = report(&out, &["--folded"]);
    assert!(agg.contains("[task request-N]") && agg.contains("[task orders-N]"), "{python}:\n{agg}");
    assert!(!agg.contains("[task request-1]"), "{python}: counters kept by default:\n{agg}");
    // The thread view: no task frames, the loop's frames instead.
    let plain = report(&out, &["--folded", "--no-async"]);
    assert!(!plain.contains("[task ") && plain.contains("_run"), "{python}: --no-async:\n{plain}");

    // Wall: where the waiter waits, split between its two awaits as its own clock says.
    let wall = folded(&report(&out, &["--folded", "--mode", "wall"]));
    let waited = |name: &str| -> u64 {
        wall.iter()
            .filter(|(s, _)| s[0] == "[task waiter]" && s.iter().any(|f| frame(f).0 == name))
            .map(|(_, n)| n)
            .sum()
    };
    let (s_us, l_us) = (waited("short_wait"), waited("long_wait"));
    assert!(s_us + l_us > 0, "{python}: no waits of the waiter task in the wall view:\n{wall:?}");
    let share = s_us as f64 / (s_us + l_us) as f64;
    let truth = short / (short + long);
    eprintln!("{python}: wall view {share:.3} of the waiter's waits in short_wait, its clock {truth:.3}");
    assert!(
        (share - truth).abs() <= 0.1,
        "{python}: the wall view puts {share:.3} of the waiter's waits in short_wait, its clock {truth:.3}"
    );
    // The waits are where the workload awaits them, under their task, with the line of each await.
    // (The heaviest such stack: a sweep may also catch the waiter between two awaits, its sleep just ended.)
    let w = wall
        .iter()
        .filter(|(s, _)| s[0] == "[task waiter]" && s.iter().any(|f| frame(f).0 == "long_wait"))
        .max_by_key(|(_, n)| *n);
    let w = &w.expect("a long wait").0;
    assert!(w.len() >= 4, "{python}: {w:?}");
    assert_eq!(frame(&w[1]), ("waiter".to_string(), line_of("waiter_long")), "{python}: {w:?}");
    assert_eq!(frame(&w[2]), ("long_wait".to_string(), line_of("long_wait")), "{python}: {w:?}");
    assert_eq!(frame(&w[3]).0, "sleep", "{python}: {w:?}");
    // The loop's own time is kept apart from the tasks': its callback (2 ms every 50 ms: enough samples on a busy
    // machine, where the loop's other time outside tasks, a few samples, was once none) is under `[asyncio loop]`,
    // never under a task (a sample before the recorder knows the thread runs a loop keeps its plain thread stack).
    let housekeeping = |s: &Vec<String>| s.iter().any(|f| frame(f).0 == "housekeeping");
    assert!(
        wall.iter().any(|(s, _)| s[0] == "[asyncio loop]" && housekeeping(s)),
        "{python}: no loop callback time in the wall view"
    );
    let misplaced: Vec<_> =
        wall.iter().filter(|(s, _)| housekeeping(s) && s[0].starts_with("[task ")).take(3).collect();
    assert!(misplaced.is_empty(), "{python}: the loop's callback elsewhere: {misplaced:?}");

    // The text report lists the busiest task chains.
    let text = report(&out, &[]);
    assert!(
        text.contains("Busiest task chains") && text.contains("Task-N > request-N > orders-N"),
        "{python}: no task chains in the text report:\n{text}"
    );
}

per_interpreter! { record_tasks:
    record_tasks_3_11_7("3.11.7"),
    record_tasks_3_12_1("3.12.1"),
    record_tasks_3_13_0("3.13.0"),
    record_tasks_sid_3_14("sid-3.14"),
    record_tasks_sid_3_15("sid-3.15"),
}

/// The virtual environment scripts/setup makes with uvicorn, uvloop and Starlette.
fn asgi_python() -> std::path::PathBuf {
    let venv = std::env::var_os("PYPERF_ASGI_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join("target/asgi-venv"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "no {} (uvicorn, uvloop, starlette): run scripts/setup", py.display());
    py
}

/// A real service as users run it: uvicorn on uvloop serving a Starlette app, driven by a bounded loopback client.
/// The endpoint's coroutine is under its request task in the CPU view, its database await in the wall view.
#[test]
fn asgi_service_on_uvloop() {
    let _guard = serial();
    let py = asgi_python();
    let mut app = Kid(std::process::Command::new(&py)
        .arg(workload("asgi_app.py"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the app"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(app.0.stdout.as_mut().expect("stdout")), &mut line)
        .expect("the app's ready line");
    let port = line.strip_prefix("ready ").map(str::trim).unwrap_or_else(|| panic!("the app said {line:?}"));
    let pid = app.0.id();
    let (_dir, out) = scratch("asgi.pyp");
    let mut rec = Kid(pyperf()
        .args(["record", "-p", &pid.to_string(), "--off-cpu", "--async-rate", "50", "-o"])
        .arg(&out)
        .spawn()
        .expect("run pyperf record"));
    wait_recording(&out);
    let client = std::process::Command::new(&py)
        .arg(workload("asgi_client.py"))
        .args([port, "4", "8"])
        .output()
        .expect("run the client");
    assert!(client.status.success(), "client: {}", String::from_utf8_lossy(&client.stderr));
    let served = String::from_utf8_lossy(&client.stdout);
    assert!(served.starts_with("done "), "client said {served:?}");
    assert!(interrupt(&mut rec.0).success(), "the recorder failed");

    let stitched = |stack: &[String]| {
        let fr: Vec<(String, u64)> = stack.iter().map(|f| frame(f)).collect();
        // Root: the request's task (uvicorn's per-request task, default name), then uvicorn's cycle.
        fr[0].0 == "[task Task-N]" && fr.get(1).is_some_and(|f| f.0 == "RequestResponseCycle.run_asgi")
    };
    // CPU: the endpoint under its request task. A request lives ~25 ms and renders at its end: the program wakes
    // the recorder for a task's record (~70% of the samples stitched; 30% when only the 10 ms poll read them), and
    // a sample taken in a task's last moments, read after it is gone, keeps the thread view (counted, never
    // guessed).
    let cpu = folded(&report(&out, &["--folded"]));
    let render: Vec<&(Vec<String>, u64)> =
        cpu.iter().filter(|(s, _)| s.iter().any(|f| frame(f).0 == "render")).collect();
    let total: u64 = render.iter().map(|(_, n)| n).sum();
    let is_right = |s: &[String]| {
        stitched(s)
            && s.windows(2).any(|w| {
                frame(&w[0]) == ("orders".into(), line_in("asgi_app.py", "asgi_orders_render"))
                    && frame(&w[1]).0 == "render"
            })
    };
    let tasked: Vec<&&(Vec<String>, u64)> = render.iter().filter(|(s, _)| s[0].starts_with("[task ")).collect();
    let wrong: Vec<&&&(Vec<String>, u64)> = tasked.iter().filter(|(s, _)| !is_right(s)).collect();
    let good: u64 = tasked.iter().map(|(_, n)| n).sum();
    assert!(total >= 20, "only {total} samples in render:\n{cpu:?}");
    assert!(wrong.is_empty(), "wrongly stitched: {wrong:#?}");
    assert!(good * 5 >= total * 2, "{good} of {total} render samples under their request task:\n{render:#?}");
    let text = report(&out, &[]);
    let unknown = text
        .split(", ")
        .find_map(|c| c.strip_prefix("task_unknown "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .expect("the task_unknown counter");
    assert!(unknown + good >= total, "samples neither stitched nor counted unknown: {good} + {unknown} < {total}");
    let wakeups = text.split(", ").find_map(|c| c.strip_prefix("bpf_task_wakeups ")).map(str::trim);
    eprintln!("render: {good} of {total} samples under their request task, {unknown} unknown, wakeups {wakeups:?}");

    let wall = folded(&report(&out, &["--folded", "--mode", "wall"]));
    let db: u64 = wall
        .iter()
        .filter(|(s, _)| {
            stitched(s)
                && s.windows(3).any(|w| {
                    frame(&w[0]) == ("orders".into(), line_in("asgi_app.py", "asgi_orders_await"))
                        && frame(&w[1]) == ("query_db".into(), line_in("asgi_app.py", "asgi_query_db"))
                        && frame(&w[2]).0 == "sleep"
                })
        })
        .map(|(_, n)| n)
        .sum();
    assert!(db > 0, "no request waits in query_db in the wall view:\n{wall:?}");
}

/// A process whose asyncio pyperf cannot read (no C `_asyncio`: pure-Python tasks) is recorded with plain stacks,
/// and the recording says so once, in one line.
#[test]
fn pure_python_tasks_are_said_once() {
    let _guard = serial();
    let py = interpreter("3.12.1");
    let child = Kid(start_workload(&py, "tasks.py", &["pure"]));
    let pid = child.0.id();
    let (_dir, out) = scratch("pure.pyp");
    let o = record_for_cpu(
        pyperf().args(["record", "-p", &pid.to_string(), "--async-rate", "20", "-o"]).arg(&out),
        &out,
        pid,
        1.0,
    );
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("asyncio tasks of this process are not read")).collect();
    assert_eq!(said.len(), 1, "said once on stderr:\n{stderr}");
    assert!(said[0].contains("_asyncio"), "{}", said[0]);
    let text = report(&out, &[]);
    assert_eq!(text.matches("asyncio tasks of this process are not read").count(), 1, "once in the file:\n{text}");
    let plain = report(&out, &["--folded"]);
    assert!(!plain.contains("[task ") && plain.contains("crunch"), "plain stacks:\n{plain}");
}

/// `pyperf top` shows the task view: task boundaries as rows of their own, aggregated (`[task request-N]`).
#[test]
fn top_shows_tasks() {
    let _guard = serial();
    let py = interpreter("3.12.1");
    let child = Kid(start_workload(&py, "tasks.py", &[]));
    let mut top = Kid(pyperf()
        .args(["top", "--interval", "1", "--rows", "40", "-p", &child.0.id().to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("pyperf top"));
    let out = top.0.stdout.take().expect("stdout");
    // Plain tables (stdout is not a terminal), read until one has the tasks (at most two minutes).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut table = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            if line.starts_with("pyperf top - ") && !table.is_empty() && tx.send(std::mem::take(&mut table)).is_err() {
                return;
            }
            table.push_str(&line);
            table.push('\n');
        }
    });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let want = ["[task Task-N]", "[task request-N]", "[task orders-N]", "[task shared (+1 awaiters)]"];
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let table = rx.recv_timeout(left).expect("a table with the tasks within two minutes");
        if want.iter().all(|w| table.contains(w)) {
            assert!(!table.contains("[task request-1]"), "counters aggregated:\n{table}");
            assert!(!table.contains("[task Task-N] ("), "a boundary has no file:\n{table}");
            break;
        }
    }
}
