//! Deterministic synthetic recordings for the golden tests, made with the format crate's Writer.
//!
//! Everything is fixed: the seed, the header (start time included), the processes, the stacks. Regenerate the
//! committed files with `cargo run -p pyperf-report --example synthesize` (or `PYPERF_BLESS=1 cargo test -p
//! pyperf-report --test golden`); the golden test fails when they differ from what this code makes.
//!
//! Shared by tests/golden.rs, tests/robustness.rs and examples/synthesize.rs through `#[path]`.

#![allow(dead_code)]

use pyperf_format::{
    off_cpu_flags, sample_flags, symbol_flags, GilState, Header, OffCpuInterval, OffCpuKind, Process, PthreadIdMatch,
    Rate, SampleRecord, SourceFile, StackStatus, Stats, Symbol, TaskWait, ThreadName, ThreadStateMatch, Writer,
};

/// Names of the synthetic recordings, without `.pyp`.
pub const RECORDINGS: &[&str] =
    &["mixed", "killed", "cutoff", "newer-minor", "offcpu", "native", "tasks", "gc", "source", "interp", "stolen"];

/// The bytes of a synthetic recording.
pub fn recording(name: &str) -> Vec<u8> {
    match name {
        "mixed" => mixed(),
        "killed" => killed(),
        "cutoff" => cutoff(),
        "newer-minor" => newer_minor(),
        "offcpu" => offcpu(),
        "native" => native(),
        "tasks" => tasks(),
        "gc" => gc(),
        "source" => source(),
        "interp" => interp(),
        "stolen" => stolen_periods(true),
        other => panic!("no synthetic recording called {other}"),
    }
}

/// splitmix64: tiny, fixed, good enough.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Index chosen with the given weights.
    pub fn pick(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| w as u64).sum();
        let mut r = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if r < w as u64 {
                return i;
            }
            r -= w as u64;
        }
        weights.len() - 1
    }
}

