//! Which processes are profiled: given pids (`-p`), every Python process (`-a`), or a command and its
//! descendants (`-- CMD`). Follows exits, exec and pid reuse: a process image is known by its [`Identity`].
//!
//! Discovery only: [`Targets::scan`] looks at /proc and returns [`Event`]s (a Python process found, a followed
//! one gone); it never touches the sampler, the symbolizer or the output. The session applies the events and
//! tells [`Targets::failed`] about a process it could not set up.

pub mod procfs;
mod workload;

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::proc::Identity;
use crate::proc::{stat, Stat};
use crate::python::{self, InspectError, PythonProcess};
use procfs::{changed, identity, start_time, StatFiles};
pub use workload::{Ending, Workload, GRACE};

/// Looks at a process image found not to be Python before it is left alone (see [`Targets::scan`]).
const NOT_PYTHON_LOOKS: u32 = 2;

/// What discovery found.
#[derive(Debug)]
pub enum Event {
    /// A Python process to follow (from now on counted as followed; report a failure to set it up with
    /// [`Targets::failed`]).
    Found {
        /// The process, inspected.
        process: Box<PythonProcess>,
        /// Its PID namespace and cgroup.
        namespaces: procfs::Namespaces,
        /// Given by the user (`-p`) at the start: failing to set it up fails the recording.
        required: bool,
    },
    /// A followed process is gone: it exited, or exec'd into another program (a later [`Event::Found`] may
    /// name the same pid again). Samples still queued for it should be taken before it is forgotten.
    Gone {
        /// The process.
        pid: u32,
        /// It exec'd (same process, new image) rather than exited. The session treats both alike (the new image, if
        /// it is Python, comes as an [`Event::Found`] of the same pid); for callers that say which happened.
        exec: bool,
    },
}

/// Why recording stopped: how a command pyperf started is ended, and pyperf's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The targets exited: pyperf exits with the command's status.
    Exited,
    /// `--duration` was reached: the command is stopped (SIGINT, SIGTERM, SIGKILL), pyperf exits 0.
    Duration,
    /// SIGINT or SIGTERM to pyperf: the command is stopped likewise, pyperf exits with its status.
    Signal,
    /// Recording failed (a full disk): the command runs on to its end, pyperf waits for it and exits 1.
    Failed,
}

enum Mode {
    /// The pids given and their start times: the same processes are followed through exec, never a later
    /// process that reuses the pid.
    Pids(Vec<(u32, u64)>),
    /// Every Python process, or those of one cgroup (its directory under /sys/fs/cgroup) and the cgroups below.
    All(Option<PathBuf>),
    Workload(Workload),
}

/// The set of followed processes and how to find more.
pub struct Targets {
    mode: Mode,
    /// Processes being sampled, with the image they were set up for.
    live: HashMap<u32, Identity>,
    /// Process images looked at and found not to be profilable, with the number of looks; an exec or a reused
    /// pid makes a new identity, worth new looks.
    rejected: HashMap<(u32, Identity), u32>,
    pending_pids: Vec<u32>,
    /// The workload's image and a digest of its memory map ([`procfs::maps_digest`]) when last found not to run
    /// Python.
    workload_not_python: Option<(Identity, u64)>,
    /// Processes handed out in [`Event::Found`] (those set up are this minus `setup_failed`).
    found: u64,
    /// Python processes that could not be set up (BPF map of processes full, vanished meanwhile, memory not
    /// readable): trailer counter `targets_setup_failed`.
    pub setup_failed: u64,
    /// Processes left out after a look (unsupported Python version, permission denied): `targets_unsupported`.
    pub unsupported: u64,
    /// Processes left because they ended or exec'd while followed.
    pub ended: u64,
    finished: bool,
    /// The last scan's reads of /proc/PID/stat, for the `all_exited` after it (taken by it).
    fresh: HashMap<u32, Option<Stat>>,
    stat_files: StatFiles,
}

impl Targets {
    /// The processes `pids`, through exec. Checks them all now, so that a wrong pid fails before anything is
    /// written.
    pub fn pids(pids: &[u32]) -> Result<Targets> {
        let mut given = Vec::new();
        for &asked in pids {
            let pid = process_of(asked)?;
            python::inspect(pid).map_err(anyhow::Error::new)?;
            if !given.iter().any(|g: &(u32, u64)| g.0 == pid) {
                given.push((pid, start_time(pid).ok_or(InspectError::NoSuchProcess(pid))?));
            }
        }
        let pending = given.iter().map(|g| g.0).collect();
        Ok(Targets::new(Mode::Pids(given), pending))
    }

    /// Every Python process, including ones that start later.
    pub fn all() -> Targets {
        Targets::new(Mode::All(None), Vec::new())
    }

