//! Round trips and damage: every field survives write -> read; every cut, flipped byte and lie in a header
//! gives either the complete chunks with a warning or a clear error, with bounded memory and no panic.

use pyperf_format::*;

fn header() -> Header {
    Header {
        pyperf_version: "0.1.0".into(),
        hostname: "host-ü".into(),
        kernel_release: "6.1.0-test".into(),
        arch: "x86_64".into(),
        start_time_unix_ns: 1_700_000_000_123_456_789,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(999),
        command_line: vec!["pyperf".into(), "record".into(), "-F".into(), "999".into()],
        workload: vec!["python3".into(), "work.py".into()],
    }
}

fn process(pid: u32) -> Process {
    Process {
        pid,
        command: vec!["python3".into(), "work.py".into(), "--n=3".into()],
        python_version: "3.11.7".into(),
        interpreter_path: "/usr/lib/libpython3.11.so.1.0".into(),
        build_id: "0123abcd".into(),
        first_seen_ns: 42,
        ns_pid: pid % 7 + 1,
        cgroup: format!("/system.slice/docker-{pid}.scope"),
    }
}

fn sym(scope: &str, name: &str, line: u32) -> Symbol {
    Symbol { scope: scope.into(), name: name.into(), file: "/srv/app/wörk.py".into(), line, flags: 0 }
}

fn stats(samples: u64) -> Stats {
    Stats {
        samples,
        lost_samples: 3,
        truncated_stacks: 1,
        lost_symbols: 2,
        errors: 5,
        duration_ns: 2_000_000_000,
        counters: vec![("thread_list_bound".into(), 7)],
    }
}

/// (time, pid, tid, comm, gil, status, root-first stack as symbols)
type WrittenSample = (u64, u32, u32, String, GilState, StackStatus, Vec<Symbol>);

struct Written {
    bytes: Vec<u8>,
    samples: Vec<WrittenSample>,
}

/// A recording with `n` samples over a handful of stacks, flushed every `flush_every` samples.
fn write(n: usize, flush_every: usize) -> Written {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&process(100)).unwrap();
    w.add_process(&process(200)).unwrap();
    let syms = [
        sym("", "<module>", 1),
        sym("", "main", 10),
        sym("Worker", "run", 20),
        sym("outer.<locals>", "inner", 30),
        sym("", "λ", 40),
    ];
    let ids: Vec<u32> = syms.iter().map(|s| w.intern_symbol(s)).collect();
    let stacks: Vec<Vec<usize>> = vec![vec![0, 1, 2], vec![0, 1, 3], vec![0, 1, 3, 4], vec![], vec![0, 1, 1, 1, 2]];
    let mut expected = Vec::new();
    let mut t = 1_000u64;
    for i in 0..n {
        let st = &stacks[i % stacks.len()];
        let frame_ids: Vec<u32> = st.iter().map(|&k| ids[k]).collect();
        let leaf = w.intern_stack(&frame_ids);
        let pid = if i % 3 == 0 { 200 } else { 100 };
        let tid = pid + (i % 2) as u32;
        let comm = if i % 2 == 0 { "python3" } else { "wörker" };
        let gil = GilState::from_u8((i % 10) as u8); // includes an unknown value 9
        let status = if st.is_empty() { StackStatus::Idle } else { StackStatus::Complete };
        // Out-of-order delivery between CPUs: time sometimes goes back a little.
        t = if i % 7 == 3 { t - 300 } else { t + 1_000_000 + (i as u64 * 7919) % 5000 };
        w.push_sample(&SampleRecord {
            time_ns: t,
            cpu: (i % 2) as u32,
            pid,
            tid,
            comm,
            thread_state: ThreadStateMatch::Match,
            gil,
            pthread_id: PthreadIdMatch::Match,
            status,
            stack: leaf,
        })
        .unwrap();
        expected.push((t, pid, tid, comm.to_string(), gil, status, st.iter().map(|&k| syms[k].clone()).collect()));
        if flush_every > 0 && (i + 1) % flush_every == 0 {
            w.flush().unwrap();
        }
    }
    let bytes = w.finish(&stats(n as u64)).unwrap();
    Written { bytes, samples: expected }
}

type Read = (Header, Tables, Vec<(u64, u32, u32, String, GilState, StackStatus, Vec<Symbol>)>, ScanNotes);

