//! Python thread names (`threading.Thread.name`, issue #13) on every interpreter of testdata/interpreters (pyenv's
//! 2.7 and 3.6-3.13, Debian's 3.11, Debian sid's 3.13, 3.14 and 3.15 chrooted into the sid root): a workload whose
//! main thread and two threads named `worker-a` and `worker-b` burn CPU, each in a function of its own, is recorded
//! with `pyperf record -- python WORKLOAD`, and the recording's thread names (read with the format crate's reader)
//! must name the main thread `MainThread` and each worker's sampled tid (told by the function in its stack) by its
//! name: every one, exactly; a name missing is a failure, never a skip. Needs root (loads the real BPF program).
//!
//! Then: the reader on its own against live processes (no BPF): ten named threads named right, what one read costs,
//! names set after the threads started read again; a process in a PID namespace of its own (its tids mapped to the
//! samples'); and the offsets and facts thread names rely on, against each 3.11+ interpreter's own headers.

mod common;

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use pyperf::mem::{ProcMem, ReadMem};
use pyperf::python::threads::ThreadNameReader;

/// The workload: `python WORKLOAD SECONDS`. Runs on 2.7 and 3.x alike; prints `ready` once its threads started. The workers' functions are told apart in the
/// stacks (`burn_a`, `burn_b`); the main thread burns in `main_burn`.
const WORKLOAD: &str = r#"
import sys, threading, time

SECONDS = float(sys.argv[1])

