//! `pyperf top`: a live view of where the followed Python processes spend their time, like `top`: functions by
//! own and total share over a recent window or since the start, refreshed every `--interval` seconds. The same
//! sampler, symbolizer and session as `record`, set up by the same [`crate::plan`]; the view is a sink
//! ([`crate::sink::live`]), with the `.pyp` of `-o` and a `--push` beside it.
//!
//! On a terminal (stdin and stdout): a full-screen view with keys; pyperf's own messages and a started command's
//! output are kept aside while it is up and shown when it ends. The terminal is put back on every way out: `q`,
//! Ctrl-C (a key then), SIGTERM, the end of the targets, `--duration`, an error, a panic. Otherwise (stdout a pipe
//! or a file): a plain table every interval, and the since-start table at the end.

pub mod term;
pub mod view;

use std::io::{IsTerminal, Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::plan::{Plan, PushArgs, SamplingArgs, TargetArgs};
use crate::privileges;
use crate::sampler::Sampler;
use crate::signals;
use crate::sink::file::FileSink;
use crate::sink::live::{lock, Live, LiveSink};
use crate::sink::output::{self, Output};
use crate::sink::Sink;
use crate::targets::{Targets, Workload};
use view::{render, ViewState};

/// `pyperf top`'s arguments: the shared ones ([`crate::plan`], their help worded for a view where it differs from
/// `record`'s) and its own.
#[derive(Args, Debug, Clone)]
#[command(
    mut_arg("pid", |a| a.help("Watch these running processes (comma-separated or repeated)")),
    mut_arg("all", |a| a.help("Watch every Python process on the host, including ones that start meanwhile")),
    mut_arg("cgroup", |a| a.help("Watch the Python processes of this cgroup and the cgroups below it")),
    mut_arg("command", |a| {
        a.help("Start this command and watch it (its output is shown when the view ends on a terminal)")
    }),
    mut_arg("duration", |a| a.help("Stop after this many seconds (default: until q, Ctrl-C or the end of the targets)")),
    mut_arg("off_cpu", |a| {
        a.help(
            "Also count time off CPU (blocked, sleeping, waiting for the GIL, preempted): the view shows wall-clock \
             time (`m` switches between wall, CPU and off-CPU time)",
        )
    }),
    mut_arg("off_cpu_min", |a| {
        a.help("With --off-cpu: intervals shorter than this are sampled (see `pyperf record --off-cpu-min`)")
    }),
    mut_arg("no_uprobe", |a| {
        a.help(
            "Never put a uprobe in a target (see `pyperf record --no-uprobe`): deep stacks before 3.14 then cost \
             more to sample",
        )
    }),
)]
pub struct TopArgs {
    /// What to watch.
    #[command(flatten)]
    pub target: TargetArgs,
    /// How to sample.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Seconds between refreshes (0.1-60).
    #[arg(long = "interval", default_value_t = 1.0)]
    pub interval: f64,
    /// Length of the recent window in seconds (1-3600); `w` switches to the sums since the start.
    #[arg(long = "window", default_value_t = 5)]
    pub window: u64,
    /// Also record everything into this .pyp file, as `pyperf record -o` would.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Rows of functions in the plain table (stdout not a terminal).
    #[arg(long = "rows", default_value_t = 20)]
    pub rows: usize,
    /// Continuous profiling.
    #[command(flatten)]
    pub push: PushArgs,
}

