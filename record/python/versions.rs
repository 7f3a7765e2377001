//! What pyperf knows about each CPython version: one [`Row`] per supported `major.minor`, and the choice of the
//! row for an interpreter found in a process ([`select`]).
//!
//! A row holds every per-version fact the recorder uses: the struct offsets ([`Layout`], a column of
//! [`super::layout`]), where the interpreter and its threads are found, how the GIL is read, how frames chain and
//! which of them the interpreter hides, how a frame's instruction position becomes a line (line-table kind and
//! instruction kind), how strings are stored, and where the layout itself comes from. Code outside
//! `record/python/` never compares versions: it reads these fields (the BPF program gets them as a configuration
//! row, [`super::config`]).
//!
//! Adding a version: a row here, a column in [`super::layout`] (and a probe in [`super::probes`] if a member
//! moved), an interpreter in `testdata/interpreters`; `tests/conformance.rs` then checks the row against the real
//! interpreter and `tests/versions.rs` records it.

use std::fmt;
use std::sync::Mutex;

use super::debug_offsets::{self as dbg, block_layout, layout_from_debug_offsets, u64_at, BLOCK_LAYOUTS};
use super::layout::{version_from_hex, Layout, LAYOUTS};
use super::linetable::{Instr, LineTable};

/// Where the list of interpreters (and from it the thread states) is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interpreters {
    /// The static `interp_head` (2.7, 3.6; `.symtab` only).
    InterpHead,
    /// `_PyRuntime.interpreters.head` (3.7+, `.dynsym`).
    Runtime,
}

/// How the sampled thread's `PyThreadState` is recognised in the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadMatch {
    /// `tstate->thread_id == pthread_self()` (the thread's fs base on glibc x86-64).
    Pthread,
    /// `tstate->native_thread_id ==` the kernel tid (3.11+).
    NativeTid,
}

/// How the leaf frame is found and frames chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Frames {
    /// `tstate->frame`, `PyFrameObject`s chained by `f_back` (<= 3.10).
    Object,
    /// `tstate->cframe->current_frame`, `_PyInterpreterFrame`s on the thread's data stack (3.11, 3.12).
    CFrame,
    /// `tstate->current_frame`, `_PyInterpreterFrame`s on the data stack (3.13+).
    Current,
}

impl Frames {
    /// Frames live on the thread's data stack, each caller just below its callee (read by windows).
    pub fn on_data_stack(self) -> bool {
        self != Frames::Object
    }
}

/// Where the GIL's state is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gil {
    /// 2.7: the lock pointer `interpreter_lock` (NULL until the first thread) and `_PyThreadState_Current` as
    /// its holder (statics, `.symtab` only).
    LockPtr,
    /// 3.6: the statics `gil_locked` / `gil_last_holder` (`.symtab` only).
    Statics,
    /// 3.7-3.11: `_PyRuntime.ceval.gil`, and the current thread `_PyRuntime.gilstate.tstate_current`.
    Runtime,
    /// 3.12+: the interpreter's own `interp->ceval.gil`; its holder stands in for the current thread.
    Interpreter,
}

/// How names and file names are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strings {
    /// 2.7: byte strings (`PyStringObject`); classes may be old-style (`instance` / `classobj` types).
    Py2Bytes,
    /// 3.x: PEP 393 `str` (compact ASCII, compact 1/2/4-byte kinds, legacy before 3.12).
    Unicode,
}

/// Where an instance's attributes (its `__dict__`) are, for reading a `threading.Thread`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceDicts {
    /// A dict pointer at `obj + tp_dictoffset` (2.7-3.10).
    DictOffset,
    /// 3.11: a type with `Py_TPFLAGS_MANAGED_DICT` keeps the instance's split-table values pointer
    /// [`MANAGED_VALUES_BEFORE_311`] bytes before the object (`_PyObject_ValuesPointer`), or, once a dict was made,
    /// the dict pointer [`MANAGED_DICT_BEFORE`] bytes before it (`_PyObject_ManagedDictPointer`); else as
    /// [`InstanceDicts::DictOffset`].
    Managed311,
    /// 3.12: one word [`MANAGED_DICT_BEFORE`] bytes before the object (`PyDictOrValues`): a dict pointer, or, with its
    /// low bit set, the values pointer minus one (`_PyDictOrValues_GetValues`).
    Tagged312,
    /// 3.13+: the dict pointer [`MANAGED_DICT_BEFORE`] bytes before the object (`PyManagedDictPointer`); while it is
    /// NULL, a type with `Py_TPFLAGS_INLINE_VALUES` keeps the values inline at `obj + tp_basicsize`
    /// (`_PyObject_InlineValues`), in use while their `valid` byte is set.
    Inline313,
}

/// `-MANAGED_DICT_OFFSET` of GIL builds 3.11+: the managed dict (or 3.12's dict-or-values word) is this many bytes
/// before the object, in its pre-header.
pub const MANAGED_DICT_BEFORE: u64 = 24;
/// 3.11: the managed values pointer is this many bytes before the object (`((PyDictValues **)obj)-4`).
pub const MANAGED_VALUES_BEFORE_311: u64 = 32;

