//! The matching stacks merged into one tree of frames as a report shows them (root first): the shape behind folded
//! stacks and flame graphs.
//!
//! A stack in a recording is a leaf node of the file's stack table (a tree of (parent, symbol) nodes). Several
//! nodes can look the same in a report (lines dropped, two symbols with one name, the same stack on two threads
//! without thread roots), so the tree is built over *labels*: a child per distinct label under each parent.
//!
//! Cost is linear: each file node is resolved once per root context (process / thread / stack-status marker) and
//! memoised, so a crafted file of one 20,000-frame chain with a sample at every depth costs 20,000 steps, not the
//! 200 million of naming every stack from its leaf. Memory is one entry per tree node and per visited file node.
//! With process or thread roots the whole tree holds a copy of the stacks per root context (threads x depth
//! nodes for many threads on one deep chain, however small the file): [`Tree::build_stacks`] builds one root
//! context at a time for exporters that can stream (folded stacks).

use std::cmp::Ordering;
use std::collections::HashMap;

use pyperf_format::StackStatus;

use crate::folded;
use crate::hash::FxMap;
use crate::names;
use crate::profile::{Profile, StackCount};

/// One distinct frame text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// As every exporter names it (see [`names`]): `function (file:line)`, `[idle]`, `python3.11 [pid 12]`, ...
    /// Not escaped: each exporter escapes for its own format.
    pub text: String,
    /// A symbol shown under this label (the first one met), for exporters that show more (the full path);
    /// `None` for pseudo-frames, process and thread roots.
    pub symbol: Option<u32>,
}

/// A node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Index into [`Tree::labels`].
    pub label: u32,
    /// Parent node; the root is its own parent.
    pub parent: u32,
    /// Samples whose stack ends here (ns in [`crate::Mode::OffCpu`] and [`crate::Mode::Wall`]).
    pub self_count: u64,
    /// Samples whose stack passes through here, self included (ns in [`crate::Mode::OffCpu`] and
    /// [`crate::Mode::Wall`]).
    pub total: u64,
    /// Depth: 0 for the root, 1 for the outermost frames.
    pub depth: u32,
}

/// The merged stacks. Node 0 is an unnamed root above every stack.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Distinct frame texts.
    pub labels: Vec<Label>,
    /// Node 0 is the root.
    pub nodes: Vec<Node>,
    /// Children of node `i`: `children[child_start[i]..child_start[i + 1]]`, ordered by label text.
    child_start: Vec<u32>,
    children: Vec<u32>,
}

/// The root node.
pub const ROOT: u32 = 0;

/// The root frames `options` puts above the stacks of `thread` (an index into [`Profile::threads`], or
/// [`crate::ALL_THREADS`] for a profile loaded without per-thread counts), outermost first: its process
/// (`pid_root`), its thread (`tid_root`), its interpreter (`interp_root`). Empty without any.
pub fn root_frames(profile: &Profile, options: &folded::Options, thread: u32) -> Vec<String> {
    let t = profile.threads.get(thread as usize);
    let mut out = Vec::new();
    if options.pid_root {
        out.push(match t {
            Some(t) => profile.process_label_of(t),
            None => folded::ALL_PROCESSES.to_string(),
        });
    }
    if options.tid_root {
        out.push(match t {
            Some(t) => profile.thread_label(t),
            None => folded::ALL_THREADS.to_string(),
        });
    }
    if options.interp_root {
        out.push(names::interpreter_marker(t.map_or(0, |t| t.interp)));
    }
    out
}

impl Tree {
    /// Merges the profile's matching stacks as `options` shows them (lines, process and thread roots).
    pub fn build(profile: &Profile, options: &folded::Options) -> Tree {
        let mut b = Builder::new(profile, options.lines);
        // Root labels per thread slot (the text is the same for all stacks of a thread).
        let mut roots: FxMap<u32, Vec<u32>> = FxMap::default();
        for s in &profile.stacks {
            let labels = roots.entry(s.thread).or_insert_with(|| {
                root_frames(profile, options, s.thread).into_iter().map(|text| b.label(&text, None)).collect()
            });
            let mut at = ROOT;
            for &label in labels.iter() {
                at = b.child(at, label);
            }
            b.add(at, s);
        }
        b.finish()
    }

