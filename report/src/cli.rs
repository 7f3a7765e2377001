//! `pyperf report`: the command-line front end, shared by `pyperf report` and the standalone `pyperf-report`.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::error::ReportError;
use crate::filter::Filter;
use crate::output::{self, Replacement};
use crate::profile::{LoadOptions, Mode, Profile, ShowFrames};
use crate::{flamegraph, folded, gecko, names, otlp, pprof, program, speedscope, text};

/// Output format; at most one.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
#[group(id = "format", multiple = false)]
pub struct FormatFlags {
    /// Text report to read in a terminal: summary, functions by self and total share, top stacks,
    /// GIL / thread-state / stack-status breakdown [default]
    #[arg(long)]
    pub text: bool,
    /// Folded stacks, one `frame;frame;frame count` line per unique stack, root first (flamegraph.pl, inferno,
    /// speedscope); samples without Python frames are the single frame `[idle]`
    #[arg(long)]
    pub folded: bool,
    /// speedscope JSON, one timeline per thread (https://www.speedscope.app)
    #[arg(long)]
    pub speedscope: bool,
    /// Interactive SVG flame graph (open it in a web browser)
    #[arg(long)]
    pub flamegraph: bool,
    /// gzip'd pprof profile (profile.proto): `go tool pprof`, Pyroscope, Parca, Grafana
    #[arg(long)]
    pub pprof: bool,
    /// Firefox Profiler JSON (processed format), one track per thread (https://profiler.firefox.com)
    #[arg(long)]
    pub gecko: bool,
    /// OpenTelemetry profiles: an OTLP ExportProfilesServiceRequest, protobuf (opentelemetry-proto v1.9.0,
    /// profiles v1development), for an OTLP endpoint's /v1development/profiles
    #[arg(long)]
    pub otlp: bool,
}

/// An output format: one exporter, selected by one flag of [`FormatFlags`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `--text`: [`text`], the default.
    Text,
    /// `--folded`: [`folded`].
    Folded,
    /// `--speedscope`: [`speedscope`].
    Speedscope,
    /// `--flamegraph`: [`flamegraph`].
    Flamegraph,
    /// `--pprof`: [`pprof`].
    Pprof,
    /// `--gecko`: [`gecko`].
    Gecko,
    /// `--otlp`: [`otlp`].
    Otlp,
}

impl Format {
    /// Every output format, in the order of `--help`. The golden, robustness and fuzz tests run every entry, so
    /// an exporter added here (a variant, its flag in [`FormatFlags`], its arm in [`write_report`]) is tested
    /// by all of them without touching their lists; a unit test checks this list against the flags.
    pub const ALL: [Format; 7] = [
        Format::Text,
        Format::Folded,
        Format::Speedscope,
        Format::Flamegraph,
        Format::Pprof,
        Format::Gecko,
        Format::Otlp,
    ];

    /// The command-line flag that selects it.
    pub fn flag(self) -> &'static str {
        match self {
            Format::Text => "--text",
            Format::Folded => "--folded",
            Format::Speedscope => "--speedscope",
            Format::Flamegraph => "--flamegraph",
            Format::Pprof => "--pprof",
            Format::Gecko => "--gecko",
            Format::Otlp => "--otlp",
        }
    }

    /// File-name suffix for this output (`prof.folded`, `prof.svg`): the golden tests name their expected
    /// files `RECORDING.SUFFIX`.
    pub fn suffix(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Folded => "folded",
            Format::Speedscope => "speedscope.json",
            Format::Flamegraph => "svg",
            Format::Pprof => "pb.gz",
            Format::Gecko => "gecko.json",
            Format::Otlp => "otlp.pb",
        }
    }

    /// For a format nobody reads in a terminal: what it is, and a file name to suggest instead
    /// (`an SVG flame graph`, `flame.svg`). Such output to a terminal is refused.
    fn not_for_terminal(self) -> Option<(&'static str, &'static str)> {
        match self {
            Format::Text | Format::Folded => None,
            Format::Speedscope => Some(("speedscope JSON", "prof.speedscope.json")),
            Format::Flamegraph => Some(("an SVG flame graph", "flame.svg")),
            Format::Pprof => Some(("a gzip'd pprof profile", "prof.pb.gz")),
            Format::Gecko => Some(("Firefox Profiler JSON", "prof.gecko.json")),
            Format::Otlp => Some(("an OTLP profiles request", "prof.otlp.pb")),
        }
    }
}

