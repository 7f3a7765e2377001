//! The output file: never silently overwritten, never through a planted symlink, readable by its owner only.
//!
//! Policy (as perf): an existing recording at the output path is kept as `PATH.old` (replacing an older
//! `PATH.old`), and the new file is created fresh. In detail:
//! - everything happens relative to the directory opened once ([`Output::create`]): a symlink among the path's
//!   directories swapped meanwhile cannot send the file (or the ownership decision below) elsewhere;
//! - a regular file or a symlink at the path is renamed to `PATH.old`. rename(2) moves the link itself: the file a
//!   planted symlink points to is never opened, written or truncated;
//! - anything else there (a directory, a device such as /dev/null, a FIFO) is refused with an error and left
//!   alone: moving it aside would break whatever uses it;
//! - a recording another pyperf is still writing there (it holds an exclusive flock(2) on its file while it runs)
//!   is refused, naming that pyperf's pid: moving a live file aside would lose it to the next recorder;
//! - the new file is opened with O_CREAT | O_EXCL | O_NOFOLLOW: a symlink (or anything else) planted at the path
//!   between the rename and the open makes the open fail instead of writing through it;
//! - mode 0600: stacks reveal code, paths and command lines;
//! - made by root under sudo (`SUDO_UID` / `SUDO_GID` set), it is given to the user who ran sudo, who could not
//!   read it otherwise, but only where that user could have made it: the directory is writable and searchable for
//!   them (owner, group incl. supplementary groups, or other bits; a directory with an ACL only when they own it)
//!   and, in a sticky directory (/tmp), the files replaced are theirs. Elsewhere it stays root's, with a note: a
//!   sudo rule for `pyperf record` alone must not let the user plant files of theirs where root's are
//!   (`-o /etc/profile.d/x.sh`). A previous recording moved to `PATH.old` keeps its owner;
//! - a start that fails (or is stopped by a signal) after the file was created ([`StartGuard`]) removes it and puts
//!   the previous recording back, and the older `PATH.old` too (kept meanwhile as a hard link `PATH.old.PID~`), so a
//!   failed `pyperf record` leaves the directory as it found it.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A freshly created output file (see the module doc).
pub struct Output {
    path: PathBuf,
    file: File,
    /// Where the previous file at `path` went, if there was one.
    kept: Option<PathBuf>,
    /// A second link to the `path.old` that moving the previous file aside replaced, until the start succeeds.
    backup: Option<PathBuf>,
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
        let cannot = || format!("cannot create {}", path.display());
        check(path)?;
        let (dir_path, name) = split(path)?;
        let dir = open_dir(dir_path).with_context(cannot)?;
        // Among pyperfs, the look at a live recording, the move aside and the new file's lock are one step.
        let _serial = lock_dir(&dir);
        refuse_if_recording(&dir, &name, path)?;
        if lstat_at(&dir, &name).is_some() {
            // The move aside replaces PATH.old: not if a pyperf is writing that one (`-o PATH.old`).
            refuse_if_recording(&dir, &old_name(&name), &old_path(path))?;
        }
        let owner = sudo_user().map(|user| {
            let allowed = may_create(&dir, &name, user);
            (user, allowed)
        });
        let backup = keep_older(&dir, &name, path);
        let kept = match move_aside(&dir, &name, path) {
            Ok(kept) => kept,
            Err(e) => {
                drop_backup(&backup);
                return Err(e);
            }
        };
        match create_new(&dir, &name) {
            Ok(file) => {
                // Held while the file is open (until pyperf exits): another pyperf refuses this path meanwhile.
                // SAFETY: flock on a descriptor we own; no memory involved.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                match owner {
                    Some(((uid, gid), Ok(()))) => {
                        // On the descriptor, not the path: the file we made, whatever is renamed meanwhile.
                        if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), gid) {
                            crate::say!(
                                "pyperf: warning: cannot give {} to the sudo user (uid {uid}): {e}",
                                path.display()
                            );
                        }
                    }
                    Some(((uid, _), Err(why))) => crate::say!(
                        "pyperf: note: {} stays root's, not given to the sudo user (uid {uid}): {why}; record into a \
                         directory of theirs to get a file of theirs",
                        path.display()
                    ),
                    None => {}
                }
                Ok(Output { path: path.to_path_buf(), file, kept, backup })
            }
            Err(e) => {
                // Put the previous file back where it was (replacing whatever was planted there meanwhile).
                if kept.is_some() && rename_at(&dir, &old_name(&name), &name).is_ok() {
                    if let Some(b) = &backup {
                        let _ = std::fs::rename(b, old_path(path));
                    }
                } else {
                    drop_backup(&backup);
                }
                Err(e).with_context(cannot)
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
        StartGuard { path: self.path.clone(), kept: self.kept.clone(), backup: self.backup.clone(), id, armed: true }
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

/// The directory to open and the file name in it.
fn split(path: &Path) -> Result<(&Path, OsString)> {
    let bytes = path.as_os_str().as_bytes();
    let name = match path.file_name() {
        // `Path` drops a trailing `/` and `.`: `x/` names a directory, not the file `x`.
        Some(n) if !bytes.ends_with(b"/") && !bytes.ends_with(b"/.") => n.to_owned(),
        _ => bail!("{} names a directory: give the recording a file name (-o DIR/prof.pyp)", path.display()),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn old_name(name: &OsStr) -> OsString {
    let mut old = name.to_owned();
    old.push(".old");
    old
}

fn open_dir(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |flags| std::fs::OpenOptions::new().read(true).custom_flags(flags).open(dir);
    match open(libc::O_DIRECTORY | libc::O_CLOEXEC) {
        // A directory one may write and search but not list (mode -wx): O_PATH needs neither, and serves the
        // *at calls (only the best-effort lock and the ACL look, for root's sudo handover, need more).
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            open(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        }
        r => r,
    }
}

/// flock(2) on the directory, waiting up to a second; unlocked when the returned file (a second descriptor) is
/// dropped. Best effort: a directory someone else keeps locked only costs the wait.
fn lock_dir(dir: &File) -> Option<File> {
    let own = dir.try_clone().ok()?;
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(own.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Some(own);
        }
        // Only a lock held by another is worth the wait (an O_PATH descriptor of a -wx directory gives EBADF).
        if io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) || Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Fails if the file at `name` is a recording another pyperf holds locked (is still writing).
fn refuse_if_recording(dir: &File, name: &OsStr, path: &Path) -> Result<()> {
    let Ok(c) = cstr(name) else { return Ok(()) };
    // Non-blocking and not following links: only a regular file planted there is looked at (a FIFO would block).
    // SAFETY: openat with a NUL-terminated name that lives through the call; the descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: a fresh descriptor, ours alone.
    let file = unsafe { File::from_raw_fd(fd) };
    let Ok(meta) = file.metadata() else { return Ok(()) };
    if !meta.file_type().is_file() {
        return Ok(());
    }
    // SAFETY: flock on a descriptor we own.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Ok(());
    }
    let by = match flock_holder(meta.dev(), meta.ino()) {
        Some(pid) => format!("another pyperf (pid {pid})"),
        None => "another pyperf".to_string(),
    };
    bail!(
        "{} is being recorded by {by}: give this recording another -o FILE, or wait for that one to end",
        path.display()
    )
}

/// The pid holding an exclusive flock on inode `ino` of device `dev`, from /proc/locks (`1: FLOCK ADVISORY WRITE
/// PID MAJ:MIN:INODE 0 EOF`, major and minor in hex).
fn flock_holder(dev: u64, ino: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    parse_flock_holder(&locks, (u64::from(libc::major(dev)), u64::from(libc::minor(dev))), ino)
}

fn parse_flock_holder(locks: &str, dev: (u64, u64), ino: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Lines of waiters start with `-> `: skip them (their fields are shifted).
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
            return None;
        }
        let mut id = f[5].split(':');
        let (maj, min) = (u64::from_str_radix(id.next()?, 16).ok()?, u64::from_str_radix(id.next()?, 16).ok()?);
        let inode: u64 = id.next()?.parse().ok()?;
        ((maj, min) == dev && inode == ino).then(|| f[4].parse().ok()).flatten().filter(|&pid| pid != 0)
    })
}

