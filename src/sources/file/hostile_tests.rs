//! Property tests of the static-manifest reader on hostile input: arbitrary bytes,
//! YAML token soup, alias bombs and deep nesting. Whatever the file holds, parsing
//! returns (pods or one error) without panicking, on a stack the size of the
//! `static-pods` thread's, and the decoded document stays within the budget of
//! `document.rs` (memory proportional to the file).

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;

use super::document::from_yaml;
use super::parse_manifest;

const NODE: &str = "edge-1";
/// The `static-pods` thread's stack (`watch.rs`).
const STATIC_PODS_STACK: usize = 512 * 1024;

fn parse(data: &[u8]) -> Result<usize, String> {
    parse_manifest(Path::new("/etc/kubernetes/manifests/x.yaml"), data, NODE)
        .map(|pods| pods.len())
        .map_err(|e| e.to_string())
}

/// What `document.rs` charges for a value: one per node plus string and key bytes.
fn cost(v: &Value) -> usize {
    match v {
        Value::String(s) => 1 + s.len(),
        Value::Array(items) => 1 + items.iter().map(cost).sum::<usize>(),
        Value::Object(map) => 1 + map.iter().map(|(k, v)| k.len() + cost(v)).sum::<usize>(),
        _ => 1,
    }
}

fn budget(text: &str) -> usize {
    2 * text.len() + 64 * 1024
}

/// Runs `f` on a thread with the static-pods stack; a stack overflow would abort the
/// whole test binary, which fails the run as loudly as it should.
fn on_static_pods_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(STATIC_PODS_STACK)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "  ",
    "- ",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "? ",
    "kind: Pod\n",
    "kind: List\n",
    "apiVersion: v1\n",
    "items:\n",
    "metadata:\n",
    "  name: x\n",
    "spec:\n",
    "  containers:\n",
    "  - name: c\n",
    "    image: i\n",
    "'",
    "\"",
    "#",
    "!!str ",
    "!!binary ",
    "!tag ",
    "|",
    ">",
    "1e999",
    "-1",
    "null",
    "~",
    "0x1F",
    ".nan",
    "\t",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "<<: *a\n",
    "\\u0000",
];

fn token_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(TOKENS), 0..80).prop_map(|t| t.concat())
}

/// Nested anchors: level 0 is `width` scalars, each next level `width` aliases of
/// the one below (expands to width^(levels+1) scalars).
fn alias_bomb(levels: usize, width: usize) -> String {
    let mut text = format!("l0: &l0 [{}]\n", vec!["x"; width].join(","));
    for l in 1..=levels {
        let below = format!("*l{}", l - 1);
        text.push_str(&format!(
            "l{l}: &l{l} [{}]\n",
            vec![below.as_str(); width].join(",")
        ));
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&data);
    }

    #[test]
    fn yaml_token_soup_never_panics_and_stays_within_budget(text in token_soup()) {
        let _ = parse(text.as_bytes());
        if let Ok(doc) = from_yaml(&text) {
            prop_assert!(cost(&doc) <= budget(&text), "{text:?}");
        }
    }
}

proptest! {
    // Fewer cases: each one may expand up to the whole budget (debug builds are slow).
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn alias_bombs_are_refused_or_small(levels in 0usize..6, width in 1usize..60) {
        let text = alias_bomb(levels, width);
        match from_yaml(&text) {
            Ok(doc) => prop_assert!(cost(&doc) <= budget(&text)),
            // The budget, or the decoder's own limit on alias jumps.
            Err(e) => prop_assert!(
                e.to_string().contains("expands far beyond")
                    || e.to_string().contains("repetition limit exceeded"),
                "{}", e
            ),
        }
        prop_assert!(parse(text.as_bytes()).is_err());
    }
}

/// Deeply nested YAML (flow and block) and JSON, past the decoders' nesting limits,
/// is an error, not a stack overflow, on the static-pods thread's stack.
#[test]
fn deep_nesting_fits_the_static_pods_stack() {
    let mut texts = Vec::new();
    for depth in [64, 127, 128, 129, 200, 1000, 10_000] {
        texts.push(format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
        texts.push(format!("{}x{}", "{a: ".repeat(depth), "}".repeat(depth)));
        texts.push(format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)));
        texts.push(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)));
        let block: String = (0..depth.min(300))
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        texts.push(block);
        let list: String = (0..depth.min(300))
            .map(|i| format!("{}- \n", "  ".repeat(i)))
            .collect();
        texts.push(list);
    }
    let results = on_static_pods_stack(move || {
        texts
            .iter()
            .map(|t| parse(t.as_bytes()).is_err())
            .collect::<Vec<_>>()
    });
    assert!(results.iter().all(|refused| *refused));
}

/// The quadratic alias file of `document.rs`, scaled up tenfold (a million values
/// per thousand aliases), through the whole reader on the static-pods stack.
#[test]
fn a_large_alias_expansion_fails_fast() {
    let text = super::document::tests::quadratic(10_000, 10_000);
    let started = std::time::Instant::now();
    let err = on_static_pods_stack(move || parse(text.as_bytes()).unwrap_err());
    assert!(err.contains("expands far beyond"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}
