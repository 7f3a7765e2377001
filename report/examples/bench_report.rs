//! Report speed: every export of a 10-million-sample recording vs plain zstd decompression of its chunks.
//!
//! ```text
//! cargo run --release -p pyperf-report --example bench_report -- [--samples N] [--reps N] [--file PATH] [--regen]
//!     [--only FLAG]...
//! ```
//!
//! Generates (once; `--regen` to redo) a realistic recording with the format's Writer: a few hundred unique
//! stacks of 10-40 frames, 2 CPUs, 8 threads in 2 processes. Then, each repeated (median reported), from the
//! page cache:
//! - decompress: read every chunk and zstd-decompress its payload, nothing else (the floor for any reader);
//! - each export (every output format, the differential flame graph of the file against itself, and the file given
//!   twice as two recordings): `ReportArgs::load` (format::scan: checksums, decompression, decoding, tables) +
//!   aggregation + `write_report` to /dev/null, as `pyperf report FLAGS -o /dev/null` does.
//!
//! Target: every export at most 2x the decompression time (of each file read). See bench/report/README.md and
//! bench/RESULTS.md.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pyperf_format::*;
use pyperf_report::{write_report, Format, FormatFlags, ReportArgs};

struct Args {
    samples: u64,
    reps: usize,
    file: PathBuf,
    regen: bool,
    only: Vec<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        samples: 10_000_000,
        reps: 5,
        file: Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new(".."))
            .join("bench/out/report-bench.pyp"),
        regen: false,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--samples" => a.samples = it.next().context("--samples N")?.parse()?,
            "--reps" => a.reps = it.next().context("--reps N")?.parse()?,
            "--file" => a.file = PathBuf::from(it.next().context("--file PATH")?),
            "--regen" => a.regen = true,
            "--only" => a.only.push(it.next().context("--only FLAG (e.g. --pprof)")?),
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(a)
}

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn generate(path: &Path, samples: u64) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let header = Header {
        pyperf_version: "0.1.0".into(),
        hostname: "bench".into(),
        kernel_release: "6.1.0".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 1_714_564_800_000_000_000,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(1000),
        command_line: vec!["pyperf".into(), "record".into()],
        workload: vec!["python3".into(), "service.py".into()],
    };
    let out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut w = Writer::new(out, &header)?;
    let mut rng = Rng(42);
    for pid in [100u32, 200] {
        w.add_process(&Process {
            pid,
            command: vec!["/usr/bin/python3.11".into(), "service.py".into()],
            python_version: "3.11.7".into(),
            interpreter_path: "/usr/bin/python3.11".into(),
            build_id: String::new(),
            first_seen_ns: 0,
            ns_pid: 0,
            cgroup: String::new(),
        })?;
    }
    // ~600 symbols in 40 modules; 400 stacks of 10-40 frames sharing prefixes like real call trees do.
    let symbols: Vec<u32> = (0..600u32)
        .map(|i| {
            w.intern_symbol(&Symbol {
                scope: if i % 3 == 0 { format!("Class{}", i % 17) } else { String::new() },
                name: format!("function_{i}"),
                file: format!("/srv/app/.venv/lib/python3.11/site-packages/pkg{}/module{}.py", i % 7, i % 40),
                line: 10 + (i * 7) % 500,
                flags: 0,
            })
        })
        .collect();
    let mut stacks: Vec<u32> = Vec::new();
    let trunks: Vec<Vec<u32>> = (0..20).map(|_| (0..8).map(|_| symbols[rng.below(600) as usize]).collect()).collect();
    for _ in 0..400 {
        let mut frames = trunks[rng.below(20) as usize].clone();
        let depth = 10 + rng.below(31) as usize;
        while frames.len() < depth {
            frames.push(symbols[rng.below(600) as usize]);
        }
        stacks.push(w.intern_stack(&frames));
    }
    let threads: Vec<(u32, u32, &str)> =
        (0..8u32).map(|i| (if i < 4 { 100 } else { 200 }, 1000 + i, "worker")).collect();
    let mut time = 0u64;
    let mut current = [0usize; 2];
    for i in 0..samples {
        let cpu = (i % 2) as usize;
        if cpu == 0 {
            time += 1_000_000;
        }
        // A CPU keeps running the same thread for a while.
        if rng.below(20) == 0 {
            current[cpu] = rng.below(8) as usize;
        }
        let (pid, tid, comm) = threads[current[cpu]];
        // Skewed stack popularity: a few hot stacks, a long tail.
        let r = rng.below(1000);
        let si = if r < 500 { (r % 10) as usize } else { (r % 400) as usize };
        let idle = rng.below(10) == 0;
        w.push_sample(&SampleRecord {
            time_ns: time + cpu as u64 * 13_000 + rng.below(2_000),
            cpu: cpu as u32,
            pid,
            tid,
            comm,
            thread_state: if idle { ThreadStateMatch::ThisThreadNull } else { ThreadStateMatch::Match },
            gil: if idle { GilState::NotLocked } else { GilState::ThisThread },
            pthread_id: PthreadIdMatch::Match,
            status: if idle { StackStatus::Idle } else { StackStatus::Complete },
            stack: if idle { 0 } else { stacks[si] },
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })?;
    }
    let stats = Stats { samples, duration_ns: time, ..Default::default() };
    w.finish(&stats)?;
    Ok(())
}

