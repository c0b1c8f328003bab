//! Tidy checks over the source tree (as rust-analyzer's `tidy` tests): the top-level
//! modules of `src/` import each other one way only, in the layer order written once
//! below (and drawn in `docs/ARCHITECTURE.md`), every `src/` file opens with a
//! `//!` doc saying what it is for, and no comment threads a feature through the code
//! with an all-caps marker (`// RESIZE:`): a feature lives in its module.
//!
//! The import check reads every `crate::` path of production code (`use` lines,
//! grouped `use crate::{a, b::c}` and inline `crate::x::y` paths); test code (a
//! `#[cfg(test)]` module, in-file or in its own file, and everything after a file's
//! first `#[cfg(test)]`) may build fixtures from any layer and is skipped. Comments
//! are skipped. A module may import only modules of strictly lower layers.
//!
//! A third check keeps JSON paths and API URLs inside `src/api/` (production code
//! only; a short allow-list names the exceptions and why).
//!
//! A fourth keeps production functions within 100 lines (comments and strings are
//! skipped when matching braces); the older long ones are listed at their length and
//! the list only shrinks.
//!
//! `tidy/doc_names.rs` keeps the docs true: every path and code name they cite in
//! backticks still exists.

#[path = "tidy/doc_names.rs"]
mod doc_names;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers of `src/`, lowest first. A module may import only modules of lower
/// layers, never one of its own layer or above. A new top-level module must be added
/// here (and to the diagram in `docs/ARCHITECTURE.md`).
const LAYERS: &[&[&str]] = &[
    // Wire types and host helpers (the D-Bus client too, the kernel tunables, the
    // log line format, the per-key back-off): depend on nothing of litelet.
    &[
        "api",
        "process",
        "fsutil",
        "fswalk",
        "dbus",
        "blocking",
        "kernel_tunables",
        "log_format",
        "backoff",
    ],
    // Leaf services over the API types: metrics registry, cgroup writes, events (the
    // recorder and the `events` thread that sends them), pod sources, image
    // credentials, the HTTP GET and outcome shared by probes and hooks.
    &[
        "metrics",
        "cgroups",
        "events",
        "sources",
        "credentialprovider",
        "probe",
    ],
    // The CRI client (counts its calls in metrics); the client certificate; the pod
    // data store (edge autonomy: secrets, configMaps and tokens kept in the checkpoint
    // format of `sources`).
    &["cri", "certificate", "poddata"],
    // What the runtime manager uses over CRI and the API: the node's images (pulls,
    // credentials checks, pull records, image GC), user namespaces, RuntimeClasses.
    &["images", "userns", "runtime_class"],
    // The runtime manager (upstream kuberuntime), with all of in-place resize
    // (`runtime::resize`: allocations, admission, decisions, step 9; the node's fit
    // comes in through a trait), waiting reasons, the log reader and the runtime state.
    &["runtime"],
    // What reads the runtime: status generation, the node, PLEG, pod workers, stats,
    // log rotation, runtime info, the device manager (implements the runtime's
    // device seam; node status and admission read it).
    &[
        "status",
        "node",
        "pleg",
        "pod_workers",
        "stats",
        "logs",
        "runtime_info",
        "devicemanager",
    ],
    // Pod admission predicates (upstream lifecycle), the prober, and the PodResources
    // API (reads the device manager; the pods come in through a trait).
    &["admission", "prober", "podresources"],
    // The kubelet's managers over those: eviction (reads stats, node and status; used
    // by kubelet and agent); the node shutdown manager (logind, pod workers' kills,
    // admission, node health).
    &["eviction", "nodeshutdown"],
    // The sync loop, pod syncer, housekeeping.
    &["kubelet"],
    // Above the kubelet: the node server and the volume manager (implements a
    // kubelet seam).
    &["server", "volumes"],
    // The command line, split into each component's config.
    &["config"],
    // Wiring: starts every thread.
    &["agent"],
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_owned())
}

