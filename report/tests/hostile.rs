//! Hostile crafted recordings (tests/support/crafted.rs, also fuzz seeds): small files shaped to make a report
//! quadratic. Every output format must stay under a memory bound, measured by a counting global allocator, and its
//! time must grow linearly with the input (and with its output, where the output itself is large).
//!
//! The memory bound is [`bound`]: 2 MiB + 128 x the file size. Why that: the format crate's reader lets a file
//! decode to 64 x its stored bytes (plus 256 KiB; FORMAT.md "Limits"), and the report keeps about what is decoded
//! (tables, counts) plus a merged tree of the same order, with per-allocation overhead; the fixed part covers
//! buffers (64 KiB output buffers, the reader's chunk) that do not grow with the file. The naive versions of the
//! report held from 200x (a 4 KB file) to 20,000x (a 40 KB file) and more on these files.

#[path = "support/crafted.rs"]
mod crafted;
#[allow(dead_code)]
#[path = "../../fuzz/shared.rs"]
mod shared;

use std::io::{self, Write};
use std::sync::OnceLock;

use pyperf_report::{write_report, Format, Profile, ReportArgs};
use shared::{peak_bytes, Counting, MIB};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Most heap a report of a `len`-byte file may hold at once (see the module documentation).
fn bound(len: usize) -> usize {
    2 * MIB + 128 * len
}

/// Output beyond this is not wanted: folded stacks of a chain sampled at every depth are the sum of the depths
/// (4.6 GB for 20,000 frames), which only takes time. Everything an exporter holds is built before this much is
/// written (the merged tree, the naive versions' every line), so the peak is measured all the same.
const OUTPUT_CAP: u64 = 32 << 20;

/// Counts what an exporter writes, and refuses more than [`OUTPUT_CAP`].
struct Capped(u64);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0 >= OUTPUT_CAP {
            return Err(io::Error::other("output cap reached"));
        }
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn args(format: Format, roots: bool) -> ReportArgs {
    ReportArgs { pid_root: roots, tid_root: roots, ..ReportArgs::with_format(format) }
}

/// One test at a time: they measure time, and the machine may have two CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one report took: peak heap bytes, output bytes (up to the cap), seconds.
struct Run {
    peak: usize,
    output: u64,
    seconds: f64,
}

/// Loads `bytes` as `args` asks (the options `pyperf report` would use) and writes the report.
fn run(bytes: &[u8], args: &ReportArgs) -> Run {
    let mut out = Capped(0);
    // This thread's CPU time, not the wall clock: a busy machine (a CI run beside a build) took the CPU from one of
    // the runs for most of a second (0.13 s, then 1.2 s for 4x the input: "9.2x") and the ratio meant nothing.
    let start = thread_cpu_seconds();
    let peak = peak_bytes(|| {
        let profile = Profile::load(bytes, &args.load_options().expect("options")).expect("load");
        match write_report(args, &profile, &mut out) {
            Ok(()) => {}
            Err(e) if e.to_string().contains("output cap reached") => {}
            // pprof refuses a profile whose samples would hold too many frames, before writing.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput && args.output_format() == Format::Pprof => {}
            Err(e) => panic!("{args:?}: {e}"),
        }
    });
    Run { peak, output: out.0, seconds: thread_cpu_seconds() - start }
}

