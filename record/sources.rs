//! `pyperf record --source`: the source files the sampled Python frames run, stored in the recording (format 1.7,
//! `SourceChunk`) so that `pyperf annotate` shows the code that ran on any machine, later.
//!
//! A file is read when a sample first names it (a new symbol's `file`, in the thread's stack or its task view): the
//! process may exit, or the file change, before the recording ends. A file only a suspended task's wait names (the
//! task sweep, no sample) is not read. Reads happen after the ring buffer is taken (never inside its callback), one read of
//! a bounded size per file: at most [`MAX_FILE`] bytes a file and [`MAX_TOTAL`] a recording. The file is read in the
//! process's own file system (`/proc/PID/root/PATH`, a relative path in `/proc/PID/cwd`: a container's files, not the
//! host's; links resolved inside it too), opened without blocking and only if it is a regular file
//! ([`crate::native::elf::open_in_root`]).
//!
//! pyperf runs as root, the recording goes to whoever runs it, and a program chooses its `co_filename`: a file is
//! stored only if the process's own user could read it (its filesystem uid and groups against the opened file's
//! owner, group and mode bits; ACLs are not consulted, so a file readable through an ACL only is not stored). A
//! process running as root may name any file.
//!
//! A file that is not stored is listed with why (the recording says what is missing), counted, and the summary names
//! the first few. Names that are no file (`<frozen importlib._bootstrap>`, `<string>`) are left out.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use pyperf_format::{symbol_flags, FrameKind, SourceFile, Symbol};

/// Largest file stored.
pub const MAX_FILE: u64 = 4 << 20;
/// Most bytes of files stored in one recording.
pub const MAX_TOTAL: u64 = 64 << 20;
/// Files not stored named in the summary.
const NAMED_IN_SUMMARY: usize = 3;

/// The source files of a recording: those listed, those waiting to be read, and what they cost.
#[derive(Debug, Default)]
pub struct Sources {
    /// Paths listed or queued: each once.
    seen: HashSet<String>,
    /// (pid, path) met since the last [`Sources::read_due`].
    queue: Vec<(u32, String)>,
    /// Files stored, and their bytes.
    stored: u64,
    bytes: u64,
    /// Files listed without their content, and the first few with why.
    missing: u64,
    named: Vec<String>,
}

impl Sources {
    /// A new symbol of process `pid`: queues its file if it is a Python frame's and new.
    pub fn saw(&mut self, pid: u32, symbol: &Symbol) {
        if symbol.kind() != FrameKind::Python || symbol.flags & symbol_flags::UNRESOLVED != 0 {
            return;
        }
        let path = &symbol.file;
        // `<frozen ...>`, `<string>`, `<stdin>`: the interpreter's names for code that has no file.
        if path.is_empty() || path.starts_with('<') || self.seen.contains(path) {
            return;
        }
        self.seen.insert(path.clone());
        if symbol.flags & symbol_flags::FILE_CUT != 0 {
            self.queue.push((0, path.clone()));
        } else {
            self.queue.push((pid, path.clone()));
        }
    }

    /// Reads the files queued since the last call: each stored, or listed with why not.
    pub fn read_due(&mut self) -> Vec<SourceFile> {
        let queue = std::mem::take(&mut self.queue);
        let mut out = Vec::with_capacity(queue.len());
        for (pid, path) in queue {
            let result = if pid == 0 {
                Err("the recorder had to cut its name".to_string())
            } else {
                read(pid, &path, MAX_TOTAL.saturating_sub(self.bytes))
            };
            match result {
                Ok(content) => {
                    self.stored += 1;
                    self.bytes += content.len() as u64;
                    out.push(SourceFile::stored(&path, content));
                }
                Err(why) => {
                    self.missing += 1;
                    if self.named.len() < NAMED_IN_SUMMARY {
                        self.named.push(format!("{} ({why})", pyperf_report::names::escape_text(&path)));
                    }
                    out.push(SourceFile::missing(&path, &why));
                }
            }
        }
        out
    }

    /// The trailer's counters: `source_files`, `source_bytes`, `source_missing`.
    pub fn counters(&self) -> Vec<(String, u64)> {
        vec![
            ("source_files".to_string(), self.stored),
            ("source_bytes".to_string(), self.bytes),
            ("source_missing".to_string(), self.missing),
        ]
    }

