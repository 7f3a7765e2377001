//! Sample columns on disk: LEB128 varints (zigzag for signed values) in a byte string per column.
//! Hand-written because this is the reader's hot loop: one branch per byte, values of one column at a time.

use crate::model::{Columns, SampleChunk, WireSampleChunk};

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Decodes exactly `n` varints from `bytes` into `out` (cleared first), each at most `max`.
fn decode_varints(bytes: &[u8], n: usize, max: u64, out: &mut Vec<u64>) -> Result<(), &'static str> {
    out.clear();
    // Each value takes at least one byte: never reserve more than the bytes can hold.
    out.reserve(n.min(bytes.len()));
    let mut i = 0;
    while out.len() < n {
        let mut v: u64 = 0;
        let mut shift = 0;
        loop {
            let Some(&b) = bytes.get(i) else { return Err("sample column shorter than the chunk") };
            i += 1;
            if shift == 63 && b > 1 {
                return Err("sample column value overflows");
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        if v > max {
            return Err("sample column value out of range");
        }
        out.push(v);
    }
    if i != bytes.len() {
        return Err("sample column longer than the chunk");
    }
    Ok(())
}

fn decode_u32s(bytes: &[u8], n: usize, scratch: &mut Vec<u64>, out: &mut Vec<u32>) -> Result<(), &'static str> {
    decode_varints(bytes, n, u32::MAX as u64, scratch)?;
    out.clear();
    out.extend(scratch.iter().map(|&v| v as u32));
    Ok(())
}

fn raw_bytes(bytes: &[u8], n: usize, out: &mut Vec<u8>) -> Result<(), &'static str> {
    if bytes.len() != n {
        return Err("sample column length differs from the chunk's");
    }
    out.clear();
    out.extend_from_slice(bytes);
    Ok(())
}

/// Encodes a chunk for writing. `buf` receives the columns back to back; the wire struct borrows from it.
pub fn encode(c: &SampleChunk) -> Result<Vec<u8>, postcard::Error> {
    let mut cols: [Vec<u8>; 9] = Default::default();
    for &d in &c.time_delta_ns {
        put_varint(&mut cols[0], zigzag(d));
    }
    for (col, values) in cols[1..6].iter_mut().zip([&c.cpu, &c.pid, &c.tid, &c.comm, &c.stack]) {
        for &v in values {
            put_varint(col, v as u64);
        }
    }
    // Always `len` values (0: no task stack), so that a 1.5 file's column is never taken for a missing one.
    for i in 0..c.len() {
        put_varint(&mut cols[6], c.task_stack.get(i).copied().unwrap_or(0) as u64);
    }
    // And the interpreter ids (1.8): `len` values, 0 (the main interpreter) for none; none at all when every sample
    // is the main interpreter's, which reads the same (and costs nothing: most recordings have one interpreter).
    if c.interp.iter().any(|&id| id != 0) {
        for i in 0..c.len() {
            put_varint(&mut cols[7], c.interp.get(i).copied().unwrap_or(0) as u64);
        }
    }
    // And the spans (1.10): `len` values, 0 for none; none at all when no sample of the chunk was in one.
    if c.link.iter().any(|&l| l != 0) {
        for i in 0..c.len() {
            put_varint(&mut cols[8], c.link.get(i).copied().unwrap_or(0) as u64);
        }
    }
    // The same for the flags (1.6): `len` bytes, 0 for none.
    let flags: Vec<u8> = (0..c.len()).map(|i| c.flags.get(i).copied().unwrap_or(0)).collect();
    let wire = WireSampleChunk {
        base_time_ns: c.base_time_ns,
        len: c.len() as u32,
        time_delta: &cols[0],
        cpu: &cols[1],
        pid: &cols[2],
        tid: &cols[3],
        comm: &cols[4],
        comms: c.comms.iter().map(String::as_str).collect(),
        thread_state: &c.thread_state,
        gil: &c.gil,
        pthread_id: &c.pthread_id,
        status: &c.status,
        stack: &cols[5],
        task_stack: &cols[6],
        flags: &flags,
        interp: &cols[7],
        link: &cols[8],
    };
    postcard::to_stdvec(&wire)
}

/// Decodes the columns `want` asks for (status and stack always) into `out`, reusing its buffers.
pub fn decode(w: &WireSampleChunk<'_>, want: Columns, out: &mut SampleChunk) -> Result<(), &'static str> {
    let n = w.len as usize;
    let mut scratch = Vec::new();
    out.base_time_ns = w.base_time_ns;
    decode_u32s(w.stack, n, &mut scratch, &mut out.stack)?;
    raw_bytes(w.status, n, &mut out.status)?;
    let mut clear = |on: bool, v: &mut Vec<u32>, bytes: &[u8]| -> Result<(), &'static str> {
        if on {
            decode_u32s(bytes, n, &mut scratch, v)
        } else {
            v.clear();
            Ok(())
        }
    };
    clear(want.cpu, &mut out.cpu, w.cpu)?;
    clear(want.pid, &mut out.pid, w.pid)?;
    clear(want.tid, &mut out.tid, w.tid)?;
    clear(want.comm, &mut out.comm, w.comm)?;
    // An empty column: a file before 1.5, whose samples have no task stack.
    clear(want.task_stack && !w.task_stack.is_empty(), &mut out.task_stack, w.task_stack)?;
    // An empty column: a file before 1.8, whose samples are all the main interpreter's.
    clear(want.interp && !w.interp.is_empty(), &mut out.interp, w.interp)?;
    // An empty column: a file before 1.10, or a chunk none of whose samples was in a span.
    clear(want.link && !w.link.is_empty(), &mut out.link, w.link)?;
    out.time_delta_ns.clear();
    if want.time {
        let mut raw = Vec::new();
        decode_varints(w.time_delta, n, u64::MAX, &mut raw)?;
        out.time_delta_ns.extend(raw.into_iter().map(unzigzag));
    }
    out.comms.clear();
    if want.comm {
        out.comms.extend(w.comms.iter().map(|s| s.to_string()));
        if out.comm.iter().any(|&i| i as usize >= out.comms.len()) {
            return Err("sample names a thread name that is not there");
        }
    }
    for (on, col, bytes) in [
        (want.states, &mut out.thread_state, w.thread_state),
        (want.states, &mut out.gil, w.gil),
        (want.states, &mut out.pthread_id, w.pthread_id),
        // An empty column: a file before 1.6, whose samples have no flags.
        (want.flags && !w.flags.is_empty(), &mut out.flags, w.flags),
    ] {
        if on {
            raw_bytes(bytes, n, col)?;
        } else {
            col.clear();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_damage() {
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let mut bytes = Vec::new();
        for &v in &values {
            put_varint(&mut bytes, v);
        }
        let mut out = Vec::new();
        decode_varints(&bytes, values.len(), u64::MAX, &mut out).unwrap();
        assert_eq!(out, values);
        assert!(decode_varints(&bytes, values.len() + 1, u64::MAX, &mut out).is_err());
        assert!(decode_varints(&bytes, values.len() - 1, u64::MAX, &mut out).is_err());
        assert!(decode_varints(&bytes, values.len(), u32::MAX as u64, &mut out).is_err());
        assert!(decode_varints(&[0xff; 11], 1, u64::MAX, &mut out).is_err());
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn huge_claimed_length_does_not_allocate_it() {
        let mut out = Vec::new();
        assert!(decode_varints(&[1, 2, 3], usize::MAX, u64::MAX, &mut out).is_err());
        assert!(out.capacity() < 1024);
    }
}
