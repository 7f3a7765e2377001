//! The records a recording is made of. Their byte encoding is in FORMAT.md; this module is the logical view.
//!
//! Compatibility rule (FORMAT.md, "Versioning"): a later minor version may append fields at the end of a
//! top-level record and may add chunk kinds. It may not change or reorder existing fields, nor extend the
//! structs nested in vectors (`Symbol`, the sample columns). Readers therefore decode the known prefix of a
//! record and ignore trailing bytes.

use serde::{Deserialize, Serialize};

/// How the sampling event fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rate {
    /// Samples per second per CPU (perf's `-F`).
    Frequency(u64),
    /// One sample every N events (perf's `-c`): nanoseconds for cpu-clock, cycles for cycles.
    Period(u64),
}

/// What was recorded, where and how. The first chunk of every file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Version of the pyperf that wrote the file.
    pub pyperf_version: String,
    /// Name of the recording host.
    pub hostname: String,
    /// `uname -r` of the recording host.
    pub kernel_release: String,
    /// `uname -m` of the recording host.
    pub arch: String,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_time_unix_ns: u64,
    /// Sampling event name: `cpu-clock` or `cycles`.
    pub event: String,
    /// How often the event fires a sample.
    pub rate: Rate,
    /// The pyperf command line that made the recording.
    pub command_line: Vec<String>,
    /// The workload command given after `--`, empty when attaching with `-p` or `-a`.
    pub workload: Vec<String>,
}

/// One profiled process. Written when the recorder starts following it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Process id (tgid) in the recording host's root PID namespace.
    pub pid: u32,
    /// Full command line (`/proc/PID/cmdline`).
    pub command: Vec<String>,
    /// Python version as found in the binary, e.g. `3.11.7`.
    pub python_version: String,
    /// Path of the ELF object holding the interpreter (libpython or the executable).
    pub interpreter_path: String,
    /// GNU build id of that object, lower-case hex; empty when it has none.
    pub build_id: String,
    /// When the recorder started following the process, ns since the recording's start.
    pub first_seen_ns: u64,
    /// 1.1+: its pid inside its own (innermost) PID namespace, e.g. in a container; equal to `pid` when it shares
    /// the recorder's; 0 in recordings before 1.1.
    pub ns_pid: u32,
    /// 1.1+: its cgroup (`/proc/PID/cgroup`, the v2 path, e.g. `/system.slice/docker-<id>.scope`): the container
    /// identity the kernel gives; empty when unknown.
    pub cgroup: String,
}

/// The fields of [`Process`] that format 1.0 has: what a 1.0 record holds.
#[derive(Deserialize)]
pub(crate) struct ProcessV10 {
    pub pid: u32,
    pub command: Vec<String>,
    pub python_version: String,
    pub interpreter_path: String,
    pub build_id: String,
    pub first_seen_ns: u64,
}

/// The fields format 1.1 appended to [`Process`].
#[derive(Deserialize)]
pub(crate) struct ProcessV11 {
    pub ns_pid: u32,
    pub cgroup: String,
}

/// Something the recorder wants whoever reads the recording to know, e.g. that a process ran a Python newer
/// than the recorder knew (format 1.1+). Written when it happens; reports list them among their warnings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecorderWarning {
    /// The process it is about; 0 for the whole recording.
    pub pid: u32,
    /// One line, for people.
    pub text: String,
}

/// The name a Python program gave one of its threads (`threading.Thread.name`: "MainThread", "worker-1"), as the
/// recorder read it from the process (format 1.2+). A thread's name is recorded when the recorder first learns it
/// and again whenever it changes; a thread whose name could not be read has none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadName {
    /// Process id (tgid), as in the samples.
    pub pid: u32,
    /// Thread id, as in the samples (host namespace).
    pub tid: u32,
    /// When the recorder read it, ns since the recording's start. The name applies to the thread's samples from
    /// its start: it is read after the thread first shows up in the samples.
    pub time_ns: u64,
    /// The name, UTF-8, at most 256 bytes (longer names are cut on a character boundary). Empty: the name before
    /// it no longer applies from `time_ns` on (the tid now belongs to another thread, or the thread is gone), and
    /// the thread has none until the next one.
    pub name: String,
}

/// The on-disk form of a chunk of thread names (kind 9, format 1.2+): one column per field, all of the same length
/// (name `i` is `(pid[i], tid[i], time_ns[i], name[i])`). Columns rather than a vector of records so that a later
/// minor version can append a column, which it could not add to a struct nested in a vector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadNameChunk {
    /// [`ThreadName::pid`] of each name.
    pub pid: Vec<u32>,
    /// [`ThreadName::tid`] of each name.
    pub tid: Vec<u32>,
    /// [`ThreadName::time_ns`] of each name.
    pub time_ns: Vec<u64>,
    /// [`ThreadName::name`] of each name.
    pub name: Vec<String>,
}

