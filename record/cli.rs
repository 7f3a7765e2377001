//! `pyperf record`: its arguments, checked, and the session they set up.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::plan::{NativeArgs, Plan, PushArgs, SamplingArgs, TargetArgs};
use crate::privileges;
use crate::signals;
use crate::sink::file::FileSink;
use crate::sink::output::{self, Output};
use crate::targets::{Targets, Workload};

/// `pyperf record`'s arguments: the shared ones ([`crate::plan`]) and its own.
#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    /// Output file. An existing recording there is kept as FILE.old, as perf does. Created before anything starts;
    /// under sudo it belongs to the user who ran sudo where they could have created it (else it stays root's). A
    /// second pyperf writing the same FILE is refused.
    #[arg(short = 'o', long = "output", default_value = "prof.pyp")]
    pub output: PathBuf,
    /// What to record.
    #[command(flatten)]
    pub target: TargetArgs,
    /// How to sample.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Native and kernel frames.
    #[command(flatten)]
    pub native: NativeArgs,
    /// Continuous profiling.
    #[command(flatten)]
    pub push: PushArgs,
    /// Store the source of every file with a sampled Python frame in the recording (with its SHA-256), so that
    /// `pyperf annotate` shows the code that ran on any machine, later. Off by default: recordings travel, and this
    /// puts the program's code in them. Read in the process's own file system when a sample first names a file; at
    /// most 4 MiB a file and 64 MiB a recording; only files the process's user may read; the others are listed,
    /// not stored.
    #[arg(long = "source")]
    pub source: bool,
    /// Measure the BPF program's own run time (kernel BPF statistics) and print it in the summary.
    #[arg(long = "bpf-stats")]
    pub bpf_stats: bool,
}

/// Fails if a signal asked pyperf to stop before the recording started: nothing is started then, and the output
/// is left as it was.
fn stopped_during_start(output: &std::path::Path) -> Result<()> {
    if !signals::stop_requested() {
        return Ok(());
    }
    bail!("stopped by a signal before recording started: {} is left as it was", output.display())
}

/// Runs `pyperf record`; its exit code is the workload's, if it started one.
pub fn record(args: &RecordArgs) -> Result<ExitCode> {
    // First of all: a SIGINT, SIGTERM or SIGHUP during the start must not kill pyperf half way (a file created and
    // never written). One before the command is started undoes the start (see `stopped_during_start`); one after
    // it ends the recording at once, complete.
    signals::install();
    let plan = Plan::new(&args.target, &args.sampling, Some(&args.native), &args.push)?;

    // Everything that can fail at start fails before the output file exists, except what the output file itself
    // needs, which fails before a command is started: a command never runs for a recording that cannot be made.
    output::check(&args.output)?;
    privileges::check_all()?;
    let mut sampler = plan.sampler()?;
    if args.bpf_stats {
        sampler.enable_bpf_stats().context("cannot measure the BPF program")?;
    }
    let targets = plan.targets()?;
    stopped_during_start(&args.output)?;
    // A failure from here to the end of the start removes the new file and puts the previous one back (and
    // dropping the targets ends a command it started).
    let output = Output::create(&args.output)?;
    let created = output.guard();
    // A start guard is armed: on the way out it removes the new file and puts the previous one back.
    stopped_during_start(&args.output)?;
    let targets = match targets {
        Some(t) => t,
        None => {
            sampler.follow_next_exec().context("cannot start sampling")?;
            Targets::workload(Workload::spawn(&args.target.command)?)
        }
    };

    let header = plan.header();
    let file = Box::new(FileSink::new(output, &header)?);
    let sinks = plan.sinks(&header, file, Vec::new())?;
    let mut session = plan.session(sampler, targets, Box::new(sinks))?;
    if args.source {
        session = session.with_sources();
    }
    session.start()?;
    created.keep();

    // Counted from the command's spawn (or the end of the start for the other targets), as the status line is.
    let deadline = plan.deadline(session.started());
    let stop = match session.run(deadline, std::io::stderr().is_terminal()) {
        Ok(stop) => stop,
        // A full disk: one line, what is on disk stays readable, the command runs on (see Session::abandon).
        Err(e) => return session.abandon(&e),
    };
    let code = session.finish(args.bpf_stats, stop)?;
    let shown = args.output.display().to_string();
    // Quoted for a shell when it needs it, so the line can be pasted as is.
    let plain = shown.chars().all(|c| c.is_alphanumeric() || "-_./=:,+@%".contains(c));
    let path = if plain { shown } else { format!("'{}'", shown.replace('\'', r"'\''")) };
    crate::say!(
        "pyperf: next: pyperf report {path} (or --flamegraph -o flame.svg, --speedscope -o prof.speedscope.json)"
    );
    Ok(code)
}