def burn(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for i in range(2000):
            n += i
    return n

def burn_a():
    burn(SECONDS)

def burn_b():
    burn(SECONDS)

def main_burn():
    burn(SECONDS)

threads = [threading.Thread(target=burn_a, name="worker-a"), threading.Thread(target=burn_b, name="worker-b")]
for t in threads:
    t.start()
sys.stdout.write("ready\n")
sys.stdout.flush()
main_burn()
for t in threads:
    t.join()
"#;

/// A script in a fresh temp dir (visible inside the sid root: tests/common mounts the temp dir there).
fn script(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("workload.py");
    std::fs::write(&path, text).expect("write workload");
    (dir, path)
}

/// pid, tid, name of every thread name in the recording, per sampled tid the functions in its stacks, and per
/// function the names its samples' threads had at the samples' times ([`pyperf_format::Tables::thread_name`]).
struct Named {
    pid: u32,
    names: Vec<(u32, u32, String)>,
    functions: HashMap<u32, HashSet<String>>,
    /// function -> (tid, name at the sample's time) of each sample with it in the stack
    named_samples: HashMap<String, Vec<(u32, Option<String>)>>,
    /// (tid, time, name at that time) of every sample
    timeline: Vec<(u32, u64, Option<String>)>,
    /// (tid, time, functions of its stack) of every sample
    stacks: Vec<(u32, u64, Vec<String>)>,
    samples: usize,
    reads: u64,
    errors: u64,
    read_us: u64,
    stdout: String,
}

fn record(python: &Path, workload: &Path, seconds: &str, out: &Path) -> Named {
    let o = run(pyperf().args(["record", "-F", "199", "-o"]).arg(out).arg("--").arg(python).arg(workload).arg(seconds));
    assert!(o.status.success(), "pyperf record failed: {:?}", o.status);
    let mut functions: HashMap<u32, HashSet<String>> = HashMap::new();
    let (_, tables, samples, warnings) = read_each(out, |t, s, ids| {
        let names: Vec<String> = ids.iter().map(|&id| t.symbol(id).name.clone()).collect();
        (s.pid, s.tid, s.time_ns, names)
    });
    assert!(warnings.is_empty(), "{warnings:?}");
    // Names are looked up once the whole recording is read: they come after the samples they name.
    let mut named_samples: HashMap<String, Vec<(u32, Option<String>)>> = HashMap::new();
    let mut timeline = Vec::new();
    for (pid, tid, time_ns, names) in &samples {
        functions.entry(*tid).or_default().extend(names.iter().cloned());
        let name = tables.thread_name(*pid, *tid, *time_ns).map(str::to_string);
        timeline.push((*tid, *time_ns, name.clone()));
        for f in names.iter().collect::<HashSet<_>>() {
            named_samples.entry(f.clone()).or_default().push((*tid, name.clone()));
        }
    }
    assert_eq!(tables.processes.len(), 1, "{:?}", tables.processes);
    let counter = |k: &str| tables.stats.as_ref().and_then(|s| s.counter(k));
    Named {
        pid: tables.processes[0].pid,
        names: tables.thread_names.iter().map(|n| (n.pid, n.tid, n.name.clone())).collect(),
        functions,
        named_samples,
        timeline,
        stacks: samples.iter().map(|(_, tid, time, names)| (*tid, *time, names.clone())).collect(),
        samples: samples.len(),
        reads: counter("thread_name_reads").expect("a thread_name_reads counter"),
        errors: counter("thread_name_errors").expect("a thread_name_errors counter"),
        read_us: counter("thread_name_read_us").unwrap_or(0),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
    }
}

/// Records the workload under interpreter `name` and checks every sampled thread's name.
fn check(name: &str) {
    let _guard = serial();
    let python = interpreter(name);
    let (_dir, workload) = script(WORKLOAD);
    let (_out_dir, out) = scratch("names.pyp");
    let mut rec = record(&python, &workload, "3", &out);
    let sampled = |rec: &Named, f: &str| -> Vec<u32> {
        rec.functions.iter().filter(|(_, fs)| fs.contains(f)).map(|(&t, _)| t).collect()
    };
    if ["burn_a", "burn_b", "main_burn"].iter().any(|f| sampled(&rec, f).is_empty()) {
        eprintln!("{name}: a thread has no samples (busy machine?): recording once more");
        rec = record(&python, &workload, "3", &out);
    }
    eprintln!(
        "{name}: {} samples, thread names {:?}, {} reads of names ({} failed), {} us in all",
        rec.samples, rec.names, rec.reads, rec.errors, rec.read_us
    );
    let pid = rec.pid;
    for (p, _, _) in &rec.names {
        assert_eq!(*p, pid, "{name}: a name for another process");
    }
    for (function, want) in [("main_burn", "MainThread"), ("burn_a", "worker-a"), ("burn_b", "worker-b")] {
        let tids = sampled(&rec, function);
        assert_eq!(tids.len(), 1, "{name}: {function} sampled on threads {tids:?}");
        let tid = tids[0];
        if want == "MainThread" {
            assert_eq!(tid, pid, "{name}: the main thread's tid");
        } else {
            assert_ne!(tid, pid, "{name}: {want} on the main thread");
        }
        // Every sample of the thread, also those before its name was read.
        let named = &rec.named_samples[function];
        let wrong: Vec<_> = named.iter().filter(|(_, n)| n.as_deref() != Some(want)).collect();
        assert!(
            wrong.is_empty(),
            "{name}: {} of {} samples of {function} named {wrong:?}; names {:?}",
            wrong.len(),
            named.len(),
            rec.names
        );
    }
    // Each thread named once (none is renamed here); the workers' names end when they do (an empty name).
    let mut once = HashSet::new();
    for (_, tid, n) in rec.names.iter().filter(|n| !n.2.is_empty()) {
        assert!(once.insert(*tid), "{name}: thread {tid} named twice ({n}): {:?}", rec.names);
    }
    assert!(rec.reads >= 1, "{name}: no read of thread names counted");
    // A read may fail while the workers start and end (`_active` changing twice in a row, a `Thread` freed between
    // two reads: the reader gives up rather than guess), more often on a busy machine; the next read makes up for
    // it. Not every read.
    assert!(rec.errors < rec.reads, "{name}: every read of thread names failed ({} of {})", rec.errors, rec.reads);

    // The report names the threads so: every stack through a worker's function is under that worker's name.
    let o = run(pyperf().args(["report", "--folded", "--tid-root", "--no-lines"]).arg(&out));
    assert!(o.status.success(), "{name}: pyperf report failed");
    let folded = String::from_utf8_lossy(&o.stdout);
    for (function, want) in [("main_burn", "MainThread"), ("burn_a", "worker-a"), ("burn_b", "worker-b")] {
        let tid = sampled(&rec, function)[0];
        let root = format!("{want} [tid {tid}];");
        let lines: Vec<&str> = folded.lines().filter(|l| l.contains(&format!(";{function} ("))).collect();
        assert!(!lines.is_empty(), "{name}: no folded stack through {function}:\n{folded}");
        for line in lines {
            assert!(line.starts_with(&root), "{name}: {function}'s stack not under {root}: {line}");
        }
    }
}

every_interpreter!(check);

/// Every interpreter of testdata/interpreters has its test above (`every_interpreter!`).
#[test]
fn every_interpreter_is_tested() {
    let source = include_str!("common/mod.rs");
    for i in interpreters() {
        let test = format!("(\"{}\"),", i.name);
        assert!(source.contains(&test), "no thread-name test for {} (testdata/interpreters)", i.name);
    }
}

// ---- the reader alone, on live processes ----------------------------------------------------------------------

/// Ten named threads that wait (and a main thread); prints `ready` and then `NAME TID` lines once all run, then
/// renames every thread (`renamed-N`) when it reads a line on stdin, says `renamed`, and exits at the next line.
const TEN: &str = r#"
import sys, threading, time

def tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes
    return ctypes.CDLL(None).syscall(186)

ev = threading.Event()
tids = {}
def wait(i):
    tids[i] = tid()
    ev.wait()

threads = [threading.Thread(target=wait, args=(i,), name="pool-%d" % i) for i in range(10)]
for t in threads:
    t.start()
while len(tids) < 10:
    time.sleep(0.01)
sys.stdout.write("ready\n")
sys.stdout.write("MainThread %d\n" % tid())
for i, t in enumerate(threads):
    sys.stdout.write("%s %d\n" % (t.name, tids[i]))
sys.stdout.write("end\n")
sys.stdout.flush()
sys.stdin.readline()
for i, t in enumerate(threads):
    t.name = "renamed-%d" % i
sys.stdout.write("renamed\n")
sys.stdout.flush()
sys.stdin.readline()
ev.set()
for t in threads:
    t.join()
"#;

/// Starts TEN under `python`; returns the child and its names by tid (as the threads themselves said).
fn start_ten(python: &Path, workload: &Path) -> (Child, HashMap<u32, String>, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(python)
        .arg(workload)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the workload");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut want = HashMap::new();
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready", "the workload said {line:?}");
    loop {
        line.clear();
        out.read_line(&mut line).expect("read");
        let l = line.trim();
        if l == "end" || l.is_empty() {
            break;
        }
        let (n, t) = l.rsplit_once(' ').expect("NAME TID");
        want.insert(t.parse::<u32>().expect("tid"), n.to_string());
    }
    assert_eq!(want.len(), 11, "{want:?}");
    (child, want, out)
}

/// The names the reader finds in `pid` (by tid in its namespace: these processes share the tests').
fn names_of(reader: &mut ThreadNameReader<ProcMem>, pid: u32) -> HashMap<u32, String> {
    let named = reader.read(pid).unwrap_or_else(|e| panic!("reading the names of {pid}: {e}"));
    named.into_iter().map(|n| (n.ns_tid, n.name)).collect()
}

/// On every pyenv interpreter and sid's 3.15 (the reader needs the process's memory only, so the chrooted ones work
/// the same): the eleven threads named exactly as they name themselves, then renamed, read again; and the cost of one
/// read of eleven names.
#[test]
fn the_reader_names_ten_threads_and_reads_renames() {
    let _guard = serial();
    let (_dir, workload) = script(TEN);
    let mut costs = Vec::new();
    for i in interpreters() {
        let python = interpreter(&i.name);
        let (mut child, want, mut out) = start_ten(&python, &workload);
        let pid = child.id();
        let p = pyperf::python::inspect(pid).unwrap_or_else(|e| panic!("{}: {e}", i.name));
        let probe = p.addrs.runtime.or(p.addrs.interp_head).unwrap_or(0);
        let mem = ProcMem::open(pid, probe).expect("the process's memory");
        let mut reader = ThreadNameReader::new(mem, p.row, &p.addrs);
        assert_eq!(names_of(&mut reader, pid), want, "{}", i.name);
        // Cost: the median of 50 reads.
        let mut times: Vec<Duration> = (0..50)
            .map(|_| {
                let t = Instant::now();
                let n = reader.read(pid).expect("names");
                let took = t.elapsed();
                assert_eq!(n.len(), 11);
                took
            })
            .collect();
        times.sort();
        costs.push(format!("{} {:.0} us", i.name, times[25].as_secs_f64() * 1e6));
        // Renamed after they started: read again.
        let stdin = child.stdin.as_mut().expect("stdin");
        std::io::Write::write_all(stdin, b"\n").expect("write");
        let mut line = String::new();
        out.read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "renamed");
        let renamed: HashMap<u32, String> = want
            .iter()
            .map(|(&tid, n)| (tid, n.strip_prefix("pool-").map_or(n.clone(), |k| format!("renamed-{k}"))))
            .collect();
        assert_eq!(names_of(&mut reader, pid), renamed, "{}", i.name);
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"\n").expect("write");
        assert!(child.wait().expect("wait").success(), "{}", i.name);
    }
    eprintln!("one read of 11 thread names (median of 50): {}", costs.join(", "));
}