/// Runs `pyperf top`.
pub fn top(args: &TopArgs) -> Result<ExitCode> {
    let plan = Plan::new(&args.target, &args.sampling, None, &args.push)?;
    if !(0.1..=60.0).contains(&args.interval) {
        bail!("--interval must be between 0.1 and 60 seconds");
    }
    if !(1..=3600).contains(&args.window) {
        bail!("--window must be between 1 and 3600 seconds");
    }
    let interactive = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();

    // Before anything is created: a SIGINT, SIGTERM or SIGHUP during the start ends the view at its first turn,
    // with a complete -o file, instead of killing pyperf between the file's creation and its header.
    signals::install();
    if let Some(o) = &args.output {
        output::check(o)?;
    }
    privileges::check_all()?;
    let sampler = plan.sampler()?;
    let targets = plan.targets()?;
    let what = args.target.describe();
    let file = match &args.output {
        Some(path) => Some(Output::create(path)?),
        None => None,
    };
    let created = file.as_ref().map(|f| f.guard());

    // From here the screen is the view's: messages are kept aside (see `Aside`) until it ends.
    let aside = if interactive { Some(Aside::start()?) } else { None };
    let terminal =
        if interactive { Some(term::Terminal::enter().context("cannot set up the terminal")?) } else { None };
    let result = run(args, plan, sampler, targets, file, created, &what, terminal);
    term::restore_now();
    if let Some(a) = aside {
        a.end();
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn run(
    args: &TopArgs,
    plan: Plan,
    sampler: Sampler,
    targets: Option<Targets>,
    file: Option<Output>,
    created: Option<output::StartGuard>,
    what: &str,
    terminal: Option<term::Terminal>,
) -> Result<ExitCode> {
    let interactive = terminal.is_some();
    let mut sampler = sampler;
    if targets.is_none() {
        sampler.follow_next_exec().context("cannot start sampling")?;
    }
    let command = &args.target.command;
    let targets = match targets {
        Some(t) => t,
        None if interactive => {
            // The view owns the terminal: the command reads nothing from it and writes to where pyperf's
            // messages are kept aside.
            let out = std::fs::File::from(std::io::stderr().as_fd().try_clone_to_owned()?);
            Targets::workload(Workload::spawn_with(command, std::process::Stdio::null(), out.into())?)
        }
        None => Targets::workload(Workload::spawn(command)?),
    };
    let header = plan.header();
    // Without a time per sample (cycles with -c), the view counts samples.
    let sample_weight = plan.period_ns().unwrap_or(1);
    let live = Arc::new(Mutex::new(Live::new(args.window, sample_weight, &header.arch)));
    let view: Box<dyn Sink> = Box::new(LiveSink::new(live.clone()));
    // The file, when there is one, is the recording (its counts are the summary's); else the view is.
    let sinks = match file {
        Some(o) => plan.sinks(&header, Box::new(FileSink::new(o, &header)?), vec![view])?,
        None => plan.sinks(&header, view, Vec::new())?,
    };
    let off_cpu = plan.off_cpu();
    let mut session = plan.session(sampler, targets, Box::new(sinks))?;
    session.start()?;
    if let Some(c) = created {
        c.keep();
    }
    let started = session.started();
    let done = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_secs_f64(args.interval);
    let view = {
        let (live, done, what) = (live.clone(), done.clone(), what.to_string());
        let rows = args.rows;
        std::thread::Builder::new()
            .name("pyperf-top".into())
            .spawn(move || match terminal {
                Some(t) => interactive_view(t, &live, &done, &what, started, interval, off_cpu),
                None => plain_view(&live, &done, &what, started, interval, off_cpu, rows),
            })
            .context("cannot start the view")?
    };
    let deadline = plan.deadline(started);
    let stop = session.run(deadline, false);
    done.store(true, Ordering::SeqCst);
    let view_result = view.join();
    term::restore_now();
    let stop = match stop {
        Ok(s) => s,
        Err(e) => return session.abandon(&e),
    };
    let code = session.finish(false, stop)?;
    // The view's output error (a closed pipe) ends it: not pyperf's failure.
    if let Ok(Err(e)) = view_result {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            crate::say!("pyperf: the view ended: {e}");
        }
    }
    // What was seen, since the start, in the terminal it is left in (the view's screen is gone).
    let mut st = ViewState::new(off_cpu);
    st.recent = false;
    let lines = render(&lock(&live), &st, what, started.elapsed().as_secs_f64(), 200, args.rows + 4);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{}", lines.join("\n"));
    let _ = out.flush();
    Ok(code)
}

/// The terminal view: draws every `interval` and after each key, until `q` (or Ctrl-C) or `done`.
fn interactive_view(
    t: term::Terminal,
    live: &Mutex<Live>,
    done: &AtomicBool,
    what: &str,
    started: Instant,
    interval: Duration,
    off_cpu: bool,
) -> std::io::Result<()> {
    let mut st = ViewState::new(off_cpu);
    let mut frame: Vec<String> = Vec::new();
    let mut next = Instant::now();
    let mut dirty = true;
    while !done.load(Ordering::SeqCst) {
        if let Some(k) = t.key(50) {
            if !st.key(k, &mut lock(live)) {
                signals::request_stop();
                break;
            }
            dirty = true;
        }
        let now = Instant::now();
        if now >= next || dirty {
            let (w, h) = term::size().unwrap_or((80, 24));
            if !st.paused || frame.is_empty() || dirty {
                let body = render(&lock(live), &st, what, started.elapsed().as_secs_f64(), w, h.saturating_sub(1));
                if !st.paused || frame.is_empty() {
                    frame = body;
                } else {
                    // Paused: the table stays as it was; the header (its first two lines) says so.
                    for (f, b) in frame.iter_mut().zip(body).take(2) {
                        *f = b;
                    }
                }
            }
            draw(&frame, &view::help(off_cpu), w, h)?;
            if now >= next {
                next = now + interval;
            }
            dirty = false;
        }
    }
    drop(t);
    Ok(())
}

fn draw(lines: &[String], help: &str, width: usize, height: usize) -> std::io::Result<()> {
    let mut s = String::from("\x1b[H");
    for l in lines.iter().take(height.saturating_sub(1)) {
        s.push_str(l);
        s.push_str("\x1b[K\r\n");
    }
    s.push_str("\x1b[J");
    // The key help on the last row, in reverse video.
    let help = pyperf_report::names::fit_width(help, width);
    s.push_str(&format!("\x1b[{height};1H\x1b[7m{help}\x1b[0m\x1b[K"));
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()
}

/// The plain view: a table every `interval` on stdout, until `done`.
fn plain_view(
    live: &Mutex<Live>,
    done: &AtomicBool,
    what: &str,
    started: Instant,
    interval: Duration,
    off_cpu: bool,
    rows: usize,
) -> std::io::Result<()> {
    let st = ViewState::new(off_cpu);
    let mut next = Instant::now() + interval;
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() < next {
            continue;
        }
        next += interval;
        let lines = render(&lock(live), &st, what, started.elapsed().as_secs_f64(), 200, rows + 4);
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}\n", lines.join("\n"))?;
        out.flush()?;
    }
    Ok(())
}