pub fn sym(scope: &str, name: &str, file: &str, line: u32) -> Symbol {
    Symbol { scope: scope.into(), name: name.into(), file: file.into(), line, flags: 0 }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// 2024-05-01 12:00:00 UTC.
pub const START: u64 = 1_714_564_800_000_000_000;

fn header(workload: &[&str], command_line: &[&str], event: &str, rate: Rate) -> Header {
    Header {
        pyperf_version: "0.1.0".into(),
        hostname: "synth-host".into(),
        kernel_release: "6.1.0-18-amd64".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: START,
        event: event.into(),
        rate,
        command_line: args(command_line),
        workload: args(workload),
    }
}

/// A thread that samples are drawn from: which stacks it runs (template index, weight).
struct ThreadSpec {
    pid: u32,
    tid: u32,
    comm: &'static str,
    stacks: Vec<(usize, u32)>,
    weight: u32,
}

/// A stack template: frames root first, status and the states it is usually seen with.
struct StackSpec {
    frames: Vec<Symbol>,
    status: StackStatus,
    gil: &'static [GilState],
}

fn stack(frames: Vec<Symbol>, status: StackStatus, gil: &'static [GilState]) -> StackSpec {
    StackSpec { frames, status, gil }
}

const HELD: &[GilState] =
    &[GilState::ThisThread, GilState::ThisThread, GilState::ThisThread, GilState::GlobalCurrentThread];
const WAITING: &[GilState] = &[GilState::OtherThread, GilState::NotLocked];
const RELEASED: &[GilState] = &[GilState::NotLocked, GilState::NotLocked, GilState::OtherThread];

fn long_path() -> String {
    let mut p = String::from("/home/user/src/");
    for i in 0..12 {
        p.push_str(&format!("very_deeply_nested_package_{i:02}/"));
    }
    p.push_str("module_with_a_rather_long_name.py");
    p
}

/// Three processes of different Python versions (and one the recording never describes), threads, recursion,
/// truncated / error / idle samples, all GIL states, non-ASCII names, a long path, names that need escaping,
/// unresolved and cut symbols, a process that appears part way through, several chunks, a trailer.
fn mixed() -> Vec<u8> {
    let app = "/srv/app/app.py";
    let enc = "/usr/lib/python3.11/json/encoder.py";
    let req = "/srv/app/.venv/lib/python3.11/site-packages/requests/api.py";
    let thr38 = "/opt/py38/lib/python3.8/threading.py";
    let odd = "/tmp/odd;dir/new\nline.py";
    let long = long_path();
    let module = sym("", "<module>", app, 120);
    let main = sym("", "main", app, 111);
    let fib = |line| sym("", "fib", app, line);
    let handle = |line| sym("Server", "handle", app, line);
    let encode = sym("JSONEncoder", "encode", enc, 200);
    let iterencode = sym("JSONEncoder", "iterencode", enc, 258);
    let get = sym("", "get", req, 73);
    let groesse = sym("Käse", "größe_berechnen", "/srv/données/計算.py", 7);
    let inner = sym("outer.<locals>", "inner", &long, 3);
    let outer = sym("", "outer", &long, 9);
    let lambda = sym("", "<lambda>", odd, 1);
    let unresolved = Symbol {
        scope: String::new(),
        name: "<unresolved code 0x7f3a2c001230>".into(),
        file: "<unknown>".into(),
        line: 0,
        flags: symbol_flags::UNRESOLVED,
    };
    let cut = Symbol {
        scope: String::new(),
        name: "a_function_whose_name_was_c".into(),
        file: "/srv/app/generated/bui".into(),
        line: 5,
        flags: symbol_flags::NAME_CUT | symbol_flags::FILE_CUT,
    };
    let ping = sym("", "ping", app, 60);
    let pong = sym("", "pong", app, 65);
    let bootstrap = sym("Thread", "_bootstrap", thr38, 890);
    let bootstrap_inner = sym("Thread", "_bootstrap_inner", thr38, 932);
    let run = sym("Thread", "run", thr38, 870);
    let poll = sym("Poller", "poll", "/opt/worker/worker.py", 31);
    let poll2 = sym("Poller", "poll", "/opt/worker/worker.py", 34);
    let tool = sym("", "<module>", "/home/user/tool.py", 3);
    let scan = sym("", "scan", "/home/user/tool.py", 17);
    let recurse = sym("", "recurse", "/home/user/tool.py", 25);

    let mut deep = vec![recurse.clone(); 24];
    deep.push(scan.clone());
    let stacks = vec![
        /* 0 */
        stack(
            vec![module.clone(), main.clone(), handle(88), encode.clone(), iterencode.clone()],
            StackStatus::Complete,
            HELD,
        ),
        /* 1 */
        stack(vec![module.clone(), main.clone(), handle(91), get.clone()], StackStatus::Complete, RELEASED),
        /* 2 */
        stack(vec![module.clone(), main.clone(), fib(5), fib(6), fib(6), fib(5)], StackStatus::Complete, HELD),
        /* 3 */ stack(vec![module.clone(), main.clone(), fib(5), fib(6)], StackStatus::Complete, HELD),
        /* 4 */ stack(vec![module.clone(), main.clone(), groesse.clone()], StackStatus::Complete, HELD),
        /* 5 */
        stack(vec![module.clone(), main.clone(), outer.clone(), inner.clone()], StackStatus::Complete, HELD),
        /* 6 */ stack(vec![module.clone(), main.clone(), lambda.clone()], StackStatus::Complete, HELD),
        /* 7 */ stack(vec![], StackStatus::Idle, RELEASED),
        /* 8 */
        stack(
            vec![bootstrap.clone(), bootstrap_inner.clone(), run.clone(), poll.clone()],
            StackStatus::Complete,
            WAITING,
        ),
        /* 9 */
        stack(
            vec![bootstrap.clone(), bootstrap_inner.clone(), run.clone(), poll2.clone()],
            StackStatus::Complete,
            HELD,
        ),
        /* 10 */ stack(vec![main.clone(), unresolved.clone()], StackStatus::Error, HELD),
        /* 11 */ stack(vec![], StackStatus::Error, &[GilState::Error]),
        /* 12 */ stack(deep, StackStatus::Truncated, HELD),
        /* 13 */ stack(vec![tool.clone(), scan.clone(), cut.clone()], StackStatus::Complete, HELD),
        /* 14 */
        stack(
            vec![module.clone(), main.clone(), ping.clone(), pong.clone(), ping.clone(), pong.clone()],
            StackStatus::Complete,
            HELD,
        ),
        /* 15 */
        stack(
            vec![tool.clone(), scan.clone()],
            StackStatus::Complete,
            &[GilState::NoInfo, GilState::Uninitialized, GilState::Null],
        ),
    ];
    let threads = [
        ThreadSpec {
            pid: 1000,
            tid: 1000,
            comm: "python3.11",
            stacks: vec![(0, 20), (2, 10), (3, 6), (4, 5), (5, 4), (6, 3), (14, 4), (10, 1), (11, 1)],
            weight: 30,
        },
        ThreadSpec { pid: 1000, tid: 1001, comm: "worker-1", stacks: vec![(1, 10), (0, 6), (7, 8)], weight: 20 },
        ThreadSpec { pid: 1000, tid: 1002, comm: "worker-2", stacks: vec![(1, 6), (7, 10), (2, 2)], weight: 12 },
        ThreadSpec { pid: 2000, tid: 2000, comm: "python3.8", stacks: vec![(7, 1)], weight: 6 },
        ThreadSpec { pid: 2000, tid: 2001, comm: "pool-κ", stacks: vec![(8, 10), (9, 6)], weight: 14 },
        ThreadSpec { pid: 3000, tid: 3000, comm: "tool", stacks: vec![(12, 3), (13, 4), (15, 3)], weight: 14 },
        ThreadSpec { pid: 4000, tid: 4000, comm: "ghost", stacks: vec![(7, 1), (15, 1)], weight: 2 },
    ];
    let mut rng = Rng::new(0x5eed_0001);
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.11", "app.py", "--jobs", "4"],
            &["pyperf", "record", "-F", "100", "-o", "mixed.pyp", "--", "python3.11", "app.py", "--jobs", "4"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    let p1000 = Process {
        pid: 1000,
        command: args(&["/usr/bin/python3.11", "app.py", "--jobs", "4"]),
        python_version: "3.11.7".into(),
        interpreter_path: "/usr/bin/python3.11".into(),
        build_id: "3f2a9c0d1e4b5a6978877665544332211f0e0d0c".into(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    };
    let p2000 = Process {
        pid: 2000,
        command: args(&["/opt/py38/bin/python3.8", "-m", "worker", "--name", "données"]),
        python_version: "3.8.18".into(),
        interpreter_path: "/opt/py38/lib/libpython3.8.so.1.0".into(),
        build_id: String::new(),
        first_seen_ns: 5_000_000,
        ns_pid: 0,
        cgroup: String::new(),
    };
    let p3000 = Process {
        pid: 3000,
        command: args(&["python3.13", "/home/user/tool.py"]),
        python_version: "3.13.0".into(),
        interpreter_path: "/usr/local/lib/libpython3.13.so.1.0".into(),
        build_id: "0123456789abcdef0123456789abcdef01234567".into(),
        first_seen_ns: 2_000_000_000,
        ns_pid: 0,
        cgroup: String::new(),
    };
    w.add_process(&p1000).expect("process");
    w.add_process(&p2000).expect("process");
    let leaves: Vec<u32> = stacks
        .iter()
        .map(|s| {
            let ids: Vec<u32> = s.frames.iter().map(|f| w.intern_symbol(f)).collect();
            w.intern_stack(&ids)
        })
        .collect();
    let steps = 600u64; // 2 CPUs x 600 = 1200 samples over 3 s.
    let mut truncated = 0;
    let mut count = 0;
    let mut p3000_added = false;
    for step in 0..steps {
        for cpu in 0..2u32 {
            // CPUs deliver slightly out of time order: cpu 1's sample can come before cpu 0's.
            let time = step * 5_000_000 + if cpu == 0 { rng.below(40_000) } else { 10_000 };
            let mut weights: Vec<u32> = threads.iter().map(|t| t.weight).collect();
            if time < 2_000_000_000 {
                weights[5] = 0; // pid 3000 starts later
            }
            let t = &threads[rng.pick(&weights)];
            if t.pid == 3000 && !p3000_added {
                w.add_process(&p3000).expect("process");
                p3000_added = true;
            }
            let spec_weights: Vec<u32> = t.stacks.iter().map(|s| s.1).collect();
            let si = t.stacks[rng.pick(&spec_weights)].0;
            let spec = &stacks[si];
            let gil = spec.gil[rng.below(spec.gil.len() as u64) as usize];
            let (thread_state, pthread_id) = match gil {
                GilState::ThisThread => (ThreadStateMatch::Match, PthreadIdMatch::Match),
                GilState::OtherThread | GilState::NotLocked if spec.status == StackStatus::Idle => {
                    (ThreadStateMatch::ThisThreadNull, PthreadIdMatch::ThreadStateNull)
                }
                GilState::OtherThread | GilState::NotLocked => (ThreadStateMatch::Mismatch, PthreadIdMatch::Match),
                GilState::Error => (ThreadStateMatch::Unknown0, PthreadIdMatch::Error),
                GilState::NoInfo => (ThreadStateMatch::Unknown0, PthreadIdMatch::Unknown0),
                GilState::Null => (ThreadStateMatch::GlobalCurrentThreadNull, PthreadIdMatch::Null),
                _ => (ThreadStateMatch::BothNull, PthreadIdMatch::Mismatch),
            };
            if spec.status == StackStatus::Truncated {
                truncated += 1;
            }
            // A newer recorder's states, once each.
            let (gil, status) = match (step, cpu) {
                (333, 0) => (GilState::Unknown(42), spec.status),
                (444, 1) if spec.status == StackStatus::Complete => (gil, StackStatus::Unknown(9)),
                _ => (gil, spec.status),
            };
            w.push_sample(&SampleRecord {
                time_ns: time,
                cpu,
                pid: t.pid,
                tid: t.tid,
                comm: t.comm,
                thread_state,
                gil,
                pthread_id,
                status,
                stack: leaves[si],
                task_stack: 0,
                flags: 0,
                interp: 0,
                link: 0,
            })
            .expect("sample");
            count += 1;
        }
        if step % 150 == 149 {
            w.flush().expect("flush");
        }
    }
    let stats = Stats {
        samples: count,
        lost_samples: 7,
        truncated_stacks: truncated,
        lost_symbols: 1,
        errors: 2,
        duration_ns: steps * 5_000_000,
        counters: vec![("ringbuf-drops".into(), 7), ("read-errors".into(), 2)],
    };
    w.finish(&stats).expect("finish")
}

/// A recorder killed part way: no trailer. Attached with -p (no workload), a 3.12 process, period-based rate.
fn killed() -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = Writer::new(
        &mut out,
        &header(&[], &["pyperf", "record", "-p", "777", "-c", "1000000"], "cpu-clock", Rate::Period(1_000_000)),
    )
    .expect("header");
    w.add_process(&Process {
        pid: 777,
        command: args(&["/usr/bin/python3.12", "-u", "serve.py", "--port", "8080"]),
        python_version: "3.12.3".into(),
        interpreter_path: "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0".into(),
        build_id: "aabbccddeeff00112233445566778899aabbccdd".into(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    let f = "/srv/serve.py";
    let module = w.intern_symbol(&sym("", "<module>", f, 40));
    let serve = w.intern_symbol(&sym("", "serve_forever", f, 22));
    let handle = w.intern_symbol(&sym("Handler", "do_GET", f, 12));
    let handle2 = w.intern_symbol(&sym("Handler", "do_GET", f, 14));
    let s1 = w.intern_stack(&[module, serve]);
    let s2 = w.intern_stack(&[module, serve, handle]);
    let s3 = w.intern_stack(&[module, serve, handle2]);
    let mut rng = Rng::new(0x5eed_0002);
    for i in 0..240u64 {
        let (tid, comm) = if i % 3 == 0 { (778, "handler") } else { (777, "python3.12") };
        let stack = [0, s1, s2, s3][rng.below(4) as usize];
        w.push_sample(&SampleRecord {
            time_ns: 1_000_000 * i + 250_000 * rng.below(3),
            cpu: (i % 2) as u32,
            pid: 777,
            tid,
            comm,
            thread_state: if stack == 0 { ThreadStateMatch::ThisThreadNull } else { ThreadStateMatch::Match },
            gil: if stack == 0 { GilState::NotLocked } else { GilState::ThisThread },
            pthread_id: PthreadIdMatch::Match,
            status: if stack == 0 { StackStatus::Idle } else { StackStatus::Complete },
            stack,
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
        if i % 80 == 79 {
            w.flush().expect("flush");
        }
    }
    w.flush().expect("flush");
    drop(w);
    out
}

/// (offset, length) of each complete chunk after the preamble (layout: FORMAT.md, "Chunk").
pub fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    let (pre, head) = (pyperf_format::PREAMBLE_LEN, pyperf_format::CHUNK_HEADER_LEN);
    let mut out = Vec::new();
    let mut at = pre;
    while at + head <= bytes.len() {
        let stored = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        let len = head + stored;
        if at + len > bytes.len() {
            break;
        }
        out.push((at, len));
        at += len;
    }
    out
}

/// `mixed` cut off in the middle of a sample chunk.
fn cutoff() -> Vec<u8> {
    let mut bytes = mixed();
    let list = chunks(&bytes);
    // The file ends: ..., samples, samples, symbol table, trailer. Cut inside the second-to-last sample chunk.
    let (at, len) = list[list.len() - 4];
    bytes.truncate(at + len / 2);
    bytes
}

/// `payload` as a zstd chunk of any `kind`, even one no reader knows, framed by the format crate's own
/// [`pyperf_format::chunk_header`] (FORMAT.md, "Chunk").
pub fn raw_chunk(kind: u16, payload: &[u8]) -> Vec<u8> {
    let stored = zstd::bulk::compress(payload, 3).expect("zstd");
    let header = pyperf_format::chunk_header(kind, pyperf_format::FLAG_ZSTD, &stored, payload.len() as u32);
    [&header[..], &stored].concat()
}

/// Format 1.99 (a newer minor) with a chunk of a kind this version does not know; a process whose command
/// could not be read (so the title falls back to pyperf's command line); the cycles event.
fn newer_minor() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(&[], &["pyperf", "record", "-a", "-e", "cycles", "-c", "100000"], "cycles", Rate::Period(100_000)),
    )
    .expect("header");
    w.add_process(&Process {
        pid: 55,
        command: vec![],
        python_version: "3.10.14".into(),
        interpreter_path: "/usr/bin/python3.10".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    let f = "/x/job.py";
    let a = w.intern_symbol(&sym("", "<module>", f, 1));
    let b = w.intern_symbol(&sym("", "step", f, 2));
    let s = w.intern_stack(&[a, b]);
    let s0 = w.intern_stack(&[a]);
    for i in 0..20u64 {
        w.push_sample(&SampleRecord {
            time_ns: 40_000 * i * (1 + i % 3),
            cpu: 0,
            pid: 55,
            tid: 55 + (i % 2) as u32,
            comm: if i % 2 == 0 { "python3.10" } else { "job\tthread" },
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack: if i % 4 == 0 { s0 } else { s },
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    let mut bytes = w.finish(&Stats { samples: 20, duration_ns: 2_000_000, ..Default::default() }).expect("finish");
    bytes[10..12].copy_from_slice(&99u16.to_le_bytes());
    let list = chunks(&bytes);
    let after_header = list[0].0 + list[0].1;
    let unknown = raw_chunk(42, b"a chunk kind from the future");
    bytes.splice(after_header..after_header, unknown);
    bytes
}

/// A recorder's Process record (1.1 fields unknown).
fn process(pid: u32, command: &[&str], first_seen_ns: u64) -> Process {
    Process {
        pid,
        command: args(command),
        python_version: "3.12.1".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: String::new(),
        first_seen_ns,
        ns_pid: 0,
        cgroup: String::new(),
    }
}

fn push(w: &mut Writer<Vec<u8>>, time_ms: u64, pid: u32, tid: u32, comm: &str, stack: u32) {
    push_flagged(w, time_ms, pid, tid, comm, stack, 0);
}

/// [`push`] with these [`sample_flags`].
fn push_flagged(w: &mut Writer<Vec<u8>>, time_ms: u64, pid: u32, tid: u32, comm: &str, stack: u32, flags: u8) {
    w.push_sample(&SampleRecord {
        time_ns: time_ms * 1_000_000,
        cpu: 0,
        pid,
        tid,
        comm,
        thread_state: ThreadStateMatch::Match,
        gil: GilState::ThisThread,
        pthread_id: PthreadIdMatch::Match,
        status: StackStatus::Complete,
        stack,
        task_stack: 0,
        flags,
        interp: 0,
        link: 0,
    })
    .expect("sample");
}

/// Processes that share a pid (FORMAT.md: "a pid may appear again after pid reuse; the later one applies from its
/// first_seen_ns"):
/// - pid 100 runs `a.py` (threads 100 and 101), then exec's `b.py`: a second record of pid 100 from 10 ms on, whose
///   samples (its main thread is tid 100 again) are its own. A sample of `a.py` taken at 9 ms is written after the
///   second record (CPUs deliver out of order), and the writer batches samples: the chunks after the second record
///   hold both processes' samples, which only their times tell apart.
/// - pid 400 is reused: two records whose commands could not be read, named by their main threads (`old`, `new`).
/// - pid 500's first samples are in a chunk before its record (which applies to them all the same).
/// - pid 300 has samples and no record.
pub fn exec() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3", "a.py"],
            &["pyperf", "record", "--", "python3", "a.py"],
            "cpu-clock",
            Rate::Frequency(1000),
        ),
    )
    .expect("header");
    let stack = |w: &mut Writer<Vec<u8>>, frames: &[(&str, &str, u32)]| {
        let ids: Vec<u32> = frames.iter().map(|&(n, f, l)| w.intern_symbol(&sym("", n, f, l))).collect();
        w.intern_stack(&ids)
    };
    let a_main = stack(&mut w, &[("<module>", "/a.py", 1), ("main", "/a.py", 3)]);
    let a_work = stack(&mut w, &[("work", "/a.py", 5)]);
    let b_main = stack(&mut w, &[("<module>", "/b.py", 1), ("main", "/b.py", 2)]);
    let x = stack(&mut w, &[("x", "/x.py", 1)]);
    w.push_sample(&SampleRecord {
        time_ns: 500_000,
        cpu: 0,
        pid: 500,
        tid: 500,
        comm: "early",
        thread_state: ThreadStateMatch::Match,
        gil: GilState::ThisThread,
        pthread_id: PthreadIdMatch::Match,
        status: StackStatus::Complete,
        stack: x,
        task_stack: 0,
        flags: 0,
        interp: 0,
        link: 0,
    })
    .expect("sample");
    w.flush().expect("flush");
    w.add_process(&process(500, &["python3", "early.py"], 0)).expect("process");
    w.add_process(&process(100, &["python3", "a.py"], 0)).expect("process");
    w.add_process(&process(400, &[], 0)).expect("process");
    for t in 1..=3 {
        push(&mut w, t, 100, 100, "python3", a_main);
    }
    push(&mut w, 4, 100, 101, "worker", a_work);
    push(&mut w, 5, 400, 400, "old", x);
    push(&mut w, 6, 500, 500, "early", x);
    w.add_process(&process(100, &["python3", "b.py"], 10_000_000)).expect("process");
    push(&mut w, 9, 100, 100, "python3", a_main);
    for t in 11..=12 {
        push(&mut w, t, 100, 100, "python3", b_main);
    }
    push(&mut w, 13, 300, 300, "nameless", x);
    w.add_process(&process(400, &[], 20_000_000)).expect("process");
    push(&mut w, 21, 400, 400, "new", x);
    w.finish(&Stats { samples: 12, duration_ns: 30_000_000, ..Default::default() }).expect("finish")
}

/// Names from the recording that would drive a terminal or reorder what it shows: ESC sequences (colour, clear
/// screen, window title), BEL, carriage return, and bidirectional overrides and isolates, in the function name,
/// the file, the process command, the thread name, the host name, a counter and a recorder warning.
pub fn hostile_names() -> Vec<u8> {
    let mut h = header(&[], &["pyperf", "record", "-a"], "cpu-clock", Rate::Frequency(100));
    h.hostname = "host\u{1b}]0;pwned\u{7}".into();
    let mut w = Writer::new(Vec::new(), &h).expect("header");
    let mut p = process(7, &["python3", "evil\u{1b}[2J.py", "\u{202e}txt.exe"], 0);
    p.interpreter_path = "/usr/bin/python3\r\u{1b}[1A".into();
    p.cgroup = "/x\u{1b}[8m.scope".into();
    w.add_process(&p).expect("process");
    w.add_warning(&pyperf_format::RecorderWarning { pid: 7, text: "newer \u{1b}[5m\u{202e}blink".into() })
        .expect("warning");
    let f = w.intern_symbol(&sym("C\u{200f}", "f\u{1b}[31m\u{202e}red", "/tmp/\u{2066}x\u{2069}.py\u{1b}[0m", 3));
    // g's name ends in a backslash, x, 1, b: text that must not read as an escaped ESC.
    let g = w.intern_symbol(&sym("", "g\u{61c}\u{200e}\\x1b", "/tmp/b\u{2028}c.py", 4));
    let s = w.intern_stack(&[f, g]);
    for t in 0..4 {
        push(&mut w, t, 7, 7 + (t % 2) as u32, "th\u{1b}[7m\u{202e}read", s);
    }
    w.finish(&Stats {
        samples: 4,
        duration_ns: 4_000_000,
        counters: vec![("c\u{1b}[41m".into(), 1)],
        ..Default::default()
    })
    .expect("finish")
}

const MS: u64 = 1_000_000;

/// An off-CPU interval of `offcpu`.
#[allow(clippy::too_many_arguments)]
fn interval(
    tid: u32,
    comm: &str,
    start_ns: u64,
    duration_ns: u64,
    runnable_ns: u64,
    kind: OffCpuKind,
    syscall: i32,
    gil: GilState,
    (status, stack): (StackStatus, u32),
    flags: u8,
) -> OffCpuInterval {
    OffCpuInterval {
        pid: 500,
        tid,
        start_ns,
        duration_ns,
        runnable_ns,
        weight_ns: duration_ns.max(OFF_CPU_MIN_NS),
        kind,
        syscall,
        gil,
        status,
        stack,
        flags,
        comm: comm.into(),
        task_stack: 0,
        interp: 0,
        link: 0,
    }
}

/// `offcpu`'s --off-cpu-min: 1 ms.
pub const OFF_CPU_MIN_NS: u64 = MS;

/// A recording made with `--off-cpu` (format 1.3), 1 s at 100 Hz (a CPU sample weighs 10 ms), one process (pid 500)
/// and three threads whose every millisecond is known:
///
/// - 500 `MainThread` (comm python3.12): handle() runs 0-100 ms (10 samples); read_request() blocks in read(2)
///   100-300 ms (200.0004 ms, the last 20 ms of it runnable); compute() runs 300-400 ms (10 samples), is preempted
///   400-430 ms (runnable), runs 430-500 ms (7 samples); handle() blocks 0.2 ms in futex(2) at 500 ms (shorter than
///   the 1 ms minimum: sampled, weighs 1 ms), runs 510-600 ms (9 samples); then waits without Python frames in
///   epoll_wait(2) from 600 ms to the end (still open when the recording ends). Running 36 x 10 = 360 ms, runnable
///   20 + 30 = 50 ms, blocked 180.0004 + 1 + 400 = 581.0004 ms: wall 991.0004 ms.
/// - 501 `worker-1` (comm worker): wait_job() blocked in futex(2) since before the recording until 250.0004 ms (5 ms
///   of it runnable); work() runs 250-350 ms (10 samples), waits for the GIL 350-420.0006 ms (10 ms runnable), runs
///   420-500 ms (8); save() in fsync(2) uninterruptibly 500-540 ms (disk), runs 540-560 ms (2); a 3 ms disk wait
///   with no system call and an unreadable stack at 560 ms; save() runs 570-600 ms (3); wait_job() in futex(2)
///   again 600-990.0004 ms, runs at 990 ms (1 sample). Running 24 x 10 = 240 ms, runnable 5 + 10 = 15 ms,
///   blocked 245.0004 + 40 + 3 + 390.0004 = 678.0008 ms (disk 43 ms), GIL wait 60.0006 ms: wall 993.0014 ms.
/// - 502 (comm poller, no Python name): Poller.poll_loop() (called by Thread._bootstrap) blocked in poll(2) the
///   whole recording (begun before it, open at its end): 1000 ms off CPU, no sample.
///
/// The trailer counts 10 intervals, 57 short ones left out, 1 sampled, 0 lost, 1 unreadable stack, 2 open at the end.
/// All threads: off CPU 2384.0018 ms, wall 2984.0018 ms. Folded microseconds are rounded per line after summing:
/// wait_job()'s two futex waits are 640001 (250.0004 + 390.0004 ms), not 250000 + 390000.
fn offcpu() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.12", "server.py"],
            &["pyperf", "record", "--off-cpu", "-F", "100", "--", "python3.12", "server.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.add_process(&Process {
        pid: 500,
        command: args(&["/usr/bin/python3.12", "server.py"]),
        python_version: "3.12.3".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    let srv = "/srv/server.py";
    let thr = "/usr/lib/python3.12/threading.py";
    let wrk = "/srv/worker.py";
    let module = w.intern_symbol(&sym("", "<module>", srv, 10));
    let main = w.intern_symbol(&sym("", "main", srv, 5));
    let handle = w.intern_symbol(&sym("", "handle", srv, 20));
    let read_request = w.intern_symbol(&sym("", "read_request", srv, 30));
    let compute = w.intern_symbol(&sym("", "compute", srv, 40));
    let bootstrap = w.intern_symbol(&sym("Thread", "_bootstrap", thr, 1010));
    let run = w.intern_symbol(&sym("Worker", "run", wrk, 8));
    let wait_job = w.intern_symbol(&sym("Worker", "wait_job", wrk, 12));
    let work = w.intern_symbol(&sym("Worker", "work", wrk, 15));
    let save = w.intern_symbol(&sym("Worker", "save", wrk, 20));
    let poll_loop = w.intern_symbol(&sym("Poller", "poll_loop", wrk, 30));
    let complete = |stack| (StackStatus::Complete, stack);
    let a = complete(w.intern_stack(&[module, main, handle]));
    let b = complete(w.intern_stack(&[module, main, read_request]));
    let c = complete(w.intern_stack(&[module, main, compute]));
    let w1 = complete(w.intern_stack(&[bootstrap, run, wait_job]));
    let w2 = complete(w.intern_stack(&[bootstrap, run, work]));
    let w3 = complete(w.intern_stack(&[bootstrap, run, save]));
    let p1 = complete(w.intern_stack(&[bootstrap, poll_loop]));
    let none = (StackStatus::Complete, 0);
    let unreadable = (StackStatus::Error, 0);
    w.add_thread_names(&[
        ThreadName { pid: 500, tid: 500, time_ns: 0, name: "MainThread".into() },
        ThreadName { pid: 500, tid: 501, time_ns: 0, name: "worker-1".into() },
    ])
    .expect("thread names");

    // (time, tid, stack) of every CPU sample.
    let mut samples: Vec<(u64, u32, u32)> = Vec::new();
    let mut run_at = |tid: u32, stack: (StackStatus, u32), from_ms: u64, n: u64| {
        for k in 0..n {
            samples.push(((from_ms + 10 * k) * MS, tid, stack.1));
        }
    };
    run_at(500, a, 0, 10);
    run_at(500, c, 300, 10);
    run_at(500, c, 430, 7);
    run_at(500, a, 510, 9);
    run_at(501, w2, 250, 10);
    run_at(501, w2, 420, 8);
    run_at(501, w3, 540, 2);
    run_at(501, w3, 570, 3);
    run_at(501, w1, 990, 1);
    samples.sort();

    use OffCpuKind::{Blocked, Disk, Gil, Runnable};
    let (none_gil, held, waiting) = (GilState::NotLocked, GilState::ThisThread, GilState::Waiting);
    let both = off_cpu_flags::BEFORE_START | off_cpu_flags::OPEN_AT_END;
    let mut intervals = vec![
        interval(500, "python3.12", 100 * MS, 200 * MS + 400, 20 * MS, Blocked, 0, none_gil, b, 0),
        interval(500, "python3.12", 400 * MS, 30 * MS, 30 * MS, Runnable, -1, held, c, 0),
        interval(500, "python3.12", 500 * MS, 200_000, 0, Blocked, 202, none_gil, a, 0),
        interval(500, "python3.12", 600 * MS, 400 * MS, 0, Blocked, 232, none_gil, none, off_cpu_flags::OPEN_AT_END),
        interval(501, "worker", 0, 250 * MS + 400, 5 * MS, Blocked, 202, none_gil, w1, off_cpu_flags::BEFORE_START),
        interval(501, "worker", 350 * MS, 70 * MS + 600, 10 * MS, Gil, 202, waiting, w2, 0),
        interval(501, "worker", 500 * MS, 40 * MS, 0, Disk, 74, none_gil, w3, 0),
        interval(501, "worker", 560 * MS, 3 * MS, 0, Disk, -1, none_gil, unreadable, 0),
        interval(501, "worker", 600 * MS, 390 * MS + 400, 0, Blocked, 202, none_gil, w1, 0),
        interval(502, "poller", 0, 1000 * MS, 0, Blocked, 7, none_gil, p1, both),
    ];
    // The recorder writes an interval when its thread comes back on CPU (or at the end).
    intervals.sort_by_key(|iv| (iv.start_ns + iv.duration_ns, iv.tid));

    // Samples and intervals in time order (the end of an interval), flushed once half way.
    let (mut si, mut ii) = (0, 0);
    let mut flushed = false;
    while si < samples.len() || ii < intervals.len() {
        let sample_next = ii == intervals.len()
            || (si < samples.len() && samples[si].0 < intervals[ii].start_ns + intervals[ii].duration_ns);
        let now = if sample_next { samples[si].0 } else { intervals[ii].start_ns + intervals[ii].duration_ns };
        if !flushed && now >= 500 * MS {
            w.flush().expect("flush");
            flushed = true;
        }
        if sample_next {
            let (time_ns, tid, stack) = samples[si];
            w.push_sample(&SampleRecord {
                time_ns,
                cpu: tid - 500,
                pid: 500,
                tid,
                comm: if tid == 500 { "python3.12" } else { "worker" },
                thread_state: ThreadStateMatch::Match,
                gil: GilState::ThisThread,
                pthread_id: PthreadIdMatch::Match,
                status: StackStatus::Complete,
                stack,
                task_stack: 0,
                flags: 0,
                interp: 0,
                link: 0,
            })
            .expect("sample");
            si += 1;
        } else {
            w.push_off_cpu(&intervals[ii]).expect("interval");
            ii += 1;
        }
    }
    let counters = [
        ("off_cpu_intervals", intervals.len() as u64),
        ("off_cpu_short", 57),
        ("off_cpu_sampled", 1),
        ("off_cpu_lost", 0),
        ("off_cpu_unreadable", 1),
        ("off_cpu_open_at_end", 2),
    ];
    w.finish(&Stats {
        samples: samples.len() as u64,
        duration_ns: 1000 * MS,
        counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    })
    .expect("finish")
}

/// A small recording made with `--off-cpu` on any event and rate: one thread, two samples, a blocked interval in
/// read(2) between them and a runnable one after, 100 ms long.
pub fn small_offcpu(event: &str, rate: Rate) -> Vec<u8> {
    small_offcpu_from(event, rate, 0)
}

/// [`small_offcpu`], started `later_ns` after the other synthetic recordings (by the wall clock).
pub fn small_offcpu_from(event: &str, rate: Rate, later_ns: u64) -> Vec<u8> {
    let mut h = header(&["python3", "t.py"], &["pyperf", "record", "--off-cpu", "--", "python3", "t.py"], event, rate);
    h.start_time_unix_ns += later_ns;
    let mut w = Writer::new(Vec::new(), &h).expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.add_process(&process(7, &["python3", "t.py"], 0)).expect("process");
    let f = w.intern_symbol(&sym("", "f", "/t.py", 3));
    let stack = w.intern_stack(&[f]);
    push(&mut w, 0, 7, 7, "python3", stack);
    let block = interval(
        7,
        "python3",
        MS,
        60 * MS,
        0,
        OffCpuKind::Blocked,
        0,
        GilState::NotLocked,
        (StackStatus::Complete, stack),
        0,
    );
    w.push_off_cpu(&OffCpuInterval { pid: 7, ..block }).expect("interval");
    push(&mut w, 61, 7, 7, "python3", stack);
    let preempted = interval(
        7,
        "python3",
        62 * MS,
        38 * MS,
        38 * MS,
        OffCpuKind::Runnable,
        -1,
        GilState::ThisThread,
        (StackStatus::Complete, stack),
        0,
    );
    w.push_off_cpu(&OffCpuInterval { pid: 7, ..preempted }).expect("interval");
    w.finish(&Stats { samples: 2, duration_ns: 100 * MS, ..Default::default() }).expect("finish")
}

/// A late cpu-clock sample on a VM whose host stole the CPU (format 1.11), in a recording with `--off-cpu` at 1000 Hz:
/// `f` sampled at 0 ms; the CPU taken from 1 to 4 ms while `g` ran, so that the sample at 4 ms (`g`) stands for three
/// more periods, written as three samples of `g` at 1, 2 and 3 ms flagged [`sample_flags::STOLEN`] (with `flagged`
/// false: without the flag, as a 1.10 recorder wrote them); then `g` blocked in read(2) from 5 to 20 ms.
pub fn stolen_periods(flagged: bool) -> Vec<u8> {
    let h = header(
        &["python3", "t.py"],
        &["pyperf", "record", "--off-cpu", "--", "python3", "t.py"],
        "cpu-clock",
        Rate::Frequency(1000),
    );
    let mut w = Writer::new(Vec::new(), &h).expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.add_process(&process(7, &["python3", "t.py"], 0)).expect("process");
    let f = w.intern_symbol(&sym("", "f", "/t.py", 3));
    let g = w.intern_symbol(&sym("", "g", "/t.py", 9));
    let (f, g) = (w.intern_stack(&[f]), w.intern_stack(&[f, g]));
    push(&mut w, 0, 7, 7, "python3", f);
    for ms in 1..4 {
        push_flagged(&mut w, ms, 7, 7, "python3", g, if flagged { sample_flags::STOLEN } else { 0 });
    }
    push(&mut w, 4, 7, 7, "python3", g);
    let block = interval(
        7,
        "python3",
        5 * MS,
        15 * MS,
        0,
        OffCpuKind::Blocked,
        0,
        GilState::NotLocked,
        (StackStatus::Complete, g),
        0,
    );
    w.push_off_cpu(&OffCpuInterval { pid: 7, ..block }).expect("interval");
    let counters = vec![("clock_late_samples".into(), 1), ("clock_periods_added".into(), 3)];
    w.finish(&Stats { samples: 5, duration_ns: 20 * MS, counters, ..Default::default() }).expect("finish")
}

/// A native frame (format 1.4) of `library`, with further flags (glue, marker, unresolved).
pub fn native_sym(name: &str, library: &str, flags: u32) -> Symbol {
    Symbol {
        scope: String::new(),
        name: name.into(),
        file: library.into(),
        line: 0,
        flags: symbol_flags::NATIVE | flags,
    }
}

/// A kernel frame (format 1.4).
pub fn kernel_sym(name: &str) -> Symbol {
    Symbol {
        scope: String::new(),
        name: name.into(),
        file: "[kernel.kallsyms]".into(),
        line: 0,
        flags: symbol_flags::KERNEL,
    }
}

/// The libraries of `native`: (path, build id).
pub const NATIVE_LIBRARIES: [(&str, &str); 5] = [
    ("/usr/bin/python3.12", "6c2e1f0a9b8d7c6e5f4a3b2c1d0e9f8a7b6c5d4e"),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", "c289da5071a3399de893d2af81d6a30c62646e1e"),
    (
        "/usr/lib/python3.12/lib-dynload/zlib.cpython-312-x86_64-linux-gnu.so",
        "9a1bd3e0c4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9",
    ),
    ("/usr/lib/x86_64-linux-gnu/libz.so.1.3", "3f0c6d1e2a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"),
    ("/opt/app/libfoo.so", ""),
];

/// A recording made with `--native --kernel --off-cpu` (format 1.4), 100 Hz (a sample weighs 10 ms), one process
/// (pid 600, Python 3.12, the interpreter linked into /usr/bin/python3.12) and three threads. Stacks as the recorder
/// merges them, root first (g: glue, hidden by default; k: kernel):
///
/// - T0, 40 samples of 600: _start g, __libc_start_call_main g, Py_BytesMain g, `<module>`, compress_all,
///   zlib_Compress_compress (zlib module), deflate (libz), longest_match (libz);
/// - T1, 10 samples of 600: the same to deflate, then asm_exc_page_fault k, exc_page_fault k (a Python frame calling
///   libz, with a kernel leaf);
/// - T2, 20 samples of 600: the three start-up glue frames, `<module>`, PyObject_Vectorcall g,
///   _PyFunction_Vectorcall g, on_item (glue between two Python frames);
/// - T3, 5 samples of 600: `<module>`, compress_all, `[native: unmerged]` (marker: the Python frames only);
/// - T4, 15 samples of 601: start_thread g (libc), thread_run g, Thread._bootstrap, Worker.work, read (libc),
///   entry_SYSCALL_64 k, do_syscall_64 k, ksys_read k;
/// - T5, 8 samples of 602 (a C thread, no Python frames: status idle): start_thread (libc, not glue here),
///   worker_main (libfoo), libfoo.so+0x1a2b (unresolved);
/// - T6, 2 samples of 601 without frames (idle).
///
/// Off CPU: 601 blocked in read(2) 150-450 ms (300 ms) with stack T4; 600 runnable 750-800 ms (50 ms) with stack
/// T2. 100 samples. Hand-checked shares (samples): `<module>` 75 (T0-T3), compress_all 55 (T0, T1, T3), deflate 50
/// (T0, T1), libz.so.1.3 self 40 (longest_match: the T1 samples end in the kernel), kernel self 25 (T1 10, T4 15),
/// `[idle]` 2. Without native frames T3 joins T0 (`<module>;compress_all` 45) and T5 becomes `[idle]` (10 with
/// T6); without kernel frames T1's leaf is deflate (deflate self 10) and T4's read (15).
fn native() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.12", "app.py"],
            &["pyperf", "record", "--native", "--kernel", "--off-cpu", "-F", "100", "--", "python3.12", "app.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.add_process(&Process {
        pid: 600,
        command: args(&["/usr/bin/python3.12", "app.py"]),
        python_version: "3.12.3".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: NATIVE_LIBRARIES[0].1.into(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    let [python, libc, zlib, libz, libfoo] = NATIVE_LIBRARIES.map(|l| l.0);
    let (app, threading) = ("/srv/app.py", "/usr/lib/python3.12/threading.py");
    let (glue, marker, unresolved) = (symbol_flags::GLUE, symbol_flags::MARKER, symbol_flags::UNRESOLVED);
    let start = [
        native_sym("_start", python, glue),
        native_sym("__libc_start_call_main", libc, glue),
        native_sym("Py_BytesMain", python, glue),
    ];
    let module = sym("", "<module>", app, 30);
    let compress = sym("", "compress_all", app, 12);
    let to_deflate = [
        module.clone(),
        compress.clone(),
        native_sym("zlib_Compress_compress", zlib, 0),
        native_sym("deflate", libz, 0),
    ];
    let cat = |parts: &[&[Symbol]]| -> Vec<Symbol> { parts.concat() };
    let t0 = cat(&[&start, &to_deflate, &[native_sym("longest_match", libz, 0)]]);
    let t1 = cat(&[&start, &to_deflate, &[kernel_sym("asm_exc_page_fault"), kernel_sym("exc_page_fault")]]);
    let t2 = cat(&[
        &start,
        &[
            module.clone(),
            native_sym("PyObject_Vectorcall", python, glue),
            native_sym("_PyFunction_Vectorcall", python, glue),
            sym("", "on_item", app, 20),
        ],
    ]);
    let t3 = vec![module.clone(), compress.clone(), native_sym("[native: unmerged]", "", marker)];
    let t4 = vec![
        native_sym("start_thread", libc, glue),
        native_sym("thread_run", python, glue),
        sym("Thread", "_bootstrap", threading, 1030),
        sym("Worker", "work", app, 40),
        native_sym("read", libc, 0),
        kernel_sym("entry_SYSCALL_64"),
        kernel_sym("do_syscall_64"),
        kernel_sym("ksys_read"),
    ];
    let t5 = vec![
        native_sym("start_thread", libc, 0),
        native_sym("worker_main", libfoo, 0),
        native_sym("libfoo.so+0x1a2b", libfoo, unresolved),
    ];
    let mut leaf = |frames: &[Symbol]| {
        let ids: Vec<u32> = frames.iter().map(|f| w.intern_symbol(f)).collect();
        w.intern_stack(&ids)
    };
    let leaves = [leaf(&t0), leaf(&t1), leaf(&t2), leaf(&t3), leaf(&t4), leaf(&t5), 0];
    // The recorder names a library when it first meets it: libfoo only with thread 602's first sample.
    for (path, build_id) in &NATIVE_LIBRARIES[..4] {
        w.push_library(path, build_id).expect("library");
    }

    // (time, tid, template) of every sample.
    let mut samples: Vec<(u64, u32, usize)> = Vec::new();
    for k in 0..75u64 {
        let template = match k % 15 {
            0..=7 => 0,
            8 | 9 => 1,
            10..=13 => 2,
            _ => 3,
        };
        samples.push((k * 10 * MS, 600, template));
    }
    for k in 0..15u64 {
        samples.push((5 * MS + k * 10 * MS, 601, 4));
    }
    samples.push((460 * MS, 601, 6));
    samples.push((470 * MS, 601, 6));
    for k in 0..8u64 {
        samples.push((302 * MS + k * 10 * MS, 602, 5));
    }
    samples.sort();
    let blocked = interval(
        601,
        "worker",
        150 * MS,
        300 * MS,
        0,
        OffCpuKind::Blocked,
        0,
        GilState::NotLocked,
        (StackStatus::Complete, leaves[4]),
        0,
    );
    let runnable = interval(
        600,
        "python3.12",
        750 * MS,
        50 * MS,
        50 * MS,
        OffCpuKind::Runnable,
        -1,
        GilState::ThisThread,
        (StackStatus::Complete, leaves[2]),
        0,
    );
    // The recorder writes an interval when its thread is back on CPU (or at the end).
    let mut intervals = vec![OffCpuInterval { pid: 600, ..blocked }, OffCpuInterval { pid: 600, ..runnable }];
    let mut libfoo_pushed = false;
    for &(time_ns, tid, template) in &samples {
        while intervals.first().is_some_and(|iv| iv.start_ns + iv.duration_ns <= time_ns) {
            w.push_off_cpu(&intervals.remove(0)).expect("interval");
        }
        if tid == 602 && !libfoo_pushed {
            // What came before is on disk (a periodic flush): libfoo comes in a library chunk of its own.
            w.flush().expect("flush");
            w.push_library(NATIVE_LIBRARIES[4].0, NATIVE_LIBRARIES[4].1).expect("library");
            libfoo_pushed = true;
        }
        let idle = template >= 5;
        w.push_sample(&SampleRecord {
            time_ns,
            cpu: tid - 600,
            pid: 600,
            tid,
            comm: ["python3.12", "worker", "zpool"][(tid - 600) as usize],
            thread_state: if idle { ThreadStateMatch::ThisThreadNull } else { ThreadStateMatch::Match },
            gil: if idle { GilState::NotLocked } else { GilState::ThisThread },
            pthread_id: if idle { PthreadIdMatch::ThreadStateNull } else { PthreadIdMatch::Match },
            status: if idle { StackStatus::Idle } else { StackStatus::Complete },
            stack: leaves[template],
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    for iv in intervals {
        w.push_off_cpu(&iv).expect("interval");
    }
    let counters = [
        ("native_merged", 93),
        ("native_unmerged", 5),
        ("native_no_stack", 0),
        ("kernel_stacks", 25),
        ("kernel_frames", 65),
        ("off_cpu_intervals", 2),
    ];
    w.finish(&Stats {
        samples: samples.len() as u64,
        duration_ns: 800 * MS,
        counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    })
    .expect("finish")
}

/// A task-view pseudo-frame (format 1.5): `[task NAME]`, `[asyncio loop]`.
pub fn task_sym(name: &str) -> Symbol {
    Symbol { scope: String::new(), name: name.into(), file: String::new(), line: 0, flags: symbol_flags::TASK }
}

/// A recording of an asyncio service made with `--off-cpu` and the task view (format 1.5), 1 s at 100 Hz (a CPU
/// sample weighs 10 ms), one process (pid 700, Python 3.12) and two threads. Thread view (`stack`) of the event loop
/// thread: `<module>`, asyncio.run, Runner.run, run_until_complete, run_forever, _run_once (L), then `Handle._run`
/// and the running coroutine; task view (`task_stack`): the tasks root first, `[task NAME]` between their frames.
///
/// - 700 `MainThread` (comm python3.12), the loop:
///   - R, 20 samples, 0-200 ms: render() running in request-3 (8), request-7 (7), request-12 (5): task view
///     `[task Task-1]`, main, `[task request-K]`, handle_request, render; thread view L, Handle._run, handle_request,
///     render;
///   - Q, 10 samples, 200-300 ms: query_db() running in orders-3 (6, awaited by request-3 and one more:
///     `[task orders-3 (+1 awaiters)]`) and orders-7 (4, `[task orders-7]`), under request-3 / request-7;
///   - U, 1 sample at 300 ms: fetch_orders() whose task the recorder did not find (no task stack: the thread view);
///   - S, 4 samples, 310-350 ms: the loop's own work, no task running: `[asyncio loop]`, L, EpollSelector.select;
///   - then off CPU in epoll_wait(2) 350-1000 ms (650 ms, open at the end), task view `[asyncio loop]` ... select.
/// - 701 `cruncher` (comm worker), a plain thread (no task stacks): Thread._bootstrap, Worker.run, crunch, 10
///   samples 0-100 ms, then blocked in futex(2) 100-1000 ms (900 ms, open at the end).
///
/// Task waits, one sweep every 100 ms (at 100, 200, ... 1000 ms), each weighing 100 ms, all owned by thread 700:
/// Task-1 in main (`[task Task-1]`, main) every sweep: 1000 ms; request-3 in handle_request sweeps 1-5 (500 ms),
/// request-7 sweeps 3-8 (600 ms), request-12 sweeps 6-10 (500 ms); orders-3 in fetch_orders, query_db, sleep
/// sweeps 1-5 (500 ms); orders-7 the same, sweeps 3-8 (600 ms). 37 waits, 3700 ms.
///
/// So, aggregated (default): CPU: `[task request-N]` 30 samples (render 20, orders 10), chains `Task-N > request-N`
/// 20, `Task-N > request-N > orders-N (+1 awaiters)` 6, `Task-N > request-N > orders-N` 4, `[asyncio loop]` 4.
/// Wall: running 450 ms, off CPU 1550 ms, task waits 3700 ms: chains `Task-N > request-N` 1800 ms (render 200, waits
/// 1600), `Task-N` 1000 ms, `[asyncio loop]` 690 ms (select 40, epoll_wait 650). The thread view (--no-async) has no
/// task waits: wall 2000 ms.
fn tasks() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.12", "service.py"],
            &["pyperf", "record", "--off-cpu", "-F", "100", "--", "python3.12", "service.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.start_task_waits().expect("task wait chunk");
    w.add_process(&Process {
        pid: 700,
        command: args(&["/usr/bin/python3.12", "service.py"]),
        python_version: "3.12.3".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    w.add_thread_names(&[
        ThreadName { pid: 700, tid: 700, time_ns: 0, name: "MainThread".into() },
        ThreadName { pid: 700, tid: 701, time_ns: 0, name: "cruncher".into() },
    ])
    .expect("thread names");
    let svc = "/srv/service.py";
    let aio = "/usr/lib/python3.12/asyncio";
    let mut i = |s: Symbol| w.intern_symbol(&s);
    let module = i(sym("", "<module>", svc, 40));
    let run = i(sym("", "run", &format!("{aio}/runners.py"), 194));
    let runner = i(sym("Runner", "run", &format!("{aio}/runners.py"), 118));
    let until = i(sym("BaseEventLoop", "run_until_complete", &format!("{aio}/base_events.py"), 678));
    let forever = i(sym("BaseEventLoop", "run_forever", &format!("{aio}/base_events.py"), 645));
    let once = i(sym("BaseEventLoop", "_run_once", &format!("{aio}/base_events.py"), 1999));
    let handle_run = i(sym("Handle", "_run", &format!("{aio}/events.py"), 88));
    let select = i(sym("EpollSelector", "select", "/usr/lib/python3.12/selectors.py", 468));
    let main = i(sym("", "main", svc, 35));
    let handle_request = i(sym("", "handle_request", svc, 20));
    let render = i(sym("", "render", svc, 24));
    let fetch_orders = i(sym("", "fetch_orders", svc, 12));
    let query_db = i(sym("", "query_db", svc, 6));
    let sleep = i(sym("", "sleep", &format!("{aio}/tasks.py"), 718));
    let bootstrap = i(sym("Thread", "_bootstrap", "/usr/lib/python3.12/threading.py", 1010));
    let worker_run = i(sym("Worker", "run", svc, 50));
    let crunch = i(sym("", "crunch", svc, 55));
    let loop_marker = i(task_sym(symbol_flags::ASYNCIO_LOOP));
    let task1 = i(task_sym("[task Task-1]"));
    let request = |k: u32| task_sym(&format!("[task request-{k}]"));
    let requests: Vec<u32> = [3, 7, 12].iter().map(|&k| w.intern_symbol(&request(k))).collect();
    let orders3 = w.intern_symbol(&task_sym("[task orders-3 (+1 awaiters)]"));
    let orders7 = w.intern_symbol(&task_sym("[task orders-7]"));
    let lp = [module, run, runner, until, forever, once];
    let with = |prefix: &[u32], rest: &[u32]| -> Vec<u32> { prefix.iter().chain(rest).copied().collect() };

    let thread_render = w.intern_stack(&with(&lp, &[handle_run, handle_request, render]));
    let thread_query = w.intern_stack(&with(&lp, &[handle_run, fetch_orders, query_db]));
    let thread_fetch = w.intern_stack(&with(&lp, &[handle_run, fetch_orders]));
    let thread_select = w.intern_stack(&with(&lp, &[select]));
    let task_render: Vec<u32> =
        requests.iter().map(|&r| w.intern_stack(&[task1, main, r, handle_request, render])).collect();
    let orders = |w: &mut Writer<Vec<u8>>, r: u32, o: u32, tail: &[u32]| {
        w.intern_stack(&with(&[task1, main, r, handle_request, o, fetch_orders], tail))
    };
    let task_query =
        [orders(&mut w, requests[0], orders3, &[query_db]), orders(&mut w, requests[1], orders7, &[query_db])];
    let task_select = w.intern_stack(&with(&with(&[loop_marker], &lp), &[select]));
    let cruncher = w.intern_stack(&[bootstrap, worker_run, crunch]);

    let sample = |w: &mut Writer<Vec<u8>>, time_ms: u64, tid: u32, stack: u32, task_stack: u32| {
        w.push_sample(&SampleRecord {
            time_ns: time_ms * MS,
            cpu: tid - 700,
            pid: 700,
            tid,
            comm: if tid == 700 { "python3.12" } else { "worker" },
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack,
            task_stack,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    };
    // Render: request-3 x8, request-7 x7, request-12 x5; the cruncher's 10 samples beside them.
    let per_request = [8u64, 7, 5];
    let mut t = 0;
    for (k, &n) in per_request.iter().enumerate() {
        for _ in 0..n {
            sample(&mut w, t, 700, thread_render, task_render[k]);
            t += 10;
        }
    }
    for k in 0..10 {
        sample(&mut w, k * 10, 701, cruncher, 0);
    }
    for k in 0..10u64 {
        sample(&mut w, 200 + k * 10, 700, thread_query, task_query[usize::from(k >= 6)]);
    }
    sample(&mut w, 300, 700, thread_fetch, 0);
    w.flush().expect("flush");
    for k in 0..4 {
        sample(&mut w, 310 + k * 10, 700, thread_select, task_select);
    }
    let off = |tid: u32, comm: &str, start_ms: u64, syscall: i32, stack: u32, task_stack: u32| OffCpuInterval {
        pid: 700,
        tid,
        start_ns: start_ms * MS,
        duration_ns: (1000 - start_ms) * MS,
        runnable_ns: 0,
        weight_ns: (1000 - start_ms) * MS,
        kind: OffCpuKind::Blocked,
        syscall,
        gil: GilState::NotLocked,
        status: StackStatus::Complete,
        stack,
        flags: off_cpu_flags::OPEN_AT_END,
        comm: comm.into(),
        task_stack,
        interp: 0,
        link: 0,
    };
    w.push_off_cpu(&off(701, "worker", 100, 202, cruncher, 0)).expect("interval");
    w.push_off_cpu(&off(700, "python3.12", 350, 232, thread_select, task_select)).expect("interval");

    // The sweeps: (task stack, first sweep, last sweep), sweeps numbered 1..=10.
    let task1_wait = w.intern_stack(&[task1, main]);
    let request_wait: Vec<u32> = requests.iter().map(|&r| w.intern_stack(&[task1, main, r, handle_request])).collect();
    let orders_wait = [
        orders(&mut w, requests[0], orders3, &[query_db, sleep]),
        orders(&mut w, requests[1], orders7, &[query_db, sleep]),
    ];
    let waiting = [
        (task1_wait, 1, 10),
        (request_wait[0], 1, 5),
        (request_wait[1], 3, 8),
        (request_wait[2], 6, 10),
        (orders_wait[0], 1, 5),
        (orders_wait[1], 3, 8),
    ];
    let mut waits = 0;
    for sweep in 1..=10u64 {
        let now: Vec<TaskWait> = waiting
            .iter()
            .filter(|&&(_, first, last)| (first..=last).contains(&sweep))
            .map(|&(stack, _, _)| TaskWait {
                pid: 700,
                tid: 700,
                time_ns: sweep * 100 * MS,
                weight_ns: 100 * MS,
                stack,
            })
            .collect();
        waits += now.len() as u64;
        w.task_waits(&now).expect("task waits");
    }
    let counters = [
        ("off_cpu_intervals", 2),
        ("off_cpu_short", 0),
        ("off_cpu_sampled", 0),
        ("off_cpu_lost", 0),
        ("off_cpu_unreadable", 0),
        ("off_cpu_open_at_end", 2),
        ("task_samples", 34),
        ("task_unknown", 1),
        ("task_sweeps", 10),
        ("task_waits", waits),
        ("task_sweep_us", 1234),
        ("task_sweep_max_us", 210),
        ("task_read_errors", 0),
    ];
    w.finish(&Stats {
        samples: 45,
        duration_ns: 1000 * MS,
        counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    })
    .expect("finish")
}

/// libpython of `gc`: (path, build id).
pub const GC_LIBPYTHON: (&str, &str) =
    ("/usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0", "5be1b4a0c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7");

/// A recording of a program that builds and drops reference cycles, made with `--native --off-cpu` (format 1.6), 1 s
/// at 100 Hz (a CPU sample weighs 10 ms), one process (pid 800, Python 3.13) and two threads. Samples and intervals
/// taken in the cyclic garbage collector carry the GC flag; reports add `[gc]` after their Python frames. Stacks
/// root first (g: glue, hidden by default; n: native, libpython; k: kernel):
///
/// - 800 `MainThread` (comm python3.13):
///   - 0-400 ms, 40 samples: `<module>`, main, build_cycles;
///   - 400-600 ms, 20 samples in the collector: the same (`...;build_cycles;[gc]`);
///   - 600-700 ms, 10 samples in the collector: `<module>`, main, PyObject_Vectorcall g, collect_now,
///     gc_collect_main n, deduce_unreachable n; 3 of them with asm_exc_page_fault k below (`...;collect_now;[gc];
///     gc_collect_main;deduce_unreachable[;asm_exc_page_fault_[k]]`);
///   - 700-750 ms, 5 samples in the collector without Python frames (status idle: the collector run from C): `[gc]`;
///   - 750-800 ms off CPU, preempted (runnable) in the collector in build_cycles: `...;build_cycles;[gc];[off-CPU:
///     runnable]`;
///   - 800-1000 ms off CPU in futex(2) in Thread.join (main, Thread.join), open at the end, not collecting.
/// - 801 `compressor` (comm worker): Thread._bootstrap, Worker.run, compress: 0-250 ms 25 samples, 250-300 ms 5
///   samples in the collector (a finalizer's collection); then off CPU in read(2) 300-1000 ms, open at the end.
///
/// So: CPU: 40 of 105 samples in the collector (38.1%), MainThread 35 of 75 (46.7%), compressor 5 of 30 (16.7%).
/// Wall: 450 of 2000 ms (22.5%), MainThread 400 of 1000 ms, compressor 50 of 1000 ms. Off-CPU: 50 of 950 ms,
/// MainThread 50 of 250 ms.
fn gc() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.13", "gcwork.py"],
            &["pyperf", "record", "--native", "--off-cpu", "-F", "100", "--", "python3.13", "gcwork.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    w.add_process(&Process {
        pid: 800,
        command: args(&["/usr/bin/python3.13", "gcwork.py"]),
        python_version: "3.13.9".into(),
        interpreter_path: GC_LIBPYTHON.0.into(),
        build_id: GC_LIBPYTHON.1.into(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    w.add_thread_names(&[
        ThreadName { pid: 800, tid: 800, time_ns: 0, name: "MainThread".into() },
        ThreadName { pid: 800, tid: 801, time_ns: 0, name: "compressor".into() },
    ])
    .expect("thread names");
    w.push_library(GC_LIBPYTHON.0, GC_LIBPYTHON.1).expect("library");
    let (app, threading, lib) = ("/srv/gcwork.py", "/usr/lib/python3.13/threading.py", GC_LIBPYTHON.0);
    let module = sym("", "<module>", app, 30);
    let main = sym("", "main", app, 25);
    let build = vec![module.clone(), main.clone(), sym("", "build_cycles", app, 12)];
    let collect = vec![
        module.clone(),
        main.clone(),
        native_sym("PyObject_Vectorcall", lib, symbol_flags::GLUE),
        sym("", "collect_now", app, 18),
        native_sym("gc_collect_main", lib, 0),
        native_sym("deduce_unreachable", lib, 0),
    ];
    let faulting = [&collect[..], &[kernel_sym("asm_exc_page_fault")]].concat();
    let join = vec![module, main, sym("Thread", "join", threading, 1147)];
    let compress =
        vec![sym("Thread", "_bootstrap", threading, 1032), sym("Worker", "run", app, 40), sym("", "compress", app, 44)];
    let mut leaf = |frames: &[Symbol]| {
        let ids: Vec<u32> = frames.iter().map(|f| w.intern_symbol(f)).collect();
        w.intern_stack(&ids)
    };
    let (build, collect, faulting, join, compress) =
        (leaf(&build), leaf(&collect), leaf(&faulting), leaf(&join), leaf(&compress));

    // (time ms, tid, stack, in the collector), in time order.
    let mut samples: Vec<(u64, u32, u32, bool)> = Vec::new();
    for k in 0..75u64 {
        let stack = match k {
            0..=59 => build,
            60..=66 => collect,
            67..=69 => faulting,
            _ => 0,
        };
        samples.push((k * 10, 800, stack, k >= 40));
    }
    for k in 0..30u64 {
        samples.push((k * 10, 801, compress, k >= 25));
    }
    samples.sort_by_key(|&(time, tid, _, _)| (time, tid));
    for &(time_ms, tid, stack, in_gc) in &samples {
        w.push_sample(&SampleRecord {
            time_ns: time_ms * MS,
            cpu: tid - 800,
            pid: 800,
            tid,
            comm: if tid == 800 { "python3.13" } else { "worker" },
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: if stack == 0 { StackStatus::Idle } else { StackStatus::Complete },
            stack,
            task_stack: 0,
            flags: if in_gc { sample_flags::GC } else { 0 },
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    let off = |tid: u32, start_ms: u64, end_ms: u64, kind: OffCpuKind, syscall: i32, stack: u32, flags: u8| {
        let duration_ns = (end_ms - start_ms) * MS;
        OffCpuInterval {
            pid: 800,
            tid,
            start_ns: start_ms * MS,
            duration_ns,
            runnable_ns: if kind == OffCpuKind::Runnable { duration_ns } else { 0 },
            weight_ns: duration_ns,
            kind,
            syscall,
            gil: if kind == OffCpuKind::Runnable { GilState::ThisThread } else { GilState::NotLocked },
            status: StackStatus::Complete,
            stack,
            flags,
            comm: if tid == 800 { "python3.13" } else { "worker" }.into(),
            task_stack: 0,
            interp: 0,
            link: 0,
        }
    };
    let open = off_cpu_flags::OPEN_AT_END;
    w.push_off_cpu(&off(800, 750, 800, OffCpuKind::Runnable, -1, build, off_cpu_flags::GC)).expect("interval");
    w.push_off_cpu(&off(801, 300, 1000, OffCpuKind::Blocked, 0, compress, open)).expect("interval");
    w.push_off_cpu(&off(800, 800, 1000, OffCpuKind::Blocked, 202, join, open)).expect("interval");
    let counters = [
        ("off_cpu_intervals", 3),
        ("off_cpu_short", 0),
        ("off_cpu_sampled", 0),
        ("off_cpu_lost", 0),
        ("off_cpu_unreadable", 0),
        ("off_cpu_open_at_end", 2),
    ];
    w.finish(&Stats {
        samples: samples.len() as u64,
        duration_ns: 1000 * MS,
        counters: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    })
    .expect("finish")
}

/// The stored source of `/srv/app/hot.py` in the [`source`] recording (line 2 holds an ESC, as a hostile file may).
pub const HOT_PY: &str = concat!(
    "import time, lib\n",
    "BANNER = \"\x1b[2J\"\n",
    "def work(n):\n",
    "    total = 0\n",
    "    for i in range(n):\n",
    "        total += i * i\n",
    "        total ^= helper(i)\n",
    "    return total\n",
    "\n",
    "def helper(i):\n",
    "    x = i << 3\n",
    "    return x % 7\n",
    "\n",
    "def main():\n",
    "    for _ in range(10):\n",
    "        work(1000)\n",
    "        lib.helper(3)\n",
    "\n",
    "if __name__ == \"__main__\":\n",
    "    main()\n",
);

/// `pyperf record --source` of a small program (format 1.7): 106 samples of one process, whose lines annotate's tests
/// know exactly (root first; `hot.py` is [`HOT_PY`], stored; `lib.py` could not be read by the recorder, stored as
/// missing; `evil\x1b.py` not listed at all):
/// - 50 `<module>:20 main:16 work:6`
/// - 20 `<module>:20 main:16 work:7 helper:11`, 10 `... work:7 helper:12`
/// - 10 `<module>:20 main:16 work:5`
/// - 5 `<module>:20 main:16 work:7` (the leaf in C code called at line 7: native frames are not recorded)
/// - 5 `<module>:20 main:16 work:7 work:7 work:6` (recursion: line 7 counts once per sample)
/// - 4 `<module>:20 main:17 helper:5 (lib.py)` (another function called `helper`)
/// - 1 `<module>:20 main:15 evil (/srv/app/evil\x1b[31m.py):1`
/// - 1 without Python frames (idle)
fn source() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.12", "hot.py"],
            &["pyperf", "record", "--source", "-F", "100", "--", "python3.12", "hot.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.add_process(&Process {
        pid: 900,
        command: args(&["/usr/bin/python3.12", "hot.py"]),
        python_version: "3.12.7".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: "1234abcd".into(),
        first_seen_ns: 0,
        ns_pid: 900,
        cgroup: String::new(),
    })
    .expect("process");
    let (hot, lib, evil) = ("/srv/app/hot.py", "/srv/app/lib.py", "/srv/app/evil\x1b[31m.py");
    w.add_sources(&[SourceFile::stored(hot, HOT_PY.as_bytes().to_vec())]).expect("source");
    w.add_sources(&[SourceFile::missing(lib, "not readable by the process (mode 0600, owner 0)")]).expect("source");
    let module = sym("", "<module>", hot, 20);
    let main = |line| sym("", "main", hot, line);
    let work = |line| sym("", "work", hot, line);
    let helper = |line| sym("", "helper", hot, line);
    let stacks: Vec<(u32, Vec<Symbol>)> = vec![
        (50, vec![module.clone(), main(16), work(6)]),
        (20, vec![module.clone(), main(16), work(7), helper(11)]),
        (10, vec![module.clone(), main(16), work(7), helper(12)]),
        (10, vec![module.clone(), main(16), work(5)]),
        (5, vec![module.clone(), main(16), work(7)]),
        (5, vec![module.clone(), main(16), work(7), work(7), work(6)]),
        (4, vec![module.clone(), main(17), sym("", "helper", lib, 5)]),
        (1, vec![module.clone(), main(15), sym("", "evil", evil, 1)]),
        (1, vec![]),
    ];
    let mut samples: Vec<u32> = Vec::new();
    for (n, frames) in &stacks {
        let ids: Vec<u32> = frames.iter().map(|f| w.intern_symbol(f)).collect();
        let leaf = w.intern_stack(&ids);
        samples.extend(std::iter::repeat_n(leaf, *n as usize));
    }
    // Interleaved, as a real recording's are: a fixed shuffle.
    let mut rng = Rng::new(17);
    for i in (1..samples.len()).rev() {
        samples.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (k, &stack) in samples.iter().enumerate() {
        w.push_sample(&SampleRecord {
            time_ns: k as u64 * 10 * MS,
            cpu: 0,
            pid: 900,
            tid: 900,
            comm: "python3.12",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: if stack == 0 { StackStatus::Idle } else { StackStatus::Complete },
            stack,
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    w.finish(&Stats {
        samples: samples.len() as u64,
        duration_ns: samples.len() as u64 * 10 * MS,
        counters: vec![
            ("source_files".into(), 1),
            ("source_bytes".into(), HOT_PY.len() as u64),
            ("source_missing".into(), 1),
        ],
        ..Default::default()
    })
    .expect("finish")
}

/// Subinterpreters (format 1.8): the main thread (800) in `crunch` in the main interpreter for 60 samples; a second
/// thread (801) in `work` in subinterpreter 1 through `Interpreter.exec` for 40, its stack stitched (the main
/// interpreter's frames, `[interpreter 1]`, the subinterpreter's), and 5 more of it in the main interpreter before
/// the call; 3 samples of the main thread in subinterpreter 2's start-up (`create`, the boundary at the leaf of its
/// frames, no frame of the new interpreter's yet). 108 samples: interpreter 0 has 65, 1 has 40, 2 has 3.
fn interp() -> Vec<u8> {
    let mut w = Writer::new(
        Vec::new(),
        &header(
            &["python3.14", "subs.py"],
            &["pyperf", "record", "-F", "100", "--off-cpu", "--", "python3.14", "subs.py"],
            "cpu-clock",
            Rate::Frequency(100),
        ),
    )
    .expect("header");
    w.add_process(&Process {
        pid: 800,
        command: args(&["/usr/bin/python3.14", "subs.py"]),
        python_version: "3.14.2".into(),
        interpreter_path: "/usr/bin/python3.14".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    w.add_thread_names(&[
        ThreadName { pid: 800, tid: 800, time_ns: 0, name: "MainThread".into() },
        ThreadName { pid: 800, tid: 801, time_ns: 0, name: "runner".into() },
    ])
    .expect("thread names");
    let (app, threading, interps) =
        ("/srv/subs.py", "/usr/lib/python3.14/threading.py", "/usr/lib/python3.14/concurrent/interpreters/__init__.py");
    let marker = |id: u32| Symbol {
        scope: String::new(),
        name: format!("{}{id}]", symbol_flags::INTERPRETER_MARKER_PREFIX),
        file: String::new(),
        line: 0,
        flags: symbol_flags::INTERPRETER,
    };
    let module = sym("", "<module>", app, 40);
    let main = sym("", "main", app, 33);
    let crunch = vec![module.clone(), main.clone(), sym("", "crunch", app, 12)];
    let create = vec![module.clone(), main.clone(), sym("", "create", interps, 74), marker(2)];
    let thread = [sym("Thread", "_bootstrap", threading, 1045), sym("", "runner", app, 25)];
    let before = [&thread[..], &[sym("", "prepare", app, 20)]].concat();
    let exec = [
        &thread[..],
        &[sym("Interpreter", "exec", interps, 221), marker(1), sym("", "<module>", "<script>", 9)],
        &[sym("", "work", "<script>", 4)],
    ]
    .concat();
    let mut leaf = |frames: &[Symbol]| {
        let ids: Vec<u32> = frames.iter().map(|f| w.intern_symbol(f)).collect();
        w.intern_stack(&ids)
    };
    let (crunch, create, before, exec) = (leaf(&crunch), leaf(&create), leaf(&before), leaf(&exec));
    // (time ms, tid, stack, interpreter), in time order.
    let mut samples: Vec<(u64, u32, u32, u32)> = Vec::new();
    for k in 0..63u64 {
        samples.push((k * 10, 800, if k < 3 { create } else { crunch }, if k < 3 { 2 } else { 0 }));
    }
    for k in 0..45u64 {
        samples.push((k * 10 + 5, 801, if k < 5 { before } else { exec }, if k < 5 { 0 } else { 1 }));
    }
    samples.sort_by_key(|&(time, tid, _, _)| (time, tid));
    w.start_off_cpu(OFF_CPU_MIN_NS).expect("off-CPU chunk");
    // Format 1.9: intervals carry their interpreter too. The runner waits 120 ms in a read in interpreter 1 (`work`),
    // the main thread 40 ms in a sleep in interpreter 0 (`crunch`).
    for (tid, comm, start_ms, duration_ms, syscall, stack, interp) in
        [(801, "runner", 300, 120, 0, exec, 1), (800, "python3.14", 640, 40, 230, crunch, 0)]
    {
        w.push_off_cpu(&OffCpuInterval {
            pid: 800,
            tid,
            start_ns: start_ms * MS,
            duration_ns: duration_ms * MS,
            runnable_ns: 0,
            weight_ns: duration_ms * MS,
            kind: OffCpuKind::Blocked,
            syscall,
            gil: GilState::NotLocked,
            status: StackStatus::Complete,
            stack,
            flags: 0,
            comm: comm.into(),
            task_stack: 0,
            interp,
            link: 0,
        })
        .expect("interval");
    }
    for &(time_ms, tid, stack, interp) in &samples {
        w.push_sample(&SampleRecord {
            time_ns: time_ms * MS,
            cpu: tid - 800,
            pid: 800,
            tid,
            comm: if tid == 800 { "python3.14" } else { "runner" },
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack,
            task_stack: 0,
            flags: 0,
            interp,
            link: 0,
        })
        .expect("sample");
    }
    w.finish(&Stats {
        samples: samples.len() as u64,
        duration_ns: 700 * MS,
        counters: vec![("bpf_interp_nested".to_string(), 43), ("bpf_interp_unstitched".to_string(), 0)],
        ..Default::default()
    })
    .expect("finish")
}
