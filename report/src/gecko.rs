//! Firefox Profiler's processed profile format. (Being written: issue #16.)

use std::io::{self, Write};

use crate::Profile;

/// What the Firefox Profiler export shows.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Product name shown by the profiler [default: the recorded command].
    pub name: Option<String>,
}

/// Writes `profile` in Firefox Profiler's processed format.
pub fn write<W: Write>(_profile: &Profile, _options: &Options, _out: W) -> io::Result<()> {
    Err(io::Error::other("gecko export: not built yet"))
}
