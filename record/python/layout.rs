//! CPython struct offsets, one column per version of the table in [`super::versions`].
//!
//! One [`Layout`] per table version for x86-64, glibc, default (non-debug, GIL) builds. Every value is checked
//! by `tests/conformance.rs` against the DWARF of the interpreter of that version (one gdb batch per version,
//! driven by [`super::probes::PROBES`]), and every `-1` ("absent in this version") is checked to make gdb fail.
//!
//! Conventions:
//! - All fields except `version` are `i32`; `-1` means "this member does not exist in this version".
//! - Offsets are byte offsets from the start of the named C struct unless the doc comment says
//!   otherwise (a few entries are bit positions or enum values; they say so).
//! - The read width of a member is given in brackets where it matters, e.g. `[u64]`, `[i32]`, `[u8]`.
//!
//! Not covered: free-threaded builds (`Py_GIL_DISABLED`, different object header and offsets; refused through
//! `_Py_DebugOffsets.free_threaded`), debug builds (`Py_DEBUG` / `Py_TRACE_REFS` change the object header and
//! struct layouts), 32-bit and musl targets.
//!
//! Adding a version: a column here (append it to [`COLUMNS`]), a row in [`super::versions`], a probe in
//! [`super::probes`] if a member moved or was renamed; the conformance test's failure message prints the
//! DWARF-derived rows in table format.

