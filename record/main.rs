//! `pyperf`: record CPython stacks with eBPF (`pyperf record`), read recordings (`pyperf report`, `pyperf annotate`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

/// Where the reference pages are: in the source tree, and where the .deb installs them.
const DOCS: &str = "Reference: docs/README.md in the source, /usr/share/doc/pyperf/docs/ when installed from the .deb";

/// A command's --help footer: its reference pages.
fn doc_page(pages: &str) -> String {
    format!("Reference: {pages} in docs/ (the source) or /usr/share/doc/pyperf/docs/ (the .deb)")
}

#[derive(Parser)]
#[command(name = "pyperf", version, about = "Sample running Python programs from the kernel with eBPF")]
#[command(after_help = DOCS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sample Python processes and write a recording (needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE).
    #[command(after_help = doc_page("record.md, and sampling.md, off-cpu.md, native.md, asyncio.md, push.md"))]
    Record(pyperf::cli::RecordArgs),
    /// A live view of the functions that take the time of running Python processes, like top (needs root).
    #[command(after_help = doc_page("top.md"))]
    Top(pyperf::top::TopArgs),
    /// Every thread of a running Python process now: its Python stack and state, without stopping it.
    #[command(after_help = doc_page("dump.md"))]
    Dump(pyperf::dump::DumpArgs),
    /// Read recordings: text summary, folded stacks, speedscope JSON, an SVG flame graph, pprof or Firefox Profiler.
    #[command(after_help = doc_page("report.md, and outputs.md"))]
    Report(pyperf_report::ReportArgs),
    /// A function's source with each line's self and total share, in the terminal or as an HTML heatmap (--html).
    #[command(after_help = doc_page("annotate.md"))]
    Annotate(pyperf_report::AnnotateArgs),
    /// Print a shell's completion script for pyperf (bash: `pyperf completions bash > /etc/bash_completion.d/pyperf`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages of pyperf and of each of its commands (pyperf.1, pyperf-record.1, ...) into DIR.
    Man {
        /// The directory to write them into (made if missing).
        dir: PathBuf,
    },
}

/// The completion script for `shell`, from the same definitions as --help.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "pyperf", &mut out);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out).context("writing the completion script")?;
    Ok(ExitCode::SUCCESS)
}

/// pyperf.1 and pyperf-COMMAND.1 for every command, from the same definitions as --help.
fn man_pages(dir: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let top = Cli::command();
    let mut pages = vec![("pyperf".to_string(), top.clone())];
    for sub in top.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("pyperf-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name).bin_name(format!("pyperf {}", sub.get_name()))));
    }
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page).with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    standard_streams_open();
    // The recorders' usage errors are one line, naming the front end's --help.
    let recorder = std::env::args_os().nth(1).filter(|a| a == "record" || a == "top");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && recorder.is_some() => {
            let sub = recorder.as_deref().map(|s| s.to_string_lossy()).unwrap_or_default();
            pyperf::say!("pyperf: {}", usage_error_line(&e.render().to_string(), &sub));
            return ExitCode::from(2);
        }
        // --help / --version and report's usage errors: stdout closed or full is one line, never a panic.
        Err(e) => return pyperf_report::exit_for_clap_error(&e),
    };
    let result = match cli.command {
        Command::Record(args) => pyperf::cli::record(&args),
        Command::Report(args) => pyperf_report::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Annotate(args) => pyperf_report::run_annotate(&args).map(|()| ExitCode::SUCCESS),
        Command::Dump(args) => pyperf::dump::dump(&args),
        Command::Top(args) => pyperf::top::top(&args),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man_pages(&dir),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            pyperf::say!("pyperf: {}", pyperf::error_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// Started with stdin, stdout or stderr closed (`2>&-`), the first files pyperf opens would take those numbers, and
/// messages meant for stderr would land in a BPF map's descriptor or in the recording itself: put /dev/null there.
fn standard_streams_open() {
    for fd in 0..3 {
        // SAFETY: fcntl(F_GETFD) only queries the descriptor; open and dup2 of /dev/null onto a closed standard
        // descriptor (the same thing a shell does for `<&-` followed by a redirection).
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 && null != fd {
                    libc::dup2(null, fd);
                    libc::close(null);
                }
            }
        }
    }
}

/// clap's usage error for `pyperf record` or `pyperf top` (`sub`) on one line, as pyperf's other errors: its message
/// and tips, without the usage (`sub --help` has it).
fn usage_error_line(rendered: &str, sub: &str) -> String {
    let mut parts = Vec::new();
    let mut in_usage = false;
    for line in rendered.lines().map(str::trim) {
        if line.is_empty() {
            in_usage = false;
            continue;
        }
        in_usage |= line.starts_with("Usage:");
        if in_usage || line.starts_with("For more information") {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    format!("{} (pyperf {sub} --help)", parts.join(" "))
}

/// `pyperf report | head` closing the pipe early is success, as for any Unix filter.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