impl From<Format> for FormatFlags {
    /// The flags that select `format` alone.
    fn from(format: Format) -> Self {
        FormatFlags {
            text: format == Format::Text,
            folded: format == Format::Folded,
            speedscope: format == Format::Speedscope,
            flamegraph: format == Format::Flamegraph,
            pprof: format == Format::Pprof,
            gecko: format == Format::Gecko,
            otlp: format == Format::Otlp,
        }
    }
}

/// Arguments of `pyperf report`.
///
/// One field per flag (a format's own options, such as the flame graph's, go next to the others):
/// [`ReportArgs::default`] lists every field with the command line's default. The recording is given either way
/// (positional or `-i`): [`ReportArgs::input_path`] is the one given.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReportArgs {
    /// Recordings to read: the same as -i FILE ... [default: prof.pyp]
    #[arg(value_name = "RECORDING", conflicts_with = "input")]
    pub recording: Vec<PathBuf>,

    /// Recording to read (`-` for standard input); repeat to report several recordings as one (workers of a job,
    /// hosts of a fleet, repeated runs: each process kept apart, times on one clock) [default: prof.pyp]
    #[arg(short, long, value_name = "FILE")]
    pub input: Vec<PathBuf>,

    /// Output format (at most one flag; none: text).
    #[command(flatten)]
    pub format: FormatFlags,

    /// What to weigh, in every format: cpu: CPU samples; off-cpu: time off CPU (blocked on I/O, sleep or locks,
    /// runnable waiting for a CPU, waiting for the GIL); wall: both, each thread's whole life (a CPU sample weighs
    /// one sampling period; with asyncio tasks also where suspended tasks wait). off-cpu and wall need a recording
    /// made with --off-cpu (wall: or with asyncio task waits) and count time (folded counts are microseconds)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Mode::Cpu, hide_possible_values = true)]
    pub mode: Mode,

    /// Differential profile of the recording against BASE (folded: `stack BASE NEW` lines; flame graph: NEW's
    /// widths, red where a frame's share grew, blue where it shrank); BASE's counts are scaled to NEW's total
    #[arg(long, value_name = "BASE")]
    pub diff: Option<PathBuf>,

    /// Write to FILE instead of standard output: a new file (mode 0600) renamed over FILE once complete; refuses a
    /// symlink, the input, and a pyperf recording (see --force) [default: standard output]
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Let -o FILE replace a pyperf recording (never the input)
    #[arg(long, requires = "output")]
    pub force: bool,

    /// Only these processes: host pids, or pids inside a container's PID namespace (repeat or comma-separate)
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Only these threads (repeat or comma-separate)
    #[arg(long, value_name = "TID", value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// Only samples (and off-CPU intervals; waiting: the GIL waits) in these GIL states: no-info, error,
    /// uninitialized, released, held, held-by-current, other-thread, held-no-holder, waiting (repeat or
    /// comma-separate)
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub gil: Vec<String>,
    /// Only samples with these thread-state matches (off-CPU intervals have none: no interval passes): unknown,
    /// current, not-current, no-thread-state, no-current, none
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub thread_state: Vec<String>,
    /// Only samples with these pthread-id matches (no off-CPU interval passes): unknown, match, mismatch,
    /// no-thread-state, null, error
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub pthread_id: Vec<String>,
    /// Only samples with these stack statuses: complete, error, truncated, idle, incomplete
    #[arg(long, value_name = "STATUS", value_delimiter = ',')]
    pub status: Vec<String>,
    /// Samples and off-CPU intervals taken in the interpreter's cyclic garbage collector (a recording of pyperf
    /// 0.7+): mark: kept, with a `[gc]` frame after their Python frames (before the native ones: the collector's);
    /// hide: kept, without it; only: only them; drop: left out
    #[arg(long, value_name = "MODE", default_value = "mark")]
    pub gc: String,
    /// Only samples and off-CPU intervals that ran in a span of these traces (a recording of a service using the
    /// OpenTelemetry SDK; 32 hex digits, as W3C trace context writes them; repeat or comma-separate)
    #[arg(long, value_name = "TRACE_ID", value_delimiter = ',')]
    pub trace_id: Vec<String>,
    /// Only samples and off-CPU intervals that ran in these spans (16 hex digits; repeat or comma-separate)
    #[arg(long, value_name = "SPAN_ID", value_delimiter = ',')]
    pub span_id: Vec<String>,

    /// Merge the lines of a function: `f (a.py)` instead of `f (a.py:12)` (folded, flame graph, speedscope)
    #[arg(long)]
    pub no_lines: bool,
    /// Leave native frames out of the stacks (a recording made with --native; their markers too): a frame left out
    /// joins its caller and callee, a leaf's time goes to its caller
    #[arg(long)]
    pub no_native: bool,
    /// Leave kernel frames out of the stacks (a recording made with --kernel)
    #[arg(long)]
    pub no_kernel: bool,
    /// Show the interpreter's own native frames between Python frames (calls, attribute lookups, start-up), left
    /// out by default (a recording made with --native)
    #[arg(long)]
    pub show_glue: bool,
    /// The plain thread view of an asyncio recording: each thread's own stack (event loop, `Handle._run`, the running
    /// coroutine) instead of the task view (the chain of tasks awaiting one another, `[task NAME]` between their
    /// frames, and in --mode wall where suspended tasks wait)
    #[arg(long)]
    pub no_async: bool,
    /// Keep task names as recorded in `[task NAME]` frames (`request-36`, `request-37`): by default names that
    /// differ only by numbers are one (`[task request-N]`)
    #[arg(long)]
    pub exact_task_names: bool,
    /// Put the process (`python3.11 [pid 123]`) at the root of every stack (folded, flame graph)
    #[arg(long)]
    pub pid_root: bool,
    /// Put the thread (`thread 124 (comm)`) at the root of every stack (folded, flame graph)
    #[arg(long)]
    pub tid_root: bool,
    /// Put the interpreter (`[interpreter 1]`, subinterpreters; 0 is the main one) at the root of every stack (below
    /// the process and thread when those are on)
    #[arg(long)]
    pub interp_root: bool,
    /// Rows per table in the text report
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Title of the flame graph / name of the speedscope file [default: the recorded command]
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Flame graph with the root at the top and callees below (an icicle graph)
    #[arg(long)]
    pub icicle: bool,
    /// Flame graph width in pixels [default: the browser window's]
    #[arg(long, value_name = "PX", value_parser = clap::value_parser!(u32).range(200..=100_000))]
    pub width: Option<u32>,
}