/// Offsets of the CPython internals the profiler reads, for one `major.minor` version.
///
/// Which frame chain to follow (decide on the *deeper* field, not on `tstate_cframe`, which also
/// exists in 3.10 where it does not lead to frames):
/// - `tstate_frame != -1` (<= 3.10): `tstate->frame` is a `PyFrameObject*`, chain by `f_back`.
/// - `cframe_current_frame != -1` (3.11-3.12): `tstate->cframe->current_frame`, an
///   `_PyInterpreterFrame*`, chain by `previous`.
/// - `tstate_current_frame != -1` (3.13+): `tstate->current_frame`, chain by `previous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `(major, minor)` this layout is for.
    pub version: (u8, u8),

    // ---- _PyRuntimeState (the `_PyRuntime` symbol, 3.7+) ----
    /// `_PyRuntimeState.interpreters.head` [ptr] (3.7+). Pre-3.7: symbol `interp_head`.
    pub runtime_interpreters_head: i32,
    /// `_PyRuntimeState.interpreters.main` [ptr] (3.7+): the main interpreter (`interpreters.head` is the newest).
    pub runtime_interpreters_main: i32,
    /// `_PyRuntimeState.gilstate.tstate_current` [ptr] (3.7-3.11): the GIL holder's thread state.
    /// Pre-3.7: symbol `_PyThreadState_Current`; 3.12+: gone (the C thread-local `_Py_tss_tstate`
    /// replaces it and is NULL while a thread runs with the GIL released).
    pub runtime_tstate_current: i32,
    /// The `Py_tss_t` holding the auto-thread-state TSS key: `_PyRuntimeState.gilstate.autoTSSkey`
    /// (3.7-3.11) / `_PyRuntimeState.autoTSSkey` (3.12+). The pthread key itself is at
    /// `+ tss_key`. Pre-3.7: the static `int autoTLSkey` symbol (.symtab only).
    pub runtime_autotss_key: i32,
    /// `_PyRuntimeState.ceval.gil.locked` [i32] (3.7-3.11). Equals
    /// `ceval.gil` offset + `gil_locked`; kept so the loader need not know the `gil` offset.
    pub runtime_gil_locked: i32,
    /// `_PyRuntimeState.ceval.gil.last_holder` [ptr] (3.7-3.11).
    pub runtime_gil_last_holder: i32,
    /// Extra: `_PyRuntimeState.debug_offsets` (3.13+): the `_Py_DebugOffsets` block (cookie
    /// `"xdebugpy"`, version, `free_threaded`, ...) sits at the very start of `_PyRuntime` (0).
    pub runtime_debug_offsets: i32,
    /// `_PyRuntimeState.gc.collecting` [i32] (3.7-3.8): 1 while the cyclic garbage collector runs (one for the
    /// process). 2.7/3.6: the static `collecting` of gcmodule.c (`.symtab` only); 3.9+: per interpreter,
    /// [`Layout::interp_gc_collecting`].
    pub runtime_gc_collecting: i32,
    /// Extra: `Py_tss_t._key` [u32 pthread_key_t] (3.7+): 4, after `int _is_initialized`.
    pub tss_key: i32,

    // ---- PyInterpreterState (struct _is) ----
    /// `PyInterpreterState.next` [ptr]: the next older interpreter (the list starts at the newest).
    pub interp_next: i32,
    /// `PyInterpreterState.id` [i64] (3.7+): 0 for the main interpreter, then 1, 2, ... as they are created.
    pub interp_id: i32,
    /// First thread state: `PyInterpreterState.tstate_head` (<= 3.10) /
    /// `PyInterpreterState.threads.head` (3.11+) [ptr].
    pub interp_tstate_head: i32,
    /// `PyInterpreterState.ceval.gil` [ptr to `struct _gil_runtime_state`] (3.12+, per-interpreter
    /// GIL); add `gil_locked` / `gil_last_holder` to the pointer.
    pub interp_gil_ptr: i32,
    /// `PyInterpreterState._code_object_generation` [u64] (3.14+): incremented first thing in `code_dealloc`, so
    /// while it stays put no code object of the interpreter has been freed (the BPF check-word cache's count).
    pub interp_code_gen: i32,
    /// `PyInterpreterState.gc.collecting` [i32] (3.9+): 1 while the interpreter's cyclic garbage collector runs.
    pub interp_gc_collecting: i32,

    // ---- struct _gil_runtime_state (3.7+) ----
    /// `struct _gil_runtime_state.locked` [i32] (3.7+). 3.6: static `gil_locked` symbol (.symtab
    /// only); 2.7 has no such variable (its GIL is a plain lock).
    pub gil_locked: i32,
    /// `struct _gil_runtime_state.last_holder` [ptr] (3.7+). 3.6: static `gil_last_holder`
    /// symbol (.symtab only); 2.7: none.
    pub gil_last_holder: i32,

    // ---- PyThreadState (struct _ts) ----
    /// `PyThreadState.next` [ptr].
    pub tstate_next: i32,
    /// `PyThreadState.interp` [ptr].
    pub tstate_interp: i32,
    /// `PyThreadState.frame` [ptr to `PyFrameObject`] (<= 3.10).
    pub tstate_frame: i32,
    /// `PyThreadState.cframe` [ptr] (3.10-3.12). Note: 3.10 already has `cframe` (a `CFrame` with
    /// only `use_tracing` and `previous`), but frames still hang off `tstate->frame` there; the
    /// design notes said 3.11-3.12. Use `cframe_current_frame != -1` to pick the cframe path.
    pub tstate_cframe: i32,
    /// `_PyCFrame.current_frame` [ptr to `_PyInterpreterFrame`] (3.11-3.12).
    pub cframe_current_frame: i32,
    /// `PyThreadState.current_frame` [ptr to `_PyInterpreterFrame`] (3.13+).
    pub tstate_current_frame: i32,
    /// `PyThreadState.thread_id` [u64]: `pthread_self()` (on glibc x86-64 == the thread's fsbase).
    pub tstate_thread_id: i32,
    /// `PyThreadState.native_thread_id` [u64]: the kernel tid. 3.11+ only: the design notes said
    /// 3.8+, but 3.8-3.10 only have `threading.get_native_id()`, not this member (DWARF checked);
    /// match 3.8-3.10 threads by `thread_id` like older versions.
    pub tstate_native_thread_id: i32,
    /// `PyThreadState.base_frame` [ptr to `_PyInterpreterFrame`] (3.15+): the sentinel frame at the bottom of the
    /// thread's stack; a walk that does not end there is incomplete.
    pub tstate_base_frame: i32,
    /// `PyThreadState.datastack_chunk` [ptr to `_PyStackChunk`] (3.11+): the chunk of the thread's data stack that
    /// holds its newest frames; a chunk starts with its `previous` pointer (the older chunk).
    pub tstate_datastack_chunk: i32,
    /// `PyThreadState.holds_gil` [i32] (3.15+): the thread holds the GIL.
    pub tstate_holds_gil: i32,
    /// `PyThreadState.gil_requested` [i32] (3.15+): the thread is waiting for the GIL.
    pub tstate_gil_requested: i32,
    /// `PyThreadState.state` [i32] (3.13+): [`super::versions::THREAD_ATTACHED`] while the thread state is current
    /// on its OS thread and holds its interpreter's GIL (at most one of a thread's thread states is).
    pub tstate_state: i32,
    /// `PyThreadState._whence` [i32] (3.13+): what made it; [`super::versions::WHENCE_EXEC`]: `Interpreter.exec`
    /// (`_PyXI_Enter`), for the call only, with the thread's previous thread state swapped out meanwhile.
    pub tstate_whence: i32,

    // ---- frames: PyFrameObject (<= 3.10) / struct _PyInterpreterFrame (3.11+) ----
    /// `PyFrameObject.f_back` (<= 3.10) / `_PyInterpreterFrame.previous` (3.11+) [ptr].
    pub frame_back: i32,
    /// `PyFrameObject.f_code` (<= 3.10) / `_PyInterpreterFrame.f_code` (3.11-3.12) /
    /// `_PyInterpreterFrame.f_executable` (3.13; `Py_None` on C-stack entry frames) [ptr].
    pub frame_code: i32,
    /// `PyFrameObject.f_lasti` [i32] (<= 3.10): byte offset of the last instruction up to 3.9,
    /// instruction (2-byte code unit) index in 3.10; -1 before the first instruction.
    pub frame_lasti: i32,
    /// `_PyInterpreterFrame.prev_instr` (3.11-3.12) / `.instr_ptr` (3.13) [ptr into the code
    /// object's `co_code_adaptive`]: `(ptr - (code + code_code)) / 2` is the code-unit index.
    /// `prev_instr` points at the last executed unit, `instr_ptr` at the current/next one.
    pub frame_instr: i32,
    /// `_PyInterpreterFrame.owner` [u8 char] (3.11+). Frames whose owner is at least the row's
    /// `hidden_owners_from` (3.12+) are the interpreter's own and skipped.
    pub frame_owner: i32,
    /// `_PyInterpreterFrame.is_entry` [u8 bool] (3.11 only; 3.12 replaced it with C-stack-owned
    /// shim frames).
    pub frame_is_entry: i32,
    /// Extra, a value not an offset: the `FRAME_OWNED_BY_CSTACK` enumerator of
    /// `enum _frameowner` (3.12+; 3.11 has no such owner).
    pub frame_owned_by_cstack: i32,
    /// Extra, a value not an offset: the `FRAME_OWNED_BY_GENERATOR` enumerator of `enum _frameowner` (3.11+): the
    /// owner of a generator's or coroutine's embedded frame, whose run roots a sample carries (asyncio tasks).
    pub frame_owned_by_generator: i32,
    /// `PyFrameObject.f_localsplus` (<= 3.10) / `_PyInterpreterFrame.localsplus` (3.11+).
    pub frame_localsplus: i32,

    // ---- PyCodeObject ----
    /// `PyCodeObject.co_argcount` [i32] (checksum word).
    pub code_argcount: i32,
    /// `PyCodeObject.co_flags` [i32] (checksum word).
    pub code_flags: i32,
    /// `PyCodeObject.co_firstlineno` [i32].
    pub code_firstlineno: i32,
    /// `PyCodeObject.co_filename` [ptr to str; PyString in 2.7].
    pub code_filename: i32,
    /// `PyCodeObject.co_name` [ptr to str; PyString in 2.7].
    pub code_name: i32,
    /// `PyCodeObject.co_qualname` [ptr to str] (3.11+).
    pub code_qualname: i32,
    /// `PyCodeObject.co_varnames` (<= 3.10) / `.co_localsplusnames` (3.11+) [ptr to tuple].
    pub code_varnames: i32,
    /// `PyCodeObject.co_lnotab` (<= 3.9) / `.co_linetable` (3.10+) [ptr to bytes]; the format
    /// changes at 3.10 (PEP 626) and 3.11 (location table).
    pub code_linetable: i32,
    /// `PyCodeObject.co_code` [ptr to bytes] (<= 3.10) / offset of the inline array
    /// `co_code_adaptive` (3.11+, the bytecode lives inside the code object).
    pub code_code: i32,
    /// `sizeof(PyCodeObject)` (includes the first unit(s) of `co_code_adaptive` on 3.11+).
    pub code_size: i32,

    // ---- strings, tuples, types ----
    /// `PyASCIIObject.state` [u32 bitfield] (3.x; 2.7 has no PEP 393 strings).
    pub unicode_state: i32,
    /// `PyASCIIObject.length` [i64], in code points.
    pub unicode_length: i32,
    /// `sizeof(PyASCIIObject)`: compact ASCII data starts here (48 up to 3.11, 40 from 3.12 where
    /// `wstr` was removed).
    pub ascii_data: i32,
    /// `sizeof(PyCompactUnicodeObject)`: compact non-ASCII data starts here.
    pub compact_data: i32,
    /// Extra: bit position of `state.kind` (3 bits: 1/2/4 bytes per char) in the state word.
    pub unicode_kind_shift: i32,
    /// Extra: bit position of `state.compact` (1 bit) in the state word.
    pub unicode_compact_shift: i32,
    /// Extra: bit position of `state.ascii` (1 bit) in the state word.
    pub unicode_ascii_shift: i32,
    /// `PyVarObject.ob_size` [i64] (length of bytes / 2.7 str / tuple).
    pub bytes_size: i32,
    /// `PyBytesObject.ob_sval` (2.7: `PyStringObject.ob_sval`, after `ob_shash` and `ob_sstate`).
    pub bytes_data: i32,
    /// `PyTupleObject.ob_item`.
    pub tuple_item: i32,
    /// `PyObject.ob_type` [ptr].
    pub object_type: i32,
    /// `PyTypeObject.tp_name` [ptr to a C string].
    pub type_name: i32,
    /// `PyTypeObject.tp_dealloc` [ptr to a function]: `PyCode_Type`'s is `code_dealloc`, where code objects are
    /// freed (before 3.14 a uprobe there stands in for `_code_object_generation`).
    pub type_dealloc: i32,

    // ---- objects read to name threads (`threading._active`, `Thread._name`; record/python/threads.rs) ----
    /// `PyInterpreterState.modules` (<= 3.11) / `.imports.modules` (3.12+) [ptr to dict]: `sys.modules`.
    pub interp_modules: i32,
    /// `PyDictObject.ma_keys` [ptr to `PyDictKeysObject`] (3.x).
    pub dict_keys: i32,
    /// `PyDictObject.ma_values` [ptr] (3.x): NULL for a combined table, else the split table's values.
    pub dict_values: i32,
    /// `PyDictObject.ma_table` [ptr to `PyDictEntry[ma_mask + 1]`] (2.7).
    pub dict_table: i32,
    /// `PyDictObject.ma_mask` [i64] (2.7): slots - 1.
    pub dict_mask: i32,
    /// `PyDictKeysObject.dk_size` [i64] (3.6-3.10): slots of the index table.
    pub dictkeys_size: i32,
    /// `PyDictKeysObject.dk_log2_size` [u8] (3.11+).
    pub dictkeys_log2_size: i32,
    /// `PyDictKeysObject.dk_log2_index_bytes` [u8] (3.11+): log2 of the index table's size in bytes.
    pub dictkeys_log2_index_bytes: i32,
    /// `PyDictKeysObject.dk_kind` [u8] (3.11+): 0 general entries (hash, key, value), 1 unicode and 2 split
    /// (key, value).
    pub dictkeys_kind: i32,
    /// `PyDictKeysObject.dk_nentries` [i64] (3.6+): entries used (deleted ones included).
    pub dictkeys_nentries: i32,
    /// `PyDictKeysObject.dk_indices` (3.6+): the index table; the entries follow it.
    pub dictkeys_indices: i32,
    /// `struct _dictvalues.values` (3.11+): where a split table's values start in what `ma_values` points to (3.6-3.10:
    /// absent, `ma_values` is the array itself).
    pub dictvalues_values: i32,
    /// `struct _dictvalues.capacity` [u8] (3.13+): values the array holds.
    pub dictvalues_capacity: i32,
    /// `struct _dictvalues.valid` [u8] (3.13+): an object's inline values are in use (else its dict holds them).
    pub dictvalues_valid: i32,
    /// `sizeof(PyDictKeyEntry)` (3.x) / `sizeof(PyDictEntry)` (2.7): (hash, key, value).
    pub dict_entry_size: i32,
    /// `sizeof(PyDictUnicodeEntry)` (3.11+): (key, value), in tables of `dk_kind` 1 and 2.
    pub dict_unicode_entry_size: i32,
    /// `PyTypeObject.tp_basicsize` [i64]: 3.13+ inline values start this far into the object.
    pub type_basicsize: i32,
    /// `PyTypeObject.tp_dictoffset` [i64]: where an instance's `__dict__` pointer is (> 0: from the object's start).
    pub type_dictoffset: i32,
    /// `PyHeapTypeObject.ht_cached_keys` [ptr to `PyDictKeysObject`] (3.x): the keys its instances share.
    pub heaptype_cached_keys: i32,
    /// `PyLongObject.ob_digit` (<= 3.11) / `.long_value.ob_digit` (3.12+): 30-bit digits [u32], least significant
    /// first; their count is `ob_size` ([`Layout::bytes_size`], <= 3.11) or `lv_tag >> 3` (3.12+).
    pub long_digits: i32,
    /// `PyLongObject.long_value.lv_tag` [u64] (3.12+): digit count << 3 | sign (0 positive, 1 zero, 2 negative).
    pub long_tag: i32,
    /// `PyIntObject.ob_ival` [i64] (2.7).
    pub int_value: i32,
    /// `PyThreadState.context` [ptr to `PyContext`] (3.7+): the thread's current `contextvars` context.
    pub tstate_context: i32,
    /// `PyContext.ctx_vars` [ptr to `PyHamtObject`]: the context's variables, an immutable mapping.
    pub context_vars: i32,
    /// `PyHamtObject.h_root` [ptr to a HAMT node].
    pub hamt_root: i32,
    /// `PyHamtNode_Bitmap.b_bitmap` [u32]: which of the 32 slots of this level the node holds.
    pub hamt_bitmap: i32,
    /// `PyHamtNode_Bitmap.b_array`: (key, value) pairs, one per set bit, key NULL when the value is a sub-node.
    pub hamt_bitmap_array: i32,
    /// `PyHamtNode_Array.a_array`: 32 sub-node pointers (NULL: none).
    pub hamt_array: i32,
    /// `PyContextVar.var_hash` [i64]: the hash the HAMT files the variable under.
    pub contextvar_hash: i32,
    /// `PyContextVar.var_name` [ptr to str].
    pub contextvar_name: i32,
}

