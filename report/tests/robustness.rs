//! Damaged input never panics the report: every cut-off point, every flipped byte, and payload damage that the
//! checksums cannot see (re-checksummed) either reports with a warning or fails with a one-line error.

#[path = "support/synth.rs"]
mod synth;

use pyperf_report::{folded, write_report, Filter, Format, LoadOptions, Mode, Profile, ReportArgs, ShowFrames};

/// Loads `bytes` with everything (threads, states, timelines) and writes it in every output format of the
/// report crate (`Format::ALL`, the flame graph only when `svg`: it is slower), then as folded stacks without
/// lines and with process and thread roots. Ok(warnings) or Err(message); an exporter's error is a failure.
fn report(bytes: &[u8], svg: bool) -> Result<Vec<String>, String> {
    let profile = Profile::load(bytes, &LoadOptions::new(Filter::default(), true)).map_err(|e| e.to_string())?;
    write_all(&profile, svg);
    // A recording with off-CPU data also in the off-CPU and wall-clock views.
    if profile.off_cpu_min_ns().is_some() {
        for mode in [Mode::OffCpu, Mode::Wall] {
            let mut options = LoadOptions::new(Filter::default(), true);
            options.mode = mode;
            write_all(&Profile::load(bytes, &options).expect("loads as in cpu mode"), svg);
        }
    }
    // A recording with native or kernel frames also with them left out (every one, and kernel only) and with glue.
    let has = profile.recorded_frames;
    if has.native || has.glue || has.marker || has.kernel {
        for frames in [
            ShowFrames { native: false, kernel: false, glue: true },
            ShowFrames { native: true, kernel: false, glue: true },
        ] {
            let mut options = LoadOptions::new(Filter::default(), true);
            options.frames = frames;
            write_all(&Profile::load(bytes, &options).expect("loads as with every frame"), svg);
        }
    }
    Ok(profile.warnings)
}