impl ThreadNameChunk {
    /// The chunk holding `names`, in order.
    pub fn from_names(names: &[ThreadName]) -> ThreadNameChunk {
        ThreadNameChunk {
            pid: names.iter().map(|n| n.pid).collect(),
            tid: names.iter().map(|n| n.tid).collect(),
            time_ns: names.iter().map(|n| n.time_ns).collect(),
            name: names.iter().map(|n| n.name.clone()).collect(),
        }
    }

    /// Its names, in order; `None` if the columns differ in length.
    pub fn names(&self) -> Option<Vec<ThreadName>> {
        let n = self.pid.len();
        if self.tid.len() != n || self.time_ns.len() != n || self.name.len() != n {
            return None;
        }
        Some(
            (0..n)
                .map(|i| ThreadName {
                    pid: self.pid[i],
                    tid: self.tid[i],
                    time_ns: self.time_ns[i],
                    name: self.name[i].clone(),
                })
                .collect(),
        )
    }
}

/// `OffCpuInterval::flags` bits (format 1.3+).
pub mod off_cpu_flags {
    /// The thread was already off CPU when the recording started or when the recorder began following it: the
    /// interval's start is clamped to that moment (its real start is earlier).
    pub const BEFORE_START: u8 = 1;
    /// The thread was still off CPU when the recording ended: the interval's duration is cut there.
    pub const OPEN_AT_END: u8 = 2;
    /// 1.6+: the thread was in the interpreter's cyclic garbage collector when its stack was walked (as
    /// [`crate::sample_flags::GC`] for a sample).
    pub const GC: u8 = 4;
}

/// [`crate::Sample::flags`] bits (format 1.6+); unknown bits are a newer recorder's.
pub mod sample_flags {
    /// The interpreter's cyclic garbage collector was running in this thread: the interpreter's collecting flag was
    /// set and this thread held the GIL (or no GIL existed yet).
    pub const GC: u8 = 1;
    /// 1.11+: the sample stands for a sampling period in which the thread was running but the CPU was not running
    /// this machine (a hypervisor's steal): the cpu-clock timer fired late, and the recorder wrote the sample it
    /// took plus one flagged sample, with the same stack, for each whole period it missed. Wall time, not CPU time:
    /// CPU views leave them out (the kernel's CPU time of the thread leaves steal out too), wall views count them.
    pub const STOLEN: u8 = 2;
}

/// One interval a thread spent off CPU, from its switch-out to its next switch-in (format 1.3+), with the Python
/// stack it had (walked when it came back on CPU: the stack cannot change while the thread is off CPU).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffCpuInterval {
    /// Process id (tgid), host namespace, as in the samples.
    pub pid: u32,
    /// Thread id, as in the samples.
    pub tid: u32,
    /// Switch-out time, ns since the recording's start (the samples' clock).
    pub start_ns: u64,
    /// Switch-out to switch-in, or to the recording's end ([`off_cpu_flags::OPEN_AT_END`]).
    pub duration_ns: u64,
    /// The part of it spent runnable (woken, waiting for a CPU); equal to `duration_ns` for
    /// [`crate::OffCpuKind::Runnable`].
    pub runnable_ns: u64,
    /// What it counts for in aggregate views: `duration_ns` if at least the recording's minimum
    /// ([`crate::Tables::off_cpu_min_ns`]), else the minimum (shorter intervals are sampled: kept with probability
    /// duration / minimum).
    pub weight_ns: u64,
    /// Why the thread was off CPU.
    pub kind: crate::OffCpuKind,
    /// System call number the thread blocked in (numbers of the recording host's `Header::arch`), -1 for none.
    pub syscall: i32,
    /// GIL state at switch-in; [`crate::GilState::Waiting`] for every GIL-wait interval.
    pub gil: crate::GilState,
    /// How complete the stack is.
    pub status: crate::StackStatus,
    /// Leaf stack node, 0 for no Python frames.
    pub stack: u32,
    /// See [`off_cpu_flags`]; unknown bits are a newer recorder's.
    pub flags: u8,
    /// Thread name (task comm).
    pub comm: String,
    /// 1.5+: leaf node of the interval's task-view stack (the asyncio task chain, [`symbol_flags::TASK`] markers
    /// between the tasks' frames), 0 for none (not an asyncio thread, unknown, or a file before 1.5): then the task
    /// view uses `stack`.
    pub task_stack: u32,
    /// 1.9+: the interpreter its leaf frames ran in (`PyInterpreterState.id`, as [`crate::Sample::interp`]); 0 the
    /// main interpreter, and every interval of a file before 1.9.
    pub interp: u32,
    /// 1.10+: the span it was in ([`SpanLink`] number, as [`crate::Sample::link`]); 0 none, and every interval of a
    /// file before 1.10.
    pub link: u32,
}

