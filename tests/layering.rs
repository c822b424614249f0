//! The module layering of docs/architecture.md ("What may import what"): no two modules of the
//! service import each other, directly or round a longer loop, and every import is one the
//! table allows. Read from the source, so that a new `use crate::...` that closes a loop, or that
//! the table does not list, fails here rather than in a review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The names `crate::` paths in `text` start with: `crate::api::X` gives `api`, and a group
/// `crate::{NodeConfig, api::X}` gives each of its members (`NodeConfig`, `api`).
fn crate_paths(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            names.push(ident(rest));
            continue;
        };
        // The group's members at its top level: after `{` and after each `,` at depth 1.
        let (mut depth, mut start) = (1, true);
        for (j, c) in group.char_indices() {
            if start && !c.is_whitespace() {
                names.push(ident(&group[j..]));
                start = false;
            }
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => start = true,
                _ => {}
            }
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The modules lib.rs declares, and the module each of its re-exports comes from
/// (`pub use builder::{run, NodeConfig}` makes `crate::run` an import of `builder`).
fn root(src: &Path) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let (mut modules, mut reexports) = (BTreeSet::new(), BTreeMap::new());
    for line in lib.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("pub mod ") {
            modules.insert(name.trim_end_matches(';').to_string());
        } else if let Some(used) = line.strip_prefix("pub use ") {
            let used = used.trim_end_matches(';');
            if let Some((_, alias)) = used.split_once(" as ") {
                // `pub use pilot_election_core as election`: a module of its own.
                modules.insert(alias.trim().to_string());
            } else if let Some((module, items)) = used.split_once("::") {
                for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                    reexports.insert(item.trim().to_string(), module.to_string());
                }
            }
        }
    }
    (modules, reexports)
}

/// Every top-level module of `src/` and the other top-level modules its files import, through a
/// `crate::` path or one of lib.rs's re-exports (lib.rs and main.rs, which assemble the rest,
/// are left out).
fn imports(src: &Path) -> Graph {
    let (modules, reexports) = root(src);
    let mut graph = Graph::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src/");
            let first = rel.components().next().expect("a component");
            let module = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if module == "lib" || module == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            let used = graph.entry(module.clone()).or_default();
            for name in crate_paths(&text) {
                let target = match reexports.get(&name) {
                    Some(from) => from.clone(),
                    None if modules.contains(&name) => name,
                    None => continue,
                };
                if target != module {
                    used.insert(target);
                }
            }
        }
    }
    graph
}

/// A loop of imports, if there is one: the modules along it, the first repeated at the end.
fn a_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|m| m == at) {
            let mut cycle = path[i..].to_vec();
            cycle.push(at.to_string());
            return Some(cycle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(c) = visit(graph, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

/// The names in backticks in `cell`, each cut to its first path segment (`transport::http` is
/// `transport`, `lib.rs` is `lib`).
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|t| {
            t.split("::")
                .next()
                .unwrap_or(t)
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect()
}

/// docs/architecture.md's "What may import what": each module and the modules it may use. A
/// row that says "everything above" may use every module of the rows before it.
fn allowed(doc: &str) -> Graph {
    let section = doc
        .split("## What may import what")
        .nth(1)
        .expect("docs/architecture.md has the section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut table = Graph::new();
    let mut above = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').collect();
        let (modules, uses) = (ticked(cells[1]), cells[2]);
        let mut may: BTreeSet<String> = ticked(uses).into_iter().collect();
        if uses.contains("everything above") {
            may.extend(above.iter().cloned());
        }
        for m in &modules {
            table
                .entry(m.clone())
                .or_default()
                .extend(may.iter().cloned());
        }
        above.extend(modules);
    }
    table
}

#[test]
fn the_service_modules_import_each_other_in_one_direction_only() {
    let graph = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 10, "read the modules: {graph:?}");
    assert!(graph["runtime"].contains("election"), "read the imports");
    assert!(graph["cli"].contains("builder"), "read lib.rs's re-exports");
    assert_eq!(a_cycle(&graph), None, "an import loop in src/");
}

#[test]
fn every_import_is_one_the_architecture_table_allows() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = imports(&dir.join("src"));
    let doc = std::fs::read_to_string(dir.join("docs/architecture.md")).expect("the doc");
    let table = allowed(&doc);
    let mut wrong = Vec::new();
    for (module, used) in &graph {
        let Some(may) = table.get(module) else {
            wrong.push(format!("`{module}` has no row"));
            continue;
        };
        for u in used.difference(may) {
            wrong.push(format!("`{module}` uses `{u}`"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md, \"What may import what\", does not allow: {}",
        wrong.join("; ")
    );
}

#[test]
fn the_cycle_check_sees_a_loop_of_three_and_a_pair() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert_eq!(a_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    let three = a_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).expect("a loop");
    assert_eq!(three.len(), 4);
    assert_eq!(three.first(), three.last());
    assert!(a_cycle(&graph(&[("api", "server"), ("server", "api")])).is_some());
}

#[test]
fn grouped_and_nested_paths_are_read() {
    let text = "use crate::{api::{A, B}, server, NodeConfig};\nlet x = crate::clock::now();";
    assert_eq!(
        crate_paths(text),
        ["api", "server", "NodeConfig", "clock"].map(String::from)
    );
    let doc = "## What may import what\n\n| module | may use |\n| --- | --- |\n\
               | `clock`, `pilotctl` | nothing |\n| `tls` | `transport::http` (why) |\n\
               | `builder` | everything above |\n\n## Next\n| `x` | `y` |\n";
    let t = allowed(doc);
    assert!(t["clock"].is_empty());
    assert_eq!(t["tls"], ["transport".to_string()].into());
    assert_eq!(
        t["builder"],
        ["clock", "pilotctl", "tls"].map(String::from).into()
    );
    assert!(!t.contains_key("x"), "only the section's own table");
}
