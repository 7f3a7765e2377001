//! Samples linked to traces: the OpenTelemetry span active on each sampled thread, read by the BPF program from the
//! thread's `contextvars` context (bpf/trace.bpf.h), as this module tells it where to look in each process.
//!
//! The OpenTelemetry Python SDK keeps the current context in a `ContextVar` named `current_context`
//! (`opentelemetry.context.contextvars_context`), whose value is an OpenTelemetry `Context` (a dict subclass) holding
//! the current span under a key `current-span-<uuid>` (`opentelemetry.trace.propagation`); a span's `_context` is a
//! `SpanContext` (a tuple: trace id, span id, ...). asyncio tasks each run in a context of their own, which is the
//! thread's current one while the task runs: a task's samples carry its own span.
//!
//! **Discovery.** A process of 3.7+ gets a configuration without the variable: the program then hands over, with a
//! sample, the variables (a HAMT) of the thread's context, and here they are searched, at most every
//! [`LOOK_EVERY`] per process, for that variable. Found, its address and hash, the `Context` type, the span key
//! and the way from a span to its span context for the span's class ([`crate::python::objects::AttrStep`], learned
//! on a live span and checked against its `__dict__`) go to the program, which reads the ids per sample from then
//! on. A span of a class not seen yet (`NonRecordingSpan`, a subclass) is handed over the same way and learned.
//! The variable, the key and the types are the process's for its life (module globals); spans come and go, which
//! is why the program reads each span's ids itself, at the sample (a span's address is reused by the next one).
//! Where the SDK is not imported the variable is never found and the program reads nothing past the context.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::abi::types;
use crate::mem::ProcMem;
use crate::python::context::{hamt_items, var_hash32, var_name};
use crate::python::objects::{at, AttrStep, Objects};
use crate::python::{PythonProcess, Row};
use crate::sampler::TraceRead;

/// Least time between two searches of one process's contexts.
pub const LOOK_EVERY: Duration = Duration::from_millis(20);
/// The OpenTelemetry SDK's context variable.
const VAR_NAME: &str = "current_context";
/// The prefix of the key of the current span in its contexts (`create_key("current-span")`).
const SPAN_KEY_PREFIX: &str = "current-span-";
/// Times the way of a span class to its span context is looked for at most.
const MAX_TRIES: u32 = 8;
/// Most variables of a context searched.
const MAX_VARS: usize = 256;

/// The span a record read (its ids), if it read one.
pub fn span_of(t: TraceRead) -> Option<pyperf_format::SpanLink> {
    match t {
        TraceRead::Found { trace_id, span_id } => Some(pyperf_format::SpanLink { trace_id, span_id }),
        _ => None,
    }
}

struct Proc {
    mem: ProcMem,
    row: &'static Row,
    conf: types::pyperf_trace_conf,
    last_look: Option<Instant>,
    /// Span classes whose way to their span context was looked for, and how many times (a span read while it is
    /// being made or changed can fail: tried again, a few times).
    tried: HashMap<u64, u32>,
}

/// The trace contexts of the followed processes.
#[derive(Default)]
pub struct Traces {
    procs: HashMap<u32, Proc>,
    /// What records asked to look at since the last [`Traces::due`], one per process.
    pending: HashMap<u32, TraceRead>,
    /// Processes whose variable was found.
    pub found: u64,
    /// Span classes whose way to their span context is known.
    pub classes: u64,
    /// Span classes whose way was looked for and not found (their spans are unreadable, counted by the program).
    pub classes_refused: u64,
}

impl Traces {
    /// Starts looking for `p`'s trace context: the configuration the program starts it with, or `None` when its
    /// Python has no `contextvars` (before 3.7) or pyperf cannot read its instances' attributes.
    pub fn add_process(&mut self, p: &PythonProcess) -> Option<types::pyperf_trace_conf> {
        let l = p.row.layout;
        if l.tstate_context < 0 || p.row.thread_names.is_none() || l.dict_values != l.dict_keys + 8 {
            return None;
        }
        let mem = ProcMem::open(p.pid, p.mapped_addr()).ok()?;
        let s16 = |v: i32| i16::try_from(v).unwrap_or(-1);
        let conf = types::pyperf_trace_conf {
            context_vars: s16(l.context_vars),
            hamt_root: s16(l.hamt_root),
            hamt_bitmap: s16(l.hamt_bitmap),
            hamt_bitmap_array: s16(l.hamt_bitmap_array),
            hamt_array: s16(l.hamt_array),
            object_type: s16(l.object_type),
            dict_keys: s16(l.dict_keys),
            keys_size: s16(l.dictkeys_size),
            keys_log2_index_bytes: s16(l.dictkeys_log2_index_bytes),
            keys_kind: s16(l.dictkeys_kind),
            keys_nentries: s16(l.dictkeys_nentries),
            keys_indices: s16(l.dictkeys_indices),
            tuple_item: s16(l.tuple_item),
            long_size: s16(if l.long_tag >= 0 { l.long_tag } else { l.bytes_size }),
            long_digits: s16(l.long_digits),
            long_tagged: u8::from(l.long_tag >= 0),
            ..Default::default()
        };
        self.procs.insert(p.pid, Proc { mem, row: p.row, conf, last_look: None, tried: HashMap::new() });
        Some(conf)
    }

    /// Stops following `pid`.
    pub fn remove_process(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.pending.remove(&pid);
    }

    /// A record of `pid` read `t`: what it asks to look at is kept for [`Traces::due`] (called from the ring's
    /// callback: no reads here).
    pub fn saw(&mut self, pid: u32, t: TraceRead) {
        if matches!(t, TraceRead::Discover(_) | TraceRead::SpanType(_)) {
            self.pending.insert(pid, t);
        }
    }

