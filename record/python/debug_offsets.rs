//! `_Py_DebugOffsets` (3.13+): the struct CPython places at the very start of `_PyRuntime` so that
//! out-of-process tools can find its internals without DWARF. Each member is a `uint64_t` holding an offset (or
//! a size) of the running interpreter's own build.
//!
//! The constants say where pyperf finds, inside that struct, the values it needs: the byte positions of the
//! struct layout of CPython 3.13 ([`DEBUG_OFFSETS_FIRST`]), each checked by `tests/conformance.rs` against the
//! DWARF of the 3.13 interpreter. A 3.13 interpreter's values are cross-checked against the compiled-in table
//! ([`cross_check`]); a later 3.x is read with these positions only if the sanity checks of
//! [`layout_from_debug_offsets`] hold (ABI-stable sentinels, every offset inside its struct's size), so that a
//! moved struct layout is refused instead of producing garbage stacks.

use std::collections::HashMap;
use std::sync::Mutex;

use super::layout::Layout;

/// `cookie[8]` at position 0.
pub const COOKIE: &[u8; 8] = b"xdebugpy";
/// The first CPython version that has `_Py_DebugOffsets` (and whose layout the positions below are).
pub const DEBUG_OFFSETS_FIRST: (u8, u8) = (3, 13);
/// `uint64_t version` (`PY_VERSION_HEX`).
pub const VERSION: i32 = 8;
/// `uint64_t free_threaded` (1 on `Py_GIL_DISABLED` builds).
pub const FREE_THREADED: i32 = 16;
/// `sizeof(_Py_DebugOffsets)` of 3.13: bytes to read.
pub const SIZE: i32 = 584;

/// `(Layout field, member of _Py_DebugOffsets, byte position of that member)`: the u64 at
/// the position is the value of the [`Layout`] field.
pub const FIELDS: &[(&str, &str, i32)] = &[
    ("runtime_interpreters_head", "runtime_state.interpreters_head", 40),
    ("interp_next", "interpreter_state.next", 64),
    ("interp_tstate_head", "interpreter_state.threads_head", 72),
    ("interp_gil_ptr", "interpreter_state.ceval_gil", 112),
    ("tstate_next", "thread_state.next", 168),
    ("tstate_interp", "thread_state.interp", 176),
    ("tstate_current_frame", "thread_state.current_frame", 184),
    ("tstate_thread_id", "thread_state.thread_id", 192),
    ("tstate_native_thread_id", "thread_state.native_thread_id", 200),
    ("frame_back", "interpreter_frame.previous", 232),
    ("frame_code", "interpreter_frame.executable", 240),
    ("frame_instr", "interpreter_frame.instr_ptr", 248),
    ("frame_localsplus", "interpreter_frame.localsplus", 256),
    ("frame_owner", "interpreter_frame.owner", 264),
    ("code_size", "code_object.size", 272),
    ("code_filename", "code_object.filename", 280),
    ("code_name", "code_object.name", 288),
    ("code_qualname", "code_object.qualname", 296),
    ("code_linetable", "code_object.linetable", 304),
    ("code_firstlineno", "code_object.firstlineno", 312),
    ("code_argcount", "code_object.argcount", 320),
    ("code_varnames", "code_object.localsplusnames", 328),
    ("code_code", "code_object.co_code_adaptive", 344),
    ("object_type", "pyobject.ob_type", 360),
    ("type_name", "type_object.tp_name", 376),
    ("tuple_item", "tuple_object.ob_item", 408),
    ("bytes_size", "bytes_object.ob_size", 520),
    ("bytes_data", "bytes_object.ob_sval", 528),
    ("unicode_state", "unicode_object.state", 544),
    ("unicode_length", "unicode_object.length", 552),
    ("ascii_data", "unicode_object.asciiobject_size", 560),
];