/// The directory a file's child modules live in (`a.rs` and `a/mod.rs` → `a/`).
fn child_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let parent = file.parent().unwrap_or(Path::new(""));
    if stem == "mod" || stem == "lib" || stem == "main" {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

/// Files of modules declared under `#[cfg(test)]` (`#[cfg(test)] mod tests;`), with
/// their directories: test code, skipped by the import check.
fn test_module_paths(files: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (file, text) in files {
        let mut cfg_test = false;
        for line in text.lines() {
            let line = line.trim();
            if line == "#[cfg(test)]" {
                cfg_test = true;
                continue;
            }
            if cfg_test {
                let decl = line
                    .strip_prefix("pub(crate) ")
                    .or_else(|| line.strip_prefix("pub "))
                    .unwrap_or(line);
                if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                    let dir = child_dir(file);
                    out.push(dir.join(format!("{name}.rs")));
                    out.push(dir.join(name));
                }
            }
            if !line.starts_with("#[") {
                cfg_test = false;
            }
        }
    }
    out
}

/// The production part of a file: up to its first `#[cfg(test)]`, without comments.
/// Each line keeps its number.
fn production_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            break;
        }
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push((i + 1, code.to_owned()));
    }
    out
}

/// The items of a brace group's inside (`a, b::{c, d}` → `a`, `b::{c, d}`): split
/// at the commas outside nested groups.
fn group_items(inner: &str) -> Vec<&str> {
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
}

/// The end (just past the `}`) of the brace group `text` starts with, or the end of
/// `text` when the group is not closed.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// The top-level modules a piece of code names through `crate::`: `crate::a::...`,
/// and each first name inside `crate::{a::x, b}` (the group may span lines).
fn crate_imports(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `crate::` must start a path, not end a longer identifier (`$crate::`, `my_crate::`).
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if rest.starts_with('{') {
            let close = matching_brace(rest);
            let group = &rest[1..close];
            let inner = group.strip_suffix('}').unwrap_or(group);
            let items = group_items(inner);
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "self" {
                    out.push(name);
                }
            }
            rest = &rest[close..];
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// A file's production lines joined into one text (so that a path or group spanning
/// lines reads whole), with each line's start offset and number.
fn joined_production(text: &str) -> (String, Vec<(usize, usize)>) {
    let mut joined = String::new();
    let mut starts = Vec::new();
    for (number, code) in production_lines(text) {
        starts.push((joined.len(), number));
        joined.push_str(&code);
        joined.push('\n');
    }
    (joined, starts)
}

/// The line number of `offset` in a text made by [`joined_production`].
fn line_at(starts: &[(usize, usize)], offset: usize) -> usize {
    let i = starts.partition_point(|(start, _)| *start <= offset);
    starts[i.saturating_sub(1)].1
}

/// Joins a file's production lines so that a `use crate::{...}` group spanning lines
/// is read whole; each import is reported at the line where its `crate::` starts.
fn imports_by_line(text: &str) -> Vec<(usize, String)> {
    let (joined, starts) = joined_production(text);
    let line_of = |offset: usize| line_at(&starts, offset);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = joined[from..].find("crate::") {
        let offset = from + at;
        // One path (or group) at a time: up to the end of its statement or expression.
        let tail = &joined[offset..];
        let path = &tail["crate::".len()..];
        let end = if path.starts_with('{') {
            "crate::".len() + matching_brace(path)
        } else {
            "crate::".len()
                + tail["crate::".len()..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len() - "crate::".len())
        };
        let before_ok = joined[..offset]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$'));
        if before_ok {
            for name in crate_imports(&tail[..end]) {
                out.push((line_of(offset), name));
            }
        }
        from = offset + end.max("crate::".len());
    }
    out
}

fn layer_of() -> BTreeMap<&'static str, usize> {
    let mut map = BTreeMap::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        for module in *layer {
            assert!(
                map.insert(*module, rank).is_none(),
                "{module} is listed twice in LAYERS"
            );
        }
    }
    map
}

fn read_sources() -> Vec<(PathBuf, String)> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = fs::read_to_string(&f).unwrap_or_default();
            (f, text)
        })
        .collect()
}