/// How a `threading.Thread` is tied to its kernel thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadTids {
    /// `threading._active` is keyed by `thread.get_ident()`, which is `pthread_self()`, the address of glibc's
    /// `struct pthread`; the kernel tid is read from it at an offset verified on the main thread first (2.7-3.7).
    PthreadSelf,
    /// `Thread._native_id`: `threading.get_native_id()`, the kernel tid (3.8+).
    NativeId,
}

/// The interpreter's evaluation loop, as native stacks show it (`--native` merges Python frames into its
/// activations, [`crate::native::merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EvalLoop {
    /// The C function that runs Python frames.
    pub function: &'static str,
    /// One activation runs a Python call's frames too (3.11+: calls are inlined, a new activation starts only at
    /// an entry frame); before, one activation per frame.
    pub inlines_calls: bool,
}

const EVAL_27: EvalLoop = EvalLoop { function: "PyEval_EvalFrameEx", inlines_calls: false };
/// 3.6 (PEP 523) to 3.10.
const EVAL_36: EvalLoop = EvalLoop { function: "_PyEval_EvalFrameDefault", inlines_calls: false };
const EVAL_311: EvalLoop = EvalLoop { function: "_PyEval_EvalFrameDefault", inlines_calls: true };

/// What naming a process's threads reads (`threading._active`: ident -> `Thread`, and each `Thread`'s name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadNames {
    /// The instance attribute holding `Thread.name`: `_Thread__name` on 2.7 (the private `__name`, mangled), `_name`
    /// on 3.x.
    pub name_attr: &'static str,
    /// How a thread's kernel tid is found.
    pub tids: ThreadTids,
    /// Where a `Thread`'s attributes are.
    pub instance_dicts: InstanceDicts,
}

/// The instance attribute `Thread._native_id` (3.8+).
pub const NATIVE_ID_ATTR: &str = "_native_id";
/// The type name of the main thread's `Thread` object (`threading._MainThread`, 2.7 and 3.x).
pub const MAIN_THREAD_TYPE: &str = "_MainThread";

const NAMES_27: ThreadNames = ThreadNames {
    name_attr: "_Thread__name",
    tids: ThreadTids::PthreadSelf,
    instance_dicts: InstanceDicts::DictOffset,
};
const NAMES_36: ThreadNames =
    ThreadNames { name_attr: "_name", tids: ThreadTids::PthreadSelf, instance_dicts: InstanceDicts::DictOffset };
const NAMES_38: ThreadNames =
    ThreadNames { name_attr: "_name", tids: ThreadTids::NativeId, instance_dicts: InstanceDicts::DictOffset };
const NAMES_311: ThreadNames =
    ThreadNames { name_attr: "_name", tids: ThreadTids::NativeId, instance_dicts: InstanceDicts::Managed311 };
const NAMES_312: ThreadNames =
    ThreadNames { name_attr: "_name", tids: ThreadTids::NativeId, instance_dicts: InstanceDicts::Tagged312 };
const NAMES_313: ThreadNames =
    ThreadNames { name_attr: "_name", tids: ThreadTids::NativeId, instance_dicts: InstanceDicts::Inline313 };

/// Where a process's [`Layout`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The compiled-in table alone (before 3.13).
    Table,
    /// The interpreter's own `_Py_DebugOffsets` (3.13+): its values win over the table's, which gives only what
    /// the block does not carry (patch releases move fields).
    DebugOffsets,
    /// A version newer than every row: its `_Py_DebugOffsets` read with the block layout of `as_of`, which it
    /// passed; everything else as the newest row. Recordings say so in a warning.
    Newer {
        /// The known version whose block layout the block matched.
        as_of: (u8, u8),
    },
}

/// Every fact pyperf uses about one CPython `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// `(major, minor)`.
    pub version: (u8, u8),
    /// Struct offsets.
    pub layout: &'static Layout,
    /// Where [`Row::layout`] comes from.
    pub source: Source,
    /// Where the interpreter list is.
    pub interpreters: Interpreters,
    /// How a thread state is matched to the sampled thread.
    pub thread_match: ThreadMatch,
    /// How frames are found and chained.
    pub frames: Frames,
    /// How the GIL is read.
    pub gil: Gil,
    /// Line-table encoding of `co_lnotab` / `co_linetable`.
    pub line_table: LineTable,
    /// What a frame's instruction position is.
    pub instr: Instr,
    /// Frames whose `_PyInterpreterFrame.owner` is this value or above belong to the interpreter itself and are
    /// not shown: the C-stack shims of 3.12/3.13 (`FRAME_OWNED_BY_CSTACK` 3), the entry frames of 3.14+
    /// (`FRAME_OWNED_BY_INTERPRETER` 3, and `FRAME_OWNED_BY_CSTACK` 4 on 3.14).
    pub hidden_owners_from: Option<u8>,
    /// C-stack entry frames hold `Py_None` in `f_executable` (3.13+): skip them.
    pub none_is_entry: bool,
    /// Mask applied to the frame's code pointer: after 3.13 `f_executable` is a tagged stack reference whose low
    /// bits are flags.
    pub code_tag_mask: u64,
    /// Offset of `PyCodeObject._co_firsttraceable` [int, code units] (3.11+): frames stopped before it are not
    /// shown (CPython's `_PyFrame_IsIncomplete`). `None` where it does not exist or is not known.
    pub first_traceable: Option<i32>,
    /// `PyTypeObject.tp_flags` [unsigned long].
    pub type_flags: i32,
    /// String representation.
    pub strings: Strings,
    /// How thread names are read; `None`: they are not (a Python newer than pyperf knows, [`Source::Newer`]: its
    /// dict and instance layouts, which its `_Py_DebugOffsets` do not describe, may have changed).
    pub thread_names: Option<ThreadNames>,
    /// The evaluation loop.
    pub eval: EvalLoop,
}