impl Default for ReportArgs {
    fn default() -> Self {
        ReportArgs {
            recording: Vec::new(),
            input: Vec::new(),
            format: FormatFlags::default(),
            mode: Mode::Cpu,
            diff: None,
            output: None,
            force: false,
            pid: Vec::new(),
            tid: Vec::new(),
            gil: Vec::new(),
            thread_state: Vec::new(),
            pthread_id: Vec::new(),
            status: Vec::new(),
            gc: "mark".to_string(),
            trace_id: Vec::new(),
            span_id: Vec::new(),
            no_lines: false,
            no_native: false,
            no_kernel: false,
            show_glue: false,
            no_async: false,
            exact_task_names: false,
            pid_root: false,
            tid_root: false,
            interp_root: false,
            top: 20,
            title: None,
            icicle: false,
            width: None,
        }
    }
}

impl ReportArgs {
    /// The defaults of the command line (`-i prof.pyp`, text) with this output format.
    pub fn with_format(format: Format) -> Self {
        ReportArgs { format: format.into(), ..ReportArgs::default() }
    }

    /// The recordings to read: the positional RECORDINGs if given, else the `-i` ones (`-`: standard input), else
    /// `prof.pyp`.
    pub fn inputs(&self) -> Vec<&Path> {
        let given = if self.recording.is_empty() { &self.input } else { &self.recording };
        if given.is_empty() {
            vec![Path::new("prof.pyp")]
        } else {
            given.iter().map(PathBuf::as_path).collect()
        }
    }

    /// The first recording to read ([`ReportArgs::inputs`]).
    pub fn input_path(&self) -> &Path {
        self.inputs()[0]
    }

    /// The format the flags select ([`Format::Text`] when none is given).
    pub fn output_format(&self) -> Format {
        let f = &self.format;
        if f.folded {
            Format::Folded
        } else if f.speedscope {
            Format::Speedscope
        } else if f.flamegraph {
            Format::Flamegraph
        } else if f.pprof {
            Format::Pprof
        } else if f.gecko {
            Format::Gecko
        } else if f.otlp {
            Format::Otlp
        } else {
            Format::Text
        }
    }

    /// The filter the arguments describe; unknown state keys are errors listing the valid ones.
    pub fn filter(&self) -> Result<Filter, ReportError> {
        Ok(Filter {
            pids: self.pid.clone(),
            tids: self.tid.clone(),
            gil: Filter::parse_gil(&self.gil)?,
            thread_state: Filter::parse_thread_state(&self.thread_state)?,
            pthread_id: Filter::parse_pthread_id(&self.pthread_id)?,
            status: Filter::parse_status(&self.status)?,
            gc: Filter::parse_gc(&self.gc)?,
            traces: Filter::parse_trace_ids(&self.trace_id)?,
            spans: Filter::parse_span_ids(&self.span_id)?,
        })
    }

