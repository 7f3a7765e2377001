//! asyncio tasks of another process, read from its memory: every CPython fact task-aware stacks need, per version
//! ([`AsyncioLayout`], one row per version 3.11+), and the reader ([`TaskReader`]) that lists a process's tasks with
//! their names, coroutines and awaiters, and reads a suspended coroutine's chain of frames. What to do with them
//! (stitching stacks, the suspended-task sweep) is [`crate::tasks`]'s; this module never sees a sample.
//!
//! Where things are (research and sources: docs/design/asyncio-tasks.md):
//! - tasks are `_asyncio.Task` objects (the C task; `TaskObj`), found on 3.11-3.13 through the sets the module
//!   `asyncio.tasks` binds (`_all_tasks` / `_scheduled_tasks`, WeakSets, and `_eager_tasks`), and on 3.14+ in the
//!   per-thread and per-interpreter lists whose offsets the `.AsyncioDebug` section publishes (in `_asyncio`'s
//!   shared object on 3.14, in the interpreter on 3.15, where `_asyncio` is built in);
//! - who awaits a task: 3.14+ the task's `task_awaited_by` (one object or a set); before, derived from every task's
//!   `fut_waiter` (a Task it awaits, or a `_GatheringFuture` whose `_children` it awaits);
//! - a coroutine's frame is embedded in it (`gi_iframe`); suspended in an `await` of another coroutine, that one is
//!   the top of its value stack (CPython's own `_PyGen_yf`): the chain is followed while the awaited object is a
//!   coroutine of the same type, and ends at a Future, a Task or anything else.
//!
//! The process runs while it is read: every object's type is checked before its layout is trusted, every count and
//! chain is bounded, and the work of a pass is metered ([`super::objects::Metered`]). A torn read gives a missing
//! task or a shorter chain, never another task's.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::objects::{at, u64_in, Budget, Metered, Objects, MAX_DICT_ENTRIES};
use super::versions::{Interpreters, Row, TPFLAGS_LONG_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS};
use crate::mem::ReadMem;

/// How a suspended frame's awaited object is found on its value stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueStack {
    /// 3.11-3.13: `localsplus[stacktop - 1]`, `stacktop` an int (slots) at `stacktop`, `localsplus` at `localsplus`.
    Top {
        /// `_PyInterpreterFrame.stacktop` [int].
        stacktop: i32,
        /// `_PyInterpreterFrame.localsplus` [PyObject *[]].
        localsplus: i32,
    },
    /// 3.14+: `stackpointer[-back]`, a tagged `_PyStackRef` (low two bits flags), `stackpointer` a pointer.
    Pointer {
        /// `_PyInterpreterFrame.stackpointer` [_PyStackRef *].
        stackpointer: i32,
        /// Slots below the stack pointer: 1 on 3.14, 2 on 3.15 (whose `SEND` leaves a NULL above it).
        back: u8,
    },
}

/// Where a process's tasks are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllTasks {
    /// 3.11-3.13: sets bound in `asyncio.tasks`: WeakSets (`.data`, a set of weak references) and plain sets.
    Module {
        /// WeakSets of tasks.
        weaksets: &'static [&'static str],
        /// Sets of tasks.
        sets: &'static [&'static str],
    },
    /// 3.14+: circular lists of `task_node`s, one per thread state and one per interpreter (tasks of threads that
    /// ended), at these offsets (the `.AsyncioDebug` section's values win).
    Lists {
        /// `_PyThreadStateImpl.asyncio_tasks_head`.
        tstate_head: i32,
        /// `PyInterpreterState.asyncio_tasks_head`.
        interp_head: i32,
    },
}

/// Where the `.AsyncioDebug` section is (3.14+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugSection {
    /// No such section (3.11-3.13): the table alone.
    None,
    /// In the `_asyncio` extension module's shared object (3.14), mapped once `asyncio` is imported.
    Extension,
    /// In the interpreter's own object (3.15: `_asyncio` is built in).
    Interpreter,
}

/// The facts about one version's asyncio (offsets in bytes; -1: no such member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncioLayout {
    /// `(major, minor)`.
    pub version: (u8, u8),
    /// `sizeof(TaskObj)`.
    pub task_size: i32,
    /// `fut_loop` [PyObject *]: the event loop the task belongs to.
    pub task_loop: i32,
    /// `fut_state` [int]: 0 pending, 1 cancelled, 2 finished.
    pub task_state: i32,
    /// `task_fut_waiter` [PyObject *]: the future the task waits on.
    pub task_fut_waiter: i32,
    /// `task_coro` [PyObject *].
    pub task_coro: i32,
    /// `task_name` [PyObject *]: a str, or an int counter for default names (3.12+: `Task-N`, formatted lazily).
    pub task_name: i32,
    /// `task_awaited_by` [PyObject *] (3.14+): NULL, one awaiter, or a set of them.
    pub task_awaited_by: i32,
    /// `task_awaited_by_is_set` [char] (3.14+).
    pub task_awaited_by_is_set: i32,
    /// `task_is_task` [char] (3.14+): 1 for tasks, 0 for plain futures.
    pub task_is_task: i32,
    /// `task_node` [llist_node] (3.14+): the task's link in its list.
    pub task_node: i32,
    /// `PyGenObject.gi_frame_state` [int8].
    pub gen_frame_state: i32,
    /// `PyGenObject.gi_iframe`: the embedded `_PyInterpreterFrame`.
    pub gen_iframe: i32,
    /// Frame states in which a coroutine's frame is live and suspended (its value stack meaningful).
    pub suspended: &'static [i8],
    /// The frame state of a coroutine created and not started yet (its frame shows the first line).
    pub created: i8,
    /// The frame state of a running coroutine.
    pub executing: i8,
    /// How the awaited object is found.
    pub stack: ValueStack,
    /// Where the tasks are.
    pub tasks: AllTasks,
    /// Where the `.AsyncioDebug` section is.
    pub section: DebugSection,
}

