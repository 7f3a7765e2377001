//! Where a report goes: standard output, or `-o FILE` written the way the recorder writes recordings.
//!
//! `-o FILE` is often run as root, often in a shared directory such as /tmp. So:
//! - never through a symlink: a symlink at FILE is refused. The report is put in place with rename(2), which
//!   replaces a directory entry and never follows it: a symlink planted after the check is replaced, its target
//!   is never opened;
//! - never over the input recording (same device and inode, so hard links and `-i - < FILE` too), and never over
//!   any other pyperf recording (told by its magic bytes) unless `--force`;
//! - never half-written: the report goes to a new temporary file in FILE's directory (O_EXCL, 0600, unique name),
//!   is flushed to disk, and only then renamed over FILE. Any failure before that removes the temporary file and
//!   leaves FILE as it was (or absent);
//! - mode 0600, as recordings: stacks reveal code, paths and command lines. An existing FILE's mode is not kept.

use std::fs::{File, Metadata, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{io_reason, ReportError};

/// A file's identity: (device, inode).
type FileId = (u64, u64);

/// Checks that the report may replace `target` (see the module doc), reading `inputs` (paths or `-`). Changes
/// nothing: run before the inputs are read, so a refusal comes at once, and again just before the rename.
pub(crate) fn check_target(target: &Path, inputs: &[&Path], force: bool) -> Result<(), ReportError> {
    let shown = target.display().to_string();
    let refuse = |reason: &str| Err(ReportError::Output { target: shown.clone(), reason: reason.to_string() });
    let meta = match std::fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ReportError::write(&shown, e)),
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        return refuse("it is a symbolic link; not writing through it (remove it or choose another name)");
    }
    if kind.is_dir() {
        return refuse("it is a directory; give the report a file name (-o DIR/NAME)");
    }
    if !kind.is_file() {
        return refuse("it is not a regular file; -o writes regular files only (redirect standard output instead)");
    }
    if inputs.iter().any(|input| is_input(target, &meta, input)) {
        return refuse("it is the input recording; not overwriting it");
    }
    if force {
        return Ok(());
    }
    match is_recording(target, &meta) {
        Ok(false) => Ok(()),
        Ok(true) => refuse("it is a pyperf recording; not replacing it (--force replaces it)"),
        Err(e) => {
            refuse(&format!("cannot tell whether it is a pyperf recording ({}); --force replaces it", io_reason(&e)))
        }
    }
}

/// Whether `target` (a regular file, `meta` its lstat) is the input recording.
fn is_input(target: &Path, meta: &Metadata, input: &Path) -> bool {
    match (file_id(meta), input_id(input)) {
        (Some(t), Some(i)) => t == i,
        // No inode numbers on this platform: compare the resolved paths.
        _ => matches!((target.canonicalize(), input.canonicalize()), (Ok(a), Ok(b)) if a == b),
    }
}

/// Opens a file for reading only if it is a regular file, without blocking: a FIFO or a device named by a
/// recording (a source path, `pyperf annotate`) or by a process (a library or source file, `pyperf record`) opens
/// at once (O_NONBLOCK) and is then refused, a terminal never becomes the controlling one (O_NOCTTY). Shared by the
/// report and the recorder.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC);
    }
    let file = options.open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

/// Whether the regular file `target` starts with a recording's magic bytes. Opened without following a symlink and
/// without blocking on a FIFO, in case either replaced the file since `meta` was taken.
fn is_recording(target: &Path, meta: &Metadata) -> io::Result<bool> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(target)?;
    let now = file.metadata()?;
    if !now.is_file() || file_id(&now) != file_id(meta) {
        return Err(io::Error::other("it changed while being checked"));
    }
    let mut head = Vec::with_capacity(pyperf_format::MAGIC.len());
    file.take(pyperf_format::MAGIC.len() as u64).read_to_end(&mut head)?;
    Ok(head == pyperf_format::MAGIC)
}

#[cfg(unix)]
fn file_id(meta: &Metadata) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_meta: &Metadata) -> Option<FileId> {
    None
}

/// The input's identity: the file a path names (symlinks followed), or whatever standard input is (`-`).
fn input_id(input: &Path) -> Option<FileId> {
    if input == Path::new("-") {
        return stdin_id();
    }
    std::fs::metadata(input).ok().and_then(|m| file_id(&m))
}

#[cfg(unix)]
fn stdin_id() -> Option<FileId> {
    use std::os::fd::AsFd;
    // fstat through a duplicate: File would close the descriptor it owns.
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    File::from(fd).metadata().ok().and_then(|m| file_id(&m))
}

#[cfg(not(unix))]
fn stdin_id() -> Option<FileId> {
    None
}

/// A report being written to a temporary file next to its target (see the module doc). Dropped without
/// [`Replacement::commit`], it removes the temporary file.
pub(crate) struct Replacement {
    target: PathBuf,
    temp: PathBuf,
    file: File,
    /// Identity of the temporary file: only that file is removed.
    id: Option<FileId>,
    committed: bool,
}