    /// What [`ReportArgs::load`] collects: the filter, and only the per-thread, per-state and timeline data
    /// the chosen output shows (each costs time while reading).
    pub fn load_options(&self) -> Result<LoadOptions, ReportError> {
        let format = self.output_format();
        let mut o = LoadOptions::new(self.filter()?, matches!(format, Format::Speedscope | Format::Gecko));
        // Process and thread roots need per-thread stack counts, the text report and speedscope the threads;
        // plain folded stacks and flame graphs neither, and are faster without.
        let roots = self.pid_root || self.tid_root || self.interp_root;
        o.per_thread = roots;
        o.interp_root = self.interp_root;
        o.threads = roots || matches!(format, Format::Text | Format::Speedscope | Format::Gecko);
        o.states = format == Format::Text;
        o.mode = self.mode;
        o.frames = ShowFrames { native: !self.no_native, kernel: !self.no_kernel, glue: self.show_glue };
        o.task_view = !self.no_async;
        o.exact_task_names = self.exact_task_names;
        if matches!(format, Format::Pprof | Format::Otlp) {
            // Labels (attributes): pid, tid, thread and process need per-thread counts, gil the GIL column.
            o.per_thread = true;
            o.threads = true;
            o.states = true;
            o.gil = true;
        }
        Ok(o)
    }

    /// Reads the inputs as these arguments ask: one recording, or several as one profile (see [`Profile::merge`]).
    pub fn load(&self) -> Result<Profile, ReportError> {
        let inputs = self.inputs();
        if inputs.iter().filter(|i| **i == Path::new("-")).count() > 1 {
            return Err(ReportError::Combine(
                "standard input (-) can be read once; give the other recordings by name".to_string(),
            ));
        }
        check_distinct(&inputs)?;
        if self.diff.is_some() {
            let format = self.output_format();
            if !matches!(format, Format::Folded | Format::Flamegraph) {
                return Err(ReportError::Combine(format!(
                    "--diff makes folded stacks or a flame graph, not {}: add --folded or --flamegraph",
                    format.flag()
                )));
            }
            if self.pid_root || self.tid_root || self.interp_root {
                return Err(ReportError::Combine(
                    "--diff compares stacks over all processes: leave out --pid-root, --tid-root and --interp-root"
                        .to_string(),
                ));
            }
        }
        let options = self.load_options()?;
        let mut parts = Vec::with_capacity(inputs.len());
        for input in &inputs {
            parts.push((shown(input), self.load_one(input, &options)?));
        }
        if let Some(base) = &self.diff {
            let base_profile = self.load_one(base, &options)?;
            let mut profile = if parts.len() == 1 {
                parts.remove(0).1
            } else {
                let refs: Vec<(String, &Profile)> = parts.iter().map(|(n, p)| (n.clone(), p)).collect();
                let warnings = Profile::check_combinable(&refs)?;
                let mut p = Profile::merge(parts);
                p.warnings.extend(warnings);
                p
            };
            let pair = [(shown(base), &base_profile), ("the new recording".to_string(), &profile)];
            let warnings = Profile::check_combinable(&pair)?;
            profile.warnings.extend(warnings);
            profile.warnings.extend(base_profile.warnings.iter().map(|w| format!("{}: {w}", shown(base))));
            crate::diff::attach_base(&mut profile, base_profile);
            return Ok(profile);
        }
        if parts.len() == 1 {
            return Ok(parts.remove(0).1);
        }
        let warnings = {
            let refs: Vec<(String, &Profile)> = parts.iter().map(|(n, p)| (n.clone(), p)).collect();
            Profile::check_combinable(&refs)?
        };
        let mut profile = Profile::merge(parts);
        profile.warnings.extend(warnings);
        Ok(profile)
    }

