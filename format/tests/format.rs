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
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
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

fn thread_name(pid: u32, tid: u32, time_ns: u64, name: &str) -> ThreadName {
    ThreadName { pid, tid, time_ns, name: name.into() }
}

/// Thread names (1.2) survive write -> read in order, as their own record, and the tables name each sample's thread
/// by time: the latest name at the sample's time, else the first read after it; never a name of an earlier process
/// with the same pid.
#[test]
fn thread_names_round_trip_and_name_samples_by_time() {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let mut p = process(100);
    p.first_seen_ns = 0;
    w.add_process(&p).unwrap();
    let first = vec![
        thread_name(100, 100, 5_000, "MainThread"),
        thread_name(100, 101, 5_000, "worker-ü-1"),
        thread_name(100, 102, 5_000, &"n".repeat(256)),
    ];
    w.add_thread_names(&first).unwrap();
    w.add_thread_names(&[]).unwrap(); // nothing written
    let renamed = vec![thread_name(100, 101, 9_000, "renamed")];
    w.add_thread_names(&renamed).unwrap();
    // pid 100 reused by a new process from 20 000 on; its thread 101 has another name.
    let mut later = process(100);
    later.first_seen_ns = 20_000;
    w.add_process(&later).unwrap();
    w.add_thread_names(&[thread_name(100, 101, 25_000, "other process")]).unwrap();
    let bytes = w.finish(&stats(0)).unwrap();
    assert_eq!(&bytes[8..12], &[1, 0, MINOR as u8, 0], "format 1.{MINOR}");

    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::ThreadNames(n) = rec {
            records.push(n);
        }
    }
    assert_eq!(records.len(), 3, "one chunk per non-empty call");
    assert_eq!(records[0], first);
    assert_eq!(records[1], renamed);

    let (_, t, _, notes) = read(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(t.thread_names.len(), 5);
    assert_eq!(t.thread_name(100, 100, 1), Some("MainThread")); // before the read: the first read names it
    assert_eq!(t.thread_name(100, 101, 4_000), Some("worker-ü-1"));
    assert_eq!(t.thread_name(100, 101, 9_000), Some("renamed"));
    assert_eq!(t.thread_name(100, 101, 19_999), Some("renamed"));
    assert_eq!(t.thread_name(100, 101, 20_000), Some("other process"));
    assert_eq!(t.thread_name(100, 101, 30_000), Some("other process"));
    assert_eq!(t.thread_name(100, 100, 21_000), None, "MainThread was the earlier process's");
    assert_eq!(t.thread_name(100, 102, 6_000).map(str::len), Some(256));
    assert_eq!(t.thread_name(100, 103, 6_000), None);
    assert_eq!(t.thread_name(7, 100, 6_000), None);
}

/// Thread names come in pieces of at most THREAD_NAMES_PER_CHUNK, all read back.
#[test]
fn many_thread_names_are_split_into_chunks() {
    let names: Vec<ThreadName> =
        (0..THREAD_NAMES_PER_CHUNK as u32 * 2 + 5).map(|i| thread_name(1, i, 1, &format!("t{i}"))).collect();
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_thread_names(&names).unwrap();
    let bytes = w.finish(&stats(0)).unwrap();
    let (_, t, _, _) = read(&bytes).unwrap();
    assert_eq!(t.thread_names, names);
    let chunks = chunk_ends(&bytes).len() - 1;
    assert_eq!(chunks, 1 + 3 + 1, "header, three name chunks, trailer");
}

/// A thread name chunk whose columns differ in length is corrupt; one with a column appended by a newer minor
/// reads with it ignored.
#[test]
fn thread_name_chunks_of_a_newer_minor_read_and_bad_ones_are_refused() {
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let good = ThreadNameChunk::from_names(&[thread_name(100, 100, 7, "MainThread")]);
    let mut newer = postcard::to_stdvec(&good).unwrap();
    newer.extend(postcard::to_stdvec(&vec![true]).unwrap()); // a column from the future
    let mut bytes = w.bytes[..ends[1]].to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::ThreadNames as u16, &newer));
    bytes.extend_from_slice(&w.bytes[ends[1]..]);
    let (_, t, got, notes) = read(&bytes).unwrap();
    assert_eq!(got.len(), 3);
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(t.thread_names, vec![thread_name(100, 100, 7, "MainThread")]);

    let mut bad = good.clone();
    bad.tid.push(5);
    let mut bytes = w.bytes[..ends[1]].to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::ThreadNames as u16, &postcard::to_stdvec(&bad).unwrap()));
    let msg = read(&bytes).expect_err("refused").to_string();
    assert!(msg.contains("thread name chunk columns differ in length"), "{msg}");
}

fn recording(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/recordings").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The recordings kept from earlier format versions (1.0: as 0.1.0 wrote them, a real one and the synthetic ones;
/// 1.1 to 1.4: the synthetic ones as 0.2.0 to 0.5.0 wrote them) read with this reader: every chunk, no thread names,
/// no off-CPU data, no native libraries or frames, no task stacks, and each synthetic recording gives the same
/// samples, stacks and processes in every version (a 1.0 process record reads with the 1.1 fields unknown). The
/// off-CPU recordings of 1.3 and 1.4 read with their intervals (none with a task stack), the native one of 1.4 with
/// its libraries.
#[test]
fn recordings_of_format_1_0_to_1_4_still_read() {
    let (_, t, got, notes) = read(&recording("split-3.11.pyp")).unwrap();
    assert!(!got.is_empty() && t.stats.is_some() && t.thread_names.is_empty(), "{:?}", notes.warnings);
    assert_eq!(t.off_cpu_min_ns(), None);
    for name in ["mixed", "killed", "cutoff"] {
        let mut read_as = Vec::new();
        for minor in 0..=4u8 {
            let v = format!("1.{minor}");
            let bytes = recording(&format!("{name}-{v}.pyp"));
            assert_eq!(&bytes[8..12], &[1, 0, minor, 0], "{name}-{v}: format {v}");
            let r = Reader::new(&bytes[..]).unwrap();
            assert_eq!(r.version(), (1, minor as u16));
            let (h, t, got, notes) = read(&bytes).unwrap_or_else(|e| panic!("{name}-{v}: {e}"));
            assert!(!got.is_empty(), "{name}-{v}: no samples");
            assert!(t.thread_names.is_empty(), "{name}-{v}");
            assert_eq!(t.off_cpu_min_ns(), None, "{name}-{v}: recorded without off-CPU");
            assert!(t.libraries().is_empty(), "{name}-{v}: no native libraries");
            assert!(t.symbols.iter().all(|s| s.kind() == FrameKind::Python), "{name}-{v}: Python frames only");
            assert!(!t.task_sweep(), "{name}-{v}: no task waits");
            // Only what the file itself says is wrong with it: the killed and cut-off ones lack their trailer.
            assert_eq!(notes.warnings.is_empty(), name == "mixed", "{name}-{v}: {:?}", notes.warnings);
            let processes: Vec<(u32, Vec<String>, String)> =
                t.processes.iter().map(|p| (p.pid, p.command.clone(), p.python_version.clone())).collect();
            read_as.push((h, processes, got));
        }
        assert!(read_as[0] == read_as[1], "{name}: 1.0 and 1.1 read differently");
        assert!(read_as[1] == read_as[2], "{name}: 1.1 and 1.2 read differently");
        assert!(read_as[2] == read_as[3], "{name}: 1.2 and 1.3 read differently");
        assert!(read_as[3] == read_as[4], "{name}: 1.3 and 1.4 read differently");
    }
    let mut read_as = Vec::new();
    for minor in [3u8, 4] {
        let bytes = recording(&format!("offcpu-1.{minor}.pyp"));
        assert_eq!(&bytes[8..12], &[1, 0, minor, 0], "offcpu-1.{minor}: format 1.{minor}");
        let (t, mins, intervals, notes) = read_off_cpu(&bytes).unwrap();
        assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
        assert_eq!((t.off_cpu_min_ns(), mins.len(), intervals.len()), (Some(1_000_000), 3, 10));
        assert!(t.libraries().is_empty());
        assert!(intervals.iter().all(|(iv, _)| iv.task_stack == 0), "no task stacks before 1.5");
        read_as.push(intervals);
    }
    assert!(read_as[0] == read_as[1], "offcpu: 1.3 and 1.4 read differently");
    let bytes = recording("native-1.4.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 4, 0], "native-1.4: format 1.4");
    let (_, t, got, notes) = read(&bytes).unwrap();
    assert!(notes.warnings.is_empty() && got.len() == 100, "{:?}", notes.warnings);
    assert_eq!(t.libraries().len(), 5);
    assert!(t.symbols.iter().any(|s| s.kind() == FrameKind::Native) && !t.task_sweep());
}

/// An empty name (the recorder's "unknown from here": the tid was reused, or the thread is gone) ends the name
/// before it: no name from its time until the next one, and the next one does not reach back before it. Names come
/// in any time order (the recorder writes an end at the new thread's start, which may be before names it wrote).
#[test]
fn an_empty_thread_name_ends_the_one_before_it() {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let mut p = process(100);
    p.first_seen_ns = 0;
    w.add_process(&p).unwrap();
    w.add_thread_names(&[thread_name(100, 101, 1_000, "Dummy-1"), thread_name(100, 101, 8_000, "worker")]).unwrap();
    w.add_thread_names(&[thread_name(100, 101, 5_000, ""), thread_name(100, 102, 3_000, "")]).unwrap();
    let bytes = w.finish(&stats(0)).unwrap();
    let (_, t, _, _) = read(&bytes).unwrap();
    assert_eq!(t.thread_names.len(), 4, "the empty names are kept");
    assert_eq!(t.thread_name(100, 101, 500), Some("Dummy-1"));
    assert_eq!(t.thread_name(100, 101, 4_999), Some("Dummy-1"));
    assert_eq!(t.thread_name(100, 101, 5_000), None);
    assert_eq!(t.thread_name(100, 101, 7_999), None);
    assert_eq!(t.thread_name(100, 101, 8_000), Some("worker"));
    assert_eq!(t.thread_name(100, 101, 9_000), Some("worker"));
    assert_eq!(t.thread_name(100, 102, 1), None, "only an end: no name");
    assert_eq!(t.thread_name(100, 102, 4_000), None);
}

/// A crafted file of 400 000 names of one thread, in descending time, over 1 000 process records of the same pid
/// (also in descending order): reading it and looking up 1 000 names costs one sort, not a sorted insert per name
/// nor a scan per lookup (either took minutes). Checked against a direct reading of the rules on a few lookups.
#[test]
fn crafted_thread_names_load_and_look_up_in_bounded_work() {
    const NAMES: u64 = 400_000;
    const EPOCHS: u64 = 1_000;
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    for k in (0..EPOCHS).rev() {
        let mut p = process(1);
        p.first_seen_ns = k * 1_000_000 + 1;
        w.add_process(&p).unwrap();
    }
    let names: Vec<ThreadName> = (0..NAMES)
        .map(|i| {
            let name = if i % 97 == 0 { String::new() } else { format!("n{}", i % 7) };
            thread_name(1, 1, (NAMES - i) * 2_500, &name)
        })
        .collect();
    w.add_thread_names(&names).unwrap();
    let bytes = w.finish(&stats(0)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let (_, t, _, _) = read(&bytes).unwrap();
        let queries: Vec<u64> = (0..1_000u64).map(|q| q * 1_000_003 + 77).collect();
        let got: Vec<Option<String>> = queries.iter().map(|&q| t.thread_name(1, 1, q).map(str::to_string)).collect();
        assert_eq!(t.thread_name(1, 2, 5), None);
        let _ = tx.send((started.elapsed(), t, queries, got));
    });
    let (took, t, queries, got) =
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("loading and looking up took over a minute");
    eprintln!("400k names: read and 1000 lookups in {took:?}");
    // The rules, read directly (linear per lookup: a few lookups only).
    let mut starts: Vec<u64> = t.processes.iter().map(|p| p.first_seen_ns).collect();
    starts.sort_unstable();
    let epoch = |time: u64| starts.partition_point(|&s| s <= time).checked_sub(1).map_or(0, |i| starts[i]);
    let epochs: Vec<u64> = t.thread_names.iter().map(|n| epoch(n.time_ns)).collect();
    for (&q, got) in queries.iter().zip(&got).step_by(97) {
        let same: Vec<&ThreadName> =
            t.thread_names.iter().zip(&epochs).filter(|(_, &e)| e == epoch(q)).map(|(n, _)| n).collect();
        let before = same.iter().filter(|n| n.time_ns <= q).max_by_key(|n| n.time_ns);
        let after = same.iter().filter(|n| n.time_ns > q).min_by_key(|n| n.time_ns);
        let want = before.or(after).map(|n| n.name.clone()).filter(|n| !n.is_empty());
        assert_eq!(got, &want, "at {q}");
    }
    assert!(got.iter().any(Option::is_some) && got.iter().any(Option::is_none), "both cases looked up");
}

// ---- off-CPU intervals (1.3) -------------------------------------------------------------------------------------

const OFF_CPU_MIN_NS: u64 = 1_000_000;

/// A varied interval: every kind (an unknown one too), syscalls and none, flags, GIL states, stacks and no stack.
fn interval(i: u64, stacks: &[u32]) -> OffCpuInterval {
    let duration_ns = (i * 7919) % 3_000_000 + 1;
    let kind = OffCpuKind::from_u8((i % 6) as u8); // 5: unknown
    OffCpuInterval {
        pid: 100 + (i % 3) as u32,
        tid: 100 + (i % 5) as u32,
        start_ns: 1_000 + i * 2_000_000,
        duration_ns,
        runnable_ns: if kind == OffCpuKind::Runnable { duration_ns } else { duration_ns / 3 },
        weight_ns: duration_ns.max(OFF_CPU_MIN_NS),
        kind,
        syscall: [-1, 0, 7, 202, 230, 321][(i % 6) as usize],
        gil: if kind == OffCpuKind::Gil { GilState::Waiting } else { GilState::from_u8((i % 10) as u8) },
        status: StackStatus::from_u8((i % 6) as u8),
        stack: stacks[(i % stacks.len() as u64) as usize],
        flags: [0, off_cpu_flags::BEFORE_START, off_cpu_flags::OPEN_AT_END, 3, 0x80][(i % 5) as usize],
        comm: if i % 4 == 0 { "python3".into() } else { format!("wörker-{}", i % 7) },
        task_stack: 0,
        // Mostly the main interpreter; now and then a subinterpreter, ids past one LEB128 byte too (1.9).
        interp: if i % 9 == 4 { (i % 300) as u32 } else { 0 },
        link: 0,
    }
}

/// A recording with samples and `n` off-CPU intervals over a few stacks, flushed every `flush_every` intervals
/// (0: never); off-CPU recorded when `min` is given. Returns the file and the intervals with their stacks as
/// symbols (root first).
fn write_off_cpu(n: u64, flush_every: u64, min: Option<u64>) -> (Vec<u8>, Vec<(OffCpuInterval, Vec<Symbol>)>) {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&process(100)).unwrap();
    if let Some(min) = min {
        w.start_off_cpu(min).unwrap();
    }
    let syms = [sym("", "<module>", 1), sym("", "main", 10), sym("Worker", "run", 20), sym("", "wait", 30)];
    let ids: Vec<u32> = syms.iter().map(|s| w.intern_symbol(s)).collect();
    let shapes: [&[usize]; 4] = [&[0, 1, 2], &[0, 1, 3], &[], &[0, 3]];
    let mut stacks = Vec::new();
    let mut by_leaf = std::collections::HashMap::new();
    let mut expected = Vec::new();
    for i in 0..n {
        // A new stack now and then, interned just before the interval that uses it: the writer must put its nodes
        // on disk before the interval's chunk.
        if stacks.len() < shapes.len() && i % 100 == 0 {
            let shape = shapes[stacks.len()];
            let leaf = w.intern_stack(&shape.iter().map(|&k| ids[k]).collect::<Vec<u32>>());
            by_leaf.insert(leaf, shape.iter().map(|&k| syms[k].clone()).collect::<Vec<Symbol>>());
            stacks.push(leaf);
        }
        let iv = interval(i, &stacks);
        w.push_off_cpu(&iv).unwrap();
        if i % 10 == 0 {
            w.push_sample(&SampleRecord {
                time_ns: iv.start_ns,
                cpu: 0,
                pid: iv.pid,
                tid: iv.tid,
                comm: "python3",
                thread_state: ThreadStateMatch::Match,
                gil: GilState::ThisThread,
                pthread_id: PthreadIdMatch::Match,
                status: StackStatus::Complete,
                stack: iv.stack,
                task_stack: 0,
                flags: 0,
                interp: 0,
                link: 0,
            })
            .unwrap();
        }
        expected.push((iv.clone(), by_leaf[&iv.stack].clone()));
        if flush_every > 0 && (i + 1) % flush_every == 0 {
            w.flush().unwrap();
        }
    }
    assert_eq!(w.off_cpu_written(), n);
    (w.finish(&stats(n / 10)).unwrap(), expected)
}

