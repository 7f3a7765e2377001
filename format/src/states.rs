//! The per-sample states the BPF walker reports, from bcc's PyPerf, and why a thread was off CPU (1.3+), with words
//! for people.
//! On disk each is one byte; a value this version does not know decodes to `Unknown(raw)` rather than failing,
//! so a newer recorder's states still report.

macro_rules! state_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $variant:ident = $value:literal, $key:literal, $words:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $(
                #[doc = concat!($words, " (`", $key, "`, ", stringify!($value), " on disk).")]
                $variant,
            )*
            /// A value written by a newer pyperf.
            Unknown(u8),
        }

        impl $name {
            /// All known states, in on-disk order.
            pub const ALL: &'static [$name] = &[$( $name::$variant, )*];

            /// The state an on-disk byte stands for; unknown values are kept as `Unknown(raw)`.
            pub fn from_u8(raw: u8) -> Self {
                match raw {
                    $( $value => $name::$variant, )*
                    other => $name::Unknown(other),
                }
            }

            /// The on-disk byte; `from_u8(x.as_u8()) == x` for every value.
            pub const fn as_u8(self) -> u8 {
                match self {
                    $( $name::$variant => $value, )*
                    $name::Unknown(raw) => raw,
                }
            }

            /// Short kebab-case name, as accepted by command-line filters.
            pub fn key(self) -> String {
                match self {
                    $( $name::$variant => $key.to_string(), )*
                    $name::Unknown(raw) => format!("unknown-{raw}"),
                }
            }

            /// What it means, in words.
            pub fn describe(self) -> String {
                match self {
                    $( $name::$variant => $words.to_string(), )*
                    $name::Unknown(raw) => format!("unknown state {raw} (written by a newer pyperf)"),
                }
            }

            /// Parses a [`key`](Self::key).
            pub fn from_key(key: &str) -> Option<Self> {
                match key {
                    $( $key => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The keys `from_key` accepts, for error messages.
            pub fn keys() -> Vec<&'static str> {
                vec![$( $key, )*]
            }
        }
    };
}

state_enum! {
    /// Who holds the GIL at the moment of the sample.
    GilState {
        NoInfo = 0, "no-info", "GIL state not available for this Python";
        Error = 1, "error", "GIL state unreadable";
        Uninitialized = 2, "uninitialized", "GIL not created yet";
        NotLocked = 3, "released", "GIL released";
        ThisThread = 4, "held", "GIL held by this thread";
        GlobalCurrentThread = 5, "held-by-current", "GIL held by the interpreter's current thread";
        OtherThread = 6, "other-thread", "GIL held by another thread";
        Null = 7, "held-no-holder", "GIL locked, holder unknown";
        Waiting = 8, "waiting", "this thread is waiting for the GIL (3.15+)";
    }
}

state_enum! {
    /// Whether the sampled thread's own thread state is the interpreter's current one.
    ThreadStateMatch {
        Unknown0 = 0, "unknown", "thread state not compared";
        Match = 1, "current", "this thread is the interpreter's current thread";
        Mismatch = 2, "not-current", "another thread is the interpreter's current thread";
        ThisThreadNull = 3, "no-thread-state", "this thread has no Python thread state";
        GlobalCurrentThreadNull = 4, "no-current", "the interpreter has no current thread";
        BothNull = 5, "none", "no thread state and no current thread";
    }
}

state_enum! {
    /// Whether the thread state was created by the sampled OS thread.
    PthreadIdMatch {
        Unknown0 = 0, "unknown", "pthread id not compared";
        Match = 1, "match", "thread state belongs to this OS thread";
        Mismatch = 2, "mismatch", "thread state belongs to another OS thread";
        ThreadStateNull = 3, "no-thread-state", "no thread state to compare";
        Null = 4, "null", "thread state has no pthread id";
        Error = 5, "error", "pthread id unreadable";
    }
}

state_enum! {
    /// How complete the sampled stack is.
    StackStatus {
        Complete = 0, "complete", "complete stack";
        Error = 1, "error", "stack walk failed part way (unreadable memory)";
        Truncated = 2, "truncated", "stack deeper than the walker's limit, leaf frames kept";
        Idle = 3, "idle", "thread not running Python code";
        Incomplete = 4, "incomplete", "stack walk ended before the thread's base frame (3.15+), frames read kept";
    }
}

state_enum! {
    /// Why a thread was off CPU during an off-CPU interval (format 1.3+).
    OffCpuKind {
        Unknown0 = 0, "unknown", "off CPU, reason unknown";
        Runnable = 1, "runnable", "preempted: runnable, waiting for a CPU";
        Blocked = 2, "blocked", "blocked (sleep, I/O wait, lock, select...)";
        Disk = 3, "disk", "blocked uninterruptibly (disk I/O, page fault)";
        Gil = 4, "gil", "waiting for the GIL";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_value() {
        for raw in 0..=255u8 {
            assert_eq!(GilState::from_u8(raw).as_u8(), raw);
            assert_eq!(ThreadStateMatch::from_u8(raw).as_u8(), raw);
            assert_eq!(PthreadIdMatch::from_u8(raw).as_u8(), raw);
            assert_eq!(StackStatus::from_u8(raw).as_u8(), raw);
            assert_eq!(OffCpuKind::from_u8(raw).as_u8(), raw);
        }
        for s in GilState::ALL {
            assert_eq!(GilState::from_key(&s.key()), Some(*s));
        }
        for k in OffCpuKind::ALL {
            assert_eq!(OffCpuKind::from_key(&k.key()), Some(*k));
        }
        assert_eq!(OffCpuKind::keys(), ["unknown", "runnable", "blocked", "disk", "gil"]);
        assert_eq!(OffCpuKind::from_u8(4), OffCpuKind::Gil);
        assert_eq!(GilState::from_u8(4).describe(), "GIL held by this thread");
        assert!(matches!(GilState::from_u8(200), GilState::Unknown(200)));
        assert!(GilState::from_u8(200).describe().contains("newer pyperf"));
    }
}
