//! litelet knows every name of the upstream kubelet v1.36.3, held against the real
//! binary (`kubelet` in `KUBEBUILDER_ASSETS`; `../shared/k8s-assets/unpack.sh`):
//!
//! - every flag of its `--help`, with the same parsing shape (a boolean there is a
//!   boolean here, so a bare `--flag` means true in both; lists and maps accumulate),
//!   and no flag litelet calls upstream's that upstream lacks;
//! - every KubeletConfiguration v1beta1 field, nested fields included. Upstream's
//!   decoder is strict first and names every unknown field it met, so the field list
//!   is read from the binary itself: each struct tag name in it is offered at each
//!   struct path, and what upstream does not call unknown is a field;
//! - litelet's `/configz` (its defaults) is a config file upstream decodes strictly.
//!
//! Each run of the upstream kubelet is made to stop in its configuration checks (a
//! `healthzPort` out of range), before it touches the machine.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use litelet::config::catalogue::Setting;
use litelet::config::table;
use litelet::config::value::Shape;
use serde_json::{Map, Value};

/// The upstream kubelet binary, or None (after a loud message) outside CI.
fn upstream_kubelet(test: &str) -> Option<PathBuf> {
    let Some(assets) = std::env::var_os("KUBEBUILDER_ASSETS") else {
        return support::skip(
            test,
            "KUBEBUILDER_ASSETS is not set (../shared/k8s-assets/unpack.sh makes one)",
        );
    };
    let kubelet = Path::new(&assets).join("kubelet");
    if !kubelet.exists() {
        return support::skip(test, &format!("{} is missing", kubelet.display()));
    }
    Some(kubelet)
}

/// One flag of upstream's `--help`.
#[derive(Debug)]
struct UpstreamFlag {
    name: String,
    short: Option<char>,
    /// The type word (`string`, `duration`, `strings`); empty for a boolean.
    type_word: String,
    /// The text after the name and type word, continuation lines included.
    text: String,
}

impl UpstreamFlag {
    fn deprecated(&self) -> bool {
        self.text.contains("(DEPRECATED: ")
    }

    /// The parsing shape of the flag, or None where the help does not say: pflag
    /// prints a word the usage text quotes (`RuntimeDefault`) in place of the type.
    fn shape(&self) -> Option<Shape> {
        match self.type_word.as_str() {
            // `--version` takes an optional value (`version[=true]`), as a boolean does.
            "" | "version[=true]" => Some(Shape::Bool),
            "strings"
            | "mapStringString"
            | "mapStringBool"
            | "colonSeparatedMultimapStringString"
            | "[]v1.Taint" => Some(Shape::Repeated),
            word if self.text.contains(word) => None,
            _ => Some(Shape::Value),
        }
    }
}

/// The flags of upstream's help text: lines `  -v, --v Level   text` and
/// `      --name type   text` (a boolean has no type word: the text follows after
/// the padding); other lines continue the text of the flag above.
fn help_flags(help: &str) -> Vec<UpstreamFlag> {
    let mut flags: Vec<UpstreamFlag> = Vec::new();
    for line in help.lines() {
        match flag_line(line) {
            Some(flag) => flags.push(flag),
            None => {
                if let Some(last) = flags.last_mut() {
                    last.text.push(' ');
                    last.text.push_str(line.trim());
                }
            }
        }
    }
    flags
}

fn flag_line(line: &str) -> Option<UpstreamFlag> {
    let trimmed = line.trim_start();
    let (short, rest) = match trimmed.strip_prefix('-') {
        Some(r) if !r.starts_with('-') => {
            let mut letters = r.chars();
            let letter = letters.next();
            (letter, letters.as_str().strip_prefix(", ")?)
        }
        _ => (None, trimmed),
    };
    let rest = rest.strip_prefix("--")?;
    let name_end = rest.find(' ').unwrap_or(rest.len());
    let after = &rest[name_end..];
    let type_word = match after.strip_prefix(' ') {
        Some(t) if !t.starts_with(' ') => t.split(' ').next().unwrap_or(""),
        _ => "",
    };
    let text = after.trim_start().strip_prefix(type_word).unwrap_or(after);
    Some(UpstreamFlag {
        name: rest[..name_end].to_owned(),
        short,
        type_word: type_word.to_owned(),
        text: text.trim().to_owned(),
    })
}

