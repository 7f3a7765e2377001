//! The recorder's rooms import each other in one direction only: no module imports its caller. Read from the
//! sources (record/), every `use` and every `crate::` / `super::` / `self::` path outside test modules and doc-only
//! imports; a path through a module's `pub use` counts as an import of the module it re-exports. Checked at two
//! levels: the files (modules) and the rooms (the crate's top-level modules: `python`, `sampler`, `session`, ...).
//! Also the leaves: modules that may import nothing of the crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module by its path below the crate root (`["python", "walk"]`); the root is `[]`.
type Module = Vec<String>;

/// Modules that import nothing of the crate (everyone may use them).
const LEAVES: &[&str] = &["abi", "clock", "header", "proc", "mem", "signals", "summary"];

fn record_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("record")
}

/// Every module file of the library (not the binary's main.rs).
fn modules() -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("record/ is readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = record_dir();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&root).expect("below record/").with_extension("");
        let mut parts: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        match parts.last().map(String::as_str) {
            Some("main") if parts.len() == 1 => continue,
            Some("lib") if parts.len() == 1 => parts.clear(),
            Some("mod") => {
                parts.pop();
            }
            _ => {}
        }
        out.insert(parts, f);
    }
    out
}

/// The code of a module file without its test module, doc-only imports, comments and literals.
fn code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    let mut skip_item = false;
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let test_attr = t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test");
        let module =
            |n: &str| n.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ").starts_with("mod ");
        if test_attr && lines.peek().is_some_and(|n| module(n)) {
            if lines.peek().is_some_and(|n| n.trim_end().ends_with(';')) {
                lines.next(); // a test-only module of its own file (`mod testing;`)
                continue;
            }
            break; // the test module is the file's last item
        }
        if t.starts_with("#[cfg(doc)]") {
            skip_item = true;
            continue;
        }
        if skip_item {
            skip_item = !line.contains(';');
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    // Comments, strings and chars out (a doc link or a message naming a module is not an import).
    let b = kept.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.extend_from_slice(b"\"\"");
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // An escaped char ('\'', '\n', '\u{..}').
            i += 3;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else {
            // A lifetime's quote, or code.
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Identifiers and the punctuation that matters for paths (`::`, `{`, `}`, `,`, `;`, `*`).
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let c: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_alphanumeric() || c[i] == '_' {
            let s = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[s..i].iter().collect());
            continue;
        }
        if c[i].is_whitespace() {
            i += 1;
            continue;
        }
        if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".into());
            i += 2;
            continue;
        }
        out.push(c[i].to_string());
        i += 1;
    }
    out
}

