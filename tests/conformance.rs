//! Conformance: every fact of record/python/ checked against the real interpreters of testdata/interpreters
//! (their DWARF through gdb, their own `_Py_DebugOffsets`, their line tables and type flags as the running
//! interpreter reports them), and the /proc facts the targets rely on. Needs the interpreters, gdb and root
//! (scripts/setup installs them); a missing one is a failure, never a skip. These live here, not in the
//! library's unit tests, so that `cargo test --lib` runs anywhere.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use common::{interpreters, repo};
use pyperf::python::debug_offsets::{self as dbg, cross_check, layout_from_debug_offsets};
use pyperf::python::detect::BinaryInfo;
use pyperf::python::layout::version_from_hex;
use pyperf::python::linetable::{instr_byte_offset, line_at};
use pyperf::python::probes::{self, in_range, Probe, V};
use pyperf::python::versions::{select, Source, TPFLAGS_TYPE_SUBCLASS};
use pyperf::python::{row_for, ROWS};
use pyperf::targets::procfs::{identity, start_time};

// ---- struct offsets against DWARF ----------------------------------------------------------------------------

/// An interpreter with a shared libpython carrying debug info: `(major.minor, name, libpython)`.
struct Install {
    version: V,
    name: String,
    lib: PathBuf,
}

/// Every pyenv interpreter of testdata/interpreters; each row must have at least one (a missing one fails).
fn installs() -> Vec<Install> {
    let all: Vec<Install> = interpreters()
        .into_iter()
        .filter_map(|i| Some(Install { version: i.version, name: i.name, lib: i.libpython? }))
        .collect();
    let mut missing = Vec::new();
    for i in &all {
        if !i.lib.exists() {
            missing.push(format!("{} (no {})", i.name, i.lib.display()));
        }
    }
    // A row from the table alone is checked by nothing but DWARF; rows read from the debug offsets are checked
    // against their interpreters' own blocks (debug_offsets_of_the_real_interpreters).
    for r in ROWS.iter().filter(|r| r.source == Source::Table) {
        if !all.iter().any(|i| i.version == r.version) {
            missing
                .push(format!("Python {}.{}: no pyenv interpreter in testdata/interpreters", r.version.0, r.version.1));
        }
    }
    assert!(
        missing.is_empty(),
        "missing interpreters (install them with debug info and a shared libpython, e.g. \
         PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install X.Y.Z; scripts/setup checks them):\n  {}",
        missing.join("\n  ")
    );
    all
}

/// Result of one gdb expression: `Ok(value)` or `Err(gdb's message)`.
type Eval = Result<i64, String>;