/// Writes `profile` in every output format, and as folded stacks without lines, with process and thread roots.
fn write_all(profile: &Profile, svg: bool) {
    let roots =
        ReportArgs { no_lines: true, pid_root: true, tid_root: true, ..ReportArgs::with_format(Format::Folded) };
    for args in Format::ALL.map(ReportArgs::with_format).into_iter().chain([roots]) {
        // The flame graph refuses a profile without samples (nothing to draw).
        if args.output_format() == Format::Flamegraph && !(svg && profile.total() > 0) {
            continue;
        }
        write_report(&args, profile, std::io::sink()).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    // `pyperf annotate` of the top functions, text and HTML (the recording's sources only: no local file is read).
    for html in [false, true] {
        let mut options = pyperf_report::annotate::Options::default();
        options.top = 5;
        options.html = html;
        options.local = false;
        // An error is one line for the user (no sample, no Python function); never a panic.
        if let Ok(a) = pyperf_report::annotate::annotate(profile, &options) {
            pyperf_report::annotate::write(&a, &options, std::io::sink()).expect("annotate writes");
        }
    }
}

fn check_error(what: &str, message: &str) {
    assert!(!message.is_empty(), "{what}: empty error message");
    assert!(!message.contains('\n'), "{what}: error message on several lines: {message}");
}

#[test]
fn every_truncation_point_reports_or_fails_clearly() {
    for name in ["mixed", "killed", "newer-minor", "offcpu", "native", "gc", "source"] {
        let full = synth::recording(name);
        let mut reported = 0;
        for n in 0..full.len() {
            let what = format!("{name} cut to {n} bytes");
            match report(&full[..n], n % 97 == 0) {
                Ok(warnings) => {
                    assert!(!warnings.is_empty(), "{what}: reported without a warning");
                    reported += 1;
                }
                Err(message) => check_error(&what, &message),
            }
        }
        // Everything after the header chunk reports.
        let header_end = synth::chunks(&full)[0].0 + synth::chunks(&full)[0].1;
        assert_eq!(reported, full.len() - header_end, "{name}: some cut after the header failed");
        assert!(report(&full, true).is_ok());
    }
}

#[test]
fn every_flipped_byte_reports_with_warnings_or_fails_clearly() {
    let full = synth::recording("mixed");
    let clean = report(&full, false).expect("clean file");
    assert!(clean.is_empty(), "clean file has warnings: {clean:?}");
    for p in 0..full.len() {
        // Every byte inverted; a single bit too at every fifth.
        let masks: &[u8] = if p % 5 == 0 { &[0xff, 0x01] } else { &[0xff] };
        for &mask in masks {
            let mut bytes = full.clone();
            bytes[p] ^= mask;
            let what = format!("byte {p} ^ {mask:#x}");
            match report(&bytes, p % 89 == 0) {
                Ok(warnings) => {
                    // Bytes 12..16 of the preamble are reserved and ignored by readers (FORMAT.md). A minor version
                    // (bytes 10..12) flipped to an older one is read as that: a reader accepts any minor, and only a
                    // newer one is worth a warning.
                    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
                    let older_minor = (10..12).contains(&p) && minor < pyperf_format::MINOR;
                    assert!(
                        !warnings.is_empty() || (12..16).contains(&p) || older_minor,
                        "{what}: reported without a warning"
                    );
                }
                Err(message) => check_error(&what, &message),
            }
        }
    }
}

/// Damage the checksums cannot catch (a buggy writer, or a matching CRC): change decoded payload bytes and
/// write the chunk back with valid checksums.
#[test]
fn payload_damage_behind_valid_checksums_never_panics() {
    let head = pyperf_format::CHUNK_HEADER_LEN;
    let mut runs = 0;
    for name in ["mixed", "offcpu", "native", "gc", "source"] {
        let full = synth::recording(name);
        let list = synth::chunks(&full);
        for &(at, len) in &list {
            let kind = u16::from_le_bytes([full[at], full[at + 1]]);
            let raw = zstd::bulk::decompress(&full[at + head..at + len], 1 << 24).expect("payload");
            // Every byte of small chunks, a spread of the large ones.
            let step = (raw.len() / 300).max(1);
            for p in (0..raw.len()).step_by(step) {
                for mask in [0xffu8, 0x01] {
                    let mut payload = raw.clone();
                    payload[p] ^= mask;
                    let mut bytes = full[..at].to_vec();
                    bytes.extend(synth::raw_chunk(kind, &payload));
                    bytes.extend_from_slice(&full[at + len..]);
                    let what = format!("chunk at {at} (kind {kind}), payload byte {p} ^ {mask:#x}");
                    match report(&bytes, runs % 101 == 0) {
                        Err(message) => check_error(&what, &message),
                        Ok(_) => {
                            // The fast path (no threads, dense counts) on the same damage.
                            let fast = Profile::load(&bytes[..], &LoadOptions::stacks_only(Filter::default()))
                                .expect("loads like the full path");
                            folded::write(&fast, &folded::Options::default(), std::io::sink()).expect("folded");
                        }
                    }
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 2000, "only {runs} damaged files tried");
}

#[test]
fn stack_leaves_out_of_order_and_huge_values_do_not_panic() {
    // A sample chunk whose times go backwards wildly and whose ids are extreme, written by the real writer.
    use pyperf_format::*;
    let header = Header {
        pyperf_version: "x".into(),
        hostname: String::new(),
        kernel_release: String::new(),
        arch: String::new(),
        start_time_unix_ns: u64::MAX,
        event: "cpu-clock".into(),
        rate: Rate::Frequency(0),
        command_line: vec![],
        workload: vec![],
    };
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    let s = w.intern_symbol(&Symbol {
        scope: String::new(),
        name: String::new(),
        file: String::new(),
        line: u32::MAX,
        flags: u32::MAX,
    });
    let leaf = w.intern_stack(&[s, s, s]);
    for (i, t) in [u64::MAX, 0, u64::MAX / 2, 5, u64::MAX].into_iter().enumerate() {
        w.push_sample(&SampleRecord {
            time_ns: t,
            cpu: u32::MAX,
            pid: u32::MAX,
            tid: i as u32,
            comm: "",
            thread_state: ThreadStateMatch::Unknown(255),
            gil: GilState::Unknown(255),
            pthread_id: PthreadIdMatch::Unknown(255),
            status: StackStatus::Unknown(255),
            stack: if i % 2 == 0 { leaf } else { 0 },
            task_stack: 0,
            flags: 0,
            interp: 0,
            link: 0,
        })
        .expect("sample");
    }
    let bytes = w.finish(&Stats { duration_ns: u64::MAX, ..Default::default() }).expect("finish");
    let warnings = report(&bytes, true).expect("reports");
    assert!(warnings.is_empty());
}
