//! Exact stacks, per CPython version: for every supported interpreter, `pyperf record` runs the workload
//! driver testdata/workloads/stacks/main.py, whose phases each spend their time on one known line, and the
//! dominant stack of every phase must be exactly the expected one: every function name, file and line, root to
//! leaf. Expected lines come from the `# @label` markers in the workload sources (never hard-coded numbers);
//! expected names are the interpreter's: `co_qualname` on 3.11+, before 3.11 `co_name` with the self/cls
//! heuristic (`type(self).__name__` / `cls.__name__`). The interpreter's own view (its f_back chain, walked by a
//! SIGPROF handler in the workload) must agree with the same expectation, which also gives the asyncio frames.
//!
//! Which phases run where:
//! - every version (2.7, 3.6 - 3.13, Debian's 3.11, Debian sid's 3.13): deep (1,204 frames), truncated (2,104 frames: the 2,048
//!   leaf-nearest kept), method, inherited, classmethod, staticmethod, init, nested, lambda, generator, listcomp
//!   (no `<listcomp>` frame on 2.7 and 3.12+, which inline comprehensions), genexpr, long_name (300 bytes),
//!   cut_name (1,500 bytes: cut at 1,024 and flagged), long_path (> 128 bytes), astral_path (a directory with
//!   2- and 4-byte UTF-8 characters: a 4-byte-kind str on 3.x, a byte string on 2.7);
//! - 3.x: async (a running coroutine chain under asyncio), unicode (non-ASCII identifiers: 1-, 2- and 4-byte
//!   kinds, non-ASCII file name);
//! - 3.6 - 3.11: legacy (names and file name in legacy, non-compact str objects; 3.12 removed them).
//!
//! Also: two interpreters of different versions running the same file share their symbols, and the report's
//! folded and speedscope outputs carry the lines, which `--no-lines` merges.
//!
//! Needs root (loads BPF); a missing interpreter fails.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use pyperf_format::{symbol_flags, StackStatus, Symbol, Tables};

/// CPU seconds per phase: ~120 samples at 499 Hz.
const PHASE_SECONDS: &str = "0.25";
/// Deep stacks are slower to sample and record: give them more time.
const LONGER: &[(&str, &str)] = &[("deep", "deep:0.4"), ("truncated", "truncated:0.5")];
/// python::code::MAX_NAME_BYTES.
const MAX_NAME_BYTES: usize = pyperf::python::code::MAX_NAME_BYTES;
/// PYPERF_MAX_FRAMES.
const MAX_FRAMES: usize = pyperf::abi::MAX_FRAMES;
/// Recursion depths of phases.py (DEEP, TRUNCATED).
const DEEP: usize = 1200;
const TRUNCATED: usize = 2100;

const COMMON_PHASES: &[&str] = &[
    "deep",
    "truncated",
    "method",
    "inherited",
    "classmethod",
    "staticmethod",
    "init",
    "nested",
    "lambda",
    "generator",
    "listcomp",
    "genexpr",
    "long_name",
    "cut_name",
    "long_path",
    "astral_path",
];

fn stacks_dir() -> PathBuf {
    workload("stacks")
}

type V = (u8, u8);

/// (major, minor) of an interpreter name as `common::interpreter` takes it.
fn version_of(name: &str) -> V {
    let v = name.strip_prefix("debian-").or_else(|| name.strip_prefix("sid-")).unwrap_or(name);
    let mut it = v.split('.').map(|p| p.parse::<u8>().expect("version"));
    (it.next().unwrap(), it.next().unwrap())
}

fn phases_for(v: V) -> Vec<&'static str> {
    let mut p = COMMON_PHASES.to_vec();
    if v.0 == 3 {
        p.extend(["async", "unicode"]);
    }
    if v.0 == 3 && v.1 <= 11 {
        p.push("legacy");
    }
    p
}

// ---- expectations -------------------------------------------------------------------------------------------

/// `# @label` -> (file, line), over every .py file of the stacks workload.
struct Markers(HashMap<String, (String, u32)>);

