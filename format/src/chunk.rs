//! The container: preamble, then chunks of (header, zstd payload). See FORMAT.md for the byte layout.

use std::io::{self, Read, Write};

use crate::Error;

/// First eight bytes of every recording. The high byte and the CR/LF pair catch 7-bit and text-mode mangling,
/// as in PNG.
pub const MAGIC: [u8; 8] = *b"\x89PYP\r\n\x1a\n";
/// Major version: a reader refuses files with a higher one.
pub const MAJOR: u16 = 1;
/// Minor version: a reader accepts higher ones, ignoring what it does not know.
pub const MINOR: u16 = 11;

/// Bytes before the first chunk: magic, major, minor, four reserved bytes.
pub const PREAMBLE_LEN: usize = 16;
/// Bytes of a chunk's header, before its payload (layout: [`chunk_header`]).
pub const CHUNK_HEADER_LEN: usize = 20;

/// Largest payload a chunk may have, stored or decompressed. Bounds the memory one chunk can make a reader
/// allocate, whatever its header claims; the writer stays far below it.
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;

/// Decompressed bytes a reader accepts beyond `MAX_RATIO` times the stored bytes read so far. Real recordings
/// never use it (their running ratio stays under 10 from the first chunk on); it is there for tiny files of
/// unusual content. It bounds what a small file can make a reader build: decoded records take up to ~50x their
/// encoded size (vectors of empty strings, with growth slack and the tables' copy), and the report keeps about as
/// much again, so 256 KiB keeps a 1 KiB file under 64 MiB in `pyperf report` (tests/faults.rs measures it).
pub const RATIO_SLACK_BYTES: u64 = 256 << 10;
/// Highest overall compression ratio a reader accepts. Recordings compress 3-10x; a zstd bomb compresses
/// thousands of times.
pub const MAX_RATIO: u64 = 64;

/// Running totals a reader checks every chunk against.
#[derive(Debug, Default, Clone, Copy)]
pub struct Budget {
    stored: u64,
    raw: u64,
}

/// Chunk flag, bit 0: the payload is one zstd frame (without it, stored as is).
pub const FLAG_ZSTD: u16 = 1;

/// Chunk kinds. Unknown kinds are skipped by readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// [`crate::Header`]: exactly one, the first chunk.
    Header = 1,
    /// [`crate::Process`]: one per process followed.
    Process = 2,
    /// [`crate::SymbolChunk`]: symbols new since the previous one.
    Symbols = 3,
    /// [`crate::StackChunk`]: stack nodes new since the previous one.
    Stacks = 4,
    /// [`crate::SampleChunk`]: a batch of samples, by column.
    Samples = 5,
    /// [`crate::SymbolChunk`]: a piece of the complete symbol table written at the end.
    SymbolTable = 6,
    /// [`crate::Stats`]: the trailer, last.
    Stats = 7,
    /// [`crate::RecorderWarning`]: something the recorder wants the reader of the recording to know (1.1+).
    Warning = 8,
    /// [`crate::ThreadNameChunk`]: Python thread names new or changed since the previous one (1.2+).
    ThreadNames = 9,
    /// [`crate::OffCpuChunk`]: off-CPU intervals (1.3+); an empty one right after the header says off-CPU time was
    /// recorded.
    OffCpu = 10,
    /// [`crate::LibraryChunk`]: native libraries new since the previous one (1.4+).
    Libraries = 11,
    /// [`crate::TaskWaitChunk`]: suspended asyncio tasks, sampled by the recorder's task sweep (1.5+); an empty one
    /// right after the header (after the off-CPU one, if any) says the sweep ran.
    TaskWaits = 12,
    /// [`crate::SourceChunk`]: source files of the recorded program (1.7+, `pyperf record --source`).
    Sources = 13,
    /// [`crate::LinkChunk`]: spans new since the previous one (1.10+).
    Links = 14,
}

impl Kind {
    /// The kind with this on-disk value; `None` for a kind from a newer minor version (readers skip it).
    pub fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::Header,
            2 => Kind::Process,
            3 => Kind::Symbols,
            4 => Kind::Stacks,
            5 => Kind::Samples,
            6 => Kind::SymbolTable,
            7 => Kind::Stats,
            8 => Kind::Warning,
            9 => Kind::ThreadNames,
            10 => Kind::OffCpu,
            11 => Kind::Libraries,
            12 => Kind::TaskWaits,
            13 => Kind::Sources,
            14 => Kind::Links,
            _ => return None,
        })
    }
}

