//! `pyperf-report`: reports on pyperf recordings anywhere (no Linux, BPF or root needed).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Report on pyperf recordings: text summary, folded stacks, speedscope JSON, SVG flame graph, pprof or Firefox Profiler.
#[derive(Debug, Parser)]
#[command(name = "pyperf-report", version)]
struct Cli {
    #[command(flatten)]
    report: pyperf_report::ReportArgs,
}

fn main() -> ExitCode {
    // Not `Cli::parse()`: it would print `--help` into a closed or full standard output and exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return pyperf_report::exit_for_clap_error(&e),
    };
    match pyperf_report::run(&cli.report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e:#}", pyperf_report::program());
            ExitCode::FAILURE
        }
    }
}