/// The calling thread's CPU time (user and system), in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The crafted files of the issue, made once per test run: (a) one 20,000-frame chain sampled at every depth, of
/// one recursive function (40 KB: the file that made the folded export hold 2.2 GB) and of distinct functions
/// (169 KB: the text report took minutes); (b) the 213 KB variant, 100,000 frames cycling through 100 mutually
/// recursive functions; (c) 50,000 distinct leaves; (d) 2,000 threads on one 2,000-frame chain (4 KB), which makes
/// process and thread roots copy the chain per thread.
fn files() -> &'static [(&'static str, Vec<u8>)] {
    static FILES: OnceLock<Vec<(&'static str, Vec<u8>)>> = OnceLock::new();
    FILES.get_or_init(|| {
        vec![
            ("chain 20k, one recursive function", crafted::chain(20_000, 1)),
            ("chain 20k, distinct functions", crafted::chain(20_000, 20_000)),
            ("chain 100k, 100 functions", crafted::chain(100_000, 100)),
            ("50k distinct leaves", crafted::wide(50_000)),
            ("2k threads on a 2k chain", crafted::threads_on_chain(2_000, 2_000)),
        ]
    })
}

fn check_memory(format: Format, roots: bool) {
    check_memory_per_output(format, roots, 0);
}

/// [`check_memory`] with `per_byte` bytes more allowed per byte written: for a format whose output is itself a
/// copy of the tables per thread (Firefox Profiler's), which the crate writing it holds until the end.
fn check_memory_per_output(format: Format, roots: bool, per_byte: usize) {
    let _serial = serial();
    let mut failures = Vec::new();
    for (name, bytes) in files() {
        let r = run(bytes, &args(format, roots));
        let (mib, limit) = (r.peak as f64 / MIB as f64, bound(bytes.len()) as f64 / MIB as f64);
        eprintln!(
            "{format:?} roots={roots} {name} ({} bytes): peak {mib:.1} MiB (bound {limit:.1}), {} bytes out, {:.2} s",
            bytes.len(),
            r.output,
            r.seconds
        );
        let limit_bytes = bound(bytes.len()) + per_byte * r.output as usize;
        if r.peak > limit_bytes {
            let limit = limit_bytes as f64 / MIB as f64;
            failures.push(format!("{name}: {mib:.1} MiB, bound {limit:.1} MiB"));
        }
    }
    assert!(failures.is_empty(), "{format:?} (roots: {roots}) over its memory bound:\n{}", failures.join("\n"));
}

#[test]
fn text_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Text, false);
}

#[test]
fn folded_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Folded, false);
}

#[test]
fn folded_with_process_and_thread_roots_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Folded, true);
}

#[test]
fn flamegraph_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Flamegraph, false);
}

#[test]
fn flamegraph_with_process_and_thread_roots_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Flamegraph, true);
}

#[test]
fn speedscope_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Speedscope, false);
}

/// pprof samples carry their stacks in full: they are streamed, so memory is the functions and locations.
#[test]
fn pprof_memory_is_bounded_on_crafted_files() {
    check_memory(Format::Pprof, false);
}

/// Firefox Profiler's format has a stack, frame and function table per thread: 2,000 threads on one 2,000-frame
/// chain are 4 million stack entries however small the file. Memory is bounded by the output instead (the crate
/// holds the profile until it is written): 16 bytes per byte written on top of the usual bound.
#[test]
fn gecko_memory_is_bounded_on_crafted_files() {
    check_memory_per_output(Format::Gecko, false, 16);
}

/// The fastest of three runs: the least disturbed by other work on the machine.
fn seconds(bytes: &[u8], args: &ReportArgs) -> f64 {
    (0..3).map(|_| run(bytes, args).seconds).fold(f64::INFINITY, f64::min)
}

/// Four times the input must take less than eight times as long: linear work takes four times, quadratic
/// sixteen. (A factor of four rather than two keeps the test far from its threshold on a noisy machine.)
fn check_linear(what: &str, small: &[u8], large: &[u8], args: &ReportArgs) {
    let _serial = serial();
    let (a, b) = (seconds(small, args), seconds(large, args));
    eprintln!("{what}: {a:.3} s, 4x: {b:.3} s ({:.1}x)", b / a);
    assert!(b < 8.0 * a.max(0.005), "{what}: 4x the input took {:.1}x the time ({a:.3} s, then {b:.3} s)", b / a);
}

#[test]
fn text_time_is_linear_in_the_chain_depth() {
    let args = args(Format::Text, false);
    check_linear("text, chain of one function", &crafted::chain(5_000, 1), &crafted::chain(20_000, 1), &args);
    check_linear("text, chain of 100 functions", &crafted::chain(25_000, 100), &crafted::chain(100_000, 100), &args);
    let distinct = (crafted::chain(12_500, 12_500), crafted::chain(50_000, 50_000));
    check_linear("text, chain of distinct functions", &distinct.0, &distinct.1, &args);
    check_linear("text, wide", &crafted::wide(12_500), &crafted::wide(50_000), &args);
}

#[test]
fn flamegraph_time_is_linear_in_the_chain_depth() {
    let args = args(Format::Flamegraph, false);
    check_linear("flame graph, chain", &crafted::chain(25_000, 100), &crafted::chain(100_000, 100), &args);
    check_linear("flame graph, wide", &crafted::wide(12_500), &crafted::wide(50_000), &args);
}

