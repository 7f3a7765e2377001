//! `pyperf dump -p PID`: every thread of a Python process now, with its Python stack, its state (running, sleeping
//! in a system call, waiting for the GIL) and its Python name, read from the process's memory without stopping it.
//!
//! Each thread is read as `record --off-cpu` reads a blocked thread at the end ([`crate::rest`]: its walk, its
//! GIL wait, its raw sample): the thread state and frame chain are read twice and kept only when both reads agree (a
//! third read breaks a tie), so a stack that changes while being read is retried or reported as changing, never
//! spliced. What it reads of /proc is [`crate::proc`]'s; how often it reads, and the looks around a copy of a
//! blocked thread's stack (`--native`), are this module's.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use pyperf_format::{GilState, Symbol};

use crate::proc::{self, MapsEntry, Syscall};
use crate::rest::{self, Target};
use crate::symbolizer::Symbolizer;
use crate::threadnames::ThreadNames;

/// `pyperf dump`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct DumpArgs {
    /// The Python process to dump (a thread's id: its whole process, with a note saying so)
    #[arg(short = 'p', long = "pid")]
    pub pid: u32,
    /// JSON for tools instead of text: {"pid", "threads": [{"tid", "name", "os_name", "state", "syscall", "gil",
    /// "frames": [{"function", "file", "line", "kind"}] leaf first, "error", "native_missing",
    /// "kernel_missing"}]}
    #[arg(long)]
    pub json: bool,
    /// Also the kernel frames of each thread that is not running (/proc/PID/task/TID/stack: where it waits in the
    /// kernel), innermost first, named `function_[k]` as in reports; needs root
    #[arg(long)]
    pub kernel: bool,
    /// Also the native frames (C, C++, Rust) of each thread blocked in a system call, merged with its Python
    /// frames as `record --native` merges them: unwound from a copy of its stack, read while it stays blocked (a
    /// thread that runs meanwhile is read again, else marked). A running thread's native frames are not read (that
    /// would need stopping it).
    #[arg(long)]
    pub native: bool,
    /// Also the asyncio tasks (CPython 3.11+), as a tree: each task under the one awaiting it, with its name and its
    /// coroutine chain (file:line) down to where it waits, like `python -m asyncio pstree`; in --json, "tasks":
    /// [{"id", "name", "thread", "state", "frames" leaf first, "awaited_by", "other_awaiters", "cut"}]
    #[arg(long = "async")]
    pub tasks: bool,
}

/// One thread as dumped.
#[derive(Debug, Clone)]
pub struct DumpedThread {
    /// Thread id (host).
    pub tid: u32,
    /// OS name (comm).
    pub comm: String,
    /// Python name, when the interpreter has one for it.
    pub python_name: Option<String>,
    /// The kernel's view: `R` running, `S` sleeping, `D` disk, ... (/proc/PID/task/TID/stat).
    pub state: char,
    /// The system call it waits in, when sleeping in one.
    pub syscall: Option<i64>,
    /// Blocked in futex(2) on the GIL.
    pub gil_wait: bool,
    /// GIL state as the walk found it.
    pub gil: GilState,
    /// Frames, root first; `Err` when the stack could not be read consistently.
    pub frames: Result<Vec<Symbol>, String>,
    /// With `--kernel`: kernel functions, innermost first, for a thread not running (empty otherwise).
    pub kernel: Vec<String>,
    /// With `--native`: why its native frames are not among `frames`, if they are not.
    pub native_missing: Option<String>,
    /// With `--kernel`: why its kernel frames are not in `kernel`, if they could not be read.
    pub kernel_missing: Option<String>,
}

/// What `dump -p PID` is to dump: the process of `pid` (itself, or the process of which it is a thread), or why
/// there is nothing to dump (a kernel thread, a zombie), in a line that says what it is.
pub fn process_of(pid: u32) -> Result<u32> {
    let stat = proc::stat(pid).ok_or_else(|| anyhow::anyhow!("no process or thread {pid}"))?;
    if stat.kernel_thread() {
        anyhow::bail!("pid {pid} is a kernel thread, not a Python process");
    }
    let tgid = proc::tgid(pid).unwrap_or(pid);
    if tgid != pid {
        crate::say!("pyperf: note: pid {pid} is a thread of process {tgid}; dumping process {tgid}");
        return process_of(tgid);
    }
    // A leader that exited while its other threads run is Z too: a zombie only when every thread is.
    let live_thread = proc::tasks(pid)
        .unwrap_or_default()
        .into_iter()
        .any(|tid| proc::task_stat(pid, tid).is_some_and(|s| s.running()));
    if !stat.running() && !live_thread {
        anyhow::bail!("pid {pid} is a zombie (exited, not reaped by its parent): there is nothing to dump");
    }
    Ok(pid)
}

