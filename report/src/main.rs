//! `pyperf-report`: reports on pyperf recordings anywhere (no Linux, BPF or root needed).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Report on a pyperf recording: text summary, folded stacks, speedscope JSON or SVG flame graph.
#[derive(Debug, Parser)]
#[command(name = "pyperf-report", version)]
struct Cli {
    #[command(flatten)]
    report: pyperf_report::ReportArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match pyperf_report::run(&cli.report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e:#}", pyperf_report::program());
            ExitCode::FAILURE
        }
    }
}
