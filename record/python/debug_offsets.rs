//! `_Py_DebugOffsets` (3.13+): the struct CPython places at the very start of `_PyRuntime` so that
//! out-of-process tools can find its internals without DWARF. Each member is a `uint64_t` holding an offset (or
//! a size) of the running interpreter's own build.
//!
//! The block's own layout changes between minor versions (584 bytes in 3.13, 760 in 3.14, 888 in 3.15; it has no
//! size field): [`BLOCK_LAYOUTS`] holds each known one, chosen by the block's `version`. The values in the block
//! win over the compiled-in table, since patch releases move fields; [`layout_from_debug_offsets`] refuses a
//! block that fails its checks (ABI-stable sentinels, every offset inside its struct's size), so that a moved
//! layout is refused instead of producing garbage stacks.

use std::collections::HashMap;
use std::sync::Mutex;

use super::layout::Layout;

/// `cookie[8]` at position 0.
pub const COOKIE: &[u8; 8] = b"xdebugpy";
/// `uint64_t version` (`PY_VERSION_HEX`), at the same position in every layout.
pub const VERSION: i32 = 8;
/// `uint64_t free_threaded` (1 on `Py_GIL_DISABLED` builds), at the same position in every layout.
pub const FREE_THREADED: i32 = 16;
/// Bytes read from the start of `_PyRuntime`: more than the largest known block (888 bytes on 3.15).
pub const READ_SIZE: usize = 1024;

/// The struct layout of `_Py_DebugOffsets` in one CPython minor version: after `cookie`, `version` and
/// `free_threaded`, sections of `uint64_t` members in declaration order (copied from the version's
/// `Include/internal/pycore_debug_offsets.h`, `pycore_runtime.h` on 3.13; `tests/conformance.rs` compiles a
/// probe against the real header and checks every position and the size).
#[derive(Debug)]
pub struct BlockLayout {
    /// `(major, minor)` whose headers define this layout.
    pub version: (u8, u8),
    /// `(section, members)`.
    pub sections: &'static [(&'static str, &'static [&'static str])],
}

impl BlockLayout {
    /// `sizeof(_Py_DebugOffsets)`.
    pub fn size(&self) -> i32 {
        8 * (3 + self.sections.iter().map(|s| s.1.len()).sum::<usize>()) as i32
    }

    /// Byte position of `section.member` in the block, if this layout has it.
    pub fn position(&self, member: &str) -> Option<i32> {
        let (section, name) = member.split_once('.')?;
        let mut at = 24;
        for (s, members) in self.sections {
            for m in *members {
                if *s == section && *m == name {
                    return Some(at);
                }
                at += 8;
            }
        }
        None
    }

    /// Every `section.member` with its position, in order.
    pub fn members(&self) -> Vec<(String, i32)> {
        let mut out = Vec::new();
        let mut at = 24;
        for (s, members) in self.sections {
            for m in *members {
                out.push((format!("{s}.{m}"), at));
                at += 8;
            }
        }
        out
    }
}