// ---- the offsets and facts read, against the headers ---------------------------------------------------------

/// Compiled against each interpreter's own headers (clang): the offsets thread names need, the type flags and where
/// 3.11+ keep an instance's managed dict and values. Before 3.11 the offsets are checked against DWARF with the rest
/// of the layout (tests/conformance.rs); from 3.14 on there is no DWARF here, so the headers are the check.
const OBJECT_PROBE: &str = r#"
#define Py_BUILD_CORE 1
#define NDEBUG 1
#include "Python.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_object.h"
#include <stdio.h>
#include <stddef.h>
#define OFF(name, type, member) printf(name " %ld\n", (long)offsetof(type, member))
int main(void) {
#if PY_VERSION_HEX >= 0x030C0000
    OFF("interp_modules", PyInterpreterState, imports.modules);
    OFF("long_tag", PyLongObject, long_value.lv_tag);
    OFF("long_digits", PyLongObject, long_value.ob_digit);
#else
    OFF("interp_modules", PyInterpreterState, modules);
    OFF("long_digits", PyLongObject, ob_digit);
#endif
    OFF("dict_keys", PyDictObject, ma_keys);
    OFF("dict_values", PyDictObject, ma_values);
    OFF("dictkeys_log2_size", PyDictKeysObject, dk_log2_size);
    OFF("dictkeys_log2_index_bytes", PyDictKeysObject, dk_log2_index_bytes);
    OFF("dictkeys_kind", PyDictKeysObject, dk_kind);
    OFF("dictkeys_nentries", PyDictKeysObject, dk_nentries);
    OFF("dictkeys_indices", PyDictKeysObject, dk_indices);
    OFF("dictvalues_values", struct _dictvalues, values);
#if PY_VERSION_HEX >= 0x030D0000
    OFF("dictvalues_capacity", struct _dictvalues, capacity);
    OFF("dictvalues_valid", struct _dictvalues, valid);
#endif
    printf("dict_entry_size %ld\n", (long)sizeof(PyDictKeyEntry));
    printf("dict_unicode_entry_size %ld\n", (long)sizeof(PyDictUnicodeEntry));
    OFF("type_basicsize", PyTypeObject, tp_basicsize);
    OFF("type_dictoffset", PyTypeObject, tp_dictoffset);
    OFF("heaptype_cached_keys", PyHeapTypeObject, ht_cached_keys);
    OFF("type_flags", PyTypeObject, tp_flags);
    printf("TPFLAGS_MANAGED_DICT %lu\n", (unsigned long)Py_TPFLAGS_MANAGED_DICT);
    printf("TPFLAGS_HEAPTYPE %lu\n", (unsigned long)Py_TPFLAGS_HEAPTYPE);
    printf("TPFLAGS_LONG_SUBCLASS %lu\n", (unsigned long)Py_TPFLAGS_LONG_SUBCLASS);
    printf("TPFLAGS_UNICODE_SUBCLASS %lu\n", (unsigned long)Py_TPFLAGS_UNICODE_SUBCLASS);
    printf("TPFLAGS_DICT_SUBCLASS %lu\n", (unsigned long)Py_TPFLAGS_DICT_SUBCLASS);
    static PyTypeObject t;
    static char buf[512];
    PyObject *o = (PyObject *)(buf + 128);
#if PY_VERSION_HEX >= 0x030E0000
    t.tp_basicsize = 48;
#else
    t.tp_basicsize = sizeof(PyObject); /* 3.13 keeps inline values only after a bare object header */
#endif
    t.tp_flags = Py_TPFLAGS_MANAGED_DICT;
    Py_SET_TYPE(o, &t);
#if PY_VERSION_HEX >= 0x030D0000
    t.tp_flags |= Py_TPFLAGS_INLINE_VALUES;
    printf("TPFLAGS_INLINE_VALUES %lu\n", (unsigned long)Py_TPFLAGS_INLINE_VALUES);
    printf("managed_dict_before %ld\n", (long)((char *)o - (char *)_PyObject_ManagedDictPointer(o)));
    printf("inline_values_after_basicsize %ld\n", (long)((char *)_PyObject_InlineValues(o) - (char *)o - t.tp_basicsize));
#elif PY_VERSION_HEX >= 0x030C0000
    printf("managed_dict_before %ld\n", (long)((char *)o - (char *)_PyObject_DictOrValuesPointer(o)));
#else
    printf("managed_dict_before %ld\n", (long)((char *)o - (char *)_PyObject_ManagedDictPointer(o)));
    printf("managed_values_before %ld\n", (long)((char *)o - (char *)_PyObject_ValuesPointer(o)));
#endif
    return 0;
}
"#;