/// The on-disk form of a chunk of off-CPU intervals (kind 10, format 1.3+): the recording's minimum and one column
/// per field, all of the same length (interval `i` is element `i` of every column). Columns so that a later minor
/// version can append one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpuChunk {
    /// The recording's `--off-cpu-min`, ns: the same in every chunk of a file.
    pub min_ns: u64,
    /// [`OffCpuInterval::pid`] of each interval.
    pub pid: Vec<u32>,
    /// [`OffCpuInterval::tid`] of each interval.
    pub tid: Vec<u32>,
    /// [`OffCpuInterval::start_ns`] of each interval.
    pub start_ns: Vec<u64>,
    /// [`OffCpuInterval::duration_ns`] of each interval.
    pub duration_ns: Vec<u64>,
    /// [`OffCpuInterval::runnable_ns`] of each interval.
    pub runnable_ns: Vec<u64>,
    /// [`OffCpuInterval::weight_ns`] of each interval.
    pub weight_ns: Vec<u64>,
    /// Raw [`crate::OffCpuKind`] of each interval.
    pub kind: Vec<u8>,
    /// [`OffCpuInterval::syscall`] of each interval.
    pub syscall: Vec<i32>,
    /// Raw [`crate::GilState`] of each interval.
    pub gil: Vec<u8>,
    /// Raw [`crate::StackStatus`] of each interval.
    pub status: Vec<u8>,
    /// [`OffCpuInterval::stack`] of each interval.
    pub stack: Vec<u32>,
    /// [`OffCpuInterval::flags`] of each interval.
    pub flags: Vec<u8>,
    /// [`OffCpuInterval::comm`] of each interval.
    pub comm: Vec<String>,
    /// 1.5+: [`OffCpuInterval::task_stack`] of each interval; empty in files before 1.5 (every interval reads 0).
    pub task_stack: Vec<u32>,
    /// 1.9+: [`OffCpuInterval::interp`] of each interval; empty when every interval is the main interpreter's (and in
    /// files before 1.9).
    pub interp: Vec<u32>,
    /// 1.10+: [`OffCpuInterval::link`] of each interval; empty when no interval was in a span (and in files before
    /// 1.10).
    pub link: Vec<u32>,
}

impl OffCpuChunk {
    /// The chunk holding `intervals`, in order, with the recording's minimum `min_ns`.
    pub fn from_intervals(min_ns: u64, intervals: &[OffCpuInterval]) -> OffCpuChunk {
        let mut c = OffCpuChunk { min_ns, ..Default::default() };
        for iv in intervals {
            c.push(iv);
        }
        c
    }

    /// Appends one interval to every column.
    pub fn push(&mut self, iv: &OffCpuInterval) {
        // The interpreter column is kept only once some interval is not the main interpreter's, as the samples'.
        if iv.interp != 0 || !self.interp.is_empty() {
            self.interp.resize(self.pid.len(), 0);
            self.interp.push(iv.interp);
        }
        // And the span column once some interval was in a span.
        if iv.link != 0 || !self.link.is_empty() {
            self.link.resize(self.pid.len(), 0);
            self.link.push(iv.link);
        }
        self.pid.push(iv.pid);
        self.tid.push(iv.tid);
        self.start_ns.push(iv.start_ns);
        self.duration_ns.push(iv.duration_ns);
        self.runnable_ns.push(iv.runnable_ns);
        self.weight_ns.push(iv.weight_ns);
        self.kind.push(iv.kind.as_u8());
        self.syscall.push(iv.syscall);
        self.gil.push(iv.gil.as_u8());
        self.status.push(iv.status.as_u8());
        self.stack.push(iv.stack);
        self.flags.push(iv.flags);
        self.comm.push(iv.comm.clone());
        self.task_stack.push(iv.task_stack);
    }

    /// Number of intervals (of the `pid` column: see [`OffCpuChunk::intervals`] for the check that all agree).
    pub fn len(&self) -> usize {
        self.pid.len()
    }

    /// Whether the chunk holds no interval.
    pub fn is_empty(&self) -> bool {
        self.pid.is_empty()
    }

    /// Its intervals, in order, taking the columns; `None` if the columns differ in length.
    pub fn into_intervals(self) -> Option<Vec<OffCpuInterval>> {
        let n = self.pid.len();
        let lens = [
            self.tid.len(),
            self.start_ns.len(),
            self.duration_ns.len(),
            self.runnable_ns.len(),
            self.weight_ns.len(),
            self.kind.len(),
            self.syscall.len(),
            self.gil.len(),
            self.status.len(),
            self.stack.len(),
            self.flags.len(),
            self.comm.len(),
        ];
        // An empty task_stack column is a file before 1.5, an empty interp one all the main interpreter's
        // (FORMAT.md, "Versioning").
        let optional = |l: usize| l == 0 || l == n;
        if lens.iter().any(|&l| l != n)
            || !optional(self.task_stack.len())
            || !optional(self.interp.len())
            || !optional(self.link.len())
        {
            return None;
        }
        let mut comm = self.comm.into_iter();
        Some(
            (0..n)
                .map(|i| OffCpuInterval {
                    pid: self.pid[i],
                    tid: self.tid[i],
                    start_ns: self.start_ns[i],
                    duration_ns: self.duration_ns[i],
                    runnable_ns: self.runnable_ns[i],
                    weight_ns: self.weight_ns[i],
                    kind: crate::OffCpuKind::from_u8(self.kind[i]),
                    syscall: self.syscall[i],
                    gil: crate::GilState::from_u8(self.gil[i]),
                    status: crate::StackStatus::from_u8(self.status[i]),
                    stack: self.stack[i],
                    flags: self.flags[i],
                    comm: comm.next().unwrap_or_default(),
                    task_stack: self.task_stack.get(i).copied().unwrap_or(0),
                    interp: self.interp.get(i).copied().unwrap_or(0),
                    link: self.link.get(i).copied().unwrap_or(0),
                })
                .collect(),
        )
    }

