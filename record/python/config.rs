//! The BPF program's configuration row for a process ([`ProcConfig`], `struct py_proc` of bpf/pyperf.h): the
//! process's addresses with the load bias applied, and the offsets and kinds the walk needs, taken from the
//! version's [`Row`]. The program reads this row and never a version.

use super::detect::PythonProcess;
use super::layout::Layout;
use super::linetable::Instr;
#[cfg(doc)]
use super::versions::Row;
use super::versions::{Frames, Gil, Interpreters, ThreadMatch, THREAD_ATTACHED, WHENCE_EXEC};
use crate::abi::{self, types, ProcConfig};

const TSTATE_BUF: i32 = abi::TSTATE_BUF as i32;
const FRAME_BUF: i32 = abi::FRAME_BUF as i32;
const GIL_BUF: i32 = abi::GIL_BUF as i32;
const CODE_BUF: i32 = abi::CODE_BUF as i32;
const SNAP_CODE: i32 = abi::SNAP_CODE as i32;

/// `sizeof(struct _gil_runtime_state)` on x86-64 glibc, 3.7-3.13 (gdb on the pyenv builds: 208; `cond` at 0x20,
/// `switch_mutex` at 0xa8), the layout 3.14 and 3.15 keep.
const GIL_STRUCT_SIZE: u32 = 208;

/// A process whose interpreter's layout the BPF program cannot walk.
#[derive(Debug, thiserror::Error)]
#[error("cannot sample process {pid} (Python {version}): {reason}")]
pub struct ConfigError {
    /// The process.
    pub pid: u32,
    /// Its Python version, `3.11.7`.
    pub version: String,
    /// What does not fit.
    pub reason: String,
}