/// `PyTypeObject.tp_base` (every 3.x on 64-bit).
const TP_BASE: u64 = 256;
/// `PySetObject`: `used`, `mask`, `table` (3.x); a table entry is a key and its hash.
const SET_USED: u64 = 24;
const SET_MASK: u64 = 32;
const SET_TABLE: u64 = 40;
const SET_ENTRY: u64 = 16;
/// `PySetObject.fill` (after the object header): from it to `table` is what changes when the set does.
const SET_FILL: usize = 16;
/// Reads of a set that keeps changing while it is read (see `set_items`).
const SET_READS: usize = 3;
/// `PyListObject`: `ob_size`, `ob_item`.
const LIST_SIZE: u64 = 16;
const LIST_ITEMS: u64 = 24;
/// `PyWeakReference.wr_object`.
const WEAKREF_OBJECT: u64 = 16;

/// Bytes of a frame read for its code, instruction pointer and value stack: every version's are below this.
const FRAME_HEAD: usize = 80;
/// A coroutine chain is followed this deep at most (`await` nesting; deeper is cut, the cut counted by the caller).
pub const MAX_CHAIN: usize = 64;
/// Most tasks listed per process and pass; a process with more is read partly, and says so.
pub const MAX_TASKS: usize = 20_000;
/// Most awaiters of one task read (a set of them).
const MAX_AWAITERS: usize = 64;
/// Most entries of a set or list read.
const MAX_SET: u64 = 1 << 16;
/// Thread states walked at most.
const MAX_THREAD_STATES: usize = 4096;
/// The work one pass over a process's tasks may do: ~6 reads a task at [`MAX_TASKS`].
pub const PASS_BUDGET: Budget = Budget { bytes: 64 << 20, ops: 160 << 10 };

const STATES_311: &[i8] = &[-1];
const STATES_313: &[i8] = &[-2, -1];
const STATES_315: &[i8] = &[1, 2, 3];
const SETS_311: AllTasks = AllTasks::Module { weaksets: &["_all_tasks"], sets: &[] };
const SETS_312: AllTasks = AllTasks::Module { weaksets: &["_scheduled_tasks"], sets: &["_eager_tasks"] };
const TOP: ValueStack = ValueStack::Top { stacktop: 64, localsplus: 72 };

/// The rows, oldest first. 3.11-3.13: DWARF of the pyenv builds' `_asyncio` and libpython (`TaskObj`, `PyCoroObject`,
/// `_PyInterpreterFrame`), checked in-process with ctypes on 3.13.18 too; 3.14/3.15: their `.AsyncioDebug` sections
/// (Debian sid 3.14.10, 3.15.2; they win at run time) and `_Py_DebugOffsets` (`gen_object`).
pub static LAYOUTS: [AsyncioLayout; 5] = [V311, V312, V313, V314, V315];

/// Each row after the first says what changed from the one before.
const V311: AsyncioLayout = AsyncioLayout {
    version: (3, 11),
    task_size: 176,
    task_loop: 16,
    task_state: 88,
    task_fut_waiter: 128,
    task_coro: 136,
    task_name: 144,
    task_awaited_by: -1,
    task_awaited_by_is_set: -1,
    task_is_task: -1,
    task_node: -1,
    gen_frame_state: 75,
    gen_iframe: 80,
    suspended: STATES_311,
    created: -2,
    executing: 0,
    stack: TOP,
    tasks: SETS_311,
    section: DebugSection::None,
};
const V312: AsyncioLayout =
    AsyncioLayout { version: (3, 12), gen_frame_state: 67, gen_iframe: 72, tasks: SETS_312, ..V311 };
/// The explicit `dict` / `weakreflist` members went (managed dict and weakrefs).
const V313: AsyncioLayout = AsyncioLayout {
    version: (3, 13),
    task_size: 144,
    task_state: 96,
    task_fut_waiter: 112,
    task_coro: 120,
    task_name: 128,
    suspended: STATES_313,
    created: -3,
    ..V312
};
/// Awaiter links and per-thread lists; values from the `.AsyncioDebug` section (which wins at run time).
const V314: AsyncioLayout = AsyncioLayout {
    version: (3, 14),
    task_size: 168,
    task_state: 104,
    task_fut_waiter: 120,
    task_coro: 128,
    task_name: 136,
    task_awaited_by: 96,
    task_awaited_by_is_set: 109,
    task_is_task: 108,
    task_node: 152,
    stack: ValueStack::Pointer { stackpointer: 64, back: 1 },
    tasks: AllTasks::Lists { tstate_head: 0x370, interp_head: 0x2a80 },
    section: DebugSection::Extension,
    ..V313
};
/// New frame states; `SEND` leaves a NULL above the awaited object; `_asyncio` built into the interpreter.
const V315: AsyncioLayout = AsyncioLayout {
    version: (3, 15),
    suspended: STATES_315,
    created: 0,
    executing: 4,
    stack: ValueStack::Pointer { stackpointer: 64, back: 2 },
    tasks: AllTasks::Lists { tstate_head: 0x418, interp_head: 0x2a68 },
    section: DebugSection::Interpreter,
    ..V314
};

/// The asyncio row of a Python row, if pyperf reads that version's tasks (3.11+; not a version newer than it knows,
/// whose task layout nothing describes).
pub fn layout_for(row: &Row) -> Option<&'static AsyncioLayout> {
    if matches!(row.source, super::versions::Source::Newer { .. }) {
        return None;
    }
    LAYOUTS.iter().find(|l| l.version == row.version)
}

/// Name of the `.AsyncioDebug` section, and the file-name part of the 3.14 extension that holds it.
pub const SECTION: &str = ".AsyncioDebug";
/// What the 3.14 `_asyncio` extension's file name starts with.
pub const EXTENSION_PREFIX: &str = "_asyncio.cpython-";