/// The known layouts, oldest first.
#[rustfmt::skip]
pub static BLOCK_LAYOUTS: [BlockLayout; 3] = [
    BlockLayout { version: (3, 13), sections: &[
        ("runtime_state", &["size", "finalizing", "interpreters_head"]),
        ("interpreter_state", &["size", "id", "next", "threads_head", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder"]),
        ("thread_state", &["size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk", "status"]),
        ("interpreter_frame", &["size", "previous", "executable", "instr_ptr", "localsplus", "owner"]),
        ("code_object", &["size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive"]),
        ("pyobject", &["size", "ob_type"]),
        ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]),
        ("tuple_object", &["size", "ob_item", "ob_size"]),
        ("list_object", &["size", "ob_item", "ob_size"]),
        ("dict_object", &["size", "ma_keys", "ma_values"]),
        ("float_object", &["size", "ob_fval"]),
        ("long_object", &["size", "lv_tag", "ob_digit"]),
        ("bytes_object", &["size", "ob_size", "ob_sval"]),
        ("unicode_object", &["size", "state", "length", "asciiobject_size"]),
        ("gc", &["size", "collecting"]),
    ]},
    BlockLayout { version: (3, 14), sections: &[
        ("runtime_state", &["size", "finalizing", "interpreters_head"]),
        ("interpreter_state", &["size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder", "code_object_generation", "tlbc_generation"]),
        ("thread_state", &["size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id", "datastack_chunk", "status"]),
        ("interpreter_frame", &["size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"]),
        ("code_object", &["size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc"]),
        ("pyobject", &["size", "ob_type"]),
        ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]),
        ("tuple_object", &["size", "ob_item", "ob_size"]),
        ("list_object", &["size", "ob_item", "ob_size"]),
        ("set_object", &["size", "used", "table", "mask"]),
        ("dict_object", &["size", "ma_keys", "ma_values"]),
        ("float_object", &["size", "ob_fval"]),
        ("long_object", &["size", "lv_tag", "ob_digit"]),
        ("bytes_object", &["size", "ob_size", "ob_sval"]),
        ("unicode_object", &["size", "state", "length", "asciiobject_size"]),
        ("gc", &["size", "collecting"]),
        ("gen_object", &["size", "gi_name", "gi_iframe", "gi_frame_state"]),
        ("llist_node", &["next", "prev"]),
        ("debugger_support", &["eval_breaker", "remote_debugger_support", "remote_debugging_enabled", "debugger_pending_call", "debugger_script_path", "debugger_script_path_size"]),
    ]},
    BlockLayout { version: (3, 15), sections: &[
        ("runtime_state", &["size", "finalizing", "interpreters_head"]),
        ("interpreter_state", &["size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict", "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked", "gil_runtime_state_holder", "code_object_generation", "tlbc_generation"]),
        ("thread_state", &["size", "prev", "next", "interp", "current_frame", "base_frame", "last_profiled_frame", "last_profiled_frame_seq", "thread_id", "native_thread_id", "datastack_chunk", "status", "holds_gil", "gil_requested", "current_exception", "exc_state"]),
        ("err_stackitem", &["exc_value"]),
        ("interpreter_frame", &["size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"]),
        ("code_object", &["size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount", "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc"]),
        ("pyobject", &["size", "ob_type"]),
        ("type_object", &["size", "tp_name", "tp_repr", "tp_flags", "tp_basicsize", "tp_dictoffset"]),
        ("heap_type_object", &["size", "ht_cached_keys"]),
        ("tuple_object", &["size", "ob_item", "ob_size"]),
        ("list_object", &["size", "ob_item", "ob_size"]),
        ("set_object", &["size", "used", "table", "mask"]),
        ("dict_object", &["size", "ma_keys", "ma_values"]),
        ("float_object", &["size", "ob_fval"]),
        ("long_object", &["size", "lv_tag", "ob_digit"]),
        ("bytes_object", &["size", "ob_size", "ob_sval"]),
        ("unicode_object", &["size", "state", "length", "asciiobject_size", "compactunicodeobject_size"]),
        ("gc", &["size", "collecting", "frame", "generation_stats_size", "generation_stats"]),
        ("gen_object", &["size", "gi_name", "gi_iframe", "gi_frame_state"]),
        ("llist_node", &["next", "prev"]),
        ("debugger_support", &["eval_breaker", "remote_debugger_support", "remote_debugging_enabled", "debugger_pending_call", "debugger_script_path", "debugger_script_path_size"]),
    ]},
];

/// The layout of `major.minor`'s block.
pub fn block_layout(version: (u8, u8)) -> Option<&'static BlockLayout> {
    BLOCK_LAYOUTS.iter().find(|b| b.version == version)
}

/// `(Layout field, member of _Py_DebugOffsets)`: the value of the member is the value of the [`Layout`] field.
/// A member the version's block does not have (e.g. `thread_state.base_frame` before 3.15) leaves the field as
/// the base row has it.
pub const FIELDS: &[(&str, &str)] = &[
    ("runtime_interpreters_head", "runtime_state.interpreters_head"),
    ("interp_next", "interpreter_state.next"),
    ("interp_id", "interpreter_state.id"),
    ("interp_tstate_head", "interpreter_state.threads_head"),
    ("interp_gil_ptr", "interpreter_state.ceval_gil"),
    ("interp_code_gen", "interpreter_state.code_object_generation"),
    ("tstate_next", "thread_state.next"),
    ("tstate_interp", "thread_state.interp"),
    ("tstate_current_frame", "thread_state.current_frame"),
    ("tstate_thread_id", "thread_state.thread_id"),
    ("tstate_native_thread_id", "thread_state.native_thread_id"),
    ("tstate_base_frame", "thread_state.base_frame"),
    ("tstate_datastack_chunk", "thread_state.datastack_chunk"),
    ("tstate_holds_gil", "thread_state.holds_gil"),
    ("tstate_gil_requested", "thread_state.gil_requested"),
    ("frame_back", "interpreter_frame.previous"),
    ("frame_code", "interpreter_frame.executable"),
    ("frame_instr", "interpreter_frame.instr_ptr"),
    ("frame_localsplus", "interpreter_frame.localsplus"),
    ("frame_owner", "interpreter_frame.owner"),
    ("code_size", "code_object.size"),
    ("code_filename", "code_object.filename"),
    ("code_name", "code_object.name"),
    ("code_qualname", "code_object.qualname"),
    ("code_linetable", "code_object.linetable"),
    ("code_firstlineno", "code_object.firstlineno"),
    ("code_argcount", "code_object.argcount"),
    ("code_varnames", "code_object.localsplusnames"),
    ("code_code", "code_object.co_code_adaptive"),
    ("object_type", "pyobject.ob_type"),
    ("type_name", "type_object.tp_name"),
    ("tuple_item", "tuple_object.ob_item"),
    ("bytes_size", "bytes_object.ob_size"),
    ("bytes_data", "bytes_object.ob_sval"),
    ("unicode_state", "unicode_object.state"),
    ("unicode_length", "unicode_object.length"),
    ("ascii_data", "unicode_object.asciiobject_size"),
    ("compact_data", "unicode_object.compactunicodeobject_size"),
    ("interp_modules", "interpreter_state.imports_modules"),
    ("dict_keys", "dict_object.ma_keys"),
    ("dict_values", "dict_object.ma_values"),
    ("long_tag", "long_object.lv_tag"),
    ("long_digits", "long_object.ob_digit"),
    ("type_basicsize", "type_object.tp_basicsize"),
    ("type_dictoffset", "type_object.tp_dictoffset"),
    ("heaptype_cached_keys", "heap_type_object.ht_cached_keys"),
];

