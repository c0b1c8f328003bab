//! The docs cannot drift from the code: every repository path and every code name
//! they cite in backticks still exists.
//!
//! A backticked span is a *path* when it has a `/`, only path characters, and either
//! starts at a top-level folder of the repository or names a source file (`.rs`,
//! `.sh`, `.proto`); it must name a file or folder of the tree, whole or as a tail
//! (`runtime/cache.rs` is `src/runtime/cache.rs`). A span is a *code name* when it is
//! an identifier path (`a::b`, `snake_case`, `CamelCase`, optionally with `()`); each
//! of its segments must occur as a word in the code. Plain words and host paths
//! (`/var/lib/kubelet`, `<root-dir>/pods`) are prose and not checked. Names the docs
//! cite from elsewhere (gRPC's threads, upstream's fields) are listed below with why;
//! an entry no doc cites any more fails too, so the list only shrinks.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Names the docs cite that are not litelet's code, and where they come from.
const CITED_FROM_ELSEWHERE: &[(&str, &str)] = &[
    ("event_engine", "a thread gRPC's C core starts"),
    ("grpc_global_tim", "a thread gRPC's C core starts"),
    ("timer_manager", "a thread gRPC's C core starts"),
    (
        "GracefulShutdownStartTime",
        "a field of upstream's shutdown state file",
    ),
    ("EndTime", "a field of upstream's shutdown state file"),
    (
        "graceful_node_shutdown_state",
        "upstream's shutdown state file",
    ),
    (
        "resizeStatus",
        "a PersistentVolumeClaim status field litelet does not read",
    ),
    ("seLinuxMount", "a CSIDriver field litelet does not read"),
    (
        "nodeStageSecretRef",
        "a CSI PersistentVolume field litelet does not read",
    ),
    (
        "nodePublishSecretRef",
        "a CSI PersistentVolume field litelet does not read",
    ),
    (
        "controllerExpandSecretRef",
        "a CSI PersistentVolume field litelet does not read",
    ),
    ("_errors", "the tail of a metric name written as a suffix"),
    (
        "send_requested_reply",
        "a rule of dbus-daemon's default policy",
    ),
    (
        "kubelet_credential_provider_plugin_duration",
        "an upstream metric litelet does not serve",
    ),
];

/// Top-level folders whose paths the docs cite without a file extension.
const REPO_ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "docs/",
    "packaging/",
    "scripts/",
    "proto/",
    ".ci/",
];