/// The 13 u64 of `Py_AsyncioModuleDebugOffsets` (`Modules/_asynciomodule.c`), read from the section in `file`.
/// `None`: no such section, or too short.
pub fn read_section(file: &Path) -> Option<[u64; 13]> {
    use object::{Object, ObjectSection};
    let f = std::fs::File::open(file).ok()?;
    let data = object::read::ReadCache::new(f);
    let elf = object::read::elf::ElfFile64::<object::Endianness, _>::parse(&data).ok()?;
    let bytes = elf.section_by_name(SECTION)?.data().ok()?;
    let mut out = [0u64; 13];
    for (i, v) in out.iter_mut().enumerate() {
        *v = u64_in(bytes, i * 8)?;
    }
    Some(out)
}

/// `layout` with the section's values (`Py_AsyncioModuleDebugOffsets`, in its order: task object size, name,
/// awaited_by, is_task, awaited_by_is_set, coro, node; interpreter state size, tasks head; thread state size,
/// running loop, running task, tasks head), after checks that they describe this build: the task fields inside the
/// object, in the order CPython declares them. `Err`: what did not check.
pub fn with_section(layout: &AsyncioLayout, s: &[u64; 13]) -> Result<AsyncioLayout, String> {
    let [size, name, awaited_by, is_task, is_set, coro, node, interp_size, interp_head, tstate_size, _loop, _task, tstate_head] =
        *s;
    let small = |v: u64, below: u64| i32::try_from(v).ok().filter(|&o| o > 0 && (o as u64) < below);
    let f = |v: u64| small(v, size);
    let ok = (64..=4096).contains(&size)
        && f(awaited_by).is_some()
        && awaited_by < is_task
        && is_task < is_set
        && is_set < coro
        && coro < name
        && name < node
        && f(node).is_some_and(|n| n as u64 + 16 <= size)
        && small(interp_head, interp_size).is_some()
        && small(tstate_head, tstate_size).is_some();
    if !ok {
        return Err(format!("{SECTION} holds implausible offsets {s:?}"));
    }
    let i = |v: u64| v as i32;
    Ok(AsyncioLayout {
        task_size: i(size),
        task_name: i(name),
        task_awaited_by: i(awaited_by),
        task_is_task: i(is_task),
        task_awaited_by_is_set: i(is_set),
        task_coro: i(coro),
        task_node: i(node),
        tasks: AllTasks::Lists { tstate_head: i(tstate_head), interp_head: i(interp_head) },
        ..*layout
    })
}

/// One task, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    /// The task object's address.
    pub addr: u64,
    /// `Task.get_name()`; empty when its name could not be read.
    pub name: String,
    /// Its coroutine.
    pub coro: u64,
    /// The code object of the coroutine's frame (0 unknown): checks a sample's frame against the task.
    pub coro_code: u64,
    /// The event loop it belongs to.
    pub event_loop: u64,
    /// Its coroutine runs now (frame state executing).
    pub running: bool,
    /// The tasks awaiting it (3.14+ from the task; before, derived from the others' `fut_waiter`), by address.
    pub awaited_by: Vec<u64>,
    /// Futures other than tasks awaiting it (3.14: a `gather`'s future, a plain future): counted, not followed.
    pub other_awaiters: u32,
    /// The kernel tid (the process's PID namespace) of the thread whose list holds it (3.14+), 0 unknown.
    pub ns_tid: u32,
    /// What tells this task from another one at the same address later (objects are freed and their memory
    /// reused, often by an object of the same kind): its name object and that object's first bytes.
    pub identity: Identity,
}

/// A task's identity ([`TaskInfo::identity`], [`TaskReader::same`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    name_obj: u64,
    name_peek: Vec<u8>,
}

#[cfg(test)]
impl Identity {
    /// An identity as a list would read it: name object `name_obj` beginning with `peek`.
    pub fn of(name_obj: u64, peek: &[u8]) -> Identity {
        Identity { name_obj, name_peek: peek.to_vec() }
    }
}

impl TaskInfo {
    /// Whether `other`, from another list, is this task (not another one since at its address): same address,
    /// coroutine, code and identity.
    pub fn same_task(&self, other: &TaskInfo) -> bool {
        self.addr == other.addr
            && self.coro == other.coro
            && self.coro_code == other.coro_code
            && self.identity == other.identity
    }
}

/// A frame of a coroutine chain: its code object and raw instruction position as the BPF program reports frames
/// (`instr_ptr - code`, 31 bits), so that the symbolizer resolves it like any sampled frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoroFrame {
    /// Code object address.
    pub code: u64,
    /// Raw instruction position.
    pub instr: u32,
}

/// Why a process's tasks could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsyncioError {
    /// `asyncio` is not imported (yet): try again later.
    #[error("asyncio is not imported")]
    NotImported,
    /// The process's asyncio cannot be read at all: why (said once).
    #[error("{0}")]
    Unsupported(String),
    /// A read failed (the process changed under it, or exited): try again later.
    #[error("could not read {0}")]
    Unreadable(&'static str),
}

/// Reads the tasks of one process.
pub struct TaskReader<M> {
    mem: M,
    pid: u32,
    row: &'static Row,
    layout: AsyncioLayout,
    /// The address of the pointer to the first interpreter.
    interp_head: Option<u64>,
    /// `asyncio.tasks.Task` (the C task type), once found.
    task_type: Option<u64>,
    /// Types known to be (or not to be) the task type or a subclass of it.
    task_types: HashMap<u64, bool>,
    /// Where each key was found in `sys.modules` / the module's dict last time.
    hints: [Option<usize>; 8],
    /// What the last list read of each task that it does not read again while they stay the same.
    known: HashMap<u64, Known>,
}

/// A task's name and coroutine, as a list read them.
#[derive(Debug, Clone)]
struct Known {
    /// The first [`NAME_PEEK`] bytes of its name object.
    name_block: Option<Vec<u8>>,
    name: String,
    coro_code: u64,
    running: bool,
}

/// Bytes of a name object compared from one list to the next: header, hash and the text of names up to ~24 bytes
/// (`Task-17`, `request-36`) or an int's digits.
const NAME_PEEK: usize = 64;
/// Whether two peeks at a name object show the same name: all but the reference count (the first word), which
/// changes whenever something refers to the name.
fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.len() > 8 && a[8..] == b[8..]
}

