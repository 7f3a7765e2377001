//! The output file: never silently overwritten, never through a planted symlink, readable by its owner only.
//!
//! Policy (as perf): an existing recording at the output path is kept as `PATH.old` (replacing an older
//! `PATH.old`), and the new file is created fresh. In detail:
//! - a regular file or a symlink at the path is renamed to `PATH.old`. rename(2) moves the link itself: the file a
//!   planted symlink points to is never opened, written or truncated;
//! - anything else there (a directory, a device such as /dev/null, a FIFO) is refused with an error and left
//!   alone: moving it aside would break whatever uses it;
//! - the new file is opened with O_CREAT | O_EXCL | O_NOFOLLOW: a symlink (or anything else) planted at the path
//!   between the rename and the open makes the open fail instead of writing through it;
//! - mode 0600: stacks reveal code, paths and command lines;
//! - made by root under sudo (`SUDO_UID` / `SUDO_GID` set), it is given to the user who ran sudo, who could not
//!   read it otherwise (a previous recording moved to `PATH.old` keeps its owner);
//! - a start that fails after the file was created ([`StartGuard`]) removes it and puts the previous recording
//!   back, so a failed `pyperf record` leaves the directory as it found it.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A freshly created output file (see the module doc).
pub struct Output {
    path: PathBuf,
    file: File,
    /// Where the previous file at `path` went, if there was one.
    kept: Option<PathBuf>,
}

/// `path` with `.old` appended (`prof.pyp` -> `prof.pyp.old`).
pub fn old_path(path: &Path) -> PathBuf {
    let mut old: OsString = path.as_os_str().to_owned();
    old.push(".old");
    PathBuf::from(old)
}

impl Output {
    /// Creates `path` afresh, moving an existing file or symlink there to `path.old` first (see the module doc).
    pub fn create(path: &Path) -> Result<Output> {
        let kept = move_aside(path)?;
        match create_new(path) {
            Ok(file) => Ok(Output { path: path.to_path_buf(), file, kept }),
            Err(e) => {
                // Put the previous file back where it was (replacing whatever was planted there meanwhile).
                if let Some(old) = &kept {
                    let _ = std::fs::rename(old, path);
                }
                Err(e).with_context(|| format!("cannot create {}", path.display()))
            }
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Undoes this creation on drop unless [`StartGuard::keep`] is called: for the steps of a start that can
    /// still fail once the file exists.
    pub fn guard(&self) -> StartGuard {
        let id = self.file.metadata().map(|m| (m.dev(), m.ino())).ok();
        StartGuard { path: self.path.clone(), kept: self.kept.clone(), id, armed: true }
    }

    /// The open file, for writing.
    pub fn into_file(self) -> File {
        self.file
    }
}

/// Fails if `path` is empty, or exists and is neither a regular file nor a symlink (which pyperf would move aside).
/// Changes nothing: for checking the output before starting anything.
pub fn check(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        bail!("the output file name is empty: give one with -o FILE");
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot look at {}", path.display())),
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        bail!("{} is a directory: give the recording a file name (-o DIR/prof.pyp)", path.display());
    }
    if !kind.is_file() && !kind.is_symlink() {
        bail!("{} exists and is not a regular file: pyperf writes recordings to regular files only", path.display());
    }
    Ok(())
}

/// Moves a regular file or symlink at `path` to `path.old`; refuses anything else. Returns where it went.
fn move_aside(path: &Path) -> Result<Option<PathBuf>> {
    check(path)?;
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let old = old_path(path);
    std::fs::rename(path, &old)
        .with_context(|| format!("cannot move the existing {} out of the way to {}", path.display(), old.display()))?;
    Ok(Some(old))
}

/// Opens a new file at `path`, failing if anything exists there, symlinks included; mode 0600.
fn create_new(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // Exactly 0600 whatever the umask (a umask can only have removed bits, but a strange one could remove the
    // owner's own read permission).
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    if let Some((uid, gid)) = sudo_user() {
        // On the descriptor, not the path: the file we made, whatever is renamed meanwhile.
        if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), gid) {
            crate::say!("pyperf: warning: cannot give {} to the sudo user (uid {uid}): {e}", path.display());
        }
    }
    Ok(file)
}