/// `_Py_THREAD_ATTACHED` (3.13-3.15, a macro: not in the DWARF the conformance test reads; the same in each header):
/// the value of [`Layout::tstate_state`] of a thread state that is current on its thread and holds its GIL.
pub const THREAD_ATTACHED: u8 = 1;
/// `_PyThreadState_WHENCE_EXEC` (3.13-3.15, a macro, as [`THREAD_ATTACHED`]): [`Layout::tstate_whence`] of a thread
/// state `Interpreter.exec` made for its call (`_PyXI_Enter`).
pub const WHENCE_EXEC: u8 = 5;

/// `code_tag_mask` of versions whose code pointer is a plain pointer.
pub const UNTAGGED: u64 = u64::MAX;
/// `code_tag_mask` from 3.14: `f_executable` is a `_PyStackRef` whose low two bits are tags (`Py_TAG_BITS`);
/// objects are at least 8-aligned, so masking them is exact.
pub const TAGGED: u64 = !3;
/// `Py_TPFLAGS_TYPE_SUBCLASS`: set in the flags of `type` and of every metaclass (2.7 and 3.x).
pub const TPFLAGS_TYPE_SUBCLASS: u64 = 1 << 31;
/// `Py_TPFLAGS_INLINE_VALUES` (3.13+): instances keep their attribute values inline ([`InstanceDicts::Inline313`]).
pub const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;
/// `Py_TPFLAGS_MANAGED_DICT` (3.11+): instances' dicts live in the pre-header ([`MANAGED_DICT_BEFORE`]).
pub const TPFLAGS_MANAGED_DICT: u64 = 1 << 4;
/// `Py_TPFLAGS_HEAPTYPE` (2.7 and 3.x): a `PyHeapTypeObject` (a class statement's), with `ht_cached_keys` on 3.x.
pub const TPFLAGS_HEAPTYPE: u64 = 1 << 9;
/// `Py_TPFLAGS_INT_SUBCLASS` (2.7): an `int` (`PyIntObject`).
pub const TPFLAGS_INT_SUBCLASS: u64 = 1 << 23;
/// `Py_TPFLAGS_LONG_SUBCLASS` (2.7 `long`, 3.x `int`): a `PyLongObject`.
pub const TPFLAGS_LONG_SUBCLASS: u64 = 1 << 24;
/// `Py_TPFLAGS_STRING_SUBCLASS` (2.7 `str`, `PyStringObject`; `Py_TPFLAGS_BYTES_SUBCLASS` on 3.x).
pub const TPFLAGS_STRING_SUBCLASS: u64 = 1 << 27;
/// `Py_TPFLAGS_UNICODE_SUBCLASS` (3.x `str`, 2.7 `unicode`).
pub const TPFLAGS_UNICODE_SUBCLASS: u64 = 1 << 28;
/// `Py_TPFLAGS_DICT_SUBCLASS` (2.7 and 3.x): a `PyDictObject`.
pub const TPFLAGS_DICT_SUBCLASS: u64 = 1 << 29;

use Frames::{CFrame, Current, Object};
use Gil::{Interpreter, LockPtr, Runtime as RuntimeGil, Statics};
use Instr::{FromCode, LastiBytes, LastiUnits};
use Interpreters::{InterpHead, Runtime};
use LineTable::{Linetable310, Lnotab27, Lnotab36, Locations311};
use Source::{DebugOffsets, Table};
use Strings::{Py2Bytes, Unicode};
use ThreadMatch::{NativeTid, Pthread};