/// Whether reading `path` is refused for want of a permission (the file is the process owner's: /proc/PID/mem,
/// /proc/PID/task/TID/syscall and stack are readable by their owner only, or with CAP_DAC_READ_SEARCH).
fn refused(path: &str) -> bool {
    match std::fs::File::open(path) {
        Ok(mut f) => {
            let mut b = [0u8; 1];
            // /proc/PID/task/TID/stack checks CAP_SYS_ADMIN at the read.
            std::io::Read::read(&mut f, &mut b).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        }
        Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
    }
}

/// A look at a blocked thread: where it is blocked (the system call, which holds where it entered the kernel) and
/// its context switches so far; the same look before and after a read: it did not run meanwhile.
type Look = (Option<Syscall>, Option<u64>);

/// A look at thread `tid` of `pid` now.
fn look(pid: u32, tid: u32) -> Look {
    (proc::task_syscall(pid, tid), proc::task_switches(pid, tid))
}

/// Most of a thread's stack copied for the unwinding: from its stack pointer to the end of the mapping that holds
/// it, at most this much.
const NATIVE_STACK_MAX: u64 = 512 * 1024;

/// A copy of `pid`'s memory from `sp` to the end of its mapping (at most [`NATIVE_STACK_MAX`]).
fn copy_stack(mem: &std::fs::File, maps: &[MapsEntry], sp: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let Some(m) = maps.iter().find(|m| m.start <= sp && sp < m.end) else { return Vec::new() };
    let len = (m.end - sp).min(NATIVE_STACK_MAX) as usize;
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match mem.read_at(&mut buf[got..], sp + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    buf.truncate(got);
    buf
}

/// Why a thread's kernel frames are not shown when /proc/PID/task/TID/stack is refused.
const KERNEL_DENIED: &str = "permission denied (/proc/PID/task/TID/stack needs root or CAP_SYS_ADMIN)";

/// Attempts at a running thread's stack: each reads it two or three times and keeps it only if the reads agree.
const ATTEMPTS: usize = 50;

/// Reads every thread of `pid`.
pub fn threads(pid: u32, kernel: bool, native: bool) -> Result<Vec<DumpedThread>> {
    let target = Target::inspect(pid)?;
    let mut walker = target.walker().with_context(|| format!("cannot read process {pid}"))?;
    let mut symbolizer = Symbolizer::new();
    if native {
        symbolizer.set_native(crate::native::stacks::NativeStacks::new(true, false, &crate::python::jit::GENERATED).0);
    }
    symbolizer.add_process(&target.process).with_context(|| format!("cannot read process {pid}"))?;
    let mut thread_names = ThreadNames::default();
    thread_names.add_process(&target.process);
    // Without the permission to read the threads' saved registers or stacks (pyperf with only its capabilities,
    // another user's process), native frames are marked not read, not the whole dump refused.
    let native_refused =
        native && (refused(&format!("/proc/{pid}/mem")) || refused(&format!("/proc/{pid}/task/{pid}/syscall")));
    let native_denied = format!(
        "{NATIVE_DENIED} (process {pid} is another user's: its memory and registers need root, or \
         CAP_DAC_READ_SEARCH too)"
    );
    let (mem, maps) = if native && !native_refused {
        let mem =
            std::fs::File::open(format!("/proc/{pid}/mem")).with_context(|| format!("cannot read process {pid}"))?;
        let maps = proc::maps(pid).with_context(|| format!("process {pid} is gone"))?;
        (Some(mem), proc::parse_maps(&maps))
    } else {
        (None, Vec::new())
    };
    // /proc/PID/task/TID/stack needs CAP_SYS_ADMIN: without it every read fails, said once and per thread.
    let kernel_refused = kernel && refused(&format!("/proc/{pid}/task/{pid}/stack"));
    let mut symbols: Vec<Symbol> = Vec::new();
    let tids = proc::tasks(pid).with_context(|| format!("process {pid} is gone"))?;
    // --native: each thread's saved registers (frame pointer included), read after a first look at every thread
    // and checked against a second one after its copy (see below).
    let mut first_look: HashMap<u32, Look> = HashMap::new();
    let mut regs = HashMap::new();
    if native && !native_refused {
        for &tid in &tids {
            first_look.insert(tid, look(pid, tid));
        }
        match crate::sampler::regs::task_regs(pid) {
            Ok(r) => regs = r,
            Err(e) => crate::say!(
                "pyperf: warning: --native: cannot read the threads' frame pointers ({e}); native frames of code built \
                 with frame pointers are marked [native: unmerged]"
            ),
        }
    }
    let mut out = Vec::new();
    for tid in tids {
        // The kernel's state letter, and the system call it is in with its first argument.
        let state = proc::task_stat(pid, tid).map_or('?', |s| s.state);
        let call = proc::task_syscall(pid, tid).map(|c| (c.nr, c.args[0]));
        let comm = String::from_utf8_lossy(&proc::task_comm(pid, tid).unwrap_or_default()).trim().to_string();
        let ns_tid = target.ns_tid(tid);
        // A running thread's frames move under the reads: tried again until two reads agree.
        let mut walked = Err("thread gone".to_string());
        // --native, a thread blocked in a system call: its stack copy and its Python walk, both between two looks
        // that find it blocked at the same place with no context switch in between (it did not run meanwhile).
        let mut copy: Option<(u64, u64, u64, Vec<u8>, u64)> = None;
        let mut native_missing = None;
        if let (Some(mem), Some(t)) = (mem.as_ref().filter(|_| state != 'R'), ns_tid) {
            native_missing = Some("not blocked in a system call (no user registers to start from)".to_string());
            for attempt in 0..5 {
                let before = match (attempt, first_look.remove(&tid)) {
                    (0, Some(look)) => look,
                    _ => {
                        // Looked at again: its registers too.
                        let again = look(pid, tid);
                        if let Ok(r) = crate::sampler::regs::task_regs(pid) {
                            regs = r;
                        }
                        again
                    }
                };
                let Some(Syscall { sp, pc, .. }) = before.0 else { break };
                // When the copy was taken: the native unwinder reads the maps again only for code it may not have
                // seen (a copy taken after its last read).
                let taken = crate::clock::monotonic_ns();
                let stack = copy_stack(mem, &maps, sp);
                let w = walker.walk(t).map_err(|e| e.to_string());
                if before == look(pid, tid) && before.1.is_some() {
                    // The frame pointer only from registers saved at this same block (same sp and pc).
                    let bp = regs.get(&tid).filter(|r| r.sp == sp && r.ip == pc).map_or(0, |r| r.bp);
                    walked = w;
                    native_missing = None;
                    copy = Some((sp, pc, bp, stack, taken));
                    break;
                }
                native_missing = Some("the thread ran while its stack was read".to_string());
            }
        } else if native_refused {
            native_missing = Some(native_denied.clone());
        } else if native {
            native_missing = Some("the thread is running (its native frames would need stopping it)".to_string());
        }
        if let (None, Some(t)) = (&copy, ns_tid) {
            for _ in 0..ATTEMPTS {
                walked = walker.walk(t).map_err(|e| e.to_string());
                if !matches!(walked, Err(ref e) if e.contains("kept changing")) {
                    break;
                }
                std::thread::yield_now();
            }
        }
        let gil_wait = target.gil_wait(call, walked.as_ref().ok());
        let syscall = call.map(|c| c.0);
        let (frames, gil) = match walked {
            Ok(w) => {
                let user = copy.as_ref().map(|(sp, pc, bp, stack, _)| crate::sampler::UserStack {
                    ip: *pc,
                    sp: *sp,
                    bp: *bp,
                    stack,
                });
                let taken = copy.as_ref().map_or_else(crate::clock::monotonic_ns, |c| c.4);
                let comm = rest::comm16(comm.as_bytes());
                let raw = rest::raw_sample(pid, tid, taken, comm, Some(&w), gil_wait, user, None);
                thread_names.saw(raw.pid, raw.tid, raw.time_ns);
                let ids = symbolizer
                    .symbolize(&raw, &mut |id, s| {
                        if id as usize == symbols.len() {
                            symbols.push(s.clone());
                        }
                    })
                    .to_vec();
                let frames = ids
                    .iter()
                    .filter_map(|&i| symbols.get(i as usize).cloned())
                    // Said once, in words (`native_missing`), rather than as a marker frame.
                    .filter(|s| !(native_missing.is_some() && s.name == crate::native::stacks::NO_STACK))
                    .collect();
                (Ok(frames), GilState::from_u8(w.gil))
            }
            Err(e) => (Err(e), GilState::NoInfo),
        };
        // A running thread's kernel stack says nothing about where it is (it is in user space, or moving).
        let mut kernel_missing = None;
        let kernel = if kernel && state != 'R' {
            match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stack")) {
                Ok(t) => proc::parse_kernel_stack(&t),
                Err(e) => {
                    kernel_missing = Some(if kernel_refused || e.kind() == std::io::ErrorKind::PermissionDenied {
                        KERNEL_DENIED.to_string()
                    } else {
                        e.to_string()
                    });
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        out.push(DumpedThread {
            tid,
            comm,
            python_name: None,
            state,
            syscall,
            gil_wait,
            gil,
            frames,
            kernel,
            native_missing,
            kernel_missing,
        });
    }
    let mut names: HashMap<u32, String> = HashMap::new();
    thread_names.read(Instant::now(), true, &mut |_, tid, name, _| {
        names.insert(tid, name.to_string());
    });
    for t in &mut out {
        t.python_name = names.remove(&t.tid);
    }
    Ok(out)
}

/// How a thread's kernel state reads: `running`, `waiting` (in a system call), `sleeping`, `disk`, `other`.
fn state_key(t: &DumpedThread) -> &'static str {
    match (t.state, t.syscall) {
        ('R', _) => "running",
        (_, Some(_)) => "waiting",
        ('S', None) => "sleeping",
        ('D', None) => "disk",
        _ => "other",
    }
}

/// The thread's relation to the GIL: `holds`, `waiting`, `held-by-other`, `free`, `unknown`.
fn gil_key(t: &DumpedThread) -> &'static str {
    if t.gil_wait {
        return "waiting";
    }
    match t.gil {
        GilState::ThisThread => "holds",
        GilState::NotLocked => "free",
        GilState::OtherThread | GilState::GlobalCurrentThread => "held-by-other",
        GilState::Waiting => "waiting",
        _ => "unknown",
    }
}

/// A frame's kind in the JSON: python, native, kernel, marker, task or interpreter.
fn frame_kind(s: &Symbol) -> &'static str {
    match s.kind() {
        pyperf_format::FrameKind::Python => "python",
        pyperf_format::FrameKind::Native | pyperf_format::FrameKind::Glue => "native",
        pyperf_format::FrameKind::Kernel => "kernel",
        pyperf_format::FrameKind::Marker => "marker",
        pyperf_format::FrameKind::Task => "task",
        pyperf_format::FrameKind::Interpreter => "interpreter",
    }
}