/// pyenv's 3.11-3.13 (their installed headers) and Debian sid's 3.13-3.15 (the sid root's, with a pyconfig.h shim:
/// Debian's refers to its multiarch directory).
#[test]
fn object_layouts_match_the_headers() {
    use pyperf::python::versions::{
        InstanceDicts, MANAGED_DICT_BEFORE, MANAGED_VALUES_BEFORE_311, TPFLAGS_DICT_SUBCLASS, TPFLAGS_HEAPTYPE,
        TPFLAGS_INLINE_VALUES, TPFLAGS_LONG_SUBCLASS, TPFLAGS_MANAGED_DICT, TPFLAGS_UNICODE_SUBCLASS,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let c = dir.path().join("probe.c");
    std::fs::write(&c, OBJECT_PROBE).expect("write probe");
    let mut checked = Vec::new();
    for i in interpreters().into_iter().filter(|i| i.version >= (3, 11)) {
        let (major, minor) = i.version;
        let mut includes: Vec<PathBuf> = Vec::new();
        if let Some(lib) = &i.libpython {
            // pyenv: PREFIX/lib/libpython... -> PREFIX/include/pythonX.Y
            let prefix = lib.parent().and_then(Path::parent).expect("pyenv prefix");
            includes.push(prefix.join(format!("include/python{major}.{minor}")));
        } else if i.name.starts_with("sid-") {
            let root = sid_root();
            let shim = dir.path().join(format!("shim{major}{minor}/x86_64-linux-gnu"));
            std::fs::create_dir_all(&shim).expect("shim dir");
            let arch = root.join(format!("usr/include/x86_64-linux-gnu/python{major}.{minor}"));
            std::os::unix::fs::symlink(&arch, shim.join(format!("python{major}.{minor}"))).expect("symlink");
            includes.push(shim.parent().expect("shim").to_path_buf());
            includes.push(root.join(format!("usr/include/python{major}.{minor}")));
        } else {
            continue; // Debian's 3.11: the same headers as pyenv's 3.11
        }
        for inc in &includes {
            assert!(inc.exists(), "{}: {} missing (scripts/setup installs the headers)", i.name, inc.display());
        }
        let exe = dir.path().join(format!("probe-{}", i.name));
        let mut cc = Command::new("clang");
        cc.arg("-w");
        for inc in &includes {
            cc.arg("-I").arg(inc);
        }
        let out = cc.arg("-o").arg(&exe).arg(&c).output().expect("clang");
        assert!(out.status.success(), "{}: {}", i.name, String::from_utf8_lossy(&out.stderr));
        let out = Command::new(&exe).output().expect("run the probe");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let got: HashMap<&str, i64> =
            text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k, v.parse().expect("a number"))).collect();
        let row = pyperf::python::row_for(major, minor).expect("a row");
        let fields = row.layout.fields();
        let mut n = 0;
        for (name, value) in &got {
            let want: i64 = match *name {
                "type_flags" => row.type_flags.into(),
                "TPFLAGS_MANAGED_DICT" => TPFLAGS_MANAGED_DICT as i64,
                "TPFLAGS_INLINE_VALUES" => TPFLAGS_INLINE_VALUES as i64,
                "TPFLAGS_HEAPTYPE" => TPFLAGS_HEAPTYPE as i64,
                "TPFLAGS_LONG_SUBCLASS" => TPFLAGS_LONG_SUBCLASS as i64,
                "TPFLAGS_UNICODE_SUBCLASS" => TPFLAGS_UNICODE_SUBCLASS as i64,
                "TPFLAGS_DICT_SUBCLASS" => TPFLAGS_DICT_SUBCLASS as i64,
                "managed_dict_before" => MANAGED_DICT_BEFORE as i64,
                "managed_values_before" => {
                    assert_eq!(
                        row.thread_names.map(|n| n.instance_dicts),
                        Some(InstanceDicts::Managed311),
                        "{}",
                        i.name
                    );
                    MANAGED_VALUES_BEFORE_311 as i64
                }
                "inline_values_after_basicsize" => {
                    assert_eq!(
                        row.thread_names.map(|n| n.instance_dicts),
                        Some(InstanceDicts::Inline313),
                        "{}",
                        i.name
                    );
                    0
                }
                field => fields.iter().find(|f| f.0 == field).map(|f| f.1.into()).expect("a layout field"),
            };
            assert_eq!(*value, want, "{}: {name}", i.name);
            n += 1;
        }
        assert!(n >= 20, "{}: only {n} values from the probe:\n{text}", i.name);
        checked.push(format!("{} ({n})", i.name));
    }
    eprintln!("checked against the headers: {}", checked.join(", "));
    assert!(checked.len() >= 6, "{checked:?}");
}

