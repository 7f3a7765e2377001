//! Hostile recordings, made with the format crate's Writer: small files whose shape makes a naive report
//! quadratic (deep chains sampled at every depth) or wide (many distinct leaves, many threads).
//!
//! Shared through `#[path]` by tests/hostile.rs (memory and work bounds) and fuzz/examples/seeds.rs (fuzz seeds).

#![allow(dead_code)]

use pyperf_format::{
    GilState, Header, Process, PthreadIdMatch, Rate, SampleRecord, StackStatus, Stats, Symbol, ThreadStateMatch, Writer,
};

fn header() -> Header {
    Header {
        pyperf_version: "0.2.0".into(),
        hostname: "crafted".into(),
        kernel_release: "6.1.0".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 0,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(1000),
        command_line: vec!["pyperf".into(), "record".into()],
        workload: vec!["python3".into(), "crafted.py".into()],
    }
}

fn writer() -> Writer<Vec<u8>> {
    let mut w = Writer::new(Vec::new(), &header()).expect("header");
    // The best compression: the smallest file for the shape, i.e. the most work per input byte.
    w.set_compression_level(19);
    w.add_process(&Process {
        pid: 1,
        command: vec!["python3".into(), "crafted.py".into()],
        python_version: "3.12.1".into(),
        interpreter_path: "/usr/bin/python3.12".into(),
        build_id: String::new(),
        first_seen_ns: 0,
        ns_pid: 0,
        cgroup: String::new(),
    })
    .expect("process");
    w
}

fn sample(w: &mut Writer<Vec<u8>>, i: u64, tid: u32, stack: u32) {
    w.push_sample(&SampleRecord {
        time_ns: i * 1_000_000,
        cpu: 0,
        pid: 1,
        tid,
        comm: "python3",
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
}

fn symbol(name: String, line: u32) -> Symbol {
    Symbol { scope: String::new(), name, file: "crafted.py".into(), line, flags: 0 }
}

/// One chain `depth` frames deep (each frame called by the one before) with one sample at every depth: `depth`
/// distinct stacks whose lengths add up to depth² / 2. Below `<module>`, frame `d` runs function `d % functions`:
/// `functions` 1 is one function recursing `depth - 1` times, `functions` >= `depth` distinct functions
/// throughout, and in between a cycle of mutually recursive functions.
pub fn chain(depth: u32, functions: u32) -> Vec<u8> {
    let mut w = writer();
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let mut node = w.intern_node(0, module);
    sample(&mut w, 0, 1, node);
    let ids: Vec<u32> =
        (0..functions.clamp(1, depth.max(1))).map(|f| w.intern_symbol(&symbol(format!("f{f}"), f + 2))).collect();
    for d in 1..depth {
        // Interned frame by frame: interning each prefix as a whole stack would cost depth² in the generator.
        node = w.intern_node(node, ids[(d - 1) as usize % ids.len()]);
        sample(&mut w, d as u64, 1, node);
    }
    w.finish(&Stats { samples: depth as u64, duration_ns: depth as u64 * 1_000_000, ..Default::default() })
        .expect("finish")
}

/// `leaves` distinct functions each called from `<module>`, one sample each.
pub fn wide(leaves: u32) -> Vec<u8> {
    let mut w = writer();
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let root = w.intern_node(0, module);
    for i in 0..leaves {
        let leaf = w.intern_symbol(&symbol(format!("leaf{i}"), i));
        let node = w.intern_node(root, leaf);
        sample(&mut w, i as u64, 1, node);
    }
    w.finish(&Stats { samples: leaves as u64, duration_ns: leaves as u64 * 1_000_000, ..Default::default() })
        .expect("finish")
}

/// One chain `depth` frames deep sampled once at its leaf by each of `threads` threads: with thread root frames
/// (`--tid-root`) every thread has a copy of the whole chain, threads x depth frames in all.
pub fn threads_on_chain(threads: u32, depth: u32) -> Vec<u8> {
    let mut w = writer();
    let sym = w.intern_symbol(&symbol("recurse".into(), 7));
    let mut node = 0;
    for _ in 0..depth {
        node = w.intern_node(node, sym);
    }
    for t in 0..threads {
        sample(&mut w, t as u64, 1000 + t, node);
    }
    w.finish(&Stats { samples: threads as u64, ..Default::default() }).expect("finish")
}

/// `threads` distinct thread ids (1000, 1001, ...) of one process, one sample each on one two-frame stack: a file of
/// a few MB that a timeline export holding something per thread turns into gigabytes.
pub fn many_threads(threads: u32) -> Vec<u8> {
    let mut w = writer();
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let work = w.intern_symbol(&symbol("work".into(), 2));
    let node = w.intern_node(0, module);
    let node = w.intern_node(node, work);
    for t in 0..threads {
        sample(&mut w, t as u64, 1000 + t, node);
    }
    w.finish(&Stats { samples: threads as u64, duration_ns: threads as u64 * 1_000_000, ..Default::default() })
        .expect("finish")
}

/// `threads` threads (tids 1000, ...) all sampled at the same `ticks` times, 1 ms apart: threads that ran at once
/// (on as many CPUs).
pub fn simultaneous_threads(threads: u32, ticks: u64) -> Vec<u8> {
    let mut w = writer();
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let node = w.intern_node(0, module);
    for i in 0..ticks {
        for t in 0..threads {
            sample(&mut w, i, 1000 + t, node);
        }
    }
    let stats = Stats { samples: threads as u64 * ticks, duration_ns: ticks * 1_000_000, ..Default::default() };
    w.finish(&stats).expect("finish")
}

/// `samples` samples, 1 ms apart, spread round-robin over `threads` threads (tids 1, 2, ...), each on one of 64
/// stacks: a long recording whose timelines grow with its samples.
pub fn many_samples(samples: u64, threads: u32) -> Vec<u8> {
    let mut w = writer();
    // Fast rather than small: millions of samples.
    w.set_compression_level(1);
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let root = w.intern_node(0, module);
    let stacks: Vec<u32> = (0..64)
        .map(|i| {
            let f = w.intern_symbol(&symbol(format!("f{i}"), i + 2));
            w.intern_node(root, f)
        })
        .collect();
    // A fixed, varied pattern: runs of one stack with changes, as a real program's.
    for i in 0..samples {
        let stack = stacks[((i / 7) ^ (i / 131)) as usize % stacks.len()];
        sample(&mut w, i, 1 + (i % threads.max(1) as u64) as u32, stack);
    }
    w.finish(&Stats { samples, duration_ns: samples * 1_000_000, ..Default::default() }).expect("finish")
}

/// `samples` samples of one thread in reverse time order (the last first): far more out of order than any
/// recorder writes them.
pub fn reversed(samples: u64) -> Vec<u8> {
    let mut w = writer();
    let module = w.intern_symbol(&symbol("<module>".into(), 1));
    let node = w.intern_node(0, module);
    for i in (0..samples).rev() {
        sample(&mut w, i, 1, node);
    }
    w.finish(&Stats { samples, duration_ns: samples * 1_000_000, ..Default::default() }).expect("finish")
}
