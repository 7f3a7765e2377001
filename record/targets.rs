//! Which processes are profiled: given pids (`-p`), every Python process (`-a`), or a command and its
//! descendants (`-- CMD`). Follows exits and pid reuse: a process is known by (pid, start time).

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::bpf::Sampler;
use crate::process::{self, InspectError};
use crate::recorder::Recorder;

/// A process identity that survives pid reuse: (pid, start time in clock ticks since boot).
type Key = (u32, u64);

enum Mode {
    Pids,
    All,
    Workload(Workload),
}

pub struct Targets {
    mode: Mode,
    /// Processes being sampled.
    live: HashMap<u32, u64>,
    /// Processes already looked at and found not to be profilable, with the executable they had then: an
    /// exec into Python makes them worth another look.
    rejected: HashMap<Key, String>,
    pending_pids: Vec<u32>,
    ever_profiled: bool,
}

pub struct Workload {
    child: Child,
    argv0: String,
    status: Option<std::process::ExitStatus>,
}

impl Workload {
    pub fn spawn(cmd: &[String]) -> Result<Workload> {
        let (prog, args) = cmd.split_first().context("no command given after --")?;
        let child = Command::new(prog).args(args).spawn().with_context(|| format!("cannot run {prog}"))?;
        Ok(Workload { child, argv0: prog.clone(), status: None })
    }
}

impl Targets {
    pub fn pids(pids: &[u32]) -> Result<Targets> {
        // Check them all now, so that a wrong pid fails before anything is written.
        for &pid in pids {
            process::inspect(pid).map_err(anyhow::Error::new)?;
        }
        Ok(Targets::new(Mode::Pids, pids.to_vec()))
    }

    pub fn all() -> Targets {
        Targets::new(Mode::All, Vec::new())
    }

    pub fn workload(w: Workload) -> Targets {
        let pid = w.child.id();
        Targets::new(Mode::Workload(w), vec![pid])
    }

    fn new(mode: Mode, pending_pids: Vec<u32>) -> Targets {
        Targets { mode, live: HashMap::new(), rejected: HashMap::new(), pending_pids, ever_profiled: false }
    }

    pub fn count(&self) -> usize {
        self.live.len()
    }