// ---- a process in a PID namespace of its own ------------------------------------------------------------------

/// The workload in a PID namespace of its own (`unshare --pid`, as in a container), recorded with `-p`: its
/// threads know themselves by the namespace's tids (the main thread is 1 there), which must become the host tids of
/// the samples. 2.7 (tids from `struct pthread`, confirmed against the namespace pid) and 3.12 (`_native_id`).
#[test]
fn names_in_a_pid_namespace_are_mapped_to_the_samples_tids() {
    let _guard = serial();
    let (_dir, workload) = script(WORKLOAD);
    for name in ["2.7.18", "3.12.1"] {
        let python = interpreter(name);
        let mut unshare = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(&python)
            .arg(&workload)
            .arg("600")
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare");
        let mut line = String::new();
        BufReader::new(unshare.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "ready", "{name}: the workload said {line:?}");
        // The interpreter: unshare's child, pid 1 in the new namespace.
        let until = Instant::now() + Duration::from_secs(30);
        let pid = loop {
            let child = std::fs::read_to_string(format!("/proc/{}/task/{}/children", unshare.id(), unshare.id()))
                .ok()
                .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()));
            let in_ns = child.filter(|c| {
                std::fs::read_to_string(format!("/proc/{c}/status"))
                    .is_ok_and(|s| s.lines().any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")))
            });
            if let Some(c) = in_ns {
                break c;
            }
            assert!(Instant::now() < until, "{name}: no interpreter in a new PID namespace");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (_out_dir, out) = scratch("ns.pyp");
        // Until its three threads have had 3 s of CPU (~600 samples at 199 Hz), however long a loaded machine takes.
        let o = record_for_cpu(
            pyperf().args(["record", "-F", "199", "-o"]).arg(&out).args(["-p", &pid.to_string()]),
            &out,
            pid,
            3.0,
        );
        // The namespace's init: its end ends the namespace (unshare's alone would not).
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let _ = unshare.kill();
        let _ = unshare.wait();
        assert!(o.status.success(), "{name}: pyperf record failed");
        let (_, tables, samples, _) = read_each(&out, |t, s, ids| {
            (s.tid, ids.iter().map(|&id| t.symbol(id).name.clone()).collect::<Vec<String>>())
        });
        assert_eq!(tables.processes.len(), 1);
        assert_eq!((tables.processes[0].pid, tables.processes[0].ns_pid), (pid, 1), "{name}");
        let names: HashMap<u32, &str> =
            tables.thread_names.iter().filter(|n| !n.name.is_empty()).map(|n| (n.tid, n.name.as_str())).collect();
        eprintln!("{name} in a PID namespace: {:?}", tables.thread_names);
        for (function, want) in [("main_burn", "MainThread"), ("burn_a", "worker-a"), ("burn_b", "worker-b")] {
            let tids: HashSet<u32> =
                samples.iter().filter(|(_, fs)| fs.iter().any(|f| f == function)).map(|(t, _)| *t).collect();
            assert_eq!(tids.len(), 1, "{name}: {function} on {tids:?}");
            let tid = *tids.iter().next().expect("one");
            assert_eq!(names.get(&tid).copied(), Some(want), "{name}: host tid {tid} ({function})");
        }
    }
}