impl Markers {
    fn load() -> Markers {
        let mut map = HashMap::new();
        let mut todo = vec![stacks_dir()];
        while let Some(dir) = todo.pop() {
            for ent in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
                let p = ent.path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|e| e == "py") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for (i, line) in text.lines().enumerate() {
                        if let Some(pos) = line.find("# @") {
                            let label = line[pos + 3..].trim().to_string();
                            let file = p.to_str().expect("UTF-8 path").to_string();
                            let old = map.insert(label.clone(), (file, i as u32 + 1));
                            assert!(old.is_none(), "label {label} twice");
                        }
                    }
                }
            }
        }
        Markers(map)
    }

    fn at(&self, label: &str) -> (String, u32) {
        self.0.get(label).unwrap_or_else(|| panic!("no marker {label}")).clone()
    }

    /// The name of the function defined with `def PREFIX...(` in `file`.
    fn def_name(&self, file: &str, prefix: &str) -> String {
        let text = std::fs::read_to_string(file).unwrap();
        let at = text.find(&format!("def {prefix}")).unwrap_or_else(|| panic!("no def {prefix} in {file}"));
        let rest = &text[at + 4..];
        rest[..rest.find('(').unwrap()].to_string()
    }
}

/// One expected frame: its name on 3.11+ (`co_qualname`) and before (`co_name`, with the self/cls heuristic's
/// class), where it is, and the file when it is not the marker's.
#[derive(Clone, Debug)]
struct Want {
    qual: String,
    legacy: String,
    at: String,
    file: Option<String>,
}

fn w(qual: &str, legacy: &str, at: &str) -> Want {
    Want { qual: qual.into(), legacy: legacy.into(), at: at.into(), file: None }
}

/// A module-level function: the same name everywhere.
fn f(name: &str, at: &str) -> Want {
    w(name, name, at)
}

/// An expected frame, resolved for a version: (qualified name, file, line).
type Frame = (String, String, u32);

fn resolve(m: &Markers, v: V, want: &[Want]) -> Vec<Frame> {
    want.iter()
        .map(|x| {
            let (file, line) = m.at(&x.at);
            let name = if v >= (3, 11) { x.qual.clone() } else { x.legacy.clone() };
            (name, x.file.clone().unwrap_or(file), line)
        })
        .collect()
}

/// The expected stack of a phase, root first, with full names (the interpreter's view; see `cut_names`).
fn expected(m: &Markers, v: V, phase: &str) -> Vec<Frame> {
    let mut s = vec![f("<module>", "main.call"), f("main", "main.phase")];
    let phase_fn = format!("phase_{phase}");
    let p = |at: &str| f(&phase_fn, at);
    let nested = |name: &str, at: &str| w(&format!("{phase_fn}.<locals>.{name}"), name, at);
    match phase {
        "deep" => {
            s.push(p("deep.phase"));
            s.extend(std::iter::repeat_n(f("recurse", "deep.rec"), DEEP - 1));
            s.extend([f("recurse", "deep.bottom"), f("spin_deep", "deep.leaf")]);
        }
        "truncated" => {
            s.push(p("trunc.phase"));
            s.extend(std::iter::repeat_n(f("recurse_truncated", "trunc.rec"), TRUNCATED - 1));
            s.extend([f("recurse_truncated", "trunc.bottom"), f("spin_truncated", "trunc.leaf")]);
        }
        "method" => s.extend([p("method.phase"), f("Worker.run", "method.run"), f("Worker.step", "method.leaf")]),
        // Before 3.11 the class is type(self): the subclass.
        "inherited" => s.extend([
            p("inherited.phase"),
            w("Worker.run", "Special.run", "method.run"),
            w("Worker.step", "Special.step", "method.leaf"),
        ]),
        "classmethod" => s.extend([p("classmethod.phase"), f("Worker.tally", "classmethod.leaf")]),
        // No self or cls: no class before 3.11.
        "staticmethod" => s.extend([p("staticmethod.phase"), w("Worker.compute", "compute", "staticmethod.leaf")]),
        // 3.13 calls __init__ through a shim frame (_Py_InitCleanup) the interpreter does not show: neither do we.
        "init" => s.extend([p("init.phase"), f("Worker.__init__", "init.step"), f("Worker.step", "method.leaf")]),
        "nested" => s.extend([p("nested.phase"), nested("middle", "nested.middle"), nested("inner", "nested.leaf")]),
        "lambda" => s.extend([p("lambda.phase"), nested("<lambda>", "lambda.leaf")]),
        "generator" => s.extend([p("gen.phase"), f("numbers", "gen.leaf")]),
        "listcomp" => {
            s.push(p("listcomp.leaf"));
            // 2.7 runs list comprehensions in the function's frame, 3.12+ inlines them again (PEP 709).
            if v.0 == 3 && v.1 <= 11 {
                s.push(nested("<listcomp>", "listcomp.leaf"));
            }
        }
        "genexpr" => s.extend([p("genexpr.leaf"), nested("<genexpr>", "genexpr.leaf")]),
        "long_name" | "cut_name" => {
            let (call, leaf, prefix) = match phase {
                "long_name" => ("longname.phase", "longname.leaf", "long_function_name_"),
                _ => ("cutname.phase", "cutname.leaf", "cut_function_name_"),
            };
            let name = m.def_name(&m.at(leaf).0, prefix);
            s.extend([p(call), f(&name, leaf)]);
        }
        "long_path" => s.extend([p("longpath.phase"), f("spin_far", "longpath.leaf")]),
        "astral_path" => s.extend([p("astral.phase"), f("spin_astral", "astral.leaf")]),
        "unicode" => s.extend([
            p("unicode.phase"),
            f("𠮷", "unicode.astral"),
            f("calcul_é", "unicode.calcul"),
            f("Größe.計算", "unicode.leaf"),
        ]),
        "legacy" => {
            let mut leaf = f("legacy_名前", "legacy.leaf");
            leaf.file = Some("legacy_ascii_file.py".into());
            s.extend([p("legacy.phase"), leaf]);
        }
        // The asyncio frames between phase_async and outer_coro come from the interpreter (see `check_phase`).
        "async" => s.extend([
            p(if v == (3, 6) { "async.phase36" } else { "async.phase" }),
            f("outer_coro", "async.outer"),
            f("middle_coro", "async.middle"),
            f("leaf_coro", "async.leaf"),
        ]),
        _ => panic!("unknown phase {phase}"),
    }
    resolve(m, v, &s)
}