fn upstream_help(kubelet: &Path) -> String {
    let out = Command::new(kubelet)
        .arg("--help")
        .output()
        .expect("run the upstream kubelet --help");
    assert!(out.status.success(), "upstream kubelet --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_upstream_flag_is_known_with_its_shape() {
    let Some(kubelet) = upstream_kubelet("every_upstream_flag_is_known_with_its_shape") else {
        return;
    };
    let upstream = help_flags(&upstream_help(&kubelet));
    assert!(
        upstream.len() > 140,
        "upstream's --help listed only {} flags: the help parser is wrong",
        upstream.len()
    );
    let mut problems = Vec::new();
    for flag in &upstream {
        let Some(setting) = table::by_flag(&flag.name).filter(|s| s.flag == flag.name) else {
            problems.push(format!("--{}: unknown to litelet", flag.name));
            continue;
        };
        if setting.litelet_flag {
            problems.push(format!("--{}: litelet calls it its own", flag.name));
        }
        if setting.short != flag.short {
            problems.push(format!(
                "--{}: one-letter name {:?} upstream, {:?} in litelet",
                flag.name, flag.short, setting.short
            ));
        }
        if let Some(want) = flag.shape().filter(|want| *want != setting.kind.shape()) {
            problems.push(format!(
                "--{}: upstream's type {:?} parses as {want:?}, litelet's as {:?}",
                flag.name,
                flag.type_word,
                setting.kind.shape()
            ));
        }
        if flag.deprecated() != setting.deprecation.message().is_some() {
            problems.push(format!(
                "--{}: deprecated upstream: {}, in litelet: {}",
                flag.name,
                flag.deprecated(),
                setting.deprecation.message().is_some()
            ));
        }
    }
    let upstream_names: BTreeSet<&str> = upstream.iter().map(|f| f.name.as_str()).collect();
    for setting in table::all() {
        if !setting.flag.is_empty()
            && !setting.litelet_flag
            && !upstream_names.contains(setting.flag)
        {
            problems.push(format!(
                "--{}: litelet lists it as upstream's, upstream has no such flag",
                setting.flag
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every upstream boolean flag given bare (`--fail-swap-on`) reads as true: it is
/// accepted, or refused only as a value litelet cannot honour, never as a command
/// line litelet cannot read.
#[test]
fn bare_upstream_booleans_mean_true() {
    let Some(kubelet) = upstream_kubelet("bare_upstream_booleans_mean_true") else {
        return;
    };
    use litelet::config::{Flags, LoadError};
    let mut problems = Vec::new();
    for flag in help_flags(&upstream_help(&kubelet)) {
        let boolean = match flag.shape() {
            Some(shape) => shape == Shape::Bool,
            // The quoted word hides the type: litelet's kind says.
            None => table::by_flag(&flag.name).is_some_and(|s| s.kind.shape() == Shape::Bool),
        };
        if !boolean {
            continue;
        }
        let bare = format!("--{}", flag.name);
        match Flags::try_parse_from(["litelet", bare.as_str()]) {
            Ok(_) | Err(LoadError::Help(_) | LoadError::Version(_)) => {}
            Err(LoadError::Invalid(why)) => {
                let refused_true = litelet::config::decode::problems_text(&why);
                let setting = table::by_flag(&flag.name).expect("known (the flag test)");
                if accepts(setting, "true") {
                    problems.push(format!(
                        "{bare}: refused although true is accepted: {refused_true}"
                    ));
                }
            }
            Err(e) => problems.push(format!("{bare}: {e}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Whether `setting` accepts the JSON `value` (implemented ones accept any good value).
fn accepts(setting: &Setting, value: &str) -> bool {
    use litelet::config::catalogue::Stance;
    match setting.stance {
        Stance::Fixed { values, .. } => values.contains(&value),
        Stance::Implemented | Stance::Ignored(_) => true,
    }
}

/// A private folder for the upstream kubelet's probe runs.
fn probe_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("litelet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("probe folder");
    dir
}

/// Runs the upstream kubelet on config file `config` and returns its log. The file's
/// `healthzPort` is out of range, so upstream stops in its configuration checks.
/// `Err` holds the log of a config file upstream could not decode.
fn upstream_on_config(
    kubelet: &Path,
    dir: &Path,
    mut config: Map<String, Value>,
) -> Result<String, String> {
    config.insert("apiVersion".into(), "kubelet.config.k8s.io/v1beta1".into());
    config.insert("kind".into(), "KubeletConfiguration".into());
    config.insert("healthzPort".into(), Value::from(70000));
    let path = dir.join("config.json");
    std::fs::write(&path, Value::Object(config).to_string()).expect("write the probe config");
    let out = Command::new(kubelet)
        .arg("--config")
        .arg(&path)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .arg("--cert-dir")
        .arg(dir.join("pki"))
        .output()
        .expect("run the upstream kubelet");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the upstream kubelet ran:\n{log}");
    if log.contains("failed to load kubelet config file") {
        return Err(log);
    }
    assert!(
        log.contains("failed to validate kubelet configuration"),
        "the upstream kubelet did not stop at its configuration checks:\n{log}"
    );
    Ok(log)
}

/// The fields upstream's strict decoder called unknown (`unknown field \"a.b\"`).
fn unknown_fields(log: &str) -> BTreeSet<String> {
    log.split("unknown field \\\"")
        .skip(1)
        .filter_map(|rest| rest.split_once("\\\"").map(|(name, _)| name.to_owned()))
        .collect()
}

/// Every JSON struct tag name in the binary (`json:"maxPods,omitempty"` → `maxPods`):
/// a superset of the KubeletConfiguration's field names.
fn tag_names(binary: &Path) -> BTreeSet<String> {
    let bytes = std::fs::read(binary).expect("read the upstream kubelet");
    let marker = b"json:\"";
    let mut names = BTreeSet::new();
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(marker.len()).position(|w| w == marker) {
        let start = at + found + marker.len();
        let len = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        // KubeletConfiguration's fields are lowerCamelCase.
        if len > 0 && bytes[start].is_ascii_lowercase() {
            names.insert(String::from_utf8_lossy(&bytes[start..start + len]).into_owned());
        }
        at = start;
    }
    names
}

/// Upstream's KubeletConfiguration fields, by path: each with whether it is a
/// struct whose fields were read too.
fn upstream_fields(kubelet: &Path, dir: &Path) -> BTreeMap<String, bool> {
    let mut candidates = tag_names(kubelet);
    for setting in table::all() {
        candidates.extend(
            setting
                .field
                .split('.')
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        );
    }
    candidates.remove("apiVersion");
    candidates.remove("kind");
    // Struct paths looked into: the top level, then what litelet calls structs.
    let mut structs: BTreeSet<String> = BTreeSet::new();
    let mut fields: BTreeSet<String> = BTreeSet::new();
    let mut prefixes = vec![String::new()];
    while !prefixes.is_empty() {
        let offered: Vec<String> = prefixes
            .iter()
            .flat_map(|p| candidates.iter().map(move |c| format!("{p}{c}")))
            .collect();
        fields.extend(known_of(kubelet, dir, &offered));
        let more: Vec<String> = fields
            .iter()
            .filter(|f| table::is_struct(f) && !structs.contains(*f))
            .cloned()
            .collect();
        structs.extend(more.iter().cloned());
        prefixes = more.into_iter().map(|s| format!("{s}.")).collect();
    }
    fields
        .into_iter()
        .map(|f| {
            let is_struct = structs.contains(&f);
            (f, is_struct)
        })
        .collect()
}

/// The paths of `offered` upstream knows. Unknown names never fail decoding; a known
/// one may (its probe value is not of its type), so a set that fails is halved until
/// the one known name that failed it is alone.
fn known_of(kubelet: &Path, dir: &Path, offered: &[String]) -> BTreeSet<String> {
    let mut config = Map::new();
    for path in offered {
        set_path(&mut config, path, probe_value(path));
    }
    match upstream_on_config(kubelet, dir, config) {
        // Upstream names at most 100 unknown fields at a time: offer the rest again.
        Ok(log) => {
            let unknown = unknown_fields(&log);
            let rest: Vec<String> = offered
                .iter()
                .filter(|p| !unknown.contains(*p))
                .cloned()
                .collect();
            if unknown.len() >= UPSTREAM_UNKNOWN_LIMIT {
                known_of(kubelet, dir, &rest)
            } else {
                rest.into_iter().collect()
            }
        }
        Err(_) if offered.len() == 1 => offered.iter().cloned().collect(),
        Err(_) => {
            let (a, b) = offered.split_at(offered.len() / 2);
            let mut known = known_of(kubelet, dir, a);
            known.extend(known_of(kubelet, dir, b));
            known
        }
    }
}

/// How many unknown fields upstream's strict decoder names at most.
const UPSTREAM_UNKNOWN_LIMIT: usize = 100;

/// A value for probing `path`: null (any type's zero), except where litelet knows
/// the field as a duration (null does not decode there).
fn probe_value(path: &str) -> Value {
    use litelet::config::value::Kind;
    match table::by_field(path).map(|s| s.kind) {
        Some(Kind::Duration) => Value::from("0s"),
        _ => Value::Null,
    }
}

/// Puts `value` at dotted `path` in `top`, making objects on the way; an object
/// already at `path` is kept (a struct offered with fields inside).
fn set_path(top: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            let slot = top.entry(path.to_owned()).or_insert(Value::Null);
            if !slot.is_object() {
                *slot = value;
            }
        }
        Some((head, tail)) => {
            let slot = top
                .entry(head.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                set_path(inner, tail, value);
            }
        }
    }
}

#[test]
fn every_upstream_config_field_is_known() {
    let Some(kubelet) = upstream_kubelet("every_upstream_config_field_is_known") else {
        return;
    };
    let dir = probe_dir("upstream-fields");
    let upstream = upstream_fields(&kubelet, &dir);
    assert!(
        upstream.len() > 100 && upstream.contains_key("maxPods"),
        "upstream's fields were not read: {upstream:?}"
    );
    eprintln!(
        "upstream has {} fields, {} of them structs read too",
        upstream.len(),
        upstream.values().filter(|s| **s).count()
    );
    let mut problems = Vec::new();
    for (path, is_struct) in &upstream {
        let known = table::by_field(path).is_some() || (*is_struct && table::is_struct(path));
        if !known {
            problems.push(format!("{path}: unknown to litelet"));
        }
    }
    for setting in table::all() {
        if setting.field.is_empty() || setting.litelet_field {
            continue;
        }
        if !upstream.contains_key(setting.field) {
            problems.push(format!(
                "{}: litelet lists it as upstream's, upstream has no such field",
                setting.field
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// litelet's `/configz` (its defaults), without litelet's own extensions, is a
/// KubeletConfiguration upstream decodes strictly: no name of it is unknown there.
#[test]
fn litelet_configz_decodes_strictly_upstream() {
    let Some(kubelet) = upstream_kubelet("litelet_configz_decodes_strictly_upstream") else {
        return;
    };
    let dir = probe_dir("upstream-configz");
    let mut configz = litelet::config::Flags::defaults().configz();
    let config = configz
        .get_mut("kubeletconfig")
        .and_then(Value::as_object_mut)
        .map(std::mem::take)
        .expect("configz has kubeletconfig");
    let mut config = Value::Object(config);
    for setting in table::all().iter().filter(|s| s.litelet_field) {
        remove_path(&mut config, setting.field);
    }
    let Value::Object(config) = config else {
        unreachable!("an object stays an object")
    };
    let log = upstream_on_config(&kubelet, &dir, config);
    let _ = std::fs::remove_dir_all(&dir);
    let log = log.unwrap_or_else(|log| panic!("upstream refused litelet's /configz:\n{log}"));
    assert!(
        !log.contains("strict decoding error"),
        "upstream did not decode litelet's /configz strictly:\n{log}"
    );
}

fn remove_path(config: &mut Value, path: &str) {
    match path.split_once('.') {
        None => {
            if let Value::Object(map) = config {
                map.remove(path);
            }
        }
        Some((head, tail)) => {
            if let Some(inner) = config.get_mut(head) {
                remove_path(inner, tail);
            }
        }
    }
}

/// The gates of upstream's `--feature-gates` help (`Name=true|false (BETA -
/// default=true)`): name, stage, default.
fn help_gates(help: &str) -> Vec<(String, String, bool)> {
    help.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once("=true|false (")?;
            let (stage, default) = rest.split_once(" - default=")?;
            let default = default.strip_suffix(')')?;
            Some((name.to_owned(), stage.to_owned(), default == "true"))
        })
        .collect()
}

/// litelet's gate list is upstream's: same names, stages and defaults, none missing
/// and none invented.
#[test]
fn feature_gates_are_upstreams() {
    let Some(kubelet) = upstream_kubelet("feature_gates_are_upstreams") else {
        return;
    };
    use litelet::config::gates;
    let upstream = help_gates(&upstream_help(&kubelet));
    assert!(
        upstream.len() > 100,
        "only {} gates read from upstream's help",
        upstream.len()
    );
    let ours: Vec<(String, String, bool)> = gates::UPSTREAM
        .iter()
        .map(|g| (g.name.to_owned(), g.stage.as_str().to_owned(), g.default))
        .collect();
    let missing: Vec<_> = upstream.iter().filter(|g| !ours.contains(g)).collect();
    let invented: Vec<_> = ours.iter().filter(|g| !upstream.contains(g)).collect();
    assert!(
        missing.is_empty() && invented.is_empty(),
        "upstream's gates litelet lacks (or has otherwise): {missing:?}; litelet's gates \
         upstream lacks: {invented:?}"
    );
}