/// Names this long at most are whole in the [`NAME_PEEK`] bytes (a compact ASCII str's text starts at 40 or 48).
const SHORT_NAME: usize = 16;

impl<M: ReadMem> TaskReader<M> {
    /// A reader of the tasks of a process whose interpreter `row` describes, with the asyncio facts `layout` (its
    /// section's values applied by the caller, [`with_section`]); `interp_head` as for thread names.
    pub fn new(
        mem: M,
        pid: u32,
        row: &'static Row,
        layout: AsyncioLayout,
        runtime: Option<u64>,
        interp_head: Option<u64>,
    ) -> Self {
        let interp_head = match row.interpreters {
            Interpreters::InterpHead => interp_head,
            Interpreters::Runtime => runtime.and_then(|rt| at(rt, row.layout.runtime_interpreters_head)),
        };
        TaskReader {
            mem,
            pid,
            row,
            layout,
            interp_head,
            task_type: None,
            task_types: HashMap::new(),
            hints: [None; 8],
            known: HashMap::new(),
        }
    }

    /// The facts this reader uses.
    pub fn layout(&self) -> &AsyncioLayout {
        &self.layout
    }

    /// The process read.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Uses `layout` from now on (3.14: the extension's section, found once `asyncio` is imported).
    pub fn set_layout(&mut self, layout: AsyncioLayout) {
        self.layout = layout;
    }

    /// Every task of the process now (at most [`MAX_TASKS`]), with its awaiters.
    pub fn tasks(&mut self) -> Result<Vec<TaskInfo>, AsyncioError> {
        let mem = Metered::new(&self.mem, PASS_BUDGET);
        let mut objs = Objects::new(&mem, self.row);
        let l = self.layout;
        let interp = self.main_interpreter(&objs)?;
        let task_type = match self.task_type {
            Some(t) => t,
            None => {
                let t = find_task_type(&mut objs, self.row, interp, &mut self.hints)?;
                self.task_type = Some(t);
                t
            }
        };
        let mut cx = Cx { objs, l, task_type, task_types: &mut self.task_types };
        let found: Vec<(u64, u32)> = match l.tasks {
            AllTasks::Module { weaksets, sets } => {
                let (refs, mut tasks) = module_tasks(&mut cx, self.row, interp, weaksets, sets, &mut self.hints)?;
                // Their referents, in one batch.
                let wr: Vec<(u64, usize)> = refs.iter().filter_map(|&r| Some((at(r, WEAKREF_OBJECT)?, 8))).collect();
                tasks.extend(self.mem.read_many(&wr).into_iter().filter_map(|b| u64_in(&b?, 0)));
                tasks.into_iter().map(|t| (t, 0)).collect()
            }
            AllTasks::Lists { tstate_head, interp_head } => {
                list_tasks(&mut cx, self.row, interp, tstate_head, interp_head)?
            }
        };
        // Every task object in one batch of reads; names and coroutines read only for tasks not seen before (or
        // whose name or coroutine changed): a thousand tasks cost a few system calls, not thousands.
        let mut seen = HashSet::new();
        let found: Vec<(u64, u32)> = found.into_iter().filter(|(t, _)| seen.insert(*t)).take(MAX_TASKS).collect();
        let size = usize::try_from(l.task_size).map_err(|_| AsyncioError::Unsupported("no task size".into()))?;
        let blocks = self.mem.read_many(&found.iter().map(|&(t, _)| (t, size)).collect::<Vec<_>>());
        let mut out: Vec<TaskInfo> = Vec::new();
        let mut waiters: Vec<(u64, u64)> = Vec::new();
        let mut sets: Vec<(usize, u64)> = Vec::new();
        let mut singles: Vec<(usize, u64)> = Vec::new();
        // The names' first bytes and the coroutines' heads, in two more batches. A name is read again only when
        // those bytes changed: an address says nothing (tasks, coroutines and names come and go at the same
        // addresses, a new task often where the last one was), the bytes (type, length, hash, text or digits) do.
        let field_of = |b: &Option<Vec<u8>>, o: i32| b.as_ref().and_then(|b| u64_in(b, o)).unwrap_or(0);
        let name_blocks =
            self.mem.read_many(&blocks.iter().map(|b| (field_of(b, l.task_name), NAME_PEEK)).collect::<Vec<_>>());
        let frame_code = u64::try_from(self.row.layout.frame_code).unwrap_or(0);
        let head_len = usize::try_from(l.gen_iframe).unwrap_or(0) + frame_code as usize + 8;
        let heads =
            self.mem.read_many(&blocks.iter().map(|b| (field_of(b, l.task_coro), head_len)).collect::<Vec<_>>());
        let mut known = std::mem::take(&mut self.known);
        let mut kept: HashMap<u64, Known> = HashMap::new();
        for (((&(t, tid), block), name_block), head) in found.iter().zip(&blocks).zip(name_blocks).zip(heads) {
            let Some(block) = block else { continue };
            let field = |o: i32| if o >= 0 { u64_in(block, o) } else { Some(0) };
            let Some(ty) = u64_in(block, 8) else { continue };
            // (`fut_state` is an int: the low half of the word.)
            if !cx.is_task_type(ty) || field(l.task_state).map(|v| v as u32) != Some(0) {
                continue; // not a task (any more), or done: no longer waits anywhere
            }
            let (Some(coro), Some(name_obj), Some(waits_on), Some(event_loop)) =
                (field(l.task_coro), field(l.task_name), field(l.task_fut_waiter), field(l.task_loop))
            else {
                continue;
            };
            let (coro_code, running) = match head {
                Some(h) => (
                    u64_in(&h, l.gen_iframe as u64 + frame_code).map_or(0, |c| c & self.row.code_tag_mask),
                    usize::try_from(l.gen_frame_state)
                        .ok()
                        .and_then(|o| h.get(o))
                        .is_some_and(|&s| s as i8 == l.executing),
                ),
                None => (0, false),
            };
            let name = match known.remove(&t) {
                // (A longer name's text is not all in the bytes compared: read again.)
                Some(k)
                    if k.name.len() <= SHORT_NAME
                        && matches!((&k.name_block, &name_block), (Some(a), Some(b)) if same_name(a, b)) =>
                {
                    k.name
                }
                _ => cx.name(name_obj).unwrap_or_default(),
            };
            let identity = Identity { name_obj, name_peek: name_block.clone().unwrap_or_default() };
            let k = Known { name_block, name, coro_code, running };
            if l.task_awaited_by >= 0 {
                let by = field(l.task_awaited_by).unwrap_or(0);
                let is_set = usize::try_from(l.task_awaited_by_is_set).ok().and_then(|o| block.get(o)).copied();
                match (by, is_set) {
                    (0, _) | (_, None) => {}
                    (one, Some(0)) => singles.push((out.len(), one)),
                    (set, Some(_)) => sets.push((out.len(), set)),
                }
            } else if waits_on != 0 {
                waiters.push((t, waits_on));
            }
            out.push(TaskInfo {
                addr: t,
                name: k.name.clone(),
                coro,
                coro_code: k.coro_code,
                event_loop,
                running: k.running,
                awaited_by: Vec::new(),
                other_awaiters: 0,
                ns_tid: tid,
                identity,
            });
            kept.insert(t, k);
        }
        self.known = kept;
        let index: HashMap<u64, usize> = out.iter().enumerate().map(|(i, t)| (t.addr, i)).collect();
        // 3.14+: who awaits each task, from the task: a task among those listed, or another future (counted).
        let add = |out: &mut Vec<TaskInfo>, i: usize, a: u64| {
            if index.contains_key(&a) {
                if out[i].awaited_by.len() < MAX_AWAITERS && !out[i].awaited_by.contains(&a) {
                    out[i].awaited_by.push(a);
                }
            } else {
                out[i].other_awaiters += 1;
            }
        };
        for (i, a) in singles {
            add(&mut out, i, a);
        }
        for (i, set) in sets {
            for a in cx.set_items(set, MAX_AWAITERS as u64).unwrap_or_default() {
                add(&mut out, i, a);
            }
        }
        // Before 3.14 nothing records who awaits a task: a task waiting on a task awaits it; one waiting on a
        // gather's future awaits each of its children. Read every time: futures and tasks come and go at the same
        // addresses, so a gather's children remembered by address would join a new parent to an old child's heir.
        for (parent, fut) in waiters {
            let children = if index.contains_key(&fut) { vec![fut] } else { cx.gathered(fut) };
            for c in children {
                if let Some(&i) = index.get(&c) {
                    if out[i].awaited_by.len() < MAX_AWAITERS && !out[i].awaited_by.contains(&parent) {
                        out[i].awaited_by.push(parent);
                    }
                }
            }
        }
        if mem.exhausted() && out.is_empty() {
            return Err(AsyncioError::Unreadable("the tasks (too much work)"));
        }
        Ok(out)
    }