    /// A line for the summary when some files were not stored.
    pub fn summary(&self) -> Option<String> {
        if self.missing == 0 {
            return None;
        }
        let more = if self.missing as usize > self.named.len() { ", ..." } else { "" };
        Some(format!(
            "pyperf: --source: stored {} files ({:.1} KiB), not {}: {}{more}",
            self.stored,
            self.bytes as f64 / 1024.0,
            self.missing,
            self.named.join(", ")
        ))
    }
}

/// Reads `path` as process `pid` sees it (see the module doc), with at most `room` bytes left in the recording.
fn read(pid: u32, path: &str, room: u64) -> Result<Vec<u8>, String> {
    let reason = |e: std::io::Error| {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            "the process was gone".to_string()
        } else if e.kind() == std::io::ErrorKind::InvalidInput && e.to_string() == "too large" {
            format!("larger than {} MiB", MAX_FILE >> 20)
        } else {
            pyperf_report::io_reason(&e)
        }
    };
    // Every component resolved inside the process's root, links included (an absolute link in a container must not
    // lead to the host's file): an absolute path from its root, a relative one from its working directory, which
    // is then the root of the lookup, so `..` could not leave it: such a path is not read.
    let root = if path.starts_with('/') {
        format!("/proc/{pid}/root")
    } else if path.split('/').any(|c| c == "..") {
        return Err("a relative path with `..`".to_string());
    } else {
        format!("/proc/{pid}/cwd")
    };
    let file = crate::native::elf::open_in_root(Path::new(&root), path, MAX_FILE).map_err(reason)?;
    let meta = file.metadata().map_err(reason)?;
    if !readable_by(pid, &meta)? {
        return Err(format!(
            "not readable by the process's user (mode {:04o}, owner {}, group {})",
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        ));
    }
    if meta.len() > MAX_FILE {
        return Err(format!("larger than {} MiB", MAX_FILE >> 20));
    }
    if meta.len() > room {
        return Err(format!("beyond the {} MiB of sources a recording holds", MAX_TOTAL >> 20));
    }
    let mut content = Vec::with_capacity(meta.len() as usize);
    // A file that grew since: at most the cap, then refused.
    file.take(MAX_FILE.min(room) + 1).read_to_end(&mut content).map_err(reason)?;
    if content.len() as u64 > MAX_FILE.min(room) {
        return Err(format!("larger than {} MiB", MAX_FILE.min(room) >> 20));
    }
    Ok(content)
}

