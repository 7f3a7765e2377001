//! Shared by the end-to-end tests: running pyperf and the workloads, reading what it recorded.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use pyperf_format::{samples, scan, GilState, Header, PthreadIdMatch, Reader, StackStatus, Tables, ThreadStateMatch};

/// End-to-end tests burn CPU and measure shares: run them one at a time on this 2-CPU machine.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn pyperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pyperf"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn workload(name: &str) -> PathBuf {
    repo().join("testdata/workloads").join(name)
}

/// pyenv's root: $PYENV_ROOT, else what `pyenv root` says, else /root/.pyenv (where CI installs it).
pub fn pyenv_root() -> PathBuf {
    if let Some(r) = std::env::var_os("PYENV_ROOT").filter(|r| !r.is_empty()) {
        return PathBuf::from(r);
    }
    if let Ok(out) = Command::new("pyenv").arg("root").output() {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !s.is_empty() {
            return PathBuf::from(s);
        }
    }
    PathBuf::from("/root/.pyenv")
}

/// One interpreter of testdata/interpreters.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// `3.11.7`, `debian-3.11`.
    pub name: String,
    /// `(major, minor)`.
    pub version: (u8, u8),
    /// The `python` executable.
    pub python: PathBuf,
    /// The shared libpython with debug info (pyenv installs only).
    pub libpython: Option<PathBuf>,
}

/// Every interpreter the tests use (testdata/interpreters, the list scripts/setup checks), oldest first.
pub fn interpreters() -> Vec<Interpreter> {
    let list = std::fs::read_to_string(repo().join("testdata/interpreters")).expect("testdata/interpreters");
    let mut out = Vec::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 3, "testdata/interpreters: bad line {line:?}");
        let (major, minor) = f[1].split_once('.').expect("version major.minor");
        let version: (u8, u8) = (major.parse().expect("major"), minor.parse().expect("minor"));
        let (python, libpython) = if f[2] == "pyenv" {
            let dir = pyenv_root().join("versions").join(f[0]);
            let exe = if version.0 == 2 { "python2".to_string() } else { format!("python{}.{}", version.0, version.1) };
            // libpython3.7m.so.1.0 before 3.8 (the ABI flag), libpython3.8.so.1.0 after.
            let prefix = format!("libpython{}.{}", version.0, version.1);
            let lib = std::fs::read_dir(dir.join("lib"))
                .ok()
                .and_then(|rd| {
                    rd.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                        p.file_name()
                            .and_then(|f| f.to_str())
                            .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".so.1.0"))
                    })
                })
                .unwrap_or_else(|| dir.join("lib").join(format!("{prefix}.so.1.0")));
            (dir.join("bin").join(exe), Some(lib))
        } else {
            (PathBuf::from(f[2]), None)
        };
        out.push(Interpreter { name: f[0].to_string(), version, python, libpython });
    }
    out
}

/// An interpreter the tests must have: a missing one fails the test that needs it, loudly.
pub fn interpreter(name: &str) -> PathBuf {
    let all = interpreters();
    let i = all.iter().find(|i| i.name == name).unwrap_or_else(|| panic!("{name} is not in testdata/interpreters"));
    let path = i.python.clone();
    assert!(path.exists(), "interpreter {name} missing at {} (scripts/setup checks for it)", path.display());
    path
}

