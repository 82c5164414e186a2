//! The spec's rule index (`spec/INDEX.md`): for every numbered rule of `spec/` (a
//! `### ID — title` heading), the files — and in them the functions and types — that
//! cite it where it is enforced (source), and the files where it is checked (tests, the
//! gate's models and planted bugs). The index is
//! generated from the tree and checked in; this test fails when it drifts, so a rule
//! that loses its last enforcement or check shows up in review
//! (`DYNRES_BLESS_SPEC_INDEX=1 cargo test -p dynres-tests --test spec_index` rewrites it).
//!
//! It also requires every rule to be cited by the code that enforces it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// `(id, title, chapter)` of every rule heading, in chapter order.
fn rules(root: &Path) -> Vec<(String, String, String)> {
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("spec"))
        .expect("spec/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter(|p| !p.ends_with("INDEX.md"))
        .collect();
    chapters.sort();
    let mut out = Vec::new();
    for ch in chapters {
        let text = std::fs::read_to_string(&ch).expect("chapter");
        let name = ch.file_name().unwrap().to_string_lossy().to_string();
        for line in text.lines() {
            let Some(h) = line.strip_prefix("### ") else {
                continue;
            };
            let (id, title) = h.split_once(" — ").unwrap_or((h, ""));
            let well_formed = id.split_once('-').is_some_and(|(p, n)| {
                !p.is_empty()
                    && p.chars().all(|c| c.is_ascii_uppercase())
                    && !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_digit())
            });
            if well_formed {
                out.push((id.to_string(), title.to_string(), name.clone()));
            }
        }
    }
    out
}

/// Every Rust source of the tree's crates (not `target/`, not fuzz corpora).
fn sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "core",
        "transports",
        "client",
        "runtime",
        "launcher",
        "capi",
        "verification",
        "tests",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "target" && name != "corpus" && name != "artifacts" {
                    stack.push(p);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Whether a whole file checks rules rather than enforcing them: tests, the gate,
/// benches.
fn is_check(rel: &str) -> bool {
    rel.starts_with("tests/")
        || rel.starts_with("verification/")
        || rel.contains("/tests/")
        || rel.contains("/benches/")
        || rel.ends_with("/tests.rs")
}

/// Where a source file's unit tests start: its first top-level `#[cfg(...)]` naming
/// `test` (`#[cfg(test)]`, `#[cfg(all(test, loom))]`, …), or the end.
fn tests_start(text: &str) -> usize {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("#[cfg(") && cites_word(line, "test") {
            return at;
        }
        at += line.len();
    }
    text.len()
}

/// Whether `line` holds `word` delimited by non-identifier characters.
fn cites_word(line: &str, word: &str) -> bool {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == word)
}