/// (min_ns of each off-CPU chunk, the intervals with their stacks as symbols, root first).
type OffCpuRead = (Tables, Vec<u64>, Vec<(OffCpuInterval, Vec<Symbol>)>, ScanNotes);

fn read_off_cpu(bytes: &[u8]) -> Result<OffCpuRead, Error> {
    let mut r = Reader::new(bytes)?;
    let mut tables = Tables::default();
    let mut mins = Vec::new();
    let mut got = Vec::new();
    let notes = scan_records(&mut r, &mut tables, |t, record| {
        if let Record::OffCpu { min_ns, intervals } = record {
            assert_eq!(t.off_cpu_min_ns(), Some(mins.first().copied().unwrap_or(*min_ns)));
            mins.push(*min_ns);
            for iv in intervals {
                let mut root_first: Vec<Symbol> = t.frames(iv.stack).map(|id| t.symbol(id).clone()).collect();
                root_first.reverse();
                got.push((iv.clone(), root_first));
            }
        }
    })?;
    Ok((tables, mins, got, notes))
}

/// Off-CPU intervals survive write -> read with every field (unknown kinds, states and flag bits kept), in chunks of
/// at most OFF_CPU_PER_CHUNK, after the empty chunk that says off-CPU time was recorded; the stacks they name
/// resolve; samples around them are untouched.
#[test]
fn off_cpu_intervals_round_trip_every_field() {
    let n = OFF_CPU_PER_CHUNK as u64 * 2 + 5;
    let (bytes, expected) = write_off_cpu(n, 0, Some(OFF_CPU_MIN_NS));
    assert_eq!(&bytes[8..12], &[1, 0, MINOR as u8, 0], "format 1.{MINOR}");
    let (t, mins, got, notes) = read_off_cpu(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(t.off_cpu_min_ns(), Some(OFF_CPU_MIN_NS));
    assert_eq!(mins, vec![OFF_CPU_MIN_NS; 4], "the empty chunk, then three");
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "intervals differ");
    assert!(got.iter().any(|(iv, _)| iv.kind == OffCpuKind::Unknown(5)));
    assert!(got.iter().any(|(iv, _)| iv.flags == 0x80));
    // The chunk right after the header and the process is the empty one, and the samples read as written.
    let ends = chunk_ends(&bytes);
    assert_eq!(u16::from_le_bytes([bytes[ends[2]], bytes[ends[2] + 1]]), Kind::OffCpu as u16);
    let (_, _, samples, _) = read(&bytes).unwrap();
    assert_eq!(samples.len() as u64, n.div_ceil(10));
}

/// off_cpu_min_ns says whether off-CPU time was recorded: Some from the empty first chunk even with no interval,
/// None without it.
#[test]
fn an_empty_off_cpu_chunk_says_off_cpu_was_recorded() {
    let (bytes, _) = write_off_cpu(0, 0, Some(5_000));
    let (t, mins, got, notes) = read_off_cpu(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!((t.off_cpu_min_ns(), mins, got.len()), (Some(5_000), vec![5_000], 0));
    let mut r = Reader::new(&bytes[..]).unwrap();
    assert_eq!(r.next_record().unwrap(), Some(Record::Process(process(100))));
    assert_eq!(r.next_record().unwrap(), Some(Record::OffCpu { min_ns: 5_000, intervals: Vec::new() }));

    let (bytes, _) = write_off_cpu(0, 0, None);
    let (t, mins, _, _) = read_off_cpu(&bytes).unwrap();
    assert_eq!((t.off_cpu_min_ns(), mins.len()), (None, 0));
    assert!(!chunk_ends(&bytes).windows(2).any(|w| bytes[w[0]] == Kind::OffCpu as u8), "no off-CPU chunk");
}

/// start_off_cpu is once, and before push_off_cpu: misuse is an error, not a file without its minimum.
#[test]
fn off_cpu_writer_misuse_is_an_error() {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    assert!(w.push_off_cpu(&interval(0, &[0])).is_err());
    w.start_off_cpu(1).unwrap();
    assert!(w.start_off_cpu(1).is_err());
    w.push_off_cpu(&interval(0, &[0])).unwrap();
}

/// A file cut anywhere among its off-CPU chunks reads the intervals of its complete chunks, in order, with a warning.
#[test]
fn a_file_cut_among_off_cpu_chunks_reads_its_complete_chunks() {
    let (bytes, expected) = write_off_cpu(400, 37, Some(OFF_CPU_MIN_NS));
    let ends = chunk_ends(&bytes);
    let chunk_kind = |end: usize| u16::from_le_bytes([bytes[end], bytes[end + 1]]);
    // After the header, the process and the empty off-CPU chunk: (end of the chunk, intervals read when the file
    // ends there).
    let mut complete = vec![(ends[3], 0usize)];
    for w in ends[3..].windows(2) {
        let before = complete.last().unwrap().1;
        let mut here = before;
        if chunk_kind(w[0]) == Kind::OffCpu as u16 {
            here = read_off_cpu(&bytes[..w[1]]).unwrap().2.len();
        }
        complete.push((w[1], here));
    }
    assert!(complete.iter().filter(|c| c.1 > 0).count() > 5, "several off-CPU chunks");
    for cut in ends[3]..bytes.len() {
        let (t, _, got, notes) = read_off_cpu(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let want = complete.iter().rev().find(|c| c.0 <= cut).unwrap().1;
        assert_eq!(got.len(), want, "cut at {cut}");
        assert!(got[..] == expected[..want], "cut at {cut}");
        assert!(!notes.warnings.is_empty(), "cut at {cut}");
        assert_eq!(t.off_cpu_min_ns(), Some(OFF_CPU_MIN_NS), "cut at {cut}");
    }
}

/// An off-CPU chunk whose columns differ in length (any one of them) is corrupt, never a panic; one with a column
/// appended by a newer minor reads with it ignored.
#[test]
fn off_cpu_chunks_with_columns_of_different_lengths_are_refused() {
    let (base, _) = write_off_cpu(0, 0, None);
    let ends = chunk_ends(&base);
    let good = OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &[interval(1, &[0]), interval(2, &[0])]);
    let with = |c: &OffCpuChunk, extra: &[u8]| {
        let mut payload = postcard::to_stdvec(c).unwrap();
        payload.extend_from_slice(extra);
        let mut bytes = base[..ends[1]].to_vec();
        bytes.extend_from_slice(&raw_chunk(Kind::OffCpu as u16, &payload));
        bytes.extend_from_slice(&base[ends[1]..]);
        bytes
    };
    let (t, _, got, notes) = read_off_cpu(&with(&good, &postcard::to_stdvec(&vec![7u64, 8]).unwrap())).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), good.intervals().unwrap());
    assert_eq!(t.off_cpu_min_ns(), Some(OFF_CPU_MIN_NS));

    for column in 0..13 {
        for longer in [false, true] {
            let mut bad = good.clone();
            macro_rules! change {
                ($v:expr) => {
                    if longer {
                        let last = $v.last().unwrap().clone();
                        $v.push(last);
                    } else {
                        $v.pop();
                    }
                };
            }
            match column {
                0 => change!(bad.tid),
                1 => change!(bad.start_ns),
                2 => change!(bad.duration_ns),
                3 => change!(bad.runnable_ns),
                4 => change!(bad.weight_ns),
                5 => change!(bad.kind),
                6 => change!(bad.syscall),
                7 => change!(bad.gil),
                8 => change!(bad.status),
                9 => change!(bad.stack),
                10 => change!(bad.flags),
                11 => change!(bad.comm),
                _ => change!(bad.pid),
            }
            let msg = read_off_cpu(&with(&bad, &[])).expect_err("refused").to_string();
            assert!(msg.contains("off-CPU chunk columns differ in length"), "column {column}: {msg}");
            assert!(msg.contains(&format!("at byte {}", ends[1])), "{msg}");
        }
    }
}