/// The user who ran `sudo pyperf ...` (`SUDO_UID`, and `SUDO_GID` if set), when pyperf runs as root: recordings
/// go to them.
fn sudo_user() -> Option<(u32, Option<u32>)> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |name: &str| std::env::var(name).ok()?.trim().parse::<u32>().ok();
    Some((id("SUDO_UID")?, id("SUDO_GID")))
}

/// Removes a just-created output file and restores the previous one, unless the start succeeded.
pub struct StartGuard {
    path: PathBuf,
    kept: Option<PathBuf>,
    /// (device, inode) of the file we created: only that file is removed.
    id: Option<(u64, u64)>,
    armed: bool,
}

impl StartGuard {
    /// The start succeeded: keep the new file (and say where the previous one went).
    pub fn keep(mut self) {
        self.armed = false;
        if let Some(old) = &self.kept {
            crate::say!("pyperf: kept the previous {} as {}", self.path.display(), old.display());
        }
    }
}

impl Drop for StartGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let ours = std::fs::symlink_metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
        if ours.is_some() && ours == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(old) = &self.kept {
            if std::fs::symlink_metadata(&self.path).is_err() {
                let _ = std::fs::rename(old, &self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn new_file_is_private_and_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.pyp");
        let out = Output::create(&p).unwrap();
        drop(out.into_file());
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        assert!(!old_path(&p).exists());
    }

    #[test]
    fn existing_recording_is_kept_as_old() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.pyp");
        std::fs::write(&p, b"first").unwrap();
        std::fs::write(old_path(&p), b"older").unwrap();
        let out = Output::create(&p).unwrap();
        out.guard().keep();
        drop(out.into_file());
        assert_eq!(std::fs::read(old_path(&p)).unwrap(), b"first", "the previous recording is kept");
        assert_eq!(std::fs::read(&p).unwrap(), b"");
    }

    #[test]
    fn planted_symlink_is_moved_aside_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = dir.path().join("prof.pyp");
        symlink(&victim, &p).unwrap();
        let out = Output::create(&p).unwrap();
        use std::io::Write;
        out.into_file().write_all(b"recording").unwrap();
        // The symlink itself went to .old; its target is untouched; the recording is a new regular file.
        assert_eq!(std::fs::read_link(old_path(&p)).unwrap(), victim);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(mode(&victim), 0o644);
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"recording");
    }

    #[test]
    fn symlink_planted_after_the_move_makes_the_open_fail() {
        // The race: between moving the old file aside and opening the new one, someone plants a symlink. The open
        // (O_EXCL | O_NOFOLLOW) must fail rather than follow it, dangling or not.
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let p = dir.path().join("prof.pyp");
        symlink(&victim, &p).unwrap();
        assert!(create_new(&p).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let dangling = dir.path().join("nowhere");
        std::fs::remove_file(&p).unwrap();
        symlink(&dangling, &p).unwrap();
        assert!(create_new(&p).is_err());
        assert!(!dangling.exists(), "the open created the symlink's target");
    }

    #[test]
    fn directories_and_devices_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let err = Output::create(&sub).err().unwrap().to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert!(sub.is_dir() && !old_path(&sub).exists());
        let err = Output::create(Path::new("/dev/null")).err().unwrap().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(Path::new("/dev/null").exists());
    }

    #[test]
    fn failed_start_removes_the_new_file_and_restores_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.pyp");
        std::fs::write(&p, b"first").unwrap();
        let out = Output::create(&p).unwrap();
        let guard = out.guard();
        drop(out.into_file());
        drop(guard); // the start failed
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        assert!(!old_path(&p).exists());
        // Without a previous file: nothing is left.
        std::fs::remove_file(&p).unwrap();
        let out = Output::create(&p).unwrap();
        drop(out.guard());
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