/// When moving `name` aside will replace an existing `name.old`: a second (hard) link to that one, `name.old.PID~`,
/// so that a start that fails can put it back. Best effort: none where hard links are not possible.
fn keep_older(dir: &File, name: &OsStr, path: &Path) -> Option<PathBuf> {
    lstat_at(dir, name)?;
    let old = old_name(name);
    lstat_at(dir, &old)?;
    let mut backup = old.clone();
    backup.push(format!(".{}~", std::process::id()));
    let (from, to) = (cstr(&old).ok()?, cstr(&backup).ok()?);
    // SAFETY: linkat with NUL-terminated names that live through the call, relative to a directory we hold; flags
    // 0: a symlink is linked itself, not followed; an existing target makes it fail (EEXIST), never replaced.
    let r = unsafe { libc::linkat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr(), 0) };
    let mut at = old_path(path).into_os_string();
    at.push(format!(".{}~", std::process::id()));
    (r == 0).then(|| PathBuf::from(at))
}

/// Removes the second link of [`keep_older`]: the start succeeded (or nothing was replaced).
fn drop_backup(backup: &Option<PathBuf>) {
    if let Some(b) = backup {
        let _ = std::fs::remove_file(b);
    }
}

/// Moves a regular file or symlink at `name` to `name.old`; refuses anything else. Returns where it went.
fn move_aside(dir: &File, name: &OsStr, path: &Path) -> Result<Option<PathBuf>> {
    check(path)?;
    if lstat_at(dir, name).is_none() {
        return Ok(None);
    }
    let old = old_path(path);
    rename_at(dir, name, &old_name(name))
        .with_context(|| format!("cannot move the existing {} out of the way to {}", path.display(), old.display()))?;
    Ok(Some(old))
}