    /// Whether the tasks at the addresses of `tasks` are still those a list read (pending, same coroutine, same name
    /// object holding the same first bytes), read now in two batches.
    pub fn same(&self, tasks: &[&TaskInfo]) -> Vec<bool> {
        let l = self.layout;
        let Ok(size) = usize::try_from(l.task_size) else { return vec![false; tasks.len()] };
        let blocks = self.mem.read_many(&tasks.iter().map(|t| (t.addr, size)).collect::<Vec<_>>());
        let peeks = self.mem.read_many(&tasks.iter().map(|t| (t.identity.name_obj, NAME_PEEK)).collect::<Vec<_>>());
        tasks
            .iter()
            .zip(blocks.iter().zip(peeks))
            .map(|(t, (b, peek))| {
                let Some(b) = b else { return false };
                let field = |o: i32| if o >= 0 { u64_in(b, o) } else { Some(0) };
                field(l.task_state).map(|v| v as u32) == Some(0)
                    && field(l.task_coro) == Some(t.coro)
                    && field(l.task_name) == Some(t.identity.name_obj)
                    && peek.is_some_and(|p| same_name(&p, &t.identity.name_peek))
            })
            .collect()
    }

    /// The frames of the coroutine `coro` and of the coroutines it awaits, root first (the task's coroutine
    /// first, the leaf where it waits last), at most [`MAX_CHAIN`]; and whether the chain was cut there.
    /// Empty when the chain could not be read whole (a torn read: see [`Chain::torn`]).
    pub fn chain(&self, coro: u64) -> (Vec<CoroFrame>, bool) {
        let c = self.chains(&[coro]).pop().unwrap_or_default();
        if c.torn {
            return (Vec::new(), false);
        }
        (c.frames, c.cut)
    }

    fn main_interpreter(&self, objs: &Objects<'_, Metered<'_, M>>) -> Result<u64, AsyncioError> {
        let head = self.interp_head.ok_or(AsyncioError::Unreadable("the interpreter list"))?;
        match objs.u64_at(head) {
            Some(i) if i != 0 => Ok(i),
            _ => Err(AsyncioError::Unreadable("the interpreter list")),
        }
    }
}

/// A task as a sweep read it ([`TaskReader::sweep`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Still a pending task (not done, not cancelled, not freed and reused).
    pub pending: bool,
    /// Its coroutine runs now.
    pub running: bool,
    /// Its coroutine chain, root first.
    pub frames: Vec<CoroFrame>,
    /// Cut at [`MAX_CHAIN`].
    pub cut: bool,
}