    /// Its intervals, in order; `None` if the columns differ in length.
    pub fn intervals(&self) -> Option<Vec<OffCpuInterval>> {
        self.clone().into_intervals()
    }
}

/// A native library (or executable) the recording has frames of (format 1.4+): the file as it was mapped, and its
/// GNU build id, which identifies its exact build (to find its debug information later).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Library {
    /// Path as mapped in the process (`/usr/lib/x86_64-linux-gnu/libz.so.1.3`): the `file` of its native frames.
    pub path: String,
    /// GNU build id, lower-case hex; empty when the file has none or could not be read.
    pub build_id: String,
}

/// The on-disk form of a chunk of native libraries (kind 11, format 1.4+): one column per field, both of the same
/// length (library `i` is `(path[i], build_id[i])`). Columns so that a later minor version can append one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryChunk {
    /// [`Library::path`] of each library.
    pub path: Vec<String>,
    /// [`Library::build_id`] of each library.
    pub build_id: Vec<String>,
}

impl LibraryChunk {
    /// The chunk holding `libraries`, in order.
    pub fn from_libraries(libraries: &[Library]) -> LibraryChunk {
        LibraryChunk {
            path: libraries.iter().map(|l| l.path.clone()).collect(),
            build_id: libraries.iter().map(|l| l.build_id.clone()).collect(),
        }
    }

    /// Its libraries, in order, taking the columns; `None` if the columns differ in length.
    pub fn into_libraries(self) -> Option<Vec<Library>> {
        if self.path.len() != self.build_id.len() {
            return None;
        }
        Some(self.path.into_iter().zip(self.build_id).map(|(path, build_id)| Library { path, build_id }).collect())
    }
}

/// A source file of the recorded program (format 1.7+, `pyperf record --source`): the bytes of a file some sampled
/// Python frame runs, as the recorder read them when it first met the file, so that a recording read on another
/// machine can still show its code (`pyperf annotate`). Or, when the recorder could not store it, why not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceFile {
    /// The file as the recording names it: the `file` of its Python frames (`co_filename`), which the recorder read
    /// in the process's own root (`/proc/PID/root`) and, when relative, its working directory.
    pub path: String,
    /// SHA-256 of `content` (32 bytes: [`sha256`]; `sha256sum FILE` prints it in hex, [`SourceFile::sha256_hex`]);
    /// empty when the file was not stored.
    pub sha256: Vec<u8>,
    /// The file's bytes as read (any encoding: Python source is UTF-8 unless it says otherwise); empty when not
    /// stored (or an empty file).
    pub content: Vec<u8>,
    /// Empty when stored; else why the recorder did not store it, one line (`larger than 4 MiB`, `not a regular
    /// file`, `No such file or directory`).
    pub error: String,
}

impl SourceFile {
    /// A file stored with its content (its hash computed here).
    pub fn stored(path: &str, content: Vec<u8>) -> SourceFile {
        SourceFile { path: path.to_string(), sha256: sha256(&content).to_vec(), content, error: String::new() }
    }

    /// A file the recorder could not store, and why.
    pub fn missing(path: &str, error: &str) -> SourceFile {
        SourceFile { path: path.to_string(), sha256: Vec::new(), content: Vec::new(), error: error.to_string() }
    }

    /// Whether its content is stored (no `error`).
    pub fn is_stored(&self) -> bool {
        self.error.is_empty()
    }

    /// [`SourceFile::sha256`] in lower-case hex, as `sha256sum` prints it; empty when not stored.
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }
}

/// SHA-256 of `bytes`: the hash a [`SourceFile`] keeps of its content.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// `bytes` in lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The on-disk form of a chunk of source files (kind 13, format 1.7+): one column per field, all of the same length
/// (file `i` is element `i` of every column). Columns so that a later minor version can append one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceChunk {
    /// [`SourceFile::path`] of each file.
    pub path: Vec<String>,
    /// [`SourceFile::sha256`] of each file: 32 bytes, or none when not stored.
    pub sha256: Vec<Vec<u8>>,
    /// [`SourceFile::content`] of each file.
    pub content: Vec<Vec<u8>>,
    /// [`SourceFile::error`] of each file.
    pub error: Vec<String>,
}

impl SourceChunk {
    /// The chunk holding `files`, in order.
    pub fn from_files(files: &[SourceFile]) -> SourceChunk {
        SourceChunk {
            path: files.iter().map(|f| f.path.clone()).collect(),
            sha256: files.iter().map(|f| f.sha256.clone()).collect(),
            content: files.iter().map(|f| f.content.clone()).collect(),
            error: files.iter().map(|f| f.error.clone()).collect(),
        }
    }