fn read(bytes: &[u8]) -> Result<Read, Error> {
    let mut r = Reader::new(bytes)?;
    let header = r.header().clone();
    let mut tables = Tables::default();
    let mut got = Vec::new();
    let notes = scan(&mut r, &mut tables, |t, chunk| {
        for s in samples(chunk) {
            let mut root_first: Vec<Symbol> = t.frames(s.stack).map(|id| t.symbol(id).clone()).collect();
            root_first.reverse();
            got.push((s.time_ns, s.pid, s.tid, s.comm.to_string(), s.gil, s.status, root_first));
        }
    })?;
    Ok((header, tables, got, notes))
}

#[test]
fn round_trip_every_field() {
    let w = write(40_000, 0); // more than one sample chunk
    let (h, tables, got, notes) = read(&w.bytes).unwrap();
    assert_eq!(h, header());
    assert_eq!(tables.processes, vec![process(100), process(200)]);
    assert_eq!(tables.stats, Some(stats(40_000)));
    assert!(tables.complete_symbol_table);
    assert_eq!(tables.symbols.len(), 5);
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got.len(), w.samples.len());
    assert_eq!(got, w.samples);
}

#[test]
fn interning_shares_symbols_and_prefixes() {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let a = w.intern_symbol(&sym("", "a", 1));
    let a2 = w.intern_symbol(&sym("", "a", 1));
    let b = w.intern_symbol(&sym("", "a", 2)); // other line: other symbol
    assert_eq!(a, a2);
    assert_ne!(a, b);
    let s1 = w.intern_stack(&[a, b]);
    let s2 = w.intern_stack(&[a, b, b]);
    let s3 = w.intern_stack(&[a, b]);
    assert_eq!(s1, s3);
    assert_ne!(s1, s2);
    assert_eq!(w.stack_node_count(), 3); // a, a;b, a;b;b
    assert_eq!(w.intern_stack(&[]), 0);
}

#[test]
fn states_keep_unknown_values() {
    let w = write(20, 0);
    let (_, _, got, _) = read(&w.bytes).unwrap();
    assert!(got.iter().any(|s| s.4 == GilState::Unknown(9)));
}

/// Chunk boundaries of a file: offsets where a chunk ends.
fn chunk_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = vec![PREAMBLE_LEN];
    let mut at = PREAMBLE_LEN;
    while at + CHUNK_HEADER_LEN <= bytes.len() {
        let stored = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += CHUNK_HEADER_LEN + stored;
        ends.push(at);
    }
    assert_eq!(at, bytes.len());
    ends
}

#[test]
fn every_truncation_point_reports_complete_chunks_or_errors_clearly() {
    let w = write(300, 50); // several sample chunks
    let ends = chunk_ends(&w.bytes);
    let (_, _, all, _) = read(&w.bytes).unwrap();
    for cut in 0..w.bytes.len() {
        let prefix = &w.bytes[..cut];
        match read(prefix) {
            Ok((_, tables, got, notes)) => {
                // Only the samples of complete chunks, in order, and a warning saying the file is cut.
                assert_eq!(&all[..got.len()], &got[..], "cut at {cut}");
                assert!(!notes.warnings.is_empty(), "cut at {cut}: no warning");
                let complete = ends.iter().filter(|&&e| e <= cut).count();
                if ends.contains(&cut) {
                    // A cut on a chunk boundary is only noticed through the missing trailer.
                    assert!(notes.warnings.iter().any(|w| w.contains("no trailer")), "cut at {cut}");
                } else {
                    assert!(notes.warnings[0].contains("cut off"), "cut at {cut}: {:?}", notes.warnings);
                    assert!(notes.warnings[0].contains(&format!("after {} complete chunks", complete - 1)));
                }
                assert!(tables.stats.is_none());
            }
            Err(e) => {
                // Only possible before the header chunk is complete.
                assert!(cut < ends[1], "cut at {cut}: unexpected error {e}");
                let msg = e.to_string();
                assert!(msg.contains("cut off") || msg.contains("not a pyperf recording"), "{msg}");
            }
        }
    }
}

#[test]
fn every_flipped_byte_is_caught() {
    let w = write(120, 40);
    for pos in 0..w.bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = w.bytes.clone();
            bad[pos] ^= bit;
            match read(&bad) {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(!msg.is_empty() && !msg.contains('\n'), "{msg}");
                }
                // The minor version (10..12) and the reserved bytes (12..16) are not checksummed: any minor
                // reads by design. A flip anywhere else must not pass unnoticed.
                Ok(_) => assert!((10..16).contains(&pos), "flip of bit {bit:#x} at {pos} went unnoticed"),
            }
        }
    }
}