/// `interpreter_state.gil_runtime_state`: offset of the interpreter's own
/// `struct _gil_runtime_state _gil`; `gil_locked` / `gil_last_holder` are
/// `GIL_LOCKED` / `GIL_HOLDER` values minus this one.
pub const GIL_STATE: (&str, i32) = ("interpreter_state.gil_runtime_state", 120);
/// `interpreter_state.gil_runtime_state_locked` (offset of `_gil.locked` in the interpreter).
pub const GIL_LOCKED: (&str, i32) = ("interpreter_state.gil_runtime_state_locked", 136);
/// `interpreter_state.gil_runtime_state_holder` (offset of `_gil.last_holder` in the interpreter).
pub const GIL_HOLDER: (&str, i32) = ("interpreter_state.gil_runtime_state_holder", 144);

/// `(size member, position, Layout fields that are offsets inside that struct)`: each
/// such offset plus its read width must not exceed the size (sanity check of a layout read
/// from an interpreter newer than the table).
pub const SIZES: &[(&str, i32, &[&str])] = &[
    ("runtime_state.size", 24, &["runtime_interpreters_head"]),
    ("interpreter_state.size", 48, &["interp_next", "interp_tstate_head", "interp_gil_ptr"]),
    (
        "thread_state.size",
        152,
        &["tstate_next", "tstate_interp", "tstate_current_frame", "tstate_thread_id", "tstate_native_thread_id"],
    ),
    ("interpreter_frame.size", 224, &["frame_back", "frame_code", "frame_instr", "frame_localsplus", "frame_owner"]),
    (
        "code_object.size",
        272,
        &[
            "code_filename",
            "code_name",
            "code_qualname",
            "code_linetable",
            "code_firstlineno",
            "code_argcount",
            "code_varnames",
        ],
    ),
    ("pyobject.size", 352, &["object_type"]),
    ("type_object.size", 368, &["type_name"]),
    ("tuple_object.size", 400, &["tuple_item"]),
    ("bytes_object.size", 512, &["bytes_size"]),
    ("unicode_object.size", 536, &["unicode_state", "unicode_length"]),
];

/// Layout fields whose value is part of the stable object ABI of every CPython 3.x GIL
/// build on x86-64 (PyObject header, PyVarObject, tp_name, tuple and bytes data): a
/// debug-offsets block read with the wrong positions is caught by these (the expected
/// value is the newest compiled-in table's).
pub const SENTINELS: &[&str] =
    &["object_type", "type_name", "tuple_item", "bytes_size", "bytes_data", "unicode_length"];

/// The fields read from the debug offsets that differ between `built` and `table`, as
/// `name debug_offsets=X table=Y`.
pub fn cross_check(built: &Layout, table: &Layout) -> Vec<String> {
    let ours = table.fields();
    let mut names: Vec<&str> = FIELDS.iter().map(|f| f.0).collect();
    names.extend(["gil_locked", "gil_last_holder"]);
    built
        .fields()
        .into_iter()
        .filter(|(n, _)| names.contains(n))
        .filter_map(|(n, v)| {
            let t = ours.iter().find(|f| f.0 == n).map_or(-1, |f| f.1);
            (t != v).then(|| format!("{n} debug_offsets={v} table={t}"))
        })
        .collect()
}

/// The little-endian u64 at byte `pos` of `data`, if it is inside.
pub fn u64_at(data: &[u8], pos: i32) -> Option<u64> {
    let pos = usize::try_from(pos).ok()?;
    Some(u64::from_le_bytes(data.get(pos..pos + 8)?.try_into().ok()?))
}

