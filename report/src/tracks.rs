//! The timelines of the timeline exports (speedscope, Firefox Profiler), kept out of memory.
//!
//! **Timeline.** Loaded with [`crate::LoadOptions::timeline`], a profile keeps every matching sample (and off-CPU
//! interval) as an [`Entry`] of 26 bytes in an unnamed temporary file ([`Timeline`]), not in memory: a 10 M-sample
//! recording costs 260 MB of temporary disk (the page cache's to keep or drop), and the report's memory does not
//! grow with the samples.
//!
//! **Tracks.** An export shows one track per thread for the [`MAX_TRACKS`] busiest threads, and one "other threads"
//! track for all the others together, so that a file naming a million thread ids makes a few hundred tracks, not
//! a million (each track costs its own tables in the output and in the writer). [`Tracks::new`] reads the timeline
//! once and writes each track's entries, in time order, to a second temporary file, in blocks; each pass of an
//! exporter over a track reads its blocks. Time order: entries are in file order, which CPUs make slightly out
//! of time order (a few hundred entries at most); each track is put in order through a window of [`WINDOW`]
//! entries, in which entries at the same time keep their file order. An entry that comes later still (only in a
//! crafted file) is drawn at the latest time drawn so far on its track. Memory: a count per thread, and per
//! track its window and a 16 KiB block buffer.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::{Arc, Mutex};

use crate::profile::Profile;

/// At most this many threads have a track of their own; the others are merged into one "other threads" track.
pub const MAX_TRACKS: usize = 256;

/// The name of the track of the merged threads.
pub const OTHER_THREADS: &str = "other threads";

/// How far out of time order an entry may come and still be put in its place (see the module documentation).
pub const WINDOW: usize = 1024;

/// Bytes of one entry in the temporary files.
const ENTRY: usize = 26;

/// Entries are written and read in blocks of this many bytes.
const BLOCK: usize = 16 * 1024 / ENTRY * ENTRY;

/// One sample or off-CPU interval of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// Sample time, or interval start, ns since the recording's start.
    pub time: u64,
    /// Index into [`Profile::timeline_stacks`].
    pub stack: u32,
    /// Its GIL state ([`pyperf_format::GilState`] as on disk): a sample's, an off-CPU interval's at its switch-in.
    pub gil: u8,
    /// `None` in [`crate::Mode::Cpu`] (every entry is a sample of one sampling period); else its weight in ns: a
    /// sample's sampling period, an interval's `weight_ns`.
    pub weight: Option<u64>,
    /// A stolen period (format 1.11, wall mode): the thread's time, but no CPU time.
    pub stolen: bool,
}

impl Entry {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.thread.to_le_bytes());
        out.extend_from_slice(&self.time.to_le_bytes());
        out.extend_from_slice(&self.stack.to_le_bytes());
        out.push(self.gil);
        out.push(u8::from(self.weight.is_some()) | u8::from(self.stolen) << 1);
        out.extend_from_slice(&self.weight.unwrap_or(0).to_le_bytes());
    }

    fn decode(b: &[u8]) -> Entry {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Entry {
            thread: u32_at(0),
            time: u64_at(4),
            stack: u32_at(12),
            gil: b[16],
            weight: (b[17] & 1 != 0).then(|| u64_at(18)),
            stolen: b[17] & 2 != 0,
        }
    }
}

/// A temporary file of entries, shared by the clones of a profile.
#[derive(Debug)]
struct Spill {
    file: Mutex<File>,
    /// Its length in bytes.
    len: u64,
}

impl Spill {
    /// Reads `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(buf)
    }
}

/// One recording's entries in a merged profile: its threads and stacks numbered from a base, its times shifted.
#[derive(Debug, Clone)]
struct Segment {
    spill: Arc<Spill>,
    thread_base: u32,
    shift: u64,
    stack_base: u32,
    /// Stacks renumbered after frames were left out (applied before `stack_base`).
    renumber: Option<Arc<Vec<u32>>>,
}