/// Every import between top-level modules points to a lower layer.
#[test]
fn modules_import_only_lower_layers() {
    let src = src_dir();
    let layers = layer_of();
    let files = read_sources();
    let top_levels: BTreeSet<String> = files
        .iter()
        .filter_map(|(f, _)| top_module(&src, f))
        .collect();
    let unlisted: Vec<&String> = top_levels
        .iter()
        .filter(|m| !layers.contains_key(m.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "top-level modules missing from LAYERS in tests/tidy.rs (and docs/ARCHITECTURE.md): {unlisted:?}"
    );

    let tests = test_module_paths(&files);
    let mut violations = Vec::new();
    for (file, text) in &files {
        let Some(module) = top_module(&src, file) else {
            continue;
        };
        if tests.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let rank = layers[module.as_str()];
        for (line, target) in imports_by_line(text) {
            let Some(&target_rank) = layers.get(target.as_str()) else {
                continue; // not a top-level module (e.g. a macro at the crate root)
            };
            if target != module && target_rank >= rank {
                let rel = file.strip_prefix(&src).unwrap_or(file);
                violations.push(format!(
                    "src/{}:{line}: {module} (layer {rank}) imports {target} (layer {target_rank})",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the layer order (LAYERS in tests/tidy.rs):\n{}",
        violations.join("\n")
    );
}

/// Every file of `src/` opens with a `//!` doc.
#[test]
fn every_source_file_starts_with_a_module_doc() {
    let src = src_dir();
    let missing: Vec<String> = read_sources()
        .iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(f, _)| format!("src/{}", f.strip_prefix(&src).unwrap_or(f).display()))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading //! doc:\n{}",
        missing.join("\n")
    );
}

/// The API shape finder: indexing by a string key, pointers, object literals, URLs;
/// not array literals, comments or test code.
#[test]
fn api_shape_finder_reads_indexing_pointers_literals_and_urls() {
    let text = "fn f(v: &Value) {\n\
                let a = v[\"status\"][\"attached\"]; // x[\"not\"] in a comment\n\
                let b = v.pointer(\"/metadata/name\");\n\
                let c = json!({\"kind\": \"Pod\"});\n\
                let d = format!(\"/apis/storage.k8s.io/v1/x\");\n\
                let e = [\"a\", \"b\"];\n\
                }\n\
                #[cfg(test)]\n\
                mod tests { fn g(v: Value) { v[\"x\"]; } }\n";
    assert_eq!(
        api_shapes(text),
        [
            (2, "[\"status\"]".to_owned()),
            (2, "[\"attached\"]".to_owned()),
            (3, ".pointer(\"/".to_owned()),
            (4, "json!({".to_owned()),
            (5, "\"/apis/".to_owned()),
        ]
    );
}

/// Names of the modules of `src/` that have submodules (directories, at any depth):
/// the names a feature goes by.
fn module_names(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        if path.is_dir() {
            module_names(&path, out);
            if let Some(name) = path.file_name().and_then(|s| s.to_str()) {
                out.insert(name.to_owned());
            }
        }
    }
}

/// Tags the marker check allows at the start of a comment.
const ALLOWED_TAGS: &[&str] = &["SAFETY", "TODO", "FIXME", "NOTE"];

/// The feature markers in one line of code: an all-caps word (4 letters or more) that
/// opens a comment as a tag (`// WORD:` or a comment that is only `WORD`), or that
/// names a module (`modules`) and sits in a comment as a tag: `(WORD)`, `(WORD:` or
/// `(WORD,`.
fn markers(line: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let Some(at) = line.find("//") else {
        return Vec::new();
    };
    let comment = line[at..].trim_start_matches(['/', '!']).trim();
    let is_word = |w: &str| w.len() >= 4 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_');
    let mut out = Vec::new();
    let first: String = comment
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let after = &comment[first.len()..];
    if is_word(&first)
        && (after.starts_with(':') || after.trim().is_empty())
        && !ALLOWED_TAGS.contains(&first.as_str())
    {
        out.push(first.clone());
    }
    let names_module = |w: &str| is_word(w) && modules.contains(&w.to_lowercase());
    let mut rest = comment;
    while let Some(open) = rest.find('(') {
        rest = &rest[open + 1..];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let next = rest[word.len()..].chars().next();
        if names_module(&word) && matches!(next, Some(')' | ':' | ',')) {
            out.push(word);
        }
    }
    out
}

/// No comment in `src/` carries a feature marker such as `// RESIZE:`; test code
/// included.
#[test]
fn no_feature_marker_comments() {
    let src = src_dir();
    let mut modules = BTreeSet::new();
    module_names(&src, &mut modules);
    let mut found = Vec::new();
    for (file, text) in read_sources() {
        for (i, line) in text.lines().enumerate() {
            for marker in markers(line, &modules) {
                let rel = file.strip_prefix(&src).unwrap_or(&file);
                found.push(format!("src/{}:{}: {marker}", rel.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "feature marker comments (move the code into the feature's module, or say in words what it does):\n{}",
        found.join("\n")
    );
}

/// The marker check itself: tags, module names in tag form, and what it leaves alone.
#[test]
fn marker_check_finds_tags_and_leaves_prose_alone() {
    let modules: BTreeSet<String> = ["resize", "eviction"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let found = |line: &str| markers(line, &modules);
    assert_eq!(found("    // RESIZE: admit first"), ["RESIZE"]);
    assert_eq!(found("x(); // RESIZE"), ["RESIZE"]);
    assert_eq!(
        found("/// The pod cgroup manager (RESIZE); None"),
        ["RESIZE"]
    );
    assert_eq!(
        found("// Step 9 (RESIZE, upstream doPodResizeAction)"),
        ["RESIZE"]
    );
    assert_eq!(found("// text (EVICTION: reclaim)"), ["EVICTION"]);
    assert_eq!(found("//! HOTFIX: something"), ["HOTFIX"]);
    assert!(found("// SAFETY: the fd is ours").is_empty());
    assert!(found("// CPU: shares first").is_empty());
    assert!(found("// reads the JSON (JSON) and CRI").is_empty());
    assert!(found("/// Expands `$(NAME)` from `vars`").is_empty());
    assert!(found("//! hooks: exec through CRI, an HTTP").is_empty());
    assert!(found("// resize in place after init").is_empty());
    assert!(found("let s = \"RESIZE\";").is_empty());
}

/// The parser itself: plain paths, groups over lines, comments and look-alikes.
#[test]
fn import_parser_reads_paths_groups_and_skips_comments() {
    let text = "//! doc naming crate::agent\n\
                use crate::api::pod::Pod;\n\
                use crate::{\n    cri::pb,\n    runtime::{model, cache},\n};\n\
                // crate::server in a comment\n\
                fn f() { let x = crate::metrics::render(); } // crate::agent\n\
                macro_rules! m { () => { $crate::node::x() } }\n\
                #[cfg(test)]\n\
                mod tests { use crate::kubelet::Kubelet; }\n";
    let found = imports_by_line(text);
    assert_eq!(
        found,
        [
            (2, "api".to_owned()),
            (3, "cri".to_owned()),
            (3, "runtime".to_owned()),
            (8, "metrics".to_owned()),
        ]
    );
    let files = vec![(
        PathBuf::from("/x/src/a.rs"),
        "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod testfs;\nmod real;\n".to_owned(),
    )];
    assert_eq!(
        test_module_paths(&files),
        [
            PathBuf::from("/x/src/a/tests.rs"),
            PathBuf::from("/x/src/a/tests"),
            PathBuf::from("/x/src/a/testfs.rs"),
            PathBuf::from("/x/src/a/testfs"),
        ]
    );
}

/// Places outside `src/api/` allowed to spell a JSON path or an API URL:
/// `(file under src/, the hit as reported, or "*" for any, why)`. An entry that no
/// longer matches anything fails the check too, so the list only shrinks.
const API_SHAPE_ALLOWED: &[(&str, &str, &str)] = &[(
    "cri/cgroup_driver.rs",
    "*",
    "containerd's own config (CRI Status info), not a Kubernetes object",
)];

/// The JSON paths and API URLs in one file's production code: `x["key"]` indexing,
/// `.pointer("/...")`, `json!({...})` object literals and `"/api/v1..."` or
/// `"/apis/..."` literals, each as (line, what).
fn api_shapes(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, code) in production_lines(text) {
        let mut hits = Vec::new();
        for (at, _) in code.match_indices("[\"") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ']' || c == ')') {
                let key: String = code[at + 2..].chars().take_while(|c| *c != '"').collect();
                hits.push(format!("[\"{key}\"]"));
            }
        }
        for pattern in [
            ".pointer(\"/",
            ".pointer_mut(\"/",
            "json!({",
            "\"/api/v1",
            "\"/apis/",
        ] {
            if code.contains(pattern) {
                hits.push(pattern.to_owned());
            }
        }
        out.extend(hits.into_iter().map(|h| (number, h)));
    }
    out
}

/// Only `src/api/` knows the JSON shape of API objects and URL paths
/// (docs/ARCHITECTURE.md): elsewhere, typed objects and `api::paths`. Test code is
/// skipped; the few exceptions are listed in [`API_SHAPE_ALLOWED`] with a reason.
#[test]
fn json_paths_and_api_urls_stay_in_api() {
    let src = src_dir();
    let files = read_sources();
    let tests = test_module_paths(&files);
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for (file, text) in &files {
        let rel = file.strip_prefix(&src).unwrap_or(file);
        let rel = rel.to_string_lossy().into_owned();
        if rel.starts_with("api/") || tests.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        for (line, what) in api_shapes(text) {
            let allowed = API_SHAPE_ALLOWED
                .iter()
                .position(|(f, w, _)| *f == rel && (*w == "*" || *w == what));
            match allowed {
                Some(i) => {
                    used.insert(i);
                }
                None => found.push(format!("src/{rel}:{line}: {what}")),
            }
        }
    }
    let stale: Vec<String> = API_SHAPE_ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, (f, w, _))| format!("src/{f}: {w}"))
        .collect();
    assert!(
        stale.is_empty(),
        "API_SHAPE_ALLOWED entries that match nothing any more (remove them):\n{}",
        stale.join("\n")
    );
    assert!(
        found.is_empty(),
        "JSON paths or API URLs outside src/api/ (use typed objects and api::paths, or \
         add to API_SHAPE_ALLOWED with a reason):\n{}",
        found.join("\n")
    );
}

/// Circles between the files of one folder that are allowed (none): an entry would
/// name its folder and files, with a comment saying why the circle must stay.
const FOLDER_CIRCLES_ALLOWED: &[&str] = &[];

/// The module path of a file of `src/` (`status/containers/tests.rs` →
/// `[status, containers, tests]`; `mod.rs` is its folder; lib.rs and main.rs are `[]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let Ok(rel) = file.strip_prefix(src) else {
        return Vec::new();
    };
    let mut parts: Vec<String> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(str::to_owned))
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
        if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
            parts.push(stem);
        }
    }
    parts
}