pub fn write_preamble<W: Write>(out: &mut W) -> io::Result<()> {
    let mut buf = [0u8; PREAMBLE_LEN];
    buf[..8].copy_from_slice(&MAGIC);
    buf[8..10].copy_from_slice(&MAJOR.to_le_bytes());
    buf[10..12].copy_from_slice(&MINOR.to_le_bytes());
    // bytes 12..16: reserved flags, zero.
    out.write_all(&buf)
}

/// Reads and checks the preamble; returns (major, minor).
pub fn read_preamble<R: Read>(input: &mut R) -> Result<(u16, u16), Error> {
    let mut buf = [0u8; PREAMBLE_LEN];
    let got = read_full(input, &mut buf)?;
    if got < MAGIC.len() || buf[..MAGIC.len()] != MAGIC {
        if got < MAGIC.len() && MAGIC.starts_with(&buf[..got]) {
            return Err(Error::Truncated { offset: got as u64, complete_chunks: 0 });
        }
        return Err(Error::NotARecording);
    }
    if got < PREAMBLE_LEN {
        return Err(Error::Truncated { offset: got as u64, complete_chunks: 0 });
    }
    let major = u16::from_le_bytes([buf[8], buf[9]]);
    let minor = u16::from_le_bytes([buf[10], buf[11]]);
    if major > MAJOR {
        return Err(Error::NewerMajor { file: (major, minor), supported: (MAJOR, MINOR) });
    }
    if major == 0 {
        return Err(Error::Corrupt { offset: 8, what: "version 0.x is not a released format".into() });
    }
    Ok((major, minor))
}

/// The header of a chunk whose payload, as stored in the file, is `stored`, and `raw_len` bytes once
/// decompressed (FORMAT.md, "Chunk"): kind, flags ([`FLAG_ZSTD`] or 0), stored and raw lengths, CRC-32 of
/// `stored`, CRC-32 of the 16 bytes before it. Lengths are taken as given, unchecked, and `kind` may be one no
/// reader knows.
///
/// The one encoding of the chunk header: the [`crate::Writer`] frames every chunk with it, and the tools and
/// tests that build chunks by hand (unknown kinds, uncompressed payloads: the fuzzer's seeds, the report's
/// synthetic recordings, the format tests) use it instead of copies of the layout. Public rather than behind a
/// test-only feature: its users are in three crates, one outside the workspace, and it is the format's own
/// definition, not test scaffolding.
pub fn chunk_header(kind: u16, flags: u16, stored: &[u8], raw_len: u32) -> [u8; CHUNK_HEADER_LEN] {
    let mut header = [0u8; CHUNK_HEADER_LEN];
    header[0..2].copy_from_slice(&kind.to_le_bytes());
    header[2..4].copy_from_slice(&flags.to_le_bytes());
    header[4..8].copy_from_slice(&(stored.len() as u32).to_le_bytes());
    header[8..12].copy_from_slice(&raw_len.to_le_bytes());
    header[12..16].copy_from_slice(&crc32fast::hash(stored).to_le_bytes());
    let header_crc = crc32fast::hash(&header[..16]);
    header[16..20].copy_from_slice(&header_crc.to_le_bytes());
    header
}

/// Compresses `raw` and writes one chunk. Returns the bytes written.
pub fn write_chunk<W: Write>(out: &mut W, kind: Kind, raw: &[u8], level: i32) -> io::Result<u64> {
    write_chunk_within(out, kind, raw, level, u64::MAX)
}

/// [`write_chunk`], but stored uncompressed when zstd would shrink it more than `max_ratio` times: for content the
/// recorder does not choose (a source file of zeros compresses thousands of times), which would otherwise make a
/// reader's ratio budget ([`MAX_RATIO`]) refuse the whole recording as a decompression bomb.
pub fn write_chunk_within<W: Write>(
    out: &mut W,
    kind: Kind,
    raw: &[u8],
    level: i32,
    max_ratio: u64,
) -> io::Result<u64> {
    // One zstd context per thread, reused (as for decompression below): the recorder writes a few small chunks a
    // second, and a new context each time was ~1% of its CPU.
    thread_local! {
        static CCTX: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let stored = CCTX.with(|c| -> io::Result<Vec<u8>> {
        let mut c = c.borrow_mut();
        let c = match c.as_mut() {
            Some(c) => {
                c.set_compression_level(level)?;
                c
            }
            None => c.insert(zstd::bulk::Compressor::new(level)?),
        };
        c.compress(raw)
    })?;
    if raw.len() > MAX_CHUNK_BYTES as usize || stored.len() > MAX_CHUNK_BYTES as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "chunk larger than MAX_CHUNK_BYTES"));
    }
    let (flags, stored) = if raw.len() as u64 > max_ratio.saturating_mul(stored.len() as u64) {
        (0, raw)
    } else {
        (FLAG_ZSTD, &stored[..])
    };
    out.write_all(&chunk_header(kind as u16, flags, stored, raw.len() as u32))?;
    out.write_all(stored)?;
    Ok((CHUNK_HEADER_LEN + stored.len()) as u64)
}