fn syscall_name(n: i64) -> String {
    pyperf_report::syscalls::name(n as i32, std::env::consts::ARCH).unwrap_or_else(|| format!("syscall {n}"))
}

/// How a thread's `native_missing` starts when its native frames could not be read for want of permission.
const NATIVE_DENIED: &str = "permission denied";

/// Runs `pyperf dump`.
pub fn dump(args: &DumpArgs) -> Result<std::process::ExitCode> {
    if args.kernel && !std::path::Path::new(&format!("/proc/{}/stack", args.pid)).exists() {
        anyhow::bail!(
            "--kernel: this kernel has no /proc/PID/task/TID/stack (CONFIG_STACKTRACE); dump without --kernel"
        );
    }
    let pid = process_of(args.pid)?;
    let threads = threads(pid, args.kernel, args.native)?;
    // Said once on stderr too, with how many threads it cost.
    let denied =
        threads.iter().filter(|t| t.native_missing.as_deref().is_some_and(|m| m.starts_with(NATIVE_DENIED))).count();
    if denied > 0 {
        crate::say!(
            "pyperf: warning: --native: native frames of {denied} threads not read: process {pid} is another user's \
             and reading its memory and registers needs root, or CAP_DAC_READ_SEARCH too"
        );
    }
    let denied = threads.iter().filter(|t| t.kernel_missing.as_deref() == Some(KERNEL_DENIED)).count();
    if denied > 0 {
        crate::say!(
            "pyperf: warning: --kernel: kernel frames of {denied} threads not read: /proc/PID/task/TID/stack needs \
             root or CAP_SYS_ADMIN"
        );
    }
    let tasks = if args.tasks {
        let p = crate::python::inspect(pid).map_err(|e| anyhow::anyhow!("--async: {e}"))?;
        Some(crate::tasks::tree(&p).map_err(|why| anyhow::anyhow!("--async: process {pid}: {why}"))?)
    } else {
        None
    };
    if args.json {
        let list: Vec<serde_json::Value> = threads
            .iter()
            .map(|t| {
                let (frames, error) = match &t.frames {
                    Ok(f) => (
                        serde_json::Value::Array(
                            f.iter()
                                .rev()
                                .map(|s| {
                                    serde_json::json!({
                                        "function": pyperf_report::names::function_name(s),
                                        "file": s.file,
                                        "line": s.line,
                                        "kind": frame_kind(s),
                                    })
                                })
                                .collect(),
                        ),
                        serde_json::Value::Null,
                    ),
                    Err(e) => (serde_json::Value::Null, serde_json::Value::String(e.clone())),
                };
                let frames = match frames {
                    serde_json::Value::Array(mut f) if !t.kernel.is_empty() => {
                        let mut all: Vec<serde_json::Value> = t
                            .kernel
                            .iter()
                            .map(|k| serde_json::json!({ "function": k, "file": "[kernel.kallsyms]", "line": 0, "kind": "kernel" }))
                            .collect();
                        all.append(&mut f);
                        serde_json::Value::Array(all)
                    }
                    other => other,
                };
                serde_json::json!({
                    "tid": t.tid,
                    "name": t.python_name,
                    "os_name": t.comm,
                    "state": state_key(t),
                    "syscall": t.syscall.map(syscall_name),
                    "gil": gil_key(t),
                    "frames": frames,
                    "error": error,
                    "native_missing": t.native_missing,
                    "kernel_missing": t.kernel_missing,
                })
            })
            .collect();
        let mut doc = serde_json::json!({ "pid": pid, "threads": list });
        if let Some(tasks) = &tasks {
            doc["tasks"] = serde_json::Value::Array(tasks.iter().map(task_json).collect());
        }
        let mut text = serde_json::to_string_pretty(&doc)?;
        text.push('\n');
        return write_out(&text);
    }
    let mut out = String::new();
    for t in &threads {
        let name = t.python_name.clone().unwrap_or_else(|| t.comm.clone());
        let state = match (state_key(t), t.syscall) {
            ("waiting", Some(n)) => format!("waiting in {}", syscall_name(n)),
            ("disk", _) => "in uninterruptible sleep".to_string(),
            (k, _) => k.to_string(),
        };
        let gil = match gil_key(t) {
            "holds" => "holds the GIL",
            "waiting" => "waiting for the GIL",
            "held-by-other" => "GIL held by another thread",
            "free" => "GIL free",
            _ => "GIL state unknown",
        };
        out.push_str(&format!("Thread {} \"{}\" ({state}; {gil})\n", t.tid, pyperf_report::names::escape_text(&name)));
        for k in &t.kernel {
            out.push_str(&format!(
                "    {}{}\n",
                pyperf_report::names::escape_text(k),
                pyperf_report::names::KERNEL_SUFFIX
            ));
        }
        if let Some(why) = &t.kernel_missing {
            out.push_str(&format!("    [kernel frames not read: {why}]\n"));
        }
        if let Some(why) = &t.native_missing {
            out.push_str(&format!("    [native frames not read: {why}]\n"));
        }
        match &t.frames {
            Ok(f) if f.is_empty() => out.push_str("    (no Python frames)\n"),
            Ok(f) => {
                for s in f.iter().rev() {
                    let shown = pyperf_report::names::frame_name(s, true);
                    out.push_str(&format!("    {}\n", pyperf_report::names::escape_text(&shown)));
                }
            }
            Err(e) => out.push_str(&format!("    [stack not read: {e}]\n")),
        }
    }
    if let Some(tasks) = &tasks {
        out.push_str(&task_tree_text(tasks));
    }
    write_out(&out)
}