    /// Reads one recording.
    fn load_one(&self, input: &Path, options: &LoadOptions) -> Result<Profile, ReportError> {
        if input == Path::new("-") && io::stdin().is_terminal() {
            let reason = "it is a terminal; pipe a recording in (< prof.pyp) or name one".to_string();
            return Err(ReportError::Open { path: "standard input".into(), reason });
        }
        // What the header tells is refused before reading the whole recording: a wall-clock report of samples that
        // are no fixed time, an off-CPU one of a format older than off-CPU data (1.3).
        if self.mode != Mode::Cpu && input != Path::new("-") {
            if let Some((header, version)) = peek_header(input) {
                let older = version < (1, 3);
                check_mode(self.mode, &shown(input), &header, older.then_some(false))?;
            }
        }
        let profile = Profile::open(input, options).map_err(|e| match e {
            // The usual first mistake: no recording here (yet). Say how to get or name one.
            ReportError::Open { path, reason } if is_missing(input) => ReportError::Open {
                reason: format!("{reason}; record one with `pyperf record`, or give an existing recording's path"),
                path,
            },
            other => other,
        })?;
        // Wall-clock time is also where suspended asyncio tasks waited: the task sweep gives it without --off-cpu.
        let task_waits = self.mode == Mode::Wall && !self.no_async && profile.tables.task_sweep();
        let has_time = profile.off_cpu_min_ns().is_some() || task_waits;
        check_mode(self.mode, &shown(input), &profile.header, Some(has_time))?;
        Ok(profile)
    }

    fn folded_options(&self) -> folded::Options {
        folded::Options {
            lines: !self.no_lines,
            pid_root: self.pid_root,
            tid_root: self.tid_root,
            interp_root: self.interp_root,
        }
    }
}

/// Writes `profile` in the format the arguments choose.
pub fn write_report<W: Write>(args: &ReportArgs, profile: &Profile, out: W) -> io::Result<()> {
    match args.output_format() {
        Format::Text => text::write(profile, &text::Options { top: args.top }, out),
        Format::Folded if profile.diff_base.is_some() => {
            crate::diff::write_folded(profile, &args.folded_options(), out)
        }
        Format::Folded => folded::write(profile, &args.folded_options(), out),
        Format::Speedscope => {
            let o = speedscope::Options { lines: !args.no_lines, name: args.title.clone() };
            speedscope::write(profile, &o, out)
        }
        Format::Flamegraph => {
            let o = flamegraph::Options {
                folded: args.folded_options(),
                title: args.title.clone().or_else(|| {
                    let base = args.diff.as_ref()?;
                    let new: Vec<String> = args.inputs().iter().map(|p| shown(p)).collect();
                    Some(format!("Differential: {} vs {}", new.join(", "), shown(base)))
                }),
                icicle: args.icicle,
                width: args.width.map(|w| w as usize),
                ..Default::default()
            };
            flamegraph::write(profile, &o, out)
        }
        Format::Pprof => pprof::write(profile, &pprof::Options { lines: !args.no_lines }, out),
        Format::Gecko => gecko::write(profile, &gecko::Options { name: args.title.clone() }, out),
        Format::Otlp => otlp::write(profile, &otlp::Options { lines: !args.no_lines }, out),
    }
}

/// Runs `pyperf report`: reads the input, prints warnings to standard error as `pyperf-report: warning: ...`,
/// writes the report to standard output or to `-o FILE` (the way the recorder writes a recording: never through a
/// symlink, never over the input or, without `--force`, another recording, mode 0600, complete or not at all).
/// A closed output pipe (`| head`) ends it successfully.
pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    match run_report(args) {
        Err(e) if e.is_broken_pipe() => Ok(()),
        other => Ok(other?),
    }
}

/// For a command line that did not parse (clap's `try_parse`): `--help` and `--version` go to standard output
/// (closed or full: one line on standard error, exit code 1; a closed pipe: success), anything else is clap's usage
/// error on standard error with exit code 2. Returns the exit code.
pub fn exit_for_clap_error(err: &clap::Error) -> ExitCode {
    let code = u8::try_from(err.exit_code()).unwrap_or(1);
    if err.use_stderr() {
        let _ = err.print();
        return ExitCode::from(code);
    }
    let printed = if output::stdout_closed_at_start() {
        Err(stdout_closed())
    } else {
        err.print().and_then(|()| io::stdout().flush())
    };
    match printed {
        Ok(()) => ExitCode::from(code),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(code),
        Err(e) => {
            let _ = writeln!(io::stderr(), "{}: {}", program(), ReportError::write(STDOUT, e));
            ExitCode::FAILURE
        }
    }
}

/// How messages name standard output.
const STDOUT: &str = "standard output";

fn stdout_closed() -> io::Error {
    io::Error::other("it is closed")
}

/// How messages name the input: its path as given, or `standard input`.
fn shown(input: &Path) -> String {
    if input == Path::new("-") {
        "standard input".to_string()
    } else {
        input.display().to_string()
    }
}

