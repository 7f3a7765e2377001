//! What pyperf reads of /proc about a process or one of its threads, each fact parsed in one place: the stat line
//! (state letter, parent, flags, identity), status fields (Tgid, NSpid, context switches), the system call a thread
//! is blocked in, its comm, its threads, the memory map, the kernel stack.
//!
//! A leaf: it imports nothing of the crate's (std and libc only), so every room may use it. Where these facts are
//! used for discovery (which processes to follow, their namespaces and cgroup) is `targets/procfs.rs`.
//!
//! The parsers take the file's text and never panic: a file read while its task exits may be cut short, and a comm
//! may hold anything (spaces, parentheses, newlines).

/// A small /proc file, read in one or two read(2) calls: scans read one per process, many times a second, and
/// `read_to_string` spends a stat(2) and four reads on each (a /proc file says its size is 0).
pub fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(buf).ok()
}

/// One program run in one process. Pid reuse changes the start time; exec keeps the pid and the start time but
/// builds a new address space, whose code and stack addresses (set by exec, placed at random by ASLR; a different
/// program has a different code size) change with it. A sampler configured for the old image would read the new
/// one at the old addresses: an identity change means "forget this process, look at it again".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Clock ticks since boot (/proc/PID/stat field 22).
    pub start_time: u64,
    /// (startcode, endcode, startstack): fields 26-28. Zero for a zombie, whose image is gone.
    pub image: (u64, u64, u64),
}

/// What pyperf reads of /proc/PID/stat (or /proc/PID/task/TID/stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// R, S, D, Z (zombie: exited, not yet reaped), ...
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Kernel flags (field 9): `PF_KTHREAD` marks a kernel thread.
    pub flags: u64,
    /// Which program run it is.
    pub identity: Identity,
}

impl Stat {
    /// Still running: not a zombie (an exited process its parent has not reaped yet).
    pub fn running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// A kernel thread (`PF_KTHREAD`): no user space to profile.
    pub fn kernel_thread(&self) -> bool {
        const PF_KTHREAD: u64 = 0x0020_0000;
        self.flags & PF_KTHREAD != 0
    }
}

/// Parses /proc/PID/stat. The command name (field 2) may hold spaces and parentheses: fields after it follow
/// the last ')'.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    // Field k (1-based) is at index k - 3 from here.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |k: usize| f.get(k - 3)?.parse::<u64>().ok();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: u32::try_from(num(4)?).ok()?,
        flags: num(9)?,
        identity: Identity { start_time: num(22)?, image: (num(26)?, num(27)?, num(28)?) },
    })
}

/// /proc/PID/stat of `pid`, None if it is gone.
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&read_small(&format!("/proc/{pid}/stat"))?)
}

/// /proc/PID/task/TID/stat of thread `tid` of `pid`, None if it is gone (or not a thread of `pid`).
pub fn task_stat(pid: u32, tid: u32) -> Option<Stat> {
    parse_stat(&read_small(&format!("/proc/{pid}/task/{tid}/stat"))?)
}

/// The threads of `pid` (/proc/PID/task), in tid order.
pub fn tasks(pid: u32) -> std::io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether thread `tid` of `pid` still exists.
pub fn task_exists(pid: u32, tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// The value of field `key` (`"Tgid"`, `"NSpid"`, `"CapEff"`) of a /proc/PID/status text, trimmed.
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')).map(str::trim)
}

/// The pids of an `NSpid:` line of /proc/PID/status, outermost (the host's, as seen from pyperf's namespace)
/// first; more than one: the process is in a nested PID namespace. None without one (kernels before 4.1) or when
/// one is not a number.
pub fn parse_nspids(status: &str) -> Option<Vec<u32>> {
    let pids: Vec<u32> =
        status_field(status, "NSpid")?.split_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
    (!pids.is_empty()).then_some(pids)
}

/// The innermost pid of an `NSpid:` line: the id a process or thread has in its own PID namespace.
pub fn parse_nspid(status: &str) -> Option<u32> {
    parse_nspids(status)?.last().copied()
}

/// /proc/PID/status of process `pid`, as text.
pub fn status(pid: u32) -> Option<String> {
    read_small(&format!("/proc/{pid}/status"))
}