#[test]
fn newer_major_is_refused_naming_both_versions() {
    let mut bytes = write(3, 0).bytes;
    bytes[8..10].copy_from_slice(&(MAJOR + 1).to_le_bytes());
    bytes[10..12].copy_from_slice(&7u16.to_le_bytes());
    let err = read(&bytes).expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains(&format!("{}.7", MAJOR + 1)), "{msg}");
    assert!(msg.contains(&format!("{MAJOR}.{MINOR}")), "{msg}");
}

/// Builds one raw chunk the way a future writer would: any kind, any payload.
fn raw_chunk(kind: u16, payload: &[u8]) -> Vec<u8> {
    let stored = zstd::bulk::compress(payload, 1).unwrap();
    [&chunk_header(kind, FLAG_ZSTD, &stored, payload.len() as u32)[..], &stored].concat()
}

#[test]
fn newer_minor_unknown_chunks_and_appended_fields_are_skipped() {
    let w = write(10, 0);
    let mut bytes = w.bytes[..PREAMBLE_LEN].to_vec();
    bytes[10..12].copy_from_slice(&(MINOR + 3).to_le_bytes());
    let ends = chunk_ends(&w.bytes);
    // Header chunk, then an unknown chunk kind, then the rest.
    bytes.extend_from_slice(&w.bytes[ends[0]..ends[1]]);
    bytes.extend_from_slice(&raw_chunk(999, b"from the future"));
    // A process record with a field appended by a newer minor.
    let mut p = postcard::to_stdvec(&process(300)).unwrap();
    p.extend_from_slice(&[1, 2, 3, 4]);
    bytes.extend_from_slice(&raw_chunk(Kind::Process as u16, &p));
    bytes.extend_from_slice(&w.bytes[ends[1]..]);
    let (_, tables, got, notes) = read(&bytes).unwrap();
    assert_eq!(got.len(), 10);
    assert!(tables.processes.contains(&process(300)));
    assert!(notes.warnings.iter().any(|w| w.contains("newer minor")), "{:?}", notes.warnings);
}