/// A row; the arguments in the order of the table below.
#[allow(clippy::too_many_arguments)]
const fn row(
    column: usize,
    source: Source,
    interpreters: Interpreters,
    thread_match: ThreadMatch,
    frames: Frames,
    gil: Gil,
    line_table: LineTable,
    instr: Instr,
    hidden_owners_from: Option<u8>,
    none_is_entry: bool,
    code_tag_mask: u64,
    first_traceable: Option<i32>,
    strings: Strings,
    thread_names: ThreadNames,
    eval: EvalLoop,
) -> Row {
    let layout = &LAYOUTS[column];
    Row {
        version: layout.version,
        layout,
        source,
        interpreters,
        thread_match,
        frames,
        gil,
        line_table,
        instr,
        hidden_owners_from,
        none_is_entry,
        code_tag_mask,
        first_traceable,
        type_flags: 168,
        strings,
        thread_names: Some(thread_names),
        eval,
    }
}

/// The supported versions, oldest first. The column is the layout's index in [`LAYOUTS`] (its version is the
/// row's).
#[rustfmt::skip]
pub static ROWS: [Row; 11] = [
    //  col source        interpreters thread  frames  gil          lines         instr       hidden   none   code tag  first_traceable strings   thread names eval
    row(0,  Table,        InterpHead, Pthread,   Object,  LockPtr,     Lnotab27,     LastiBytes, None,    false, UNTAGGED, None,      Py2Bytes, NAMES_27,   EVAL_27),  // 2.7
    row(1,  Table,        InterpHead, Pthread,   Object,  Statics,     Lnotab36,     LastiBytes, None,    false, UNTAGGED, None,      Unicode,  NAMES_36,   EVAL_36),  // 3.6
    row(2,  Table,        Runtime,    Pthread,   Object,  RuntimeGil,  Lnotab36,     LastiBytes, None,    false, UNTAGGED, None,      Unicode,  NAMES_36,   EVAL_36),  // 3.7
    row(3,  Table,        Runtime,    Pthread,   Object,  RuntimeGil,  Lnotab36,     LastiBytes, None,    false, UNTAGGED, None,      Unicode,  NAMES_38,   EVAL_36),  // 3.8
    row(4,  Table,        Runtime,    Pthread,   Object,  RuntimeGil,  Lnotab36,     LastiBytes, None,    false, UNTAGGED, None,      Unicode,  NAMES_38,   EVAL_36),  // 3.9
    row(5,  Table,        Runtime,    Pthread,   Object,  RuntimeGil,  Linetable310, LastiUnits, None,    false, UNTAGGED, None,      Unicode,  NAMES_38,   EVAL_36),  // 3.10
    row(6,  Table,        Runtime,    NativeTid, CFrame,  RuntimeGil,  Locations311, FromCode,   None,    false, UNTAGGED, Some(168), Unicode,  NAMES_311,  EVAL_311), // 3.11
    row(7,  Table,        Runtime,    NativeTid, CFrame,  Interpreter, Locations311, FromCode,   Some(3), false, UNTAGGED, Some(176), Unicode,  NAMES_312,  EVAL_311), // 3.12
    row(8,  DebugOffsets, Runtime,    NativeTid, Current, Interpreter, Locations311, FromCode,   Some(3), true,  UNTAGGED, Some(184), Unicode,  NAMES_313,  EVAL_311), // 3.13
    row(9,  DebugOffsets, Runtime,    NativeTid, Current, Interpreter, Locations311, FromCode,   Some(3), true,  TAGGED,   Some(192), Unicode,  NAMES_313,  EVAL_311), // 3.14
    row(10, DebugOffsets, Runtime,    NativeTid, Current, Interpreter, Locations311, FromCode,   Some(3), true,  TAGGED,   Some(192), Unicode,  NAMES_313,  EVAL_311), // 3.15
];

/// The row of `major.minor`, if it is in the table.
pub fn row_for(major: u8, minor: u8) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.version == (major, minor))
}

/// The newest row: what a newer version's row is derived from.
pub fn newest() -> &'static Row {
    &ROWS[ROWS.len() - 1]
}

/// The supported versions, for messages: `2.7, 3.6-3.15`.
pub fn supported_versions() -> String {
    let v: Vec<(u8, u8)> = ROWS.iter().map(|r| r.version).collect();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1].0 == v[i].0 && v[j + 1].1 == v[j].1 + 1 {
            j += 1;
        }
        parts.push(if i == j {
            format!("{}.{}", v[i].0, v[i].1)
        } else {
            format!("{}.{}-{}.{}", v[i].0, v[i].1, v[j].0, v[j].1)
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// Why an interpreter is refused, before the pid is known (see [`super::InspectError::Unsupported`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// The interpreter: `Python 3.5.10`, `Python 3.13.0 free-threaded (Py_GIL_DISABLED)`, `PyPy`.
    pub what: String,
    /// Empty, or `": "` and the reason.
    pub why: String,
}

impl Unsupported {
    /// `why` may be empty; else it is shown after a colon.
    pub fn new(what: impl Into<String>, why: impl Into<String>) -> Unsupported {
        let why = why.into();
        Unsupported { what: what.into(), why: if why.is_empty() { why } else { format!(": {why}") } }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.what, self.why)
    }
}

