//! Native stacks through code the interpreter generates at run time (issue #32), end to end: `pyperf record
//! --native` of testdata/workloads/split.py (heavy:light CPU at about 3:1, timed by the workload itself):
//!
//! - CPython's JIT (`PYTHON_JIT=1`, Debian sid's 3.14 and 3.15). 3.15 registers each executor's code with its unwind
//!   rule through GDB's JIT interface: at least 90% of the main thread's samples are unwound to the program's entry
//!   and merged (no `[native: ...]` marker), `[jit]` frames are leafward of `burn` in most of its samples, and the
//!   trailer counts native_jit_frames. 3.14's JIT uses rbp as a general register and registers nothing: its samples
//!   in JIT code end in `[native: truncated]` then `[jit]` (marked, never unwound past by guessing), and the trailer
//!   counts native_jit_stops.
//! - The perf trampolines (`-X perf`: pyenv's 3.12, sid's 3.15; `-X perf_jit`, the same trampolines with a jitdump
//!   file for perf instead of a perf map: pyenv's 3.13, sid's 3.15): at least 90% of the samples unwound through them and
//!   merged, the trampolines being interpreter glue (`[perf trampoline]` among the glue frames), counted in
//!   native_perf_trampolines. A sample whose instruction is inside a trampoline's few instructions (not at its return
//!   site: rare) has no rule and ends in `[native: truncated]` then `[jit]`; at exit, when the trampolines are freed,
//!   an unwinding can stop at one, marked: with every Python frame found (`[jit]` at the root), or, in
//!   threading._shutdown, with the rootward ones not reached (`[native: truncated]` then `[jit]` between them and the
//!   unwound ones): at most 2% of them.
//!
//! In every case the Python frames are those of the workload: the heavy share within the usual tolerance of the
//! workload's own clock.
//!
//! Needs root (loads the real BPF program); a missing interpreter fails.

mod common;

use std::path::Path;

use common::{assert_share, interpreter, pyperf, read_each, run, scratch, serial, split_truth, workload};
use pyperf_format::symbol_flags;

/// What the interpreter runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `PYTHON_JIT=1`, the executors registered with unwind rules.
    JitRegistered,
    /// `PYTHON_JIT=1`, no unwind rules for JIT code.
    JitUnregistered,
    /// `-X perf`.
    PerfTrampolines,
    /// `-X perf_jit` (3.13+): the same trampolines, described to perf by a jitdump file instead of a perf map.
    PerfJit,
}

struct Sample {
    main: bool,
    /// (name, flags), root first, glue included.
    frames: Vec<(String, u32)>,
}

impl Sample {
    fn shown(&self) -> Vec<&str> {
        self.frames.iter().filter(|f| f.1 & symbol_flags::GLUE == 0).map(|f| f.0.as_str()).collect()
    }
    fn has(&self, name: &str) -> bool {
        self.frames.iter().any(|f| f.0 == name)
    }
    fn marked(&self) -> bool {
        self.frames.iter().any(|f| f.1 & symbol_flags::MARKER != 0)
    }
}

fn counter(tables: &pyperf_format::Tables, name: &str) -> u64 {
    tables.stats.as_ref().and_then(|s| s.counter(name)).unwrap_or(0)
}