/// Reads every chunk and decompresses it: the floor for any reader of the file.
fn decompress_only(path: &Path) -> anyhow::Result<(u64, u64)> {
    let mut input = BufReader::with_capacity(1 << 16, File::open(path)?);
    let mut pre = [0u8; PREAMBLE_LEN];
    input.read_exact(&mut pre)?;
    let mut dctx = zstd::bulk::Decompressor::new()?;
    let mut stored = Vec::new();
    let mut raw = Vec::new();
    let (mut chunks, mut bytes) = (0u64, 0u64);
    let mut head = [0u8; CHUNK_HEADER_LEN];
    loop {
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
        let stored_len = u32::from_le_bytes(head[4..8].try_into()?) as usize;
        let raw_len = u32::from_le_bytes(head[8..12].try_into()?) as usize;
        stored.resize(stored_len, 0);
        input.read_exact(&mut stored)?;
        raw.clear();
        raw.reserve(raw_len);
        dctx.decompress_to_buffer(&stored, &mut raw)?;
        chunks += 1;
        bytes += raw.len() as u64;
    }
    Ok((chunks, bytes))
}

/// The exports measured: (name, the files it reads, arguments). Every output format, then the folded differential
/// of the file against itself, then the file given twice (two recordings as one).
fn exports(path: &Path) -> Vec<(String, usize, ReportArgs)> {
    let mut v: Vec<(String, usize, ReportArgs)> = Format::ALL
        .iter()
        .map(|&f| {
            (f.flag().to_string(), 1, ReportArgs { input: vec![path.to_path_buf()], ..ReportArgs::with_format(f) })
        })
        .collect();
    v.push((
        "--flamegraph --diff F".to_string(),
        2,
        ReportArgs {
            input: vec![path.to_path_buf()],
            diff: Some(path.to_path_buf()),
            format: FormatFlags { flamegraph: true, ..Default::default() },
            ..Default::default()
        },
    ));
    v.push((
        "--folded --diff F".to_string(),
        2,
        ReportArgs {
            input: vec![path.to_path_buf()],
            diff: Some(path.to_path_buf()),
            format: FormatFlags { folded: true, ..Default::default() },
            ..Default::default()
        },
    ));
    v.push((
        "--folded -i F -i F".to_string(),
        2,
        ReportArgs {
            input: vec![path.to_path_buf(), path.to_path_buf()],
            format: FormatFlags { folded: true, ..Default::default() },
            ..Default::default()
        },
    ));
    v
}

/// What `pyperf report FLAGS -o /dev/null` does, minus starting a process.
fn export(args: &ReportArgs) -> anyhow::Result<u64> {
    let profile = args.load()?;
    let out = BufWriter::with_capacity(1 << 16, File::create("/dev/null")?);
    write_report(args, &profile, out)?;
    Ok(profile.all.samples)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let a = parse_args()?;
    if a.regen || !a.file.exists() {
        eprintln!("generating {} samples into {} ...", a.samples, a.file.display());
        let t = Instant::now();
        generate(&a.file, a.samples)?;
        eprintln!("  done in {:.1} s", t.elapsed().as_secs_f64());
    }
    let size = std::fs::metadata(&a.file)?.len();
    // Warm the page cache and check the file.
    let (chunks, raw_bytes) = decompress_only(&a.file)?;
    let folded = ReportArgs { input: vec![a.file.clone()], ..ReportArgs::with_format(Format::Folded) };
    let samples = export(&folded)?;
    println!(
        "recording: {} ({:.1} MB, {chunks} chunks, {:.1} MB decompressed, {samples} samples)",
        a.file.display(),
        size as f64 / 1e6,
        raw_bytes as f64 / 1e6
    );
    let exports: Vec<_> =
        exports(&a.file).into_iter().filter(|(name, _, _)| a.only.is_empty() || a.only.contains(name)).collect();
    let mut dec = Vec::new();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); exports.len()];
    let mut failed: Vec<Option<String>> = vec![None; exports.len()];
    // Interleaved, so that a slow phase of the machine hits every export alike.
    for _ in 0..a.reps {
        let t = Instant::now();
        decompress_only(&a.file)?;
        dec.push(t.elapsed());
        for (i, (_, _, args)) in exports.iter().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            let t = Instant::now();
            match export(args) {
                Ok(_) => times[i].push(t.elapsed()),
                Err(e) => failed[i] = Some(format!("{e:#}")),
            }
        }
    }
    let d = median(dec.clone());
    let rate = |t: Duration| samples as f64 / t.as_secs_f64() / 1e6;
    let all = |v: &[Duration]| v.iter().map(|t| format!("{:.3}", t.as_secs_f64())).collect::<Vec<_>>().join(" ");
    println!("medians of {} runs; ratio = export / (decompression of every file it reads), target <= 2.00", a.reps);
    println!("| export | median | M samples/s per file | ratio |");
    println!("|---|---|---|---|");
    println!("| decompress only | {:.3} s | {:.1} | 1.00 |", d.as_secs_f64(), rate(d));
    for (i, (name, files, _)) in exports.iter().enumerate() {
        if let Some(e) = &failed[i] {
            println!("| `{name}` | failed: {e} | | |");
            continue;
        }
        let t = median(times[i].clone());
        let ratio = t.as_secs_f64() / (d.as_secs_f64() * *files as f64);
        println!("| `{name}` | {:.3} s | {:.1} | {ratio:.2} |", t.as_secs_f64(), rate(t) * *files as f64);
    }
    println!("runs: decompress [{}]", all(&dec));
    for (i, (name, _, _)) in exports.iter().enumerate() {
        println!("runs: {name} [{}]", all(&times[i]));
    }
    Ok(())
}