/// Whether the process's user (its filesystem uid, gid and groups, from /proc/PID/status) could read the opened
/// file, by its owner, group and mode bits. Root (uid 0) could read anything.
fn readable_by(pid: u32, meta: &std::fs::Metadata) -> Result<bool, String> {
    let status = crate::proc::status(pid).ok_or_else(|| "the process was gone".to_string())?;
    let ids = |key: &str| -> Vec<u32> {
        crate::proc::status_field(&status, key)
            .map(|v| v.split_whitespace().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default()
    };
    // Uid: real, effective, saved, filesystem; the kernel checks file access against the last.
    let (uids, gids, groups) = (ids("Uid"), ids("Gid"), ids("Groups"));
    let (Some(&fsuid), Some(&fsgid)) = (uids.get(3), gids.get(3)) else {
        return Err("the process's user is unknown".to_string());
    };
    if fsuid == 0 {
        return Ok(true);
    }
    let mode = meta.mode();
    Ok(if meta.uid() == fsuid {
        mode & 0o400 != 0
    } else if meta.gid() == fsgid || groups.contains(&meta.gid()) {
        mode & 0o040 != 0
    } else {
        mode & 0o004 != 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python(file: &str) -> Symbol {
        Symbol { scope: String::new(), name: "f".into(), file: file.into(), line: 1, flags: 0 }
    }

    /// Files of this process: stored once each, with their content; a missing one, a directory and a device are
    /// listed with why; names that are no file, native frames and unresolved code are not listed.
    #[test]
    fn reads_each_file_once_and_lists_what_it_cannot_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("app.py");
        std::fs::write(&file, b"print('hi')\n").expect("write");
        let pid = std::process::id();
        let mut s = Sources::default();
        let path = file.display().to_string();
        s.saw(pid, &python(&path));
        s.saw(pid, &python(&path));
        s.saw(pid, &python("<frozen importlib._bootstrap>"));
        s.saw(pid, &python(""));
        s.saw(pid, &Symbol { flags: symbol_flags::NATIVE, ..python("/usr/lib/libc.so.6") });
        s.saw(pid, &Symbol { flags: symbol_flags::UNRESOLVED, ..python("/x.py") });
        s.saw(pid, &python(&dir.path().join("gone.py").display().to_string()));
        s.saw(pid, &python(&dir.path().display().to_string()));
        s.saw(pid, &python("/dev/zero"));
        let got = s.read_due();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], SourceFile::stored(&path, b"print('hi')\n".to_vec()));
        assert_eq!(got[1].error, "No such file or directory");
        assert_eq!(got[2].error, "not a regular file");
        assert_eq!(got[3].error, "not a regular file");
        assert!(s.read_due().is_empty(), "each file once");
        assert_eq!(s.counters()[0], ("source_files".to_string(), 1));
        assert_eq!(s.counters()[1], ("source_bytes".to_string(), 12));
        assert_eq!(s.counters()[2], ("source_missing".to_string(), 3));
        let summary = s.summary().expect("a summary line");
        assert!(summary.starts_with("pyperf: --source: stored 1 files (0.0 KiB), not 3: "), "{summary}");
        assert!(summary.contains("gone.py (No such file or directory)") && !summary.ends_with(", ..."), "{summary}");
        s.saw(pid, &python("/dev/null"));
        s.read_due();
        assert!(s.summary().is_some_and(|l| l.ends_with(", ...")), "more than it names");
    }

    /// A file the process's user may not read is not stored, though pyperf (root) could read it: a program chooses
    /// its file names, and the recording goes to whoever ran pyperf.
    #[test]
    fn only_what_the_process_could_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let secret = dir.path().join("secret.py");
        std::fs::write(&secret, b"TOKEN = 1\n").expect("write");
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        let open = dir.path().join("open.py");
        std::fs::write(&open, b"x = 1\n").expect("write");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        // A process of user nobody (65534), sleeping until killed.
        let mut nobody = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
            .spawn()
            .expect("setpriv (util-linux) runs a process as nobody");
        let pid = nobody.id();
        // Until setpriv has become nobody (its exec of sleep follows the switch).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while crate::proc::status(pid).is_none_or(|s| !s.contains("Uid:\t65534")) {
            assert!(std::time::Instant::now() < deadline, "setpriv never switched to nobody");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (got, other) =
            (read(pid, &secret.display().to_string(), MAX_TOTAL), read(pid, &open.display().to_string(), MAX_TOTAL));
        let _ = nobody.kill();
        let _ = nobody.wait();
        // The tests run as root (they load BPF): root's file, mode 0600.
        assert_eq!(got, Err("not readable by the process's user (mode 0600, owner 0, group 0)".to_string()));
        assert_eq!(other, Ok(b"x = 1\n".to_vec()), "world-readable");
        assert_eq!(read(std::process::id(), &secret.display().to_string(), MAX_TOTAL), Ok(b"TOKEN = 1\n".to_vec()));
    }

    /// Over the cap per file or the recording's room: listed, not stored.
    #[test]
    fn caps_are_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let big = dir.path().join("big.py");
        std::fs::write(&big, vec![b'#'; MAX_FILE as usize + 1]).expect("write");
        let small = dir.path().join("small.py");
        std::fs::write(&small, b"x = 1\n").expect("write");
        let pid = std::process::id();
        assert_eq!(read(pid, &big.display().to_string(), MAX_TOTAL), Err("larger than 4 MiB".to_string()));
        let small = small.display().to_string();
        assert!(read(pid, &small, 5).is_err_and(|e| e.starts_with("beyond the 64 MiB")));
        assert_eq!(read(pid, &small, 6), Ok(b"x = 1\n".to_vec()));
    }

    /// A relative path is the process's working directory's (the tests run in the crate's); one with `..` is not
    /// read (the working directory is the lookup's root: `..` would stay in it and name another file).
    #[test]
    fn relative_paths_from_the_working_directory() {
        let pid = std::process::id();
        let here = std::fs::read("Cargo.toml").expect("the crate's Cargo.toml");
        assert_eq!(read(pid, "Cargo.toml", MAX_TOTAL), Ok(here));
        assert_eq!(read(pid, "record/../Cargo.toml", MAX_TOTAL), Err("a relative path with `..`".to_string()));
    }
}