    /// Its files, in order, taking the columns; `None` if the columns differ in length, a hash is neither 32 bytes
    /// nor empty, or a file is both stored (no error) and without a hash.
    pub fn into_files(self) -> Option<Vec<SourceFile>> {
        let n = self.path.len();
        if self.sha256.len() != n || self.content.len() != n || self.error.len() != n {
            return None;
        }
        let files: Vec<SourceFile> = self
            .path
            .into_iter()
            .zip(self.sha256)
            .zip(self.content.into_iter().zip(self.error))
            .map(|((path, sha256), (content, error))| SourceFile { path, sha256, content, error })
            .collect();
        let consistent = |f: &SourceFile| {
            if f.error.is_empty() {
                f.sha256.len() == 32
            } else {
                f.sha256.is_empty() && f.content.is_empty()
            }
        };
        files.iter().all(consistent).then_some(files)
    }
}

/// A suspended asyncio task, sampled by the recorder's task sweep (format 1.5+): where it waits (its task-view stack:
/// the root task's marker ... the task's own suspended coroutine frames, leaf = the await it is suspended in) and the
/// wall time it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskWait {
    /// Process id (tgid), as in the samples.
    pub pid: u32,
    /// Thread whose event loop owns the task, as in the samples; 0 when unknown.
    pub tid: u32,
    /// Sweep time, ns since the recording's start (the samples' clock).
    pub time_ns: u64,
    /// Wall time it stands for: the time since the previous sweep (several identical (pid, tid, stack) of one sweep
    /// may be summed into one).
    pub weight_ns: u64,
    /// Leaf node of its task-view stack (never 0 from the recorder).
    pub stack: u32,
}

/// The on-disk form of a chunk of task waits (kind 12, format 1.5+): one column per field, all of the same length
/// (wait `i` is element `i` of every column). Columns so that a later minor version can append one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskWaitChunk {
    /// [`TaskWait::pid`] of each wait.
    pub pid: Vec<u32>,
    /// [`TaskWait::tid`] of each wait.
    pub tid: Vec<u32>,
    /// [`TaskWait::time_ns`] of each wait.
    pub time_ns: Vec<u64>,
    /// [`TaskWait::weight_ns`] of each wait.
    pub weight_ns: Vec<u64>,
    /// [`TaskWait::stack`] of each wait.
    pub stack: Vec<u32>,
}

impl TaskWaitChunk {
    /// Appends one wait to every column.
    pub fn push(&mut self, w: &TaskWait) {
        self.pid.push(w.pid);
        self.tid.push(w.tid);
        self.time_ns.push(w.time_ns);
        self.weight_ns.push(w.weight_ns);
        self.stack.push(w.stack);
    }

    /// The chunk holding `waits`, in order.
    pub fn from_waits(waits: &[TaskWait]) -> TaskWaitChunk {
        let mut c = TaskWaitChunk::default();
        for w in waits {
            c.push(w);
        }
        c
    }

    /// Number of waits (of the `pid` column: see [`TaskWaitChunk::waits`] for the check that all agree).
    pub fn len(&self) -> usize {
        self.pid.len()
    }

    /// Whether the chunk holds no wait.
    pub fn is_empty(&self) -> bool {
        self.pid.is_empty()
    }

    /// Its waits, in order; `None` if the columns differ in length.
    pub fn waits(&self) -> Option<Vec<TaskWait>> {
        let n = self.pid.len();
        if [self.tid.len(), self.time_ns.len(), self.weight_ns.len(), self.stack.len()].iter().any(|&l| l != n) {
            return None;
        }
        Some(
            (0..n)
                .map(|i| TaskWait {
                    pid: self.pid[i],
                    tid: self.tid[i],
                    time_ns: self.time_ns[i],
                    weight_ns: self.weight_ns[i],
                    stack: self.stack[i],
                })
                .collect(),
        )
    }
}