/// pyperf's stderr (and a started command's output) kept in a file while the view is up, then shown.
struct Aside {
    saved: std::os::fd::OwnedFd,
    file: std::fs::File,
    path: PathBuf,
}

/// More than this is left in the file (its path said) rather than shown.
const ASIDE_SHOWN: u64 = 64 * 1024;

impl Aside {
    fn start() -> Result<Aside> {
        let path = std::env::temp_dir().join(format!("pyperf-top-{}.log", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let saved = std::io::stderr().as_fd().try_clone_to_owned().context("cannot keep stderr")?;
        // SAFETY: dup2 of an open file onto stderr; the original is kept in `saved`.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), libc::STDERR_FILENO) } < 0 {
            bail!("cannot keep pyperf's messages aside: {}", std::io::Error::last_os_error());
        }
        Ok(Aside { saved, file, path })
    }

    /// Puts stderr back and shows what was kept (or says where it is when it is long).
    fn end(mut self) {
        // SAFETY: dup2 of the saved descriptor back onto stderr.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&self.saved), libc::STDERR_FILENO) };
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        if len == 0 {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        if len > ASIDE_SHOWN {
            crate::say!("pyperf: {} bytes of messages and command output are in {}", len, self.path.display());
            return;
        }
        let mut text = String::new();
        let _ = self.file.rewind();
        let _ = self.file.read_to_string(&mut text);
        crate::say_raw!("{text}");
        let _ = std::fs::remove_file(&self.path);
    }
}