    /// Looks at what records asked for; returns the configurations that changed, for the program.
    pub fn due(&mut self, now: Instant) -> Vec<(u32, types::pyperf_trace_conf)> {
        let mut changed = Vec::new();
        for (pid, t) in std::mem::take(&mut self.pending) {
            let Some(p) = self.procs.get_mut(&pid) else { continue };
            let (known, refused) = classes(p);
            let updated = match t {
                TraceRead::Discover(vars) => {
                    if p.last_look.is_some_and(|l| now.duration_since(l) < LOOK_EVERY) {
                        continue;
                    }
                    p.last_look = Some(now);
                    let before = p.conf.var;
                    let u = discover(p, vars);
                    if before == 0 && p.conf.var != 0 {
                        self.found += 1;
                    }
                    u
                }
                TraceRead::SpanType(span) => learn_span(p, span),
                _ => false,
            };
            // Totals over the recording, counted as they change: a process's part stays when it exits.
            let (now_known, now_refused) = classes(p);
            self.classes += now_known - known;
            self.classes_refused += now_refused - refused;
            if updated {
                changed.push((pid, p.conf));
            }
        }
        changed
    }

    /// The counters for the recording's trailer.
    pub fn counters(&self) -> [(String, u64); 3] {
        [
            ("trace_processes_found".to_string(), self.found),
            ("trace_span_classes".to_string(), self.classes),
            ("trace_span_classes_refused".to_string(), self.classes_refused),
        ]
    }
}

/// The span classes of `p` whose way to their span context is known, and those given up on.
fn classes(p: &Proc) -> (u64, u64) {
    let known = p.conf.paths.iter().filter(|x| x.r#type != 0).count() as u64;
    (known, p.tried.values().filter(|&&n| n >= MAX_TRIES).count() as u64)
}

/// Searches the variables `vars` (a context's HAMT) of `p` for the SDK's variable; fills in what it finds. Whether
/// the configuration changed.
fn discover(p: &mut Proc, vars: u64) -> bool {
    let mut objs = Objects::new(&p.mem, p.row);
    let Some(h) = hamt_items(&mut objs, vars, MAX_VARS) else { return false };
    let mut changed = false;
    for (var, value) in h.items {
        if var_name(&mut objs, var).as_deref() != Some(VAR_NAME) {
            continue;
        }
        let Some(vt) = objs.type_of(value) else { continue };
        if objs.type_name(&vt).as_deref() != Some("Context") {
            continue;
        }
        let Some(hash) = var_hash32(&objs, var) else { continue };
        if p.conf.var == 0 {
            p.conf.var = var;
            p.conf.var_hash = hash;
            p.conf.context_type = vt.addr;
            p.conf.bitmap_type = h.bitmap_type.unwrap_or(0);
            p.conf.array_type = h.array_type.unwrap_or(0);
            changed = true;
        } else if p.conf.array_type == 0 && h.array_type.is_some() {
            p.conf.array_type = h.array_type.unwrap_or(0);
            changed = true;
        }
        if p.conf.span_key != 0 {
            break;
        }
        // The span's key: the first `current-span-...` item of the Context.
        let Some(d) = objs.dict(value) else { break };
        for (k, v) in d.items.clone() {
            let Some((text, _)) = objs.str_value(k, 64) else { continue };
            if text.starts_with(SPAN_KEY_PREFIX) {
                p.conf.span_key = k;
                drop(objs);
                learn_span(p, v);
                return true;
            }
        }
        break;
    }
    changed
}

/// Learns the way from `span` (an object of `p`) to its span context for its class; whether the configuration
/// changed.
fn learn_span(p: &mut Proc, span: u64) -> bool {
    let mut objs = Objects::new(&p.mem, p.row);
    let Some(t) = objs.type_of(span) else { return false };
    let tries = p.tried.entry(t.addr).or_insert(0);
    if *tries >= MAX_TRIES || p.conf.paths.iter().any(|x| x.r#type == t.addr) {
        return false;
    }
    *tries += 1;
    let Some(slot) = p.conf.paths.iter().position(|x| x.r#type == 0) else { return false };
    let Some(steps) = objs.attribute_path(span, "_context") else { return false };
    if steps.len() > p.conf.paths[slot].off.len() {
        return false;
    }
    let Some(sc) = objs.follow(span, &steps) else { return false };
    let Some(sct) = objs.type_of(sc) else { return false };
    if objs.type_name(&sct).as_deref() != Some("SpanContext") {
        return false;
    }
    // Its first item, the trace id: an int, whose type the program checks.
    let l = p.row.layout;
    let Some(trace_id) = at(sc, l.tuple_item).and_then(|a| objs.u64_at(a)) else { return false };
    let Some(it) = objs.type_of(trace_id) else { return false };
    if objs.type_name(&it).as_deref() != Some("int") {
        return false;
    }
    let path = &mut p.conf.paths[slot];
    path.r#type = t.addr;
    path.nsteps = steps.len() as u8;
    for (i, s) in steps.iter().enumerate() {
        let (op, off) = match *s {
            AttrStep::Deref(o) => (types::pyperf_span_op::SPAN_DEREF, o),
            AttrStep::DerefTagged(o) => (types::pyperf_span_op::SPAN_DEREF_TAGGED, o),
            AttrStep::CheckNull(o) => (types::pyperf_span_op::SPAN_CHECK_NULL, o),
            AttrStep::CheckByte(o) => (types::pyperf_span_op::SPAN_CHECK_BYTE, o),
        };
        path.op[i] = op.0 as u8;
        path.off[i] = i32::try_from(off).unwrap_or(i32::MAX);
    }
    p.conf.span_context_type = sct.addr;
    p.conf.int_type = it.addr;
    true
}
