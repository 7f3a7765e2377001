//! Any bytes through everything that reads a recording: the format crate's Reader, `scan` and `Tables`, then
//! the report's aggregation and every exporter. What must hold for every input:
//! - no panic (an error or a report with warnings), no hang (libFuzzer's -timeout);
//! - every sample's stack resolves through the tables (symbols and nodes defined, walks end);
//! - bounded memory: the peak of live heap bytes while reading one input stays under 64 MiB for an input of at
//!   most 1 KiB (issue 7), and under 64 KiB per input byte for larger ones. Measured by the counting allocator
//!   below, which works without a sanitizer (libFuzzer's -malloc_limit_mb needs one).
//!
//! Checksums would stop almost every mutation at the first chunk, so each input is also read a second time with
//! its chunk checksums recomputed: mutations then reach the zstd decoder, the record decoder and the tables. The
//! seeds (fuzz/seeds, made by fuzz/examples/seeds.rs) include uncompressed copies of the synthetic recordings,
//! whose payload bytes mutate directly.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use libfuzzer_sys::fuzz_target;
use pyperf_format::{samples, scan, Reader, Tables, CHUNK_HEADER_LEN, PREAMBLE_LEN};
use pyperf_report::{flamegraph, folded, speedscope, text, Filter, LoadOptions, Profile};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Most a reading of `len` input bytes may hold at once.
fn memory_bound(len: usize) -> usize {
    const MIB: usize = 1 << 20;
    (64 * MIB).max(len.saturating_mul(64 << 10))
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let fixed = fix_checksums(data);
    if fixed != data {
        check(&fixed);
    }
});

fn check(data: &[u8]) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    read_with_format_crate(data);
    report_everything(data);
    let peak = PEAK.load(Relaxed) - base;
    assert!(
        peak <= memory_bound(data.len()),
        "reading {} bytes held {peak} bytes at once (bound {})",
        data.len(),
        memory_bound(data.len())
    );
}

/// The format crate alone: every sample's stack must resolve, every walk must end.
fn read_with_format_crate(data: &[u8]) {
    let Ok(mut reader) = Reader::new(data) else { return };
    let mut tables = Tables::default();
    let mut ids = Vec::new();
    let _ = scan(&mut reader, &mut tables, |t, chunk| {
        for s in samples(chunk) {
            t.frames_root_first(s.stack, &mut ids);
            assert!(ids.len() <= t.nodes.len(), "stack walk longer than the node table");
            for &id in &ids {
                let _ = t.symbol(id).qualified_name();
            }
            let _ = t.process(s.pid);
        }
    });
}

/// What `pyperf report` does with the file, in every output format.
fn report_everything(data: &[u8]) {
    for options in [LoadOptions::new(Filter::default(), true), LoadOptions::stacks_only(Filter::default())] {
        let Ok(profile) = Profile::load(data, &options) else { return };
        // An exporter may refuse with an error (that is a clear error for the user); it must not panic.
        let _ = text::render(&profile, &text::Options::default());
        let mut o = folded::Options::default();
        let _ = folded::write(&profile, &o, std::io::sink());
        o.lines = false;
        o.pid_root = options.per_thread;
        o.tid_root = options.per_thread;
        let _ = folded::write(&profile, &o, std::io::sink());
        if options.timeline {
            let _ = speedscope::write(&profile, &speedscope::Options::default(), std::io::sink());
        }
        if profile.matched.samples > 0 {
            let _ = flamegraph::write(&profile, &flamegraph::Options::default(), std::io::sink());
        }
    }
}

/// The input with every chunk's payload and header checksums recomputed (lengths as the input has them).
fn fix_checksums(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = PREAMBLE_LEN;
    while at + CHUNK_HEADER_LEN <= out.len() {
        let stored = u32::from_le_bytes(out[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = (at + CHUNK_HEADER_LEN).saturating_add(stored).min(out.len());
        let crc = crc32fast::hash(&out[at + CHUNK_HEADER_LEN..end]);
        out[at + 12..at + 16].copy_from_slice(&crc.to_le_bytes());
        let header_crc = crc32fast::hash(&out[at..at + 16]);
        out[at + 16..at + 20].copy_from_slice(&header_crc.to_le_bytes());
        at = end;
    }
    out
}