/// A chunk as read: its raw kind and decompressed payload.
pub struct RawChunk {
    pub kind: u16,
    pub offset: u64,
    /// Bytes the chunk takes in the file, header included.
    pub size: u64,
    pub payload: Vec<u8>,
}

/// Reads the next chunk. `Ok(None)` at a clean end of file (no byte of a next chunk).
/// `stored` is a reusable buffer for the compressed bytes.
pub fn read_chunk<R: Read>(
    input: &mut R,
    offset: u64,
    complete_chunks: u64,
    stored: &mut Vec<u8>,
    budget: &mut Budget,
) -> Result<Option<RawChunk>, Error> {
    let truncated = |at: u64| Error::Truncated { offset: at, complete_chunks };
    let mut header = [0u8; CHUNK_HEADER_LEN];
    let got = read_full(input, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < CHUNK_HEADER_LEN {
        return Err(truncated(offset + got as u64));
    }
    let kind = u16::from_le_bytes([header[0], header[1]]);
    let flags = u16::from_le_bytes([header[2], header[3]]);
    let stored_len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let raw_len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    let header_crc = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
    // The header has its own checksum so that a damaged length is told apart from a cut-off file before it is
    // trusted.
    if crc32fast::hash(&header[..16]) != header_crc {
        return Err(Error::Checksum { offset });
    }
    if stored_len > MAX_CHUNK_BYTES || raw_len > MAX_CHUNK_BYTES {
        return Err(Error::Corrupt {
            offset,
            what: format!(
                "chunk claims {} bytes, more than the {} a chunk may hold",
                stored_len.max(raw_len),
                MAX_CHUNK_BYTES
            ),
        });
    }
    stored.clear();
    // `take` + read_to_end grows the buffer with the bytes actually present, not with the claimed length.
    let got = input.by_ref().take(stored_len as u64).read_to_end(stored)?;
    if got < stored_len as usize {
        return Err(truncated(offset + (CHUNK_HEADER_LEN + got) as u64));
    }
    if crc32fast::hash(stored) != crc {
        return Err(Error::Checksum { offset });
    }
    budget.stored += (CHUNK_HEADER_LEN as u64) + stored_len as u64;
    budget.raw += raw_len as u64;
    if budget.raw > RATIO_SLACK_BYTES + MAX_RATIO * budget.stored {
        return Err(Error::Corrupt {
            offset,
            what: format!("chunk expands to {raw_len} bytes, an implausible compression ratio (zstd bomb?)"),
        });
    }
    let payload = if flags & FLAG_ZSTD != 0 {
        decompress(stored, raw_len).map_err(|e| Error::Corrupt { offset, what: format!("bad zstd data: {e}") })?
    } else {
        if stored_len != raw_len {
            return Err(Error::Corrupt { offset, what: "uncompressed chunk with two different lengths".into() });
        }
        std::mem::take(stored)
    };
    if flags & !FLAG_ZSTD != 0 {
        return Err(Error::Corrupt { offset, what: format!("unknown chunk flags {flags:#x}") });
    }
    Ok(Some(RawChunk { kind, offset, size: CHUNK_HEADER_LEN as u64 + stored_len as u64, payload }))
}

/// Decompresses a chunk of `raw_len` bytes (bounded by MAX_CHUNK_BYTES and the ratio budget, checked before).
fn decompress(stored: &[u8], raw_len: u32) -> io::Result<Vec<u8>> {
    // One zstd context per thread, reused: creating one per chunk costs more than decompressing a small chunk
    // (ZSTD_createDCtx probes the CPU, which traps in virtual machines).
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let mut out = Vec::with_capacity(raw_len as usize);
    DCTX.with(|d| -> io::Result<()> {
        let mut d = d.borrow_mut();
        let d = match d.as_mut() {
            Some(d) => d,
            None => d.insert(zstd::bulk::Decompressor::new()?),
        };
        d.decompress_to_buffer(stored, &mut out)?;
        Ok(())
    })?;
    if out.len() != raw_len as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("decompressed to {} bytes, header says {raw_len}", out.len()),
        ));
    }
    Ok(out)
}

/// Like `read_exact`, but reports how many bytes it got before the end of file.
fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
