//! From raw BPF samples to the recording: symbolizes frames, interns stacks, writes chunks, keeps counts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use pyperf_format::{
    GilState, Header, Process, PthreadIdMatch, SampleRecord, StackStatus, Stats, ThreadStateMatch, Writer,
};

use crate::bpf::{Rate, RawSample, SampleEvent, Sampler};
use crate::output::Output;
use crate::process::PythonProcess;
use crate::symbolize::{self, CodeReader, FirstLocal, ProcMem, Resolution};

pub fn header(args: &crate::cli::RecordArgs, event: SampleEvent, rate: Rate) -> Header {
    let uts = uname();
    Header {
        pyperf_version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: uts.0,
        kernel_release: uts.1,
        arch: uts.2,
        start_time_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        event: match event {
            SampleEvent::CpuClock => "cpu-clock",
            SampleEvent::Cycles => "cycles",
        }
        .to_string(),
        rate: match rate {
            Rate::Frequency(f) => pyperf_format::Rate::Frequency(f),
            Rate::Period(p) => pyperf_format::Rate::Period(p),
        },
        command_line: std::env::args().collect(),
        workload: args.command.clone(),
    }
}

/// (nodename, release, machine)
fn uname() -> (String, String, String) {
    // SAFETY: uname fills the struct it is given; a zeroed utsname is a valid argument.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (s(&u.nodename), s(&u.release), s(&u.machine))
}

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Target {
    code: CodeReader<ProcMem>,
}

/// `frame_ids` value of a frame the interpreter does not show (see `symbolize::Resolution::Hidden`).
const HIDDEN: u32 = u32::MAX;

/// What BPF read of the frame's first argument, for the <= 3.10 self/cls heuristic (0 on 3.11+).
fn first_local(f: &crate::bpf::RawFrame) -> FirstLocal {
    FirstLocal { object: f.first_local, type_addr: f.first_local_type }
}

pub struct Recorder {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
    start_ns: u64,
    targets: HashMap<u32, Target>,
    /// (pid, code, check, instr, class) -> symbol id, or [`HIDDEN`]: the per-frame cost after the first sight
    /// is this lookup (and on <= 3.10, for frames with an argument, the class lookup of `CodeReader::class_key`).
    frame_ids: HashMap<(u32, u64, u32, u32, u64), u32>,
    stack: Vec<u32>,
    lost_symbols: u64,
    truncated: u64,
    io_error: Option<std::io::Error>,
}