/// Builds the `procs` map value for a process: addresses with load bias, and the offsets the walk needs,
/// copied from the version's row. `other_pid_ns`: the process is in another PID namespace than pyperf (its thread
/// states hold that namespace's tids). `track_tasks`: its samples carry the run roots of generator frames
/// (`RawSample::coro_roots`, for asyncio tasks; 3.11+, nothing before).
pub fn bpf_config(p: &PythonProcess, other_pid_ns: bool, track_tasks: bool) -> Result<ProcConfig, ConfigError> {
    let row = p.row;
    let l: &Layout = row.layout;
    let unsupported = |reason: String| ConfigError { pid: p.pid, version: p.version_string(), reason };
    let at = |base: Option<u64>, off: i32| match (base, off) {
        (Some(b), o) if o >= 0 => Some(b + o as u64),
        _ => None,
    };
    let rt = p.addrs.runtime;

    let interp_head_addr = match row.interpreters {
        Interpreters::Runtime => at(rt, l.runtime_interpreters_head),
        Interpreters::InterpHead => p.addrs.interp_head,
    }
    .ok_or_else(|| unsupported("no address for the interpreter list (_PyRuntime / interp_head)".into()))?;
    let tstate_current_addr = at(rt, l.runtime_tstate_current).or(p.addrs.tstate_current).unwrap_or(0);

    // Where a thread blocked in futex(2) waits for the GIL (see py_proc.gil_wait_addr): the GIL's struct (its
    // condition variables and mutexes), 2.7's semaphore, 3.6's statics.
    let (gil_wait_addr, gil_wait_len) = if let Some(locked) = at(rt, l.runtime_gil_locked).filter(|_| l.gil_locked >= 0)
    {
        (locked - l.gil_locked as u64, GIL_STRUCT_SIZE)
    } else if row.gil == Gil::LockPtr {
        (0, abi::SEM_SIZE)
    } else if let Some((lo, hi)) = p.addrs.gil_wait {
        (lo, (hi - lo) as u32)
    } else if l.interp_gil_ptr >= 0 {
        (0, GIL_STRUCT_SIZE)
    } else {
        (0, 0)
    };

    // GIL: one block read at gil_addr covering locked + last_holder.
    let mut gil_addr = 0u64;
    let mut gil_holder_addr = 0u64;
    let (mut gil_locked, mut gil_last_holder) = (l.gil_locked, l.gil_last_holder);
    let mut gil_kind = types::pyperf_gil_kind::GIL_KIND_STRUCT.0;
    let mut gil_locked_width = 4;
    if let (Some(locked), true) = (at(rt, l.runtime_gil_locked), l.gil_locked >= 0) {
        gil_addr = locked - l.gil_locked as u64;
    } else if let (Some(lock), Some(_), true) =
        (p.addrs.interpreter_lock, p.addrs.tstate_current, row.gil == Gil::LockPtr)
    {
        // 2.7: the lock pointer says whether the GIL exists; _PyThreadState_Current is its holder.
        gil_kind = types::pyperf_gil_kind::GIL_KIND_LOCK_PTR.0;
        gil_addr = lock;
        gil_locked = 0;
        gil_locked_width = 8;
        gil_last_holder = -1;
    } else if let (Some(a), Some(b)) = (p.addrs.gil_locked, p.addrs.gil_last_holder) {
        // Pre-3.7 statics: one block when they sit close together, else two reads.
        let base = a.min(b);
        if a.max(b) - base <= (GIL_BUF - 8) as u64 {
            gil_addr = base;
            gil_locked = (a - base) as i32;
            gil_last_holder = (b - base) as i32;
        } else {
            gil_addr = a;
            gil_locked = 0;
            gil_last_holder = -1;
            gil_holder_addr = b;
        }
    }
    let interp_gil_ptr = if gil_addr == 0 { l.interp_gil_ptr } else { -1 };
    if gil_addr == 0 && interp_gil_ptr < 0 {
        // No GIL to look at (e.g. 2.7 or 3.6 without the static symbols): NO_INFO.
        gil_kind = types::pyperf_gil_kind::GIL_KIND_NONE.0;
        gil_locked = -1;
        gil_last_holder = -1;
    }
    // 3.12+: the GIL holder stands in for the global current thread state (see pyperf.h).
    let global_from_gil = u8::from(tstate_current_addr == 0 && interp_gil_ptr >= 0);
    // Fold the global current thread state into the same block read when it is near.
    let mut gil_tstate_current = -1;
    if gil_addr != 0 && tstate_current_addr != 0 {
        let base = gil_addr.min(tstate_current_addr);
        let shift = (gil_addr - base) as i32;
        let ts_off = (tstate_current_addr - base) as i32;
        let last = [gil_locked + shift + gil_locked_width, gil_last_holder + shift + 8, ts_off + 8]
            .into_iter()
            .max()
            .unwrap_or(0);
        if last <= GIL_BUF {
            gil_addr = base;
            gil_locked += shift;
            if gil_last_holder >= 0 {
                gil_last_holder += shift;
            }
            gil_tstate_current = ts_off;
        }
    }

    // Leaf frame: direct pointer (<= 3.10 .frame, 3.13 .current_frame) or through cframe.
    let (tstate_frame, tstate_cframe, cframe_current_frame) = match row.frames {
        Frames::Object => (l.tstate_frame, -1, -1),
        Frames::Current => (l.tstate_current_frame, -1, -1),
        Frames::CFrame => (-1, l.tstate_cframe, l.cframe_current_frame),
    };
    if tstate_frame < 0 && (tstate_cframe < 0 || cframe_current_frame < 0) {
        return Err(unsupported("layout has no way to the current frame".into()));
    }

    let (instr_kind, frame_instr) = match row.instr {
        Instr::FromCode if l.frame_instr >= 0 => (types::pyperf_instr_kind::INSTR_PTR_MINUS_CODE.0, l.frame_instr),
        Instr::LastiBytes | Instr::LastiUnits if l.frame_lasti >= 0 => {
            (types::pyperf_instr_kind::INSTR_LASTI.0, l.frame_lasti)
        }
        _ => (types::pyperf_instr_kind::INSTR_NONE.0, -1),
    };
    let match_kind = match row.thread_match {
        ThreadMatch::NativeTid => types::pyperf_match_kind::MATCH_NATIVE_TID.0,
        ThreadMatch::Pthread => types::pyperf_match_kind::MATCH_PTHREAD.0,
    };
    let owner_cstack = row.hidden_owners_from.map_or(-1, i32::from);
    // <= 3.10 (no co_qualname): report each frame's first argument and its type.
    let first_local = l.code_qualname < 0 && l.frame_localsplus >= 0 && l.code_argcount >= 0 && l.object_type >= 0;
    let frame_localsplus = if first_local { l.frame_localsplus } else { -1 };

    // Subinterpreters: every interpreter's thread states of a thread are found, where `interpreters.main` follows
    // `interpreters.head` (one read tells whether there are others); which one runs, and what made it, from 3.13
    // (see py_offsets.tstate_state). Before, two of them claiming a thread is ambiguous: never a guess.
    let interps_addr = at(rt, l.runtime_interpreters_head)
        .filter(|_| row.interpreters == Interpreters::Runtime)
        .filter(|_| l.runtime_interpreters_main == l.runtime_interpreters_head + 8);
    let (tstate_state, tstate_whence) = if interps_addr.is_some() && l.tstate_state >= 0 && l.tstate_whence >= 0 {
        (l.tstate_state, l.tstate_whence)
    } else {
        (-1, -1)
    };

    // Bytes to read per block: up to the end of the last field used.
    let end = |fields: &[(i32, i32)]| fields.iter().filter(|(o, _)| *o >= 0).map(|(o, w)| o + w).max().unwrap_or(0);
    // 3.11+: where the thread's data stack chunk starts, which bounds the program's window reads.
    let tstate_datastack_chunk = if row.frames.on_data_stack() { l.tstate_datastack_chunk } else { -1 };
    let tstate_size = end(&[
        (tstate_datastack_chunk, 8),
        (l.tstate_base_frame, 8),
        (l.tstate_gil_requested, 4),
        (tstate_state, 4),
        (tstate_whence, 4),
        (l.tstate_next, 8),
        (l.tstate_interp, 8),
        (l.tstate_thread_id, 8),
        (l.tstate_native_thread_id, 8),
        (tstate_frame, 8),
        (tstate_cframe, 8),
        (l.tstate_context, 8),
    ]);
    let frame_size = end(&[
        (l.frame_back, 8),
        (l.frame_code, 8),
        (frame_instr, if instr_kind == 1 { 4 } else { 8 }),
        (l.frame_owner, 1),
        (l.frame_is_entry, 1),
        (frame_localsplus, 8),
    ]);
    // 3.14+: the count of freed code objects right after the interpreter's own GIL, in the same block read (the
    // program uses it only where the block's address says it is that slot).
    let gil_code_gen = if l.interp_code_gen >= 0 && interp_gil_ptr >= 0 { GIL_STRUCT_SIZE as i32 } else { -1 };
    let gil_size = if gil_locked >= 0 {
        end(&[(gil_locked, gil_locked_width), (gil_last_holder, 8), (gil_tstate_current, 8), (gil_code_gen, 8)])
    } else {
        0
    };
    if tstate_size > TSTATE_BUF || frame_size > FRAME_BUF || gil_size > GIL_BUF {
        return Err(unsupported(format!(
            "struct fields beyond the BPF read buffers (thread state {tstate_size}, frame {frame_size}, gil {gil_size} bytes)"
        )));
    }
    // The check word's span: co_firstlineno, co_filename and co_name in one read (see pyperf.h),
    // and co_argcount where the first-local probe needs it.
    let mut span_start = l.code_firstlineno.min(l.code_filename).min(l.code_name);
    let mut span_end = (l.code_firstlineno + 4).max(l.code_filename + 8).max(l.code_name + 8);
    if first_local {
        span_start = span_start.min(l.code_argcount);
        span_end = span_end.max(l.code_argcount + 4);
    }
    let span = (span_start, (span_end - span_start) as u16);
    if span_start < 0 || i32::from(span.1) > CODE_BUF {
        return Err(unsupported(format!("code object check span of {} bytes", span.1)));
    }
    let s16 = |v: i32| -> Result<i16, ConfigError> {
        i16::try_from(v).map_err(|_| unsupported(format!("offset {v} out of range")))
    };

    Ok(types::py_proc {
        interp_head_addr,
        tstate_current_addr,
        gil_addr,
        gil_holder_addr,
        code_mask: row.code_tag_mask,
        skip_code: p.addrs.none.filter(|_| row.none_is_entry).unwrap_or(0),
        major: p.version.0,
        minor: p.version.1,
        micro: p.version.2,
        // 3.11+: _PyInterpreterFrame on the thread's data stack, callers just below callees (see pyperf.h).
        frame_window: u8::from(row.frames.on_data_stack()),
        ns_tid: u8::from(other_pid_ns),
        track_tasks: u8::from(track_tasks && l.frame_owned_by_generator >= 0),
        _pad: [0; 2],
        gil_wait_addr,
        gil_wait_len,
        // The check-word cache is off until the session knows how frees are counted (see `frees::with_frees`).
        cache_id: 0,
        code_gen: 0,
        gen_interp: 0,
        // The process's one collecting flag (<= 3.8); 3.9+ per interpreter (off.interp_gc_collecting).
        gc_addr: at(rt, l.runtime_gc_collecting)
            .or(p.addrs.gc_collecting.filter(|_| l.interp_gc_collecting < 0))
            .unwrap_or(0),
        interps_addr: interps_addr.unwrap_or(0),
        gen_kind: types::pyperf_gen_kind::GEN_NONE.0 as u8,
        _pad2: [0; 7],
        off: types::py_offsets {
            interp_tstate_head: s16(l.interp_tstate_head)?,
            interp_gil_ptr: s16(interp_gil_ptr)?,
            gil_locked: s16(gil_locked)?,
            gil_last_holder: s16(gil_last_holder)?,
            gil_tstate_current: s16(gil_tstate_current)?,
            tstate_next: s16(l.tstate_next)?,
            tstate_interp: s16(l.tstate_interp)?,
            tstate_thread_id: s16(l.tstate_thread_id)?,
            tstate_native_thread_id: s16(l.tstate_native_thread_id)?,
            tstate_frame: s16(tstate_frame)?,
            tstate_cframe: s16(tstate_cframe)?,
            cframe_current_frame: s16(cframe_current_frame)?,
            frame_back: s16(l.frame_back)?,
            frame_code: s16(l.frame_code)?,
            frame_instr: s16(frame_instr)?,
            frame_owner: s16(l.frame_owner)?,
            code_span: s16(span.0)?,
            code_span_len: span.1,
            check_firstlineno: s16(l.code_firstlineno - span.0)?,
            check_filename: s16(l.code_filename - span.0)?,
            check_name: s16(l.code_name - span.0)?,
            tstate_size: tstate_size as u16,
            frame_size: frame_size as u16,
            gil_size: gil_size as u16,
            instr_kind: instr_kind as u8,
            match_kind: match_kind as u8,
            owner_cstack: s16(owner_cstack)?,
            frame_localsplus: s16(frame_localsplus)?,
            object_type: s16(if first_local { l.object_type } else { -1 })?,
            check_argcount: s16(if first_local { l.code_argcount - span.0 } else { -1 })?,
            gil_kind: gil_kind as u8,
            global_from_gil,
            tstate_base_frame: s16(l.tstate_base_frame)?,
            tstate_gil_requested: s16(l.tstate_gil_requested)?,
            frame_is_entry: s16(l.frame_is_entry)?,
            // Code snapshots need the whole object user space reads (CodeReader reads code_size bytes).
            snap_code_size: if (1..=SNAP_CODE).contains(&l.code_size) { l.code_size as u16 } else { 0 },
            code_name: s16(l.code_name)?,
            code_qualname: s16(l.code_qualname)?,
            code_filename: s16(l.code_filename)?,
            code_linetable: s16(l.code_linetable)?,
            bytes_size: s16(l.bytes_size)?,
            bytes_data: s16(l.bytes_data)?,
            interp_code_gen: s16(l.interp_code_gen)?,
            gil_code_gen: s16(gil_code_gen)?,
            tstate_datastack_chunk: s16(tstate_datastack_chunk)?,
            // Only where frames carry an owner (3.11+).
            owner_generator: s16(if l.frame_owner >= 0 { l.frame_owned_by_generator } else { -1 })?,
            code_flags: s16(l.code_flags)?,
            interp_gc_collecting: s16(l.interp_gc_collecting)?,
            interp_id: s16(l.interp_id)?,
            interp_next: s16(l.interp_next)?,
            tstate_state: s16(tstate_state)?,
            tstate_whence: s16(tstate_whence)?,
            state_attached: THREAD_ATTACHED,
            whence_exec: WHENCE_EXEC,
            tstate_context: s16(l.tstate_context)?,
            _pad_off: [0; 4],
        },
        _pad3: [0; 4],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::detect::PythonAddrs;
    use crate::python::testing;
    use crate::python::versions::{row_for, Row, ROWS};

    fn fake(version: (u8, u8, u8), row: &'static Row) -> PythonProcess {
        let addrs = if version >= (3, 7, 0) {
            PythonAddrs { runtime: Some(0x10000), none: Some(0x5000), ..Default::default() }
        } else {
            PythonAddrs {
                interp_head: Some(0x20000),
                tstate_current: Some(0x20100),
                interpreter_lock: Some(0x20040),
                gil_locked: (version.0 == 3).then_some(0x30000),
                gil_last_holder: (version.0 == 3).then_some(0x40000),
                ..Default::default()
            }
        };
        testing::process(version, row, addrs)
    }

    /// What each version's configuration asks of the BPF walker.
    #[test]
    fn per_version_configuration() {
        use types::pyperf_gil_kind as K;
        for row in &ROWS {
            let (major, minor) = row.version;
            let p = fake((major, minor, 0), row);
            let c = bpf_config(&p, false, true).unwrap_or_else(|e| panic!("{major}.{minor}: {e}"));
            let o = c.off;
            let v = (major, minor);
            // GIL: 2.7 from the lock pointer + current thread, else struct _gil_runtime_state.
            let kind = if v == (2, 7) { K::GIL_KIND_LOCK_PTR.0 } else { K::GIL_KIND_STRUCT.0 };
            assert_eq!(o.gil_kind as u32, kind, "{v:?}");
            // Global current thread: the GIL holder on 3.12+, a global before.
            assert_eq!(o.global_from_gil == 1, v >= (3, 12), "{v:?}");
            assert_eq!(c.tstate_current_addr != 0, v < (3, 12), "{v:?}");
            // The first-local probe: <= 3.10 only; 3.11+ read nothing more per frame.
            assert_eq!(o.frame_localsplus >= 0, v <= (3, 10), "{v:?}");
            assert_eq!(o.check_argcount >= 0, v <= (3, 10), "{v:?}");
            if v >= (3, 11) {
                assert!(o.frame_size <= 128, "{v:?}: frame block {}", o.frame_size);
            }
            assert!(o.frame_size as i32 <= FRAME_BUF && o.tstate_size as i32 <= TSTATE_BUF, "{v:?}");
            assert!(o.gil_size as i32 <= GIL_BUF && o.code_span_len as i32 <= CODE_BUF, "{v:?}");
            // Entry frames: owner == C stack (3.12+), f_executable == None (3.13+).
            assert_eq!(o.owner_cstack >= 0, v >= (3, 12), "{v:?}");
            // 3.11 marks the first frame of an activation of the evaluation loop itself; 3.12+ with a shim frame.
            assert_eq!(o.frame_is_entry >= 0, v == (3, 11), "{v:?}");
            // Frames read by windows where they live on the data stack (3.11+).
            assert_eq!(c.frame_window == 1, v >= (3, 11), "{v:?}");
            assert_eq!(c.skip_code != 0, v >= (3, 13), "{v:?}");
            // Tagged f_executable (3.14+): the low bits are masked off.
            assert_eq!(c.code_mask, if v >= (3, 14) { !3 } else { u64::MAX }, "{v:?}");
            // The base frame ends the walk, and threads waiting for the GIL are seen, from 3.15.
            assert_eq!(o.tstate_base_frame >= 0, v >= (3, 15), "{v:?}");
            assert_eq!(o.tstate_datastack_chunk >= 0, v >= (3, 11), "{v:?}");
            assert_eq!(o.tstate_gil_requested >= 0, v >= (3, 15), "{v:?}");
            // Subinterpreters: interpreter ids, and every interpreter's thread states of a thread, from 3.7 (one
            // 16-byte read of interpreters.head and .main, adjacent); which one runs, and stitching, from 3.13.
            assert_eq!(o.interp_id >= 0, v >= (3, 7), "{v:?}");
            assert_eq!(c.interps_addr != 0, v >= (3, 7), "{v:?}");
            assert_eq!((o.tstate_state >= 0, o.tstate_whence >= 0), (v >= (3, 13), v >= (3, 13)), "{v:?}");
            assert_eq!((o.state_attached, o.whence_exec), (1, 5), "{v:?}");
            // Run roots of generator frames (asyncio tasks): 3.11+, where frames have owners, and only when asked.
            assert_eq!(o.owner_generator, if v >= (3, 11) { 1 } else { -1 }, "{v:?}");
            assert_eq!(c.track_tasks, u8::from(v >= (3, 11)), "{v:?}");
            let off = bpf_config(&p, false, false).unwrap_or_else(|e| panic!("{major}.{minor}: {e}"));
            assert_eq!((off.track_tasks, off.off.owner_generator), (0, o.owner_generator), "{v:?}");
        }
        // 2.7 without the static interpreter_lock (stripped): no GIL information, still sampled.
        let mut p = fake((2, 7, 18), row_for(2, 7).unwrap());
        p.addrs.interpreter_lock = None;
        let c = bpf_config(&p, false, true).unwrap();
        assert_eq!(c.off.gil_kind as u32, K::GIL_KIND_NONE.0);
        assert!(c.tstate_current_addr != 0);
    }

    /// A row newer than every row (read through the newest block layout) configures like the newest.
    #[test]
    fn newer_version_configuration() {
        let newest = crate::python::versions::newest();
        let (major, minor) = newest.version;
        let block = crate::python::versions::tests::synthetic_block(newest.layout, newest.version, (major, minor + 1));
        let next = crate::python::versions::select((major, minor + 1, 0), Some(&block)).unwrap();
        let c = bpf_config(&fake((major, minor, 0), newest), false, true).unwrap();
        let c_next = bpf_config(&fake((major, minor + 1, 0), next), false, true).unwrap();
        assert_eq!(c_next.code_mask, c.code_mask);
        assert_eq!(c_next.skip_code, 0x5000);
        assert_eq!(format!("{:?}", c_next.off), format!("{:?}", c.off));
    }
}
