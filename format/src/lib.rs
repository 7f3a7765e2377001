//! The `.pyp` recording format of pyperf: a versioned, chunked, checksummed, zstd-compressed file holding the
//! samples of a recording and the symbols and stacks they refer to. Byte-level specification: FORMAT.md.
//!
//! This crate has no Linux, BPF or profiler dependency: a recording can be read anywhere.

mod chunk;
mod columns;
mod merge;
mod model;
mod reader;
mod states;
mod writer;

pub use chunk::{chunk_header, Kind, CHUNK_HEADER_LEN, FLAG_ZSTD, MAGIC, MAJOR, MAX_CHUNK_BYTES, MINOR, PREAMBLE_LEN};
pub use merge::{Merger, Remap};
pub use model::*;
pub use reader::{samples, Frames, Reader, Record, Sample, Tables};
pub use states::{GilState, OffCpuKind, PthreadIdMatch, StackStatus, ThreadStateMatch};
pub use writer::{
    SampleRecord, Writer, LIBRARIES_PER_CHUNK, OFF_CPU_PER_CHUNK, SAMPLES_PER_CHUNK, SOURCE_MAX_RATIO,
    SYMBOLS_PER_CHUNK, TASK_WAITS_PER_CHUNK, THREAD_NAMES_PER_CHUNK,
};

use std::io::Read;

/// Why a recording could not be read or written. Every reading error names the byte offset where it was found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The underlying reader or writer failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The input does not start with [`MAGIC`].
    #[error("not a pyperf recording (wrong magic bytes)")]
    NotARecording,
    /// The file's major version is higher than [`MAJOR`]: this reader would misread it.
    #[error(
        "recording format {}.{} is newer than this pyperf reads ({}.{}); upgrade pyperf to read it",
        file.0, file.1, supported.0, supported.1
    )]
    NewerMajor {
        /// (major, minor) of the file.
        file: (u16, u16),
        /// (major, minor) this crate writes and reads.
        supported: (u16, u16),
    },
    /// The input ends inside the preamble or a chunk: everything before `offset` is intact.
    #[error("recording cut off at byte {offset} after {complete_chunks} complete chunks")]
    Truncated {
        /// Where the input ended.
        offset: u64,
        /// Chunks read whole before it, the header chunk included.
        complete_chunks: u64,
    },
    /// A chunk's header or payload does not match its CRC-32.
    #[error("recording corrupt: checksum mismatch in the chunk at byte {offset}")]
    Checksum {
        /// Start of the damaged chunk.
        offset: u64,
    },
    /// A chunk is well framed but its content breaks the format: over the size limits, undecodable, or
    /// referring to symbols or stack nodes not defined before it.
    #[error("recording corrupt at byte {offset}: {what}")]
    Corrupt {
        /// Start of the offending chunk (or of the preamble field).
        offset: u64,
        /// What is wrong, in words.
        what: String,
    },
    /// The writer could not encode a record (postcard's message).
    #[error("cannot encode record: {0}")]
    Encode(String),
}

impl Error {
    /// A cut-off file: everything before `offset` is good.
    pub fn is_truncation(&self) -> bool {
        matches!(self, Error::Truncated { .. })
    }
}

/// The payload of a sample chunk as the writer stores it (before compression): for tools and tests that build
/// chunks by hand.
pub fn encode_sample_chunk(c: &SampleChunk) -> Result<Vec<u8>, Error> {
    columns::encode(c).map_err(|e| Error::Encode(e.to_string()))
}

/// What [`scan`] noticed on the way that the reader of a report should know.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanNotes {
    /// One line each, e.g. a cut-off file or a missing trailer.
    pub warnings: Vec<String>,
}

/// Reads the rest of a recording, keeping `tables` up to date and handing every sample chunk to `on_samples`
/// after the tables know everything it refers to. A file cut off mid-chunk is not an error: the complete
/// chunks are delivered and a warning says what was lost. Any other damage is an error. Other records (off-CPU
/// intervals and task waits among them) only go to the tables: see [`scan_records`] to get them too.
pub fn scan<R: Read>(
    reader: &mut Reader<R>,
    tables: &mut Tables,
    mut on_samples: impl FnMut(&Tables, &SampleChunk),
) -> Result<ScanNotes, Error> {
    scan_records(reader, tables, |tables, record| {
        if let Record::Samples(c) = record {
            on_samples(tables, c)
        }
    })
}

/// [`scan`], handing every record (samples, off-CPU intervals, ...) to `on_record` after `tables` applied it (so
/// that every reference in it resolves).
pub fn scan_records<R: Read>(
    reader: &mut Reader<R>,
    tables: &mut Tables,
    mut on_record: impl FnMut(&Tables, &Record),
) -> Result<ScanNotes, Error> {
    let mut notes = ScanNotes::default();
    let mut unknown = 0u64;
    loop {
        let offset = reader.offset();
        match reader.next_record() {
            Ok(Some(record)) => {
                tables.apply(&record, offset)?;
                if let Record::Unknown { .. } = record {
                    unknown += 1;
                }
                on_record(tables, &record);
            }
            Ok(None) => break,
            Err(e) if e.is_truncation() => {
                notes.warnings.push(format!("{e}; reporting the complete chunks before it"));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if unknown > 0 {
        notes
            .warnings
            .push(format!("skipped {unknown} chunks of a kind this pyperf does not know (newer minor version)"));
    }
    if tables.stats.is_none() {
        notes
            .warnings
            .push("recording has no trailer (recorder killed or file cut off): statistics are incomplete".into());
    }
    Ok(notes)
}