impl Recorder {
    pub fn new(output: Output, header: &Header) -> Result<Recorder> {
        let path = output.path().to_path_buf();
        let writer = Writer::new(BufWriter::with_capacity(1 << 16, output.into_file()), header)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Recorder {
            writer,
            path,
            start_ns: monotonic_ns(),
            targets: HashMap::new(),
            frame_ids: HashMap::new(),
            stack: Vec::with_capacity(1024),
            lost_symbols: 0,
            truncated: 0,
            io_error: None,
        })
    }

    /// Starts following a process: records it in the file and opens its memory for symbolization. `seen_ns`
    /// (CLOCK_MONOTONIC, taken before the sampler was told about the process) becomes its `first_seen_ns`: samples
    /// of a reused pid before it belong to the earlier process.
    pub fn add_process(&mut self, p: &PythonProcess, seen_ns: u64) -> Result<()> {
        // The process's own layout: from the table, or built from the interpreter's _Py_DebugOffsets (3.13+).
        let layout = p.layout;
        let mem = ProcMem::open(p.pid).with_context(|| format!("cannot read the memory of process {}", p.pid))?;
        self.writer
            .add_process(&Process {
                pid: p.pid,
                command: p.cmdline.clone(),
                python_version: format!("{}.{}.{}", p.version.0, p.version.1, p.version.2),
                interpreter_path: p.interpreter.display().to_string(),
                build_id: p.build_id.clone().unwrap_or_default(),
                first_seen_ns: seen_ns.saturating_sub(self.start_ns),
            })
            .context("writing the recording")?;
        self.frame_ids.retain(|k, _| k.0 != p.pid);
        self.targets.insert(p.pid, Target { code: CodeReader::new(mem, layout, p.addrs.code_type) });
        Ok(())
    }

    /// Stops symbolizing for a process that exited (its pid may be reused).
    pub fn remove_process(&mut self, pid: u32) {
        self.targets.remove(&pid);
        self.frame_ids.retain(|k, _| k.0 != pid);
    }

    pub fn on_sample(&mut self, s: &RawSample<'_>) {
        if self.io_error.is_some() {
            return;
        }
        let status = StackStatus::from_u8(s.status);
        if status == StackStatus::Truncated {
            self.truncated += 1;
        }
        self.stack.clear();
        // Once per sample, not per frame.
        let mut target = self.targets.get_mut(&s.pid);
        // BPF walks leaf to root; the file wants root first.
        for f in s.frames.iter().rev() {
            let first = first_local(f);
            let class = match target.as_deref_mut() {
                Some(t) if first.type_addr != 0 => t.code.class_key(f.code, f.check, first),
                _ => 0,
            };
            let key = (s.pid, f.code, f.check, f.instr, class);
            let id = match self.frame_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let resolved = match target.as_deref_mut() {
                        Some(t) => t.code.resolve(f.code, f.instr, f.check, first),
                        None => Resolution::Lost,
                    };
                    match resolved {
                        Resolution::Frame(sym) => {
                            let id = self.writer.intern_symbol(&sym);
                            self.frame_ids.insert(key, id);
                            id
                        }
                        Resolution::Hidden => {
                            self.frame_ids.insert(key, HIDDEN);
                            HIDDEN
                        }
                        // An unresolved frame may resolve later (a transient read failure): don't cache it.
                        Resolution::Lost => {
                            self.lost_symbols += 1;
                            self.writer.intern_symbol(&symbolize::unresolved(f.code))
                        }
                    }
                }
            };
            if id != HIDDEN {
                self.stack.push(id);
            }
        }
        let stack = self.writer.intern_stack(&self.stack);
        let comm_len = s.comm.iter().position(|&c| c == 0).unwrap_or(s.comm.len());
        let comm = String::from_utf8_lossy(&s.comm[..comm_len]);
        let rec = SampleRecord {
            time_ns: s.time_ns.saturating_sub(self.start_ns),
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            comm: &comm,
            thread_state: ThreadStateMatch::from_u8(s.thread_state),
            gil: GilState::from_u8(s.gil),
            pthread_id: PthreadIdMatch::from_u8(s.pthread_id),
            status,
            stack,
        };
        if let Err(e) = self.writer.push_sample(&rec) {
            self.io_error = Some(std::io::Error::other(e));
        }
    }

    pub fn flush(&mut self) -> Result<()> {
        if let Some(e) = self.io_error.take() {
            return Err(e).with_context(|| format!("cannot write {}", self.path.display()));
        }
        self.writer.flush().with_context(|| format!("cannot write {}", self.path.display()))
    }

    pub fn status(&self, elapsed: Duration, sampler: &Sampler, targets: usize) -> String {
        let c = sampler.counters();
        format!(
            "[pyperf] {:.1} s  {} samples  {} lost  {} target{}",
            elapsed.as_secs_f64(),
            self.writer.samples_written(),
            c.lost,
            targets,
            if targets == 1 { "" } else { "s" }
        )
    }

    /// Writes the trailer (with `more` counters, e.g. the targets' own); returns the summary to show.
    pub fn finish(mut self, elapsed: Duration, sampler: &Sampler, more: &[(&str, u64)]) -> Result<String> {
        self.flush()?;
        let c = sampler.counters();
        let samples = self.writer.samples_written();
        let stats = Stats {
            samples,
            lost_samples: c.lost,
            truncated_stacks: self.truncated,
            lost_symbols: self.lost_symbols,
            // Failed reads of target memory. Not plus the samples whose walk ended in an error: such a walk
            // failed on a read that is counted here already (the report's stack-status table shows those samples).
            errors: c.read_errors,
            duration_ns: elapsed.as_nanos() as u64,
            counters: c.named().into_iter().chain(more.iter().map(|&(k, v)| (k.to_string(), v))).collect(),
        };
        let symbols = self.writer.symbol_count();
        let nodes = self.writer.stack_node_count();
        let out = self.writer.finish(&stats).with_context(|| format!("cannot write {}", self.path.display()))?;
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        file.sync_all().with_context(|| format!("cannot write {}", self.path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let pct = |n: u64| if samples + c.lost == 0 { 0.0 } else { 100.0 * n as f64 / (samples + c.lost) as f64 };
        let mut s = String::new();
        let _ = write!(
            s,
            "pyperf: {:.1} s, {} samples, {} lost ({:.2}%), {} truncated stacks ({:.2}%), {} lost symbols, {} errors\n\
             pyperf: wrote {} ({}, {} symbols, {} stack nodes, {:.1} bytes/sample)",
            elapsed.as_secs_f64(),
            samples,
            c.lost,
            pct(c.lost),
            self.truncated,
            pct(self.truncated),
            self.lost_symbols,
            stats.errors,
            self.path.display(),
            human_size(size),
            symbols,
            nodes,
            if samples == 0 { 0.0 } else { size as f64 / samples as f64 },
        );
        Ok(s)
    }
}

fn human_size(n: u64) -> String {
    match n {
        n if n < 10 * 1024 => format!("{n} B"),
        n if n < 10 * 1024 * 1024 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}
