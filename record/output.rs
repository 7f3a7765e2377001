//! The output file: never silently overwritten, never through a planted symlink, readable by its owner only.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub struct Output {
    path: PathBuf,
    file: File,
}

impl Output {
    /// Creates `path` afresh. An existing file (or symlink) there is renamed to `path.old` first, as perf does.
    /// The file is opened with O_EXCL | O_NOFOLLOW, so a symlink planted at `path` between the rename and the
    /// open makes the open fail instead of writing through it; mode 0600 because stacks reveal code and paths.
    pub fn create(path: &Path) -> Result<Output> {
        if std::fs::symlink_metadata(path).is_ok() {
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(path, &old)
                .with_context(|| format!("cannot move the existing {} out of the way", path.display()))?;
            eprintln!("pyperf: kept the previous {} as {}", path.display(), Path::new(&old).display());
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Output { path: path.to_path_buf(), file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn into_file(self) -> File {
        self.file
    }
}
