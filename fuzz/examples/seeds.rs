//! Writes the fuzzer's seed files to fuzz/seeds and the memory-budget files to fuzz/budget (both committed; run
//! again when the format changes):
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --example seeds
//!
//! - `*-raw.pyp`: the recordings of testdata/synthetic and testdata/recordings with every chunk stored uncompressed,
//!   so that mutations hit the record decoder and the tables instead of the zstd decoder;
//! - `small.pyp`, `small-raw.pyp`, `killed-small.pyp`: tiny recordings from the format crate's Writer;
//! - `threadnames.pyp`, `threadnames-raw.pyp`: thread names (chunk kind 9, 1.2+): renames, an empty name that ends
//!   one, names out of time order, a reused pid;
//! - `offcpu-small.pyp`, `offcpu-small-raw.pyp` (named apart from testdata's `offcpu`): off-CPU intervals (chunk
//!   kind 10, 1.3+): the empty first chunk, every kind (an unknown one too), syscalls and none, both flags, a GIL
//!   wait, stacks and no stack, in two chunks;
//! - `native-small.pyp`, `native-small-raw.pyp`: native and kernel frames (symbol flags, 1.4+) of every kind (glue,
//!   markers, unresolved) among Python frames, and libraries (chunk kind 11) in two chunks, one library written again
//!   with another build id;
//! - `crafted-*.pyp`: the hostile shapes of report/tests/support/crafted.rs (deep chains sampled at every depth,
//!   wide files, many threads on one chain), scaled down so that one run stays fast: their output is the sum of
//!   the stacks' depths (report/tests/hostile.rs runs them at full size);
//! - `exec.pyp`, `hostile-names.pyp` (and `-raw` copies): processes sharing a pid, and names made of terminal
//!   escape sequences and bidirectional overrides (report/tests/support/synth.rs);
//! - `budget/*-1k.pyp`: 1 KiB files, one per record kind, that expand to the most the reader's ratio limit allows,
//!   spent on what costs the most memory: the worst cases for the 64 MiB bound (tests/faults.rs).

use std::path::Path;

use pyperf_format::*;

#[path = "../../report/tests/support/crafted.rs"]
mod crafted;
#[path = "../../report/tests/support/synth.rs"]
mod synth;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("seeds");
    std::fs::create_dir_all(&out).unwrap();
    let mut names: Vec<_> = ["synthetic", "recordings"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join("../testdata").join(d)).unwrap().map(|e| e.unwrap().path()))
        .collect();
    names.sort();
    for path in names.iter().filter(|p| p.extension().is_some_and(|e| e == "pyp")) {
        let bytes = std::fs::read(path).unwrap();
        let stem = path.file_stem().unwrap().to_str().unwrap();
        write(&out, &format!("{stem}-raw.pyp"), &uncompressed(&bytes));
    }
    let small = small();
    write(&out, "small.pyp", &small);
    write(&out, "small-raw.pyp", &uncompressed(&small));
    write(&out, "killed-small.pyp", &small_killed());
    let names = with_thread_names();
    write(&out, "threadnames.pyp", &names);
    write(&out, "threadnames-raw.pyp", &uncompressed(&names));
    let off_cpu = with_off_cpu();
    write(&out, "offcpu-small.pyp", &off_cpu);
    write(&out, "offcpu-small-raw.pyp", &uncompressed(&off_cpu));
    let native = with_native();
    write(&out, "native-small.pyp", &native);
    write(&out, "native-small-raw.pyp", &uncompressed(&native));
    for (name, bytes) in [
        ("crafted-chain-2k-one-function", crafted::chain(2_000, 1)),
        ("crafted-chain-2k-distinct", crafted::chain(2_000, 2_000)),
        ("crafted-chain-4k-10-functions", crafted::chain(4_000, 10)),
        ("crafted-wide-2k", crafted::wide(2_000)),
        ("crafted-200-threads-on-a-200-chain", crafted::threads_on_chain(200, 200)),
        ("exec", synth::exec()),
        ("hostile-names", synth::hostile_names()),
    ] {
        write(&out, &format!("{name}.pyp"), &bytes);
        if !name.starts_with("crafted") {
            write(&out, &format!("{name}-raw.pyp"), &uncompressed(&bytes));
        }
    }
    // Not seeds: reading each takes tens of milliseconds, which would slow the fuzzer tenfold. tests/faults.rs
    // measures the memory they make the reader and the report use.
    let budget = root.join("budget");
    std::fs::create_dir_all(&budget).unwrap();
    for (name, bytes) in budget_files() {
        write(&budget, &format!("{name}.pyp"), &bytes);
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
    println!("{name}: {} bytes", bytes.len());
}