    /// Registers the initial targets.
    pub fn start(&mut self, sampler: &mut Sampler, rec: &mut Recorder) -> Result<()> {
        match self.mode {
            Mode::Pids => {
                for pid in std::mem::take(&mut self.pending_pids) {
                    let p = process::inspect(pid).map_err(anyhow::Error::new)?;
                    self.follow(&p, sampler, rec)?;
                }
            }
            Mode::All => self.rescan(sampler, rec)?,
            Mode::Workload(_) => {
                // Catch the interpreter as soon as the dynamic loader has mapped it, before the program's own
                // code runs: poll tightly for a moment, then fall back to the regular rescans.
                let until = Instant::now() + Duration::from_secs(2);
                while self.live.is_empty() && Instant::now() < until && !self.workload_exited() {
                    self.rescan(sampler, rec)?;
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        }
        Ok(())
    }

    fn follow(&mut self, p: &process::PythonProcess, sampler: &mut Sampler, rec: &mut Recorder) -> Result<()> {
        sampler.add_process(p).with_context(|| format!("cannot profile process {}", p.pid))?;
        rec.add_process(p)?;
        self.live.insert(p.pid, start_time(p.pid).unwrap_or(0));
        self.ever_profiled = true;
        Ok(())
    }

    /// Drops exited targets and, for `-a` and `-- CMD`, picks up new Python processes.
    pub fn rescan(&mut self, sampler: &mut Sampler, rec: &mut Recorder) -> Result<()> {
        let gone: Vec<u32> =
            self.live.iter().filter(|(&pid, &st)| start_time(pid) != Some(st)).map(|(&pid, _)| pid).collect();
        for pid in gone {
            self.live.remove(&pid);
            sampler.remove_process(pid);
            rec.remove_process(pid);
        }
        let candidates: Vec<u32> = match &self.mode {
            Mode::Pids => return Ok(()),
            Mode::All => all_pids(),
            Mode::Workload(w) => descendants(w.child.id()),
        };
        let me = std::process::id();
        for pid in candidates {
            if pid == me || self.live.contains_key(&pid) {
                continue;
            }
            let Some(st) = start_time(pid) else { continue };
            let exe =
                std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default();
            if self.rejected.get(&(pid, st)).is_some_and(|e| *e == exe) {
                continue;
            }
            match process::inspect(pid) {
                Ok(p) => {
                    if let Err(e) = self.follow(&p, sampler, rec) {
                        // A process that vanished while we set it up is not an error of the recording.
                        eprintln!("pyperf: warning: {e:#}");
                        self.rejected.insert((pid, st), exe);
                    }
                }
                Err(InspectError::NotPython(_) | InspectError::NoSuchProcess(_)) => {
                    // Right after exec the loader may not have mapped libpython yet: a workload's own process
                    // gets more looks; others are remembered until they exec something else.
                    if !matches!(&self.mode, Mode::Workload(w) if w.child.id() == pid && !self.ever_profiled) {
                        self.rejected.insert((pid, st), exe);
                    }
                }
                Err(e) => {
                    eprintln!("pyperf: warning: {e}; leaving it out");
                    self.rejected.insert((pid, st), exe);
                }
            }
        }
        Ok(())
    }

    fn workload_exited(&mut self) -> bool {
        match &mut self.mode {
            Mode::Workload(w) => {
                if w.status.is_none() {
                    w.status = w.child.try_wait().ok().flatten();
                }
                w.status.is_some()
            }
            _ => false,
        }
    }

    /// True when recording should end because there is nothing left to profile.
    pub fn all_exited(&mut self) -> bool {
        match self.mode {
            Mode::All => false,
            Mode::Pids => none_alive(&self.live),
            Mode::Workload(_) => self.workload_exited() && none_alive(&self.live),
        }
    }

    /// Ends the workload, if any, and gives pyperf's exit code: the workload's status, else success.
    pub fn finish(mut self) -> Result<ExitCode> {
        let ever = self.ever_profiled;
        let Mode::Workload(w) = &mut self.mode else { return Ok(ExitCode::SUCCESS) };
        let status = match w.status {
            Some(s) => s,
            None => {
                // Recording stopped (duration, Ctrl-C) before the command ended: end it as Ctrl-C would.
                // SAFETY: plain kill(2) on our own child.
                unsafe { libc::kill(w.child.id() as i32, libc::SIGINT) };
                w.child.wait().with_context(|| format!("waiting for {}", w.argv0))?
            }
        };
        if !ever {
            eprintln!("pyperf: warning: {} ran no Python process that pyperf could profile", w.argv0);
        }
        use std::os::unix::process::ExitStatusExt;
        let code = match (status.code(), status.signal()) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            _ => 1,
        };
        Ok(ExitCode::from(code.clamp(0, 255) as u8))
    }
}

/// Start time of a process (field 22 of /proc/PID/stat), None if it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm (field 2) may contain spaces and parentheses: fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// `root` and every live process descending from it.
fn descendants(root: u32) -> Vec<u32> {
    let mut tree: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(pp) = parent(pid) {
            tree.entry(pp).or_default().push(pid);
        }
    }
    let mut out = vec![root];
    let mut seen: HashSet<u32> = HashSet::from([root]);
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = tree.get(&out[i]) {
            for &k in kids {
                if seen.insert(k) {
                    out.push(k);
                }
            }
        }
        i += 1;
    }
    out
}

/// True when no followed process is alive any more.
fn none_alive(live: &HashMap<u32, u64>) -> bool {
    live.iter().all(|(&pid, &st)| start_time(pid) != Some(st))
}