/// Refuses a recording given twice (`-i a.pyp -i a.pyp`, or as `a.pyp` and `./a.pyp`, a hard link, or a file and
/// standard input redirected from it): its samples would silently count twice. One file is one (device, inode);
/// a file that cannot be looked at is left to loading, which says why.
fn check_distinct(inputs: &[&Path]) -> Result<(), ReportError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mut seen: Vec<((u64, u64), &Path)> = Vec::with_capacity(inputs.len());
        for &input in inputs {
            // Standard input's file when it is redirected from one; a pipe is read once anyway.
            let meta = if input == Path::new("-") { std::fs::metadata("/dev/stdin") } else { std::fs::metadata(input) };
            let Ok(meta) = meta else { continue };
            if !meta.is_file() {
                continue;
            }
            let id = (meta.dev(), meta.ino());
            if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
                let (a, b) = (names::escape_text(&shown(first)), names::escape_text(&shown(input)));
                let what =
                    if a == b { format!("{a} is given twice") } else { format!("{a} and {b} are the same file") };
                return Err(ReportError::Combine(format!("{what}: a recording counts once in a report; give it once")));
            }
            seen.push((id, input));
        }
    }
    #[cfg(not(unix))]
    let _ = inputs;
    Ok(())
}

/// The header and format version of the recording at `path`, read alone (the preamble and the header chunk);
/// `None` when they cannot be read (loading it says why).
fn peek_header(path: &Path) -> Option<(pyperf_format::Header, (u16, u16))> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let reader = pyperf_format::Reader::new(io::BufReader::new(file)).ok()?;
    Some((reader.header().clone(), reader.version()))
}

/// Whether `mode` can report the recording `input` (named so in messages): off-cpu and wall need off-CPU data
/// (`has_off_cpu`, once known), wall a time per CPU sample (a clock event, or a rate in Hz).
fn check_mode(
    mode: Mode,
    input: &str,
    header: &pyperf_format::Header,
    has_off_cpu: Option<bool>,
) -> Result<(), ReportError> {
    if mode == Mode::Cpu {
        return Ok(());
    }
    if has_off_cpu == Some(false) {
        return Err(ReportError::Mode(format!(
            "{input} has no off-CPU data (recorded without --off-cpu): use --mode cpu, or record with pyperf record \
             --off-cpu"
        )));
    }
    if let (Mode::Wall, pyperf_format::Rate::Period(n)) = (mode, header.rate) {
        if header.event != "cpu-clock" {
            return Err(ReportError::Mode(format!(
                "{input} was recorded with -e {} -c {n}: a CPU sample is no fixed time, so it cannot be added to \
                 off-CPU time for --mode wall; use --mode off-cpu or --mode cpu (or record with -F HZ)",
                names::escape_text(&header.event)
            )));
        }
    }
    Ok(())
}

/// Whether nothing is at `path` (not even a dangling symlink).
fn is_missing(path: &Path) -> bool {
    path != Path::new("-") && std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
}

fn run_report(args: &ReportArgs) -> Result<(), ReportError> {
    let format = args.output_format();
    let mut inputs = args.inputs();
    // The base of --diff is an input too: never overwritten.
    if let Some(base) = &args.diff {
        inputs.push(base);
    }
    // What can be refused without reading the input is refused first: a long recording is not read for nothing.
    match &args.output {
        Some(path) => output::check_target(path, &inputs, args.force)?,
        None => {
            if output::stdout_closed_at_start() {
                return Err(ReportError::write(STDOUT, stdout_closed()));
            }
            if let Some((what, example)) = format.not_for_terminal() {
                if io::stdout().is_terminal() {
                    return Err(ReportError::Terminal { what, example });
                }
            }
        }
    }
    let mut profile = args.load()?;
    if matches!(format, Format::Speedscope | Format::Gecko) {
        profile.warnings.extend(crate::tracks::note(&profile));
    }
    {
        let mut stderr = io::stderr().lock();
        for w in &profile.warnings {
            let _ = writeln!(stderr, "{}: warning: {}", program(), names::escape_text(w));
        }
    }
    // Neither an empty picture nor a speedscope file without profiles (speedscope refuses it) helps anyone.
    if matches!(format, Format::Flamegraph | Format::Speedscope) {
        let empty = match profile.mode {
            Mode::Cpu => profile.matched.samples == 0,
            Mode::OffCpu | Mode::Wall => profile.total() == 0,
        };
        if empty {
            return Err(ReportError::Empty(flamegraph::nothing_to_draw(profile.mode).to_string()));
        }
    }
    if matches!(format, Format::Pprof | Format::Otlp) {
        let frames = pprof::frames_needed(&profile);
        if frames > pprof::MAX_FRAMES {
            return Err(ReportError::TooLarge(format!(
                "a pprof profile of this recording would hold {frames} frames (its stacks' depths added up), more \
                 than pprof tools can load ({}): narrow it with --pid, --tid or --gil, or use --folded or --flamegraph",
                pprof::MAX_FRAMES
            )));
        }
    }
    match &args.output {
        Some(path) => {
            let target = path.display().to_string();
            // Created only now, after the input was read; dropped on an error, it is removed again.
            let file = Replacement::create(path)?;
            let mut out = BufWriter::with_capacity(1 << 16, file.file());
            write_report(args, &profile, &mut out)
                .and_then(|()| out.flush())
                .map_err(|e| ReportError::write(&target, e))?;
            drop(out);
            file.commit(&inputs, args.force)
        }
        None => {
            let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
            write_report(args, &profile, &mut out).and_then(|()| out.flush()).map_err(|e| ReportError::write(STDOUT, e))
        }
    }
}