fn rename_at(dir: &File, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (from, to) = (cstr(from)?, cstr(to)?);
    // SAFETY: renameat with NUL-terminated names that live through the call, relative to a directory we hold.
    if unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: (owner uid, mode), or `None` if nothing is there.
fn lstat_at(dir: &File, name: &OsStr) -> Option<(u32, u32)> {
    let c = cstr(name).ok()?;
    // SAFETY: a zeroed stat is a valid value for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat with a NUL-terminated name and a stat buffer, both live through the call.
    let r = unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    (r == 0).then_some((st.st_uid, st.st_mode))
}

/// Opens a new file `name` in `dir`, failing if anything exists there, symlinks included; mode 0600.
fn create_new(dir: &File, name: &OsStr) -> io::Result<File> {
    let c = cstr(name)?;
    // SAFETY: openat with a NUL-terminated name that lives through the call; the descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, ours alone.
    let file = unsafe { File::from_raw_fd(fd) };
    // Exactly 0600 whatever the umask (a umask can only have removed bits, but a strange one could remove the
    // owner's own read permission).
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
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

/// Whether the user `(uid, gid)` could have created `name` in `dir` themselves (see the module doc); if not,
/// why not.
fn may_create(dir: &File, name: &OsStr, (uid, gid): (u32, Option<u32>)) -> std::result::Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let meta = dir.metadata().map_err(|e| format!("cannot look at its directory: {e}"))?;
    let groups = user_groups(uid, gid);
    // With an ACL the mode's group bits are only a mask: the user's own entry may deny what they allow.
    if meta.uid() != uid && has_acl(dir) {
        return Err("its directory has an access control list and is not theirs".into());
    }
    if !allows(meta.mode(), meta.uid(), meta.gid(), uid, &groups, 0o3) {
        return Err("they may not create files in its directory".into());
    }
    if meta.mode() & libc::S_ISVTX != 0 && meta.uid() != uid {
        // Sticky (/tmp): only their own files could they have moved aside.
        let replaced = lstat_at(dir, name).map(|(owner, _)| owner);
        let old = replaced.and(lstat_at(dir, &old_name(name)).map(|(owner, _)| owner));
        if [replaced, old].into_iter().flatten().any(|owner| owner != uid) {
            return Err("the sticky directory's file there is not theirs".into());
        }
    }
    Ok(())
}

/// Whether `mode` (owned by `owner:group`) grants all of `want` (rwx bits, 0o7 scale) to `uid` with `groups`,
/// as the kernel decides without ACLs: the owner's bits for the owner, else the group's for a member, else other.
fn allows(mode: u32, owner: u32, group: u32, uid: u32, groups: &[u32], want: u32) -> bool {
    let bits = if owner == uid {
        mode >> 6
    } else if groups.contains(&group) {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// `gid` (else the user's primary group) and the user's supplementary groups, from the group database.
fn user_groups(uid: u32, gid: Option<u32>) -> Vec<u32> {
    let mut groups: Vec<u32> = gid.into_iter().collect();
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid value for getpwuid_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf` (its length given), both live through the call.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if r != 0 || found.is_null() {
        return groups;
    }
    let primary = gid.unwrap_or(pw.pw_gid);
    groups.push(primary);
    let mut list = vec![0 as libc::gid_t; 1024];
    let mut n = list.len() as libc::c_int;
    // SAFETY: pw_name points into `buf` (alive); `list` has room for `n` entries, as told.
    let r = unsafe { libc::getgrouplist(pw.pw_name, primary, list.as_mut_ptr(), &mut n) };
    if r >= 0 {
        groups.extend_from_slice(&list[..n.max(0) as usize]);
    }
    groups
}

/// The directory has a POSIX access ACL.
fn has_acl(dir: &File) -> bool {
    // SAFETY: a size query (no buffer) on a descriptor we hold, with a NUL-terminated attribute name.
    let r = unsafe { libc::fgetxattr(dir.as_raw_fd(), c"system.posix_acl_access".as_ptr(), std::ptr::null_mut(), 0) };
    if r > 0 {
        return true;
    }
    // No ACL, or a file system without them; anything else (an O_PATH descriptor): unknown, so assume one.
    let errno = io::Error::last_os_error().raw_os_error();
    !(r == 0 || errno == Some(libc::ENODATA) || errno == Some(libc::EOPNOTSUPP))
}

/// Removes a just-created output file and restores the previous one, unless the start succeeded.
pub struct StartGuard {
    path: PathBuf,
    kept: Option<PathBuf>,
    /// The `PATH.old` that `kept` replaced (see [`keep_older`]).
    backup: Option<PathBuf>,
    /// (device, inode) of the file we created: only that file is removed.
    id: Option<(u64, u64)>,
    armed: bool,
}

impl StartGuard {
    /// The start succeeded: keep the new file (and say where the previous one went).
    pub fn keep(mut self) {
        self.armed = false;
        drop_backup(&self.backup);
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
            if std::fs::symlink_metadata(&self.path).is_err() && std::fs::rename(old, &self.path).is_ok() {
                if let Some(b) = &self.backup {
                    let _ = std::fs::rename(b, old);
                }
                return;
            }
        }
        drop_backup(&self.backup);
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
        let d = open_dir(dir.path()).unwrap();
        assert!(create_new(&d, OsStr::new("prof.pyp")).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let dangling = dir.path().join("nowhere");
        std::fs::remove_file(&p).unwrap();
        symlink(&dangling, &p).unwrap();
        assert!(create_new(&d, OsStr::new("prof.pyp")).is_err());
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
    fn failed_start_restores_the_older_old_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.pyp");
        std::fs::write(&p, b"first").unwrap();
        std::fs::write(old_path(&p), b"older").unwrap();
        let out = Output::create(&p).unwrap();
        assert_eq!(std::fs::read(old_path(&p)).unwrap(), b"first");
        drop(out.guard()); // the start failed
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        assert_eq!(std::fs::read(old_path(&p)).unwrap(), b"older");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "a backup link was left behind");
        // A start that succeeds replaces the older one, as before, and leaves no backup behind.
        let out = Output::create(&p).unwrap();
        out.guard().keep();
        assert_eq!(std::fs::read(old_path(&p)).unwrap(), b"first");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "a backup link was left behind");
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

    #[test]
    fn a_live_recording_is_refused_naming_its_recorder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.pyp");
        let first = Output::create(&p).unwrap();
        first.guard().keep();
        let err = Output::create(&p).err().unwrap().to_string();
        assert!(err.contains("is being recorded by another pyperf"), "{err}");
        assert!(err.contains(&format!("(pid {})", std::process::id())), "{err}");
        assert!(!old_path(&p).exists(), "the live recording was moved aside");
        // Once that recorder is done (its file closed), the next one moves it aside as usual.
        drop(first.into_file());
        let second = Output::create(&p).unwrap();
        second.guard().keep();
        assert!(old_path(&p).exists());
        // A pyperf writing PATH.old (`-o prof.pyp.old`): the move aside would replace it, so no.
        drop(second.into_file());
        std::fs::remove_file(old_path(&p)).unwrap();
        let on_old = Output::create(&old_path(&p)).unwrap();
        let err = Output::create(&p).err().unwrap().to_string();
        assert!(err.contains("prof.pyp.old is being recorded by another pyperf"), "{err}");
        assert!(p.exists() && old_path(&p).exists());
        drop(on_old);
    }

    #[test]
    fn flock_holders_from_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 00:2c:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 77 00:2c:1234 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 99 00:2c:555 0 EOF\n\
                     3: FLOCK  ADVISORY  READ 12 00:2c:555 0 EOF\n";
        assert_eq!(parse_flock_holder(locks, (0, 0x2c), 1234), Some(4242));
        assert_eq!(parse_flock_holder(locks, (0, 0x2c), 555), None);
        assert_eq!(parse_flock_holder(locks, (0, 0x2c), 1), None);
        // The same inode number on another file system is another file.
        assert_eq!(parse_flock_holder(locks, (8, 1), 1234), None);
    }

    #[test]
    fn permission_bits_as_the_kernel_reads_them() {
        // Owner bits for the owner, even when other bits would allow more.
        assert!(!allows(0o577, 7, 7, 7, &[7], 0o3));
        assert!(allows(0o700, 7, 0, 7, &[], 0o3));
        // Group bits for a member (supplementary groups included), other bits for the rest.
        assert!(allows(0o770, 0, 50, 7, &[7, 50], 0o3));
        assert!(!allows(0o757, 0, 50, 7, &[50], 0o3));
        assert!(allows(0o757, 0, 50, 7, &[8], 0o3));
        assert!(!allows(0o755, 0, 0, 7, &[7], 0o3));
        // Writable without search is not enough.
        assert!(!allows(0o772, 0, 0, 7, &[7], 0o3));
    }

    #[test]
    fn handed_over_only_where_the_user_could_create_it() {
        use std::os::unix::fs::chown;
        let nobody = (65534, Some(65534));
        let may = |d: &Path, name: &str| may_create(&open_dir(d).unwrap(), OsStr::new(name), nobody);
        let dir = tempfile::tempdir().unwrap();
        let make = |name: &str, mode: u32, owner: (u32, u32)| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            chown(&d, Some(owner.0), Some(owner.1)).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
            d
        };
        // Root's directory (/etc/profile.d): no.
        assert!(may(&make("root", 0o755, (0, 0)), "x.sh").is_err());
        // Theirs, their group's, everyone's: yes.
        assert!(may(&make("theirs", 0o700, (65534, 0)), "x").is_ok());
        assert!(may(&make("group", 0o770, (0, 65534)), "x").is_ok());
        assert!(may(&make("world", 0o777, (0, 0)), "x").is_ok());
        // Sticky (/tmp): a new name, or a file of theirs, yes; root's file there, no (nor a root .old behind one
        // of theirs: the move aside would replace it).
        let tmp = make("tmp", 0o1777, (0, 0));
        assert!(may(&tmp, "x").is_ok());
        std::fs::write(tmp.join("x"), b"").unwrap();
        assert!(may(&tmp, "x").is_err());
        chown(tmp.join("x"), Some(65534), None).unwrap();
        assert!(may(&tmp, "x").is_ok());
        std::fs::write(tmp.join("x.old"), b"").unwrap();
        assert!(may(&tmp, "x").is_err());
        // Root under sudo from root: anything.
        assert!(may_create(&open_dir(&tmp).unwrap(), OsStr::new("x"), (0, Some(0))).is_ok());
    }

    #[test]
    fn a_trailing_slash_names_a_directory() {
        for bad in ["x/", "x/.", "/", "."] {
            let err = split(Path::new(bad)).err().unwrap().to_string();
            assert!(err.contains("names a directory"), "{bad}: {err}");
        }
        assert_eq!(split(Path::new("p.pyp")).unwrap(), (Path::new("."), OsString::from("p.pyp")));
        assert_eq!(split(Path::new("/a/p.pyp")).unwrap(), (Path::new("/a"), OsString::from("p.pyp")));
    }
}
