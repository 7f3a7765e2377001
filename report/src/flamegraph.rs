//! An interactive SVG flame graph (open it in a web browser), drawn by the inferno crate from the folded stacks.
//! Python palette (application code red, standard library yellow, site-packages aqua), colours derived from a hash
//! of the frame name (the same function always gets the same colour, no randomness), the recorded command as
//! title.

use std::io::{self, Write};

use inferno::flamegraph::color::{MultiPalette, Palette};

use crate::folded;
use crate::profile::Profile;

/// Message of the error [`write()`] returns for a profile with no matching sample.
pub const NO_SAMPLES: &str = "no samples to draw (none in the recording, or none matches the filters)";

/// How the flame graph is drawn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// How stacks are folded (lines, process / thread roots).
    pub folded: folded::Options,
    /// Title; default: the recorded command.
    pub title: Option<String>,
    /// Width in pixels; default: fluid (fills the browser window).
    pub width: Option<usize>,
    /// Frames narrower than this many pixels are omitted (inferno's default: 0.1).
    pub min_width: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options { folded: folded::Options::default(), title: None, width: None, min_width: 0.1 }
    }
}

/// The inferno options pyperf uses, for callers that want to adjust more.
pub fn inferno_options(profile: &Profile, options: &Options) -> inferno::flamegraph::Options<'static> {
    let mut o = inferno::flamegraph::Options::default();
    o.colors = Palette::Multi(MultiPalette::Python);
    o.deterministic = true;
    o.hash = false;
    o.title = options.title.clone().unwrap_or_else(|| profile.recorded_command());
    if o.title.is_empty() {
        o.title = "pyperf".to_string();
    }
    o.count_name = "samples".to_string();
    o.image_width = options.width;
    o.min_width = options.min_width;
    o
}

/// Writes the SVG. A profile with no matching sample is an `InvalidInput` error: there is nothing to draw.
pub fn write<W: Write>(profile: &Profile, options: &Options, out: W) -> io::Result<()> {
    let stacks = folded::stacks(profile, &options.folded);
    let mut opts = inferno_options(profile, options);
    if stacks.is_empty() {
        // inferno would draw an "ERROR" picture and fail; say why instead.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, NO_SAMPLES));
    }
    let lines: Vec<String> = stacks.into_iter().map(|(s, n)| format!("{s} {n}")).collect();
    opts.no_sort = true; // already sorted
    draw(&mut opts, lines.iter().map(String::as_str), out)
}

fn draw<'a, W: Write>(
    opts: &mut inferno::flamegraph::Options<'_>,
    lines: impl IntoIterator<Item = &'a str>,
    mut out: W,
) -> io::Result<()> {
    inferno::flamegraph::from_lines(opts, lines, &mut out)?;
    out.flush()
}
