//! Shared by the fuzz target (fuzz/fuzz_targets/reader.rs) and the 1 KiB-file test of tests/faults.rs, which
//! both include this file with `#[path]`: one memory bound, one way of counting heap bytes, one list of what
//! `pyperf report` does with a file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pyperf_report::{write_report, Filter, Format, LoadOptions, Mode, Profile, ReportArgs, ShowFrames};

pub const MIB: usize = 1 << 20;

/// Most that reading `len` input bytes may hold at once: 64 MiB for a file of at most 1 KiB (issue 7), and
/// 64 KiB per input byte for larger ones.
pub fn memory_bound(len: usize) -> usize {
    (64 * MIB).max(len.saturating_mul(64 << 10))
}

/// Counts the heap bytes live on the current thread and their peak (install it with `#[global_allocator]`). Per
/// thread, so that other tests of the same binary, running at the same time, do not count. Works without a
/// sanitizer (libFuzzer's -malloc_limit_mb needs one).
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // try_with: the allocator also runs while thread-locals are being torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` (a layout of non-zero size) is the one System needs.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`: the caller's layout has a non-zero size.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller got `ptr` from this allocator with `layout`, so from System (every allocation of
        // this type is System's).
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is System's, allocated with `layout`, and `new_size` is non-zero and fits `layout`'s
        // alignment: the caller's contract for `realloc`, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Peak heap bytes held by this thread while `f` runs, above what it held before (with [`Counting`] installed).
pub fn peak_bytes(f: impl FnOnce()) -> usize {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    f();
    (PEAK.with(Cell::get) - base).max(0) as usize
}

/// Output an exporter may write per report before [`report_all_formats`] refuses more. Some outputs are, by
/// nature, far larger than the file (folded stacks of a chain sampled at every depth: the sum of the depths, 4.6 GB
/// for a 40 KB file); writing them all would only take time. What an exporter holds is built before it writes that
/// much, so the memory bound still sees it.
pub const OUTPUT_CAP: u64 = 4 << 20;

/// A sink that refuses to take more than [`OUTPUT_CAP`] bytes.
struct Capped(u64);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0 >= OUTPUT_CAP {
            return Err(std::io::Error::other("output cap reached"));
        }
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything `pyperf report` can do with a file, in every mode: loaded with everything (timelines included) and with the least
/// (stack counts only), each written in every output format of the report crate (`Format::ALL`, so a new
/// exporter is fuzzed without a change here) and as folded stacks without lines (and with process and thread
/// roots when loaded per thread), each output up to [`OUTPUT_CAP`]. A file with native or kernel frames (format 1.4)
/// is also reported with frames left out (`--no-native --no-kernel`) and with glue shown (`--show-glue`), one with
/// asyncio task stacks (format 1.5) in the thread view (`--no-async`) and with exact task names. An
/// exporter may refuse with an error (a clear error for the user, e.g. a flame graph of no samples); it must not
/// panic.
pub fn report_all_formats(bytes: &[u8]) {
    // Frames left out and glue shown only for a file that has such frames (the first load tells).
    let mut frame_options = vec![ShowFrames::default()];
    // Every mode (CPU samples, off-CPU intervals, wall-clock time): a mode a file cannot give is an error.
    for mode in Mode::ALL {
        let mut k = 0;
        'frames: while k < frame_options.len() {
            for mut options in [LoadOptions::new(Filter::default(), true), LoadOptions::stacks_only(Filter::default())]
            {
                options.mode = mode;
                options.frames = frame_options[k];
                let Ok(profile) = Profile::load(bytes, &options) else { break 'frames };
                let has = profile.recorded_frames;
                if frame_options.len() == 1 && (has.native || has.glue || has.marker || has.kernel) {
                    frame_options.push(ShowFrames { native: false, kernel: false, glue: true });
                    frame_options.push(ShowFrames { native: true, kernel: true, glue: true });
                }
                if has.task && k == 0 {
                    // An asyncio file (format 1.5): also the thread view and the exact task names.
                    for (task_view, exact_task_names) in [(false, false), (true, true)] {
                        let mut o = options.clone();
                        (o.task_view, o.exact_task_names) = (task_view, exact_task_names);
                        if let Ok(p) = Profile::load(bytes, &o) {
                            for args in Format::ALL.map(|f| ReportArgs { mode, ..ReportArgs::with_format(f) }) {
                                let _ = write_report(&args, &p, Capped(0));
                            }
                        }
                    }
                }
                let roots = ReportArgs {
                    no_lines: true,
                    pid_root: options.per_thread,
                    tid_root: options.per_thread,
                    mode,
                    ..ReportArgs::with_format(Format::Folded)
                };
                let all = Format::ALL.map(|f| ReportArgs { mode, ..ReportArgs::with_format(f) });
                for args in all.into_iter().chain([roots]) {
                    let _ = write_report(&args, &profile, Capped(0));
                }
                // `pyperf annotate` of the top functions, text and HTML, from the recording's sources only.
                for html in [false, true] {
                    let mut o = pyperf_report::annotate::Options::default();
                    o.top = 5;
                    o.html = html;
                    o.local = false;
                    if let Ok(a) = pyperf_report::annotate::annotate(&profile, &o) {
                        let _ = pyperf_report::annotate::write(&a, &o, Capped(0));
                    }
                }
            }
            k += 1;
        }
    }
}