impl<M: ReadMem> TaskReader<M> {
    /// The state and coroutine chain of each of `tasks` (addresses a [`TaskReader::tasks`] listed), read in batches:
    /// the task objects together, then hop by hop the coroutines of every chain together (two batches a hop: the
    /// coroutine with its frame, then the awaited object on its value stack). A few system calls for a thousand
    /// tasks, where reading them one by one takes thousands. `None` for a task that cannot be read now.
    pub fn sweep(&self, tasks: &[u64]) -> Vec<Option<Swept>> {
        let l = self.layout;
        let Ok(size) = usize::try_from(l.task_size) else { return vec![None; tasks.len()] };
        let blocks = self.mem.read_many(&tasks.iter().map(|&t| (t, size)).collect::<Vec<_>>());
        let mut out: Vec<Option<Swept>> = vec![None; tasks.len()];
        // (task index, coroutine to read next, the chain's coroutine type)
        let mut active: Vec<(usize, u64, u64)> = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let Some(b) = b else { continue };
            let ty = u64_in(b, 8).unwrap_or(0);
            let field = |o: i32| if o >= 0 { u64_in(b, o) } else { Some(0) };
            // Only a task of a type the lists found tasks to be: a freed task's memory may hold anything.
            let pending = self.task_types.get(&ty) == Some(&true) && field(l.task_state).map(|v| v as u32) == Some(0);
            out[i] = Some(Swept { pending, running: false, frames: Vec::new(), cut: false });
            if pending {
                if let Some(coro) = field(l.task_coro).filter(|&c| c != 0) {
                    active.push((i, coro, 0));
                }
            }
        }
        let (index, coros): (Vec<usize>, Vec<u64>) = active.into_iter().map(|(i, c, _)| (i, c)).unzip();
        let mut chains = self.chains(&coros);
        // A chain read while its task moved on is read again, once: where the task waits a moment later (dropping
        // it would lose the time of the moves, all from one side of each, and bias the waits).
        let torn: Vec<usize> = (0..chains.len()).filter(|&k| chains[k].torn).collect();
        if !torn.is_empty() {
            let again = self.chains(&torn.iter().map(|&k| coros[k]).collect::<Vec<_>>());
            for (k, c) in torn.into_iter().zip(again) {
                chains[k] = c;
            }
        }
        for (i, c) in index.into_iter().zip(chains) {
            if c.torn {
                out[i] = None; // not readable now: the next sweep sees where it waits then
            } else if let Some(sw) = out[i].as_mut() {
                (sw.frames, sw.running, sw.cut) = (c.frames, c.running, c.cut);
            }
        }
        out
    }

    /// The chains of coroutines `coros`, each root first (the coroutine's own frame, then those of the coroutines it
    /// awaits, to the leaf where it waits), read hop by hop for all of them together: two batches a hop, the
    /// coroutines with their frames, then the awaited objects on their value stacks. Every hop is a coroutine of the
    /// first one's type (CPython's own test, `_PyGen_yf`'s callers): a Future, a Task or another awaitable ends the
    /// chain; so does a finished coroutine, or memory that cannot be read.
    fn chains(&self, coros: &[u64]) -> Vec<Chain> {
        let l = self.layout;
        let row = self.row;
        let fl = row.layout;
        let mut out: Vec<Chain> = vec![Chain::default(); coros.len()];
        let (Ok(iframe), Ok(state_at)) = (u64::try_from(l.gen_iframe), usize::try_from(l.gen_frame_state)) else {
            return out;
        };
        // (chain index, coroutine to read next, the chain's coroutine type, 0 until its first hop)
        let mut active: Vec<(usize, u64, u64)> =
            coros.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, &c)| (i, c, 0)).collect();
        let head_len = iframe as usize + FRAME_HEAD;
        // Where each frame read had its instruction pointer, and what it held: read again at the end.
        let mut instrs: Vec<(usize, u64, u64)> = Vec::new();
        for hop in 0..=MAX_CHAIN {
            if active.is_empty() {
                break;
            }
            let heads = self.mem.read_many(&active.iter().map(|&(_, c, _)| (c, head_len)).collect::<Vec<_>>());
            // (chain index, coroutine, its type), and where the awaited object's pointer is
            let mut slots: Vec<(usize, u64, u64)> = Vec::new();
            let mut slot_addrs: Vec<(u64, usize)> = Vec::new();
            for (&(i, coro, chain_type), head) in active.iter().zip(&heads) {
                let Some(head) = head else { continue };
                let c = &mut out[i];
                if hop == MAX_CHAIN {
                    c.cut = true;
                    continue;
                }
                let ty = u64_in(head, 8).unwrap_or(0);
                if chain_type != 0 && ty != chain_type {
                    continue; // a Future, a Task, another awaitable: the chain ends
                }
                let state = head[state_at] as i8;
                let suspended = l.suspended.contains(&state);
                if !suspended && state != l.created && state != l.executing {
                    continue;
                }
                let frame = &head[iframe as usize..];
                let (Some(code), Some(ip)) = (u64_in(frame, fl.frame_code), u64_in(frame, fl.frame_instr)) else {
                    continue;
                };
                let code = code & row.code_tag_mask;
                c.frames.push(CoroFrame { code, instr: (ip.wrapping_sub(code) as u32) & 0x7fff_ffff });
                // (A running frame moves by design: only suspended ones are checked.)
                if let (true, Ok(at)) = (suspended, u64::try_from(fl.frame_instr)) {
                    instrs.push((i, coro + iframe + at, ip));
                }
                if state == l.executing {
                    c.running = true;
                }
                if !suspended {
                    continue;
                }
                let slot = match l.stack {
                    ValueStack::Top { stacktop, localsplus } => u64_in(frame, stacktop)
                        .map(|v| v as u32 as i32)
                        .filter(|&top| (1..=1 << 16).contains(&top))
                        .and_then(|top| at(coro, iframe + localsplus as u64 + (top as u64 - 1) * 8)),
                    ValueStack::Pointer { stackpointer, back } => {
                        u64_in(frame, stackpointer).and_then(|sp| sp.checked_sub(8 * u64::from(back)))
                    }
                };
                if let Some(a) = slot {
                    slots.push((i, coro, ty));
                    slot_addrs.push((a, 8));
                }
            }
            let next = self.mem.read_many(&slot_addrs);
            active = slots
                .into_iter()
                .zip(next)
                .filter_map(|((i, coro, ty), v)| {
                    let v = u64_in(&v?, 0)?;
                    let v = if matches!(l.stack, ValueStack::Pointer { .. }) { v & !3 } else { v };
                    (v != 0 && v != coro).then_some((i, v, ty))
                })
                .collect();
        }
        // The process runs while its chains are read, hop by hop: a task that moved on meanwhile (from one await to
        // the next) would give the frames of its old await above the coroutine of its new one. Every frame read is
        // checked to be where it was: one more batch.
        let again = self.mem.read_many(&instrs.iter().map(|&(_, at, _)| (at, 8)).collect::<Vec<_>>());
        for (&(i, _, ip), now) in instrs.iter().zip(&again) {
            if now.as_deref().and_then(|b| u64_in(b, 0)) != Some(ip) {
                out[i].torn = true;
            }
        }
        out
    }
}