/// Runs one gdb batch over `exprs` against `lib`.
fn run_gdb(install: &Install, exprs: &[&str]) -> Result<Vec<Eval>, String> {
    let list: Vec<String> = exprs.iter().map(|e| format!("    {e:?},")).collect();
    let script = format!("PROBES = [\n{}\n]\n{}", list.join("\n"), probes::GDB_SCRIPT);
    // One file per call: the tests of this binary run at once, and two of them probe the same interpreter (a shared
    // name let one test remove the other's script before its gdb read it: "No such file", in a CI run).
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("pyperf-layouts-{}-{}-{n}.py", std::process::id(), install.name));
    std::fs::write(&path, script).map_err(|e| format!("write {}: {e}", path.display()))?;
    let out = Command::new("gdb")
        .args(["-nx", "-batch", "-iex", "set debuginfod enabled off", "-x"])
        .arg(&path)
        .arg(&install.lib)
        .output();
    let _ = std::fs::remove_file(&path);
    let out = out.map_err(|e| format!("cannot run gdb (is it installed?): {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut evals: Vec<Option<Eval>> = vec![None; exprs.len()];
    let mut ended = false;
    for line in stdout.lines() {
        let mut it = line.splitn(4, '\t');
        if it.next() != Some("@@") {
            continue;
        }
        let (idx, status, rest) = (it.next(), it.next(), it.next().unwrap_or(""));
        if idx == Some("END") {
            ended = true;
            continue;
        }
        let i: usize = idx.and_then(|s| s.parse().ok()).ok_or("bad gdb output")?;
        evals[i] = Some(match status {
            Some("OK") => Ok(rest.parse().map_err(|_| format!("bad value {rest:?}"))?),
            _ => Err(rest.to_string()),
        });
    }
    if !ended || evals.iter().any(Option::is_none) {
        return Err(format!(
            "gdb on {} did not evaluate every probe (exit {:?})\nstdout:\n{stdout}\nstderr:\n{}",
            install.lib.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(evals.into_iter().map(Option::unwrap).collect())
}

/// What one install told us: problems found, and the DWARF value of every field (-1 where
/// no expression for this version evaluates), for the suggested-table dump.
struct Checked {
    errors: Vec<String>,
    dwarf: BTreeMap<&'static str, i64>,
}

fn probe_for(field: &str) -> &'static Probe {
    probes::probe_for(field).unwrap_or_else(|| panic!("no probe for field {field}"))
}

fn check_install(install: &Install) -> Checked {
    let v = install.version;
    let tag = &install.name;
    let row = row_for(v.0, v.1).expect("an interpreter of a version without a row");
    let layout = row.layout;
    let mut errors = Vec::new();
    let mut dwarf = BTreeMap::new();

    // Flat expression list, in `Layout::fields()` order: every `at` and `absent_member`
    // expression of each field's probe, then Py_Version (3.11+) and the _Py_DebugOffsets
    // entries (3.13+). The checks below walk it in the same order.
    let mut exprs: Vec<&str> = Vec::new();
    for (name, _) in layout.fields() {
        let probe = probe_for(name);
        exprs.extend(probe.at.iter().map(|a| a.2));
        exprs.extend(probe.absent_member.iter().map(|a| a.2));
    }
    let has_py_version = v >= (3, 11);
    if has_py_version {
        exprs.push("val|Py_Version");
    }
    // The fields this version's block carries.
    let debug_fields: Vec<(&str, &str)> = dbg::block_layout(v)
        .map(|b| dbg::FIELDS.iter().filter(|f| b.position(f.1).is_some()).copied().collect())
        .unwrap_or_default();
    let debug_exprs: Vec<String> = debug_fields
        .iter()
        .map(|d| format!("val|_PyRuntime.debug_offsets.{}", d.1))
        .chain(std::iter::once("val|_PyRuntime.debug_offsets.free_threaded".to_string()))
        .collect();
    let has_debug_offsets = row.source != Source::Table;
    if has_debug_offsets {
        exprs.extend(debug_exprs.iter().map(String::as_str));
    }
    let evals = match run_gdb(install, &exprs) {
        Ok(e) => e,
        Err(e) => return Checked { errors: vec![format!("{tag}: {e}")], dwarf },
    };

    let mut i = 0;
    for (name, value) in layout.fields() {
        let probe = probe_for(name);
        let at = &evals[i..i + probe.at.len()];
        i += probe.at.len();
        let absent = &evals[i..i + probe.absent_member.len()];
        i += probe.absent_member.len();

        let current = probe.at.iter().position(|a| in_range(v, (a.0, a.1)));
        let dwarf_value = match current {
            Some(k) => at[k].clone(),
            None => Err("no expression for this version".to_string()),
        };
        dwarf.insert(name, dwarf_value.clone().unwrap_or(-1));
        if value != -1 {
            match (current, &dwarf_value) {
                (None, _) => errors
                    .push(format!("{tag}: {name} = {value} but the probe table has no expression for {}.{}", v.0, v.1)),
                (Some(_), Ok(d)) if *d == i64::from(value) => {}
                (Some(k), got) => {
                    errors.push(format!("{tag}: {name} = {value}, DWARF `{}` gives {got:?}", probe.at[k].2))
                }
            }
        } else {
            if let Some(k) = current {
                errors.push(format!(
                    "{tag}: {name} = -1 but `{}` is listed for this version (gives {:?})",
                    probe.at[k].2, at[k]
                ));
            }
            for (k, (a, r)) in probe.at.iter().zip(at).enumerate() {
                if let (Ok(d), false) = (r, current == Some(k)) {
                    errors.push(format!("{tag}: {name} = -1 but `{}` exists here (= {d})", a.2));
                }
            }
            for (a, r) in probe.absent_member.iter().zip(absent) {
                let ok = matches!(r, Err(m) if m.contains("There is no member named"));
                if in_range(v, (a.0, a.1)) && !ok {
                    errors.push(format!("{tag}: {name} = -1 but `{}` gave {r:?}, not 'There is no member named'", a.2));
                }
            }
        }
    }

    if has_py_version {
        let want: Vec<u8> = tag.split('.').filter_map(|s| s.parse().ok()).collect();
        match &evals[i] {
            Ok(hex) => {
                let got = version_from_hex(*hex as u32);
                if [got.0, got.1, got.2][..] != want[..] {
                    errors.push(format!("{tag}: Py_Version {hex:#x} decodes to {got:?}, expected {want:?}"));
                }
            }
            Err(e) => errors.push(format!("{tag}: cannot read Py_Version: {e}")),
        }
        i += 1;
    }
    if has_debug_offsets {
        let fields = layout.fields();
        for (k, (field, member)) in debug_fields.iter().enumerate() {
            let value = fields.iter().find(|f| f.0 == *field).expect("known field").1;
            match &evals[i + k] {
                Ok(d) if *d == i64::from(value) => {}
                got => errors.push(format!("{tag}: {field} = {value}, _Py_DebugOffsets.{member} gives {got:?}")),
            }
        }
        let free_threaded = &evals[i + debug_fields.len()];
        if *free_threaded != Ok(0) {
            errors.push(format!("{tag}: _Py_DebugOffsets.free_threaded is {free_threaded:?}: not a default build"));
        }
    }
    Checked { errors, dwarf }
}

/// Rows in the `layouts!` format from the DWARF values (one column per SUPPORTED version).
fn suggested_table(results: &[(V, Checked)]) -> String {
    let mut s = String::from("DWARF-derived table (first install of each version):\n");
    for (name, _) in ROWS[0].layout.fields() {
        let cols: Vec<String> = ROWS
            .iter()
            .map(|r| {
                let d = results.iter().find(|x| x.0 == r.version).and_then(|x| x.1.dwarf.get(name));
                d.map_or("   ?".to_string(), |d| format!("{d:>4}"))
            })
            .collect();
        s += &format!("    {:<26} [{}],\n", format!("{name}:"), cols.join(", "));
    }
    s
}

#[test]
fn layouts_match_dwarf() {
    let installs = installs();
    // Two gdb processes at a time: enough to halve the wall time on a shared 2-core box.
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(V, Checked)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(install) = installs.get(i) else {
                    break;
                };
                let checked = check_install(install);
                results.lock().unwrap().push((install.version, checked));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);

    let mut errors = Vec::new();
    let mut mismatched = false;
    for (_, c) in &results {
        mismatched |= !c.errors.is_empty();
        errors.extend(c.errors.iter().cloned());
    }
    let checked: Vec<&str> = installs.iter().map(|i| i.name.as_str()).collect();
    eprintln!("checked layouts against DWARF of: {}", checked.join(" "));
    if !errors.is_empty() {
        let table = if mismatched { suggested_table(&results) } else { String::new() };
        panic!("{} layout problem(s):\n  {}\n{table}", errors.len(), errors.join("\n  "));
    }
}

/// The block layout of every pyenv interpreter with `_Py_DebugOffsets` (3.13) against its DWARF: every member's
/// position and the struct's size; and the tables of `debug_offsets` name only fields and members that exist.
#[test]
fn debug_offsets_positions_match_dwarf() {
    let installs: Vec<Install> =
        installs().into_iter().filter(|i| row_for(i.version.0, i.version.1).unwrap().source != Source::Table).collect();
    assert!(!installs.is_empty(), "no pyenv interpreter with _Py_DebugOffsets in testdata/interpreters");
    let mut errors = Vec::new();
    for install in &installs {
        let block = dbg::block_layout(install.version).expect("a block layout");
        let mut probes: Vec<(String, i32)> = vec![
            ("off|struct _Py_DebugOffsets|cookie".to_string(), 0),
            ("off|struct _Py_DebugOffsets|version".to_string(), dbg::VERSION),
            ("off|struct _Py_DebugOffsets|free_threaded".to_string(), dbg::FREE_THREADED),
            ("size|struct _Py_DebugOffsets".to_string(), block.size()),
        ];
        for (member, pos) in block.members() {
            probes.push((format!("off|struct _Py_DebugOffsets|{member}"), pos));
        }
        let exprs: Vec<&str> = probes.iter().map(|p| p.0.as_str()).collect();
        let evals = run_gdb(install, &exprs).unwrap_or_else(|e| panic!("{e}"));
        for ((expr, want), got) in probes.iter().zip(evals) {
            if got != Ok(i64::from(*want)) {
                errors.push(format!("{}: `{expr}` is {got:?}, the block layout says {want}", install.name));
            }
        }
    }
    let fields: Vec<&str> = ROWS[0].layout.fields().iter().map(|f| f.0).collect();
    for (field, member) in dbg::FIELDS {
        assert!(fields.contains(field), "unknown field {field}");
        assert!(dbg::BLOCK_LAYOUTS.iter().any(|b| b.position(member).is_some()), "no layout has {member}");
    }
    for (size, in_it) in dbg::SIZES {
        assert!(dbg::BLOCK_LAYOUTS.iter().all(|b| b.position(size).is_some()), "{size} missing from a layout");
        for f in *in_it {
            assert!(dbg::FIELDS.iter().any(|(n, _)| n == f), "{f} is not read from the debug offsets");
        }
    }
    for f in dbg::SENTINELS {
        assert!(dbg::FIELDS.iter().any(|(n, _)| n == f), "{f} is not read from the debug offsets");
    }
    for m in [dbg::GIL_STATE, dbg::GIL_LOCKED, dbg::GIL_HOLDER] {
        assert!(dbg::BLOCK_LAYOUTS.iter().all(|b| b.position(m).is_some()), "{m} missing from a layout");
    }
    let names: Vec<&str> = installs.iter().map(|i| i.name.as_str()).collect();
    eprintln!("checked _Py_DebugOffsets positions against DWARF of: {}", names.join(" "));
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

// ---- 3.13+: _Py_DebugOffsets layouts and blocks ------------------------------------------------------------------

/// Every known `_Py_DebugOffsets` layout against the header of its version: for 3.14 and 3.15 Debian sid's
/// `pycore_debug_offsets.h` (compiled into a probe with clang, `offsetof` of every member and `sizeof`); 3.13's
/// positions are checked against the DWARF of pyenv's 3.13 above (`debug_offsets_positions_match_dwarf`).
#[test]
fn block_layouts_match_the_headers() {
    let root = common::sid_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut checked = Vec::new();
    for block in &dbg::BLOCK_LAYOUTS {
        let (major, minor) = block.version;
        let header = root.join(format!("usr/include/python{major}.{minor}/internal/pycore_debug_offsets.h"));
        if (major, minor) == (3, 13) {
            continue; // its struct lives in pycore_runtime.h with the whole runtime: checked through DWARF
        }
        assert!(
            header.exists(),
            "{} missing: run scripts/setup (it installs libpython{major}.{minor}-dev)",
            header.display()
        );
        let members = block.members();
        let mut src = String::from(
            "#include <stdint.h>\n#include <stdio.h>\n#include <stddef.h>\n#define Py_BUILD_CORE 1\n\
             #define _Py_NONSTRING\n#include \"internal/pycore_debug_offsets.h\"\nint main(void) {\n\
             printf(\"size %zu\\n\", sizeof(_Py_DebugOffsets));\n",
        );
        for (m, _) in &members {
            src += &format!("printf(\"{m} %zu\\n\", offsetof(_Py_DebugOffsets, {m}));\n");
        }
        src += "return 0;\n}\n";
        let c = dir.path().join(format!("probe{major}{minor}.c"));
        let exe = dir.path().join(format!("probe{major}{minor}"));
        std::fs::write(&c, src).unwrap();
        let include = root.join(format!("usr/include/python{major}.{minor}"));
        let out = Command::new("clang").arg("-I").arg(&include).arg("-o").arg(&exe).arg(&c).output().expect("clang");
        assert!(out.status.success(), "{major}.{minor}: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(&exe).output().expect("probe");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: BTreeMap<&str, i64> =
            text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k, v.parse().unwrap())).collect();
        assert_eq!(got.get("size"), Some(&i64::from(block.size())), "{major}.{minor}: sizeof(_Py_DebugOffsets)");
        for (m, pos) in &members {
            assert_eq!(got.get(m.as_str()), Some(&i64::from(*pos)), "{major}.{minor}: offsetof {m}");
        }
        checked.push(format!("{major}.{minor} ({} members)", members.len()));
    }
    eprintln!("checked _Py_DebugOffsets layouts against sid's headers: {}", checked.join(", "));
    assert!(checked.len() >= 2, "no header-checked layout");
}

// ---- line tables against the interpreters --------------------------------------------------------------------

struct Code {
    first_line: u32,
    table: Vec<u8>,
    name: String,
    lines: Vec<i64>,
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

fn expected(line: i64) -> Option<u32> {
    u32::try_from(line).ok()
}

/// Runs the dump script with one interpreter and checks every answer; returns a summary line.
fn check_interpreter(major: u8, minor: u8, python: &Path, script: &Path) -> Result<String, String> {
    let who = format!("{major}.{minor} ({})", python.display());
    let row = row_for(major, minor).ok_or(format!("{who}: no row"))?;
    let kind = row.line_table;
    let out = Command::new(python).arg(script).output().map_err(|e| format!("{who}: cannot run: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mismatches: Vec<&str> = stdout.lines().filter(|l| l.starts_with("MISMATCH")).collect();
    if !out.status.success() || !mismatches.is_empty() {
        return Err(format!(
            "{who}: dump script failed ({}):\n{}\n{}",
            out.status,
            mismatches.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut codes: Vec<Code> = Vec::new();
    let mut frames: Vec<(usize, u32, u32, Option<u32>)> = Vec::new();
    let mut version = None;
    let mut end = None;
    let mut lines = stdout.lines();
    while let Some(l) = lines.next() {
        let f: Vec<&str> = l.split(' ').collect();
        match f[0] {
            "VERSION" => version = Some((f[1].parse::<u8>().unwrap(), f[2].parse::<u8>().unwrap())),
            "CODE" => {
                assert_eq!(f[1].parse::<usize>().unwrap(), codes.len(), "{who}: code ids");
                let n: usize = f[3].parse().unwrap();
                let next = lines.next().unwrap_or("");
                let ls: Vec<i64> = next.split(' ').skip(1).map(|x| x.parse().expect("line number")).collect();
                assert!(next.starts_with("LINES") && ls.len() == n, "{who}: bad LINES after {l}");
                codes.push(Code {
                    first_line: f[2].parse::<i64>().unwrap() as u32,
                    table: unhex(f[4]),
                    name: f.get(5).unwrap_or(&"?").to_string(),
                    lines: ls,
                });
            }
            "FRAME" => frames.push((
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                if f[4] == "None" { None } else { Some(f[4].parse().unwrap()) },
            )),
            "END" => end = Some((f[1].parse::<usize>().unwrap(), f[2].parse::<usize>().unwrap())),
            _ => return Err(format!("{who}: unexpected output line {l:?}")),
        }
    }
    if version != Some((major, minor)) {
        return Err(format!("{who}: interpreter reports version {version:?}"));
    }
    if end != Some((codes.len(), frames.len())) {
        return Err(format!("{who}: truncated output (END {end:?})"));
    }

    let mut errors = Vec::new();
    // [real, synthetic] x [offsets, offsets without line]
    let mut counts = [[0usize; 2]; 2];
    for (id, c) in codes.iter().enumerate() {
        let synthetic = usize::from(c.name == "<synthetic>");
        for (off, &want) in c.lines.iter().enumerate() {
            counts[synthetic][0] += 1;
            counts[synthetic][1] += usize::from(want < 0);
            let got = line_at(kind, c.first_line, &c.table, off as u32);
            if got != expected(want) && errors.len() < 20 {
                errors.push(format!(
                    "code #{id} {} (first {}) offset {off}: CPython {want}, line_at {got:?}",
                    c.name, c.first_line
                ));
            }
        }
    }
    // End-to-end: the raw value BPF reads -> instr_byte_offset -> line_at == frame.f_lineno.
    // A not-started frame (None) is reported by CPython as co_firstlineno.
    let resolve = |c: &Code, raw: u32, adaptive: u32, shift: i64| match instr_byte_offset(row.instr, raw, adaptive) {
        None => Some(c.first_line),
        Some(off) => {
            let off = u32::try_from(i64::from(off) + shift).ok()?;
            line_at(kind, c.first_line, &c.table, off)
        }
    };
    let mut refuted_prev = 0;
    for &(id, raw, adaptive, lineno) in &frames {
        let c = codes.get(id).ok_or(format!("{who}: frame of unknown code {id}"))?;
        let got = resolve(c, raw, adaptive, 0);
        if got != lineno && errors.len() < 40 {
            errors.push(format!(
                "frame in {} raw {raw} adaptive {adaptive}: f_lineno {lineno:?}, resolved {got:?}",
                c.name
            ));
        }
        refuted_prev += usize::from(resolve(c, raw, adaptive, -2) != lineno);
    }
    if !errors.is_empty() {
        return Err(format!("{who}: {} mismatches:\n  {}", errors.len(), errors.join("\n  ")));
    }
    if frames.len() < 20 || codes.len() < 50 {
        return Err(format!("{who}: too little data ({} codes, {} frames)", codes.len(), frames.len()));
    }
    // 3.13's instr_ptr is the executing instruction: "instr_ptr - 2" must be visibly wrong.
    if (major, minor) == (3, 13) && refuted_prev == 0 {
        return Err(format!("{who}: the frames do not distinguish instr_ptr from instr_ptr - 2"));
    }
    let [[real, real_none], [synth, synth_none]] = counts;
    Ok(format!(
        "{major}.{minor}: {} code objects: {real} offsets of compiled code ({real_none} without line), \
         {synth} of synthetic tables ({synth_none} without line); {} live frames OK \
         ({refuted_prev} of them would resolve differently at offset - 2)",
        codes.len(),
        frames.len()
    ))
}

#[test]
fn line_tables_match_every_interpreter() {
    let script = repo().join("testdata/linetable_dump.py");
    let all = interpreters();
    for r in &ROWS {
        assert!(
            all.iter().any(|i| i.version == r.version),
            "no interpreter of {:?} in testdata/interpreters",
            r.version
        );
    }
    // Two at a time (the machine is small).
    let mut results = Vec::new();
    for pair in all.chunks(2) {
        let handles: Vec<_> = pair
            .iter()
            .cloned()
            .map(|i| {
                let s = script.clone();
                std::thread::spawn(move || check_interpreter(i.version.0, i.version.1, &i.python, &s))
            })
            .collect();
        for h in handles {
            results.push(h.join().expect("checker thread"));
        }
    }
    let mut failed = Vec::new();
    for r in results {
        match r {
            Ok(summary) => eprintln!("linetable: {summary}"),
            Err(e) => failed.push(e),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

// ---- type flags and _co_firsttraceable -----------------------------------------------------------------------

/// What the running interpreter itself says about a row's facts that `_Py_DebugOffsets` does not carry (and the
/// distribution builds have no DWARF for): `tp_flags` at `type_flags` and `Py_TPFLAGS_TYPE_SUBCLASS` (through
/// ctypes: the flags word at that offset is `__flags__`, the bit is set for `type` and metaclasses only), and
/// `_co_firsttraceable` (3.11+): the only int in the code object's header that equals, for code objects with
/// different prologues, the code-unit index of their first RESUME (which is what CPython stores there).
const INTERPRETER_PROBE: &str = r#"
import ctypes, abc, dis, sys
type_flags, code_code, SUBCLASS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
flags = lambda t: ctypes.c_ulong.from_address(id(t) + type_flags).value
assert all(flags(t) == t.__flags__ for t in (int, type, abc.ABCMeta, object)), "tp_flags"
assert flags(type) & SUBCLASS and flags(abc.ABCMeta) & SUBCLASS, "subclass bit"
assert not flags(int) & SUBCLASS and not flags(object) & SUBCLASS, "subclass bit"
def plain(): return 1
def cells():
    x = 1
    def inner(): return x
    return inner
def gen():
    yield 1
codes = [plain.__code__, cells.__code__, gen.__code__, cells().__code__, abc.ABCMeta.__new__.__code__]
def first_resume(c):
    for ins in dis.get_instructions(c):  # only called on 3.11+ (no get_instructions on 2.7)
        if ins.opname == "RESUME":
            return ins.offset // 2
want = [first_resume(c) for c in codes] if sys.version_info >= (3, 11) else [None]
found = []
if None not in want:
    assert len(set(want)) > 1, want
    for off in range(16, code_code - 3, 4):
        if [ctypes.c_int.from_address(id(c) + off).value for c in codes] == want:
            found.append(off)
sys.stdout.write("ok " + (" ".join(map(str, found)) or "-") + "\n")
"#;

/// [`INTERPRETER_PROBE`] in every interpreter of testdata/interpreters, and `_co_firsttraceable` against the DWARF
/// of the pyenv ones.
#[test]
fn type_flags_and_first_traceable_match_the_interpreters() {
    let all = interpreters();
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("probe.py");
    std::fs::write(&script, INTERPRETER_PROBE).unwrap();
    let mut seen = Vec::new();
    for i in &all {
        let row = row_for(i.version.0, i.version.1).expect("a row");
        let out = Command::new(&i.python)
            .arg(&script)
            .arg(row.type_flags.to_string())
            .arg(row.layout.code_code.to_string())
            .arg(TPFLAGS_TYPE_SUBCLASS.to_string())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", i.python.display()));
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(text.starts_with("ok"), "{}: {text} {}", i.name, String::from_utf8_lossy(&out.stderr));
        let found = text.trim_start_matches("ok").trim().to_string();
        let want = row.first_traceable.map_or("-".to_string(), |o| o.to_string());
        // Before 3.11 there is no RESUME (and no _co_firsttraceable): nothing may be found.
        assert_eq!(found, want, "{}: _co_firsttraceable candidates in the running interpreter", i.name);
        seen.push(format!("{} {found}", i.name));
    }
    eprintln!("interpreter probes (first traceable): {}", seen.join(", "));
    for r in &ROWS {
        let Some(i) = all.iter().find(|i| i.version == r.version && i.libpython.is_some()) else {
            assert!(
                r.source != Source::Table,
                "no pyenv interpreter of {:?}: its table is checked by nothing",
                r.version
            );
            continue;
        };
        let lib = i.libpython.as_ref().unwrap();
        let out = Command::new("gdb")
            .args(["-nx", "-batch", "-iex", "set debuginfod enabled off", "-ex"])
            .arg("print (long)&((PyCodeObject*)0)->_co_firsttraceable")
            .arg(lib)
            .output()
            .expect("gdb");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: Option<i32> = text.trim().rsplit(' ').next().and_then(|n| n.parse().ok());
        assert_eq!(got, r.first_traceable, "{}: {text}", lib.display());
    }
}

// ---- the interpreters' own _Py_DebugOffsets -------------------------------------------------------------------

/// The ELF file holding an interpreter: libpython for pyenv builds, else the executable (inside the sid root for
/// `sid:` ones).
fn elf_of(i: &common::Interpreter) -> PathBuf {
    if let Some(lib) = &i.libpython {
        return lib.clone();
    }
    let list = std::fs::read_to_string(repo().join("testdata/interpreters")).unwrap();
    let place = list
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 3 && f[0] == i.name)
        .map(|f| f[2].to_string())
        .unwrap();
    match place.strip_prefix("sid:") {
        Some(exe) => common::sid_root().join("usr/bin").join(exe),
        None => PathBuf::from(place),
    }
}

/// What detection reads of an interpreter's binary.
fn binary(i: &common::Interpreter) -> BinaryInfo {
    let path = elf_of(i);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e} (scripts/setup)", path.display()));
    BinaryInfo::read(file).expect("an ELF file")
}

fn put(block: &mut [u8], of: (u8, u8), member: &str, v: u64) {
    let pos = dbg::block_layout(of).unwrap().position(member).unwrap() as usize;
    block[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
}

fn message<T: std::fmt::Debug>(r: Result<T, pyperf::python::versions::Unsupported>) -> String {
    r.expect_err("must be refused").for_pid(123).to_string()
}

/// Every interpreter with `_Py_DebugOffsets` (pyenv 3.13.0, sid's 3.13, 3.14, 3.15), its block read from the binary
/// as detection reads it (`.PyRuntime` where the build has it, which must be where the `_PyRuntime` symbol is):
/// accepted with its row as is (the row's table equals the real block), a moved field taken from the block, a
/// free-threaded flag refused.
#[test]
fn debug_offsets_of_the_real_interpreters() {
    let mut checked = Vec::new();
    for i in interpreters() {
        let row = row_for(i.version.0, i.version.1).unwrap();
        if row.source == Source::Table {
            continue;
        }
        let info = binary(&i);
        let version = info.version.expect("a version");
        assert_eq!((version.0, version.1), row.version, "{}", i.name);
        if info.runtime_from_section {
            assert_eq!(info.runtime, info.syms.get("_PyRuntime").copied(), "{}: .PyRuntime vs the symbol", i.name);
        }
        let block = info.debug_block.expect("_PyRuntime in initialised data");
        let r = select(version, Some(&block)).unwrap_or_else(|e| panic!("{}: {e}", i.name));
        assert!(
            std::ptr::eq(r, row),
            "{}: the block differs from the row's table: {:?}",
            i.name,
            cross_check(r.layout, row.layout)
        );
        let b = dbg::block_layout(row.version).unwrap();
        let built = layout_from_debug_offsets(&block, b, row.version, row.layout).unwrap();
        assert_eq!(built, *row.layout, "{}", i.name);

        let mut moved = block.clone();
        put(&mut moved, row.version, "thread_state.native_thread_id", row.layout.tstate_native_thread_id as u64 + 8);
        let m = select(version, Some(&moved)).unwrap();
        assert_eq!(
            m.layout.tstate_native_thread_id,
            row.layout.tstate_native_thread_id + 8,
            "{}: the block wins",
            i.name
        );
        let mut ft = block.clone();
        ft[dbg::FREE_THREADED as usize] = 1;
        assert!(message(select(version, Some(&ft))).contains("free-threaded (Py_GIL_DISABLED)"));
        checked.push(format!(
            "{} ({}, {})",
            i.name,
            if info.runtime_from_section { ".PyRuntime" } else { "symbol" },
            b.size()
        ));
    }
    eprintln!("real _Py_DebugOffsets blocks: {}", checked.join(", "));
    assert!(checked.len() >= 4, "expected pyenv 3.13 and sid's 3.13, 3.14, 3.15: {checked:?}");
}

/// The newest interpreter's real block relabelled as the next minor: read through its own layout with the newest
/// row; a block whose members moved matches no layout and is refused.
#[test]
fn debug_offsets_alone_for_a_newer_version() {
    let newest = &ROWS[ROWS.len() - 1];
    let i =
        interpreters().into_iter().rfind(|i| i.version == newest.version).expect("an interpreter of the newest row");
    let mut block = binary(&i).debug_block.expect("a block");
    let next = (newest.version.0, newest.version.1 + 1);
    block[dbg::VERSION as usize..][..8]
        .copy_from_slice(&((u64::from(next.0) << 24) | (u64::from(next.1) << 16) | 0xf0).to_le_bytes());
    let r = select((next.0, next.1, 0), Some(&block)).expect("the next version from its debug offsets");
    assert_eq!(r.version, next);
    assert_eq!(r.source, Source::Newer { as_of: newest.version });
    assert_eq!(cross_check(r.layout, newest.layout), Vec::<String>::new());
    assert_eq!(version_from_hex(0x030E_00F0), (3, 14, 0));

    // A member added to interpreter_state moves everything after it by 8 bytes.
    let at = dbg::block_layout(newest.version).unwrap().position("interpreter_state.next").unwrap() as usize;
    let mut moved = block[..at].to_vec();
    moved.extend_from_slice(&[0u8; 8]);
    moved.extend_from_slice(&block[at..block.len() - 8]);
    let m = message(select((next.0, next.1, 0), Some(&moved)));
    assert!(m.contains("match none of the layouts pyperf reads"), "{m}");
}

// ---- /proc facts the targets rely on --------------------------------------------------------------------------

#[test]
fn this_process_has_an_identity_that_stays() {
    let me = std::process::id();
    let a = identity(me).unwrap();
    assert!(a.start_time > 0);
    assert_ne!(a.image, (0, 0, 0), "run as root, or the kernel hides the image addresses");
    assert_eq!(identity(me), Some(a));
    assert_eq!(start_time(me), Some(a.start_time));
}

#[test]
fn exec_is_seen_in_a_real_process() {
    // sh waits for a line, then execs into another program: same pid and start time, new identity. (Told when,
    // and the exec seen through /proc/PID/exe: fixed sleeps raced it on a loaded machine.)
    let mut child = Command::new("sh").args(["-c", "read x; exec sleep 5"]).stdin(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let before = identity(pid).unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_link(format!("/proc/{pid}/exe")).map_or(true, |e| !e.ends_with("sleep")) {
        assert!(std::time::Instant::now() < until, "sh did not exec sleep within a minute");
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = identity(pid).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(before.start_time, after.start_time);
    assert_ne!(before, after);
}