/// What pyperf records of a name: at most MAX_NAME_BYTES bytes (the symbol is then flagged NAME_CUT).
fn cut_names(stack: &[Frame]) -> Vec<Frame> {
    stack
        .iter()
        .map(|(n, file, line)| {
            let mut n = n.clone();
            if n.len() > MAX_NAME_BYTES {
                let mut end = MAX_NAME_BYTES;
                while !n.is_char_boundary(end) {
                    end -= 1;
                }
                n.truncate(end);
            }
            (n, file.clone(), *line)
        })
        .collect()
}

// ---- the interpreter's own view -----------------------------------------------------------------------------

/// The workload's SIGPROF walks: phase -> stacks, root first, names as pyperf gives them for version `v`.
fn read_dumps(path: &Path, v: V) -> HashMap<String, Vec<Vec<Frame>>> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = String::from_utf8(raw).expect("UTF-8 dump");
    let mut out: HashMap<String, Vec<Vec<Frame>>> = HashMap::new();
    let mut cur: Option<(String, Vec<Frame>)> = None;
    let mut flush = |cur: &mut Option<(String, Vec<Frame>)>| {
        if let Some((phase, stack)) = cur.take() {
            out.entry(phase).or_default().push(stack);
        }
    };
    for line in text.lines() {
        if let Some(phase) = line.strip_prefix("S ") {
            flush(&mut cur);
            cur = Some((phase.to_string(), Vec::new()));
        } else if let Some(fr) = line.strip_prefix("F ") {
            let p: Vec<&str> = fr.split('\t').collect();
            assert_eq!(p.len(), 5, "dump line {line:?}");
            let name = if p[1] != "-" {
                p[1].to_string()
            } else if v < (3, 11) && p[2] != "-" {
                format!("{}.{}", p[2], p[0])
            } else {
                p[0].to_string()
            };
            cur.as_mut().expect("F before S").1.push((name, p[3].to_string(), p[4].parse().unwrap()));
        }
    }
    flush(&mut cur);
    out
}

/// The most frequent stack and how often it occurs.
fn dominant<T: Clone + Eq + std::hash::Hash + Ord>(stacks: impl IntoIterator<Item = T>) -> Option<(T, usize)> {
    let mut counts: HashMap<T, usize> = HashMap::new();
    for s in stacks {
        *counts.entry(s).or_default() += 1;
    }
    // Ties broken by the stack itself, so the result is deterministic.
    counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
}