fn check(name: &str, mode: Mode) {
    let _guard = serial();
    let python = interpreter(name);
    let (_dir, out) = scratch("jit.pyp");
    let mut cmd = pyperf();
    cmd.args(["record", "--native", "-F", "499", "-o"]).arg(&out).arg("--").arg(&python);
    if mode == Mode::PerfTrampolines {
        cmd.args(["-X", "perf"]);
    } else if mode == Mode::PerfJit {
        cmd.args(["-X", "perf_jit"]);
    } else {
        cmd.env("PYTHON_JIT", "1");
    }
    cmd.arg(workload("split.py")).arg("4");
    let o = run(&mut cmd);
    assert!(o.status.success(), "{name}: pyperf record failed: {:?}", o.status);
    let truth = split_truth(&o.stdout);
    let keep = common::repo().join("target/tmp/jit");
    let _ = std::fs::create_dir_all(&keep);
    let _ = std::fs::copy(&out, keep.join(format!("{name}.pyp")));
    let (_, tables, all, _) = read_each(Path::new(&out), |t, s, ids| Sample {
        main: s.tid == s.pid,
        frames: ids
            .iter()
            .map(|&id| {
                let sym = t.symbol(id);
                (sym.qualified_name(), sym.flags)
            })
            .collect(),
    });
    if matches!(mode, Mode::PerfTrampolines | Mode::PerfJit) {
        // What -X perf / -X perf_jit leave for perf to read after the process ended: not needed here.
        for p in &tables.processes {
            let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", p.pid));
            let _ = std::fs::remove_file(format!("/tmp/jit-{}.dump", p.pid));
        }
    }
    let main: Vec<&Sample> = all.iter().filter(|s| s.main).collect();
    assert!(main.len() > 500, "{name}: only {} samples of the main thread", main.len());
    let mut failures = Vec::new();

    // The Python frames are the workload's: the split as it timed it.
    let heavy = main.iter().filter(|s| s.has("Runner.run") && s.has("heavy")).count();
    let light = main.iter().filter(|s| s.has("Runner.run") && s.has("light")).count();
    assert_share(name, heavy, heavy + light, truth);

    let burn: Vec<&&Sample> = main.iter().filter(|s| s.has("burn")).collect();
    let jit = |s: &Sample| s.frames.iter().any(|f| f.0 == "[jit]" && f.1 & symbol_flags::NATIVE != 0);
    let in_jit: Vec<&&&Sample> = burn.iter().filter(|s| jit(s)).collect();
    let merged = main.iter().filter(|s| !s.marked()).count();
    let example = |pick: &dyn Fn(&Sample) -> bool| main.iter().find(|s| pick(s)).map(|s| s.shown());
    match mode {
        Mode::JitRegistered | Mode::PerfTrampolines | Mode::PerfJit => {
            if merged * 10 < main.len() * 9 {
                failures.push(format!(
                    "{merged} of {} samples merged whole, e.g. {:?}",
                    main.len(),
                    example(&|s| s.marked())
                ));
            }
        }
        Mode::JitUnregistered => {}
    }
    match mode {
        Mode::JitRegistered | Mode::JitUnregistered => {
            // The JIT compiles burn's loop: most of its samples are in its code.
            if in_jit.len() * 2 < burn.len() {
                failures.push(format!("{} of {} burn samples in [jit] code", in_jit.len(), burn.len()));
            }
            for s in &in_jit {
                let shown = s.shown();
                let at = shown.iter().position(|&n| n == "[jit]").unwrap_or(0);
                // Rootward of the JIT code: burn, or (3.14) the truncation marker right after it.
                let before: Vec<&str> = shown[..at].iter().rev().take(2).copied().collect();
                let ok = match mode {
                    Mode::JitRegistered => before.first() == Some(&"burn"),
                    _ => before == ["[native: truncated]", "burn"],
                };
                if !ok {
                    failures.push(format!("a stack through JIT code: {shown:?}"));
                    break;
                }
            }
        }
        Mode::PerfTrampolines | Mode::PerfJit => {
            // A sample taken inside a trampoline's few instructions (not at its return site) has no rule: marked.
            // At exit the trampolines are freed: an unwinding that finds one gone stops there, marked. Its Python
            // frames all found: the generated code at the root (seen once at threading._shutdown in a CI run); some
            // not reached: they stay rootward of the marker, and only at exit, in threading._shutdown (seen once,
            // `_shutdown;Thread._stop;[native: truncated];[jit];_maintain_shutdown_locks`).
            let in_code: Vec<&&Sample> = main.iter().filter(|s| s.shown().contains(&"[jit]")).collect();
            let marked_leaf = |s: &Sample| {
                let shown = s.shown();
                let marked_stop = shown.windows(2).any(|w| w == ["[native: truncated]", "[jit]"]);
                shown.ends_with(&["[native: truncated]", "[jit]"])
                    || shown.first() == Some(&"[jit]")
                    || (marked_stop && shown.first() == Some(&"_shutdown"))
            };
            if in_code.len() * 50 > main.len() || !in_code.iter().all(|s| marked_leaf(s)) {
                let odd = in_code.iter().find(|s| !marked_leaf(s)).or(in_code.first()).map(|s| s.shown());
                failures.push(format!("{} samples show generated code with -X perf, e.g. {odd:?}", in_code.len()));
            }
            let glue = main.iter().filter(|s| s.has("[perf trampoline]")).count();
            if glue * 2 < main.len() {
                failures.push(format!("{glue} of {} samples through a [perf trampoline] glue frame", main.len()));
            }
        }
    }
    let (frames, stops, trampolines) = (
        counter(&tables, "native_jit_frames"),
        counter(&tables, "native_jit_stops"),
        counter(&tables, "native_perf_trampolines"),
    );
    let counted = match mode {
        Mode::JitRegistered => frames > 0 && stops * 10 < frames,
        Mode::JitUnregistered => stops > 0 && frames == 0,
        Mode::PerfTrampolines | Mode::PerfJit => trampolines > 0 && stops * 10 < trampolines,
    };
    if !counted {
        failures.push(format!(
            "trailer: native_jit_frames {frames}, native_jit_stops {stops}, native_perf_trampolines {trampolines}"
        ));
    }
    eprintln!(
        "{name}: {} main-thread samples, {merged} merged whole, {} of {} burn samples in [jit]",
        main.len(),
        in_jit.len(),
        burn.len()
    );
    assert!(failures.is_empty(), "{name} (recording kept in target/tmp/jit/{name}.pyp):\n  {}", failures.join("\n  "));
}

#[test]
fn jit_sid_3_15_is_unwound_through() {
    check("sid-3.15", Mode::JitRegistered);
}

#[test]
fn jit_sid_3_14_is_marked_where_it_cannot_be_unwound() {
    check("sid-3.14", Mode::JitUnregistered);
}

#[test]
fn perf_trampolines_3_12_are_glue() {
    check("3.12.1", Mode::PerfTrampolines);
}

#[test]
fn perf_trampolines_sid_3_15_are_glue() {
    check("sid-3.15", Mode::PerfTrampolines);
}

#[test]
fn perf_jit_trampolines_3_13_are_glue() {
    check("3.13.0", Mode::PerfJit);
}

#[test]
fn perf_jit_trampolines_sid_3_15_are_glue() {
    check("sid-3.15", Mode::PerfJit);
}
