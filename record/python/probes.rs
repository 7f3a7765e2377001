//! How each [`Layout`] field is found in an interpreter's DWARF: the conformance probes.
//!
//! `tests/conformance.rs` runs gdb on the interpreter of every row (the list in `testdata/interpreters`) with
//! [`GDB_SCRIPT`] and compares every field of the row's layout with what the DWARF says; the probe table lives
//! here, beside the table it checks, so that adding a version is a row, a column and (if a member moved) a
//! probe, in one place.

#[cfg(doc)]
use super::layout::Layout;

/// A `(major, minor)` version.
pub type V = (u8, u8);
/// Before every version.
pub const FIRST: V = (2, 0);
/// After every version.
pub const LAST: V = (3, 255);
/// The first 3.x.
pub const PY3: V = (3, 0);

/// How to find one [`Layout`] field in the DWARF.
///
/// Expressions are `kind|args` strings evaluated by the gdb script:
/// `off|TYPE|member.path` (byte offset), `size|TYPE` (sizeof), `bit|TYPE|member.path` (bit
/// position of the last member within its parent), `val|EXPR` (an integer expression).
pub struct Probe {
    /// The [`Layout`] field.
    pub field: &'static str,
    /// `(first, last, expr)`: the expression giving the field for versions in `first..=last`.
    /// Where the field is -1, every expression listed here (each valid on some other
    /// version, so not a typo) must make gdb fail.
    pub at: &'static [(V, V, &'static str)],
    /// `(first, last, expr)`: extra witnesses of absence: where the field is -1 within the
    /// range, gdb must fail with "There is no member named" (the struct exists, the member
    /// does not).
    pub absent_member: &'static [(V, V, &'static str)],
}