    /// The Python processes of cgroup `path` (as /proc/PID/cgroup shows it) and of the cgroups below it,
    /// including ones that start later.
    pub fn cgroup(path: &str) -> Result<Targets> {
        let dir = procfs::cgroup_dir(path).ok_or_else(|| {
            anyhow::anyhow!(
                "no cgroup {path} under {}: give the path /proc/PID/cgroup shows for a process of it \
                 (e.g. /system.slice/docker-ID.scope)",
                procfs::CGROUP_ROOT
            )
        })?;
        Ok(Targets::new(Mode::All(Some(dir)), Vec::new()))
    }

    /// The running processes a command line names: `-G CGROUP`, else `-a`, else `-p PID...`; None when it names a
    /// command to start instead (`record` and `top` alike).
    pub fn chosen(cgroup: Option<&str>, all: bool, pids: &[u32]) -> Result<Option<Targets>> {
        Ok(if let Some(c) = cgroup {
            Some(Targets::cgroup(c)?)
        } else if all {
            Some(Targets::all())
        } else if !pids.is_empty() {
            Some(Targets::pids(pids)?)
        } else {
            None
        })
    }

    /// The command `w` started and its descendants.
    pub fn workload(w: Workload) -> Targets {
        let pid = w.pid();
        Targets::new(Mode::Workload(w), vec![pid])
    }

    fn new(mode: Mode, pending_pids: Vec<u32>) -> Targets {
        Targets {
            mode,
            live: HashMap::new(),
            rejected: HashMap::new(),
            pending_pids,
            workload_not_python: None,
            found: 0,
            setup_failed: 0,
            unsupported: 0,
            ended: 0,
            finished: false,
            fresh: HashMap::new(),
            stat_files: StatFiles::default(),
        }
    }

    /// Some process was found and set up.
    fn ever_profiled(&self) -> bool {
        self.found > self.setup_failed
    }

    /// Number of processes followed now.
    pub fn count(&self) -> usize {
        self.live.len()
    }

    /// pyperf started a command (`-- CMD`).
    /// Pidfds of the processes whose exit can end the recording: the command pyperf started, or the processes
    /// given with `-p` (see [`Workload::pidfd`]; those that cannot be opened are left to the periodic look).
    pub fn exit_pidfds(&self) -> Vec<std::os::fd::OwnedFd> {
        match &self.mode {
            Mode::Workload(w) => w.pidfd().into_iter().collect(),
            Mode::Pids(given) => given.iter().filter_map(|&(pid, _)| workload::pidfd(pid)).collect(),
            Mode::All(_) => Vec::new(),
        }
    }

    /// The processes are given (`-p`): their threads need perf events of their own (see
    /// `Sampler::follow_threads`); a command's are inherited from the command, `-a` and `-G` sample every CPU.
    pub fn per_thread_events(&self) -> bool {
        matches!(self.mode, Mode::Pids(_))
    }

    /// A command pyperf started is the target.
    pub fn has_workload(&self) -> bool {
        matches!(self.mode, Mode::Workload(_))
    }

    /// A command pyperf started runs, and no Python process is followed: the caller should scan often (it may
    /// become Python any moment, and should be caught before its own code runs).
    pub fn waiting_for_python(&mut self) -> bool {
        match &mut self.mode {
            Mode::Workload(w) => self.live.is_empty() && !w.exited(),
            _ => false,
        }
    }