// ---- running and reading ------------------------------------------------------------------------------------

/// A recorded sample with its symbols (with flags), root first.
struct Smp {
    pid: u32,
    status: StackStatus,
    ids: Vec<u32>,
}

struct Rec {
    tables: Tables,
    samples: Vec<Smp>,
}

impl Rec {
    fn read(path: &Path) -> Rec {
        let (_, tables, samples, warnings) = read_each(path, |_, s, ids| Smp { pid: s.pid, status: s.status, ids });
        assert!(warnings.is_empty(), "{warnings:?}");
        Rec { tables, samples }
    }

    fn sym(&self, id: u32) -> &Symbol {
        self.tables.symbol(id)
    }

    fn frames(&self, s: &Smp) -> Vec<Frame> {
        s.ids
            .iter()
            .map(|&id| {
                let y = self.sym(id);
                (y.qualified_name(), y.file.clone(), y.line)
            })
            .collect()
    }

    fn has(&self, s: &Smp, name: &str) -> bool {
        s.ids.iter().any(|&id| self.sym(id).qualified_name() == name)
    }

    fn leaf_is(&self, s: &Smp, name: &str) -> bool {
        s.ids.last().is_some_and(|&id| self.sym(id).qualified_name() == name)
    }
}

/// `pyperf record -F 499 -o OUT -- PYTHON main.py DUMP SECONDS PHASES...` in a UTF-8 locale (3.6 needs it
/// for the non-ASCII paths).
fn record_workload(python: &Path, out: &Path, dump: &Path, seconds: &str, phases: &[&str]) {
    // A 64 MiB ring: the deep phases' records are ~32 KiB each, and a debug-build recorder on a loaded machine
    // falls seconds behind (a 4 MiB ring lost 39% of the samples, whole phases, once); this test checks stacks,
    // faults.rs a full ring.
    let status = run(pyperf()
        .env("LC_ALL", "C.UTF-8")
        .args(["record", "-F", "499", "--ringbuf-kib", "65536", "-o"])
        .arg(out)
        .arg("--")
        .arg(python)
        .arg(stacks_dir().join("main.py"))
        .arg(dump)
        .arg(seconds)
        .args(phases))
    .status;
    assert!(status.success(), "pyperf record failed: {status:?}");
}

// ---- per-version exact stacks -------------------------------------------------------------------------------

