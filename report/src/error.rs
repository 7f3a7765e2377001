use std::io;

/// Everything that can go wrong while reporting. Each message is one line with its context, ready to be
/// printed after the program name.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The input could not be opened (missing, a directory, no permission, empty).
    #[error("cannot open {path}: {reason}")]
    Open {
        /// The input as the user named it.
        path: String,
        /// Why, in words (no OS error number).
        reason: String,
    },
    /// The input is not a readable recording.
    #[error("cannot read {path}: {}", format_error(.err))]
    Read {
        /// The input as the user named it.
        path: String,
        /// What the format crate found.
        err: pyperf_format::Error,
    },
    /// The output could not be written.
    #[error("cannot write {target}: {}", io_reason(.err))]
    Write {
        /// The output file, or `standard output`.
        target: String,
        /// The failed write.
        err: io::Error,
    },
    /// The output file is refused or cannot be put in place (see [`crate::ReportArgs::output`]): a symlink, the
    /// input, a recording without `--force`, a directory that is not writable.
    #[error("cannot write {target}: {reason}")]
    Output {
        /// The output file as the user named it.
        target: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A format nobody reads in a terminal (SVG, JSON) with standard output a terminal and no `-o FILE`.
    #[error("not writing {what} to a terminal: use -o {example} (or redirect standard output)")]
    Terminal {
        /// The format in words: `an SVG flame graph`.
        what: &'static str,
        /// A file name to suggest: `flame.svg`.
        example: &'static str,
    },
    /// `--trace-id` / `--span-id` is not an id.
    #[error("{flag} {given:?}: give {digits} hex digits, as W3C trace context writes the id (e.g. {example})")]
    BadId {
        /// The flag.
        flag: &'static str,
        /// What was given.
        given: String,
        /// How many digits the id has.
        digits: usize,
        /// An example.
        example: &'static str,
    },
    /// A filter names a state that does not exist.
    #[error("unknown {what} '{key}'; valid: {valid}")]
    UnknownKey {
        /// Which kind of state (`GIL state`, `stack status`, ...).
        what: &'static str,
        /// The key as given.
        key: String,
        /// The keys that exist, comma-separated.
        valid: String,
    },
    /// A filter flag given an empty value (`--gil ''`), which would otherwise filter nothing.
    #[error("{flag} needs a {what}, got an empty one; valid: {valid}")]
    EmptyKey {
        /// The flag (`--gil`).
        flag: &'static str,
        /// Which kind of state (`GIL state`, `stack status`, ...).
        what: &'static str,
        /// The keys that exist, comma-separated.
        valid: String,
    },
    /// Nothing left to draw (e.g. the filters matched no sample) where an empty output would be useless.
    #[error("{0}")]
    Empty(String),
    /// `--mode` cannot report this recording (off-CPU time of a recording without it, wall-clock time of samples
    /// that are no fixed time); says what to do instead.
    #[error("{0}")]
    Mode(String),
    /// The output would be too large for the format's consumers; says what to do instead.
    #[error("{0}")]
    TooLarge(String),
    /// Several recordings (`-i A -i B`) that cannot be reported as one; says why and what to do instead.
    #[error("{0}")]
    Combine(String),
}

/// Result of the report's fallible operations.
pub type Result<T, E = ReportError> = std::result::Result<T, E>;

impl ReportError {
    /// Writing to a closed pipe (`pyperf report | head`): not an error for a command-line tool.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ReportError::Write { err, .. } if err.kind() == io::ErrorKind::BrokenPipe)
    }

    pub(crate) fn write(target: &str, err: io::Error) -> Self {
        ReportError::Write { target: target.to_string(), err }
    }
}

/// An I/O error's message without Rust's ` (os error N)` suffix: `No such file or directory`.
pub fn io_reason(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

/// The format crate's message, with what to do where there is something to do.
fn format_error(err: &pyperf_format::Error) -> String {
    use pyperf_format::Error;
    match err {
        Error::Io(e) => io_reason(e),
        // `-i - < /dev/null`, or a pipe whose writer failed before writing anything.
        Error::Truncated { offset: 0, .. } => "it is empty, not a recording".to_string(),
        // Fatal only when the header chunk itself is cut: a longer cut file is reported up to the cut.
        Error::Truncated { .. } => format!("{err}; nothing to report before it (copy the whole recording)"),
        Error::NotARecording => format!("{err}; give a .pyp file written by `pyperf record`"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_reason_drops_os_error_number() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(io_reason(&e), "No such file or directory");
        let e = io::Error::other("plain");
        assert_eq!(io_reason(&e), "plain");
    }
}