/// Arguments of `pyperf annotate`: which function, which recordings and samples (as `pyperf report`), how to show it.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct AnnotateArgs {
    /// The function: its name as `pyperf report` shows it (`Worker.run`; `run` for every `*.run`), or FILE:LINE (the
    /// sampled function of FILE whose lines hold LINE; FILE may be the path's end, `app.py`). None: the functions with
    /// the most self time
    #[arg(value_name = "FUNCTION")]
    pub function: Option<String>,

    /// Recording to read (`-` for standard input); repeat to read several recordings as one [default: prof.pyp]
    #[arg(short, long, value_name = "FILE")]
    pub input: Vec<PathBuf>,

    /// Annotate at most N functions: the top N by self time, or of those a name matches, the top N by total time
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub top: usize,

    /// A self-contained HTML heatmap (open it in a web browser; no script, nothing fetched) instead of text
    #[arg(long)]
    pub html: bool,

    /// Write to FILE instead of standard output (a new file, mode 0600, renamed over FILE once complete; never a
    /// symlink, the input, or without --force a recording)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Let -o FILE replace a pyperf recording (never the input)
    #[arg(long, requires = "output")]
    pub force: bool,

    /// Colour the shares: auto (when standard output is a terminal and NO_COLOR is unset), always, never
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub color: String,

    /// Never read source files from this machine: only the recording's copies (`pyperf record --source`)
    #[arg(long)]
    pub no_local: bool,

    /// What to weigh: cpu, off-cpu, wall (as `pyperf report --mode`)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Mode::Cpu, hide_possible_values = true)]
    pub mode: Mode,
    /// Only these processes (as `pyperf report --pid`)
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Only these threads
    #[arg(long, value_name = "TID", value_delimiter = ',')]
    pub tid: Vec<u32>,
    /// Only samples in these GIL states (as `pyperf report --gil`)
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub gil: Vec<String>,
    /// Only samples with these thread-state matches (as `pyperf report --thread-state`)
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub thread_state: Vec<String>,
    /// Only samples with these pthread-id matches (as `pyperf report --pthread-id`)
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    pub pthread_id: Vec<String>,
    /// Only samples with these stack statuses (as `pyperf report --status`)
    #[arg(long, value_name = "STATUS", value_delimiter = ',')]
    pub status: Vec<String>,
    /// Samples taken in the garbage collector: mark or hide (kept), only, drop (as `pyperf report --gc`)
    #[arg(long, value_name = "MODE", default_value = "mark")]
    pub gc: String,
    /// The plain thread view of an asyncio recording (as `pyperf report --no-async`)
    #[arg(long)]
    pub no_async: bool,
}

impl AnnotateArgs {
    /// The report arguments that load the same samples (inputs, filters, mode).
    pub fn report_args(&self) -> ReportArgs {
        ReportArgs {
            input: self.input.clone(),
            mode: self.mode,
            pid: self.pid.clone(),
            tid: self.tid.clone(),
            gil: self.gil.clone(),
            thread_state: self.thread_state.clone(),
            pthread_id: self.pthread_id.clone(),
            status: self.status.clone(),
            gc: self.gc.clone(),
            no_async: self.no_async,
            ..ReportArgs::default()
        }
    }