/// Checks one phase; returns a one-line summary.
fn check_phase(
    rec: &Rec,
    dumps: &HashMap<String, Vec<Vec<Frame>>>,
    m: &Markers,
    v: V,
    phase: &str,
) -> Result<String, String> {
    let mut want = expected(m, v, phase);
    let (dump_stack, dump_n) = dominant(dumps.get(phase).cloned().unwrap_or_default())
        .ok_or(format!("{phase}: the interpreter recorded no stack"))?;
    let n_dumps = dumps[phase].len();
    if phase == "async" {
        // asyncio's own frames (event loop, handle) between phase_async and the coroutines, as the interpreter
        // shows them; ours around them must be where the markers say.
        let k = want.len();
        let (head, tail) = (&want[..3], &want[k - 3..]);
        let ok = dump_stack.len() > 6 && dump_stack[..3] == *head && dump_stack[dump_stack.len() - 3..] == *tail;
        if !ok {
            return Err(format!("async: the interpreter's stack {dump_stack:#?} does not match {want:#?}"));
        }
        want = dump_stack.clone();
    }
    // Our expectation is the interpreter's own view (its most frequent walk: a tie is a tie, the phase's loop seen
    // between iterations as often as inside, which a busy machine's few walks can give)...
    let want_n = dumps[phase].iter().filter(|d| **d == want).count();
    if dump_stack != want && want_n < dump_n {
        return Err(format!(
            "{phase}: expected stack differs from the interpreter's ({dump_n} of {n_dumps} walks):\n{}",
            diff(&want, &dump_stack)
        ));
    }
    // ... and pyperf records exactly it (the leaf-nearest MAX_FRAMES frames of deeper stacks).
    let truncated = want.len() > MAX_FRAMES;
    let want_rec = cut_names(&want[want.len().saturating_sub(MAX_FRAMES)..]);
    let leaf_name = want.last().unwrap().0.clone();
    let phase_fn = format!("phase_{phase}");
    let mine: Vec<&Smp> = rec
        .samples
        .iter()
        .filter(|s| if truncated { rec.leaf_is(s, &leaf_name) } else { rec.has(s, &phase_fn) })
        .collect();
    if mine.len() < 40 {
        return Err(format!("{phase}: only {} samples", mine.len()));
    }
    let (got, n) = dominant(mine.iter().map(|s| rec.frames(s))).unwrap();
    if got != want_rec {
        return Err(format!("{phase}: dominant recorded stack ({n} of {}):\n{}", mine.len(), diff(&want_rec, &got)));
    }
    if n * 2 < mine.len() {
        return Err(format!("{phase}: the expected stack is only {n} of {} samples", mine.len()));
    }
    let want_status = if truncated { StackStatus::Truncated } else { StackStatus::Complete };
    let dominant_samples: Vec<&&Smp> = mine.iter().filter(|s| rec.frames(s) == want_rec).collect();
    if let Some(bad) = dominant_samples.iter().find(|s| s.status != want_status) {
        return Err(format!("{phase}: status {:?}, want {want_status:?}", bad.status));
    }
    // Flags: only names over the limit are cut; nothing is unresolved.
    let ids = &dominant_samples[0].ids;
    for (&id, (full, _, _)) in ids.iter().zip(&want[want.len() - ids.len()..]) {
        let sym = rec.sym(id);
        let cut = full.len() > MAX_NAME_BYTES;
        if (sym.flags & symbol_flags::NAME_CUT != 0) != cut || sym.flags & !symbol_flags::NAME_CUT != 0 {
            return Err(format!("{phase}: {} has flags {:#x}", sym.qualified_name(), sym.flags));
        }
    }
    Ok(format!(
        "{phase}: {} frames{}, {n} of {} samples (interpreter: {dump_n} of {n_dumps}); leaf {} line {}",
        got.len(),
        if truncated { format!(" of {}, truncated", want.len()) } else { String::new() },
        mine.len(),
        short(&got.last().unwrap().0),
        got.last().unwrap().2
    ))
}

fn short(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...({} bytes)", s.chars().take(40).collect::<String>(), s.len())
    } else {
        s.to_string()
    }
}

/// The differing frames of two stacks, with their depth.
fn diff(want: &[Frame], got: &[Frame]) -> String {
    let mut out = format!("  {} frames expected, {} recorded\n", want.len(), got.len());
    let n = want.len().max(got.len());
    let mut shown = 0;
    for i in 0..n {
        let (a, b) = (want.get(i), got.get(i));
        if a != b && shown < 12 {
            out.push_str(&format!("  #{i}: want {a:?}\n         got  {b:?}\n"));
            shown += 1;
        }
    }
    out
}