/// Builds a [`Layout`] for `version` from a `_Py_DebugOffsets` block, read at the positions of
/// this module. Values the block does not carry (enum values, bit positions, a few
/// sizes) come from `base`, the newest compiled-in table; `runtime_autotss_key`, which pyperf does
/// not use, is -1. Refuses (with the reason) a block that fails the sanity checks: the
/// ABI-stable sentinel fields must equal `base`'s, and every offset must lie inside the size its
/// struct declares; so a block whose own layout moved is not misread.
pub fn layout_from_debug_offsets(debug: &[u8], version: (u8, u8), base: &Layout) -> Result<Layout, String> {
    let mut vals: HashMap<&str, i32> = HashMap::new();
    let get = |pos: i32| -> Result<i32, String> {
        let v = u64_at(debug, pos).ok_or_else(|| format!("_Py_DebugOffsets cut short at byte {pos}"))?;
        i32::try_from(v).ok().filter(|v| *v < 1 << 15).ok_or_else(|| format!("implausible offset {v} at byte {pos}"))
    };
    for (field, _, pos) in FIELDS {
        vals.insert(field, get(*pos)?);
    }
    let gil = get(GIL_STATE.1)?;
    let gil_locked = get(GIL_LOCKED.1)? - gil;
    let gil_last_holder = get(GIL_HOLDER.1)? - gil;
    let base_fields = base.fields();
    for s in SENTINELS {
        let want = base_fields.iter().find(|f| f.0 == *s).map_or(-1, |f| f.1);
        if vals[s] != want {
            return Err(format!(
                "_Py_DebugOffsets not in the layout pyperf reads ({s} = {}, expected {want})",
                vals[s]
            ));
        }
    }
    for (size_member, pos, fields) in SIZES {
        // Sizes may be large (sizeof(_PyRuntimeState) is ~280 KB on 3.13): not limited like offsets.
        let size = u64_at(debug, *pos).ok_or_else(|| format!("_Py_DebugOffsets cut short at byte {pos}"))?;
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        for f in *fields {
            if vals[f] < 0 || i64::from(vals[f]) + 4 > size {
                return Err(format!(
                    "_Py_DebugOffsets not in the layout pyperf reads ({f} = {} outside {size_member} = {size})",
                    vals[f]
                ));
            }
        }
    }
    if !(0..=64).contains(&gil_locked) || !(0..=64).contains(&gil_last_holder) {
        return Err(format!("implausible GIL offsets (locked {gil_locked}, last_holder {gil_last_holder})"));
    }
    let v = |name: &str| vals[name];
    Ok(Layout {
        version,
        runtime_interpreters_head: v("runtime_interpreters_head"),
        runtime_autotss_key: -1,
        runtime_debug_offsets: 0,
        interp_next: v("interp_next"),
        interp_tstate_head: v("interp_tstate_head"),
        interp_gil_ptr: v("interp_gil_ptr"),
        gil_locked,
        gil_last_holder,
        tstate_next: v("tstate_next"),
        tstate_interp: v("tstate_interp"),
        tstate_current_frame: v("tstate_current_frame"),
        tstate_thread_id: v("tstate_thread_id"),
        tstate_native_thread_id: v("tstate_native_thread_id"),
        frame_back: v("frame_back"),
        frame_code: v("frame_code"),
        frame_instr: v("frame_instr"),
        frame_owner: v("frame_owner"),
        frame_localsplus: v("frame_localsplus"),
        code_argcount: v("code_argcount"),
        code_firstlineno: v("code_firstlineno"),
        code_filename: v("code_filename"),
        code_name: v("code_name"),
        code_qualname: v("code_qualname"),
        code_varnames: v("code_varnames"),
        code_linetable: v("code_linetable"),
        code_code: v("code_code"),
        code_size: v("code_size"),
        unicode_state: v("unicode_state"),
        unicode_length: v("unicode_length"),
        ascii_data: v("ascii_data"),
        // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (3.12+).
        compact_data: v("ascii_data") + (base.compact_data - base.ascii_data),
        bytes_size: v("bytes_size"),
        bytes_data: v("bytes_data"),
        tuple_item: v("tuple_item"),
        object_type: v("object_type"),
        type_name: v("type_name"),
        // Not in _Py_DebugOffsets: as in the newest table (3.7+/3.12+ fields that are -1 there stay -1).
        ..*base
    })
}

/// Layouts built at run time live as long as the program; equal ones are shared, so that
/// profiling many processes of one interpreter keeps one copy.
pub fn intern(l: Layout) -> &'static Layout {
    static BUILT: Mutex<Vec<&'static Layout>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = built.iter().find(|b| ***b == l) {
        return found;
    }
    let leaked: &'static Layout = Box::leak(Box::new(l));
    built.push(leaked);
    leaked
}