/// The paths one path expression names, groups expanded (`a::{b, c::d}` →
/// `[a, b]`, `[a, c, d]`); `text` starts at the path. A lone `self` in a group names
/// the prefix itself.
fn expand_paths(text: &str) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut at = 0;
    loop {
        let rest = &text[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if trimmed.starts_with('{') {
            let close = matching_brace(trimmed);
            let inner = trimmed[1..close]
                .strip_suffix('}')
                .unwrap_or(&trimmed[1..close]);
            let mut out = Vec::new();
            let items = group_items(inner);
            for item in items {
                for tail in expand_paths(item).0 {
                    let mut path = segments.clone();
                    if tail != ["self"] {
                        path.extend(tail);
                    }
                    out.push(path);
                }
            }
            return (out, at + close);
        }
        let ident: String = trimmed
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            break;
        }
        at += ident.len();
        segments.push(ident);
        if text[at..].starts_with("::") {
            at += 2;
        } else {
            break;
        }
    }
    let found = if segments.is_empty() {
        Vec::new()
    } else {
        vec![segments]
    };
    (found, at)
}

/// The module paths a file's production code names through `super::`, `self::` and
/// `crate::`, resolved against the file's own module path, with their lines.
fn relative_imports(module: &[String], text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let (joined, starts) = joined_production(text);
    let mut from = 0;
    while from < joined.len() {
        let next = ["super::", "self::", "crate::"]
            .iter()
            .filter_map(|p| joined[from..].find(p).map(|i| from + i))
            .min();
        let Some(offset) = next else { break };
        let before = joined[..offset].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            from = offset + 1;
            continue;
        }
        let (paths, len) = expand_paths(&joined[offset..]);
        let line = line_at(&starts, offset);
        for path in paths {
            let mut resolved: Vec<String> = module.to_vec();
            let mut rest = path.as_slice();
            match rest.first().map(String::as_str) {
                Some("crate") => {
                    resolved.clear();
                    rest = &rest[1..];
                }
                Some("self") => rest = &rest[1..],
                _ => {}
            }
            while rest.first().is_some_and(|s| s == "super") {
                resolved.pop();
                rest = &rest[1..];
            }
            resolved.extend(rest.iter().cloned());
            out.push((line, resolved));
        }
        from = offset + len.max(1);
    }
    out
}