impl Segment {
    fn map(&self, mut e: Entry) -> Entry {
        if let Some(r) = &self.renumber {
            e.stack = r.get(e.stack as usize).copied().unwrap_or(e.stack);
        }
        e.thread = e.thread.saturating_add(self.thread_base);
        e.time = e.time.saturating_add(self.shift);
        e.stack = e.stack.saturating_add(self.stack_base);
        e
    }
}

/// Every thread's entries, in file order, in temporary files (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    segments: Vec<Segment>,
    /// While loading: the file being written and the entries not yet in it.
    writing: Option<Arc<Mutex<File>>>,
    buf: Vec<u8>,
    written: u64,
    /// Why the timeline could not be kept (no temporary file, disk full): reported by the export.
    error: Option<String>,
}

impl Timeline {
    /// Adds an entry (while loading).
    pub(crate) fn push(&mut self, e: Entry) {
        if self.error.is_some() {
            return;
        }
        e.encode(&mut self.buf);
        if self.buf.len() >= 1 << 16 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.buf.is_empty() || self.error.is_some() {
            return;
        }
        let result = match &self.writing {
            Some(f) => f.lock().unwrap_or_else(|e| e.into_inner()).write_all(&self.buf),
            None => tempfile::tempfile().and_then(|mut f| {
                f.write_all(&self.buf)?;
                self.writing = Some(Arc::new(Mutex::new(f)));
                Ok(())
            }),
        };
        match result {
            Ok(()) => self.written += self.buf.len() as u64,
            Err(e) => self.error = Some(format!("cannot keep the timeline in a temporary file: {e}")),
        }
        self.buf = Vec::new();
    }

    /// Ends loading: what was pushed becomes readable.
    pub(crate) fn finish(&mut self) {
        self.flush();
        if let Some(f) = self.writing.take() {
            let file = Arc::try_unwrap(f).map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
            match file {
                Ok(file) => {
                    let spill = Arc::new(Spill { file: Mutex::new(file), len: self.written });
                    self.segments.push(Segment { spill, thread_base: 0, shift: 0, stack_base: 0, renumber: None });
                }
                // Still shared: never silently a timeline without its entries.
                Err(_) => self.error = Some("the timeline's temporary file is still in use".to_string()),
            }
        }
        self.written = 0;
    }

    /// Stack `s` becomes `renumber[s]` (frames left out made stacks equal); before any [`Timeline::append`].
    pub(crate) fn renumber(&mut self, renumber: Vec<u32>) {
        let renumber = Arc::new(renumber);
        for s in &mut self.segments {
            s.renumber = Some(match &s.renumber {
                None => renumber.clone(),
                Some(old) => Arc::new(old.iter().map(|&x| renumber.get(x as usize).copied().unwrap_or(x)).collect()),
            });
        }
    }

    /// Appends `other`'s entries, its threads and stacks numbered from these bases, its times shifted.
    pub(crate) fn append(&mut self, other: Timeline, thread_base: u32, shift: u64, stack_base: u32) {
        if self.error.is_none() {
            self.error = other.error;
        }
        for s in other.segments {
            let renumber =
                s.renumber.map(|r| Arc::new(r.iter().map(|&x| x.saturating_add(s.stack_base)).collect::<Vec<u32>>()));
            self.segments.push(Segment {
                thread_base: s.thread_base.saturating_add(thread_base),
                shift: s.shift.saturating_add(shift),
                // A renumbered segment's base is in its map.
                stack_base: if renumber.is_some() { stack_base } else { s.stack_base.saturating_add(stack_base) },
                renumber,
                spill: s.spill,
            });
        }
    }

    /// The number of entries.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.spill.len / ENTRY as u64).sum()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every entry, in file order.
    pub fn for_each(&self, mut f: impl FnMut(Entry)) -> io::Result<()> {
        if let Some(e) = &self.error {
            return Err(io::Error::other(e.clone()));
        }
        let mut buf = vec![0u8; BLOCK];
        for s in &self.segments {
            let mut at = 0u64;
            while at < s.spill.len {
                let n = (s.spill.len - at).min(BLOCK as u64) as usize / ENTRY * ENTRY;
                if n == 0 {
                    break;
                }
                s.spill.read_at(at, &mut buf[..n])?;
                for b in buf[..n].chunks_exact(ENTRY) {
                    f(s.map(Entry::decode(b)));
                }
                at += n as u64;
            }
        }
        Ok(())
    }
}