/// An off-CPU interval naming a stack node no earlier chunk defined is an error, as a sample's is.
#[test]
fn off_cpu_references_to_undefined_stacks_are_errors() {
    let (base, _) = write_off_cpu(3, 0, Some(OFF_CPU_MIN_NS)); // 3 nodes defined
    let ends = chunk_ends(&base);
    let tail = ends.len() - 3; // before the symbol table and the trailer
    for (stack, ok) in [(3u32, true), (4, false), (u32::MAX, false)] {
        let c = OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &[interval(0, &[stack])]);
        let mut bytes = base[..ends[tail]].to_vec();
        bytes.extend_from_slice(&raw_chunk(Kind::OffCpu as u16, &postcard::to_stdvec(&c).unwrap()));
        let got = read_off_cpu(&bytes);
        if ok {
            assert_eq!(got.unwrap().2.last().unwrap().0.stack, stack);
        } else {
            let msg = got.expect_err("refused").to_string();
            assert!(msg.contains(&format!("off-CPU interval names stack {stack}, which is not defined")), "{msg}");
            assert!(msg.contains(&format!("at byte {}", ends[tail])), "{msg}");
        }
    }
}

/// What a reader of an older minor (1.2 and before) does with a 1.3 file: kind 10 is a kind it does not know, which
/// it skips with a warning, reading everything else. Here the off-CPU chunks are relabelled with a kind this reader
/// does not know either, which takes the same path.
#[test]
fn off_cpu_chunks_are_skipped_as_unknown_by_older_readers() {
    let (bytes, _) = write_off_cpu(500, 100, Some(OFF_CPU_MIN_NS));
    let (_, _, all_samples, _) = read(&bytes).unwrap();
    let mut old = bytes.clone();
    let mut relabelled = 0;
    for w in chunk_ends(&bytes).windows(2) {
        let at = w[0];
        if u16::from_le_bytes([old[at], old[at + 1]]) == Kind::OffCpu as u16 {
            old[at..at + 2].copy_from_slice(&999u16.to_le_bytes());
            let crc = crc32fast::hash(&old[at..at + 16]);
            old[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
            relabelled += 1;
        }
    }
    assert!(relabelled > 2);
    let (_, t, samples, notes) = read(&old).unwrap();
    assert_eq!(samples, all_samples);
    assert_eq!(t.off_cpu_min_ns(), None);
    assert_eq!(
        notes.warnings,
        vec![format!("skipped {relabelled} chunks of a kind this pyperf does not know (newer minor version)")]
    );
}

// ---- native and kernel frames, libraries (1.4) ---------------------------------------------------------------------

fn native(name: &str, library: &str, flags: u32) -> Symbol {
    Symbol {
        scope: String::new(),
        name: name.into(),
        file: library.into(),
        line: 0,
        flags: symbol_flags::NATIVE | flags,
    }
}

fn kernel(name: &str) -> Symbol {
    Symbol {
        scope: String::new(),
        name: name.into(),
        file: "[kernel.kallsyms]".into(),
        line: 0,
        flags: symbol_flags::KERNEL,
    }
}

fn library(path: &str, build_id: &str) -> Library {
    Library { path: path.into(), build_id: build_id.into() }
}

const LIBZ: &str = "/usr/lib/x86_64-linux-gnu/libz.so.1.3";
const LIBPYTHON: &str = "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0";

/// A recording with native and kernel frames as `record --native --kernel` writes them: every kind of frame in its
/// stacks, libraries pushed as the recorder meets them (again, and once replaced by another build). Returns the file
/// and the samples' stacks as symbols, root first.
fn write_native() -> (Vec<u8>, Vec<Vec<Symbol>>) {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&process(100)).unwrap();
    let stacks: Vec<Vec<Symbol>> = vec![
        vec![
            sym("", "<module>", 1),
            sym("", "compress", 10),
            native("zlib_Compress_compress", "/usr/lib/python3.12/lib-dynload/zlib.so", 0),
            native("deflate", LIBZ, 0),
            kernel("asm_exc_page_fault"),
            kernel("nf_hook_slow"),
        ],
        vec![
            sym("", "<module>", 1),
            native("PyObject_Vectorcall", LIBPYTHON, symbol_flags::GLUE),
            sym("", "callback", 20),
        ],
        vec![sym("", "<module>", 1), native("[native: unmerged]", "", symbol_flags::MARKER)],
        vec![sym("", "<module>", 1), native("libfoo.so+0x1a2b", "/opt/libfoo.so", symbol_flags::UNRESOLVED)],
    ];
    let leaves: Vec<u32> = stacks
        .iter()
        .map(|s| {
            let ids: Vec<u32> = s.iter().map(|f| w.intern_symbol(f)).collect();
            w.intern_stack(&ids)
        })
        .collect();
    w.push_library(LIBZ, "aa11").unwrap();
    w.push_library("/usr/lib/python3.12/lib-dynload/zlib.so", "").unwrap();
    w.push_library(LIBZ, "aa11").unwrap(); // known: not written again
    let mut expected = Vec::new();
    for i in 0..40u64 {
        let k = i as usize % stacks.len();
        if i == 20 {
            w.push_library(LIBPYTHON, "bb22").unwrap();
            w.push_library("/opt/libfoo.so", "").unwrap();
            w.push_library(LIBZ, "cc33").unwrap(); // replaced while recording: written again
        }
        w.push_sample(&SampleRecord {
            time_ns: i * 1_000_000,
            cpu: 0,
            pid: 100,
            tid: 100,
            comm: "python3",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: StackStatus::Complete,
            stack: leaves[k],
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .unwrap();
        expected.push(stacks[k].clone());
        if i == 9 || i == 29 {
            w.flush().unwrap();
        }
    }
    assert_eq!(w.library_count(), 4);
    (w.finish(&stats(40)).unwrap(), expected)
}

/// Chunk kinds of a file, in order.
fn kinds(bytes: &[u8]) -> Vec<u16> {
    chunk_ends(bytes)[..chunk_ends(bytes).len() - 1]
        .iter()
        .map(|&at| u16::from_le_bytes([bytes[at], bytes[at + 1]]))
        .collect()
}

/// Native and kernel symbols (every flag) and libraries survive write -> read: the flags as written, each symbol's
/// kind, the libraries in chunks of what was new at each flush (a library pushed again is not written again, one
/// replaced by another build is), written before the symbols of the same flush; the tables map each path to its
/// latest build id.
#[test]
fn native_frames_and_libraries_round_trip() {
    let (bytes, expected) = write_native();
    assert_eq!(&bytes[8..12], &[1, 0, MINOR as u8, 0], "this format version");
    let (_, t, got, notes) = read(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    let stacks: Vec<Vec<Symbol>> = got.into_iter().map(|s| s.6).collect();
    assert_eq!(stacks, expected);
    let kinds_of: Vec<FrameKind> = expected.iter().flatten().map(Symbol::kind).collect();
    use FrameKind::*;
    assert_eq!(
        kinds_of[..12],
        [Python, Python, Native, Native, Kernel, Kernel, Python, Glue, Python, Python, Marker, Python]
    );
    assert_eq!(expected[3][1].kind(), Native, "unresolved is native");
    let want: std::collections::BTreeMap<String, String> =
        [(LIBZ, "cc33"), ("/usr/lib/python3.12/lib-dynload/zlib.so", ""), (LIBPYTHON, "bb22"), ("/opt/libfoo.so", "")]
            .iter()
            .map(|&(p, b)| (p.to_string(), b.to_string()))
            .collect();
    assert_eq!(t.libraries(), &want);

    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut chunks = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Libraries(l) = rec {
            chunks.push(l);
        }
    }
    assert_eq!(
        chunks,
        vec![
            vec![library(LIBZ, "aa11"), library("/usr/lib/python3.12/lib-dynload/zlib.so", "")],
            vec![library(LIBPYTHON, "bb22"), library("/opt/libfoo.so", ""), library(LIBZ, "cc33")],
        ]
    );
    // Header, process, libraries, symbols, stacks, samples; then libraries, samples; samples; symbol table, trailer.
    let k = kinds(&bytes);
    assert_eq!(&k[..6], &[1, 2, 11, 3, 4, 5], "{k:?}");
    assert_eq!(&k[6..8], &[11, 5], "{k:?}");
}

/// Symbol::kind reads the flags as FORMAT.md says: kernel first, then native with marker, glue; glue and marker mean
/// nothing without native; the other bits do not matter.
#[test]
fn frame_kinds_from_flags() {
    use symbol_flags::*;
    let kind = |flags| Symbol { flags, ..sym("", "f", 1) }.kind();
    assert_eq!(kind(0), FrameKind::Python);
    assert_eq!(kind(NAME_CUT | FILE_CUT | UNRESOLVED), FrameKind::Python);
    assert_eq!(kind(GLUE | MARKER), FrameKind::Python);
    assert_eq!(kind(NATIVE), FrameKind::Native);
    assert_eq!(kind(NATIVE | UNRESOLVED | NAME_CUT), FrameKind::Native);
    assert_eq!(kind(NATIVE | GLUE), FrameKind::Glue);
    assert_eq!(kind(NATIVE | MARKER), FrameKind::Marker);
    assert_eq!(kind(NATIVE | MARKER | GLUE), FrameKind::Marker);
    assert_eq!(kind(KERNEL), FrameKind::Kernel);
    assert_eq!(kind(KERNEL | NATIVE | GLUE), FrameKind::Kernel);
    assert_eq!(kind(1 << 31), FrameKind::Python, "a bit of a newer minor");
    assert_eq!([NATIVE, KERNEL, GLUE, MARKER], [8, 16, 32, 64], "FORMAT.md's values");
}

/// Libraries come in pieces of at most LIBRARIES_PER_CHUNK, all read back, in order.
#[test]
fn many_libraries_are_split_into_chunks() {
    let n = LIBRARIES_PER_CHUNK * 2 + 5;
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let libs: Vec<Library> = (0..n).map(|i| library(&format!("/lib/l{i}.so"), &format!("{i:x}"))).collect();
    for l in &libs {
        w.push_library(&l.path, &l.build_id).unwrap();
    }
    let bytes = w.finish(&stats(0)).unwrap();
    assert_eq!(kinds(&bytes), vec![1, 11, 11, 11, 7], "header, three library chunks (two full), trailer");
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Libraries(l) = rec {
            got.extend(l);
        }
    }
    assert_eq!(got, libs);
    let (_, t, _, _) = read(&bytes).unwrap();
    assert_eq!(t.libraries().len(), n);
}

/// A damaged library chunk is reported like any other: a flipped byte is a checksum error naming its offset; a
/// payload that does not decode, or whose columns differ in length, is corrupt at its offset; a file cut inside it
/// reads its complete chunks with a warning. One with a column appended by a newer minor reads with it ignored.
#[test]
fn damaged_library_chunks_are_reported_like_other_damage() {
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let at = ends[1];
    let with = |payload: &[u8]| {
        let mut bytes = w.bytes[..at].to_vec();
        bytes.extend_from_slice(&raw_chunk(Kind::Libraries as u16, payload));
        bytes.extend_from_slice(&w.bytes[at..]);
        bytes
    };
    let good = LibraryChunk::from_libraries(&[library(LIBZ, "aa11"), library("/opt/libfoo.so", "")]);
    let encoded = postcard::to_stdvec(&good).unwrap();

    let mut newer = encoded.clone();
    newer.extend(postcard::to_stdvec(&vec![7u64, 8]).unwrap()); // a column from the future
    let (_, t, got, notes) = read(&with(&newer)).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!((got.len(), t.libraries().len()), (3, 2));
    assert_eq!(t.libraries()[LIBZ], "aa11");

    for (bad, what) in [
        (LibraryChunk { build_id: vec!["x".into()], ..good.clone() }, "shorter"),
        (LibraryChunk { path: vec!["a".into(), "b".into(), "c".into()], ..good.clone() }, "longer"),
    ] {
        let msg = read(&with(&postcard::to_stdvec(&bad).unwrap())).expect_err(what).to_string();
        assert_eq!(msg, format!("recording corrupt at byte {at}: library chunk columns differ in length"), "{what}");
    }
    // Cut short inside the record, or not a string where one belongs.
    for payload in [&encoded[..encoded.len() - 3], &[2, 2, 0xff, 0xfe][..]] {
        let msg = read(&with(payload)).expect_err("undecodable").to_string();
        assert!(msg.starts_with(&format!("recording corrupt at byte {at}: undecodable record")), "{msg}");
    }
    let bytes = with(&encoded);
    let chunk_len = chunk_ends(&bytes)[2] - at;
    for pos in at..at + chunk_len {
        let mut bad = bytes.clone();
        bad[pos] ^= 0x10;
        let msg = read(&bad).expect_err("flipped").to_string();
        assert_eq!(msg, format!("recording corrupt: checksum mismatch in the chunk at byte {at}"), "byte {pos}");
    }
    for cut in at + 1..at + chunk_len {
        let (_, t, got, notes) = read(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(got.is_empty() && t.libraries().is_empty(), "cut at {cut}");
        assert!(notes.warnings[0].contains(&format!("cut off at byte {cut} after 1 complete chunks")), "{:?}", notes);
    }
}

/// What a 1.3 reader does with a 1.4 file: kind 11 is a kind it does not know, skipped with a warning; the native
/// and kernel frames are symbols like any other, read as the frames they are named (the flag bits it does not know
/// are kept, unused). Here the library chunks are relabelled with a kind this reader does not know either, which
/// takes the same path.
#[test]
fn library_chunks_are_skipped_as_unknown_by_older_readers() {
    let (bytes, expected) = write_native();
    let mut old = bytes.clone();
    let mut relabelled = 0;
    for w in chunk_ends(&bytes).windows(2) {
        let at = w[0];
        if u16::from_le_bytes([old[at], old[at + 1]]) == Kind::Libraries as u16 {
            old[at..at + 2].copy_from_slice(&999u16.to_le_bytes());
            let crc = crc32fast::hash(&old[at..at + 16]);
            old[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
            relabelled += 1;
        }
    }
    assert_eq!(relabelled, 2);
    let (_, t, got, notes) = read(&old).unwrap();
    assert_eq!(got.into_iter().map(|s| s.6).collect::<Vec<_>>(), expected);
    assert!(t.libraries().is_empty());
    assert_eq!(notes.warnings, vec!["skipped 2 chunks of a kind this pyperf does not know (newer minor version)"]);
}

/// Two recordings' tables as one: equal symbols and stacks become one, every stack keeps its frames, process
/// records stay apart with their times shifted, trailer counters add up.
#[test]
fn appended_tables_keep_every_stack() {
    let a = write(3_000, 0);
    let b = write(5_000, 700);
    let (_, ta, sa, _) = read(&a.bytes).unwrap();
    let (_, tb, sb, _) = read(&b.bytes).unwrap();
    let mut merged = Tables::default();
    let mut merger = Merger::default();
    let ra = merged.append(&mut merger, &ta, 0);
    let rb = merged.append(&mut merger, &tb, 1_000);
    // The same writer made both: the same symbols, each once.
    assert_eq!(merged.symbols.len(), ta.symbols.len());
    for (t, r) in [(&ta, &ra), (&tb, &rb)] {
        for node in 0..=t.nodes.len() as u32 {
            let old: Vec<&Symbol> = t.frames(node).map(|id| t.symbol(id)).collect();
            let new: Vec<&Symbol> = merged.frames(r.nodes[node as usize]).map(|id| merged.symbol(id)).collect();
            assert_eq!(old, new, "node {node}");
        }
    }
    assert!(merged.nodes.len() <= ta.nodes.len() + tb.nodes.len());
    assert_eq!(merged.processes.len(), 4);
    assert_eq!((ra.first_process, rb.first_process), (0, 2));
    assert_eq!(merged.processes[2].first_seen_ns, tb.processes[0].first_seen_ns + 1_000);
    let stats = merged.stats.as_ref().unwrap();
    assert_eq!(stats.samples, (sa.len() + sb.len()) as u64);
    assert_eq!(stats.duration_ns, tb.stats.as_ref().unwrap().duration_ns + 1_000);
    assert!(merged.complete_symbol_table);
}

// ---- asyncio task stacks and task waits (1.5) ----------------------------------------------------------------------

fn task_marker(name: &str) -> Symbol {
    Symbol { scope: String::new(), name: name.into(), file: String::new(), line: 0, flags: symbol_flags::TASK }
}

/// What a 1.5 file holds, resolved to symbols (root first): per sample (thread stack, task stack), per interval the
/// same, per wait (pid, tid, time, weight, stack).
#[derive(Debug, Default, PartialEq)]
struct TaskRead {
    samples: Vec<(Vec<Symbol>, Vec<Symbol>)>,
    intervals: Vec<(Vec<Symbol>, Vec<Symbol>)>,
    waits: Vec<(u32, u32, u64, u64, Vec<Symbol>)>,
    /// Task wait chunks read, the empty first one included.
    wait_chunks: usize,
}

fn root_first(t: &Tables, leaf: u32) -> Vec<Symbol> {
    let mut ids = Vec::new();
    t.frames_root_first(leaf, &mut ids);
    ids.into_iter().map(|id| t.symbol(id).clone()).collect()
}

fn read_tasks(bytes: &[u8]) -> Result<(Tables, TaskRead, ScanNotes), Error> {
    let mut r = Reader::new(bytes)?;
    let mut tables = Tables::default();
    let mut got = TaskRead::default();
    let notes = scan_records(&mut r, &mut tables, |t, record| match record {
        Record::Samples(c) => {
            for s in samples(c) {
                got.samples.push((root_first(t, s.stack), root_first(t, s.task_stack)));
            }
        }
        Record::OffCpu { intervals, .. } => {
            for iv in intervals {
                got.intervals.push((root_first(t, iv.stack), root_first(t, iv.task_stack)));
            }
        }
        Record::TaskWaits(waits) => {
            got.wait_chunks += 1;
            for w in waits {
                got.waits.push((w.pid, w.tid, w.time_ns, w.weight_ns, root_first(t, w.stack)));
            }
        }
        _ => {}
    })?;
    Ok((tables, got, notes))
}

/// A recording of an asyncio program: `n` samples (every other one with a task stack), an off-CPU interval per ten
/// samples (with and without task stacks) and `waits` task waits over a few stacks, flushed every `flush_every`
/// samples (0: never). Returns the file and what a reader must find.
fn write_tasks(n: usize, waits: usize, flush_every: usize) -> (Vec<u8>, TaskRead) {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.start_off_cpu(OFF_CPU_MIN_NS).unwrap();
    w.start_task_waits().unwrap();
    w.add_process(&process(100)).unwrap();
    let syms = [
        sym("", "<module>", 1),
        sym("Handle", "_run", 88),
        sym("", "handle_request", 20),
        sym("", "query_db", 6),
        task_marker("[task Task-1]"),
        task_marker("[task request-3]"),
        task_marker("[task orders-3 (+1 awaiters)]"),
        task_marker(symbol_flags::ASYNCIO_LOOP),
        sym("", "select", 468),
    ];
    let ids: Vec<u32> = syms.iter().map(|s| w.intern_symbol(s)).collect();
    // (thread stack, task stack) shapes; an empty task stack is none.
    let shapes: [(&[usize], &[usize]); 4] =
        [(&[0, 1, 2], &[4, 5, 2]), (&[0, 1, 3], &[4, 5, 2, 6, 3]), (&[0, 8], &[7, 0, 8]), (&[0, 1, 2], &[])];
    let symbols = |shape: &[usize]| shape.iter().map(|&k| syms[k].clone()).collect::<Vec<Symbol>>();
    let mut expected = TaskRead { wait_chunks: 1, ..Default::default() };
    let intern =
        |w: &mut Writer<Vec<u8>>, shape: &[usize]| w.intern_stack(&shape.iter().map(|&k| ids[k]).collect::<Vec<u32>>());
    for i in 0..n {
        let (thread, task) = shapes[i % shapes.len()];
        let (stack, task_stack) = (intern(&mut w, thread), intern(&mut w, task));
        w.push_sample(&SampleRecord {
            time_ns: i as u64 * 1_000_000,
            cpu: 0,
            pid: 100,
            tid: 100,
            comm: "python3",
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
        .unwrap();
        expected.samples.push((symbols(thread), symbols(task)));
        if i % 10 == 0 {
            let iv = OffCpuInterval { stack, task_stack, ..interval(i as u64, &[stack]) };
            w.push_off_cpu(&iv).unwrap();
            expected.intervals.push((symbols(thread), symbols(task)));
        }
        if flush_every > 0 && (i + 1) % flush_every == 0 {
            w.flush().unwrap();
        }
    }
    let mut batch = Vec::new();
    for i in 0..waits {
        // Stacks new to the writer too: their nodes must reach the disk before the waits that use them.
        let shape: &[usize] = [&[4, 0][..], &[4, 0, 5, 2], &[4, 0, 5, 2, 6, 3], &[4, 0, 5, 2, 6, 3, 8]][i % 4];
        let stack = intern(&mut w, shape);
        let wait = TaskWait {
            pid: 100,
            tid: if i % 7 == 0 { 0 } else { 100 },
            time_ns: (i as u64 / 4 + 1) * 100_000_000,
            weight_ns: 100_000_000 + i as u64,
            stack,
        };
        expected.waits.push((wait.pid, wait.tid, wait.time_ns, wait.weight_ns, symbols(shape)));
        batch.push(wait);
        if batch.len() == 4 {
            w.task_waits(&batch).unwrap();
            batch.clear();
        }
    }
    w.task_waits(&batch).unwrap();
    assert_eq!(w.task_waits_written(), waits as u64);
    let chunks_of_waits = waits.div_ceil(TASK_WAITS_PER_CHUNK);
    expected.wait_chunks += chunks_of_waits;
    (w.finish(&stats(n as u64)).unwrap(), expected)
}

/// Task stacks of samples and intervals, and task waits, survive write -> read with every field, the waits in chunks
/// of at most TASK_WAITS_PER_CHUNK after the empty one that says the sweep ran (after the off-CPU one); task markers
/// are their own kind of frame.
#[test]
fn task_stacks_and_waits_round_trip() {
    let (bytes, expected) = write_tasks(200, TASK_WAITS_PER_CHUNK + 5, 64);
    assert_eq!(&bytes[8..12], &[1, 0, MINOR as u8, 0], "this format (1.5+)");
    let (t, got, notes) = read_tasks(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert!(t.task_sweep());
    assert_eq!(got, expected);
    assert_eq!(got.wait_chunks, 3);
    let kinds = kinds(&bytes);
    assert_eq!(&kinds[..3], &[Kind::Header as u16, Kind::OffCpu as u16, Kind::TaskWaits as u16]);
    assert_eq!(task_marker("[task x]").kind(), FrameKind::Task);
    assert_eq!(task_marker(symbol_flags::ASYNCIO_LOOP).kind(), FrameKind::Task);
    let flags = |f| Symbol { flags: f, ..sym("", "f", 1) }.kind();
    assert_eq!(flags(symbol_flags::TASK | symbol_flags::NATIVE | symbol_flags::MARKER), FrameKind::Task);
    assert_eq!(flags(symbol_flags::TASK | symbol_flags::KERNEL), FrameKind::Kernel);
    // Skipping the column leaves it empty: every sample reads 0.
    let mut r = Reader::new(&bytes[..]).unwrap();
    r.set_columns(Columns { task_stack: false, ..Columns::ALL });
    let mut tables = Tables::default();
    scan(&mut r, &mut tables, |_, c| assert!(c.task_stack.is_empty() && samples(c).all(|s| s.task_stack == 0)))
        .unwrap();
}

/// Without the sweep, no task wait chunk: `task_sweep` says so. Misuse of the writer is an error, not a bad file.
#[test]
fn task_waits_need_the_sweep_started_once() {
    let (bytes, _) = write_off_cpu(10, 0, Some(OFF_CPU_MIN_NS));
    let (t, got, _) = read_tasks(&bytes).unwrap();
    assert!(!t.task_sweep() && got.wait_chunks == 0);
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let msg = w.task_waits(&[]).expect_err("before start").to_string();
    assert!(msg.contains("task_waits called before start_task_waits"), "{msg}");
    w.start_task_waits().unwrap();
    assert!(w.start_task_waits().is_err(), "twice");
    let bytes = w.finish(&stats(0)).unwrap();
    let (t, got, notes) = read_tasks(&bytes).unwrap();
    assert!(t.task_sweep() && got.wait_chunks == 1 && got.waits.is_empty(), "{:?}", notes.warnings);
}

/// What a 1.4 reader does with a 1.5 file: kind 12 is a kind it does not know, skipped with a warning (relabelled
/// here to one this reader does not know either, which takes the same path); the sample and off-CPU chunks it decodes
/// as their 1.4 prefix, the appended `task_stack` column trailing bytes it ignores. And this reader reads a chunk as
/// 1.4 wrote it (no `task_stack` column) as one without task stacks.
#[test]
fn older_readers_skip_task_waits_and_read_the_prefix_of_the_columns() {
    let (bytes, expected) = write_tasks(50, 30, 0);
    let mut old = bytes.clone();
    let mut relabelled = 0;
    for w in chunk_ends(&bytes).windows(2) {
        let at = w[0];
        if u16::from_le_bytes([old[at], old[at + 1]]) == Kind::TaskWaits as u16 {
            old[at..at + 2].copy_from_slice(&999u16.to_le_bytes());
            let crc = crc32fast::hash(&old[at..at + 16]);
            old[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
            relabelled += 1;
        }
    }
    assert_eq!(relabelled, 2);
    let (t, got, notes) = read_tasks(&old).unwrap();
    assert!(!t.task_sweep() && got.waits.is_empty());
    assert_eq!((got.samples, got.intervals), (expected.samples, expected.intervals));
    assert_eq!(notes.warnings, vec!["skipped 2 chunks of a kind this pyperf does not know (newer minor version)"]);

    // A 1.5 sample chunk is a 1.4 one with the column after it (and a 1.6 one a 1.5 one with the flags after it,
    // here all 0): the prefix a 1.4 reader decodes is intact.
    let chunk = SampleChunk {
        time_delta_ns: vec![0, 5],
        cpu: vec![0, 1],
        pid: vec![1, 1],
        tid: vec![1, 2],
        comm: vec![0, 0],
        comms: vec!["x".into()],
        thread_state: vec![0, 0],
        gil: vec![0, 0],
        pthread_id: vec![0, 0],
        status: vec![0, 0],
        stack: vec![1, 1],
        task_stack: vec![2, 300],
        ..Default::default()
    };
    let v18 = encode_sample_chunk(&chunk).unwrap();
    let v16 = &v18[..v18.len() - 2]; // the interpreter (1.8) and span (1.10) columns, empty
    assert_eq!(&v18[v16.len()..], &[0, 0]);
    let v15 = &v16[..v16.len() - 3]; // the flags column: its length (2) and two zero bytes
    assert_eq!(&v16[v15.len()..], &[2, 0, 0]);
    let none = encode_sample_chunk(&SampleChunk { task_stack: Vec::new(), ..chunk.clone() }).unwrap();
    // The zeros column and the flags column (each its length, 2, and two zeros), the empty interpreter and span
    // columns.
    let v14 = &none[..none.len() - 8];
    assert_eq!(&v15[..v14.len()], v14);
    assert_eq!(&v15[v14.len()..], &[3, 2, 0xac, 0x02]);
    // This reader, given the 1.4 form (stacks 1 and 2 defined): samples without task stacks.
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let mut bytes = w.bytes[..ends[ends.len() - 3]].to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::Samples as u16, v14));
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut t = Tables::default();
    let mut seen = 0;
    scan(&mut r, &mut t, |_, c| {
        if c.comms == ["x"] {
            assert!(c.task_stack.is_empty() && samples(c).all(|s| s.task_stack == 0 && s.stack == 1));
            seen += 1;
        }
    })
    .unwrap();
    assert_eq!(seen, 1);
    // An off-CPU chunk as 1.4 wrote it: the same.
    let iv = interval(1, &[1]);
    let v15 = postcard::to_stdvec(&OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, std::slice::from_ref(&iv))).unwrap();
    assert_eq!(v15.last(), Some(&0), "task_stack 0, the last column");
    let v14 = &v15[..v15.len() - 2]; // the column: count 1, value 0
    let mut bytes = w.bytes[..ends[ends.len() - 3]].to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::OffCpu as u16, v14));
    let (_, mins, intervals, _) = read_off_cpu(&bytes).unwrap();
    assert_eq!((mins, intervals.len(), intervals[0].0.clone()), (vec![OFF_CPU_MIN_NS], 1, iv));
}

/// Every stack a task stack or a task wait names is defined before it, like a sample's: anything else is an error
/// naming the chunk; columns of different lengths too.
#[test]
fn task_references_to_undefined_stacks_are_errors() {
    let (bytes, _) = write_tasks(20, 8, 0);
    let ends = chunk_ends(&bytes);
    // The file up to its stack nodes: the definitions, no samples, intervals or waits.
    let (t, _, _) = read_tasks(&bytes).unwrap();
    let defined = t.nodes.len() as u32;
    let stacks = kinds(&bytes).iter().position(|&k| k == Kind::Stacks as u16).expect("a stack chunk");
    let head = bytes[..ends[stacks + 1]].to_vec();
    let at = head.len();
    let check = |chunk: Vec<u8>, what: &str| {
        let mut bad = head.clone();
        bad.extend_from_slice(&chunk);
        let msg = read_tasks(&bad).expect_err("refused").to_string();
        assert!(msg.contains(what) && msg.contains(&format!("at byte {at}")), "{what}: {msg}");
    };
    // Nodes defined in the head: those of the first chunks of the file.
    let (head_tables, _, _) = read_tasks(&head).unwrap();
    let max = head_tables.nodes.len() as u32;
    assert!(max > 0 && max <= defined);
    let wait = |stack| TaskWait { pid: 1, tid: 1, time_ns: 0, weight_ns: 1, stack };
    let waits = |w: &[TaskWait]| postcard::to_stdvec(&TaskWaitChunk::from_waits(w)).unwrap();
    check(
        raw_chunk(Kind::TaskWaits as u16, &waits(&[wait(1), wait(max + 1)])),
        &format!("task wait names stack {}", max + 1),
    );
    let sample = SampleChunk {
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
        stack: vec![1],
        task_stack: vec![max + 7],
        ..Default::default()
    };
    check(
        raw_chunk(Kind::Samples as u16, &encode_sample_chunk(&sample).unwrap()),
        &format!("sample names stack {}", max + 7),
    );
    let iv = OffCpuInterval { task_stack: max + 2, ..interval(1, &[1]) };
    let off = postcard::to_stdvec(&OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &[iv])).unwrap();
    check(raw_chunk(Kind::OffCpu as u16, &off), &format!("off-CPU interval names stack {}", max + 2));
    let mut uneven = TaskWaitChunk::from_waits(&[wait(1)]);
    uneven.weight_ns.push(5);
    check(
        raw_chunk(Kind::TaskWaits as u16, &postcard::to_stdvec(&uneven).unwrap()),
        "task wait chunk columns differ in length",
    );
    let mut uneven = OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &[interval(1, &[1])]);
    uneven.task_stack.push(1);
    check(
        raw_chunk(Kind::OffCpu as u16, &postcard::to_stdvec(&uneven).unwrap()),
        "off-CPU chunk columns differ in length",
    );
    // A sample column one value short is no 1.4 chunk: an error, not samples without task stacks.
    let mut short = encode_sample_chunk(&SampleChunk { task_stack: vec![1], ..sample.clone() }).unwrap();
    // As 1.5 wrote it: without the flags column (length 1, one zero byte), the interpreter column and the span
    // column (empty).
    short.truncate(short.len() - 4);
    let n = short.len();
    short[n - 2] = 2; // the column claims 2 bytes, holds 1
    short.push(0x80);
    check(raw_chunk(Kind::Samples as u16, &short), "sample column");
    // A wait chunk claiming billions of waits in a few bytes: refused, nothing that size allocated.
    check(raw_chunk(Kind::TaskWaits as u16, &[0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2]), "undecodable record");
}