/// Calls `$m!` with every offset field of [`Layout`] (not `version`), in declaration order: the one list
/// [`Layout::fields`] and [`Layout::fields_mut`] are made from.
macro_rules! with_fields {
    ($m:ident) => {
        $m! {
            runtime_interpreters_head,
            runtime_interpreters_main,
            runtime_tstate_current,
            runtime_autotss_key,
            runtime_gil_locked,
            runtime_gil_last_holder,
            runtime_debug_offsets,
            runtime_gc_collecting,
            tss_key,
            interp_next,
            interp_id,
            interp_tstate_head,
            interp_gil_ptr,
            interp_code_gen,
            interp_gc_collecting,
            gil_locked,
            gil_last_holder,
            tstate_next,
            tstate_interp,
            tstate_frame,
            tstate_cframe,
            cframe_current_frame,
            tstate_current_frame,
            tstate_thread_id,
            tstate_native_thread_id,
            tstate_base_frame,
            tstate_datastack_chunk,
            tstate_holds_gil,
            tstate_gil_requested,
            tstate_state,
            tstate_whence,
            frame_back,
            frame_code,
            frame_lasti,
            frame_instr,
            frame_owner,
            frame_is_entry,
            frame_owned_by_cstack,
            frame_owned_by_generator,
            frame_localsplus,
            code_argcount,
            code_flags,
            code_firstlineno,
            code_filename,
            code_name,
            code_qualname,
            code_varnames,
            code_linetable,
            code_code,
            code_size,
            unicode_state,
            unicode_length,
            ascii_data,
            compact_data,
            unicode_kind_shift,
            unicode_compact_shift,
            unicode_ascii_shift,
            bytes_size,
            bytes_data,
            tuple_item,
            object_type,
            type_name,
            type_dealloc,
            interp_modules,
            dict_keys,
            dict_values,
            dict_table,
            dict_mask,
            dictkeys_size,
            dictkeys_log2_size,
            dictkeys_log2_index_bytes,
            dictkeys_kind,
            dictkeys_nentries,
            dictkeys_indices,
            dictvalues_values,
            dictvalues_capacity,
            dictvalues_valid,
            dict_entry_size,
            dict_unicode_entry_size,
            type_basicsize,
            type_dictoffset,
            heaptype_cached_keys,
            long_digits,
            long_tag,
            int_value,
            tstate_context,
            context_vars,
            hamt_root,
            hamt_bitmap,
            hamt_bitmap_array,
            hamt_array,
            contextvar_hash,
            contextvar_name
        }
    };
}