/// Each stack-table node is made once per thread, whatever the depth of the stacks through it.
#[test]
fn gecko_time_is_linear_in_the_chain_depth() {
    let args = args(Format::Gecko, false);
    check_linear("gecko, chain", &crafted::chain(2_500, 100), &crafted::chain(10_000, 100), &args);
}

#[test]
fn speedscope_time_is_linear_in_the_chain_depth() {
    let args = args(Format::Speedscope, false);
    check_linear("speedscope, chain", &crafted::chain(2_500, 100), &crafted::chain(10_000, 100), &args);
}

/// Folded output is the sum of the stacks' depths, so time is measured against it: building the tree is linear in
/// the input, writing linear in the output.
#[test]
fn folded_time_is_linear_in_input_and_output() {
    // Input and output grow alike: wide files, and with thread roots threads x depth.
    check_linear("folded, wide", &crafted::wide(12_500), &crafted::wide(50_000), &args(Format::Folded, false));
    let (small, large) = (crafted::threads_on_chain(500, 1_000), crafted::threads_on_chain(1_000, 2_000));
    check_linear("folded with roots, threads x chain", &small, &large, &args(Format::Folded, true));
    // A chain sampled at every depth: the first 32 MiB of output come as fast from a chain four times deeper
    // (only building the tree takes longer).
    let (small, large) = (crafted::chain(25_000, 100), crafted::chain(100_000, 100));
    check_linear("folded, chain (capped output)", &small, &large, &args(Format::Folded, false));
}

/// Function shares the slow, obvious way: every stack walked from its leaf, each function once per sample.
fn shares_by_walking_every_stack(profile: &Profile) -> Vec<(String, u64, u64)> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in &profile.stacks {
        let names: Vec<String> =
            profile.tables.frames(s.leaf).map(|id| profile.tables.symbol(id).qualified_name()).collect();
        match names.first() {
            Some(leaf) => by.entry(leaf.clone()).or_default().0 += s.count,
            None => by.entry("[idle]".into()).or_default().0 += s.count,
        }
        let distinct: BTreeSet<&String> = names.iter().collect();
        for name in distinct {
            by.entry(name.clone()).or_default().1 += s.count;
        }
        if names.is_empty() {
            by.entry("[idle]".into()).or_default().1 += s.count;
        }
    }
    by.into_iter().map(|(name, (own, total))| (name, own, total)).collect()
}

/// The results themselves on crafted chains: one folded line per depth, in byte order; function shares as walking
/// every stack gives them, a recursive function counted once per sample.
#[test]
fn crafted_chain_reports_are_right() {
    for functions in [1, 2, 3, 7, 1_000] {
        let bytes = crafted::chain(1_000, functions);
        let profile = Profile::load(&bytes[..], &args(Format::Text, false).load_options().unwrap()).unwrap();
        let mut shares: Vec<(String, u64, u64)> = pyperf_report::text::function_shares(&profile)
            .into_iter()
            .map(|f| (f.function, f.self_samples, f.total_samples))
            .collect();
        shares.sort();
        assert_eq!(shares, shares_by_walking_every_stack(&profile), "{functions} functions");
        let folded = pyperf_report::folded::stacks(&profile, &Default::default());
        assert_eq!(folded.len(), 1000);
        assert_eq!(folded[0], ("<module> (crafted.py:1)".to_string(), 1));
        assert!(folded.iter().all(|(_, n)| *n == 1));
        assert_eq!(folded.iter().map(|(s, _)| s.split(';').count()).max(), Some(1000));
        let lines: Vec<String> = folded.iter().map(|(s, n)| format!("{s} {n}")).collect();
        assert!(lines.windows(2).all(|w| w[0] < w[1]), "lines in byte order");
    }
    let bytes = crafted::chain(1_000, 1);
    let profile = Profile::load(&bytes[..], &args(Format::Text, false).load_options().unwrap()).unwrap();
    let shares = pyperf_report::text::function_shares(&profile);
    let get = |name: &str| shares.iter().find(|f| f.function == name).expect(name);
    assert_eq!((get("f0").self_samples, get("f0").total_samples), (999, 999));
    assert_eq!((get("<module>").self_samples, get("<module>").total_samples), (1, 1000));
}