/// `interpreter_state.gil_runtime_state`: offset of the interpreter's own `struct _gil_runtime_state _gil`;
/// `gil_locked` / `gil_last_holder` are [`GIL_LOCKED`] / [`GIL_HOLDER`] minus this one.
pub const GIL_STATE: &str = "interpreter_state.gil_runtime_state";
/// Offset of `_gil.locked` in the interpreter.
pub const GIL_LOCKED: &str = "interpreter_state.gil_runtime_state_locked";
/// Offset of `_gil.last_holder` in the interpreter.
pub const GIL_HOLDER: &str = "interpreter_state.gil_runtime_state_holder";
/// `interpreter_state.gc` + `gc.collecting`: `interp_gc_collecting` (3.13+ blocks have both).
pub const GC_STATE: &str = "interpreter_state.gc";
/// Offset of `collecting` in the interpreter's `struct _gc_runtime_state`.
pub const GC_COLLECTING: &str = "gc.collecting";
/// `sizeof(struct _gc_runtime_state)`.
pub const GC_SIZE: &str = "gc.size";

/// `(size member, Layout fields that are offsets inside that struct)`: each such offset plus 4 must not exceed
/// the size (a block read with the wrong positions, or a field moved out of its struct, is refused).
pub const SIZES: &[(&str, &[&str])] = &[
    ("runtime_state.size", &["runtime_interpreters_head"]),
    (
        "interpreter_state.size",
        &["interp_next", "interp_id", "interp_tstate_head", "interp_gil_ptr", "interp_code_gen", "interp_modules"],
    ),
    (
        "thread_state.size",
        &[
            "tstate_next",
            "tstate_interp",
            "tstate_current_frame",
            "tstate_thread_id",
            "tstate_native_thread_id",
            "tstate_base_frame",
            "tstate_datastack_chunk",
            "tstate_holds_gil",
            "tstate_gil_requested",
        ],
    ),
    ("interpreter_frame.size", &["frame_back", "frame_code", "frame_instr", "frame_localsplus", "frame_owner"]),
    (
        "code_object.size",
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
    ("pyobject.size", &["object_type"]),
    ("type_object.size", &["type_name", "type_basicsize", "type_dictoffset"]),
    ("dict_object.size", &["dict_keys", "dict_values"]),
    ("long_object.size", &["long_tag", "long_digits"]),
    ("tuple_object.size", &["tuple_item"]),
    ("bytes_object.size", &["bytes_size"]),
    ("unicode_object.size", &["unicode_state", "unicode_length"]),
];

/// Layout fields whose value is part of the stable object ABI of every CPython 3.x GIL build on x86-64
/// (PyObject header, PyVarObject, tp_name, bytes data, str length): a block read with the wrong positions is
/// caught by these (the expected value is the base row's).
pub const SENTINELS: &[&str] = &["object_type", "type_name", "bytes_size", "bytes_data", "unicode_length"];

/// `base` with every field that [`FIELDS`] reads from a member `block` does not have set to -1 ("absent"): the
/// base for reading a version newer than every row through an older block layout, which must not inherit offsets
/// of members (e.g. 3.15's `thread_state.base_frame`) that nothing in its block vouches for.
pub fn absent_unless_in(base: &Layout, block: &BlockLayout) -> Layout {
    let mut l = *base;
    for (name, value) in l.fields_mut() {
        if FIELDS.iter().any(|(f, m)| *f == name && block.position(m).is_none()) {
            *value = -1;
        }
    }
    l
}

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

/// Builds a [`Layout`] for `version` from a `_Py_DebugOffsets` block of layout `block`. Values the block does
/// not carry (enum values, bit positions, fields of other versions) come from `base`, the row the version is
/// profiled as. Refuses (with the reason) a block that fails the checks: the block as long as its layout, every
/// offset plausible and inside the size its struct declares, the ABI-stable sentinel fields equal to `base`'s; so
/// a block whose own layout moved is not misread.
pub fn layout_from_debug_offsets(
    debug: &[u8],
    block: &BlockLayout,
    version: (u8, u8),
    base: &Layout,
) -> Result<Layout, String> {
    if debug.len() < block.size() as usize {
        return Err(format!("_Py_DebugOffsets cut short ({} of {} bytes)", debug.len(), block.size()));
    }
    let raw = |member: &str| -> Option<Result<u64, String>> {
        let pos = block.position(member)?;
        Some(u64_at(debug, pos).ok_or_else(|| format!("_Py_DebugOffsets cut short at byte {pos}")))
    };
    let offset = |member: &str| -> Option<Result<i32, String>> {
        raw(member).map(|r| {
            r.and_then(|v| {
                i32::try_from(v)
                    .ok()
                    .filter(|v| *v < 1 << 15)
                    .ok_or_else(|| format!("implausible offset {v} of {member}"))
            })
        })
    };
    let mut l = Layout { version, ..*base };
    let mut vals: HashMap<&str, i32> = HashMap::new();
    for (field, member) in FIELDS {
        if let Some(v) = offset(member) {
            vals.insert(field, v?);
        }
    }
    let required = |what: &str| format!("_Py_DebugOffsets of this layout has no {what}");
    let gil = offset(GIL_STATE).ok_or_else(|| required(GIL_STATE))??;
    let gil_locked = offset(GIL_LOCKED).ok_or_else(|| required(GIL_LOCKED))?? - gil;
    let gil_last_holder = offset(GIL_HOLDER).ok_or_else(|| required(GIL_HOLDER))?? - gil;
    // A sum of two members (not in FIELDS): `collecting` inside the gc state, the gc state inside the interpreter.
    if let (Some(gc), Some(collecting), Some(size)) = (offset(GC_STATE), offset(GC_COLLECTING), raw(GC_SIZE)) {
        let (gc, collecting) = (gc?, collecting?);
        if i64::from(collecting) + 4 > i64::try_from(size?).unwrap_or(i64::MAX) {
            return Err(format!("_Py_DebugOffsets not in the layout pyperf reads (gc.collecting = {collecting})"));
        }
        vals.insert("interp_gc_collecting", gc + collecting);
    }
    let base_fields = base.fields();
    for s in SENTINELS {
        let want = base_fields.iter().find(|f| f.0 == *s).map_or(-1, |f| f.1);
        let got = vals.get(s).copied().unwrap_or(-1);
        if got != want {
            return Err(format!("_Py_DebugOffsets not in the layout pyperf reads ({s} = {got}, expected {want})"));
        }
    }
    for (size_member, fields) in SIZES {
        // Sizes may be large (sizeof(_PyRuntimeState) is ~280 KB on 3.13): not limited like offsets.
        let size = raw(size_member).ok_or_else(|| required(size_member))??;
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        for f in *fields {
            let Some(&v) = vals.get(f) else { continue };
            if v < 0 || i64::from(v) + 4 > size {
                return Err(format!(
                    "_Py_DebugOffsets not in the layout pyperf reads ({f} = {v} outside {size_member} = {size})"
                ));
            }
        }
    }
    if !(0..=64).contains(&gil_locked) || !(0..=64).contains(&gil_last_holder) {
        return Err(format!("implausible GIL offsets (locked {gil_locked}, last_holder {gil_last_holder})"));
    }
    // Every field the block gave, by name (the exhaustive list of Layout::fields keeps this complete).
    for (name, value) in l.fields_mut() {
        if let Some(&v) = vals.get(name) {
            *value = v;
        }
    }
    if !vals.contains_key("compact_data") {
        // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (3.12+), when the block does not say.
        l.compact_data = l.ascii_data + (base.compact_data - base.ascii_data);
    }
    l.gil_locked = gil_locked;
    l.gil_last_holder = gil_last_holder;
    Ok(l)
}

/// Layouts built at run time live as long as the program; equal ones are shared, so that
/// profiling many processes of one interpreter keeps one copy.
pub fn intern(l: Layout) -> &'static Layout {
    static BUILT: Mutex<Vec<&'static Layout>> = Mutex::new(Vec::new());
    intern_in(&BUILT, l)
}

/// `v` leaked to live as long as the program, or the equal value `set` already holds.
pub fn intern_in<T: PartialEq + 'static>(set: &Mutex<Vec<&'static T>>, v: T) -> &'static T {
    let mut built = set.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = built.iter().find(|b| ***b == v) {
        return found;
    }
    let leaked: &'static T = Box::leak(Box::new(v));
    built.push(leaked);
    leaked
}