/// `Symbol::flags` bits. A symbol with neither [`symbol_flags::NATIVE`] nor [`symbol_flags::KERNEL`] is a Python
/// frame; [`Symbol::kind`] tells the kinds apart.
pub mod symbol_flags {
    /// The function name was cut (too long or unreadable past some point).
    pub const NAME_CUT: u32 = 1;
    /// The file name was cut.
    pub const FILE_CUT: u32 = 2;
    /// The code object could not be read: name and file are placeholders. With [`NATIVE`] (1.4+): no symbol of the
    /// library covers the address, and the name is `library+0xoffset` (the library's file name and the offset from
    /// its lowest load address), or `[unknown]` outside every mapping.
    pub const UNRESOLVED: u32 = 4;
    /// A native frame (1.4+, `record --native`): machine code of the process, unwound from its C stack. `name` is
    /// the function (demangled), `file` the library or executable as mapped (`/usr/lib/x86_64-linux-gnu/libz.so.1`),
    /// `scope` empty, `line` 0.
    pub const NATIVE: u32 = 8;
    /// The `file` of a [`NATIVE`] frame in code generated at run time (an anonymous executable mapping: a JIT
    /// compiler's), and the `name` of such a frame when the JIT gave it none of its own (CPython's JIT).
    pub const JIT_FILE: &str = "[jit]";
    /// A kernel frame (1.4+, `record --kernel`): `name` is the kernel function, `file` `[kernel.kallsyms]`, or
    /// `[module]` for a module's function, `scope` empty, `line` 0.
    pub const KERNEL: u32 = 16;
    /// With [`NATIVE`] (1.4+): a function of the interpreter itself among the Python frames: between two of them
    /// (calls, attribute lookups), rootward of the first (the program's, the interpreter's and the thread's start-up)
    /// or leafward of the last. Reports hide these by default, so that a stack reads as its Python frames and the
    /// native code they call.
    pub const GLUE: u32 = 32;
    /// With [`NATIVE`] (1.4+): a pseudo-frame the recorder adds, not a function: `[native: unmerged]` (the native
    /// walk could not be merged with the Python one: the sample keeps its Python frames), `[native: truncated]`
    /// (the native frames rootward of it are missing), `[native: no stack copy]`. `file` is empty.
    pub const MARKER: u32 = 64;
    /// A task-view pseudo-frame (1.5+, asyncio): `[task NAME]` (the boundary into the task NAME, as
    /// `Task.get_name()` gives it: its frames follow, leafward), `[task NAME (+K awaiters)]` (the same, K >= 1 other
    /// tasks or futures also await it: the stack follows one of them), or `[asyncio loop]` (root of a task-view stack
    /// of a thread running an event loop when no task runs on it: its frames follow). `scope` and `file` empty, `line`
    /// 0. See [`TASK_MARKER_PREFIX`] and [`ASYNCIO_LOOP`].
    pub const TASK: u32 = 128;
    /// How the name of every [`TASK`] symbol naming a task starts.
    pub const TASK_MARKER_PREFIX: &str = "[task ";
    /// The name of the [`TASK`] symbol at the root of an event loop thread's stack when no task runs on it.
    pub const ASYNCIO_LOOP: &str = "[asyncio loop]";
    /// An interpreter boundary (1.8+, subinterpreters): `[interpreter N]`, where the frames leafward of it run in
    /// interpreter N (`PyInterpreterState.id`) and those rootward of it, the same thread's frames in the interpreter
    /// that called into it (`Interpreter.exec`, `.call`), wait for the call to return. At the root of a stack: the
    /// calling interpreter's frames could not be read (the recorder counts those). Also the root frame reports add
    /// with `--interp-root`. `scope` and `file` empty, `line` 0. See [`INTERPRETER_MARKER_PREFIX`].
    pub const INTERPRETER: u32 = 256;
    /// How the name of every [`INTERPRETER`] symbol starts; the interpreter id and `]` follow.
    pub const INTERPRETER_MARKER_PREFIX: &str = "[interpreter ";
}

/// What a frame is, from its symbol's flags ([`Symbol::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// A Python function (neither [`symbol_flags::NATIVE`] nor [`symbol_flags::KERNEL`]).
    Python,
    /// A native function ([`symbol_flags::NATIVE`]).
    Native,
    /// A native function of the interpreter between Python frames ([`symbol_flags::NATIVE`] and
    /// [`symbol_flags::GLUE`]).
    Glue,
    /// A recorder's pseudo-frame ([`symbol_flags::NATIVE`] and [`symbol_flags::MARKER`]).
    Marker,
    /// A kernel function ([`symbol_flags::KERNEL`]).
    Kernel,
    /// A task-view pseudo-frame ([`symbol_flags::TASK`], 1.5+): `[task NAME]`, `[asyncio loop]`.
    Task,
    /// An interpreter boundary ([`symbol_flags::INTERPRETER`], 1.8+): `[interpreter N]`.
    Interpreter,
}

/// A frame as shown to the user: one Python function at one line, or (1.4+) a native or kernel function
/// ([`Symbol::kind`]). The same function at the same line in the same file is one symbol, whatever process it came
/// from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Symbol {
    /// Class or enclosing qualified name (`Class`, `outer.<locals>`); empty at module level and for native and
    /// kernel frames.
    pub scope: String,
    /// Function name as the interpreter names it (`run`, `<module>`, `<lambda>`, `<listcomp>`); a native or kernel
    /// function's name (see [`symbol_flags`]).
    pub name: String,
    /// Source file (`co_filename`), as the interpreter has it; a native frame's library, a kernel frame's
    /// `[kernel.kallsyms]` or `[module]`.
    pub file: String,
    /// Line being executed; 0 when unknown (and for native and kernel frames).
    pub line: u32,
    /// See [`symbol_flags`].
    pub flags: u32,
}