/// Entries per thread (same index as [`Profile::threads`]); all zero without a timeline.
pub fn entries_per_thread(profile: &Profile) -> io::Result<Vec<u64>> {
    let mut counts = vec![0u64; profile.threads.len()];
    if let Some(tl) = &profile.timeline {
        tl.for_each(|e| {
            if let Some(c) = counts.get_mut(e.thread as usize) {
                *c += 1;
            }
        })?;
    }
    Ok(counts)
}

/// The warning a timeline export gives when it merges threads: `None` when every thread has its own track.
pub fn note(profile: &Profile) -> Option<String> {
    let with_entries = entries_per_thread(profile).ok()?.iter().filter(|&&n| n > 0).count();
    (with_entries > MAX_TRACKS).then(|| {
        format!(
            "{with_entries} threads have samples: the {MAX_TRACKS} busiest have a track each, the other {} share \
             one \"{OTHER_THREADS}\" track",
            with_entries - MAX_TRACKS
        )
    })
}

/// A track being written by [`Tracks::new`].
#[derive(Default)]
struct Building {
    /// The window: (time, file order, entry).
    window: BinaryHeap<Reverse<(u64, u64, Entry)>>,
    buf: Vec<u8>,
    last: u64,
    blocks: Vec<(u64, u32)>,
    len: u64,
}

impl Building {
    /// An entry leaves the window: in time order, never before the last one written.
    fn emit(&mut self, mut e: Entry, file: &mut File, written: &mut u64) -> io::Result<()> {
        e.time = e.time.max(self.last);
        self.last = e.time;
        e.encode(&mut self.buf);
        self.len += 1;
        if self.buf.len() + ENTRY > BLOCK {
            self.write_block(file, written)?;
        }
        Ok(())
    }

    /// Writes the buffer as one block.
    fn write_block(&mut self, file: &mut File, written: &mut u64) -> io::Result<()> {
        if !self.buf.is_empty() {
            file.write_all(&self.buf)?;
            self.blocks.push((*written, self.buf.len() as u32));
            *written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

/// A profile's timeline split into tracks, each in time order (see the module documentation).
pub struct Tracks {
    /// The threads (indices into [`Profile::threads`]) with a track of their own, busiest first: track `k` is
    /// `threads[k]`'s.
    pub threads: Vec<usize>,
    /// The threads merged into the last track, [`OTHER_THREADS`] (none: there is no such track).
    pub merged: Vec<usize>,
    file: Spill,
    /// Per track: its blocks (offset, bytes) in `file`, and its number of entries.
    blocks: Vec<Vec<(u64, u32)>>,
    lens: Vec<u64>,
    /// The first error met while reading a track (see [`Tracks::check`]).
    error: RefCell<Option<io::Error>>,
}

impl Tracks {
    /// The tracks of `profile`'s threads that have entries; `busy[t]` says how busy thread `t` is (ties: lowest pid,
    /// then tid; `None`: by entries). Errors: the profile was loaded without a timeline, or the temporary files failed.
    pub fn new(profile: &Profile, busy: Option<&[u64]>) -> io::Result<Tracks> {
        let Some(timeline) = &profile.timeline else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the recording was loaded without per-thread timelines (LoadOptions::timeline)",
            ));
        };
        let counts = entries_per_thread(profile)?;
        let busy = busy.unwrap_or(&counts);
        let mut candidates: Vec<usize> = (0..profile.threads.len()).filter(|&t| counts[t] > 0).collect();
        let key =
            |t: usize| (Reverse(busy.get(t).copied().unwrap_or(0)), profile.threads[t].pid, profile.threads[t].tid);
        candidates.sort_by_key(|&t| key(t));
        let merged = candidates.split_off(candidates.len().min(MAX_TRACKS));
        let threads = candidates;
        let tracks = threads.len() + usize::from(!merged.is_empty());
        let mut track_of = vec![u32::MAX; profile.threads.len()];
        for (k, &t) in threads.iter().enumerate() {
            track_of[t] = k as u32;
        }
        for &t in &merged {
            track_of[t] = threads.len() as u32;
        }
        let mut file = tempfile::tempfile()?;
        let mut written = 0u64;
        let mut building: Vec<Building> = (0..tracks).map(|_| Building::default()).collect();
        let mut error: Option<io::Error> = None;
        let mut seq = 0u64;
        timeline.for_each(|e| {
            let Some(&k) = track_of.get(e.thread as usize).filter(|&&k| k != u32::MAX) else { return };
            if error.is_some() {
                return;
            }
            let b = &mut building[k as usize];
            b.window.push(Reverse((e.time, seq, e)));
            seq += 1;
            if b.window.len() > WINDOW {
                if let Some(Reverse((_, _, first))) = b.window.pop() {
                    if let Err(err) = b.emit(first, &mut file, &mut written) {
                        error = Some(err);
                    }
                }
            }
        })?;
        if let Some(err) = error {
            return Err(err);
        }
        for b in &mut building {
            while let Some(Reverse((_, _, e))) = b.window.pop() {
                b.emit(e, &mut file, &mut written)?;
            }
            b.write_block(&mut file, &mut written)?;
        }
        let (blocks, lens) = building.into_iter().map(|b| (b.blocks, b.len)).unzip();
        let file = Spill { file: Mutex::new(file), len: written };
        Ok(Tracks { threads, merged, file, blocks, lens, error: RefCell::new(None) })
    }

