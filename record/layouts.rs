//! Per-version CPython struct layouts, compiled in.
//!
//! One [`Layout`] per supported `major.minor` for x86-64, glibc, default (non-debug, GIL) builds.
//! Every value is checked by the tests at the bottom of this file against the DWARF of the pyenv
//! interpreter of that version (`$(pyenv root)/versions/<v>/lib/libpython*.so.1.0`) with one gdb
//! batch per version, and every `-1` ("absent in this version") is checked to make gdb fail.
//!
//! Conventions:
//! - All fields except `version` are `i32`; `-1` means "this member does not exist in this version".
//! - Offsets are byte offsets from the start of the named C struct unless the doc comment says
//!   otherwise (a few entries are bit positions or enum values; they say so).
//! - The read width of a member is given in brackets where it matters, e.g. `[u64]`, `[i32]`, `[u8]`.
//!
//! Not covered: free-threaded 3.13t (`Py_GIL_DISABLED`, different object header and offsets; the
//! loader must refuse it, e.g. via `_Py_DebugOffsets.free_threaded`), debug builds (`Py_DEBUG` /
//! `Py_TRACE_REFS` change the object header and struct layouts), 32-bit and musl targets.
//!
//! Std only (no crate deps), so it can be built and tested on its own:
//! `rustc --edition 2021 --test record/layouts.rs -o /tmp/layouts_test && /tmp/layouts_test`
//! (needs gdb and the pyenv interpreters; `cargo test --lib layouts` runs the same tests).
//!
//! Adding a version: append it to [`SUPPORTED`] and `LAYOUTS`, add a column of zeros to the
//! `layouts!` table, extend the probe table in the tests if a member moved or was renamed, and
//! run the tests: the failure message prints the DWARF-derived rows in table format.

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
    /// Extra: `Py_tss_t._key` [u32 pthread_key_t] (3.7+): 4, after `int _is_initialized`.
    pub tss_key: i32,

    // ---- PyInterpreterState (struct _is) ----
    /// `PyInterpreterState.next` [ptr].
    pub interp_next: i32,
    /// First thread state: `PyInterpreterState.tstate_head` (<= 3.10) /
    /// `PyInterpreterState.threads.head` (3.11+) [ptr].
    pub interp_tstate_head: i32,
    /// `PyInterpreterState.ceval.gil` [ptr to `struct _gil_runtime_state`] (3.12+, per-interpreter
    /// GIL); add `gil_locked` / `gil_last_holder` to the pointer.
    pub interp_gil_ptr: i32,

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
    /// `_PyInterpreterFrame.owner` [u8 char] (3.11+). Skip frames whose owner equals
    /// `frame_owned_by_cstack` (3.12+).
    pub frame_owner: i32,
    /// `_PyInterpreterFrame.is_entry` [u8 bool] (3.11 only; 3.12 replaced it with C-stack-owned
    /// shim frames).
    pub frame_is_entry: i32,
    /// Extra, a value not an offset: the `FRAME_OWNED_BY_CSTACK` enumerator of
    /// `enum _frameowner` (3.12+; 3.11 has no such owner).
    pub frame_owned_by_cstack: i32,
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
}

impl Layout {
    /// Every offset field as `(name, value)`, in declaration order (diagnostics and tests).
    pub fn fields(&self) -> Vec<(&'static str, i32)> {
        // Exhaustive destructuring (no `..`): adding a field without listing it here is a
        // compile error, so the tests cannot silently miss a field.
        let Layout {
            version: _,
            runtime_interpreters_head,
            runtime_tstate_current,
            runtime_autotss_key,
            runtime_gil_locked,
            runtime_gil_last_holder,
            runtime_debug_offsets,
            tss_key,
            interp_next,
            interp_tstate_head,
            interp_gil_ptr,
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
            frame_back,
            frame_code,
            frame_lasti,
            frame_instr,
            frame_owner,
            frame_is_entry,
            frame_owned_by_cstack,
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
        } = *self;
        macro_rules! named {
            ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f)),*] };
        }
        named![
            runtime_interpreters_head,
            runtime_tstate_current,
            runtime_autotss_key,
            runtime_gil_locked,
            runtime_gil_last_holder,
            runtime_debug_offsets,
            tss_key,
            interp_next,
            interp_tstate_head,
            interp_gil_ptr,
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
            frame_back,
            frame_code,
            frame_lasti,
            frame_instr,
            frame_owner,
            frame_is_entry,
            frame_owned_by_cstack,
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
        ]
    }
}