/// Every cut of a 1.5 file reads its complete chunks (task waits included) or fails cleanly, and every flipped byte
/// is caught.
#[test]
fn task_files_cut_or_damaged_anywhere_read_safely() {
    let (bytes, expected) = write_tasks(40, 12, 16);
    let ends = chunk_ends(&bytes);
    for cut in ends[1]..bytes.len() {
        let (_, got, notes) = read_tasks(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(expected.samples.starts_with(&got.samples), "cut at {cut}");
        assert!(expected.intervals.starts_with(&got.intervals), "cut at {cut}");
        assert!(expected.waits.starts_with(&got.waits), "cut at {cut}");
        assert!(!notes.warnings.is_empty(), "cut at {cut}");
    }
    for pos in 16..bytes.len() {
        let mut bad = bytes.clone();
        bad[pos] ^= 0x10;
        assert!(read_tasks(&bad).is_err(), "flip at {pos} went unnoticed");
    }
}

/// The synthetic asyncio recording as 1.5 wrote it (testdata/recordings/tasks-1.5.pyp, kept): task stacks, task
/// waits and markers as report/tests/support/synth.rs documents them.
#[test]
fn the_kept_1_5_recording_reads_with_its_tasks() {
    let bytes = recording("tasks-1.5.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 5, 0], "format 1.5");
    let (t, got, notes) = read_tasks(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert!(t.task_sweep());
    assert_eq!(got.samples.len(), 45);
    assert_eq!(got.samples.iter().filter(|(_, task)| !task.is_empty()).count(), 34);
    let first = |task: &[Symbol]| task.first().map(|s| s.name.clone()).unwrap_or_default();
    assert_eq!(got.samples.iter().filter(|(_, task)| first(task) == "[asyncio loop]").count(), 4);
    assert_eq!(got.intervals.iter().filter(|(_, task)| first(task) == "[asyncio loop]").count(), 1);
    assert_eq!(got.waits.len(), 37);
    assert_eq!(got.waits.iter().map(|w| w.3).sum::<u64>(), 3_700_000_000);
    assert!(got.waits.iter().all(|w| w.4.first().is_some_and(|s| s.name == "[task Task-1]")));
    let markers: std::collections::BTreeSet<&str> =
        t.symbols.iter().filter(|s| s.kind() == FrameKind::Task).map(|s| s.name.as_str()).collect();
    assert_eq!(markers.len(), 7, "{markers:?}");
    let counter = |name: &str| t.stats.as_ref().and_then(|s| s.counters.iter().find(|c| c.0 == name)).map(|c| c.1);
    assert_eq!((counter("task_samples"), counter("task_waits")), (Some(34), Some(37)));
}

// ---- garbage collection flags (1.6) --------------------------------------------------------------------------------

/// A recording of `n` samples whose flags cycle through none, GC and GC with a bit this reader does not know (a newer
/// recorder's), and off-CPU intervals with and without the GC flag; flushed every `flush_every` samples (0: never).
/// Returns the file, each sample's (flags, root-first stack) and each interval's flags.
fn write_gc(n: usize, flush_every: usize) -> (Vec<u8>, FlaggedSamples, Vec<u8>) {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&process(100)).unwrap();
    w.start_off_cpu(OFF_CPU_MIN_NS).unwrap();
    let syms = [sym("", "<module>", 1), sym("", "build", 10), sym("", "collect", 20)];
    let ids: Vec<u32> = syms.iter().map(|s| w.intern_symbol(s)).collect();
    let shapes: [&[usize]; 3] = [&[0, 1], &[0, 2], &[]];
    let leaves: Vec<u32> =
        shapes.iter().map(|s| w.intern_stack(&s.iter().map(|&k| ids[k]).collect::<Vec<_>>())).collect();
    let flags = [0, sample_flags::GC, 0, sample_flags::GC | 0x80];
    let (mut samples, mut intervals) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (shape, f) = (i % shapes.len(), flags[i % flags.len()]);
        w.push_sample(&SampleRecord {
            time_ns: i as u64 * 1_000_000,
            cpu: 0,
            pid: 100,
            tid: 100 + (i % 2) as u32,
            comm: "python3",
            thread_state: ThreadStateMatch::Match,
            gil: GilState::ThisThread,
            pthread_id: PthreadIdMatch::Match,
            status: if shape == 2 { StackStatus::Idle } else { StackStatus::Complete },
            stack: leaves[shape],
            task_stack: 0,
            flags: f,
            interp: 0,
            link: 0,
        })
        .unwrap();
        samples.push((f, shapes[shape].iter().map(|&k| syms[k].clone()).collect()));
        if i % 10 == 0 {
            let gc = if i % 20 == 0 { off_cpu_flags::GC } else { 0 };
            let iv = OffCpuInterval { flags: gc | off_cpu_flags::OPEN_AT_END, ..interval(i as u64, &leaves) };
            w.push_off_cpu(&iv).unwrap();
            intervals.push(iv.flags);
        }
        if flush_every > 0 && (i + 1) % flush_every == 0 {
            w.flush().unwrap();
        }
    }
    (w.finish(&stats(n as u64)).unwrap(), samples, intervals)
}

/// Each sample's flags and root-first stack.
type FlaggedSamples = Vec<(u8, Vec<Symbol>)>;

/// (each sample's flags and root-first stack, each interval's flags)
type GcRead = (FlaggedSamples, Vec<u8>, ScanNotes);

fn read_gc(bytes: &[u8], columns: Columns) -> Result<GcRead, Error> {
    let mut r = Reader::new(bytes)?;
    r.set_columns(columns);
    let mut tables = Tables::default();
    let (mut samples, mut intervals) = (Vec::new(), Vec::new());
    let notes = scan_records(&mut r, &mut tables, |t, record| match record {
        Record::Samples(c) => {
            assert!(c.flags.is_empty() || c.flags.len() == c.len(), "a decoded column is len long");
            samples.extend(crate::samples(c).map(|s| (s.flags, root_first(t, s.stack))));
        }
        Record::OffCpu { intervals: ivs, .. } => intervals.extend(ivs.iter().map(|iv| iv.flags)),
        _ => {}
    })?;
    Ok((samples, intervals, notes))
}

/// Sample flags survive write -> read (bits this reader does not know kept), in several chunks, beside off-CPU
/// intervals with the GC flag; a reader that skips the column reads every sample as 0.
#[test]
fn gc_flags_round_trip() {
    let (bytes, samples, intervals) = write_gc(SAMPLES_PER_CHUNK + 50, 700);
    assert_eq!(&bytes[8..12], &[1, 0, MINOR as u8, 0], "the current format (1.6 or later)");
    let (got, got_intervals, notes) = read_gc(&bytes, Columns::ALL).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got, samples);
    assert_eq!(got_intervals, intervals);
    assert_eq!(got.iter().filter(|(f, _)| f & sample_flags::GC != 0).count(), samples.len() / 2);
    assert!(got.iter().any(|(f, _)| *f == sample_flags::GC | 0x80), "an unknown bit is kept");
    assert!(got_intervals.iter().any(|f| f & off_cpu_flags::GC != 0) && got_intervals.iter().any(|f| f & 4 == 0));
    let (skipped, _, _) = read_gc(&bytes, Columns { flags: false, ..Columns::ALL }).unwrap();
    assert!(skipped.iter().all(|(f, _)| *f == 0));
    assert_eq!(skipped.iter().map(|(_, s)| s).collect::<Vec<_>>(), samples.iter().map(|(_, s)| s).collect::<Vec<_>>());
    let (minimal, _, _) = read_gc(&bytes, Columns::MINIMAL).unwrap();
    assert!(minimal.iter().all(|(f, _)| *f == 0));
}