/// The paths of a `use` tree starting at `toks[*i]`, each prefixed with `prefix`; stops after the tree.
fn use_tree(toks: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    while *i < toks.len() {
        let t = toks[*i].as_str();
        match t {
            "::" => *i += 1,
            "{" => {
                *i += 1;
                while *i < toks.len() && toks[*i] != "}" {
                    use_tree(toks, i, &path, out);
                    if *i < toks.len() && toks[*i] == "," {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "as" => {
                *i += 2;
                out.push(path);
                return;
            }
            "," | "}" | ";" => {
                out.push(path);
                return;
            }
            _ => {
                path.push(t.to_string());
                *i += 1;
            }
        }
    }
}

/// Every path the module's code names that may lead into the crate.
fn paths(code: &str) -> Vec<Vec<String>> {
    let toks = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == "use" {
            i += 1;
            use_tree(&toks, &mut i, &[], &mut out);
            continue;
        }
        let starts = i == 0 || toks[i - 1] != "::";
        if starts && toks.get(i + 1).is_some_and(|t| t == "::") {
            let mut path = vec![toks[i].clone()];
            let mut j = i + 1;
            while j + 1 < toks.len() && toks[j] == "::" && toks[j + 1] != "{" && toks[j + 1] != "<" {
                path.push(toks[j + 1].clone());
                j += 2;
            }
            out.push(path);
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Names a module file re-exports (`pub use sub::{A, B}`), by the child module they come from.
fn reexports(code: &str) -> BTreeMap<String, String> {
    let toks = tokens(code);
    let mut out = BTreeMap::new();
    for w in 0..toks.len() {
        if toks[w] == "pub" && toks.get(w + 1).is_some_and(|t| t == "use") {
            let mut i = w + 2;
            let mut found = Vec::new();
            use_tree(&toks, &mut i, &[], &mut found);
            for p in found {
                if p.len() >= 2 {
                    out.insert(p[p.len() - 1].clone(), p[0].clone());
                }
            }
        }
    }
    out
}

/// module -> the modules it imports.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules();
    let texts: BTreeMap<Module, String> =
        mods.iter().map(|(m, p)| (m.clone(), code(&std::fs::read_to_string(p).expect("readable source")))).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, text) in &texts {
        let edges = edges.entry(m.clone()).or_default();
        for path in paths(text) {
            let mut cur: Module = match path[0].as_str() {
                "crate" => Vec::new(),
                "super" => m[..m.len().saturating_sub(1)].to_vec(),
                "self" => m.clone(),
                child => {
                    let mut c = m.clone();
                    c.push(child.to_string());
                    if !mods.contains_key(&c) {
                        continue; // another crate or a type
                    }
                    c
                }
            };
            let mut rest = &path[1..];
            while rest.first().is_some_and(|s| s == "super") {
                cur.pop();
                rest = &rest[1..];
            }
            while let Some(seg) = rest.first() {
                let mut next = cur.clone();
                next.push(seg.clone());
                if !mods.contains_key(&next) {
                    break;
                }
                cur = next;
                rest = &rest[1..];
            }
            // A name a parent re-exports is an import of the child that defines it.
            if let (Some(name), false) = (rest.first(), cur.is_empty()) {
                if let Some(child) = texts.get(&cur).and_then(|t| reexports(t).get(name).cloned()) {
                    let mut c = cur.clone();
                    c.push(child);
                    if mods.contains_key(&c) {
                        cur = c;
                    }
                }
            }
            // The crate root holds only the module list and the `say!` macros: not an import.
            if !cur.is_empty() && cur != *m {
                edges.insert(cur);
            }
        }
    }
    edges
}

/// A cycle of `edges`, if there is one (depth-first search).
fn cycle<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        n: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        done: &mut BTreeSet<N>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut c = stack[at..].to_vec();
            c.push(n.clone());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.clone());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut done, &mut Vec::new()))
}

fn name(m: &Module) -> String {
    m.join("::")
}

#[test]
fn no_module_imports_its_caller() {
    let edges = imports();
    assert!(edges.len() > 30, "the modules of record/ were not found: {:?}", edges.keys().collect::<Vec<_>>());
    if let Some(c) = cycle(&edges) {
        panic!("an import cycle between modules: {}", c.iter().map(name).collect::<Vec<_>>().join(" -> "));
    }
}

#[test]
fn no_room_imports_its_caller() {
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in imports() {
        let Some(room) = from.first() else { continue };
        let entry = rooms.entry(room.clone()).or_default();
        for to in tos {
            if to[0] != *room {
                entry.insert(to[0].clone());
            }
        }
    }
    if let Some(c) = cycle(&rooms) {
        panic!("an import cycle between rooms: {}", c.join(" -> "));
    }
}

#[test]
fn leaves_import_nothing_of_the_crate() {
    let edges = imports();
    for leaf in LEAVES {
        let m: Module = leaf.split("::").map(String::from).collect();
        let Some(to) = edges.get(&m) else { panic!("leaf module {leaf} not found") };
        assert!(to.is_empty(), "{leaf} is a leaf but imports {:?}", to.iter().map(name).collect::<Vec<_>>());
    }
}

/// The checker itself sees what it must: a known import, a re-export, and a planted cycle.
#[test]
fn the_checker_sees_imports_reexports_and_cycles() {
    let edges = imports();
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    assert!(edges[&m("session")].contains(&m("sampler")), "session imports the sampler");
    // `python::PythonProcess` is `python::detect`'s.
    assert!(edges[&m("targets")].contains(&m("python::detect")), "{:?}", edges[&m("targets")]);
    assert!(!edges[&m("sampler")].contains(&m("session")));
    let mut planted = edges.clone();
    planted.entry(m("sampler")).or_default().insert(m("session"));
    assert!(cycle(&planted).is_some(), "a planted sampler -> session import makes a cycle");
    assert_eq!(paths("use a::{b::{c, d as e}, f};"), vec![vec!["a", "b", "c"], vec!["a", "b", "d"], vec!["a", "f"]]);
    assert_eq!(code("let s = \"crate::x\"; // crate::y\nlet c = '\\'';\n"), "let s = \"\"; \nlet c = ;\n");
}