/// Supported `(major, minor)` versions, oldest first (same order as the columns below).
pub const SUPPORTED: &[(u8, u8)] = &[(2, 7), (3, 6), (3, 7), (3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13)];

/// The compiled-in layout for `major.minor`, or `None` if that version is not supported.
pub fn layout_for(major: u8, minor: u8) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.version == (major, minor))
}

/// Decodes a packed `PY_VERSION_HEX` (as stored in the `Py_Version` symbol of 3.11+) into
/// `(major, minor, micro)`. Layout: `0xMMmmuuLS` (major, minor, micro, release level, serial).
pub fn version_from_hex(py_version: u32) -> (u8, u8, u8) {
    ((py_version >> 24) as u8, (py_version >> 16) as u8, (py_version >> 8) as u8)
}

/// Builds the per-version layouts from a field-major table: one row per field, one column per
/// entry of [`SUPPORTED`]. A missing field is a compile error (struct literal), and so is a row
/// with the wrong number of columns (const assertion).
macro_rules! layouts {
    ($($field:ident: [$($v:expr),+ $(,)?],)*) => {
        $(const _: () = assert!([$($v),+].len() == SUPPORTED.len(), stringify!($field));)*
        const fn column(i: usize) -> Layout {
            Layout { version: SUPPORTED[i], $($field: [$($v),+][i],)* }
        }
    };
}