/// Files before 1.6 have no flags column: every sample reads 0 (the kept 1.5 recording, and the 1.0-1.4 ones); a
/// 1.6 chunk is a 1.5 one with the column appended (what a 1.5 reader decodes is intact), and this reader reads the
/// 1.5 form as samples without flags.
#[test]
fn files_before_1_6_read_flags_0() {
    for name in ["tasks-1.5.pyp", "mixed-1.4.pyp", "native-1.4.pyp", "offcpu-1.3.pyp", "mixed-1.0.pyp"] {
        let (got, intervals, _) = read_gc(&recording(name), Columns::ALL).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!got.is_empty(), "{name}");
        assert!(got.iter().all(|(f, _)| *f == 0), "{name}: no flags before 1.6");
        assert!(intervals.iter().all(|f| f & off_cpu_flags::GC == 0), "{name}: no GC interval before 1.6");
    }
    let chunk = SampleChunk {
        time_delta_ns: vec![0, 5],
        cpu: vec![0, 1],
        pid: vec![1, 1],
        tid: vec![1, 2],
        comm: vec![0, 0],
        comms: vec!["x".into()],
        thread_state: vec![0, 0],
        gil: vec![0, 0],
        pthread_id: vec![0, 0],
        status: vec![0, 0],
        stack: vec![1, 1],
        task_stack: vec![0, 2],
        flags: vec![sample_flags::GC, 0],
        ..Default::default()
    };
    let v18 = encode_sample_chunk(&chunk).unwrap();
    let v16 = &v18[..v18.len() - 2]; // the interpreter (1.8) and span (1.10) columns, empty
    let v15 = encode_sample_chunk(&SampleChunk { flags: Vec::new(), ..chunk.clone() }).unwrap();
    let v15 = &v15[..v15.len() - 5]; // its flags column (length 2, two zero bytes), the empty interpreter and span columns
    assert_eq!(&v16[..v15.len()], v15);
    assert_eq!(&v16[v15.len()..], &[2, sample_flags::GC, 0]);
    // The 1.5 form (stacks 1 and 2 defined by the file it is put in): the same samples, flags 0.
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    for (payload, flags) in [(v15, [0, 0]), (v16, [sample_flags::GC, 0])] {
        let mut bytes = w.bytes[..ends[ends.len() - 3]].to_vec();
        bytes.extend_from_slice(&raw_chunk(Kind::Samples as u16, payload));
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut t = Tables::default();
        let mut seen = 0;
        scan(&mut r, &mut t, |_, c| {
            if c.comms == ["x"] {
                let got: Vec<(u8, u32, u32)> = samples(c).map(|s| (s.flags, s.stack, s.task_stack)).collect();
                assert_eq!(got, vec![(flags[0], 1, 0), (flags[1], 1, 2)]);
                seen += 1;
            }
        })
        .unwrap();
        assert_eq!(seen, 1);
    }
}