/// The row for an interpreter of `version`, given the first bytes of its `_PyRuntime` (`debug`: they start with
/// `_Py_DebugOffsets` from 3.13 on; `None` when the binary has no `_PyRuntime` or it is not in initialised data).
///
/// - A row whose source is the table: that row.
/// - A row read from the debug offsets (3.13+): the block must be there, not free-threaded, of the same version,
///   and pass the checks of [`layout_from_debug_offsets`] with the block layout of that version; its values win
///   over the row's table (a patch release that moved a field gets a row of its own, interned).
/// - A 3.x newer than every row: accepted if its block passes the checks with one of the known block layouts
///   (newest first); the row is the newest one with that layout, tagged [`Source::Newer`].
/// - Anything else is refused, saying what did not validate.
pub fn select(version: (u8, u8, u8), debug: Option<&[u8]>) -> Result<&'static Row, Unsupported> {
    let (major, minor, micro) = version;
    let what = format!("Python {major}.{minor}.{micro}");
    let newest = newest();
    let table = row_for(major, minor);
    match table {
        Some(row) if row.source == Table => return Ok(row),
        Some(_) => {}
        None if major == 3 && minor > newest.version.1 => {}
        None => return Err(Unsupported::new(what, "")),
    }
    let Some(debug) = debug.filter(|d| d.len() >= 24 && d[..8] == dbg::COOKIE[..]) else {
        return Err(Unsupported::new(what, "no _Py_DebugOffsets at the start of _PyRuntime"));
    };
    if u64_at(debug, dbg::FREE_THREADED) != Some(0) {
        return Err(Unsupported::new(
            format!("{what} free-threaded (Py_GIL_DISABLED)"),
            "the free-threaded build has a different object layout and no GIL",
        ));
    }
    let hex = u64_at(debug, dbg::VERSION).unwrap_or(0);
    let dv = version_from_hex(hex as u32);
    if (dv.0, dv.1) != (major, minor) {
        return Err(Unsupported::new(
            what,
            format!("_Py_DebugOffsets says version {}.{}.{} ({hex:#x})", dv.0, dv.1, dv.2),
        ));
    }
    if let Some(row) = table {
        let Some(block) = block_layout(row.version) else {
            return Err(Unsupported::new(what, "pyperf knows no _Py_DebugOffsets layout of this version"));
        };
        let built = layout_from_debug_offsets(debug, block, row.version, row.layout)
            .map_err(|why| Unsupported::new(&what, format!("{why} (block layout of {major}.{minor})")))?;
        if built == *row.layout {
            return Ok(row);
        }
        return Ok(interned(Row { layout: super::debug_offsets::intern(built), ..*row }));
    }
    let mut first_error = None;
    for block in BLOCK_LAYOUTS.iter().rev() {
        let base = super::debug_offsets::absent_unless_in(newest.layout, block);
        match layout_from_debug_offsets(debug, block, (major, minor), &base) {
            Ok(built) => {
                return Ok(interned(Row {
                    version: (major, minor),
                    layout: super::debug_offsets::intern(built),
                    source: Source::Newer { as_of: block.version },
                    // Not in the block, and may have moved: hide no frame rather than misread.
                    first_traceable: None,
                    // Dicts and instance layouts are not in the block either: no thread names rather than misread.
                    thread_names: None,
                    ..*newest
                }));
            }
            Err(e) => {
                first_error.get_or_insert((block.version, e));
            }
        }
    }
    let (v, e) = first_error.unwrap_or(((0, 0), String::new()));
    Err(Unsupported::new(
        what,
        format!(
            "newer than pyperf knows ({}.{}) and its _Py_DebugOffsets match none of the layouts pyperf reads \
             ({}.{}: {e})",
            newest.version.0, newest.version.1, v.0, v.1
        ),
    ))
}