impl Symbol {
    /// `scope.name`, or `name` at module level.
    pub fn qualified_name(&self) -> String {
        if self.scope.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.scope, self.name)
        }
    }

    /// What kind of frame it is: [`symbol_flags::INTERPRETER`] first, then [`symbol_flags::KERNEL`], then
    /// [`symbol_flags::TASK`], then
    /// [`symbol_flags::NATIVE`] with [`symbol_flags::MARKER`] or [`symbol_flags::GLUE`] (in that order), else Python.
    /// GLUE and MARKER without NATIVE mean nothing.
    pub fn kind(&self) -> FrameKind {
        use symbol_flags::*;
        if self.flags & INTERPRETER != 0 {
            FrameKind::Interpreter
        } else if self.flags & KERNEL != 0 {
            FrameKind::Kernel
        } else if self.flags & TASK != 0 {
            FrameKind::Task
        } else if self.flags & NATIVE == 0 {
            FrameKind::Python
        } else if self.flags & MARKER != 0 {
            FrameKind::Marker
        } else if self.flags & GLUE != 0 {
            FrameKind::Glue
        } else {
            FrameKind::Native
        }
    }
}

/// Symbols new since the previous chunk of this kind, with consecutive ids starting at `first_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolChunk {
    /// Id of `symbols[0]`.
    pub first_id: u32,
    /// The symbols, ids ascending.
    pub symbols: Vec<Symbol>,
}

/// Stack nodes new since the previous chunk. Stacks form a prefix tree: node `first_id + i` is the frame
/// `symbols[i]` called from node `first_id + i - parent_back[i]`, where a back-reference equal to the
/// node's own id means "no caller" (a root frame). Node 0 is the empty stack. A sample names its leaf node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackChunk {
    /// Id of the first node; one more than the last node defined before.
    pub first_id: u32,
    /// Per node, its id minus its caller's id (the node's own id for a root frame).
    pub parent_back: Vec<u32>,
    /// Per node, the symbol id of its frame. Same length as `parent_back`.
    pub symbols: Vec<u32>,
}

/// A batch of samples, column by column (it compresses several times better than row by row), as a reader
/// hands it out. All decoded columns have `len` entries; a column the reader was told to skip
/// ([`crate::Reader::set_columns`]) is empty. `base_time_ns`, `status` and `stack` are always decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampleChunk {
    /// Time of the first sample, ns since the recording's start.
    pub base_time_ns: u64,
    /// Difference to the previous sample's time (the first is 0). Signed: CPUs deliver slightly out of order.
    pub time_delta_ns: Vec<i64>,
    /// CPU the sample was taken on.
    pub cpu: Vec<u32>,
    /// Process id (tgid).
    pub pid: Vec<u32>,
    /// Thread id.
    pub tid: Vec<u32>,
    /// Index into `comms`.
    pub comm: Vec<u32>,
    /// Distinct thread names of this chunk.
    pub comms: Vec<String>,
    /// Raw [`crate::ThreadStateMatch`] values.
    pub thread_state: Vec<u8>,
    /// Raw [`crate::GilState`] values.
    pub gil: Vec<u8>,
    /// Raw [`crate::PthreadIdMatch`] values.
    pub pthread_id: Vec<u8>,
    /// Raw [`crate::StackStatus`] values.
    pub status: Vec<u8>,
    /// Leaf stack node; 0 for no Python frames.
    pub stack: Vec<u32>,
    /// 1.5+: leaf node of each sample's task-view stack (asyncio), 0 for none (then the task view uses `stack`).
    /// Empty when the file has no such column (before 1.5) or the reader skipped it ([`Columns::task_stack`]).
    pub task_stack: Vec<u32>,
    /// 1.6+: each sample's [`sample_flags`], 0 for none. Empty when the file has no such column (before 1.6: every
    /// sample 0) or the reader skipped it ([`Columns::flags`]).
    pub flags: Vec<u8>,
    /// 1.8+: each sample's interpreter id (`PyInterpreterState.id` of the interpreter its leaf frames run in: 0 the
    /// main one, also for a sample with no thread state). Empty when the file has no such column (before 1.8: every
    /// sample 0) or the reader skipped it ([`Columns::interp`]).
    pub interp: Vec<u32>,
    /// 1.10+: each sample's span ([`SpanLink`] number, 1 the first of the recording; 0 none). Empty when the file has
    /// no such column (before 1.10, or no sample of the chunk was in a span) or the reader skipped it
    /// ([`Columns::link`]).
    pub link: Vec<u32>,
}

impl SampleChunk {
    /// Number of samples (the `stack` column is always decoded).
    pub fn len(&self) -> usize {
        self.stack.len()
    }

    /// Whether the chunk holds no sample.
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }
}

/// Which optional sample columns a reader decodes. Skipping a column costs nothing: each is stored as its own
/// length-prefixed byte string, so a reader steps over it without looking at its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// `time_delta_ns` (without it every sample has the chunk's base time).
    pub time: bool,
    /// `cpu`.
    pub cpu: bool,
    /// `pid`.
    pub pid: bool,
    /// `tid`.
    pub tid: bool,
    /// `comm` and `comms`.
    pub comm: bool,
    /// `thread_state`, `gil` and `pthread_id`.
    pub states: bool,
    /// `task_stack` (1.5+).
    pub task_stack: bool,
    /// `flags` (1.6+).
    pub flags: bool,
    /// `interp` (1.8+).
    pub interp: bool,
    /// `link` (1.10+).
    pub link: bool,
}