/// Whether `text` cites `id` as a whole word (`RC-1` is not cited by `RC-12`).
fn cites(text: &str, id: &str) -> bool {
    text.match_indices(id).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + id.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// An item declaration (`fn`, `struct`, `enum`, `trait`, `const`, `static`, `type`,
/// `mod`, `impl`): `(indent, keyword, name)`. For `impl`, the name is the implementing
/// type (`impl<T> Tr for Ty<T>` gives `Ty`).
fn item(line: &str) -> Option<(usize, &str, String)> {
    let indent = line.len() - line.trim_start().len();
    let mut words = line.split_whitespace().peekable();
    // Leading qualifiers: visibility, const/async/unsafe/extern "C".
    while let Some(w) = words.peek() {
        if w.starts_with("pub") || ["async", "unsafe", "extern", "\"C\""].contains(w) {
            words.next();
        } else {
            break;
        }
    }
    let kw = words.next()?;
    // `impl<T>` is the keyword with its generics attached.
    let kw = if kw.starts_with("impl<") { "impl" } else { kw };
    let kw = match kw {
        "fn" | "struct" | "enum" | "trait" | "static" | "type" | "mod" | "impl" => kw,
        "const" => match words.peek() {
            Some(&"fn") => {
                words.next();
                "fn"
            }
            _ => "const",
        },
        _ => return None,
    };
    let ident = |w: &str| {
        w.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("")
            .to_string()
    };
    let name = if kw == "impl" {
        let rest: Vec<&str> = words.collect();
        let ty = match rest.iter().position(|w| *w == "for") {
            Some(at) => rest.get(at + 1).copied(),
            None => rest.iter().copied().find(|w| !w.starts_with('<')),
        };
        ident(ty?)
    } else {
        ident(words.next()?)
    };
    (!name.is_empty()).then_some((indent, kw, name))
}

/// The item a citation on line `at` belongs to: for a doc or line comment, the item it
/// stands above (or the module, for `//!`); for code, the innermost enclosing item (the
/// nearest declaration above indented less), with its `impl` type for methods.
fn citing_item(lines: &[&str], at: usize) -> Option<String> {
    let line = lines[at].trim_start();
    if line.starts_with("//!") {
        return None;
    }
    let below = if line.starts_with("//") {
        lines[at + 1..]
            .iter()
            .map(|l| l.trim_start())
            .find(|l| !l.starts_with("//") && !l.starts_with("#[") && !l.is_empty())
            .and_then(|l| item(l).filter(|(_, kw, _)| *kw != "impl"))
    } else {
        None
    };
    let indent = lines[at].len() - line.len();
    let (fn_indent, kw, name) = match below.or_else(|| item(lines[at])) {
        Some((_, kw, name)) => (indent, kw, name),
        None => lines[..at]
            .iter()
            .rev()
            .filter_map(|l| item(l))
            .find(|(i, _, _)| *i < indent)?,
    };
    if kw == "impl" {
        return Some(name);
    }
    // A method: name its impl's type.
    let owner = lines[..at]
        .iter()
        .rev()
        .filter_map(|l| item(l))
        .find(|(i, k, _)| *i < fn_indent && (*k == "impl" || *k == "trait"))
        .map(|(_, _, ty)| ty);
    Some(match owner {
        Some(ty) if kw == "fn" || kw == "const" || kw == "type" => format!("{ty}::{name}"),
        _ => name,
    })
}

/// The items of `code` citing `id`, in order of first citation.
fn citing_items(code: &str, id: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out: Vec<String> = Vec::new();
    for (at, l) in lines.iter().enumerate() {
        if cites(l, id)
            && let Some(name) = citing_item(&lines, at)
            && !out.contains(&name)
        {
            out.push(name);
        }
    }
    out
}

fn index(root: &Path) -> (String, Vec<String>) {
    let files: Vec<(String, String)> = sources(root)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
            (rel, std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect();
    let mut md = String::from(
        "# Rule index (generated)\n\n\
         Where each rule of this folder is enforced (source files citing its ID, and in them\n\
         the functions and types that cite it) and checked (tests and the gate citing it). Generated by `tests/tests/spec_index.rs`, which fails\n\
         when this file drifts: rewrite it with `DYNRES_BLESS_SPEC_INDEX=1 cargo test -p\n\
         dynres-tests --test spec_index`. A rule with no check listed has no test or model\n\
         property that names it yet.\n\n\
         | rule | title | chapter | enforced in | checked in |\n|---|---|---|---|---|\n",
    );
    let mut unenforced = Vec::new();
    let mut by_chapter: BTreeMap<String, usize> = BTreeMap::new();
    for (id, title, chapter) in rules(root) {
        *by_chapter.entry(chapter.clone()).or_default() += 1;
        let (mut enforced, mut checked) = (Vec::new(), Vec::new());
        for (rel, text) in &files {
            // A source file's own unit tests (after its `#[cfg(test)]`) check rules.
            let (code, tests) = if is_check(rel) {
                ("", text.as_str())
            } else {
                text.split_at(tests_start(text))
            };
            if cites(code, &id) {
                let items = citing_items(code, &id);
                enforced.push(if items.is_empty() {
                    format!("`{rel}`")
                } else {
                    format!("`{rel}` ({})", items.join(", "))
                });
            }
            if cites(tests, &id) {
                checked.push(format!("`{rel}`"));
            }
        }
        if enforced.is_empty() {
            unenforced.push(id.clone());
        }
        let list = |v: &[String]| {
            if v.is_empty() {
                "—".to_string()
            } else {
                v.join(", ")
            }
        };
        md.push_str(&format!(
            "| {id} | {title} | {chapter} | {} | {} |\n",
            list(&enforced),
            list(&checked)
        ));
    }
    (md, unenforced)
}

/// The index is current, and every rule is cited where it is enforced.
#[test]
fn the_rule_index_is_current_and_every_rule_is_enforced_somewhere() {
    let root = root();
    let (md, unenforced) = index(&root);
    assert!(
        unenforced.is_empty(),
        "rules no source file cites where they are enforced: {unenforced:?}"
    );
    let path = root.join("spec/INDEX.md");
    if std::env::var_os("DYNRES_BLESS_SPEC_INDEX").is_some() {
        std::fs::write(&path, &md).expect("write spec/INDEX.md");
        return;
    }
    let held = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        held == md,
        "spec/INDEX.md is out of date: rerun with DYNRES_BLESS_SPEC_INDEX=1 and commit it"
    );
}

/// Citations are attributed to the item they document or sit in.
#[test]
fn citations_name_their_items() {
    let code = "//! RC-1 module\n\
                /// Enforces RC-1.\n\
                #[derive(Debug)]\n\
                pub struct Table;\n\
                impl<T> Check for Table<T> {\n\
                \x20   pub(crate) fn run(&self) {\n\
                \x20       // RC-1: why\n\
                \x20       go();\n\
                \x20   }\n\
                }\n\
                const fn top() { rc1(); /* RC-1 */ }\n";
    assert_eq!(citing_items(code, "RC-1"), ["Table", "Table::run", "top"]);
}

/// The citation matcher itself: whole IDs only.
#[test]
fn citations_are_whole_ids() {
    assert!(cites("see RC-1.", "RC-1"));
    assert!(cites("(RC-1)", "RC-1"));
    assert!(!cites("RC-12", "RC-1"));
    assert!(!cites("XRC-1", "RC-1"));
    assert!(!cites("MODEX-1", "X-1"));
}