/// Rows built at run time (a patch release's moved fields, a newer version) live as long as the program; equal
/// ones are shared, so that profiling many processes of one interpreter keeps one copy.
fn interned(row: Row) -> &'static Row {
    static BUILT: Mutex<Vec<&'static Row>> = Mutex::new(Vec::new());
    super::debug_offsets::intern_in(&BUILT, row)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::python::debug_offsets::cross_check;
    use crate::python::layout::layout_for;
    use crate::python::linetable::{instr_byte_offset, line_at};

    /// Every row is complete and agrees with its layout: the facts stated twice (the row says how, the layout
    /// has the offsets that way needs) cannot drift apart.
    #[test]
    fn every_row_is_complete_and_agrees_with_its_layout() {
        assert!(ROWS.windows(2).all(|w| w[0].version < w[1].version), "oldest first, no duplicates");
        for r in &ROWS {
            let l = r.layout;
            let v = r.version;
            assert_eq!(l.version, v);
            assert!(std::ptr::eq(layout_for(v.0, v.1).expect("a column"), l), "{v:?}");
            let has = |o: i32| o >= 0;
            assert_eq!(r.interpreters == Runtime, has(l.runtime_interpreters_head), "{v:?}");
            assert_eq!(r.thread_match == NativeTid, has(l.tstate_native_thread_id), "{v:?}");
            assert!(has(l.tstate_thread_id), "{v:?}: pthread ids are reported for every version");
            let frames = match r.frames {
                Object => has(l.tstate_frame) && !has(l.cframe_current_frame) && !has(l.tstate_current_frame),
                CFrame => has(l.tstate_cframe) && has(l.cframe_current_frame) && !has(l.tstate_frame),
                Current => has(l.tstate_current_frame) && !has(l.tstate_frame) && !has(l.cframe_current_frame),
            };
            assert!(frames, "{v:?}: {:?} but the layout lacks its fields", r.frames);
            assert_eq!(r.frames.on_data_stack(), has(l.frame_owner), "{v:?}");
            assert!(!has(l.tstate_base_frame) || r.frames == Current, "{v:?}: a base frame ends a data-stack walk");
            assert_eq!(has(l.tstate_holds_gil), has(l.tstate_gil_requested), "{v:?}: per-thread GIL fields");
            let gil = match r.gil {
                LockPtr => r.strings == Py2Bytes,
                Statics => !has(l.runtime_gil_locked) && !has(l.interp_gil_ptr),
                RuntimeGil => has(l.runtime_gil_locked) && has(l.runtime_tstate_current),
                Interpreter => has(l.interp_gil_ptr) && has(l.gil_locked) && has(l.gil_last_holder),
            };
            assert!(gil, "{v:?}: {:?} but the layout lacks its fields", r.gil);
            let instr = match r.instr {
                LastiBytes | LastiUnits => has(l.frame_lasti),
                FromCode => has(l.frame_instr) && has(l.code_code),
            };
            assert!(instr, "{v:?}: {:?}", r.instr);
            // Hidden owners: from the C-stack owner where it is the highest value (3.12/3.13), at most it after.
            if let Some(from) = r.hidden_owners_from {
                assert!(has(l.frame_owner), "{v:?}");
                assert!(!has(l.frame_owned_by_cstack) || i32::from(from) <= l.frame_owned_by_cstack, "{v:?}");
            } else {
                assert!(!has(l.frame_owned_by_cstack), "{v:?}: C-stack frames exist but none is hidden");
            }
            assert_eq!(r.first_traceable.is_some(), r.frames.on_data_stack(), "{v:?}");
            if let Some(o) = r.first_traceable {
                assert!(o > 0 && o + 4 <= l.code_code, "{v:?}: _co_firsttraceable inside PyCodeObject's header");
            }
            assert_eq!(r.strings == Unicode, has(l.unicode_state), "{v:?}");
            // Thread names: the dict layouts and instance dicts the row says, with the offsets they need.
            let n = r.thread_names.expect("every row of the table names threads");
            assert!(has(l.interp_modules) && has(l.dict_entry_size) && has(l.type_dictoffset), "{v:?}");
            assert!(has(l.long_digits) && has(l.type_basicsize), "{v:?}");
            assert_eq!(r.strings == Py2Bytes, has(l.dict_table) && has(l.dict_mask) && has(l.int_value), "{v:?}");
            assert_eq!(n.name_attr == "_Thread__name", r.strings == Py2Bytes, "{v:?}");
            assert_eq!(!has(l.dict_table), has(l.dict_keys) && has(l.dictkeys_nentries) && has(l.dictkeys_indices));
            assert_eq!(has(l.dictkeys_size), has(l.dict_keys) && !has(l.dictkeys_log2_size), "{v:?}");
            assert_eq!(has(l.dictkeys_log2_size), has(l.dict_unicode_entry_size) && has(l.dictkeys_kind), "{v:?}");
            assert_eq!(has(l.dictkeys_log2_size), has(l.dictvalues_values), "{v:?}");
            let dicts = match n.instance_dicts {
                InstanceDicts::DictOffset => !has(l.dictkeys_log2_size),
                InstanceDicts::Managed311 => has(l.heaptype_cached_keys) && !has(l.long_tag),
                InstanceDicts::Tagged312 => has(l.heaptype_cached_keys) && has(l.long_tag) && !has(l.dictvalues_valid),
                InstanceDicts::Inline313 => {
                    has(l.heaptype_cached_keys) && has(l.dictvalues_valid) && has(l.dictvalues_capacity)
                }
            };
            assert!(dicts, "{v:?}: {:?} but the layout lacks its fields", n.instance_dicts);
            assert_eq!(r.source != Table, has(l.runtime_debug_offsets), "{v:?}: rows from the block have one");
            if r.source != Table {
                assert!(block_layout(v).is_some(), "{v:?}: no block layout");
            }
            // A line table that decodes: the first instruction of a one-line function is on its first line.
            let one_line: &[u8] = match r.line_table {
                Lnotab27 | Lnotab36 => &[],
                Linetable310 => &[8, 0],
                Locations311 => &[0x80 | (10 << 3) | 3, 0, 0],
            };
            let first = instr_byte_offset(r.instr, initial_raw(r), l.code_code.max(0) as u32);
            assert_eq!(line_at(r.line_table, 7, one_line, first.unwrap_or(0)), Some(7), "{v:?}");
        }
    }

    /// The raw position of a frame at its first instruction.
    fn initial_raw(r: &Row) -> u32 {
        match r.instr {
            LastiBytes | LastiUnits => 0,
            FromCode => r.layout.code_code as u32,
        }
    }

    /// Every version [`select`] accepts has a complete row, including one newer than the table (its row
    /// derived from the newest, with a line table).
    #[test]
    fn every_accepted_version_has_a_row() {
        for major in 2..=4u8 {
            for minor in 0..=20u8 {
                let block = synthetic_block(newest().layout, newest().version, (major, minor));
                match select((major, minor, 0), Some(&block)) {
                    Ok(r) => {
                        assert_eq!(r.version, (major, minor));
                        let from_table = row_for(major, minor).is_some();
                        assert_eq!(matches!(r.source, Source::Newer { .. }), !from_table);
                        if !from_table {
                            assert!(major == 3 && minor > newest().version.1);
                            assert_eq!(r.line_table, newest().line_table);
                            assert_eq!(r.code_tag_mask, newest().code_tag_mask);
                            assert_eq!(r.source, Source::Newer { as_of: newest().version });
                        }
                    }
                    Err(e) => assert!(
                        row_for(major, minor).is_none() || row_for(major, minor).unwrap().source != Table,
                        "{major}.{minor} refused: {e}"
                    ),
                }
            }
        }
    }

    /// A `_Py_DebugOffsets` block with the block layout of `of`, carrying `layout`'s values, labelled `version`.
    pub(crate) fn synthetic_block(layout: &Layout, of: (u8, u8), version: (u8, u8)) -> Vec<u8> {
        let block = block_layout(of).expect("a block layout");
        let mut b = vec![0u8; block.size() as usize];
        let mut put = |member: &str, v: u64| {
            if let Some(pos) = block.position(member) {
                b[pos as usize..pos as usize + 8].copy_from_slice(&v.to_le_bytes());
            }
        };
        // Struct sizes first: one of them (code_object.size) is also a field, written next.
        for (size, _) in dbg::SIZES {
            put(size, 1 << 20);
        }
        let fields = layout.fields();
        let value = |name: &str| fields.iter().find(|f| f.0 == name).map_or(-1, |f| f.1);
        for (field, member) in dbg::FIELDS {
            put(member, value(field) as u64);
        }
        put(dbg::GIL_STATE, 1000);
        put(dbg::GIL_LOCKED, 1000 + value("gil_locked") as u64);
        put(dbg::GIL_HOLDER, 1000 + value("gil_last_holder") as u64);
        put(dbg::GC_STATE, 0);
        put(dbg::GC_SIZE, 1 << 20);
        put(dbg::GC_COLLECTING, value("interp_gc_collecting") as u64);
        b[..8].copy_from_slice(dbg::COOKIE);
        let hex = (u64::from(version.0) << 24) | (u64::from(version.1) << 16) | 0xf0;
        b[dbg::VERSION as usize..][..8].copy_from_slice(&hex.to_le_bytes());
        b
    }

    fn message(r: Result<&'static Row, Unsupported>) -> String {
        r.expect_err("must be refused").for_pid(123).to_string()
    }

    #[test]
    fn supported_versions_text() {
        assert_eq!(supported_versions(), "2.7, 3.6-3.15");
    }

    /// Versions no interpreter here has: one clear line each.
    #[test]
    fn unsupported_versions_say_so() {
        assert_eq!(
            message(select((3, 5, 10), None)),
            "process 123 runs Python 3.5.10, which pyperf does not support (2.7, 3.6-3.15)"
        );
        assert_eq!(
            message(select((2, 6, 9), None)),
            "process 123 runs Python 2.6.9, which pyperf does not support (2.7, 3.6-3.15)"
        );
        assert_eq!(
            message(select((3, 16, 0), None)),
            "process 123 runs Python 3.16.0, which pyperf does not support (2.7, 3.6-3.15): \
             no _Py_DebugOffsets at the start of _PyRuntime"
        );
        assert_eq!(
            message(select((3, 13, 0), Some(&[0u8; 600]))),
            "process 123 runs Python 3.13.0, which pyperf does not support (2.7, 3.6-3.15): \
             no _Py_DebugOffsets at the start of _PyRuntime"
        );
        let pypy = Unsupported::new("PyPy", "pyperf reads CPython's interpreter state only").for_pid(7).to_string();
        assert_eq!(
            pypy,
            "process 7 runs PyPy, which pyperf does not support (2.7, 3.6-3.15): \
             pyperf reads CPython's interpreter state only"
        );
        for v in [(2, 7, 18), (3, 6, 15), (3, 12, 1)] {
            assert_eq!(select(v, None).map(|r| r.version), Ok((v.0, v.1)));
        }
    }

    fn put(block: &mut [u8], of: (u8, u8), member: &str, v: u64) {
        let pos = block_layout(of).unwrap().position(member).unwrap() as usize;
        block[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Each row read from the debug offsets, with a block of its own layout: accepted as is; a moved field wins
    /// over the table; damaged blocks are refused with the reason (the real blocks of the interpreters are
    /// checked in tests/conformance.rs).
    #[test]
    fn debug_offsets_win_and_damaged_blocks_are_refused() {
        for row in ROWS.iter().filter(|r| r.source == DebugOffsets) {
            let v = row.version;
            let (major, minor) = v;
            let good = synthetic_block(row.layout, v, v);
            assert!(std::ptr::eq(select((major, minor, 0), Some(&good)).unwrap(), row), "{v:?}");

            // A patch release moved a field: the block's value is used, in a row of its own.
            let mut moved = good.clone();
            put(&mut moved, v, "thread_state.native_thread_id", row.layout.tstate_native_thread_id as u64 + 8);
            let r = select((major, minor, 9), Some(&moved)).unwrap();
            assert_eq!(r.layout.tstate_native_thread_id, row.layout.tstate_native_thread_id + 8);
            assert_eq!(cross_check(r.layout, row.layout).len(), 1, "{v:?}");
            assert!(std::ptr::eq(select((major, minor, 9), Some(&moved)).unwrap(), r), "interned");

            let mut cookie = good.clone();
            cookie[0] = b'X';
            assert!(message(select((major, minor, 0), Some(&cookie)))
                .ends_with("no _Py_DebugOffsets at the start of _PyRuntime"));

            let mut ft = good.clone();
            ft[dbg::FREE_THREADED as usize] = 1;
            assert_eq!(
                message(select((major, minor, 0), Some(&ft))),
                format!(
                    "process 123 runs Python {major}.{minor}.0 free-threaded (Py_GIL_DISABLED), which pyperf does not \
                     support (2.7, 3.6-3.15): the free-threaded build has a different object layout and no GIL"
                )
            );
            let other = synthetic_block(row.layout, v, (3, 99));
            assert!(message(select((major, minor, 0), Some(&other))).contains("_Py_DebugOffsets says version 3.99.0"));

            let mut big = good.clone();
            put(&mut big, v, "interpreter_frame.size", 60);
            let m = message(select((major, minor, 0), Some(&big)));
            assert!(m.contains("outside interpreter_frame.size = 60"), "{m}");
            assert!(m.contains(&format!("(block layout of {major}.{minor})")), "{m}");

            let mut sentinel = good.clone();
            put(&mut sentinel, v, "pyobject.ob_type", 16);
            let m = message(select((major, minor, 0), Some(&sentinel)));
            assert!(
                m.contains("_Py_DebugOffsets not in the layout pyperf reads (object_type = 16, expected 8)"),
                "{m}"
            );

            let m = message(select((major, minor, 0), Some(&good[..100])));
            assert!(m.contains("cut short"), "{m}");
        }
    }

    /// A version newer than every row: accepted when its block passes with a known block layout (and tagged as
    /// such), refused when it matches none.
    #[test]
    fn a_newer_version_is_read_only_through_a_layout_it_passes() {
        let n = newest();
        let next = (n.version.0, n.version.1 + 1);
        let block = synthetic_block(n.layout, n.version, next);
        let r = select((next.0, next.1, 0), Some(&block)).expect("the next version from its debug offsets");
        assert_eq!(r.version, next);
        assert_eq!(r.source, Source::Newer { as_of: n.version });
        assert_eq!(r.first_traceable, None);
        assert_eq!(r.thread_names, None, "a newer minor's dicts may differ: no thread names");
        assert_eq!(cross_check(r.layout, n.layout), Vec::<String>::new());
        // An older block layout is tried too.
        let older = ROWS.iter().rev().find(|r| r.source == DebugOffsets && r.version < n.version).unwrap();
        let block = synthetic_block(n.layout, older.version, next);
        let r = select((next.0, next.1, 0), Some(&block)).expect("through an older block layout");
        assert_eq!(r.source, Source::Newer { as_of: older.version });
        // What the older layout has no member for is absent, not inherited from the newest row.
        let b = block_layout(older.version).unwrap();
        for (field, member) in dbg::FIELDS {
            let v = r.layout.fields().into_iter().find(|f| f.0 == *field).unwrap().1;
            if b.position(member).is_none() {
                assert_eq!(v, -1, "{field}: no {member} in the {:?} block", older.version);
            }
        }
        assert_eq!((r.layout.tstate_base_frame, r.layout.tstate_gil_requested), (-1, -1));

        // Members inserted into a section move everything after it: no known layout passes.
        let good = synthetic_block(n.layout, n.version, next);
        let mut moved = good[..48].to_vec();
        moved.extend_from_slice(&[0u8; 64]);
        moved.extend_from_slice(&good[48..]);
        let m = message(select((next.0, next.1, 0), Some(&moved)));
        assert!(m.contains("newer than pyperf knows (3.15) and its _Py_DebugOffsets match none of the layouts"), "{m}");
    }
}