fn stacks(interpreter_name: &str) {
    let _guard = serial();
    let v = version_of(interpreter_name);
    let py = interpreter(interpreter_name);
    let m = Markers::load();
    // The workload is what the phases claim.
    let long_path = m.at("longpath.leaf").0;
    assert!(long_path.len() > 128, "{long_path}");
    assert!(m.at("astral.leaf").0.chars().any(|c| c as u32 > 0xffff));
    let (file, _) = m.at("longname.leaf");
    assert_eq!(m.def_name(&file, "long_function_name_").len(), 300);
    assert_eq!(m.def_name(&file, "cut_function_name_").len(), 1500);
    let phases = phases_for(v);
    let (dir, out) = scratch("stacks.pyp");
    let dump = dir.path().join("dump.txt");
    let args: Vec<&str> = phases.iter().map(|p| LONGER.iter().find(|l| l.0 == *p).map_or(*p, |l| l.1)).collect();
    record_workload(&py, &out, &dump, PHASE_SECONDS, &args);
    let rec = Rec::read(&out);
    let dumps = read_dumps(&dump, v);
    assert_eq!(rec.tables.processes.len(), 1, "{:?}", rec.tables.processes);
    let pv = &rec.tables.processes[0].python_version;
    assert!(pv.starts_with(&format!("{}.{}.", v.0, v.1)), "recorded Python {pv}");

    let mut failed = Vec::new();
    for phase in &phases {
        match check_phase(&rec, &dumps, &m, v, phase) {
            Ok(summary) => eprintln!("{interpreter_name} {summary}"),
            Err(e) => failed.push(e),
        }
    }
    // Truncated stacks are counted, and only those.
    let stats = rec.tables.stats.clone().expect("trailer");
    let truncated = rec.samples.iter().filter(|s| s.status == StackStatus::Truncated).count() as u64;
    if stats.truncated_stacks != truncated || truncated == 0 {
        failed.push(format!("{} truncated stacks counted, {truncated} in the file", stats.truncated_stacks));
    }
    // 3.11+: the deep phases' frames span many data stack chunks, and no window read of them starts below its
    // chunk (what lies below one is often unmapped: such a read faults, and costs ~1.7 us).
    let counter = |k: &str| stats.counter(k);
    if v >= (3, 11) && counter("bpf_window_faults") != Some(0) {
        failed.push(format!("window reads faulted: {:?}", counter("bpf_window_faults")));
    }
    let complete = rec.samples.iter().filter(|s| s.status == StackStatus::Complete).count();
    eprintln!(
        "{interpreter_name}: {} samples ({complete} complete, {truncated} truncated), {} lost symbols",
        rec.samples.len(),
        stats.lost_symbols
    );
    assert!(failed.is_empty(), "{interpreter_name}: {} phases failed:\n{}", failed.len(), failed.join("\n"));
}

per_interpreter! { stacks:
    stacks_2_7("2.7.18"),
    stacks_3_6("3.6.15"),
    stacks_3_7("3.7.16"),
    stacks_3_8("3.8.18"),
    stacks_3_9("3.9.18"),
    stacks_3_10("3.10.13"),
    stacks_3_11("3.11.7"),
    stacks_3_12("3.12.1"),
    stacks_3_13("3.13.0"),
    stacks_debian_3_11("debian-3.11"),
    /// Debian sid's 3.13, chrooted into the sid root (`common::sid_root`): a non-PIE executable with the interpreter in
    /// it and a `.PyRuntime` section.
    stacks_sid_3_13("sid-3.13"),
    stacks_sid_3_14("sid-3.14"),
    stacks_sid_3_15("sid-3.15"),
}

// ---- different processes and versions -----------------------------------------------------------------------