/// A coroutine chain as [`TaskReader::chains`] read it.
#[derive(Debug, Clone, Default)]
struct Chain {
    frames: Vec<CoroFrame>,
    running: bool,
    cut: bool,
    /// A frame read had moved by the end of the read: the chain mixes two moments, and is not used.
    torn: bool,
}

/// What one pass reads with.
struct Cx<'a, 'm, M> {
    objs: Objects<'m, M>,
    l: AsyncioLayout,
    task_type: u64,
    task_types: &'a mut HashMap<u64, bool>,
}

impl<M: ReadMem> Cx<'_, '_, M> {
    /// Is the object at `obj` a task (the task type or a subclass)?
    fn is_task(&mut self, obj: u64) -> bool {
        let Some(t) = obj.checked_add(8).and_then(|a| self.objs.u64_at(a)) else { return false };
        self.is_task_type(t)
    }

    fn is_task_type(&mut self, t: u64) -> bool {
        if let Some(&known) = self.task_types.get(&t) {
            return known;
        }
        let mut cur = t;
        let mut yes = false;
        for _ in 0..8 {
            if cur == 0 {
                break;
            }
            if cur == self.task_type {
                yes = true;
                break;
            }
            match at(cur, TP_BASE).and_then(|a| self.objs.u64_at(a)) {
                Some(b) => cur = b,
                None => return false,
            }
        }
        self.task_types.insert(t, yes);
        yes
    }

    /// A task's name: a str, or an int `N` for the default `Task-N`.
    fn name(&mut self, obj: u64) -> Option<String> {
        let ty = self.objs.type_of(obj)?;
        if ty.flags & TPFLAGS_UNICODE_SUBCLASS != 0 {
            return self.objs.str_value(obj, 256).map(|(s, _)| s);
        }
        if ty.flags & TPFLAGS_LONG_SUBCLASS != 0 {
            return self.objs.int_value(obj).map(|n| format!("Task-{n}"));
        }
        None
    }

    /// The keys of the set at `set` (at most `max`), unchecked: the caller checks each. The process runs while the
    /// set is read: a set that changed meanwhile (its table moved or resized, or its counts changed, as when a burst of
    /// new tasks grows `_scheduled_tasks`) is read again, up to [`SET_READS`] times; if it never holds still, the keys
    /// of every read together (a stale key fails the caller's check; a missing one would make a task look like a
    /// root, its awaiter missed).
    fn set_items(&mut self, set: u64, max: u64) -> Option<Vec<u64>> {
        let mut head = self.objs.bytes(set, (SET_TABLE + 8) as usize)?;
        let mut seen: Vec<u64> = Vec::new();
        let mut known: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for _ in 0..SET_READS {
            let (used, mask, table) = (u64_in(&head, SET_USED)?, u64_in(&head, SET_MASK)?, u64_in(&head, SET_TABLE)?);
            let slots = mask.checked_add(1)?;
            if used > slots || slots > MAX_SET || !slots.is_power_of_two() {
                return None;
            }
            let bytes = self.objs.bytes(table, usize::try_from(slots * SET_ENTRY).ok()?)?;
            let keys = Self::set_keys(&bytes, max);
            let after = self.objs.bytes(set, (SET_TABLE + 8) as usize)?;
            // (Not the header: its reference count changes all the time.)
            if after.get(SET_FILL..) == head.get(SET_FILL..) && seen.is_empty() {
                return Some(keys);
            }
            for k in keys {
                if (seen.len() as u64) < max && known.insert(k) {
                    seen.push(k);
                }
            }
            if after.get(SET_FILL..) == head.get(SET_FILL..) {
                break;
            }
            head = after;
        }
        Some(seen)
    }

    /// The non-empty keys of a set's table (at most `max`).
    fn set_keys(bytes: &[u8], max: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for e in bytes.chunks_exact(SET_ENTRY as usize) {
            let Some(key) = u64_in(e, 0) else { break };
            if key != 0 {
                out.push(key);
                if out.len() as u64 >= max {
                    break;
                }
            }
        }
        out
    }

    /// The items of the list at `list` (type unchecked), at most `max`.
    fn list_items(&mut self, list: u64, max: u64) -> Option<Vec<u64>> {
        let head = self.objs.bytes(list, (LIST_ITEMS + 8) as usize)?;
        let n = u64_in(&head, LIST_SIZE)?;
        if n > max {
            return None;
        }
        let items = u64_in(&head, LIST_ITEMS)?;
        let bytes = self.objs.bytes(items, usize::try_from(n * 8).ok()?)?;
        bytes.chunks_exact(8).map(|c| u64_in(c, 0)).collect()
    }

    /// The child tasks of a `gather`'s future (`_GatheringFuture._children`), or none for anything else.
    fn gathered(&mut self, fut: u64) -> Vec<u64> {
        let Some(ty) = self.objs.type_of(fut) else { return Vec::new() };
        if self.objs.type_name(&ty).as_deref() != Some("_GatheringFuture") {
            return Vec::new();
        }
        let Some(attrs) = self.objs.attributes(fut, 64) else { return Vec::new() };
        let Some(children) = self.objs.lookup(&attrs, "_children") else { return Vec::new() };
        let items = self.list_items(children, MAX_AWAITERS as u64).unwrap_or_default();
        items.into_iter().filter(|&c| self.is_task(c)).collect()
    }
}