    /// The annotation options; `terminal`: whether the output is a terminal (for `--color auto`).
    pub fn options(&self, terminal: bool) -> Result<crate::annotate::Options, ReportError> {
        let color = match self.color.as_str() {
            "always" => true,
            "never" => false,
            "auto" => terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            other => {
                return Err(ReportError::UnknownKey {
                    what: "colour choice",
                    key: other.to_string(),
                    valid: "auto, always, never".to_string(),
                })
            }
        };
        Ok(crate::annotate::Options {
            target: crate::annotate::Target::parse(self.function.as_deref()),
            top: self.top.max(1),
            color: color && !self.html,
            html: self.html,
            local: !self.no_local,
        })
    }
}

/// Runs `pyperf annotate`: reads the recordings as `pyperf report` does (warnings to standard error), annotates,
/// writes to standard output or `-o FILE` (as the report does). A closed output pipe ends it successfully.
pub fn run_annotate(args: &AnnotateArgs) -> anyhow::Result<()> {
    match annotate_to_output(args) {
        Err(e) if e.is_broken_pipe() => Ok(()),
        other => Ok(other?),
    }
}

fn annotate_to_output(args: &AnnotateArgs) -> Result<(), ReportError> {
    let report = args.report_args();
    let inputs = report.inputs();
    let terminal = args.output.is_none() && io::stdout().is_terminal();
    let options = args.options(terminal)?;
    match &args.output {
        Some(path) => output::check_target(path, &inputs, args.force)?,
        None => {
            if output::stdout_closed_at_start() {
                return Err(ReportError::write(STDOUT, stdout_closed()));
            }
            if args.html && terminal {
                return Err(ReportError::Terminal { what: "an HTML page", example: "annotate.html" });
            }
        }
    }
    let profile = report.load()?;
    let annotated = crate::annotate::annotate(&profile, &options);
    {
        let mut stderr = io::stderr().lock();
        for w in profile.warnings.iter().chain(annotated.as_ref().map(|a| &a.warnings).into_iter().flatten()) {
            let _ = writeln!(stderr, "{}: warning: {}", program(), names::escape_text(w));
        }
    }
    let annotated = annotated?;
    match &args.output {
        Some(path) => {
            let target = path.display().to_string();
            let file = Replacement::create(path)?;
            let mut out = BufWriter::with_capacity(1 << 16, file.file());
            crate::annotate::write(&annotated, &options, &mut out)
                .and_then(|()| out.flush())
                .map_err(|e| ReportError::write(&target, e))?;
            drop(out);
            file.commit(&inputs, args.force)
        }
        None => {
            let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
            crate::annotate::write(&annotated, &options, &mut out)
                .and_then(|()| out.flush())
                .map_err(|e| ReportError::write(STDOUT, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, Command, FromArgMatches};

    /// The filter flags' help lists every key the filter accepts (a state added to the format crate is offered).
    #[test]
    fn filter_help_lists_every_key() {
        use pyperf_format::{GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};
        let cmd = ReportArgs::augment_args(Command::new("pyperf-report"));
        let help = |id: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).expect("argument");
            arg.get_help().expect("help").to_string()
        };
        for (id, keys) in [
            ("gil", GilState::keys()),
            ("thread_state", ThreadStateMatch::keys()),
            ("pthread_id", PthreadIdMatch::keys()),
            ("status", StackStatus::keys()),
        ] {
            // `Only ... states: a, b, c (repeat or comma-separate)`: the keys are the pieces between the punctuation.
            let text = help(id);
            for key in keys {
                assert!(
                    text.split([':', ',', '(']).any(|piece| piece.trim() == key),
                    "--{id} help lacks {key}: {text}"
                );
            }
        }
    }

    /// [`Format::ALL`] is the list the tests iterate over: it must hold every flag of the `format` group, and
    /// each flag must select its own format.
    #[test]
    fn format_list_matches_the_flags() {
        let cmd = ReportArgs::augment_args(Command::new("pyperf-report"));
        let group = cmd.get_groups().find(|g| g.get_id() == "format").expect("format group");
        let mut flags: Vec<String> = group
            .get_args()
            .map(|id| {
                let arg = cmd.get_arguments().find(|a| a.get_id() == id).expect("group member");
                format!("--{}", arg.get_long().expect("long flag"))
            })
            .collect();
        let mut listed: Vec<String> = Format::ALL.iter().map(|f| f.flag().to_string()).collect();
        flags.sort();
        listed.sort();
        assert_eq!(flags, listed, "Format::ALL and FormatFlags differ");
        for format in Format::ALL {
            let matches = cmd.clone().try_get_matches_from(["pyperf-report", format.flag()]).expect("parses");
            let parsed = ReportArgs::from_arg_matches(&matches).expect("arguments");
            assert_eq!(parsed, ReportArgs::with_format(format));
            assert_eq!(parsed.output_format(), format);
        }
    }
}