/// The strongly connected groups (of two or more) of a small graph.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(n) = todo.pop() {
            for next in edges.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for node in &nodes {
        let from = reach(node);
        let group: Vec<String> = nodes
            .iter()
            .filter(|other| from.contains(**other) && reach(other).contains(*node))
            .map(|s| (*s).clone())
            .collect();
        if group.len() > 1 {
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

/// Inside every folder of `src/`, the files (each with its submodule folder) import
/// each other one way only: no two siblings reach each other through `super::`,
/// `self::` or `crate::` paths of production code.
#[test]
fn files_of_a_folder_import_each_other_one_way() {
    let src = src_dir();
    let files = read_sources();
    let tests = test_module_paths(&files);
    // Per folder module, the edges between its child modules and where each was seen.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut seen_at: BTreeMap<(Vec<String>, String, String), String> = BTreeMap::new();
    for (file, text) in &files {
        if tests.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let module = module_path(&src, file);
        for (line, target) in relative_imports(&module, text) {
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            // Only inside a folder: the top level is the layer check's.
            if common == 0 || common >= module.len() || common >= target.len() {
                continue;
            }
            let folder = src.join(module[..common].join("/"));
            let child = &target[common];
            let is_module =
                folder.join(format!("{child}.rs")).is_file() || folder.join(child).is_dir();
            if !is_module {
                continue;
            }
            let key = module[..common].to_vec();
            let from = module[common].clone();
            graphs
                .entry(key.clone())
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(child.clone());
            let rel = file.strip_prefix(&src).unwrap_or(file);
            seen_at
                .entry((key, from, child.clone()))
                .or_insert_with(|| format!("src/{}:{line}", rel.display()));
        }
    }
    let mut found = Vec::new();
    let mut report = Vec::new();
    for (folder, edges) in &graphs {
        for group in circles(edges) {
            let name = format!("{}: {}", folder.join("/"), group.join(", "));
            if !FOLDER_CIRCLES_ALLOWED.contains(&name.as_str()) {
                let mut lines = vec![name.clone()];
                for a in &group {
                    for b in edges.get(a).into_iter().flatten() {
                        if group.contains(b) {
                            let at = &seen_at[&(folder.clone(), a.clone(), b.clone())];
                            lines.push(format!("    {a} -> {b} ({at})"));
                        }
                    }
                }
                report.push(lines.join("\n"));
            }
            found.push(name);
        }
    }
    assert!(
        report.is_empty(),
        "files of one folder importing each other in a circle:\n{}",
        report.join("\n")
    );
    let stale: Vec<&&str> = FOLDER_CIRCLES_ALLOWED
        .iter()
        .filter(|allowed| !found.iter().any(|f| f == **allowed))
        .collect();
    assert!(
        stale.is_empty(),
        "FOLDER_CIRCLES_ALLOWED lists circles that are gone; remove them: {stale:?}"
    );
}

/// The folder-circle reader: relative paths resolve, groups expand, circles are found.
#[test]
fn folder_circle_reader_resolves_paths_and_finds_circles() {
    let module: Vec<String> = ["status", "manager"].map(str::to_owned).to_vec();
    let text = "//! doc\n\
                use super::{sync::{self, Flush}, phase};\n\
                use crate::status::merge::x;\n\
                fn f() { self::g(); super::super::api::y(); }\n\
                #[cfg(test)]\n\
                mod tests { use super::super::cache; }\n";
    let found: Vec<(usize, String)> = relative_imports(&module, text)
        .into_iter()
        .map(|(line, path)| (line, path.join("::")))
        .collect();
    assert_eq!(
        found,
        [
            (2, "status::sync".to_owned()),
            (2, "status::sync::Flush".to_owned()),
            (2, "status::phase".to_owned()),
            (3, "status::merge::x".to_owned()),
            (4, "status::manager::g".to_owned()),
            (4, "api::y".to_owned()),
        ]
    );
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        circles(&edges),
        [["a", "b", "c"].map(str::to_owned).to_vec()]
    );
}

/// Most errors that may carry a plain string: leaf parsers (a duration, a config
/// value) whose message is all there is to say.
const STRING_ERRORS_MAX: usize = 10;

/// The `Result<_, String>` return types in one file's production code, by line.
fn string_errors(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (number, code) in production_lines(text) {
        let mut rest = code.as_str();
        while let Some(at) = rest.find("Result<") {
            rest = &rest[at + "Result<".len()..];
            // The second argument at depth 0 of this Result's generics.
            let mut depth = 0;
            let mut comma = None;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '<' | '(' => depth += 1,
                    '>' | ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '>' | ')' => depth -= 1,
                    ',' if depth == 0 => comma = Some(i),
                    _ => {}
                }
            }
            if comma.is_some_and(|c| rest[c + 1..end].trim() == "String") {
                out.push(number);
            }
        }
    }
    out
}