    /// What the trailer counts about the targets.
    pub fn counters(&self) -> [(&'static str, u64); 3] {
        [
            ("targets_setup_failed", self.setup_failed),
            ("targets_unsupported", self.unsupported),
            ("targets_ended", self.ended),
        ]
    }

    /// The initial targets. For `-p`, every given process must be a Python process now (an error otherwise);
    /// the other modes scan.
    pub fn start(&mut self) -> Result<Vec<Event>> {
        if !matches!(self.mode, Mode::Pids(_)) {
            return Ok(self.scan());
        }
        let mut events = Vec::new();
        for pid in std::mem::take(&mut self.pending_pids) {
            let p = python::inspect(pid).map_err(anyhow::Error::new)?;
            let id = identity(pid).ok_or(InspectError::NoSuchProcess(pid))?;
            events.push(self.found(p, id, true));
        }
        Ok(events)
    }

    fn found(&mut self, p: PythonProcess, id: Identity, required: bool) -> Event {
        self.live.insert(p.pid, id);
        self.found += 1;
        let namespaces =
            procfs::namespaces(p.pid).unwrap_or(procfs::Namespaces { ns_pid: p.pid, ..procfs::Namespaces::default() });
        Event::Found { process: Box::new(p), namespaces, required }
    }

    /// The session could not set up the process of an [`Event::Found`] (`why` is shown as a warning: a process
    /// that vanished while it was set up is not an error of the recording): it is not followed, it is counted,
    /// and it is not looked at again until it execs.
    pub fn failed(&mut self, pid: u32, why: &anyhow::Error) {
        if let Some(id) = self.live.remove(&pid) {
            self.rejected.insert((pid, id), NOT_PYTHON_LOOKS);
        }
        crate::say!("pyperf: warning: {why:#}");
        self.setup_failed += 1;
    }

    /// Followed processes that exited or exec'd, then new Python processes: for `-a` any, for `-- CMD` the
    /// command's descendants, for `-p` the given processes again after an exec.
    pub fn scan(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        // One read of a followed (or given) process's /proc/PID/stat per scan, shared by the checks below and by the
        // `all_exited` that follows a scan: three reads each were a tenth of the recorder's CPU with `-p`.
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.clear();
        let files = &mut self.stat_files;
        let mut stat_now = |pid: u32| *fresh.entry(pid).or_insert_with(|| files.stat(pid));
        for pid in changed(&self.live, |pid| stat_now(pid).map(|s| s.identity)) {
            let old = self.live.remove(&pid);
            self.ended += 1;
            // Same start time, still running: the same process with a new image.
            let exec =
                old.zip(stat_now(pid)).is_some_and(|(o, s)| s.running() && s.identity.start_time == o.start_time);
            events.push(Event::Gone { pid, exec });
        }
        let candidates: Vec<u32> = match &self.mode {
            Mode::Pids(given) => given
                .iter()
                .filter(|&&(pid, st)| stat_now(pid).map(|s| s.identity.start_time) == Some(st))
                .map(|&(pid, _)| pid)
                .collect(),
            Mode::All(None) => procfs::all_pids(),
            Mode::All(Some(dir)) => procfs::cgroup_pids(dir),
            Mode::Workload(w) => procfs::descendants(w.pid()),
        };
        self.fresh = fresh;
        let given: &[(u32, u64)] = if let Mode::Pids(g) = &self.mode { g } else { &[] };
        let live = &self.live;
        self.stat_files.retain(|pid| live.contains_key(&pid) || given.iter().any(|g| g.0 == pid));
        if matches!(self.mode, Mode::All(_)) {
            // Forget rejected processes that are gone: over a long recording on a busy host they would add up.
            let present: HashSet<u32> = candidates.iter().copied().collect();
            self.rejected.retain(|(pid, _), _| present.contains(pid));
        }
        let me = std::process::id();
        for pid in candidates {
            if pid == me || self.live.contains_key(&pid) {
                continue;
            }
            let Some(id) = identity(pid) else { continue };
            let looks = self.rejected.get(&(pid, id)).copied().unwrap_or(0);
            if looks >= NOT_PYTHON_LOOKS {
                continue;
            }
            // The command's own process is looked at until it runs Python; an unchanged image and memory map would
            // get the same answer, without reading its binaries again.
            let own = matches!(&self.mode, Mode::Workload(w) if w.pid() == pid && !self.ever_profiled());
            let digest = if own { procfs::maps_digest(pid).map(|d| (id, d)) } else { None };
            if digest.is_some() && digest == self.workload_not_python {
                continue;
            }
            match python::inspect(pid) {
                // Inspected the image we identified? An exec in between would leave a stale identity.
                Ok(p) if identity(pid) == Some(id) => events.push(self.found(p, id, false)),
                Ok(_) => {} // changed under us: next scan
                Err(InspectError::NotPython(_) | InspectError::NoSuchProcess(_)) => {
                    // Right after exec the dynamic loader may not have mapped libpython yet: every image gets a
                    // second look a scan later (a workload's own process, until it is first profiled, as many
                    // as it needs); then it is left alone until it execs something else.
                    if own {
                        self.workload_not_python = digest;
                    } else {
                        self.rejected.insert((pid, id), looks + 1);
                    }
                }
                Err(e) => {
                    crate::say!("pyperf: warning: {e}; leaving it out");
                    self.unsupported += 1;
                    self.rejected.insert((pid, id), NOT_PYTHON_LOOKS);
                }
            }
        }
        events
    }

    /// The workload (if any) has exited.
    pub fn workload_exited(&mut self) -> bool {
        match &mut self.mode {
            Mode::Workload(w) => w.exited(),
            _ => false,
        }
    }

    /// True when recording should end because there is nothing left to profile.
    /// Right after [`Targets::scan`], it uses the scan's reads of /proc; else (a pidfd said a process exited) it
    /// reads again. A process that exits in between is seen at the next look: an exit is never undone.
    pub fn all_exited(&mut self) -> bool {
        let mut fresh = std::mem::take(&mut self.fresh);
        if matches!(self.mode, Mode::Workload(_)) && !self.workload_exited() {
            return false;
        }
        let files = &mut self.stat_files;
        let mut stat_now = |pid: u32| *fresh.entry(pid).or_insert_with(|| files.stat(pid));
        match &self.mode {
            Mode::All(_) => false,
            // The given processes, through exec: recording ends when they have all ended.
            Mode::Pids(given) => given
                .iter()
                .all(|&(pid, st)| !stat_now(pid).is_some_and(|s| s.identity.start_time == st && s.running())),
            // (The command itself has exited, above.)
            Mode::Workload(_) => changed(&self.live, |pid| stat_now(pid).map(|s| s.identity)).len() == self.live.len(),
        }
    }

    /// The processes followed now.
    pub fn followed(&self) -> impl Iterator<Item = u32> + '_ {
        self.live.keys().copied()
    }