impl Layout {
    /// Every offset field as `(name, value)`, in declaration order (diagnostics and tests).
    pub fn fields(&self) -> Vec<(&'static str, i32)> {
        macro_rules! named {
            ($($f:ident),* $(,)?) => {{
                // Exhaustive destructuring (no `..`): a field missing from `with_fields!` is a compile error.
                let Layout { version: _, $($f),* } = *self;
                vec![$((stringify!($f), $f)),*]
            }};
        }
        with_fields!(named)
    }

    /// Every offset field as `(name, &mut value)`, in declaration order.
    pub fn fields_mut(&mut self) -> Vec<(&'static str, &mut i32)> {
        macro_rules! named {
            ($($f:ident),* $(,)?) => {{
                let Layout { version: _, $($f),* } = self;
                vec![$((stringify!($f), $f)),*]
            }};
        }
        with_fields!(named)
    }
}

/// The `(major, minor)` of each column of the table below, oldest first.
pub const COLUMNS: [(u8, u8); 11] =
    [(2, 7), (3, 6), (3, 7), (3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13), (3, 14), (3, 15)];

/// The compiled-in layout for `major.minor`, or `None` if the table has no column for it.
pub fn layout_for(major: u8, minor: u8) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.version == (major, minor))
}

/// Decodes a packed `PY_VERSION_HEX` (as stored in the `Py_Version` symbol of 3.11+) into
/// `(major, minor, micro)`. Layout: `0xMMmmuuLS` (major, minor, micro, release level, serial).
pub fn version_from_hex(py_version: u32) -> (u8, u8, u8) {
    ((py_version >> 24) as u8, (py_version >> 16) as u8, (py_version >> 8) as u8)
}