/// The id of thread `tid` of `pid` in its own (innermost) PID namespace, from /proc/PID/task/TID/status.
pub fn task_ns_tid(pid: u32, tid: u32) -> Option<u32> {
    parse_nspid(&read_small(&format!("/proc/{pid}/task/{tid}/status"))?)
}

/// The `Tgid:` (process) of a /proc/PID/status text.
pub fn parse_tgid(status: &str) -> Option<u32> {
    status_field(status, "Tgid")?.parse().ok()
}

/// The thread group (process) a thread id belongs to (`Tgid:` of /proc/TID/status): itself for a process.
pub fn tgid(tid: u32) -> Option<u32> {
    parse_tgid(&read_small(&format!("/proc/{tid}/status"))?)
}

/// Context switches so far, voluntary and not, of a /proc/PID/status text: unchanged across a read, the thread did
/// not run meanwhile. None when either count is missing or not a number.
pub fn parse_switches(status: &str) -> Option<u64> {
    let n = |key| status_field(status, key)?.parse::<u64>().ok();
    n("voluntary_ctxt_switches")?.checked_add(n("nonvoluntary_ctxt_switches")?)
}

/// Context switches so far of thread `tid` of `pid` (see [`parse_switches`]).
pub fn task_switches(pid: u32, tid: u32) -> Option<u64> {
    parse_switches(&read_small(&format!("/proc/{pid}/task/{tid}/status"))?)
}

/// A thread blocked in a system call, as /proc/PID/task/TID/syscall says: the call's number, its six arguments,
/// and where it entered the kernel (user stack pointer and program counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    /// The system call's number (this architecture's).
    pub nr: i64,
    /// Its arguments as passed.
    pub args: [u64; 6],
    /// User stack pointer at the call.
    pub sp: u64,
    /// User program counter at the call.
    pub pc: u64,
}

/// Parses /proc/PID/task/TID/syscall: `NR ARG1..ARG6 SP PC` (hex with 0x but the number) for a thread blocked in a
/// system call; None for `running`, for `-1 SP PC` (blocked outside one: a page fault, a stop) and for a line cut
/// short.
pub fn parse_syscall(text: &str) -> Option<Syscall> {
    let f: Vec<&str> = text.split_whitespace().collect();
    let [nr, a1, a2, a3, a4, a5, a6, sp, pc] = f.as_slice() else { return None };
    let nr: i64 = nr.parse().ok().filter(|&n| n >= 0)?;
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    Some(Syscall { nr, args: [hex(a1)?, hex(a2)?, hex(a3)?, hex(a4)?, hex(a5)?, hex(a6)?], sp: hex(sp)?, pc: hex(pc)? })
}

/// The system call thread `tid` of `pid` is blocked in, if it is blocked in one (see [`parse_syscall`]).
pub fn task_syscall(pid: u32, tid: u32) -> Option<Syscall> {
    parse_syscall(&read_small(&format!("/proc/{pid}/task/{tid}/syscall"))?)
}

/// The name in a /proc/PID/task/TID/comm file: its bytes without the newline the kernel ends it with (a name may
/// hold spaces, parentheses, even a newline of its own, and need not be UTF-8).
pub fn parse_comm(file: &[u8]) -> &[u8] {
    file.strip_suffix(b"\n").unwrap_or(file)
}

/// The name (comm) of thread `tid` of `pid`; None if it is gone.
pub fn task_comm(pid: u32, tid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok().map(|f| parse_comm(&f).to_vec())
}

/// The kernel functions of `/proc/PID/task/TID/stack` (`[<0>] futex_wait_queue+0x6a/0xa0`), innermost first.
pub fn parse_kernel_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let f = l.split_once("] ").map_or(l, |(_, f)| f).trim();
            let name = f.split('+').next().unwrap_or("").trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Whether the mapping is executable.
    pub exec: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Device of the file (`major << 32 | minor`).
    pub dev: u64,
    /// Inode of the file (0 for anonymous and special mappings).
    pub inode: u64,
    /// Path (may hold spaces; ends with " (deleted)" for a file deleted since), `[vdso]`, or "".
    pub path: String,
}