/// A flags column of another length than the chunk's (neither empty nor `len` bytes) is damage, named with the
/// chunk's offset: not samples without flags.
#[test]
fn a_flags_column_of_the_wrong_length_is_corrupt() {
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let head = w.bytes[..ends[ends.len() - 3]].to_vec();
    let chunk = SampleChunk {
        time_delta_ns: vec![0, 5, 5],
        cpu: vec![0; 3],
        pid: vec![1; 3],
        tid: vec![1; 3],
        comm: vec![0; 3],
        comms: vec!["x".into()],
        thread_state: vec![0; 3],
        gil: vec![0; 3],
        pthread_id: vec![0; 3],
        status: vec![0; 3],
        stack: vec![1; 3],
        task_stack: vec![0; 3],
        flags: vec![1, 0, 1],
        ..Default::default()
    };
    let good = encode_sample_chunk(&chunk).unwrap();
    let flags_at = good.len() - 6; // length 3, then 3 bytes; then the empty interpreter and span columns
    assert_eq!(&good[flags_at..], &[3, 1, 0, 1, 0, 0]);
    for (what, column) in [("short", &[2u8, 1, 0][..]), ("long", &[4, 1, 0, 1, 1][..]), ("one of three", &[1, 1][..])] {
        let mut bad = good[..flags_at].to_vec();
        bad.extend_from_slice(column);
        bad.extend_from_slice(&[0, 0]);
        let mut bytes = head.clone();
        let at = bytes.len();
        bytes.extend_from_slice(&raw_chunk(Kind::Samples as u16, &bad));
        let mut r = Reader::new(&bytes[..]).unwrap();
        let msg = scan(&mut r, &mut Tables::default(), |_, _| {}).expect_err(what).to_string();
        assert!(
            msg.contains("sample column length differs") && msg.contains(&format!("at byte {at}")),
            "{what}: {msg}"
        );
    }
}

/// Every cut of a 1.6 file reads its complete chunks or fails cleanly, and every flipped byte is caught.
#[test]
fn gc_files_cut_or_damaged_anywhere_read_safely() {
    let (bytes, samples, _) = write_gc(60, 16);
    let ends = chunk_ends(&bytes);
    for cut in ends[1]..bytes.len() {
        let (got, _, notes) = read_gc(&bytes[..cut], Columns::ALL).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(samples.starts_with(&got), "cut at {cut}");
        assert!(!notes.warnings.is_empty(), "cut at {cut}");
    }
    for pos in 16..bytes.len() {
        let mut bad = bytes.clone();
        bad[pos] ^= 0x10;
        assert!(read_gc(&bad, Columns::ALL).is_err(), "flip at {pos} went unnoticed");
    }
}