impl Replacement {
    /// Creates the temporary file in `target`'s directory.
    pub(crate) fn create(target: &Path) -> Result<Replacement, ReportError> {
        let shown = target.display().to_string();
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // Random names from the standard library's randomly keyed hasher; O_EXCL makes a clash fail, not share.
        let random = std::collections::hash_map::RandomState::new();
        let mut last = None;
        for attempt in 0..16u64 {
            let mut h = random.build_hasher();
            h.write_u64(attempt);
            let temp = dir.join(format!(".pyperf-report-{}-{:016x}.tmp", std::process::id(), h.finish()));
            match create_private(&temp) {
                Ok(file) => {
                    let id = file.metadata().ok().and_then(|m| file_id(&m));
                    return Ok(Replacement { target: target.to_path_buf(), temp, file, id, committed: false });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    let dir =
                        if dir == Path::new(".") { "the current directory".into() } else { dir.display().to_string() };
                    let reason = format!(
                        "cannot create a file in {dir} ({}); the report is written to a new file there, then renamed \
                         over the old one, so the directory must be writable",
                        io_reason(&e)
                    );
                    return Err(ReportError::Output { target: shown, reason });
                }
                Err(e) => return Err(ReportError::write(&shown, e)),
            }
        }
        Err(ReportError::write(&shown, last.unwrap_or_else(|| io::Error::other("no free temporary file name"))))
    }

    /// The temporary file, to write the report to.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Flushes the written report to disk, checks the target again ([`check_target`]: something may have appeared
    /// there meanwhile) and renames the temporary file over it.
    pub(crate) fn commit(mut self, inputs: &[&Path], force: bool) -> Result<(), ReportError> {
        let shown = self.target.display().to_string();
        self.file.sync_all().map_err(|e| ReportError::write(&shown, e))?;
        check_target(&self.target, inputs, force)?;
        std::fs::rename(&self.temp, &self.target).map_err(|e| ReportError::write(&shown, e))?;
        self.committed = true;
        // The rename itself on disk too; best effort: the report is in place either way.
        if let Some(dir) = self.temp.parent() {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let now = std::fs::symlink_metadata(&self.temp).ok().and_then(|m| file_id(&m));
        if now == self.id {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Creates a new file at `path`, failing if anything exists there (symlinks included: O_CREAT | O_EXCL never
/// follows one); mode 0600.
fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    // Exactly 0600 whatever the umask (a strange one could remove the owner's own read permission).
    #[cfg(unix)]
    if let Err(e) = file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(file)
}

/// Whether standard output was closed when the program started (`>&-`).
///
/// The Rust runtime reopens a closed descriptor 0, 1 or 2 on /dev/null before `main` (so that files opened later
/// cannot take its number), and writes to it then succeed: a report would vanish without an error. A constructor,
/// which runs before the runtime's setup, records the fact. Platforms other than Linux and Android: false.
pub(crate) fn stdout_closed_at_start() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(any(target_os = "linux", target_os = "android"))]
#[used]
#[link_section = ".init_array"]
static RECORD_STDOUT_STATE: extern "C" fn() = record_stdout_state;

#[cfg(any(target_os = "linux", target_os = "android"))]
extern "C" fn record_stdout_state() {
    // SAFETY: fcntl(F_GETFD) takes a descriptor number and no memory; it only reports whether it is open.
    let closed = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1;
    STDOUT_CLOSED.store(closed, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).expect("stat").permissions().mode() & 0o7777
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn dropped_replacement_leaves_nothing_and_the_old_file_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("out.folded");
        std::fs::write(&target, b"old\n").expect("write");
        let r = Replacement::create(&target).expect("create");
        use std::io::Write;
        r.file().write_all(b"partial").expect("write");
        assert_eq!(entries(dir.path()).len(), 2, "temporary file next to the target");
        drop(r);
        assert_eq!(entries(dir.path()), ["out.folded"]);
        assert_eq!(std::fs::read(&target).expect("read"), b"old\n");
    }

    #[cfg(unix)]
    #[test]
    fn committed_replacement_is_private_and_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("out.folded");
        std::fs::write(&target, b"old\n").expect("write");
        let r = Replacement::create(&target).expect("create");
        use std::io::Write;
        r.file().write_all(b"new\n").expect("write");
        r.commit(&[Path::new("/nonexistent/in.pyp")], false).expect("commit");
        assert_eq!(entries(dir.path()), ["out.folded"]);
        assert_eq!(std::fs::read(&target).expect("read"), b"new\n");
        assert_eq!(mode(&target), 0o600);
    }

    #[test]
    fn recordings_are_told_by_their_magic_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("x");
        let input = Path::new("-");
        std::fs::write(&target, pyperf_format::MAGIC).expect("write");
        let err = check_target(&target, &[input], false).expect_err("a recording").to_string();
        assert!(err.ends_with("it is a pyperf recording; not replacing it (--force replaces it)"), "{err}");
        check_target(&target, &[input], true).expect("--force");
        // Short or different: not a recording.
        std::fs::write(&target, &pyperf_format::MAGIC[..7]).expect("write");
        check_target(&target, &[input], false).expect("7 bytes");
        std::fs::write(&target, b"").expect("write");
        check_target(&target, &[input], false).expect("empty");
        check_target(&dir.path().join("absent"), &[input], false).expect("absent");
    }
}