#[rustfmt::skip]
layouts! {
    //                           2.7   3.6   3.7   3.8   3.9  3.10  3.11  3.12  3.13
    runtime_interpreters_head: [  -1,   -1,   24,   32,   32,   32,   40,   40,  632],
    runtime_tstate_current:    [  -1,   -1, 1480, 1368,  568,  568,  576,   -1,   -1],
    runtime_autotss_key:       [  -1,   -1, 1504, 1392,  584,  584,  592, 1544, 2160],
    runtime_gil_locked:        [  -1,   -1, 1280, 1168,  368,  368,  376,   -1,   -1],
    runtime_gil_last_holder:   [  -1,   -1, 1272, 1160,  360,  360,  368,   -1,   -1],
    runtime_debug_offsets:     [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,    0],
    tss_key:                   [  -1,   -1,    4,    4,    4,    4,    4,    4,    4],
    interp_next:               [   0,    0,    0,    0,    0,    0,    0,    0, 7264],
    interp_tstate_head:        [   8,    8,    8,    8,    8,    8,   16,   72, 7344],
    interp_gil_ptr:            [  -1,   -1,   -1,   -1,   -1,   -1,   -1,  384,   16],
    gil_locked:                [  -1,   -1,   16,   16,   16,   16,   16,   16,   16],
    gil_last_holder:           [  -1,   -1,    8,    8,    8,    8,    8,    8,    8],
    tstate_next:               [   0,    8,    8,    8,    8,    8,    8,    8,    8],
    tstate_interp:             [   8,   16,   16,   16,   16,   16,   16,   16,   16],
    tstate_frame:              [  16,   24,   24,   24,   24,   24,   -1,   -1,   -1],
    tstate_cframe:             [  -1,   -1,   -1,   -1,   -1,   48,   56,   56,   -1],
    cframe_current_frame:      [  -1,   -1,   -1,   -1,   -1,   -1,    8,    0,   -1],
    tstate_current_frame:      [  -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   72],
    tstate_thread_id:          [ 144,  152,  176,  176,  176,  176,  152,  136,  152],
    tstate_native_thread_id:   [  -1,   -1,   -1,   -1,   -1,   -1,  160,  144,  160],
    frame_back:                [  24,   24,   24,   24,   24,   24,   48,    8,    8],
    frame_code:                [  32,   32,   32,   32,   32,   32,   32,    0,    0],
    frame_lasti:               [ 120,  120,  104,  104,  104,   96,   -1,   -1,   -1],
    frame_instr:               [  -1,   -1,   -1,   -1,   -1,   -1,   56,   56,   56],
    frame_owner:               [  -1,   -1,   -1,   -1,   -1,   -1,   69,   70,   70],
    frame_is_entry:            [  -1,   -1,   -1,   -1,   -1,   -1,   68,   -1,   -1],
    frame_owned_by_cstack:     [  -1,   -1,   -1,   -1,   -1,   -1,   -1,    3,    3],
    frame_localsplus:          [ 376,  376,  360,  360,  360,  352,   72,   72,   72],
    code_argcount:             [  16,   16,   16,   16,   16,   16,   56,   52,   52],
    code_flags:                [  28,   32,   32,   36,   36,   36,   48,   48,   48],
    code_firstlineno:          [  96,   36,   36,   40,   40,   40,   72,   68,   68],
    code_filename:             [  80,   96,   96,  104,  104,  104,  112,  112,  112],
    code_name:                 [  88,  104,  104,  112,  112,  112,  120,  120,  120],
    code_qualname:             [  -1,   -1,   -1,   -1,   -1,   -1,  128,  128,  128],
    code_varnames:             [  56,   64,   64,   72,   72,   72,   96,   96,   96],
    code_linetable:            [ 104,  112,  112,  120,  120,  120,  136,  136,  136],
    code_code:                 [  32,   40,   40,   48,   48,   48,  184,  192,  200],
    code_size:                 [ 128,  144,  144,  176,  176,  176,  192,  200,  208],
    unicode_state:             [  -1,   32,   32,   32,   32,   32,   32,   32,   32],
    unicode_length:            [  -1,   16,   16,   16,   16,   16,   16,   16,   16],
    ascii_data:                [  -1,   48,   48,   48,   48,   48,   48,   40,   40],
    compact_data:              [  -1,   72,   72,   72,   72,   72,   72,   56,   56],
    unicode_kind_shift:        [  -1,    2,    2,    2,    2,    2,    2,    2,    2],
    unicode_compact_shift:     [  -1,    5,    5,    5,    5,    5,    5,    5,    5],
    unicode_ascii_shift:       [  -1,    6,    6,    6,    6,    6,    6,    6,    6],
    bytes_size:                [  16,   16,   16,   16,   16,   16,   16,   16,   16],
    bytes_data:                [  36,   32,   32,   32,   32,   32,   32,   32,   32],
    tuple_item:                [  24,   24,   24,   24,   24,   24,   24,   24,   24],
    object_type:               [   8,    8,    8,    8,    8,    8,    8,    8,    8],
    type_name:                 [  24,   24,   24,   24,   24,   24,   24,   24,   24],
}

static LAYOUTS: [Layout; 9] =
    [column(0), column(1), column(2), column(3), column(4), column(5), column(6), column(7), column(8)];
const _: () = assert!(LAYOUTS.len() == SUPPORTED.len());

/// `_Py_DebugOffsets` (3.13+): the struct CPython places at the very start of `_PyRuntime` so
/// that out-of-process tools can find its internals without DWARF. Each member is a `uint64_t`
/// holding an offset (or a size) of the running interpreter's own build.
///
/// This module says where pyperf finds, inside that struct, the values it needs: the byte
/// positions of the struct layout of CPython 3.13 (`DEBUG_OFFSETS_FIRST`), each checked by the
/// tests against the DWARF of the pyenv 3.13 interpreter (`debug_offsets_positions_match_dwarf`).
/// A 3.13 interpreter's values are cross-checked against the `layouts!` table; a later 3.x is
/// read with these positions only if the sanity checks of `process::layout_from_debug_offsets`
/// hold (ABI-stable sentinels, every offset inside its struct's size), so that a moved struct
/// layout is refused instead of producing garbage stacks.
pub mod debug_offsets {
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
    /// the position is the value of the [`super::Layout`] field.
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
        (
            "interpreter_frame.size",
            224,
            &["frame_back", "frame_code", "frame_instr", "frame_localsplus", "frame_owner"],
        ),
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
}