/// Two interpreters of different versions (2.7: byte-string names, lnotab; 3.12: compact str, location table,
/// qualified names) run the same workload file at once. The same function at the same line is ONE symbol: the
/// same id in the file, whichever process it came from. What differs is only what the interpreters themselves
/// know: a nested function is `inner` before 3.11 and `phase_nested.<locals>.inner` after (likewise lambdas and
/// comprehensions), a static method `compute` and `Worker.compute`; those stay two symbols (same name, file and
/// line; different scope). Methods taking self or cls are `Class.method` in both (the heuristic gives the
/// defining class's name unless the method is inherited, see the `inherited` phase).
#[test]
fn same_function_is_one_symbol_across_processes_and_versions() {
    let _guard = serial();
    let m = Markers::load();
    let phases = ["method", "classmethod", "staticmethod", "nested", "lambda", "generator"];
    let (old, new) = (interpreter("2.7.18"), interpreter("3.12.1"));
    let start = |py: &Path| {
        let mut cmd = Command::new(py);
        cmd.env("LC_ALL", "C.UTF-8")
            .arg(stacks_dir().join("main.py"))
            .args(["-", "0.2"])
            .args(phases)
            .args(["--ready", "--repeat", "3600"])
            .stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("start workload");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert!(line.starts_with("ready"), "workload said {line:?}");
        child
    };
    let mut a = start(&old);
    let mut b = start(&new);
    let (_dir, out) = scratch("two.pyp");
    let pids = format!("{},{}", a.id(), b.id());
    // Until each has had 2.5 s of CPU (two rounds of the six 0.2 s phases), however long a loaded machine takes.
    let mut rec = pyperf().args(["record", "-F", "499", "-p", &pids, "-o"]).arg(&out).spawn().unwrap();
    wait_recording(&out);
    wait_cpu(a.id(), 2.5);
    wait_cpu(b.id(), 2.5);
    let status = interrupt(&mut rec);
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(status.success());
    let rec = Rec::read(&out);

    // Symbol ids used per pid, by (qualified name, file, line).
    let mut used: HashMap<u32, HashMap<Frame, HashSet<u32>>> = HashMap::new();
    for s in &rec.samples {
        for &id in &s.ids {
            let y = rec.sym(id);
            used.entry(s.pid).or_default().entry((y.qualified_name(), y.file.clone(), y.line)).or_default().insert(id);
        }
    }
    let (ua, ub) = (&used[&a.id()], &used[&b.id()]);
    let one_id = |u: &HashMap<Frame, HashSet<u32>>, f: &Frame| -> Option<u32> {
        let ids = u.get(f)?;
        assert_eq!(ids.len(), 1, "{f:?} has ids {ids:?} in one process");
        ids.iter().next().copied()
    };
    let mut shared = 0;
    let mut report = Vec::new();
    for phase in phases {
        let (wa, wb) = (expected(&m, (2, 7), phase), expected(&m, (3, 12), phase));
        for (fa, fb) in wa.iter().zip(&wb) {
            let (Some(ia), Some(ib)) = (one_id(ua, fa), one_id(ub, fb)) else {
                panic!("{phase}: {fa:?} / {fb:?} not recorded in both processes");
            };
            if fa == fb {
                assert_eq!(ia, ib, "{fa:?}: two symbols for the same function and line");
                shared += 1;
            } else {
                // Only the scope differs: the 3.11+ qualified name ends with the pre-3.11 name.
                assert_ne!(ia, ib);
                let (sa, sb) = (rec.sym(ia), rec.sym(ib));
                assert_eq!((&sa.name, &sa.file, sa.line), (&sb.name, &sb.file, sb.line));
                assert!(sb.qualified_name().ends_with(&format!(".{}", fa.0)), "{fa:?} vs {fb:?}");
                report.push(format!("{} vs {}", fa.0, fb.0));
            }
        }
    }
    eprintln!("{shared} frames shared by 2.7 and 3.12; kept apart (scope only): {report:?}");
    assert!(shared >= 15, "only {shared} shared frames");
}

// ---- report ---------------------------------------------------------------------------------------------------

fn report(input: &Path, args: &[&str]) -> String {
    let o = run(pyperf().arg("report").arg("-i").arg(input).args(args));
    assert!(o.status.success(), "pyperf report {args:?} failed");
    String::from_utf8(o.stdout).expect("UTF-8 report")
}

/// folded lines -> (stack, count)
fn folded(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap_or_else(|| panic!("folded line {line:?}"));
        *out.entry(stack.to_string()).or_default() += n.parse::<u64>().unwrap();
    }
    out
}