    /// Merges `stacks` (matching stacks of `profile`, e.g. those of one root context) without root frames; `lines`
    /// as [`folded::Options::lines`]. Memory and time: the stacks' tree, whatever else the profile holds.
    pub fn build_stacks<'a>(profile: &Profile, lines: bool, stacks: impl IntoIterator<Item = &'a StackCount>) -> Tree {
        let mut b = Builder::new(profile, lines);
        for s in stacks {
            b.add(ROOT, s);
        }
        b.finish()
    }

    /// The children of `node`, ordered by label text (byte order).
    pub fn children(&self, node: u32) -> &[u32] {
        let (a, b) = (self.child_start[node as usize], self.child_start[node as usize + 1]);
        &self.children[a as usize..b as usize]
    }

    /// The node's label.
    pub fn label(&self, node: u32) -> &Label {
        &self.labels[self.nodes[node as usize].label as usize]
    }

    /// Samples in the whole tree.
    pub fn total(&self) -> u64 {
        self.nodes[ROOT as usize].total
    }

    /// Deepest node's depth.
    pub fn max_depth(&self) -> u32 {
        self.nodes.iter().map(|n| n.depth).max().unwrap_or(0)
    }

    /// Visits every node below the root depth first, children in label order: `visit(node, true)` before a node's
    /// children, `visit(node, false)` after them. Iterative: depth is bounded only by memory, never by the call
    /// stack.
    pub fn walk(&self, mut visit: impl FnMut(u32, bool)) {
        // (node, index of the next child to visit)
        let mut stack: Vec<(u32, u32)> = vec![(ROOT, 0)];
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            let kids = self.children(node);
            if (next as usize) < kids.len() {
                top.1 += 1;
                let child = kids[next as usize];
                visit(child, true);
                stack.push((child, 0));
            } else {
                stack.pop();
                if node != ROOT {
                    visit(node, false);
                }
            }
        }
    }
}

struct Builder<'p> {
    profile: &'p Profile,
    lines: bool,
    labels: Vec<Label>,
    /// Label texts come from the file: SipHash, which crafted names cannot make collide.
    label_ids: HashMap<String, u32>,
    /// Label of each symbol met, resolved once (a map, not a vector over all symbols: a profile may be built in
    /// many small pieces).
    symbol_labels: FxMap<u32, u32>,
    /// Marker label (if any) of each (status, has frames, off CPU) met.
    marker_labels: FxMap<(u8, bool, bool), Option<u32>>,
    /// Label of each off-CPU reason met ([`StackCount::reason`]).
    reason_labels: FxMap<u32, u32>,
    nodes: Vec<Node>,
    child_of: FxMap<(u32, u32), u32>,
    /// (context node: the node under which a stack's frames hang, file stack node) -> tree node.
    memo: FxMap<(u32, u32), u32>,
    path: Vec<u32>,
}