// ---- hostile and stale `_active` entries ----------------------------------------------------------------------

/// The memory of a live process, counting what is read of it.
struct Counted {
    mem: ProcMem,
    reads: Cell<u64>,
    bytes: Cell<u64>,
}

impl ReadMem for &Counted {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        self.bytes.set(self.bytes.get() + buf.len() as u64);
        self.mem.read(addr, buf)
    }
}

/// Main thread, two waiting workers, and a waiting `hostile` thread with 60 000 attributes that `threading._active`
/// holds under 4 096 idents (its own and 4 095 made up): what made one read take 3.9 s. Prints `ready`, then `NAME
/// TID` of each thread and `end`; exits at a line on stdin.
const HOSTILE: &str = r#"
import sys, threading, time

def tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes
    return ctypes.CDLL(None).syscall(186)

ev = threading.Event()
tids = {}
def wait(name):
    tids[name] = tid()
    ev.wait()

hostile = threading.Thread(target=wait, args=("hostile",), name="hostile")
for i in range(60000):
    setattr(hostile, "a%d" % i, i)
threads = [threading.Thread(target=wait, args=(n,), name=n) for n in ("worker-a", "worker-b")] + [hostile]
for t in threads:
    t.start()
while len(tids) < 3:
    time.sleep(0.01)
for i in range(4095):
    threading._active[10 ** 12 + i] = hostile
sys.stdout.write("ready\n")
sys.stdout.write("MainThread %d\n" % tid())
for n in ("worker-a", "worker-b"):
    sys.stdout.write("%s %d\n" % (n, tids[n]))
sys.stdout.write("end\n")
sys.stdout.flush()
sys.stdin.readline()
for i in range(4095):
    del threading._active[10 ** 12 + i]
ev.set()
for t in threads:
    t.join()
"#;

/// On every interpreter: one read of the hostile process's names reads at most the reader's budget (counted in
/// reads and bytes, not time) and names the normal threads exactly, or fails as a whole (never a wrong name); the
/// hostile thread gets none.
#[test]
fn a_hostile_active_dict_costs_one_read_a_bounded_work() {
    use pyperf::python::threads::READ_BUDGET;
    let _guard = serial();
    let (_dir, workload) = script(HOSTILE);
    for i in interpreters() {
        let python = interpreter(&i.name);
        let mut child = Command::new(&python)
            .arg(&workload)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the workload");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut want = HashMap::new();
        let mut line = String::new();
        out.read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "ready", "{}: the workload said {line:?}", i.name);
        loop {
            line.clear();
            out.read_line(&mut line).expect("read");
            match line.trim().rsplit_once(' ') {
                Some((n, t)) => want.insert(t.parse::<u32>().expect("tid"), n.to_string()),
                None => break,
            };
        }
        let pid = child.id();
        let p = pyperf::python::inspect(pid).unwrap_or_else(|e| panic!("{}: {e}", i.name));
        let probe = p.addrs.runtime.or(p.addrs.interp_head).unwrap_or(0);
        let mem = Counted { mem: ProcMem::open(pid, probe).expect("memory"), reads: Cell::new(0), bytes: Cell::new(0) };
        let mut reader = ThreadNameReader::new(&mem, p.row, &p.addrs);
        let started = Instant::now();
        let got = reader.read(pid).map(|v| v.into_iter().map(|n| (n.ns_tid, n.name)).collect::<HashMap<_, _>>());
        let took = started.elapsed();
        let (reads, bytes) = (mem.reads.get(), mem.bytes.get());
        eprintln!("{}: {reads} reads, {bytes} bytes in {took:?}: {got:?}", i.name);
        assert!(reads <= READ_BUDGET.ops && bytes <= READ_BUDGET.bytes, "{}: {reads} reads, {bytes} bytes", i.name);
        // 3.6-3.10 share instance keys between the instances of a class: the hostile thread's 60 000 became the
        // workers' too (CPython made them the type's cached keys), and they are not read.
        match got {
            Ok(names) => {
                assert_eq!(names.get(&pid).map(String::as_str), Some("MainThread"), "{}", i.name);
                for (tid, name) in &names {
                    assert_eq!(want.get(tid), Some(name), "{}: thread {tid}", i.name);
                }
                if !(i.version >= (3, 6) && i.version <= (3, 10)) {
                    assert_eq!(names, want, "{}", i.name);
                }
            }
            Err(e) => eprintln!("{}: no names ({e})", i.name),
        }
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"\n").expect("write");
        assert!(child.wait().expect("wait").success(), "{}", i.name);
    }
}