/// `pyperf report --folded` shows `function (file:line)` frames, `--no-lines` merges the lines of a function
/// (and nothing else), `--speedscope` frames carry file and line; all through the `pyperf` binary, on a
/// recording of real frames.
#[test]
fn report_shows_lines_and_merges_them_on_request() {
    let _guard = serial();
    let m = Markers::load();
    let v = (3, 12);
    let py = interpreter("3.12.1");
    let (dir, out) = scratch("report.pyp");
    let dump = dir.path().join("dump.txt");
    record_workload(&py, &out, &dump, "0.5", &["method", "nested", "two_lines"]);

    let fmt = |fr: &[Frame], lines: bool| -> String {
        fr.iter()
            .map(|(n, file, l)| if lines { format!("{n} ({file}:{l})") } else { format!("{n} ({file})") })
            .collect::<Vec<_>>()
            .join(";")
    };
    let with = folded(&report(&out, &["--folded"]));
    let without = folded(&report(&out, &["--folded", "--no-lines"]));
    for phase in ["method", "nested"] {
        let want = fmt(&expected(&m, v, phase), true);
        let n = with.get(&want).copied().unwrap_or(0);
        assert!(
            n >= 100,
            "{phase}: `{want}` has {n} samples in:\n{}",
            with.keys().cloned().collect::<Vec<_>>().join("\n")
        );
    }
    // --no-lines is --folded with every `:line` dropped and equal stacks summed.
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in &with {
        let frames: Vec<String> = stack
            .split(';')
            .map(|fr| match fr.rfind(':') {
                Some(i) if fr.ends_with(')') && fr[i + 1..fr.len() - 1].bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{})", &fr[..i])
                }
                _ => fr.to_string(),
            })
            .collect();
        *merged.entry(frames.join(";")).or_default() += n;
    }
    assert_eq!(merged, without, "--no-lines is not the line-merged --folded");
    // two_lines spends its time on two lines of one function: two stacks with lines, one without.
    let (a, b) = (m.at("twolines.a"), m.at("twolines.b"));
    let base = fmt(&resolve(&m, v, &[f("<module>", "main.call"), f("main", "main.phase")]), true);
    let leaf = |at: &(String, u32)| format!("{base};phase_two_lines ({}:{})", at.0, at.1);
    let (na, nb) = (with.get(&leaf(&a)).copied().unwrap_or(0), with.get(&leaf(&b)).copied().unwrap_or(0));
    assert!(na >= 40 && nb >= 40, "two_lines: {na} and {nb} samples at lines {} and {}", a.1, b.1);
    // Every line of the function, the two loops and the rare sample on its `while now() < end:` line.
    let prefix = format!("{};phase_two_lines ({}:", base, a.0);
    let all_lines: u64 =
        with.iter().filter(|(k, _)| k.starts_with(&prefix) && !k[prefix.len()..].contains(';')).map(|(_, n)| n).sum();
    assert!((na + nb) * 100 >= all_lines * 95, "two_lines: {na} + {nb} of {all_lines} samples on the two lines");
    let base = fmt(&resolve(&m, v, &[f("<module>", "main.call"), f("main", "main.phase")]), false);
    let one = without.get(&format!("{base};phase_two_lines ({})", a.0)).copied().unwrap_or(0);
    assert_eq!(one, all_lines, "two_lines without lines: the sum of its lines");

    // speedscope: the method phase's frames with file and line, through Python's json module.
    let json = dir.path().join("s.json");
    let o = run(pyperf().arg("report").arg("-i").arg(&out).arg("--speedscope").arg("-o").arg(&json));
    assert!(o.status.success());
    let frames = speedscope_stacks(&json, 1_000_000_000 / 499);
    let want: Vec<String> = expected(&m, v, "method").iter().map(|(n, file, l)| format!("{n}\t{file}\t{l}")).collect();
    let n = frames.get(&want.join("\n")).copied().unwrap_or(0);
    assert!(n >= 100, "speedscope: the method stack has {n} samples");
    let json = dir.path().join("n.json");
    let o = run(pyperf().arg("report").arg("-i").arg(&out).args(["--speedscope", "--no-lines", "-o"]).arg(&json));
    assert!(o.status.success());
    let frames = speedscope_stacks(&json, 1_000_000_000 / 499);
    let want: Vec<String> = expected(&m, v, "method").iter().map(|(n, file, _)| format!("{n}\t{file}\t-")).collect();
    assert!(frames.get(&want.join("\n")).copied().unwrap_or(0) >= 100, "speedscope --no-lines");
}

/// Sample stacks of a speedscope file: "name TAB file TAB line-or-dash" lines, root first -> samples. A speedscope
/// sample weighs one sampling period per pyperf sample (consecutive samples of one stack are merged into one entry
/// of their summed weight), so the count is weight / period; `period_ns` is the recording's (`-F 499`).
fn speedscope_stacks(json: &Path, period_ns: u64) -> HashMap<String, u64> {
    let script = r#"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
frames = d["shared"]["frames"]
for p in d["profiles"]:
    assert p["type"] == "sampled", p["type"]
    assert p["unit"] == "nanoseconds", p["unit"]
    for s, w in zip(p["samples"], p["weights"]):
        if s:
            print("%d\x1f%s" % (w, "\x1e".join("%s\t%s\t%s" % (frames[i]["name"], frames[i].get("file", "-"), frames[i].get("line", "-")) for i in s)))
"#;
    let o = Command::new("/usr/bin/python3").args(["-c", script]).arg(json).output().expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut out = HashMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let (weight, stack) = line.split_once('\x1f').expect("weight and stack");
        let weight: u64 = weight.parse().expect("a weight in ns");
        assert_eq!(weight % period_ns, 0, "a weight not a whole number of periods: {weight}");
        *out.entry(stack.replace('\x1e', "\n")).or_default() += weight / period_ns;
    }
    out
}