#[test]
fn absurd_lengths_are_refused_without_allocating_them() {
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    for field in [4usize, 8] {
        let mut bad = w.bytes.clone();
        let at = ends[1];
        bad[at + field..at + field + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        // A crafted file, not a damaged one: its header checksum matches the lie.
        let crc = crc32fast::hash(&bad[at..at + 16]);
        bad[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
        let msg = read(&bad).expect_err("refused").to_string();
        assert!(msg.contains("more than"), "{msg}");
    }
    // A well-formed chunk whose record claims a huge vector: postcard must not pre-allocate it.
    let mut bytes = w.bytes[..ends[1]].to_vec();
    let mut lie = Vec::new();
    lie.extend_from_slice(&[0]); // first_id = 0
    lie.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // vector of 4 billion symbols
    bytes.extend_from_slice(&raw_chunk(Kind::Symbols as u16, &lie));
    let msg = read(&bytes).expect_err("refused").to_string();
    assert!(msg.contains("corrupt"), "{msg}");
}

#[test]
fn wrong_magic_and_empty_input() {
    assert!(matches!(read(b"").err(), Some(Error::Truncated { .. })));
    assert!(matches!(read(b"hello world, not a recording").err(), Some(Error::NotARecording)));
    let msg = read(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\0\0").err().unwrap().to_string();
    assert_eq!(msg, "not a pyperf recording (wrong magic bytes)");
}

#[test]
fn references_to_undefined_stacks_or_symbols_are_errors() {
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let mut bytes = w.bytes[..ends[1]].to_vec();
    let chunk = SampleChunk {
        time_delta_ns: vec![0],
        cpu: vec![0],
        pid: vec![1],
        tid: vec![1],
        comm: vec![0],
        comms: vec!["x".into()],
        thread_state: vec![0],
        gil: vec![0],
        pthread_id: vec![0],
        status: vec![0],
        stack: vec![5],
        ..Default::default()
    };
    bytes.extend_from_slice(&raw_chunk(Kind::Samples as u16, &encode_sample_chunk(&chunk).unwrap()));
    let msg = read(&bytes).err().unwrap().to_string();
    assert!(msg.contains("stack 5"), "{msg}");

    let mut bytes = w.bytes[..ends[1]].to_vec();
    let stacks = StackChunk { first_id: 1, parent_back: vec![1], symbols: vec![77] };
    bytes.extend_from_slice(&raw_chunk(Kind::Stacks as u16, &postcard::to_stdvec(&stacks).unwrap()));
    let msg = read(&bytes).err().unwrap().to_string();
    assert!(msg.contains("symbol 77"), "{msg}");
}

#[test]
fn writer_output_is_deterministic() {
    assert_eq!(write(1000, 100).bytes, write(1000, 100).bytes);
}

#[test]
fn zstd_bombs_are_refused() {
    // 15 MiB of zeros compresses to a few hundred bytes: a tiny file that would expand to a huge record.
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let mut bytes = w.bytes[..ends[1]].to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::Symbols as u16, &vec![0u8; 15 << 20]));
    assert!(bytes.len() < 4096, "{}", bytes.len());
    let msg = read(&bytes).expect_err("refused").to_string();
    assert!(msg.contains("implausible compression ratio"), "{msg}");
}

#[test]
fn skipped_columns_come_out_empty_and_the_rest_intact() {
    let w = write(500, 0);
    let mut r = Reader::new(&w.bytes[..]).unwrap();
    r.set_columns(Columns::MINIMAL);
    let mut tables = Tables::default();
    let mut stacks = Vec::new();
    scan(&mut r, &mut tables, |_, c| {
        assert!(c.pid.is_empty() && c.time_delta_ns.is_empty() && c.comms.is_empty() && c.gil.is_empty());
        assert_eq!(c.status.len(), c.len());
        stacks.extend(samples(c).map(|s| (s.stack, s.status)));
    })
    .unwrap();
    let (_, full_tables, all, _) = read(&w.bytes).unwrap();
    assert_eq!(stacks.len(), all.len());
    for ((leaf, status), s) in stacks.iter().zip(&all) {
        assert_eq!(*status, s.5);
        let names: Vec<Symbol> = {
            let mut v: Vec<Symbol> = full_tables.frames(*leaf).map(|id| full_tables.symbol(id).clone()).collect();
            v.reverse();
            v
        };
        assert_eq!(names, s.6);
    }
}

#[test]
fn offsets_stay_right_after_every_chunk() {
    let w = write(100, 10);
    let ends = chunk_ends(&w.bytes);
    let mut r = Reader::new(&w.bytes[..]).unwrap();
    let mut seen = vec![r.offset() as usize];
    while r.next_record().unwrap().is_some() {
        seen.push(r.offset() as usize);
    }
    assert_eq!(seen, ends[1..]);
}

/// A process record as format 1.0 wrote it (without `ns_pid` and `cgroup`) reads with them unknown (0, empty); one
/// with more fields than this version knows reads with them ignored.
#[test]
fn process_records_of_every_minor_read() {
    let v10 = postcard::to_stdvec(&(
        7u32,
        vec!["python3".to_string()],
        "3.11.2".to_string(),
        "/usr/bin/python3.11".to_string(),
        String::new(),
        5u64,
    ))
    .unwrap();
    let mut newer = postcard::to_stdvec(&process(9)).unwrap();
    newer.extend(postcard::to_stdvec(&(123u64, "a field from the future".to_string())).unwrap());
    for (payload, want) in [
        (
            v10,
            Process {
                pid: 7,
                command: vec!["python3".into()],
                python_version: "3.11.2".into(),
                interpreter_path: "/usr/bin/python3.11".into(),
                build_id: String::new(),
                first_seen_ns: 5,
                ns_pid: 0,
                cgroup: String::new(),
            },
        ),
        (newer, process(9)),
    ] {
        let mut bytes = Writer::new(Vec::new(), &header()).unwrap().finish(&stats(0)).unwrap();
        let stored = zstd::bulk::compress(&payload, 3).unwrap();
        let chunk = [&chunk_header(2, FLAG_ZSTD, &stored, payload.len() as u32)[..], &stored].concat();
        bytes.splice(chunk_ends(&bytes)[1]..chunk_ends(&bytes)[1], chunk);
        let (_, tables, _, _) = read(&bytes).unwrap();
        assert_eq!(tables.processes, vec![want]);
    }
}