    /// The number of tracks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether there is no track.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The thread of track `k`; `None` for the "other threads" track.
    pub fn thread(&self, k: usize) -> Option<usize> {
        self.threads.get(k).copied()
    }

    /// The number of entries of track `k`.
    pub fn entries_of(&self, k: usize) -> u64 {
        self.lens.get(k).copied().unwrap_or(0)
    }

    /// Track `k`'s entries, in time order. A read error ends them early; [`Tracks::check`] returns it.
    pub fn entries(&self, k: usize) -> TrackEntries<'_> {
        TrackEntries { tracks: self, blocks: self.blocks.get(k).map_or(&[], Vec::as_slice), buf: Vec::new(), at: 0 }
    }

    /// The first read error of [`Tracks::entries`], if any: an export calls it before it ends.
    pub fn check(&self) -> io::Result<()> {
        match self.error.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The entries of one track, read block by block.
pub struct TrackEntries<'a> {
    tracks: &'a Tracks,
    blocks: &'a [(u64, u32)],
    buf: Vec<u8>,
    at: usize,
}

impl Iterator for TrackEntries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if self.at + ENTRY > self.buf.len() {
            let (&(offset, len), rest) = self.blocks.split_first()?;
            self.blocks = rest;
            self.buf.resize(len as usize, 0);
            self.at = 0;
            if let Err(e) = self.tracks.file.read_at(offset, &mut self.buf) {
                self.tracks.error.borrow_mut().get_or_insert(e);
                self.blocks = &[];
                self.buf.clear();
                return None;
            }
            if self.buf.len() < ENTRY {
                return None;
            }
        }
        let e = Entry::decode(&self.buf[self.at..self.at + ENTRY]);
        self.at += ENTRY;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        for e in [
            Entry { thread: 7, time: u64::MAX, stack: 3, gil: 255, weight: None, stolen: false },
            Entry { thread: u32::MAX, time: 0, stack: u32::MAX, gil: 0, weight: Some(u64::MAX), stolen: true },
        ] {
            let mut b = Vec::new();
            e.encode(&mut b);
            assert_eq!(b.len(), ENTRY);
            assert_eq!(Entry::decode(&b), e);
        }
    }
}