#[cfg(test)]
mod tests {
    //! Checks every [`Layout`] entry against the DWARF of the matching pyenv interpreter: one gdb
    //! batch per installed `major.minor.patch` (two running at a time), driven by a small gdb
    //! Python script generated from [`PROBES`]. A missing interpreter or gdb is a failure, never
    //! a skip. On a mismatch the failure message includes the DWARF-derived table rows, in the
    //! same format as the `layouts!` table, so adding a version is mostly copy and check.

    use super::*;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    type V = (u8, u8);
    const FIRST: V = (2, 0);
    const LAST: V = (3, 255);
    const PY3: V = (3, 0);

    /// How to find one [`Layout`] field in the DWARF.
    ///
    /// Expressions are `kind|args` strings evaluated by the gdb script:
    /// `off|TYPE|member.path` (byte offset), `size|TYPE` (sizeof), `bit|TYPE|member.path` (bit
    /// position of the last member within its parent), `val|EXPR` (an integer expression).
    struct Probe {
        field: &'static str,
        /// `(first, last, expr)`: the expression giving the field for versions in `first..=last`.
        /// Where the field is -1, every expression listed here (each valid on some other
        /// version, so not a typo) must make gdb fail.
        at: &'static [(V, V, &'static str)],
        /// `(first, last, expr)`: extra witnesses of absence: where the field is -1 within the
        /// range, gdb must fail with "There is no member named" (the struct exists, the member
        /// does not).
        absent_member: &'static [(V, V, &'static str)],
    }

    const fn p(field: &'static str, at: &'static [(V, V, &'static str)]) -> Probe {
        Probe { field, at, absent_member: &[] }
    }

    #[rustfmt::skip]
    const PROBES: &[Probe] = &[
        p("runtime_interpreters_head", &[((3, 7), LAST, "off|_PyRuntimeState|interpreters.head")]),
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
        p("interp_tstate_head", &[
            (FIRST, (3, 10), "off|PyInterpreterState|tstate_head"),
            ((3, 11), LAST, "off|PyInterpreterState|threads.head"),
        ]),
        p("interp_gil_ptr", &[((3, 12), LAST, "off|PyInterpreterState|ceval.gil")]),
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
        p("frame_owned_by_cstack", &[((3, 12), LAST, "val|FRAME_OWNED_BY_CSTACK")]),
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
    ];

    /// 3.13+: the interpreter's own `_Py_DebugOffsets` (static initializer of `_PyRuntime`, read
    /// from the file's .data) must agree with the compiled-in layout, so a loader may use either.
    /// `(field, member of _PyRuntime.debug_offsets)`.
    const DEBUG_OFFSETS: &[(&str, &str)] = &[
        ("runtime_interpreters_head", "runtime_state.interpreters_head"),
        ("interp_next", "interpreter_state.next"),
        ("interp_tstate_head", "interpreter_state.threads_head"),
        ("interp_gil_ptr", "interpreter_state.ceval_gil"),
        ("tstate_next", "thread_state.next"),
        ("tstate_interp", "thread_state.interp"),
        ("tstate_current_frame", "thread_state.current_frame"),
        ("tstate_thread_id", "thread_state.thread_id"),
        ("tstate_native_thread_id", "thread_state.native_thread_id"),
        ("frame_back", "interpreter_frame.previous"),
        ("frame_code", "interpreter_frame.executable"),
        ("frame_instr", "interpreter_frame.instr_ptr"),
        ("frame_owner", "interpreter_frame.owner"),
        ("frame_localsplus", "interpreter_frame.localsplus"),
        ("code_argcount", "code_object.argcount"),
        ("code_firstlineno", "code_object.firstlineno"),
        ("code_filename", "code_object.filename"),
        ("code_name", "code_object.name"),
        ("code_qualname", "code_object.qualname"),
        ("code_varnames", "code_object.localsplusnames"),
        ("code_linetable", "code_object.linetable"),
        ("code_code", "code_object.co_code_adaptive"),
        ("code_size", "code_object.size"),
        ("unicode_state", "unicode_object.state"),
        ("unicode_length", "unicode_object.length"),
        ("ascii_data", "unicode_object.asciiobject_size"),
        ("bytes_size", "bytes_object.ob_size"),
        ("bytes_data", "bytes_object.ob_sval"),
        ("tuple_item", "tuple_object.ob_item"),
        ("object_type", "pyobject.ob_type"),
        ("type_name", "type_object.tp_name"),
    ];

    /// Evaluates `PROBES` (a list of `kind|args` strings) and prints one `@@` line per entry.
    const GDB_SCRIPT: &str = r#"
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

    fn in_range(v: V, (first, last): (V, V)) -> bool {
        first <= v && v <= last
    }

    use crate::testenv::pyenv_root;

    /// One pyenv install of a supported version: `(major.minor, dir name, libpython path)`.
    struct Install {
        version: V,
        name: String,
        lib: PathBuf,
    }

    /// Every `versions/M.m.p` install of `version` (no suffixed builds such as `3.13.0t`), or
    /// an error message saying what is missing.
    fn find_installs(root: &Path, version: V) -> Result<Vec<Install>, String> {
        let versions = root.join("versions");
        let prefix = format!("{}.{}.", version.0, version.1);
        let mut out = Vec::new();
        let (entries, list_error) = match std::fs::read_dir(&versions) {
            Ok(rd) => (rd.filter_map(|e| e.ok()).collect(), String::new()),
            Err(e) => (Vec::new(), format!(" (cannot list it: {e})")),
        };
        let mut names: Vec<String> = entries
            .into_iter()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.strip_prefix(&prefix).is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
            .collect();
        names.sort();
        for name in names {
            let libdir = versions.join(&name).join("lib");
            let lib_prefix = format!("libpython{}.{}", version.0, version.1);
            let lib = std::fs::read_dir(&libdir).ok().and_then(|rd| {
                rd.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                    p.file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| f.starts_with(&lib_prefix) && f.ends_with(".so.1.0"))
                })
            });
            match lib {
                Some(lib) => out.push(Install { version, name, lib }),
                None => {
                    return Err(format!(
                        "Python {name} under {} has no {lib_prefix}*.so.1.0 \
                         (install it with --enable-shared and debug info)",
                        versions.display()
                    ))
                }
            }
        }
        if out.is_empty() {
            return Err(format!(
                "Python {}.{} is not installed under {}{list_error}: need versions/{}.{}.<patch>/lib/\
                 libpython{}.{}*.so.1.0 with debug info (e.g. PYTHON_CONFIGURE_OPTS=--enable-shared \
                 pyenv install {}.{})",
                version.0,
                version.1,
                versions.display(),
                version.0,
                version.1,
                version.0,
                version.1,
                version.0,
                version.1
            ));
        }
        Ok(out)
    }

    /// Result of one gdb expression: `Ok(value)` or `Err(gdb's message)`.
    type Eval = Result<i64, String>;

    /// Runs one gdb batch over `exprs` against `lib`.
    fn run_gdb(install: &Install, exprs: &[&str]) -> Result<Vec<Eval>, String> {
        let list: Vec<String> = exprs.iter().map(|e| format!("    {e:?},")).collect();
        let script = format!("PROBES = [\n{}\n]\n{GDB_SCRIPT}", list.join("\n"));
        let path = std::env::temp_dir().join(format!("pyperf-layouts-{}-{}.py", std::process::id(), install.name));
        std::fs::write(&path, script).map_err(|e| format!("write {}: {e}", path.display()))?;
        let out = Command::new("gdb")
            .args(["-nx", "-batch", "-iex", "set debuginfod enabled off", "-x"])
            .arg(&path)
            .arg(&install.lib)
            .output();
        let _ = std::fs::remove_file(&path);
        let out = out.map_err(|e| format!("cannot run gdb (is it installed?): {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut evals: Vec<Option<Eval>> = vec![None; exprs.len()];
        let mut ended = false;
        for line in stdout.lines() {
            let mut it = line.splitn(4, '\t');
            if it.next() != Some("@@") {
                continue;
            }
            let (idx, status, rest) = (it.next(), it.next(), it.next().unwrap_or(""));
            if idx == Some("END") {
                ended = true;
                continue;
            }
            let i: usize = idx.and_then(|s| s.parse().ok()).ok_or("bad gdb output")?;
            evals[i] = Some(match status {
                Some("OK") => Ok(rest.parse().map_err(|_| format!("bad value {rest:?}"))?),
                _ => Err(rest.to_string()),
            });
        }
        if !ended || evals.iter().any(Option::is_none) {
            return Err(format!(
                "gdb on {} did not evaluate every probe (exit {:?})\nstdout:\n{stdout}\nstderr:\n{}",
                install.lib.display(),
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(evals.into_iter().map(Option::unwrap).collect())
    }

    /// What one install told us: problems found, and the DWARF value of every field (-1 where
    /// no expression for this version evaluates), for the suggested-table dump.
    struct Checked {
        errors: Vec<String>,
        dwarf: BTreeMap<&'static str, i64>,
    }

    fn probe_for(field: &str) -> &'static Probe {
        let probe = PROBES.iter().find(|p| p.field == field);
        probe.unwrap_or_else(|| panic!("no probe for field {field}"))
    }

    fn check_install(install: &Install) -> Checked {
        let v = install.version;
        let tag = &install.name;
        let layout = layout_for(v.0, v.1).expect("SUPPORTED version without layout");
        let mut errors = Vec::new();
        let mut dwarf = BTreeMap::new();

        // Flat expression list, in `Layout::fields()` order: every `at` and `absent_member`
        // expression of each field's probe, then Py_Version (3.11+) and the _Py_DebugOffsets
        // entries (3.13+). The checks below walk it in the same order.
        let mut exprs: Vec<&str> = Vec::new();
        for (name, _) in layout.fields() {
            let probe = probe_for(name);
            exprs.extend(probe.at.iter().map(|a| a.2));
            exprs.extend(probe.absent_member.iter().map(|a| a.2));
        }
        let has_py_version = v >= (3, 11);
        if has_py_version {
            exprs.push("val|Py_Version");
        }
        let debug_exprs: Vec<String> = DEBUG_OFFSETS
            .iter()
            .map(|d| format!("val|_PyRuntime.debug_offsets.{}", d.1))
            .chain(std::iter::once("val|_PyRuntime.debug_offsets.free_threaded".to_string()))
            .collect();
        let has_debug_offsets = v >= (3, 13);
        if has_debug_offsets {
            exprs.extend(debug_exprs.iter().map(String::as_str));
        }
        let evals = match run_gdb(install, &exprs) {
            Ok(e) => e,
            Err(e) => return Checked { errors: vec![format!("{tag}: {e}")], dwarf },
        };

        let mut i = 0;
        for (name, value) in layout.fields() {
            let probe = probe_for(name);
            let at = &evals[i..i + probe.at.len()];
            i += probe.at.len();
            let absent = &evals[i..i + probe.absent_member.len()];
            i += probe.absent_member.len();

            let current = probe.at.iter().position(|a| in_range(v, (a.0, a.1)));
            let dwarf_value = match current {
                Some(k) => at[k].clone(),
                None => Err("no expression for this version".to_string()),
            };
            dwarf.insert(name, dwarf_value.clone().unwrap_or(-1));
            if value != -1 {
                match (current, &dwarf_value) {
                    (None, _) => errors.push(format!(
                        "{tag}: {name} = {value} but the probe table has no expression for {}.{}",
                        v.0, v.1
                    )),
                    (Some(_), Ok(d)) if *d == i64::from(value) => {}
                    (Some(k), got) => {
                        errors.push(format!("{tag}: {name} = {value}, DWARF `{}` gives {got:?}", probe.at[k].2))
                    }
                }
            } else {
                if let Some(k) = current {
                    errors.push(format!(
                        "{tag}: {name} = -1 but `{}` is listed for this version (gives {:?})",
                        probe.at[k].2, at[k]
                    ));
                }
                for (k, (a, r)) in probe.at.iter().zip(at).enumerate() {
                    if let (Ok(d), false) = (r, current == Some(k)) {
                        errors.push(format!("{tag}: {name} = -1 but `{}` exists here (= {d})", a.2));
                    }
                }
                for (a, r) in probe.absent_member.iter().zip(absent) {
                    let ok = matches!(r, Err(m) if m.contains("There is no member named"));
                    if in_range(v, (a.0, a.1)) && !ok {
                        errors.push(format!(
                            "{tag}: {name} = -1 but `{}` gave {r:?}, not 'There is no member named'",
                            a.2
                        ));
                    }
                }
            }
        }

        if has_py_version {
            let want: Vec<u8> = tag.split('.').filter_map(|s| s.parse().ok()).collect();
            match &evals[i] {
                Ok(hex) => {
                    let got = version_from_hex(*hex as u32);
                    if [got.0, got.1, got.2][..] != want[..] {
                        errors.push(format!("{tag}: Py_Version {hex:#x} decodes to {got:?}, expected {want:?}"));
                    }
                }
                Err(e) => errors.push(format!("{tag}: cannot read Py_Version: {e}")),
            }
            i += 1;
        }
        if has_debug_offsets {
            let fields = layout.fields();
            for (k, (field, member)) in DEBUG_OFFSETS.iter().enumerate() {
                let value = fields.iter().find(|f| f.0 == *field).expect("known field").1;
                match &evals[i + k] {
                    Ok(d) if *d == i64::from(value) => {}
                    got => errors.push(format!("{tag}: {field} = {value}, _Py_DebugOffsets.{member} gives {got:?}")),
                }
            }
            let free_threaded = &evals[i + DEBUG_OFFSETS.len()];
            if *free_threaded != Ok(0) {
                errors.push(format!("{tag}: _Py_DebugOffsets.free_threaded is {free_threaded:?}: not a default build"));
            }
        }
        Checked { errors, dwarf }
    }

    /// Rows in the `layouts!` format from the DWARF values (one column per SUPPORTED version).
    fn suggested_table(results: &[(V, Checked)]) -> String {
        let mut s = String::from("DWARF-derived table (first install of each version):\n");
        for (name, _) in LAYOUTS[0].fields() {
            let cols: Vec<String> = SUPPORTED
                .iter()
                .map(|v| {
                    let d = results.iter().find(|r| r.0 == *v).and_then(|r| r.1.dwarf.get(name));
                    d.map_or("   ?".to_string(), |d| format!("{d:>4}"))
                })
                .collect();
            s += &format!("    {:<26} [{}],\n", format!("{name}:"), cols.join(", "));
        }
        s
    }

    #[test]
    fn layouts_match_dwarf() {
        let root = pyenv_root();
        let mut errors = Vec::new();
        let mut installs = Vec::new();
        for &v in SUPPORTED {
            match find_installs(&root, v) {
                Ok(mut found) => installs.append(&mut found),
                Err(e) => errors.push(e),
            }
        }

        // Two gdb processes at a time: enough to halve the wall time on a shared 2-core box.
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<(V, Checked)>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(install) = installs.get(i) else {
                        break;
                    };
                    let checked = check_install(install);
                    results.lock().unwrap().push((install.version, checked));
                });
            }
        });
        let mut results = results.into_inner().unwrap();
        results.sort_by_key(|r| r.0);

        let mut mismatched = false;
        for (_, c) in &results {
            mismatched |= !c.errors.is_empty();
            errors.extend(c.errors.iter().cloned());
        }
        let checked: Vec<&str> = installs.iter().map(|i| i.name.as_str()).collect();
        eprintln!("checked layouts against DWARF of: {}", checked.join(" "));
        if !errors.is_empty() {
            let table = if mismatched { suggested_table(&results) } else { String::new() };
            panic!(
                "{} layout problem(s) (pyenv root {}):\n  {}\n{table}",
                errors.len(),
                root.display(),
                errors.join("\n  ")
            );
        }
    }

    #[test]
    fn probe_table_matches_layout_fields() {
        let names: Vec<&str> = LAYOUTS[0].fields().iter().map(|f| f.0).collect();
        for name in &names {
            let n = PROBES.iter().filter(|p| p.field == *name).count();
            assert_eq!(n, 1, "field {name} must have exactly one probe (has {n})");
        }
        for probe in PROBES {
            assert!(names.contains(&probe.field), "probe for unknown field {}", probe.field);
            for &v in SUPPORTED {
                let n = probe.at.iter().filter(|a| in_range(v, (a.0, a.1))).count();
                assert!(n <= 1, "{}: overlapping expressions for {v:?}", probe.field);
            }
            for a in probe.at {
                let used = SUPPORTED.iter().any(|&v| in_range(v, (a.0, a.1)));
                assert!(used, "{}: `{}` applies to no supported version", probe.field, a.2);
            }
        }
    }

    #[test]
    fn layout_for_finds_every_supported_version() {
        for &(major, minor) in SUPPORTED {
            let l = layout_for(major, minor).expect("supported version has a layout");
            assert_eq!(l.version, (major, minor));
            assert_eq!(l.fields().len(), LAYOUTS[0].fields().len());
        }
        assert_eq!(LAYOUTS.len(), SUPPORTED.len());
        for (major, minor) in [(2, 6), (3, 5), (3, 14), (4, 0)] {
            assert!(layout_for(major, minor).is_none(), "{major}.{minor} must be unsupported");
        }
        // SUPPORTED is sorted and has no duplicates.
        assert!(SUPPORTED.windows(2).all(|w| w[0] < w[1]));
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

    /// `debug_offsets` positions against the DWARF of every installed 3.13+ interpreter (the
    /// struct layout of `_Py_DebugOffsets`), and its field mapping against `DEBUG_OFFSETS` above
    /// (which checks the values against the table).
    #[test]
    fn debug_offsets_positions_match_dwarf() {
        use super::debug_offsets as d;
        let root = pyenv_root();
        let installs = find_installs(&root, d::DEBUG_OFFSETS_FIRST).unwrap_or_else(|e| panic!("{e}"));
        let mut probes: Vec<(String, i32)> = vec![
            ("off|struct _Py_DebugOffsets|cookie".to_string(), 0),
            ("off|struct _Py_DebugOffsets|version".to_string(), d::VERSION),
            ("off|struct _Py_DebugOffsets|free_threaded".to_string(), d::FREE_THREADED),
            ("size|struct _Py_DebugOffsets".to_string(), d::SIZE),
        ];
        for (_, member, pos) in d::FIELDS.iter().chain([&("", d::GIL_STATE.0, d::GIL_STATE.1)]) {
            probes.push((format!("off|struct _Py_DebugOffsets|{member}"), *pos));
        }
        for (member, pos) in [d::GIL_LOCKED, d::GIL_HOLDER] {
            probes.push((format!("off|struct _Py_DebugOffsets|{member}"), pos));
        }
        for (member, pos, _) in d::SIZES {
            probes.push((format!("off|struct _Py_DebugOffsets|{member}"), *pos));
        }
        let exprs: Vec<&str> = probes.iter().map(|p| p.0.as_str()).collect();
        let mut errors = Vec::new();
        for install in &installs {
            let evals = run_gdb(install, &exprs).unwrap_or_else(|e| panic!("{e}"));
            for ((expr, want), got) in probes.iter().zip(evals) {
                if got != Ok(i64::from(*want)) {
                    errors.push(format!("{}: `{expr}` is {got:?}, debug_offsets says {want}", install.name));
                }
            }
        }
        // Same member for the same field as the value check above.
        for (field, member, _) in d::FIELDS {
            if let Some((_, m)) = DEBUG_OFFSETS.iter().find(|(f, _)| f == field) {
                if m != member {
                    errors.push(format!("{field}: debug_offsets reads {member}, DEBUG_OFFSETS checks {m}"));
                }
            }
            assert!(LAYOUTS[0].fields().iter().any(|(n, _)| n == field), "unknown field {field}");
        }
        for (_, _, fields) in d::SIZES {
            for f in *fields {
                assert!(d::FIELDS.iter().any(|(n, _, _)| n == f), "{f} is not read from the debug offsets");
            }
        }
        for f in d::SENTINELS {
            assert!(d::FIELDS.iter().any(|(n, _, _)| n == f), "{f} is not read from the debug offsets");
        }
        let names: Vec<&str> = installs.iter().map(|i| i.name.as_str()).collect();
        eprintln!("checked _Py_DebugOffsets positions against DWARF of: {}", names.join(" "));
        assert!(errors.is_empty(), "{}", errors.join("\n"));
    }
}