/// A thread started with `_thread.start_new_thread` calls `threading.current_thread()` (a `_DummyThread` in
/// `_active`, which 2.7-3.12 never remove) and ends; then a new raw thread starts (glibc gives it the dead thread's
/// `struct pthread`, hence its ident) and waits. Prints `ready`, the tids (`dummy`, `raw`, `main`), `end`; exits at a
/// line on stdin.
const DUMMY: &str = r#"
import os, sys, threading, time
try:
    import _thread as thread
except ImportError:
    import thread

def tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes
    return ctypes.CDLL(None).syscall(186)

info = {}
def dummy():
    threading.current_thread()
    info["dummy"] = tid()

thread.start_new_thread(dummy, ())
while "dummy" not in info:
    time.sleep(0.01)
while os.path.exists("/proc/self/task/%d" % info["dummy"]):
    time.sleep(0.01)
lock = thread.allocate_lock()
lock.acquire()
def raw():
    info["raw"] = tid()
    lock.acquire()

thread.start_new_thread(raw, ())
while "raw" not in info:
    time.sleep(0.01)
sys.stdout.write("ready\n")
sys.stdout.write("dummy %d\nraw %d\nmain %d\nend\n" % (info["dummy"], info["raw"], tid()))
sys.stdout.flush()
sys.stdin.readline()
lock.release()
time.sleep(0.1)
"#;

/// On every interpreter: the raw thread is not named after the dead dummy, and no live thread is. Where the
/// interpreter's thread states can tell the dummy is stale, it is not named at all: 3.11+ (`native_thread_id`) and
/// 2.7-3.7 (no dummy is named there); 3.8-3.10 may name its dead tid, which the recorder drops (not a thread of the
/// process).
#[test]
fn a_dead_dummy_thread_names_no_live_thread() {
    let _guard = serial();
    let (_dir, workload) = script(DUMMY);
    for i in interpreters() {
        let python = interpreter(&i.name);
        let mut child = Command::new(&python)
            .arg(&workload)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the workload");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut tids = HashMap::new();
        let mut line = String::new();
        out.read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "ready", "{}: the workload said {line:?}", i.name);
        loop {
            line.clear();
            out.read_line(&mut line).expect("read");
            match line.trim().split_once(' ') {
                Some((k, t)) => tids.insert(k.to_string(), t.parse::<u32>().expect("tid")),
                None => break,
            };
        }
        let pid = child.id();
        let p = pyperf::python::inspect(pid).unwrap_or_else(|e| panic!("{}: {e}", i.name));
        let probe = p.addrs.runtime.or(p.addrs.interp_head).unwrap_or(0);
        let mut reader = ThreadNameReader::new(ProcMem::open(pid, probe).expect("memory"), p.row, &p.addrs);
        let names = names_of(&mut reader, pid);
        eprintln!("{}: {tids:?}: {names:?}", i.name);
        assert_eq!(names.get(&tids["main"]).map(String::as_str), Some("MainThread"), "{}", i.name);
        assert_eq!(names.get(&tids["raw"]), None, "{}: the raw thread", i.name);
        for (tid, name) in &names {
            let live = Path::new(&format!("/proc/{pid}/task/{tid}")).exists();
            assert!(!(name.starts_with("Dummy-") && live), "{}: live thread {tid} named {name}", i.name);
        }
        if i.version >= (3, 11) || i.version <= (3, 7) {
            assert!(!names.values().any(|n| n.starts_with("Dummy-")), "{}: a stale dummy named: {names:?}", i.name);
        }
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"\n").expect("write");
        assert!(child.wait().expect("wait").success(), "{}", i.name);
    }
}

/// A dummy thread (started with `_thread.start_new_thread`, calls `threading.current_thread()`) burns in
/// `dummy_burn` and ends; then a raw thread is started with the dead thread's tid (/proc/sys/kernel/ns_last_pid, as
/// CRIU does; retried until the kernel gives it) and burns in `raw_burn`. Prints `reused True` when it got the tid.
/// (Each burns SECONDS of wall time, not of CPU time: the test tells the two threads apart by the time of the
/// samples, which CPU-timed burns of unequal wall length would blur.)
const REUSE: &str = r#"
import os, sys, threading, time
try:
    import _thread as thread
except ImportError:
    import thread

SECONDS = float(sys.argv[1])

def tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes
    return ctypes.CDLL(None).syscall(186)