/// Builds the per-version layouts from a field-major table: one row per field, one column per
/// entry of [`COLUMNS`]. A missing field is a compile error (struct literal), and so is a row
/// with the wrong number of columns (const assertion).
macro_rules! layouts {
    ($($field:ident: [$($v:expr),+ $(,)?],)*) => {
        $(const _: () = assert!([$($v),+].len() == COLUMNS.len(), stringify!($field));)*
        const fn column(i: usize) -> Layout {
            Layout { version: COLUMNS[i], $($field: [$($v),+][i],)* }
        }
    };
}

#[rustfmt::skip]
layouts! {
    //                           2.7   3.6   3.7   3.8   3.9  3.10  3.11  3.12  3.13  3.14  3.15
    runtime_interpreters_head: [  -1,   -1,   24,   32,   32,   32,   40,   40,  632,  808,  936],
    runtime_interpreters_main: [  -1,   -1,   32,   40,   40,   40,   48,   48,  640,  816,  944],
    runtime_tstate_current:    [  -1,   -1, 1480, 1368,  568,  568,  576,   -1,   -1,   -1,   -1],
    runtime_autotss_key:       [  -1,   -1, 1504, 1392,  584,  584,  592, 1544, 2160,   -1,   -1],
    runtime_gil_locked:        [  -1,   -1, 1280, 1168,  368,  368,  376,   -1,   -1,   -1,   -1],
    runtime_gil_last_holder:   [  -1,   -1, 1272, 1160,  360,  360,  368,   -1,   -1,   -1,   -1],
    runtime_debug_offsets:     [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,    0,    0,    0],
    runtime_gc_collecting:     [  -1,   -1,  632,  544,   -1,   -1,   -1,   -1,   -1,   -1,   -1],
    tss_key:                   [  -1,   -1,    4,    4,    4,    4,    4,    4,    4,    4,    4],
    interp_next:               [   0,    0,    0,    0,    0,    0,    0,    0, 7264, 7272, 7264],
    interp_id:                 [  -1,   -1,   16,   16,   24,   24,   48,    8, 7272, 7280, 7272],
    interp_tstate_head:        [   8,    8,    8,    8,    8,    8,   16,   72, 7344, 7344, 7336],
    interp_gil_ptr:            [  -1,   -1,   -1,   -1,   -1,   -1,   -1,  384,   16,   16,   16],
    interp_code_gen:           [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1, 7992, 7944],
    interp_gc_collecting:      [  -1,   -1,   -1,   -1,  816,  816,  848,  312, 7600, 7600, 7512],
    gil_locked:                [  -1,   -1,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    gil_last_holder:           [  -1,   -1,    8,    8,    8,    8,    8,    8,    8,    8,    8],
    tstate_next:               [   0,    8,    8,    8,    8,    8,    8,    8,    8,    8,    8],
    tstate_interp:             [   8,   16,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    tstate_frame:              [  16,   24,   24,   24,   24,   24,   -1,   -1,   -1,   -1,   -1],
    tstate_cframe:             [  -1,   -1,   -1,   -1,   -1,   48,   56,   56,   -1,   -1,   -1],
    cframe_current_frame:      [  -1,   -1,   -1,   -1,   -1,   -1,    8,    0,   -1,   -1,   -1],
    tstate_current_frame:      [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   72,   72,   72],
    tstate_thread_id:          [ 144,  152,  176,  176,  176,  176,  152,  136,  152,  152,  176],
    tstate_native_thread_id:   [  -1,   -1,   -1,   -1,   -1,   -1,  160,  144,  160,  160,  184],
    tstate_base_frame:         [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   80],
    tstate_datastack_chunk:    [  -1,   -1,   -1,   -1,   -1,   -1,  296,  232,  232,  232,  256],
    tstate_holds_gil:          [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   36],
    tstate_gil_requested:      [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   40],
    tstate_state:              [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   40,   44,   48],
    tstate_whence:             [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   36,   40,   44],
    frame_back:                [  24,   24,   24,   24,   24,   24,   48,    8,    8,    8,    8],
    frame_code:                [  32,   32,   32,   32,   32,   32,   32,    0,    0,    0,    0],
    frame_lasti:               [ 120,  120,  104,  104,  104,   96,   -1,   -1,   -1,   -1,   -1],
    frame_instr:               [  -1,   -1,   -1,   -1,   -1,   -1,   56,   56,   56,   56,   56],
    frame_owner:               [  -1,   -1,   -1,   -1,   -1,   -1,   69,   70,   70,   74,   74],
    frame_is_entry:            [  -1,   -1,   -1,   -1,   -1,   -1,   68,   -1,   -1,   -1,   -1],
    frame_owned_by_cstack:     [  -1,   -1,   -1,   -1,   -1,   -1,   -1,    3,    3,    4,   -1],
    frame_owned_by_generator:  [  -1,   -1,   -1,   -1,   -1,   -1,    1,    1,    1,    1,    1],
    frame_localsplus:          [ 376,  376,  360,  360,  360,  352,   72,   72,   72,   80,   80],
    code_argcount:             [  16,   16,   16,   16,   16,   16,   56,   52,   52,   52,   52],
    code_flags:                [  28,   32,   32,   36,   36,   36,   48,   48,   48,   48,   48],
    code_firstlineno:          [  96,   36,   36,   40,   40,   40,   72,   68,   68,   68,   68],
    code_filename:             [  80,   96,   96,  104,  104,  104,  112,  112,  112,  112,  112],
    code_name:                 [  88,  104,  104,  112,  112,  112,  120,  120,  120,  120,  120],
    code_qualname:             [  -1,   -1,   -1,   -1,   -1,   -1,  128,  128,  128,  128,  128],
    code_varnames:             [  56,   64,   64,   72,   72,   72,   96,   96,   96,   96,   96],
    code_linetable:            [ 104,  112,  112,  120,  120,  120,  136,  136,  136,  136,  136],
    code_code:                 [  32,   40,   40,   48,   48,   48,  184,  192,  200,  208,  208],
    code_size:                 [ 128,  144,  144,  176,  176,  176,  192,  200,  208,  216,  216],
    unicode_state:             [  -1,   32,   32,   32,   32,   32,   32,   32,   32,   32,   32],
    unicode_length:            [  -1,   16,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    ascii_data:                [  -1,   48,   48,   48,   48,   48,   48,   40,   40,   40,   40],
    compact_data:              [  -1,   72,   72,   72,   72,   72,   72,   56,   56,   56,   56],
    unicode_kind_shift:        [  -1,    2,    2,    2,    2,    2,    2,    2,    2,    2,    2],
    unicode_compact_shift:     [  -1,    5,    5,    5,    5,    5,    5,    5,    5,    5,    5],
    unicode_ascii_shift:       [  -1,    6,    6,    6,    6,    6,    6,    6,    6,    6,    6],
    bytes_size:                [  16,   16,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    bytes_data:                [  36,   32,   32,   32,   32,   32,   32,   32,   32,   32,   32],
    tuple_item:                [  24,   24,   24,   24,   24,   24,   24,   24,   24,   32,   32],
    object_type:               [   8,    8,    8,    8,    8,    8,    8,    8,    8,    8,    8],
    type_name:                 [  24,   24,   24,   24,   24,   24,   24,   24,   24,   24,   24],
    type_dealloc:              [  48,   48,   48,   48,   48,   48,   48,   48,   48,   48,   48],
    interp_modules:            [  16,   16,   40,   56,  856,  856,  888,  944, 7656, 7688, 7592],
    dict_keys:                 [  -1,   32,   32,   32,   32,   32,   32,   32,   32,   32,   32],
    dict_values:               [  -1,   40,   40,   40,   40,   40,   40,   40,   40,   40,   40],
    dict_table:                [  40,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1],
    dict_mask:                 [  32,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1],
    dictkeys_size:             [  -1,    8,    8,    8,    8,    8,   -1,   -1,   -1,   -1,   -1],
    dictkeys_log2_size:        [  -1,   -1,   -1,   -1,   -1,   -1,    8,    8,    8,    8,    8],
    dictkeys_log2_index_bytes: [  -1,   -1,   -1,   -1,   -1,   -1,    9,    9,    9,    9,    9],
    dictkeys_kind:             [  -1,   -1,   -1,   -1,   -1,   -1,   10,   10,   10,   10,   10],
    dictkeys_nentries:         [  -1,   32,   32,   32,   32,   32,   24,   24,   24,   24,   24],
    dictkeys_indices:          [  -1,   40,   40,   40,   40,   40,   32,   32,   32,   32,   32],
    dictvalues_values:         [  -1,   -1,   -1,   -1,   -1,   -1,    0,    0,    8,    8,    8],
    dictvalues_capacity:       [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,    0,    0,    0],
    dictvalues_valid:          [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,    3,    3,    3],
    dict_entry_size:           [  24,   24,   24,   24,   24,   24,   24,   24,   24,   24,   24],
    dict_unicode_entry_size:   [  -1,   -1,   -1,   -1,   -1,   -1,   16,   16,   16,   16,   16],
    type_basicsize:            [  32,   32,   32,   32,   32,   32,   32,   32,   32,   32,   32],
    type_dictoffset:           [ 288,  288,  288,  288,  288,  288,  288,  288,  288,  288,  288],
    heaptype_cached_keys:      [  -1,  856,  856,  872,  864,  872,  872,  880,  880,  880,  888],
    long_digits:               [  24,   24,   24,   24,   24,   24,   24,   24,   24,   24,   24],
    long_tag:                  [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   16,   16,   16,   16],
    int_value:                 [  16,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1],
    tstate_context:            [  -1,   -1,  256,  240,  240,  240,  224,  208,  208,  208,  232],
    context_vars:              [  -1,   -1,   24,   24,   24,   24,   24,   24,   24,   24,   24],
    hamt_root:                 [  -1,   -1,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    hamt_bitmap:               [  -1,   -1,   24,   24,   24,   24,   24,   24,   24,   24,   24],
    hamt_bitmap_array:         [  -1,   -1,   32,   32,   32,   32,   32,   32,   32,   32,   32],
    hamt_array:                [  -1,   -1,   16,   16,   16,   16,   16,   16,   16,   16,   16],
    contextvar_hash:           [  -1,   -1,   56,   56,   56,   56,   56,   56,   56,   56,   56],
    contextvar_name:           [  -1,   -1,   16,   16,   16,   16,   16,   16,   16,   16,   16],
}

/// The table's layouts, in [`COLUMNS`] order.
pub static LAYOUTS: [Layout; COLUMNS.len()] = [
    column(0),
    column(1),
    column(2),
    column(3),
    column(4),
    column(5),
    column(6),
    column(7),
    column(8),
    column(9),
    column(10),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_for_finds_every_column() {
        for (i, &(major, minor)) in COLUMNS.iter().enumerate() {
            let l = layout_for(major, minor).expect("a column has a layout");
            assert_eq!(l.version, (major, minor));
            assert!(std::ptr::eq(l, &LAYOUTS[i]));
            assert_eq!(l.fields().len(), LAYOUTS[0].fields().len());
        }
        for (major, minor) in [(2, 6), (3, 5), (3, 16), (4, 0)] {
            assert!(layout_for(major, minor).is_none(), "{major}.{minor} has no column");
        }
        // Oldest first, no duplicates.
        assert!(COLUMNS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn version_from_hex_decodes_py_version() {
        assert_eq!(version_from_hex(0x020712F0), (2, 7, 18));
        assert_eq!(version_from_hex(0x030B07F0), (3, 11, 7));
        assert_eq!(version_from_hex(0x030C01F0), (3, 12, 1));
        assert_eq!(version_from_hex(0x030D00F0), (3, 13, 0));
        assert_eq!(version_from_hex(0x030E00A1), (3, 14, 0)); // 3.14.0a1
        assert_eq!(version_from_hex(0x030A0DF0), (3, 10, 13));
    }
}