/// Where a test writes its recording.
pub fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    (dir, path)
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run pyperf");
    eprintln!("status: {:?}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// The heavy share of `split.py`'s Runner.run phase as the workload itself timed it: the `cpu heavy=H light=L`
/// line it printed (thread CPU time).
pub fn split_truth(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().find(|l| l.starts_with("cpu heavy=")).unwrap_or_else(|| panic!("no cpu line in {text:?}"));
    let num = |key: &str| -> f64 {
        let v = line.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_else(|| panic!("{line:?}"));
        v.parse().unwrap_or_else(|_| panic!("{line:?}"))
    };
    let (h, l) = (num("heavy="), num("light="));
    assert!(h + l > 0.0, "{line:?}");
    h / (h + l)
}

/// Checks a sampled share against the workload's own timing: within four binomial standard errors (at least
/// 3 points), so a biased sampler fails and sampling noise does not. The workload should do 3:1 work; a truth far
/// from 0.75 means the workload itself is broken.
pub fn assert_share(what: &str, hits: usize, of: usize, truth: f64) {
    assert!((0.6..=0.9).contains(&truth), "{what}: the workload timed a {truth:.3} share; it should be near 0.75");
    assert!(of >= 100, "{what}: only {of} samples");
    let sampled = hits as f64 / of as f64;
    let tolerance = (4.0 * (truth * (1.0 - truth) / of as f64).sqrt()).max(0.03);
    eprintln!("{what}: sampled share {sampled:.3}, timed by the workload {truth:.3} (tolerance {tolerance:.3})");
    assert!(
        (sampled - truth).abs() <= tolerance,
        "{what}: sampled share {sampled:.3} of {of} samples, the workload timed {truth:.3} (tolerance {tolerance:.3})"
    );
}

/// Starts a workload and waits until it has printed its `ready` line.
pub fn start_workload(python: &Path, script: &str, args: &[&str]) -> Child {
    let mut child =
        Command::new(python).arg(workload(script)).args(args).stdout(Stdio::piped()).spawn().expect("start workload");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "workload said {line:?}");
    child
}

#[derive(Debug, Clone)]
pub struct S {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub gil: GilState,
    pub thread_state: ThreadStateMatch,
    pub pthread_id: PthreadIdMatch,
    pub status: StackStatus,
    /// Qualified function names, root first.
    pub names: Vec<String>,
    /// (qualified name, file, line), root first.
    pub frames: Vec<(String, String, u32)>,
}

pub struct Recording {
    pub tables: Tables,
    pub samples: Vec<S>,
    pub warnings: Vec<String>,
}

/// Reads a recording the way `pyperf report` does, checking every reference; `each` makes one test-side value per
/// sample from the tables so far, the sample and its frames' symbol ids (root first). Returns the header, the
/// tables, those values and the reader's warnings.
pub fn read_each<T>(
    path: &Path,
    mut each: impl FnMut(&Tables, &pyperf_format::Sample<'_>, Vec<u32>) -> T,
) -> (Header, Tables, Vec<T>, Vec<String>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = Reader::new(BufReader::new(file)).expect("recording header");
    let header = reader.header().clone();
    let mut tables = Tables::default();
    let mut out = Vec::new();
    let notes = scan(&mut reader, &mut tables, |t, chunk| {
        for s in samples(chunk) {
            let mut ids = Vec::new();
            t.frames_root_first(s.stack, &mut ids);
            out.push(each(t, &s, ids));
        }
    })
    .expect("a readable recording (every stack and symbol defined before use)");
    (header, tables, out, notes.warnings)
}

pub fn read(path: &Path) -> Recording {
    let (_, tables, samples, warnings) = read_each(path, |t, s, ids| {
        let frames: Vec<(String, String, u32)> = ids
            .iter()
            .map(|&id| {
                let sym = t.symbol(id);
                (sym.qualified_name(), sym.file.clone(), sym.line)
            })
            .collect();
        S {
            time_ns: s.time_ns,
            pid: s.pid,
            tid: s.tid,
            comm: s.comm.to_string(),
            gil: s.gil,
            thread_state: s.thread_state,
            pthread_id: s.pthread_id,
            status: s.status,
            names: frames.iter().map(|f| f.0.clone()).collect(),
            frames,
        }
    });
    Recording { tables, samples, warnings }
}

impl Recording {
    pub fn of_pid(&self, pid: u32) -> Vec<&S> {
        self.samples.iter().filter(|s| s.pid == pid).collect()
    }

    /// Samples whose stack contains a frame named `name`.
    pub fn with_frame<'a>(&'a self, name: &str) -> Vec<&'a S> {
        self.samples.iter().filter(|s| s.names.iter().any(|n| n == name)).collect()
    }
}