#[test]
fn string_error_finder_reads_nested_generics() {
    let text = "fn a() -> Result<Vec<String>, String> {}\n\
                fn b() -> Result<BTreeMap<String, String>, Error> {}\n\
                fn c() -> Result<(), String> {}\n\
                #[cfg(test)]\n\
                fn d() -> Result<(), String> {}\n";
    assert_eq!(string_errors(text), [1, 3]);
}

/// Errors keep their causes: a typed error per seam, `Result<_, String>` only for
/// the few leaf parsers (test code is not counted).
#[test]
fn string_errors_stay_in_a_few_leaf_parsers() {
    let src = src_dir();
    let files = read_sources();
    let tests = test_module_paths(&files);
    let mut found = Vec::new();
    for (file, text) in &files {
        if tests.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let rel = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        found.extend(
            string_errors(text)
                .into_iter()
                .map(|n| format!("{rel}:{n}")),
        );
    }
    assert!(
        found.len() <= STRING_ERRORS_MAX,
        "{} functions return Result<_, String> (at most {STRING_ERRORS_MAX}: give the \
         others a typed error that keeps its cause):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The code of a Rust text with comments, strings and character literals blanked
/// out (each replaced by spaces, newlines kept), so that braces and keywords are
/// read only where they are code.
fn blank_non_code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#, closed by the same number of #.
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            j += 1;
            while j < chars.len()
                && !(chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')))
            {
                j += 1;
            }
            let end = (j + 1 + hashes).min(chars.len());
            for &ch in &chars[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for &ch in &chars[i..(i + step).min(chars.len())] {
                    blank(&mut out, ch);
                }
                i += step;
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            let end = close.map_or(i + 1, |k| k + 1);
            for &ch in &chars[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The byte ranges of the items marked `#[cfg(test)]` in blanked code: up to the
/// item's `;` (or the `,` or `}` ending a field), or through its braced body.
fn cfg_test_items(code: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (at, attr) in code.match_indices("#[cfg(test)]") {
        let from = at + attr.len();
        let rest = &code[from..];
        let mut depth = 0i32;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' | ',' | '}' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                '{' if depth == 0 => {
                    end = i + matching_brace(&rest[i..]);
                    break;
                }
                _ => {}
            }
        }
        out.push((at, from + end));
    }
    out
}

/// Every production function with a body in a Rust text (those inside a
/// `#[cfg(test)]` item are skipped): (name, first line, length in lines, from the
/// `fn` line to the line of its closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = blank_non_code(text);
    let bytes = code.as_bytes();
    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let tests = cfg_test_items(&code);
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && is_ident(bytes[at - 1]) || tests.iter().any(|(s, e)| (*s..*e).contains(&at)) {
            continue;
        }
        let rest = &code[at + 3..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // a `fn(..)` pointer type
        }
        // The body opens at the first `{` outside the signature's brackets; a `;`
        // first means a declaration without a body.
        let mut depth = 0i32;
        let mut open = None;
        for (i, c) in rest.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let body = &rest[open..];
        let close = at + 3 + open + matching_brace(body);
        let first = line_of(at);
        out.push((name, first, line_of(close - 1) - first + 1));
    }
    out
}