/// Parses the text of a `/proc/PID/maps`; malformed lines are skipped.
pub fn parse_maps(text: &str) -> Vec<MapsEntry> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    // Five fields then the path, which may contain spaces: split by hand.
    let mut rest = line;
    let mut field = || {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        let (f, r) = rest.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let dev = field();
    let inode = field();
    let path = rest.trim_start_matches(' ');
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    Some(MapsEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: u64::from_str_radix(major, 16).ok()? << 32 | u64::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path: path.to_string(),
    })
}

/// The memory map of `pid` (/proc/PID/maps), as text.
pub fn maps(pid: u32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// A /proc/PID/stat line with this comm, start time and image (tests of its readers).
#[cfg(test)]
pub(crate) fn stat_line(comm: &str, start_time: u64, image: (u64, u64, u64)) -> String {
    // 52 fields as Linux 6.x writes them; only 2, 3, 4, 9, 22 and 26-28 matter here.
    let mut f: Vec<String> = (1..=52).map(|k| (k * 10).to_string()).collect();
    f[0] = "4242".into();
    f[1] = format!("({comm})");
    f[2] = "R".into();
    f[3] = "77".into();
    f[8] = "2097152".into();
    f[21] = start_time.to_string();
    f[25] = image.0.to_string();
    f[26] = image.1.to_string();
    f[27] = image.2.to_string();
    f.join(" ") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use stat_line as line;

    #[test]
    fn stat_fields_after_a_strange_command_name() {
        for comm in ["python3", "a b", "x) (y", ")", "((", "py thon) 1 2 3", "S) R 1", " "] {
            let s = parse_stat(&line(comm, 123456, (0x55d0, 0x55f0, 0x7ffd))).unwrap();
            assert_eq!(s.ppid, 77, "{comm}");
            assert_eq!(s.state, 'R', "{comm}");
            assert!(s.running());
            assert!(s.kernel_thread(), "{comm}");
            assert_eq!(s.identity, Identity { start_time: 123456, image: (0x55d0, 0x55f0, 0x7ffd) }, "{comm}");
        }
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("1 (x) R 1 2"), None, "cut short");
        assert_eq!(parse_stat("1 (x)"), None);
        // A negative number where a count is: not a stat line pyperf can use.
        assert_eq!(parse_stat(&line("x", 5, (1, 2, 3)).replace(" 77 ", " -77 ")), None);
        let zombie = parse_stat(&line("x", 5, (0, 0, 0)).replacen(" R ", " Z ", 1)).unwrap();
        assert!(!zombie.running());
        let me = stat(std::process::id()).unwrap();
        assert!(!me.kernel_thread());
        assert_eq!(task_stat(std::process::id(), std::process::id()).map(|s| s.identity), Some(me.identity));
        assert!(tasks(std::process::id()).unwrap().contains(&std::process::id()));
        assert!(task_exists(std::process::id(), std::process::id()));
        assert!(!task_exists(std::process::id(), u32::MAX));
    }

    #[test]
    fn status_fields() {
        let status = "Name:\tpython3.13\nTgid:\t4242\nNSpid:\t4242\t17\t1\nNSpgid:\t4242\n\
                      voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t5\n";
        assert_eq!(parse_nspids(status), Some(vec![4242, 17, 1]));
        assert_eq!(parse_nspid(status), Some(1));
        assert_eq!(parse_nspid("NSpid:\t99\n"), Some(99));
        assert_eq!(parse_nspid("Name:\tx\n"), None);
        assert_eq!(parse_nspid("NSpid:\t\n"), None);
        assert_eq!(parse_nspid("NSpid:\t4242\t-3\n"), None);
        assert_eq!(parse_nspid("NSpid:\t4242\tx\n"), None);
        assert_eq!(parse_tgid(status), Some(4242));
        assert_eq!(parse_tgid("Tgid:\t-1\n"), None);
        assert_eq!(parse_switches(status), Some(15));
        assert_eq!(parse_switches("voluntary_ctxt_switches:\t10\n"), None);
        assert_eq!(parse_switches("voluntary_ctxt_switches:\t-1\nnonvoluntary_ctxt_switches:\t5\n"), None);
        assert_eq!(status_field("Name:\tx\nCapEff:\t0000003fffffffff\n", "CapEff"), Some("0000003fffffffff"));
        // A name that looks like a field is the value of Name, not that field.
        assert_eq!(status_field("Name:\tTgid: 5\nTgid:\t7\n", "Tgid"), Some("7"));
        let me = std::process::id();
        assert_eq!(tgid(me), Some(me));
        assert_eq!(task_ns_tid(me, me), Some(me));
        assert!(task_switches(me, me).is_some());
    }

    #[test]
    fn syscall_lines() {
        let blocked = "202 0x7f1c2a3b4c50 0x80 0x2 0x0 0x0 0x7f1c2a3b4c48 0x7ffd5e4f3a10 0x7f1c2b9c8d7e\n";
        assert_eq!(
            parse_syscall(blocked),
            Some(Syscall {
                nr: 202,
                args: [0x7f1c2a3b4c50, 0x80, 0x2, 0, 0, 0x7f1c2a3b4c48],
                sp: 0x7ffd5e4f3a10,
                pc: 0x7f1c2b9c8d7e
            })
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd5e4f3a10 0x7f1c2b9c8d7e\n"), None, "blocked outside a system call");
        assert_eq!(parse_syscall("-1 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f1c\n"), None, "a negative number");
        assert_eq!(parse_syscall("202 0x1 0x2\n"), None, "cut short");
        assert_eq!(parse_syscall("202 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8 0x9\n"), None, "a field too many");
        assert_eq!(parse_syscall("202 1 0x2 0x3 0x4 0x5 0x6 0x7 0x8\n"), None, "hex without 0x");
        assert_eq!(parse_syscall("x 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8\n"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn comm_files() {
        assert_eq!(parse_comm(b"python3\n"), b"python3");
        assert_eq!(parse_comm(b"a b) (c\n"), b"a b) (c");
        assert_eq!(parse_comm(b" x \n"), b" x ");
        assert_eq!(parse_comm(b"two\n\n"), b"two\n", "a name ending in a newline keeps it");
        assert_eq!(parse_comm(b"\xff\xfe\n"), b"\xff\xfe");
        assert_eq!(parse_comm(b""), b"");
        let me = std::process::id();
        assert!(task_comm(me, me).is_some_and(|c| !c.is_empty() && !c.ends_with(b"\n")));
        assert_eq!(task_comm(me, u32::MAX), None);
    }

    #[test]
    fn kernel_stacks() {
        let text = "[<0>] futex_wait_queue+0x6a/0xa0\n[<0>] __futex_wait+0x148/0x1c0\n[<0>] do_syscall_64+0x82/0x190\n";
        assert_eq!(parse_kernel_stack(text), ["futex_wait_queue", "__futex_wait", "do_syscall_64"]);
        assert!(parse_kernel_stack("").is_empty());
        assert_eq!(parse_kernel_stack("[<0>] \n[<0>] +0x1/0x2\nbare\n"), ["bare"]);
    }

    #[test]
    fn maps_lines_with_spaces_and_deleted_files() {
        let text = "\
55d0c0a00000-55d0c0a22000 r-xp 00001000 fd:01 1234   /usr/bin/my prog (deleted)
7ffd1e9f0000-7ffd1e9f2000 r-xp 00000000 00:00 0                          [vdso]
7f00-7f10 rw-p 00000000 00:00 0
garbage line
7f00-7f10 rw-p 00000000 00:00 -1 /negative/inode
7f00 rw-p 00000000 00:00 0 /no/range/end
";
        let e = parse_maps(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path, "/usr/bin/my prog (deleted)");
        assert_eq!(
            (e[0].start, e[0].end, e[0].offset, e[0].dev, e[0].inode),
            (0x55d0c0a00000, 0x55d0c0a22000, 0x1000, 0xfd << 32 | 1, 1234)
        );
        assert!(e[0].exec && e[1].exec && !e[2].exec);
        assert_eq!(e[1].path, "[vdso]");
        assert_eq!(e[2].path, "");
        assert!(parse_maps("").is_empty());
        assert!(maps(std::process::id()).is_ok_and(|m| !parse_maps(&m).is_empty()));
    }
}