impl Columns {
    /// Every column.
    pub const ALL: Columns = Columns {
        time: true,
        cpu: true,
        pid: true,
        tid: true,
        comm: true,
        states: true,
        task_stack: true,
        flags: true,
        interp: true,
        link: true,
    };
    /// Only what every reader gets: time base, status, stack.
    pub const MINIMAL: Columns = Columns {
        time: false,
        cpu: false,
        pid: false,
        tid: false,
        comm: false,
        states: false,
        task_stack: false,
        flags: false,
        interp: false,
        link: false,
    };
}

impl Default for Columns {
    fn default() -> Self {
        Columns::ALL
    }
}

/// A span some samples ran in (1.10+): the OpenTelemetry span active on the thread, by its trace's id and its own,
/// as the tracing SDK holds them (never 0). Spans are numbered in the order their chunks give them, from 1; a sample
/// or interval names one by that number ([`crate::Sample::link`]), 0 for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanLink {
    /// 128-bit trace id.
    pub trace_id: u128,
    /// 64-bit span id.
    pub span_id: u64,
}

impl SpanLink {
    /// The trace id as W3C trace context writes it: 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The span id as W3C trace context writes it: 16 lowercase hex digits.
    pub fn span_hex(&self) -> String {
        format!("{:016x}", self.span_id)
    }
}

/// The on-disk form of spans new since the previous such chunk (kind 14, format 1.10+): ids big-endian, as W3C trace
/// context orders their bytes, one column each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkChunk {
    /// [`SpanLink::trace_id`] of each span.
    pub trace_id: Vec<[u8; 16]>,
    /// [`SpanLink::span_id`] of each span.
    pub span_id: Vec<[u8; 8]>,
}

impl LinkChunk {
    /// The chunk holding `links`, in order.
    pub fn from_links(links: &[SpanLink]) -> LinkChunk {
        LinkChunk {
            trace_id: links.iter().map(|l| l.trace_id.to_be_bytes()).collect(),
            span_id: links.iter().map(|l| l.span_id.to_be_bytes()).collect(),
        }
    }

    /// Its spans, in order; `None` if the columns differ in length.
    pub fn into_links(self) -> Option<Vec<SpanLink>> {
        (self.trace_id.len() == self.span_id.len()).then(|| {
            self.trace_id
                .into_iter()
                .zip(self.span_id)
                .map(|(t, s)| SpanLink { trace_id: u128::from_be_bytes(t), span_id: u64::from_be_bytes(s) })
                .collect()
        })
    }
}

/// The on-disk form of a sample chunk (FORMAT.md): per column a postcard byte string, holding LEB128 varints
/// (zigzag for the time deltas) or raw bytes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireSampleChunk<'a> {
    pub base_time_ns: u64,
    pub len: u32,
    #[serde(borrow, serialize_with = "as_bytes")]
    pub time_delta: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub cpu: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub pid: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub tid: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub comm: &'a [u8],
    pub comms: Vec<&'a str>,
    #[serde(serialize_with = "as_bytes")]
    pub thread_state: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub gil: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub pthread_id: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub status: &'a [u8],
    #[serde(serialize_with = "as_bytes")]
    pub stack: &'a [u8],
    /// 1.5+; an empty byte string when decoding a file before 1.5 (the reader appends one, FORMAT.md "Versioning").
    #[serde(serialize_with = "as_bytes")]
    pub task_stack: &'a [u8],
    /// 1.6+, raw bytes; an empty byte string when decoding a file before 1.6 (as `task_stack`).
    #[serde(serialize_with = "as_bytes")]
    pub flags: &'a [u8],
    /// 1.8+, LEB128 interpreter ids; an empty byte string when decoding a file before 1.8 (as `task_stack`).
    #[serde(serialize_with = "as_bytes")]
    pub interp: &'a [u8],
    /// 1.10+, LEB128 span numbers; an empty byte string when decoding a file before 1.10 (as `task_stack`).
    #[serde(serialize_with = "as_bytes")]
    pub link: &'a [u8],
}

/// A column as one byte string: what serde's `&[u8]` deserializes from (postcard: a length, then the bytes), written
/// in one copy instead of byte by byte (serde serializes a slice as a sequence: the same bytes in postcard, ~2% of
/// the recorder's time per sample).
fn as_bytes<S: serde::Serializer>(v: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// The trailer: what the recorder counted. Written last; missing when the recorder was killed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Samples written to the file.
    pub samples: u64,
    /// Samples the kernel took but that never reached the file (ring buffer full, dropped).
    pub lost_samples: u64,
    /// Samples whose stack was deeper than the walker's limit (leaf frames kept).
    pub truncated_stacks: u64,
    /// Frames whose code object could not be resolved to a name.
    pub lost_symbols: u64,
    /// Failed reads of target memory and other non-fatal errors.
    pub errors: u64,
    /// Recording length.
    pub duration_ns: u64,
    /// Further named counters (per-cause breakdowns); readers show what they do not know as is.
    pub counters: Vec<(String, u64)>,
}

impl Stats {
    /// The named counter's value, if the recorder wrote it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|(k, _)| k == name).map(|&(_, v)| v)
    }
}