/// `asyncio.tasks.Task` of interpreter `interp`: the type every task is (or derives from).
fn find_task_type<M: ReadMem>(
    objs: &mut Objects<'_, M>,
    row: &Row,
    interp: u64,
    hints: &mut [Option<usize>; 8],
) -> Result<u64, AsyncioError> {
    let tasks = tasks_module(objs, row, interp, hints)?;
    let globals = objs.attributes(tasks, MAX_DICT_ENTRIES).ok_or(AsyncioError::Unreadable("asyncio.tasks"))?;
    let task =
        objs.lookup_hinted(&globals, "Task", &mut hints[1]).ok_or(AsyncioError::Unreadable("asyncio.tasks.Task"))?;
    // The C task's class is named `_asyncio.Task`; the pure-Python fallback (no `_asyncio`) `Task`, with another
    // layout.
    let tp_name = objs
        .u64_at(at(task, row.layout.type_name).ok_or(AsyncioError::Unreadable("asyncio.tasks.Task"))?)
        .and_then(|p| super::objects::read_cstr(objs.mem(), p, 64))
        .map(|(s, _)| s);
    match tp_name.as_deref() {
        Some("_asyncio.Task") => Ok(task),
        Some(other) => Err(AsyncioError::Unsupported(format!(
            "asyncio tasks are not read: asyncio.tasks.Task is {other:?}, not the C task (_asyncio.Task): \
             this Python has no _asyncio module"
        ))),
        None => Err(AsyncioError::Unreadable("asyncio.tasks.Task")),
    }
}

/// `sys.modules["asyncio.tasks"]` of interpreter `interp`.
fn tasks_module<M: ReadMem>(
    objs: &mut Objects<'_, M>,
    row: &Row,
    interp: u64,
    hints: &mut [Option<usize>; 8],
) -> Result<u64, AsyncioError> {
    let modules = at(interp, row.layout.interp_modules)
        .and_then(|a| objs.u64_at(a))
        .and_then(|m| objs.dict(m))
        .ok_or(AsyncioError::Unreadable("sys.modules"))?;
    objs.lookup_hinted(&modules, "asyncio.tasks", &mut hints[0]).ok_or(AsyncioError::NotImported)
}

/// 3.11-3.13: the weak references in the WeakSets `asyncio.tasks` binds, and the tasks in its plain sets.
fn module_tasks<M: ReadMem>(
    cx: &mut Cx<'_, '_, M>,
    row: &Row,
    interp: u64,
    weaksets: &[&str],
    sets: &[&str],
    hints: &mut [Option<usize>; 8],
) -> Result<(Vec<u64>, Vec<u64>), AsyncioError> {
    let tasks = tasks_module(&mut cx.objs, row, interp, hints)?;
    let mut refs_out = Vec::new();
    let globals = cx.objs.attributes(tasks, MAX_DICT_ENTRIES).ok_or(AsyncioError::Unreadable("asyncio.tasks"))?;
    let mut out = Vec::new();
    for (i, name) in weaksets.iter().enumerate() {
        let ws = cx
            .objs
            .lookup_hinted(&globals, name, &mut hints[2 + i])
            .ok_or(AsyncioError::Unreadable("asyncio.tasks' task set"))?;
        let attrs = cx.objs.attributes(ws, 16).ok_or(AsyncioError::Unreadable("a WeakSet"))?;
        let data = cx.objs.lookup(&attrs, "data").ok_or(AsyncioError::Unreadable("WeakSet.data"))?;
        let refs = cx.set_items(data, MAX_SET).ok_or(AsyncioError::Unreadable("WeakSet.data"))?;
        refs_out.extend(refs);
    }
    for (i, name) in sets.iter().enumerate() {
        let Some(s) = cx.objs.lookup_hinted(&globals, name, &mut hints[5 + i]) else { continue };
        out.extend(cx.set_items(s, MAX_SET).unwrap_or_default());
    }
    Ok((refs_out, out))
}

/// 3.14+: the tasks in every thread state's list and the interpreter's, each with the tid of its thread (0: the
/// interpreter's list).
fn list_tasks<M: ReadMem>(
    cx: &mut Cx<'_, '_, M>,
    row: &Row,
    interp: u64,
    tstate_head: i32,
    interp_head: i32,
) -> Result<Vec<(u64, u32)>, AsyncioError> {
    let l = row.layout;
    // Only the main interpreter's tasks: pyperf follows the main interpreter's stacks.
    let mut heads = Vec::new();
    let mut ts = at(interp, l.interp_tstate_head)
        .and_then(|a| cx.objs.u64_at(a))
        .ok_or(AsyncioError::Unreadable("the thread states"))?;
    for _ in 0..MAX_THREAD_STATES {
        if ts == 0 {
            break;
        }
        let tid = at(ts, l.tstate_native_thread_id).and_then(|a| cx.objs.u64_at(a)).unwrap_or(0) as u32;
        if let Some(h) = at(ts, tstate_head) {
            heads.push((h, tid));
        }
        ts = at(ts, l.tstate_next)
            .and_then(|a| cx.objs.u64_at(a))
            .ok_or(AsyncioError::Unreadable("the thread states"))?;
    }
    if let Some(h) = at(interp, interp_head) {
        heads.push((h, 0));
    }
    let node_off = u64::try_from(cx.l.task_node).map_err(|_| AsyncioError::Unsupported("no task_node".into()))?;
    let mut out = Vec::new();
    for (head, tid) in heads {
        let mut node = match cx.objs.u64_at(head) {
            Some(n) => n,
            None => continue,
        };
        let mut n = 0;
        while node != head && node != 0 && n < MAX_TASKS {
            let Some(task) = node.checked_sub(node_off) else { break };
            out.push((task, tid));
            match cx.objs.u64_at(node) {
                Some(next) => node = next,
                None => break,
            }
            n += 1;
        }
    }
    Ok(out)
}