impl<'p> Builder<'p> {
    fn new(profile: &'p Profile, lines: bool) -> Builder<'p> {
        Builder {
            profile,
            lines,
            labels: Vec::new(),
            label_ids: HashMap::new(),
            symbol_labels: FxMap::default(),
            marker_labels: FxMap::default(),
            reason_labels: FxMap::default(),
            nodes: vec![Node { label: u32::MAX, parent: ROOT, self_count: 0, total: 0, depth: 0 }],
            child_of: FxMap::default(),
            memo: FxMap::default(),
            path: Vec::new(),
        }
    }

    fn label(&mut self, text: &str, symbol: Option<u32>) -> u32 {
        if let Some(&id) = self.label_ids.get(text) {
            return id;
        }
        let id = self.labels.len() as u32;
        self.label_ids.insert(text.to_string(), id);
        self.labels.push(Label { text: text.to_string(), symbol });
        id
    }

    fn symbol_label(&mut self, sym: u32) -> u32 {
        if let Some(&l) = self.symbol_labels.get(&sym) {
            return l;
        }
        let text = names::frame_name(self.profile.tables.symbol(sym), self.lines);
        let l = self.label(&text, Some(sym));
        self.symbol_labels.insert(sym, l);
        l
    }

    fn marker_label(&mut self, status: StackStatus, has_frames: bool, off_cpu: bool) -> Option<u32> {
        let key = (status.as_u8(), has_frames, off_cpu);
        if let Some(&l) = self.marker_labels.get(&key) {
            return l;
        }
        let l = names::stack_marker(status, has_frames, off_cpu).map(|text| self.label(&text, None));
        self.marker_labels.insert(key, l);
        l
    }

    fn reason_label(&mut self, reason: u32) -> u32 {
        if let Some(&l) = self.reason_labels.get(&reason) {
            return l;
        }
        let profile: &'p Profile = self.profile;
        let text = profile.reasons.get(reason as usize).map(String::as_str).unwrap_or("[off-CPU]");
        let l = self.label(text, None);
        self.reason_labels.insert(reason, l);
        l
    }

    fn child(&mut self, parent: u32, label: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.child_of.entry((parent, label)).or_insert(next);
        if id == next {
            let depth = self.nodes[parent as usize].depth + 1;
            self.nodes.push(Node { label, parent, self_count: 0, total: 0, depth });
        }
        id
    }

    /// Adds the stack `s` below `at` (its root frames, if any): its marker, its frames, then its off-CPU reason.
    fn add(&mut self, at: u32, s: &StackCount) {
        let profile: &'p Profile = self.profile;
        let tables = &profile.tables;
        let context = match self.marker_label(s.status, s.leaf != 0, s.reason != 0) {
            Some(m) => self.child(at, m),
            None => at,
        };
        // Walk up to the first node already placed under this context, then place the rest going down: each
        // (context, file node) is placed once, however many stacks pass through it.
        self.path.clear();
        let mut node = s.leaf;
        let mut top = context;
        while node != 0 {
            if let Some(&placed) = self.memo.get(&(context, node)) {
                top = placed;
                break;
            }
            self.path.push(node);
            // Tables::apply checked every node's parent (smaller id) and the samples' leaves.
            node = tables.nodes[node as usize - 1].0;
        }
        let mut at = top;
        let mut path = std::mem::take(&mut self.path);
        for &n in path.iter().rev() {
            let label = self.symbol_label(tables.nodes[n as usize - 1].1);
            at = self.child(at, label);
            self.memo.insert((context, n), at);
        }
        path.clear();
        self.path = path;
        if s.reason != 0 {
            let label = self.reason_label(s.reason);
            at = self.child(at, label);
        }
        let node = &mut self.nodes[at as usize];
        node.self_count = node.self_count.saturating_add(s.count);
    }

    fn finish(self) -> Tree {
        let Builder { labels, mut nodes, child_of, memo, .. } = self;
        // What only building needed goes before the children lists are made: a lower peak.
        drop((child_of, memo));
        // Totals: children always come after their parent, so one backward pass adds each subtree up.
        for i in (0..nodes.len()).rev() {
            nodes[i].total = nodes[i].total.saturating_add(nodes[i].self_count);
            if i != 0 {
                let (parent, total) = (nodes[i].parent as usize, nodes[i].total);
                nodes[parent].total = nodes[parent].total.saturating_add(total);
            }
        }
        // Children lists (counting sort by parent), each ordered by label text.
        let mut child_start = vec![0u32; nodes.len() + 1];
        for n in nodes.iter().skip(1) {
            child_start[n.parent as usize + 1] += 1;
        }
        for i in 1..child_start.len() {
            child_start[i] += child_start[i - 1];
        }
        let mut fill = child_start.clone();
        let mut children = vec![0u32; nodes.len().saturating_sub(1)];
        for (i, n) in nodes.iter().enumerate().skip(1) {
            let slot = &mut fill[n.parent as usize];
            children[*slot as usize] = i as u32;
            *slot += 1;
        }
        let text = |n: u32| labels[nodes[n as usize].label as usize].text.as_str();
        for w in child_start.windows(2) {
            children[w[0] as usize..w[1] as usize].sort_unstable_by(|&a, &b| match text(a).cmp(text(b)) {
                Ordering::Equal => a.cmp(&b),
                o => o,
            });
        }
        Tree { labels, nodes, child_start, children }
    }
}