/// Past this many lines a function must be listed in [`LONG_FUNCTIONS`].
const MAX_FUNCTION_LINES: usize = 100;

/// Production functions of `src/` longer than [`MAX_FUNCTION_LINES`], as
/// `(file under src/, function, its length in lines)`. The list only shrinks: a
/// listed function that got shorter (or is gone) fails the check until its entry is
/// tightened (or removed), so no function grows back.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("api/quantity.rs", "parse_quantity", 115),
    ("config/settings.rs", "table", 327),
    ("kubelet/housekeeping.rs", "housekeeping", 106),
    ("kubelet/syncer.rs", "sync_pod", 105),
    ("runtime/kill.rs", "kill_container", 108),
    ("runtime/resize/manager.rs", "sync", 128),
    ("runtime/resize/plan.rs", "plan_resize", 116),
    ("server/conn.rs", "serve", 119),
    ("sources/file/validate.rs", "validate_container", 104),
    ("stats/resource_metrics.rs", "render", 112),
    ("status/containers.rs", "container_statuses", 126),
    ("status/sync.rs", "sync_once", 103),
    ("volumes/csi/mounter.rs", "set_up", 120),
];

/// No production function grows past [`MAX_FUNCTION_LINES`] lines (aim below 80:
/// decisions as pure plans, I/O as a thin shell); the few older ones are listed in
/// [`LONG_FUNCTIONS`] at their current length.
#[test]
fn functions_stay_short() {
    let src = src_dir();
    let files = read_sources();
    let tests = test_module_paths(&files);
    let mut found = BTreeMap::new();
    for (file, text) in &files {
        if tests.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let rel = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        for (name, _, lines) in function_lengths(text) {
            if lines > MAX_FUNCTION_LINES {
                let longest = found.entry((rel.clone(), name)).or_insert(0);
                *longest = lines.max(*longest);
            }
        }
    }
    let mut problems = Vec::new();
    for ((file, name), lines) in &found {
        match LONG_FUNCTIONS
            .iter()
            .find(|(f, n, _)| f == file && n == name)
        {
            None => problems.push(format!(
                "src/{file}: fn {name} has {lines} lines (over {MAX_FUNCTION_LINES}): split it"
            )),
            Some((_, _, listed)) if lines > listed => problems.push(format!(
                "src/{file}: fn {name} grew to {lines} lines (listed at {listed}): split it"
            )),
            Some((_, _, listed)) if lines < listed => problems.push(format!(
                "src/{file}: fn {name} shrank to {lines} lines: tighten its entry to \
                 (\"{file}\", \"{name}\", {lines}),"
            )),
            Some(_) => {}
        }
    }
    for (file, name, _) in LONG_FUNCTIONS {
        if !found.contains_key(&(file.to_string(), name.to_string())) {
            problems.push(format!(
                "src/{file}: fn {name} is gone or within {MAX_FUNCTION_LINES} lines: remove its entry"
            ));
        }
    }
    let suggested: Vec<String> = found
        .iter()
        .map(|((file, name), lines)| format!("    (\"{file}\", \"{name}\", {lines}),"))
        .collect();
    assert!(
        problems.is_empty(),
        "{}\nLONG_FUNCTIONS for the tree as it is:\n{}",
        problems.join("\n"),
        suggested.join("\n")
    );
}

#[test]
fn function_scanner_skips_strings_comments_and_signatures() {
    let text = "fn short() { let s = \"}}\"; }\n\
                // fn commented() {\n\
                fn long<T: Fn(u8) -> u8>(x: [u8; 2]) -> Box<dyn Fn()>\n\
                where T: Clone,\n\
                {\n\
                    let c = '}'; let r = r#\"}\"#; /* } */\n\
                    let f: fn(u8) = g; 'outer: loop { break 'outer; }\n\
                }\n\
                trait A { fn decl(&self); }\n\
                #[cfg(test)]\n\
                mod tests { fn helper() {} }\n";
    let found = function_lengths(text);
    assert_eq!(
        found,
        vec![("short".to_owned(), 1, 1), ("long".to_owned(), 3, 6)]
    );
}