/// The files whose citations are checked: the README and every doc.
fn doc_files(repo: &Path) -> Vec<PathBuf> {
    let mut docs = vec![repo.join("README.md")];
    let mut in_docs: Vec<PathBuf> = fs::read_dir(repo.join("docs"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// Every file and folder of the tree (relative, `/`-separated), outside build output.
fn tree_paths(repo: &Path) -> BTreeSet<String> {
    fn walk(repo: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if matches!(name.to_str(), Some("target" | ".git" | ".cargo")) {
                continue;
            }
            if let Ok(rel) = path.strip_prefix(repo) {
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
            if path.is_dir() {
                walk(repo, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(repo, repo, &mut out);
    out
}

/// Every identifier-like word of the code, its protos and build files, and the
/// names of the tree's files and folders.
fn code_words(repo: &Path, tree: &BTreeSet<String>) -> BTreeSet<String> {
    let code_roots = [
        "src/",
        "tests/",
        "benches/",
        "proto/",
        "packaging/",
        "scripts/",
    ];
    let mut words = BTreeSet::new();
    for rel in tree {
        // A file's or folder's name is a code name too (a module, a test binary).
        if let Some(stem) = rel.rsplit('/').next().and_then(|n| n.split('.').next()) {
            words.insert(stem.to_owned());
        }
        let wanted = code_roots.iter().any(|r| rel.starts_with(r))
            || matches!(rel.as_str(), "build.rs" | "Makefile" | "Cargo.toml");
        if !wanted || rel.starts_with("tests/field_audit/") {
            continue;
        }
        let Ok(text) = fs::read_to_string(repo.join(rel)) else {
            continue;
        };
        words.extend(identifiers(&text).map(str::to_owned));
    }
    words
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The backticked spans of a markdown text outside fenced blocks, with their lines.
fn backticked(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        // Odd pieces lie between backticks; an unpaired last one is not a span.
        for (i, piece) in parts.iter().enumerate() {
            if i % 2 == 1 && i + 1 < parts.len() && !piece.is_empty() {
                spans.push((index + 1, (*piece).to_owned()));
            }
        }
    }
    spans
}

#[derive(Debug, PartialEq)]
enum Citation {
    Path(Vec<String>),
    Code(Vec<String>),
    Prose,
}

/// What a backticked span cites.
fn classify(span: &str) -> Citation {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_.-/{},".contains(c);
    if span.contains('/') && span.chars().all(is_path_char) {
        let rooted = REPO_ROOTS.iter().any(|r| span.starts_with(r));
        let source = [".rs", ".sh", ".proto"].iter().any(|e| span.ends_with(e));
        if !span.starts_with('.') && (rooted || source) || span.starts_with(".ci/") {
            return Citation::Path(expand_braces(span));
        }
        return Citation::Prose;
    }
    let name = span.strip_suffix("()").unwrap_or(span);
    let segments: Vec<&str> = name.split("::").collect();
    let identifier = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !segments.iter().all(|s| identifier(s)) {
        return Citation::Prose;
    }
    let camel = |s: &str| {
        let chars: Vec<char> = s.chars().collect();
        chars
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
    };
    let coded = segments.len() > 1 || name.contains('_') || camel(name);
    if coded {
        Citation::Code(segments.into_iter().map(str::to_owned).collect())
    } else {
        Citation::Prose
    }
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one group, as the docs write them).
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_owned()];
    };
    if close < open {
        return vec![path.to_owned()];
    }
    path[open + 1..close]
        .split(',')
        .map(|alt| format!("{}{}{}", &path[..open], alt, &path[close + 1..]))
        .collect()
}

fn path_exists(tree: &BTreeSet<String>, cited: &str) -> bool {
    let cited = cited.trim_end_matches('/');
    tree.contains(cited) || tree.iter().any(|p| p.ends_with(&format!("/{cited}")))
}

#[test]
fn every_path_and_code_name_the_docs_cite_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tree = tree_paths(repo);
    let words = code_words(repo, &tree);
    let allowed: BTreeSet<&str> = CITED_FROM_ELSEWHERE.iter().map(|(n, _)| *n).collect();
    let mut used = BTreeSet::new();
    let mut stale = Vec::new();
    for doc in doc_files(repo) {
        let Ok(text) = fs::read_to_string(&doc) else {
            continue;
        };
        let rel = doc.strip_prefix(repo).unwrap_or(&doc).display().to_string();
        for (line, span) in backticked(&text) {
            match classify(&span) {
                Citation::Path(paths) => {
                    if paths.iter().any(|p| !path_exists(&tree, p)) {
                        stale.push(format!("{rel}:{line}: `{span}` is no path of the tree"));
                    }
                }
                Citation::Code(segments) => {
                    for segment in &segments {
                        if allowed.contains(segment.as_str()) {
                            used.insert(segment.clone());
                        } else if !words.contains(segment) {
                            stale.push(format!(
                                "{rel}:{line}: `{span}`: no `{segment}` in the code"
                            ));
                            break;
                        }
                    }
                }
                Citation::Prose => {}
            }
        }
    }
    for (name, why) in CITED_FROM_ELSEWHERE {
        if !used.contains(*name) {
            stale.push(format!(
                "CITED_FROM_ELSEWHERE lists `{name}` ({why}), which no doc cites any more: remove it"
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "the docs cite what no longer exists:\n{}",
        stale.join("\n")
    );
}

#[test]
fn citations_are_told_apart_from_prose() {
    let cases: &[(&str, Citation)] = &[
        (
            "src/runtime/cache.rs",
            Citation::Path(vec!["src/runtime/cache.rs".into()]),
        ),
        (
            "runtime/cache.rs",
            Citation::Path(vec!["runtime/cache.rs".into()]),
        ),
        (
            "src/events/{a,b}.rs",
            Citation::Path(vec!["src/events/a.rs".into(), "src/events/b.rs".into()]),
        ),
        ("tests/vm/", Citation::Path(vec!["tests/vm/".into()])),
        ("/var/lib/kubelet", Citation::Prose),
        ("<root-dir>/pods/<uid>", Citation::Prose),
        ("image_manager/pulling/", Citation::Prose),
        ("kube-root-ca.crt", Citation::Prose),
        ("pods", Citation::Prose),
        ("--rotate-certificates", Citation::Prose),
        (
            "RuntimeManager::sync_pod",
            Citation::Code(vec!["RuntimeManager".into(), "sync_pod".into()]),
        ),
        (
            "write_atomic()",
            Citation::Code(vec!["write_atomic".into()]),
        ),
        (
            "serializeImagePulls",
            Citation::Code(vec!["serializeImagePulls".into()]),
        ),
        ("Pressure", Citation::Prose),
    ];
    for (span, want) in cases {
        assert_eq!(&classify(span), want, "{span}");
    }
}

#[test]
fn spans_inside_fences_and_unpaired_ticks_are_skipped() {
    let text = "a `one` b\n```\n`two`\n```\nc `three` and a lone `tick\n";
    let spans: Vec<String> = backticked(text).into_iter().map(|(_, s)| s).collect();
    assert_eq!(spans, ["one", "three"]);
}