    /// Ends the workload, if any, as `stop` asks ([`Stop`]), and gives pyperf's exit code. `signals_seen`: the
    /// SIGINT / SIGTERM to pyperf already acted on ([`crate::signals::received`] when recording stopped); each
    /// later one hurries the end of the command.
    pub fn finish(mut self, stop: Stop, signals_seen: usize) -> Result<ExitCode> {
        self.finished = true;
        let ever = self.ever_profiled();
        let Mode::Workload(w) = &mut self.mode else {
            return Ok(if stop == Stop::Failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        };
        let how = match stop {
            Stop::Failed => {
                if !w.exited() {
                    crate::say!("pyperf: waiting for {} to end (Ctrl-C stops it)", w.argv0());
                }
                Ending::Wait
            }
            // The terminal's Ctrl-C went to the command too: no second SIGINT from pyperf.
            Stop::Signal => Ending::Stop { sigint: !crate::signals::last_from_terminal() },
            Stop::Exited | Stop::Duration => Ending::Stop { sigint: true },
        };
        let ended = w.end(how, signals_seen).with_context(|| format!("waiting for {}", w.argv0()))?;
        if let Some(sig) = ended.signal {
            let why = match stop {
                Stop::Duration => "--duration reached",
                Stop::Failed => "pyperf was interrupted",
                Stop::Exited | Stop::Signal => "recording interrupted",
            };
            let how = match (sig, ended.hurried) {
                ("SIGKILL", true) => "killed the command with SIGKILL (pyperf got another SIGINT/SIGTERM)".to_string(),
                ("SIGKILL", false) => format!(
                    "killed the command with SIGKILL (SIGINT and SIGTERM did not end it within {} s)",
                    2 * GRACE.as_secs()
                ),
                ("SIGTERM", _) => {
                    format!("stopped the command with SIGTERM (it did not exit within {} s of SIGINT)", GRACE.as_secs())
                }
                (sig, _) => format!("stopped the command with {sig}"),
            };
            crate::say!("pyperf: {why}; {how}");
        }
        if !ever {
            crate::say!("pyperf: warning: {} ran no Python process that pyperf could profile", w.argv0());
        }
        use std::os::unix::process::ExitStatusExt;
        let code = match (ended.status.code(), ended.status.signal()) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            _ => 1,
        };
        Ok(match stop {
            Stop::Failed => ExitCode::FAILURE,
            // The duration ended the recording, and pyperf the command: a success, as for perf and py-spy.
            Stop::Duration if ended.signal.is_some() => ExitCode::SUCCESS,
            _ => ExitCode::from(code.clamp(0, 255) as u8),
        })
    }
}

/// The process `-p ID` means: itself, or the process a thread id belongs to (said on stderr); a kernel thread, a
/// zombie or no process at all are refused, each with its own reason.
fn process_of(id: u32) -> Result<u32> {
    let Some(st) = stat(id) else { return Err(InspectError::NoSuchProcess(id).into()) };
    if st.kernel_thread() {
        bail!("process {id} is a kernel thread: it runs no Python");
    }
    if !st.running() {
        bail!("process {id} has exited (a zombie its parent has not reaped yet)");
    }
    match crate::proc::tgid(id) {
        Some(tgid) if tgid != id => {
            crate::say!("pyperf: {id} is a thread of process {tgid}: profiling the process");
            Ok(tgid)
        }
        _ => Ok(id),
    }
}

impl Drop for Targets {
    /// pyperf failed (an error before [`Targets::finish`]): the command it started must not live on unwatched.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Mode::Workload(w) = &mut self.mode {
            w.kill_if_running();
        }
    }
}