/// A task's id as shown: its address.
fn task_id(addr: u64) -> String {
    format!("{addr:#x}")
}

fn task_json(t: &crate::tasks::TreeTask) -> serde_json::Value {
    serde_json::json!({
        "id": task_id(t.addr),
        "name": t.name,
        "thread": (t.ns_tid != 0).then_some(t.ns_tid),
        "state": if t.running { "running" } else { "suspended" },
        "frames": t.frames.iter().rev().map(|s| serde_json::json!({
            "function": pyperf_report::names::function_name(s),
            "file": s.file,
            "line": s.line,
        })).collect::<Vec<_>>(),
        "awaited_by": t.awaited_by.iter().map(|&a| task_id(a)).collect::<Vec<_>>(),
        "other_awaiters": t.other_awaiters,
        "cut": t.cut,
    })
}

/// The tasks as a tree, roots first: each task under the task awaiting it (the lowest id when several do: the others
/// are named), its coroutine chain root first below its name.
fn task_tree_text(tasks: &[crate::tasks::TreeTask]) -> String {
    use std::collections::BTreeMap;
    let esc = pyperf_report::names::escape_text;
    let known: std::collections::HashSet<u64> = tasks.iter().map(|t| t.addr).collect();
    let by_addr: HashMap<u64, &crate::tasks::TreeTask> = tasks.iter().map(|t| (t.addr, t)).collect();
    let mut children: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut roots = Vec::new();
    for t in tasks {
        match t.awaited_by.iter().copied().filter(|a| known.contains(a)).min() {
            Some(parent) => children.entry(parent).or_default().push(t.addr),
            None => roots.push(t.addr),
        }
    }
    let mut out = format!("Tasks ({}):\n", tasks.len());
    if tasks.is_empty() {
        out.push_str("    (no asyncio tasks)\n");
    }
    // Depth-first, iteratively: (task, depth); a cycle (tasks awaiting each other) ends at a task shown already.
    let mut shown = std::collections::HashSet::new();
    let mut todo: Vec<(u64, usize)> = roots.iter().rev().map(|&r| (r, 0)).collect();
    // Tasks only in cycles have no root: shown from their lowest id.
    let mut rest: Vec<u64> = tasks.iter().map(|t| t.addr).collect();
    rest.reverse();
    loop {
        let Some((addr, depth)) = todo.pop().or_else(|| rest.pop().filter(|a| !shown.contains(a)).map(|a| (a, 0)))
        else {
            if rest.is_empty() {
                break;
            }
            continue;
        };
        if !shown.insert(addr) {
            continue;
        }
        let Some(t) = by_addr.get(&addr) else { continue };
        let pad = "    ".repeat(depth + 1);
        let others: Vec<String> = t
            .awaited_by
            .iter()
            .filter(|&&a| Some(a) != t.awaited_by.iter().copied().filter(|a| known.contains(a)).min())
            .filter_map(|a| by_addr.get(a).map(|p| format!("{} {}", esc(&p.name), task_id(*a))))
            .collect();
        let mut line = format!("{pad}[task {}] {}", esc(&t.name), task_id(t.addr));
        if t.running {
            line.push_str(" (running)");
        }
        if !others.is_empty() {
            line.push_str(&format!(" (also awaited by {})", others.join(", ")));
        }
        if t.other_awaiters > 0 {
            line.push_str(&format!(" (+{} awaiting futures)", t.other_awaiters));
        }
        out.push_str(&line);
        out.push('\n');
        for s in &t.frames {
            out.push_str(&format!("{pad}    {}\n", esc(&pyperf_report::names::frame_name(s, true))));
        }
        if t.cut {
            out.push_str(&format!("{pad}    [coroutine chain cut]\n"));
        }
        for &c in children.get(&addr).into_iter().flatten().rev() {
            todo.push((c, depth + 1));
        }
    }
    out
}

/// Writes to standard output; a closed pipe is the caller's (`| head`: not an error, see main).
fn write_out(text: &str) -> Result<std::process::ExitCode> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}