/// The same chunks, payloads stored uncompressed. A cut-off last chunk is kept as it is.
fn uncompressed(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes[..PREAMBLE_LEN].to_vec();
    let mut at = PREAMBLE_LEN;
    while at + CHUNK_HEADER_LEN <= bytes.len() {
        let h = &bytes[at..at + CHUNK_HEADER_LEN];
        let kind = u16::from_le_bytes([h[0], h[1]]);
        let flags = u16::from_le_bytes([h[2], h[3]]);
        let stored = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
        let end = at + CHUNK_HEADER_LEN + stored;
        if end > bytes.len() {
            break;
        }
        let payload = &bytes[at + CHUNK_HEADER_LEN..end];
        let raw = if flags & 1 != 0 { zstd::bulk::decompress(payload, 16 << 20).unwrap() } else { payload.to_vec() };
        out.extend(chunk(kind, 0, &raw, raw.len()));
        at = end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// A chunk around `stored` as it is in the file (header from the format crate's own [`chunk_header`]).
fn chunk(kind: u16, flags: u16, stored: &[u8], raw_len: usize) -> Vec<u8> {
    [&chunk_header(kind, flags, stored, raw_len as u32)[..], stored].concat()
}

fn header() -> Header {
    Header {
        pyperf_version: "0.1.0".into(),
        hostname: "h".into(),
        kernel_release: "6".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 1,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(99),
        command_line: vec!["pyperf".into(), "record".into()],
        workload: vec!["python".into(), "a.py".into()],
    }
}

fn writer_with_samples() -> Writer<Vec<u8>> {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&Process {
        pid: 7,
        command: vec!["python".into(), "a.py".into()],
        python_version: "3.11.7".into(),
        interpreter_path: "/usr/bin/python3.11".into(),
        build_id: "ab".into(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .unwrap();
    let sym = |name: &str, line| Symbol { scope: "C".into(), name: name.into(), file: "a.py".into(), line, flags: 0 };
    let a = w.intern_symbol(&sym("<module>", 1));
    let b = w.intern_symbol(&sym("run", 5));
    let c = w.intern_symbol(&sym("burn", 9));
    let deep = w.intern_stack(&[a, b, c]);
    let short = w.intern_stack(&[a, b]);
    for i in 0..6u32 {
        w.push_sample(&SampleRecord {
            time_ns: 1000 * i as u64,
            cpu: i % 2,
            pid: 7,
            tid: 7 + i % 2,
            comm: if i % 2 == 0 { "python" } else { "worker" },
            thread_state: ThreadStateMatch::from_u8(1),
            gil: GilState::from_u8((i % 8) as u8),
            pthread_id: PthreadIdMatch::from_u8(1),
            status: StackStatus::from_u8((i % 4) as u8),
            stack: [deep, short, 0][i as usize % 3],
            task_stack: 0,
            flags: 0,
            interp: 0,
        })
        .unwrap();
    }
    w
}

fn small() -> Vec<u8> {
    let stats = Stats {
        samples: 6,
        lost_samples: 1,
        truncated_stacks: 1,
        lost_symbols: 1,
        errors: 1,
        duration_ns: 6000,
        counters: vec![("bpf_ringbuf_full".into(), 1)],
    };
    writer_with_samples().finish(&stats).unwrap()
}

/// The small recording with thread names: the main thread and a worker named, the worker renamed, its tid reused
/// by a thread that is not named (an empty name dated back to its start, written after later names), and the pid
/// reused by a new process with names of its own.
fn with_thread_names() -> Vec<u8> {
    let mut w = writer_with_samples();
    let name = |tid: u32, time_ns: u64, name: &str| ThreadName { pid: 7, tid, time_ns, name: name.into() };
    w.add_thread_names(&[name(7, 500, "MainThread"), name(8, 500, "worker-1")]).unwrap();
    w.add_thread_names(&[name(8, 2500, "renamed"), name(8, 4200, "")]).unwrap();
    w.add_thread_names(&[name(8, 3100, "")]).unwrap();
    w.add_process(&Process {
        pid: 7,
        command: vec!["python".into(), "b.py".into()],
        python_version: "3.12.1".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: "cd".into(),
        first_seen_ns: 4000,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .unwrap();
    w.add_thread_names(&[name(7, 4500, "MainThread"), name(8, 4500, "pool-0_ü")]).unwrap();
    w.finish(&Stats { samples: 6, ..Stats::default() }).unwrap()
}

/// The small recording with off-CPU intervals: the empty chunk written when off-CPU recording starts, then two
/// chunks of intervals of every kind (5: unknown), with and without a syscall, both flags, and the stacks of the
/// samples (nodes 1-3) or none.
fn with_off_cpu() -> Vec<u8> {
    let mut w = writer_with_samples();
    w.start_off_cpu(1_000_000).unwrap();
    for i in 0..12u32 {
        let kind = OffCpuKind::from_u8((i % 6) as u8);
        let duration_ns = [50_000, 2_000_000, 700, 30_000_000][i as usize % 4];
        w.push_off_cpu(&OffCpuInterval {
            pid: 7,
            tid: 7 + i % 2,
            start_ns: 500 * i as u64,
            duration_ns,
            runnable_ns: if kind == OffCpuKind::Runnable { duration_ns } else { duration_ns / 4 },
            weight_ns: duration_ns.max(1_000_000),
            kind,
            syscall: [-1, 0, 7, 202][i as usize % 4],
            gil: if kind == OffCpuKind::Gil { GilState::Waiting } else { GilState::from_u8((i % 4) as u8 + 3) },
            status: StackStatus::from_u8((i % 5) as u8),
            stack: i % 4,
            flags: [0, off_cpu_flags::BEFORE_START, off_cpu_flags::OPEN_AT_END][i as usize % 3],
            comm: if i % 2 == 0 { "python".into() } else { "worker".into() },
            task_stack: 0,
            interp: 0,
        })
        .unwrap();
        if i == 5 {
            w.flush().unwrap();
        }
    }
    w.finish(&Stats {
        samples: 6,
        counters: vec![("off_cpu_intervals".into(), 12), ("off_cpu_short".into(), 3)],
        ..Stats::default()
    })
    .unwrap()
}

/// The small recording with native and kernel frames: stacks of Python frames with native ones (glue between them, a
/// marker, an unresolved address) and kernel leaves, and the libraries, in two chunks (libz written again with
/// another build id).
fn with_native() -> Vec<u8> {
    let mut w = writer_with_samples();
    let frame = |name: &str, file: &str, flags: u32| Symbol {
        scope: String::new(),
        name: name.into(),
        file: file.into(),
        line: 0,
        flags,
    };
    let py = Symbol { scope: "C".into(), name: "run".into(), file: "a.py".into(), line: 5, flags: 0 };
    let (native, kernel) = (symbol_flags::NATIVE, symbol_flags::KERNEL);
    let stacks: [Vec<Symbol>; 4] = [
        vec![
            py.clone(),
            frame("deflate", "/lib/libz.so.1", native),
            frame("do_syscall_64", "[kernel.kallsyms]", kernel),
        ],
        vec![py.clone(), frame("PyObject_Call", "/usr/bin/python3", native | symbol_flags::GLUE), py.clone()],
        vec![py.clone(), frame("[native: unmerged]", "", native | symbol_flags::MARKER)],
        vec![frame("libx.so+0x10", "/lib/libx.so", native | symbol_flags::UNRESOLVED), frame("f", "[mod]", kernel)],
    ];
    w.push_library("/lib/libz.so.1", "ab").unwrap();
    w.push_library("/usr/bin/python3", "").unwrap();
    for (i, stack) in stacks.iter().enumerate() {
        let ids: Vec<u32> = stack.iter().map(|s| w.intern_symbol(s)).collect();
        let leaf = w.intern_stack(&ids);
        w.push_sample(&SampleRecord {
            time_ns: 10_000 + i as u64,
            cpu: 0,
            pid: 7,
            tid: 7,
            comm: "python",
            thread_state: ThreadStateMatch::from_u8(1),
            gil: GilState::from_u8(4),
            pthread_id: PthreadIdMatch::from_u8(1),
            status: StackStatus::from_u8(if i == 3 { 3 } else { 0 }),
            stack: leaf,
            task_stack: 0,
            flags: 0,
            interp: 0,
        })
        .unwrap();
        if i == 1 {
            w.flush().unwrap();
            w.push_library("/lib/libx.so", "").unwrap();
            w.push_library("/lib/libz.so.1", "cd").unwrap();
        }
    }
    w.finish(&Stats { samples: 10, counters: vec![("native_unmerged".into(), 1)], ..Stats::default() }).unwrap()
}

/// What a killed recorder leaves: no symbol table, no trailer.
fn small_killed() -> Vec<u8> {
    let mut w = writer_with_samples();
    w.flush().unwrap();
    let full = w.finish(&Stats::default()).unwrap();
    // Drop the final symbol table and the trailer: keep the chunks before the first kind 6.
    let mut at = PREAMBLE_LEN;
    while at + CHUNK_HEADER_LEN <= full.len() {
        let kind = u16::from_le_bytes([full[at], full[at + 1]]);
        if kind == Kind::SymbolTable as u16 {
            break;
        }
        at += CHUNK_HEADER_LEN + u32::from_le_bytes(full[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    full[..at].to_vec()
}

/// `n` as a postcard varint (LEB128).
fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A zstd chunk holding `raw`.
fn packed(kind: Kind, raw: &[u8]) -> Vec<u8> {
    chunk(kind as u16, FLAG_ZSTD, &zstd::bulk::compress(raw, 19).unwrap(), raw.len())
}

/// The preamble and a header chunk whose command line is `n` empty strings.
fn head(n: u64) -> Vec<u8> {
    let mut raw = vec![0u8; 4]; // pyperf_version, hostname, kernel_release, arch: ""
    raw.push(0); // start_time_unix_ns
    raw.push(0); // event ""
    raw.extend([0, 0]); // rate: Frequency(0)
    varint(n, &mut raw); // command_line
    raw.resize(raw.len() + n as usize, 0);
    raw.push(0); // workload: []
    let mut out = MAGIC.to_vec();
    out.extend(MAJOR.to_le_bytes());
    out.extend(MINOR.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend(packed(Kind::Header, &raw));
    out
}

/// Files under 1 KiB that make the reader build the most it can for one record kind: the expansion the
/// reader's ratio limit allows (256 KiB + 64 x the stored bytes) spent on the record that costs most in memory per
/// encoded byte. `make(n)` gives the file for size parameter `n`; the largest `n` the reader accepts is kept.
fn largest_accepted(make: impl Fn(u64) -> Vec<u8>) -> Vec<u8> {
    let readable = |bytes: &[u8]| -> bool {
        let Ok(mut reader) = Reader::new(bytes) else { return false };
        let mut tables = Tables::default();
        scan(&mut reader, &mut tables, |_, _| {}).is_ok()
    };
    // Binary search on n: readable up to the limit.
    let (mut lo, mut hi) = (0u64, 1u64 << 20);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if readable(&padded(make(mid))) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let bytes = padded(make(lo));
    assert!(bytes.len() <= 1024 && lo > 1000, "{} bytes, n = {lo}", bytes.len());
    bytes
}

/// Fills `file` up to 1 KiB with a chunk of a kind readers skip, placed right after the header chunk: stored
/// bytes read early raise the reader's expansion allowance for the chunks after them.
fn padded(file: Vec<u8>) -> Vec<u8> {
    let header_end = PREAMBLE_LEN
        + CHUNK_HEADER_LEN
        + u32::from_le_bytes(file[PREAMBLE_LEN + 4..PREAMBLE_LEN + 8].try_into().unwrap()) as usize;
    let room = 1024usize.saturating_sub(file.len() + CHUNK_HEADER_LEN);
    // Incompressible filler (it is stored as is, flags 0).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let filler: Vec<u8> = (0..room)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut out = file[..header_end].to_vec();
    out.extend(chunk(999, 0, &filler, filler.len()));
    out.extend_from_slice(&file[header_end..]);
    out
}

fn one_symbol() -> Vec<u8> {
    packed(Kind::Symbols, &[0, 1, 0, 0, 0, 0, 0])
}

fn budget_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        // Header { command_line: n empty strings }: 24 bytes per encoded byte, and the report keeps a copy.
        ("header-1k", largest_accepted(head)),
        // Process { command: n empty strings }: the tables keep a copy.
        (
            "process-1k",
            largest_accepted(|n| {
                let mut raw = vec![0u8]; // pid
                varint(n, &mut raw);
                raw.resize(raw.len() + n as usize, 0);
                raw.extend([0, 0, 0, 0]); // python_version, interpreter_path, build_id, first_seen_ns
                let mut out = head(0);
                out.extend(packed(Kind::Process, &raw));
                out
            }),
        ),
        // SymbolChunk of n empty symbols: 5 encoded bytes, 80 decoded, and the tables keep a copy.
        (
            "symbols-1k",
            largest_accepted(|n| {
                let mut raw = vec![0u8];
                varint(n, &mut raw);
                raw.resize(raw.len() + 5 * n as usize, 0);
                let mut out = head(0);
                out.extend(packed(Kind::Symbols, &raw));
                out
            }),
        ),
        // StackChunk: a chain of n frames (each node called from the one before), and one sample on its leaf: the
        // deepest stack a report can be asked to name.
        (
            "stacks-1k",
            largest_accepted(|n| {
                let mut raw = vec![1u8]; // first_id
                varint(n, &mut raw);
                raw.resize(raw.len() + n as usize, 1); // parent_back: 1 (the previous node; node 1: root)
                varint(n, &mut raw);
                raw.resize(raw.len() + n as usize, 0); // symbol 0
                let mut out = head(0);
                out.extend(one_symbol());
                out.extend(packed(Kind::Stacks, &raw));
                let s = SampleChunk {
                    time_delta_ns: vec![0],
                    cpu: vec![0],
                    pid: vec![0],
                    tid: vec![0],
                    comm: vec![0],
                    comms: vec![String::new()],
                    thread_state: vec![0],
                    gil: vec![0],
                    pthread_id: vec![0],
                    status: vec![0],
                    stack: vec![n as u32],
                    ..Default::default()
                };
                let s = encode_sample_chunk(&s).unwrap();
                out.extend(packed(Kind::Samples, &s));
                out
            }),
        ),
        // SampleChunk of n samples, every column 0 (one byte each).
        (
            "samples-1k",
            largest_accepted(|n| {
                let n = n as usize;
                let c = SampleChunk {
                    time_delta_ns: vec![0; n],
                    cpu: vec![0; n],
                    pid: vec![0; n],
                    tid: vec![0; n],
                    comm: vec![0; n],
                    comms: vec![String::new()],
                    thread_state: vec![0; n],
                    gil: vec![0; n],
                    pthread_id: vec![0; n],
                    status: vec![0; n],
                    stack: vec![0; n],
                    ..Default::default()
                };
                let mut out = head(0);
                out.extend(packed(Kind::Samples, &encode_sample_chunk(&c).unwrap()));
                out
            }),
        ),
        // SampleChunk with no samples and n empty thread names.
        (
            "comms-1k",
            largest_accepted(|n| {
                let c = SampleChunk { comms: vec![String::new(); n as usize], ..Default::default() };
                let mut out = head(0);
                out.extend(packed(Kind::Samples, &encode_sample_chunk(&c).unwrap()));
                out
            }),
        ),
        // ThreadNameChunk of n names, every column 0 (one byte each; the names empty): the tables keep a copy.
        (
            "threadnames-1k",
            largest_accepted(|n| {
                let mut raw = Vec::new();
                for _ in 0..4 {
                    varint(n, &mut raw);
                    raw.resize(raw.len() + n as usize, 0);
                }
                let mut out = head(0);
                out.extend(packed(Kind::ThreadNames, &raw));
                out
            }),
        ),
        // OffCpuChunk of n intervals, every column 0 (one byte each; the comms empty): decoded into columns, then
        // into intervals.
        (
            "offcpu-1k",
            largest_accepted(|n| {
                let mut raw = vec![0u8]; // min_ns
                for _ in 0..13 {
                    varint(n, &mut raw);
                    raw.resize(raw.len() + n as usize, 0);
                }
                let mut out = head(0);
                out.extend(packed(Kind::OffCpu, &raw));
                out
            }),
        ),
        // LibraryChunk of n libraries, both columns empty strings (one byte each): decoded into columns, then into
        // libraries.
        (
            "libraries-1k",
            largest_accepted(|n| {
                let mut raw = Vec::new();
                for _ in 0..2 {
                    varint(n, &mut raw);
                    raw.resize(raw.len() + n as usize, 0);
                }
                let mut out = head(0);
                out.extend(packed(Kind::Libraries, &raw));
                out
            }),
        ),
        // Stats with n empty counters.
        (
            "stats-1k",
            largest_accepted(|n| {
                let mut raw = vec![0u8; 6];
                varint(n, &mut raw);
                raw.resize(raw.len() + 2 * n as usize, 0);
                let mut out = head(0);
                out.extend(packed(Kind::Stats, &raw));
                out
            }),
        ),
    ]
}