const fn p(field: &'static str, at: &'static [(V, V, &'static str)]) -> Probe {
    Probe { field, at, absent_member: &[] }
}

/// One probe per [`Layout`] field.
#[rustfmt::skip]
pub const PROBES: &[Probe] = &[
    p("runtime_interpreters_head", &[((3, 7), LAST, "off|_PyRuntimeState|interpreters.head")]),
    p("runtime_interpreters_main", &[((3, 7), LAST, "off|_PyRuntimeState|interpreters.main")]),
    p("runtime_tstate_current", &[((3, 7), (3, 11), "off|_PyRuntimeState|gilstate.tstate_current")]),
    p("runtime_autotss_key", &[
        ((3, 7), (3, 11), "off|_PyRuntimeState|gilstate.autoTSSkey"),
        ((3, 12), LAST, "off|_PyRuntimeState|autoTSSkey"),
    ]),
    p("runtime_gil_locked", &[((3, 7), (3, 11), "off|_PyRuntimeState|ceval.gil.locked")]),
    p("runtime_gil_last_holder", &[((3, 7), (3, 11), "off|_PyRuntimeState|ceval.gil.last_holder")]),
    p("runtime_debug_offsets", &[((3, 13), LAST, "off|_PyRuntimeState|debug_offsets")]),
    p("tss_key", &[((3, 7), LAST, "off|Py_tss_t|_key")]),
    p("interp_next", &[(FIRST, LAST, "off|PyInterpreterState|next")]),
    p("interp_id", &[((3, 7), LAST, "off|PyInterpreterState|id")]),
    p("interp_tstate_head", &[
        (FIRST, (3, 10), "off|PyInterpreterState|tstate_head"),
        ((3, 11), LAST, "off|PyInterpreterState|threads.head"),
    ]),
    p("interp_gil_ptr", &[((3, 12), LAST, "off|PyInterpreterState|ceval.gil")]),
    p("interp_code_gen", &[((3, 14), LAST, "off|PyInterpreterState|_code_object_generation")]),
    p("runtime_gc_collecting", &[((3, 7), (3, 8), "off|_PyRuntimeState|gc.collecting")]),
    p("interp_gc_collecting", &[((3, 9), LAST, "off|PyInterpreterState|gc.collecting")]),
    p("gil_locked", &[((3, 7), LAST, "off|struct _gil_runtime_state|locked")]),
    p("gil_last_holder", &[((3, 7), LAST, "off|struct _gil_runtime_state|last_holder")]),
    p("tstate_next", &[(FIRST, LAST, "off|PyThreadState|next")]),
    p("tstate_interp", &[(FIRST, LAST, "off|PyThreadState|interp")]),
    p("tstate_frame", &[(FIRST, (3, 10), "off|PyThreadState|frame")]),
    p("tstate_cframe", &[((3, 10), (3, 12), "off|PyThreadState|cframe")]),
    Probe {
        field: "cframe_current_frame",
        at: &[((3, 11), (3, 12), "off|_PyCFrame|current_frame")],
        // 3.10 has a CFrame, but without current_frame.
        absent_member: &[((3, 10), (3, 10), "off|CFrame|current_frame")],
    },
    p("tstate_current_frame", &[((3, 13), LAST, "off|PyThreadState|current_frame")]),
    p("tstate_thread_id", &[(FIRST, LAST, "off|PyThreadState|thread_id")]),
    p("tstate_native_thread_id", &[((3, 11), LAST, "off|PyThreadState|native_thread_id")]),
    p("tstate_base_frame", &[((3, 15), LAST, "off|PyThreadState|base_frame")]),
    p("tstate_datastack_chunk", &[((3, 11), LAST, "off|PyThreadState|datastack_chunk")]),
    p("tstate_holds_gil", &[((3, 15), LAST, "off|PyThreadState|holds_gil")]),
    p("tstate_gil_requested", &[((3, 15), LAST, "off|PyThreadState|gil_requested")]),
    p("tstate_state", &[((3, 13), LAST, "off|PyThreadState|state")]),
    p("tstate_whence", &[((3, 13), LAST, "off|PyThreadState|_whence")]),
    p("frame_back", &[
        (FIRST, (3, 10), "off|PyFrameObject|f_back"),
        ((3, 11), LAST, "off|struct _PyInterpreterFrame|previous"),
    ]),
    p("frame_code", &[
        (FIRST, (3, 10), "off|PyFrameObject|f_code"),
        ((3, 11), (3, 12), "off|struct _PyInterpreterFrame|f_code"),
        ((3, 13), LAST, "off|struct _PyInterpreterFrame|f_executable"),
    ]),
    p("frame_lasti", &[(FIRST, (3, 10), "off|PyFrameObject|f_lasti")]),
    p("frame_instr", &[
        ((3, 11), (3, 12), "off|struct _PyInterpreterFrame|prev_instr"),
        ((3, 13), LAST, "off|struct _PyInterpreterFrame|instr_ptr"),
    ]),
    p("frame_owner", &[((3, 11), LAST, "off|struct _PyInterpreterFrame|owner")]),
    p("frame_is_entry", &[((3, 11), (3, 11), "off|struct _PyInterpreterFrame|is_entry")]),
    p("frame_owned_by_cstack", &[((3, 12), (3, 14), "val|FRAME_OWNED_BY_CSTACK")]),
    p("frame_owned_by_generator", &[((3, 11), LAST, "val|FRAME_OWNED_BY_GENERATOR")]),
    p("frame_localsplus", &[
        (FIRST, (3, 10), "off|PyFrameObject|f_localsplus"),
        ((3, 11), LAST, "off|struct _PyInterpreterFrame|localsplus"),
    ]),
    p("code_argcount", &[(FIRST, LAST, "off|PyCodeObject|co_argcount")]),
    p("code_flags", &[(FIRST, LAST, "off|PyCodeObject|co_flags")]),
    p("code_firstlineno", &[(FIRST, LAST, "off|PyCodeObject|co_firstlineno")]),
    p("code_filename", &[(FIRST, LAST, "off|PyCodeObject|co_filename")]),
    p("code_name", &[(FIRST, LAST, "off|PyCodeObject|co_name")]),
    p("code_qualname", &[((3, 11), LAST, "off|PyCodeObject|co_qualname")]),
    p("code_varnames", &[
        (FIRST, (3, 10), "off|PyCodeObject|co_varnames"),
        ((3, 11), LAST, "off|PyCodeObject|co_localsplusnames"),
    ]),
    p("code_linetable", &[
        (FIRST, (3, 9), "off|PyCodeObject|co_lnotab"),
        ((3, 10), LAST, "off|PyCodeObject|co_linetable"),
    ]),
    p("code_code", &[
        (FIRST, (3, 10), "off|PyCodeObject|co_code"),
        ((3, 11), LAST, "off|PyCodeObject|co_code_adaptive"),
    ]),
    p("code_size", &[(FIRST, LAST, "size|PyCodeObject")]),
    p("unicode_state", &[(PY3, LAST, "off|PyASCIIObject|state")]),
    p("unicode_length", &[(PY3, LAST, "off|PyASCIIObject|length")]),
    p("ascii_data", &[(PY3, LAST, "size|PyASCIIObject")]),
    p("compact_data", &[(PY3, LAST, "size|PyCompactUnicodeObject")]),
    p("unicode_kind_shift", &[(PY3, LAST, "bit|PyASCIIObject|state.kind")]),
    p("unicode_compact_shift", &[(PY3, LAST, "bit|PyASCIIObject|state.compact")]),
    p("unicode_ascii_shift", &[(PY3, LAST, "bit|PyASCIIObject|state.ascii")]),
    p("bytes_size", &[(FIRST, LAST, "off|PyVarObject|ob_size")]),
    p("bytes_data", &[
        (FIRST, (2, 7), "off|PyStringObject|ob_sval"),
        (PY3, LAST, "off|PyBytesObject|ob_sval"),
    ]),
    p("tuple_item", &[(FIRST, LAST, "off|PyTupleObject|ob_item")]),
    p("object_type", &[(FIRST, LAST, "off|PyObject|ob_type")]),
    p("type_name", &[(FIRST, LAST, "off|PyTypeObject|tp_name")]),
    p("type_dealloc", &[(FIRST, LAST, "off|PyTypeObject|tp_dealloc")]),
    p("interp_modules", &[
        (FIRST, (3, 11), "off|PyInterpreterState|modules"),
        ((3, 12), LAST, "off|PyInterpreterState|imports.modules"),
    ]),
    p("dict_keys", &[(PY3, LAST, "off|PyDictObject|ma_keys")]),
    p("dict_values", &[(PY3, LAST, "off|PyDictObject|ma_values")]),
    p("dict_table", &[(FIRST, (2, 7), "off|PyDictObject|ma_table")]),
    p("dict_mask", &[(FIRST, (2, 7), "off|PyDictObject|ma_mask")]),
    p("dictkeys_size", &[(PY3, (3, 10), "off|PyDictKeysObject|dk_size")]),
    p("dictkeys_log2_size", &[((3, 11), LAST, "off|PyDictKeysObject|dk_log2_size")]),
    p("dictkeys_log2_index_bytes", &[((3, 11), LAST, "off|PyDictKeysObject|dk_log2_index_bytes")]),
    p("dictkeys_kind", &[((3, 11), LAST, "off|PyDictKeysObject|dk_kind")]),
    p("dictkeys_nentries", &[(PY3, LAST, "off|PyDictKeysObject|dk_nentries")]),
    p("dictkeys_indices", &[(PY3, LAST, "off|PyDictKeysObject|dk_indices")]),
    p("dictvalues_values", &[((3, 11), LAST, "off|struct _dictvalues|values")]),
    Probe {
        field: "dictvalues_capacity",
        at: &[((3, 13), LAST, "off|struct _dictvalues|capacity")],
        absent_member: &[((3, 11), (3, 12), "off|struct _dictvalues|capacity")],
    },
    Probe {
        field: "dictvalues_valid",
        at: &[((3, 13), LAST, "off|struct _dictvalues|valid")],
        absent_member: &[((3, 11), (3, 12), "off|struct _dictvalues|valid")],
    },
    p("dict_entry_size", &[(FIRST, (2, 7), "size|PyDictEntry"), (PY3, LAST, "size|PyDictKeyEntry")]),
    p("dict_unicode_entry_size", &[((3, 11), LAST, "size|PyDictUnicodeEntry")]),
    p("type_basicsize", &[(FIRST, LAST, "off|PyTypeObject|tp_basicsize")]),
    p("type_dictoffset", &[(FIRST, LAST, "off|PyTypeObject|tp_dictoffset")]),
    p("heaptype_cached_keys", &[(PY3, LAST, "off|PyHeapTypeObject|ht_cached_keys")]),
    p("long_digits", &[
        (FIRST, (3, 11), "off|PyLongObject|ob_digit"),
        ((3, 12), LAST, "off|PyLongObject|long_value.ob_digit"),
    ]),
    p("long_tag", &[((3, 12), LAST, "off|PyLongObject|long_value.lv_tag")]),
    p("tstate_context", &[((3, 7), LAST, "off|PyThreadState|context")]),
    p("context_vars", &[((3, 7), LAST, "off|PyContext|ctx_vars")]),
    p("hamt_root", &[((3, 7), LAST, "off|PyHamtObject|h_root")]),
    p("hamt_bitmap", &[((3, 7), LAST, "off|PyHamtNode_Bitmap|b_bitmap")]),
    p("hamt_bitmap_array", &[((3, 7), LAST, "off|PyHamtNode_Bitmap|b_array")]),
    p("hamt_array", &[((3, 7), LAST, "off|PyHamtNode_Array|a_array")]),
    p("contextvar_hash", &[((3, 7), LAST, "off|PyContextVar|var_hash")]),
    p("contextvar_name", &[((3, 7), LAST, "off|PyContextVar|var_name")]),
    p("int_value", &[(FIRST, (2, 7), "off|PyIntObject|ob_ival")]),
];

/// A gdb Python script: given `PROBES = [...]` (a list of `kind|args` strings) before it, evaluates each
/// and prints one `@@\tINDEX\tOK\tVALUE` or `@@\tINDEX\tERR\tMESSAGE` line per entry, then `@@\tEND`.
pub const GDB_SCRIPT: &str = r#"
import gdb

def member(t, path):
    pos = None
    for name in path.split("."):
        t = t.strip_typedefs()
        found = [f for f in t.fields() if f.name == name]
        if not found:
            raise gdb.error("There is no member named %s." % name)
        pos = found[0].bitpos
        t = found[0].type
    return pos

def ev(kind, args):
    if kind == "off":
        return int(gdb.parse_and_eval("(long)&((%s *)0)->%s" % (args[0], args[1])))
    if kind == "size":
        return int(gdb.parse_and_eval("(long)sizeof(%s)" % args[0]))
    if kind == "val":
        return int(gdb.parse_and_eval("(long)(%s)" % args[0]))
    if kind == "bit":
        return member(gdb.parse_and_eval("(%s *)0" % args[0]).type.target(), args[1])
    raise ValueError("bad probe kind %r" % kind)

for i, probe in enumerate(PROBES):
    parts = probe.split("|")
    try:
        print("@@\t%d\tOK\t%d" % (i, ev(parts[0], parts[1:])))
    except gdb.error as e:
        print("@@\t%d\tERR\t%s" % (i, str(e).replace("\n", " ")))
print("@@\tEND")
"#;

/// Is `v` in `first..=last`?
pub fn in_range(v: V, (first, last): (V, V)) -> bool {
    first <= v && v <= last
}

/// The probe of `field`.
pub fn probe_for(field: &str) -> Option<&'static Probe> {
    PROBES.iter().find(|p| p.field == field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::layout::LAYOUTS;
    use crate::python::versions::ROWS;

    #[test]
    fn probe_table_matches_layout_fields() {
        let names: Vec<&str> = LAYOUTS[0].fields().iter().map(|f| f.0).collect();
        for name in &names {
            let n = PROBES.iter().filter(|p| p.field == *name).count();
            assert_eq!(n, 1, "field {name} must have exactly one probe (has {n})");
        }
        for probe in PROBES {
            assert!(names.contains(&probe.field), "probe for unknown field {}", probe.field);
            for r in &ROWS {
                let n = probe.at.iter().filter(|a| in_range(r.version, (a.0, a.1))).count();
                assert!(n <= 1, "{}: overlapping expressions for {:?}", probe.field, r.version);
            }
            for a in probe.at {
                let used = ROWS.iter().any(|r| in_range(r.version, (a.0, a.1)));
                assert!(used, "{}: `{}` applies to no supported version", probe.field, a.2);
            }
        }
    }
}