/// The synthetic garbage collection recording as 1.6 wrote it (testdata/recordings/gc-1.6.pyp, kept): 40 of 105
/// samples and one of three off-CPU intervals in the collector, as report/tests/support/synth.rs documents them.
#[test]
fn the_kept_1_6_recording_reads_with_its_gc_flags() {
    let bytes = recording("gc-1.6.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 6, 0], "format 1.6");
    let (samples, intervals, notes) = read_gc(&bytes, Columns::ALL).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(samples.len(), 105);
    let gc: Vec<&(u8, Vec<Symbol>)> = samples.iter().filter(|(f, _)| *f == sample_flags::GC).collect();
    assert_eq!(gc.len(), 40);
    assert!(samples.iter().all(|(f, _)| *f == 0 || *f == sample_flags::GC));
    assert_eq!(gc.iter().filter(|(_, stack)| stack.is_empty()).count(), 5, "the collector run from C");
    let last = |stack: &[Symbol]| stack.last().map(|s| s.name.clone()).unwrap_or_default();
    assert_eq!(gc.iter().filter(|(_, stack)| last(stack) == "build_cycles").count(), 20);
    assert_eq!(gc.iter().filter(|(_, stack)| last(stack) == "compress").count(), 5);
    assert_eq!(intervals.len(), 3);
    assert_eq!(intervals.iter().filter(|f| *f & off_cpu_flags::GC != 0).count(), 1);
}

// ---- source files (1.7) --------------------------------------------------------------------------------------------

/// Every source file record of a recording, in file order, and the tables and notes.
fn read_sources(bytes: &[u8]) -> Result<(Tables, Vec<SourceFile>, ScanNotes), Error> {
    let mut r = Reader::new(bytes)?;
    let mut t = Tables::default();
    let mut files = Vec::new();
    let notes = scan_records(&mut r, &mut t, |_, rec| {
        if let Record::Sources(f) = rec {
            files.extend(f.iter().cloned());
        }
    })?;
    Ok((t, files, notes))
}

/// A small recording with source files written between its samples: `files` after the first flush.
fn write_sources(files: &[SourceFile]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    w.add_process(&process(100)).unwrap();
    let s = w.intern_symbol(&sym("", "work", 3));
    let leaf = w.intern_stack(&[s]);
    let sample = |time_ns| SampleRecord {
        time_ns,
        cpu: 0,
        pid: 100,
        tid: 100,
        comm: "python3",
        thread_state: ThreadStateMatch::Match,
        gil: GilState::ThisThread,
        pthread_id: PthreadIdMatch::Match,
        status: StackStatus::Complete,
        stack: leaf,
        task_stack: 0,
        flags: 0,
        interp: 0,
        link: 0,
    };
    w.push_sample(&sample(1)).unwrap();
    w.flush().unwrap();
    w.add_sources(files).unwrap();
    w.push_sample(&sample(2)).unwrap();
    w.finish(&stats(2)).unwrap()
}

/// Source files round trip with their hashes (SHA-256, as `sha256sum` prints it), files not stored keep why, and
/// the tables list each path once (the first record).
#[test]
fn source_files_round_trip_with_their_sha256() {
    assert_eq!(hex(&sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let files = vec![
        SourceFile::stored("/srv/app/wörk.py", b"def work():\n    return 1\n".to_vec()),
        SourceFile::stored("rel/empty.py", Vec::new()),
        SourceFile::stored("/bin/odd.py", (0..=255u8).collect()),
        SourceFile::missing("/srv/app/big.py", "larger than 4 MiB"),
        SourceFile::stored("/srv/app/wörk.py", b"a later, different copy\n".to_vec()),
    ];
    let bytes = write_sources(&files);
    let (t, got, notes) = read_sources(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got, files);
    assert_eq!(t.sources().len(), 4);
    let work = &t.sources()["/srv/app/wörk.py"];
    assert_eq!(work.content, b"def work():\n    return 1\n", "the first record of a path");
    assert_eq!(work.sha256_hex(), hex(&sha256(b"def work():\n    return 1\n")));
    assert!(work.is_stored() && work.sha256.len() == 32);
    assert_eq!(t.sources()["rel/empty.py"].sha256_hex(), hex(&sha256(b"")));
    let big = &t.sources()["/srv/app/big.py"];
    assert!(!big.is_stored() && big.sha256.is_empty() && big.content.is_empty() && big.error == "larger than 4 MiB");
    // Merged tables keep every recording's files, the first of a path.
    let mut merged = Tables::default();
    let mut merger = Merger::default();
    let (other, _, _) = read_sources(&write_sources(&[SourceFile::stored("/x.py", b"x = 1\n".to_vec())])).unwrap();
    merged.append(&mut merger, &t, 0);
    merged.append(&mut merger, &other, 0);
    assert_eq!(merged.sources().len(), 5);
    assert_eq!(merged.sources()["/srv/app/wörk.py"], *work);
}

/// A file whose content compresses thousands of times is stored uncompressed: the recording stays within every
/// reader's ratio budget (as a zstd chunk it would be refused as a decompression bomb), and ordinary files are
/// compressed.
#[test]
fn very_compressible_sources_are_stored_uncompressed_and_read() {
    let zeros = SourceFile::stored("/srv/zeros.py", vec![0u8; 4 << 20]);
    let text: Vec<u8> = (0..2000).flat_map(|i| format!("x{i} = {}\n", i * 7919 % 1000).into_bytes()).collect();
    let plain = SourceFile::stored("/srv/plain.py", text);
    let bytes = write_sources(&[zeros.clone(), plain.clone()]);
    let (_, got, notes) = read_sources(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got, vec![zeros, plain]);
    let mut flags = Vec::new();
    for w in chunk_ends(&bytes).windows(2) {
        if u16::from_le_bytes([bytes[w[0]], bytes[w[0] + 1]]) == Kind::Sources as u16 {
            flags.push(u16::from_le_bytes([bytes[w[0] + 2], bytes[w[0] + 3]]));
        }
    }
    assert_eq!(flags, vec![0, FLAG_ZSTD], "zeros stored as they are, text compressed");
    // As zstd, the zeros' chunk right after the header is refused: what the cap is for.
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let bomb = SourceChunk::from_files(&[SourceFile::stored("/srv/zeros.py", vec![0u8; 4 << 20])]);
    let raw = postcard::to_stdvec(&bomb).unwrap();
    w.flush().unwrap();
    let mut bytes = w.finish(&stats(0)).unwrap();
    let cut = chunk_ends(&bytes)[1];
    bytes.truncate(cut);
    let stored = zstd::bulk::compress(&raw, 3).unwrap();
    bytes.extend_from_slice(&chunk_header(Kind::Sources as u16, FLAG_ZSTD, &stored, raw.len() as u32));
    bytes.extend_from_slice(&stored);
    let msg = read_sources(&bytes).expect_err("a bomb").to_string();
    assert!(msg.contains("implausible compression ratio"), "{msg}");
}

/// Damaged source chunks are errors naming the chunk: columns of different lengths, a hash that is not 32 bytes, a
/// stored file without a hash, a missing one with content.
#[test]
fn damaged_source_chunks_are_refused() {
    let good = SourceChunk::from_files(&[SourceFile::stored("/a.py", b"a\n".to_vec())]);
    let mut short_hash = good.clone();
    short_hash.sha256[0].pop();
    let mut no_error_column = good.clone();
    no_error_column.error.clear();
    let mut no_hash = good.clone();
    no_hash.sha256[0].clear();
    let mut missing_with_content = good.clone();
    missing_with_content.sha256[0].clear();
    missing_with_content.error[0] = "gone".into();
    let head = write(3, 3).bytes;
    let head = head[..chunk_ends(&head)[1]].to_vec();
    for (what, chunk) in [
        ("short hash", short_hash),
        ("columns", no_error_column),
        ("stored without hash", no_hash),
        ("missing with content", missing_with_content),
    ] {
        let mut bytes = head.clone();
        let at = bytes.len();
        bytes.extend_from_slice(&raw_chunk(Kind::Sources as u16, &postcard::to_stdvec(&chunk).unwrap()));
        let msg = read_sources(&bytes).expect_err(what).to_string();
        assert!(msg.contains("source chunk") && msg.contains(&format!("at byte {at}")), "{what}: {msg}");
    }
    let mut bytes = head.clone();
    bytes.extend_from_slice(&raw_chunk(Kind::Sources as u16, &postcard::to_stdvec(&good).unwrap()));
    assert_eq!(read_sources(&bytes).unwrap().1.len(), 1);
}

/// What a reader of 1.6 or before does with a 1.7 file: kind 13 is unknown to it, skipped with a warning, the
/// samples read as they are (relabelled to a kind this reader does not know either, which takes the same path).
#[test]
fn source_chunks_are_skipped_as_unknown_by_older_readers() {
    let bytes =
        write_sources(&[SourceFile::stored("/a.py", b"a = 1\n".to_vec()), SourceFile::missing("/b.py", "gone")]);
    let (_, _, all, _) = read(&bytes).unwrap();
    let mut old = bytes.clone();
    let mut relabelled = 0;
    for w in chunk_ends(&bytes).windows(2) {
        let at = w[0];
        if u16::from_le_bytes([old[at], old[at + 1]]) == Kind::Sources as u16 {
            old[at..at + 2].copy_from_slice(&999u16.to_le_bytes());
            let crc = crc32fast::hash(&old[at..at + 16]);
            old[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
            relabelled += 1;
        }
    }
    assert_eq!(relabelled, 2);
    let (_, t, samples, notes) = read(&old).unwrap();
    assert_eq!(samples, all);
    assert!(t.sources().is_empty());
    assert_eq!(notes.warnings, vec!["skipped 2 chunks of a kind this pyperf does not know (newer minor version)"]);
}

/// The synthetic recording with source files as 1.7 wrote it (testdata/recordings/source-1.7.pyp, kept; made by
/// report/tests/support/synth.rs): `hot.py` stored (its SHA-256 checked against its bytes and against the value
/// `sha256sum` printed for them), `lib.py` listed as not readable, 106 samples.
#[test]
fn the_kept_1_7_recording_reads_with_its_sources() {
    let bytes = recording("source-1.7.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 7, 0], "format 1.7");
    let (t, files, notes) = read_sources(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(files.len(), 2);
    let hot = &t.sources()["/srv/app/hot.py"];
    assert!(hot.is_stored());
    assert_eq!(hot.sha256, sha256(&hot.content).to_vec());
    assert_eq!(hot.sha256_hex(), "66513e010772b85e31b01e9d046fc490d80c048d96ef4c27b2a07dcbc84e0201");
    let text = String::from_utf8(hot.content.clone()).unwrap();
    assert_eq!(text.lines().nth(5), Some("        total += i * i"), "line 6");
    assert_eq!(text.lines().count(), 20);
    let lib = &t.sources()["/srv/app/lib.py"];
    assert!(!lib.is_stored() && lib.error.starts_with("not readable by the process"));
    let (_, _, samples, _) = read(&bytes).unwrap();
    assert_eq!(samples.len(), 106);
}

/// The synthetic subinterpreter recording as 1.8 wrote it (testdata/recordings/interp-1.8.pyp, kept; made by
/// report/tests/support/synth.rs): 108 samples, 65 in interpreter 0, 40 in interpreter 1 with their stack stitched
/// (`[interpreter 1]` between the thread's main-interpreter frames and the subinterpreter's), 3 in interpreter 2's
/// start-up (the boundary at the leaf).
#[test]
fn the_kept_1_8_recording_reads_with_its_interpreters() {
    let bytes = recording("interp-1.8.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 8, 0], "format 1.8");
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut tables = Tables::default();
    let mut got: Vec<(u32, Vec<Symbol>)> = Vec::new();
    let notes = scan(&mut r, &mut tables, |t, c| {
        assert_eq!(c.interp.len(), c.len(), "a decoded column is len long");
        got.extend(samples(c).map(|s| (s.interp, root_first(t, s.stack))));
    })
    .unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    assert_eq!(got.len(), 108);
    let count = |id: u32| got.iter().filter(|(i, _)| *i == id).count();
    assert_eq!((count(0), count(1), count(2)), (65, 40, 3));
    let names = |stack: &[Symbol]| stack.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(";");
    let kind = |stack: &[Symbol], name: &str| stack.iter().find(|s| s.name == name).map(|s| s.kind());
    for (interp, stack) in &got {
        match interp {
            0 => assert!(stack.iter().all(|s| s.kind() == FrameKind::Python), "{}", names(stack)),
            1 => {
                assert_eq!(names(stack), "_bootstrap;runner;exec;[interpreter 1];<module>;work");
                assert_eq!(kind(stack, "[interpreter 1]"), Some(FrameKind::Interpreter));
            }
            _ => assert_eq!(names(stack), "<module>;main;create;[interpreter 2]"),
        }
    }
    // Skipping the column reads every sample as interpreter 0.
    let mut r = Reader::new(&bytes[..]).unwrap();
    r.set_columns(Columns { interp: false, ..Columns::ALL });
    let mut seen = 0;
    scan(&mut r, &mut Tables::default(), |_, c| {
        assert!(c.interp.is_empty());
        seen += samples(c).filter(|s| s.interp == 0).count();
    })
    .unwrap();
    assert_eq!(seen, 108);
}

/// Files before 1.8 have no interpreter column: every sample reads interpreter 0; a 1.8 chunk is a 1.6 one with the
/// column appended (what a 1.6 reader decodes is intact), and ids round-trip (several chunks, ids past one byte).
#[test]
fn interpreter_ids_round_trip_and_older_files_read_0() {
    for name in ["gc-1.6.pyp", "tasks-1.5.pyp", "mixed-1.4.pyp", "offcpu-1.3.pyp", "mixed-1.0.pyp"] {
        let bytes = recording(name);
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut n = 0;
        scan(&mut r, &mut Tables::default(), |_, c| {
            assert!(c.interp.is_empty(), "{name}: no column before 1.8");
            assert!(samples(c).all(|s| s.interp == 0), "{name}");
            n += c.len();
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(n > 0, "{name}");
    }
    let chunk = SampleChunk {
        time_delta_ns: vec![0, 5],
        cpu: vec![0, 1],
        pid: vec![1, 1],
        tid: vec![1, 2],
        comm: vec![0, 0],
        comms: vec!["x".into()],
        thread_state: vec![0, 0],
        gil: vec![0, 0],
        pthread_id: vec![0, 0],
        status: vec![0, 0],
        stack: vec![1, 1],
        task_stack: vec![0, 0],
        flags: vec![0, 0],
        interp: vec![0, 300],
        ..Default::default()
    };
    let v18 = encode_sample_chunk(&chunk).unwrap();
    let v16 = encode_sample_chunk(&SampleChunk { interp: Vec::new(), ..chunk.clone() }).unwrap();
    // Its interpreter column and the span column (1.10) after it: empty.
    let v16 = &v16[..v16.len() - 2];
    assert_eq!(&v18[..v16.len()], v16);
    assert_eq!(&v18[v16.len()..], &[3, 0, 0xac, 0x02, 0]);

    // Written by the writer, over more than one chunk.
    let n = SAMPLES_PER_CHUNK as u32 + 10;
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let f = w.intern_symbol(&Symbol { scope: String::new(), name: "f".into(), file: "a.py".into(), line: 1, flags: 0 });
    let stack = w.intern_stack(&[f]);
    for i in 0..n {
        w.push_sample(&SampleRecord {
            time_ns: u64::from(i),
            cpu: 0,
            pid: 1,
            tid: 1,
            comm: "t",
            thread_state: ThreadStateMatch::from_u8(0),
            gil: GilState::NoInfo,
            pthread_id: PthreadIdMatch::from_u8(0),
            status: StackStatus::Complete,
            stack,
            task_stack: 0,
            flags: 0,
            interp: i % 3 * 1000,
            link: 0,
        })
        .unwrap();
    }
    let bytes = w.finish(&Stats::default()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut ids = Vec::new();
    scan(&mut r, &mut Tables::default(), |_, c| ids.extend(samples(c).map(|s| s.interp))).unwrap();
    assert_eq!(ids, (0..n).map(|i| i % 3 * 1000).collect::<Vec<_>>());
}

/// Off-CPU intervals carry their interpreter id from 1.9 on: the kept 1.9 recording (testdata/recordings/
/// interp-1.9.pyp, made by report/tests/support/synth.rs) reads the runner's wait in interpreter 1 and the main
/// thread's in 0; files before 1.9 read every interval as interpreter 0; a chunk whose intervals are all the main
/// interpreter's has an empty column (what a 1.8 reader decodes is intact), and one of another length is damage.
#[test]
fn off_cpu_interpreter_ids_from_1_9_and_older_files_read_0() {
    let bytes = recording("interp-1.9.pyp");
    assert_eq!(&bytes[8..12], &[1, 0, 9, 0], "format 1.9");
    let (_, _, got, notes) = read_off_cpu(&bytes).unwrap();
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
    let ids: Vec<(u32, u32)> = got.iter().map(|(iv, _)| (iv.tid, iv.interp)).collect();
    assert_eq!(ids, vec![(801, 1), (800, 0)]);
    for name in ["offcpu-1.3.pyp", "offcpu-1.4.pyp", "tasks-1.5.pyp", "gc-1.6.pyp"] {
        let (_, _, got, _) = read_off_cpu(&recording(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!got.is_empty(), "{name} has intervals");
        assert!(got.iter().all(|(iv, _)| iv.interp == 0), "{name}: no interpreter before 1.9");
    }
    let mains: Vec<OffCpuInterval> = (0..3).map(|i| OffCpuInterval { interp: 0, ..interval(i, &[1]) }).collect();
    let all_main = OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &mains);
    assert!(all_main.interp.is_empty(), "no column when every interval is the main interpreter's");
    let v19 = postcard::to_stdvec(&all_main).unwrap();
    let mut subs = mains.clone();
    subs[1].interp = 300;
    let with = OffCpuChunk::from_intervals(OFF_CPU_MIN_NS, &subs);
    assert_eq!(with.interp, vec![0, 300, 0]);
    let v19_subs = postcard::to_stdvec(&with).unwrap();
    // Both are the 1.8 chunk with the column appended: an empty one (a zero byte), or three LEB128 ids.
    // (And the span column of 1.10 after it, empty.)
    let v18 = &v19[..v19.len() - 2];
    assert_eq!(&v19_subs[..v18.len()], v18);
    assert_eq!(&v19_subs[v18.len()..], &[3, 0, 0xac, 0x02, 0, 0]);
    let w = write(3, 0);
    let ends = chunk_ends(&w.bytes);
    let head = &w.bytes[..ends[ends.len() - 3]];
    for (payload, want) in [(v18, [0, 0, 0]), (&v19[..], [0, 0, 0]), (&v19_subs[..], [0, 300, 0])] {
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&raw_chunk(Kind::OffCpu as u16, payload));
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut seen = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            if let Record::OffCpu { intervals, .. } = rec {
                seen.extend(intervals.iter().map(|iv| iv.interp));
            }
        }
        assert_eq!(seen, want);
    }
    let mut bad = v18.to_vec();
    bad.extend_from_slice(&[2, 1, 1]);
    let mut bytes = head.to_vec();
    bytes.extend_from_slice(&raw_chunk(Kind::OffCpu as u16, &bad));
    let mut r = Reader::new(&bytes[..]).unwrap();
    let err = loop {
        match r.next_record() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a column of 2 ids for 3 intervals read without error"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("off-CPU chunk columns differ in length"), "{err}");
}

/// Format 1.10: spans are written before the samples and intervals that name them, numbered from 1 in file order,
/// and read back as the same ids; a sample naming a span not yet defined is an error; a 1.9 chunk (no span
/// column) reads span 0.
#[test]
fn spans_are_numbered_in_file_order_and_checked() {
    let mut w = Writer::new(Vec::new(), &header()).unwrap();
    let f = w.intern_symbol(&Symbol { scope: String::new(), name: "f".into(), file: "a.py".into(), line: 1, flags: 0 });
    let stack = w.intern_stack(&[f]);
    let spans = [
        SpanLink { trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736, span_id: 0x00f067aa0ba902b7 },
        SpanLink { trace_id: u128::MAX, span_id: 1 },
    ];
    w.start_off_cpu(OFF_CPU_MIN_NS).unwrap();
    let n = SAMPLES_PER_CHUNK as u64 + 5;
    for i in 0..n {
        // Every third sample in no span; the others in one of the two.
        let link = if i % 3 == 0 { 0 } else { w.intern_link(spans[(i % 2) as usize]) };
        assert_eq!(w.intern_link(spans[0]), 1, "the first span interned is 1");
        w.push_sample(&SampleRecord {
            time_ns: i,
            cpu: 0,
            pid: 1,
            tid: 1,
            comm: "t",
            thread_state: ThreadStateMatch::from_u8(0),
            gil: GilState::NoInfo,
            pthread_id: PthreadIdMatch::from_u8(0),
            status: StackStatus::Complete,
            stack,
            task_stack: 0,
            flags: 0,
            interp: 0,
            link,
        })
        .unwrap();
    }
    let link = w.intern_link(spans[1]);
    w.push_off_cpu(&OffCpuInterval { link, ..interval(1, &[stack]) }).unwrap();
    let bytes = w.finish(&Stats::default()).unwrap();
    let mut r = Reader::new(&bytes[..]).unwrap();
    let mut t = Tables::default();
    let mut got = Vec::new();
    let mut ivs = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        t.apply(&rec, 0).unwrap();
        match &rec {
            Record::Samples(c) => got.extend(samples(c).map(|s| t.link(s.link).copied())),
            Record::OffCpu { intervals, .. } => ivs.extend(intervals.iter().map(|iv| t.link(iv.link).copied())),
            _ => {}
        }
    }
    assert_eq!(t.links, spans);
    assert_eq!(got.len() as u64, n);
    for (i, g) in got.iter().enumerate() {
        let want = if i % 3 == 0 { None } else { Some(spans[i % 2]) };
        assert_eq!(*g, want, "sample {i}");
    }
    assert_eq!(ivs, [Some(spans[1])]);
    assert_eq!(spans[0].trace_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(spans[0].span_hex(), "00f067aa0ba902b7");

    // A sample naming span 3 of 2: refused, naming it.
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
        stack: vec![1],
        link: vec![3],
        ..Default::default()
    };
    let ends = chunk_ends(&bytes);
    let mut bad = bytes[..ends[ends.len() - 2]].to_vec();
    bad.extend_from_slice(&raw_chunk(Kind::Samples as u16, &encode_sample_chunk(&chunk).unwrap()));
    let mut r = Reader::new(&bad[..]).unwrap();
    let mut t = Tables::default();
    let err = loop {
        match r.next_record() {
            Ok(Some(rec)) => {
                if let Err(e) = t.apply(&rec, 0) {
                    break e.to_string();
                }
            }
            Ok(None) => panic!("accepted"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(err.contains("sample names span 3, of 2 defined"), "{err}");
    // The same chunk without its span column (a 1.9 chunk): span 0.
    let v19 = encode_sample_chunk(&SampleChunk { link: Vec::new(), ..chunk }).unwrap();
    let v19 = &v19[..v19.len() - 1];
    let mut c = SampleChunk::default();
    let mut ok = bytes[..ends[ends.len() - 2]].to_vec();
    ok.extend_from_slice(&raw_chunk(Kind::Samples as u16, v19));
    let mut r = Reader::new(&ok[..]).unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Samples(s) = rec {
            c = s;
        }
    }
    assert!(c.link.is_empty() && samples(&c).all(|s| s.link == 0));
}
