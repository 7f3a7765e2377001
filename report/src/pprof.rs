//! pprof (profile.proto, gzip'd): `go tool pprof`, Pyroscope, Parca. (Being written: issue #16.)

use std::io::{self, Write};

use crate::Profile;

/// What the pprof export shows.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// One Location per (function, line) when true; per function otherwise.
    pub lines: bool,
}

/// Writes `profile` as a gzip'd pprof profile.
pub fn write<W: Write>(_profile: &Profile, _options: &Options, _out: W) -> io::Result<()> {
    Err(io::Error::other("pprof export: not built yet"))
}