def burn(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for i in range(2000):
            n += i
    return n

info = {}
def dummy_burn():
    threading.current_thread()
    info["dummy"] = tid()
    burn(SECONDS)
    info["dummy_done"] = True

def raw_burn(n):
    info["raw%d" % n] = tid()
    if info["raw%d" % n] == info["dummy"]:
        burn(SECONDS)
    info["raw_done%d" % n] = True

def gone(t):
    while os.path.exists("/proc/self/task/%d" % t):
        time.sleep(0.001)

thread.start_new_thread(dummy_burn, ())
while "dummy_done" not in info:
    time.sleep(0.01)
gone(info["dummy"])
reused = False
for n in range(200):
    try:
        f = open("/proc/sys/kernel/ns_last_pid", "w")
        f.write(str(info["dummy"] - 1))
        f.close()
    except (IOError, OSError):
        pass
    thread.start_new_thread(raw_burn, (n,))
    while "raw_done%d" % n not in info:
        time.sleep(0.001)
    gone(info["raw%d" % n])
    if info["raw%d" % n] == info["dummy"]:
        reused = True
        break
sys.stdout.write("reused %s\n" % reused)
"#;

/// Recorded (2.7: no dummy is named at all; 3.12: the live dummy is named `Dummy-1`): the raw thread that got the
/// dead dummy's tid is not named after it, from its start on (the recorder notices the tid's new start time, ends
/// the name there, and refuses the stale `_DummyThread` for the new thread). The two threads' samples are told apart
/// by time (the dummy's first 2 s, the raw thread's last 2 s). The raw thread's samples must show its own frames:
/// with the dead thread's tid and `struct pthread` both reused, the dead thread's freed thread state still holds the
/// same ident and tid, and the sampler's thread-state cache, were it not keyed by the thread's start time too, would
/// keep walking its stale frames (`dummy_burn` on the new thread).
#[test]
fn a_reused_tid_is_not_named_after_a_dead_dummy() {
    let _guard = serial();
    let (_dir, workload) = script(REUSE);
    for name in ["2.7.18", "3.12.1"] {
        let python = interpreter(name);
        let (_out_dir, out) = scratch("reuse.pyp");
        let rec = record(&python, &workload, "2", &out);
        assert!(rec.stdout.contains("reused True"), "{name}: the raw thread never got the dummy's tid: {}", rec.stdout);
        let tid = rec.named_samples.get("dummy_burn").and_then(|s| s.first()).map(|s| s.0);
        let tid = tid.unwrap_or_else(|| panic!("{name}: no samples in dummy_burn: {:?}", rec.functions));
        let times: Vec<u64> = rec.timeline.iter().filter(|s| s.0 == tid).map(|s| s.1).collect();
        let (t0, t1) = (times.iter().min().copied().unwrap_or(0), times.iter().max().copied().unwrap_or(0));
        let phase = |from: f64, to: f64| -> Vec<&Option<String>> {
            let at = |f: f64| t0 + ((t1 - t0) as f64 * f) as u64;
            rec.timeline.iter().filter(|s| s.0 == tid && s.1 >= at(from) && s.1 <= at(to)).map(|s| &s.2).collect()
        };
        let (dummy, raw) = (phase(0.0, 0.4), phase(0.6, 1.0));
        eprintln!("{name}: names {:?}; {} dummy samples, {} raw samples", rec.names, dummy.len(), raw.len());
        assert!(dummy.len() >= 50 && raw.len() >= 50, "{name}: {} and {} samples", dummy.len(), raw.len());
        // Never the dead thread's frames on the new thread.
        let at = |f: f64| t0 + ((t1 - t0) as f64 * f) as u64;
        let raw_stacks: Vec<&Vec<String>> =
            rec.stacks.iter().filter(|s| s.0 == tid && s.1 >= at(0.6)).map(|s| &s.2).collect();
        let stale = raw_stacks.iter().filter(|f| f.iter().any(|f| f == "dummy_burn")).count();
        let own = raw_stacks.iter().filter(|f| f.iter().any(|f| f == "raw_burn")).count();
        assert_eq!(stale, 0, "{name}: {stale} of {} samples of the new thread in the dead thread's frames", raw.len());
        assert!(own * 10 >= raw_stacks.len() * 8, "{name}: {own} of {} new-thread samples in raw_burn", raw.len());
        let wrong: Vec<_> = raw.iter().filter(|n| n.is_some()).collect();
        assert!(wrong.is_empty(), "{name}: {} of {} raw samples named, e.g. {:?}", wrong.len(), raw.len(), wrong[0]);
        let named = dummy.iter().filter(|n| n.as_deref() == Some("Dummy-1")).count();
        if name == "2.7.18" {
            assert_eq!(named, 0, "{name}: dummies are not named on 2.7");
        } else {
            assert!(named * 10 >= dummy.len() * 9, "{name}: {named} of {} dummy samples named Dummy-1", dummy.len());
        }
        assert_eq!(rec.errors, 0, "{name}");
    }
}
