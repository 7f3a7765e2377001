//! Any bytes through everything that reads a recording: the format crate's Reader, `scan` and `Tables`, then
//! the report's aggregation and every exporter. What must hold for every input:
//! - no panic (an error or a report with warnings), no hang (libFuzzer's -timeout);
//! - every sample's stack resolves through the tables (symbols and nodes defined, walks end);
//! - bounded memory: the peak of live heap bytes while reading one input stays under 64 MiB for an input of at
//!   most 1 KiB (issue 7), and under 64 KiB per input byte for larger ones. Measured by the counting allocator
//!   of fuzz/shared.rs (shared with tests/faults.rs), which works without a sanitizer.
//!
//! Checksums would stop almost every mutation at the first chunk, so each input is also read a second time with
//! its chunk checksums recomputed: mutations then reach the zstd decoder, the record decoder and the tables. The
//! seeds (fuzz/seeds, made by fuzz/examples/seeds.rs) include uncompressed copies of the synthetic recordings,
//! whose payload bytes mutate directly.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pyperf_format::{samples, scan, Reader, Tables, CHUNK_HEADER_LEN, PREAMBLE_LEN};

#[path = "../shared.rs"]
mod shared;
use shared::{memory_bound, peak_bytes, report_all_formats, Counting};

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    check(data);
    let fixed = fix_checksums(data);
    if fixed != data {
        check(&fixed);
    }
});

fn check(data: &[u8]) {
    let peak = peak_bytes(|| {
        read_with_format_crate(data);
        report_all_formats(data);
    });
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
        for (i, s) in samples(chunk).enumerate() {
            t.frames_root_first(s.stack, &mut ids);
            assert!(ids.len() <= t.nodes.len(), "stack walk longer than the node table");
            for &id in &ids {
                let _ = t.symbol(id).qualified_name();
            }
            // Once per chunk: the lookup is linear in the records, and an input can hold thousands of both.
            if i == 0 {
                let _ = t.process(s.pid);
            }
        }
    });
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
