//! Config files: the `--config` KubeletConfiguration and the `--config-dir` drop-ins,
//! read into JSON (YAML or JSON text, `kubelet.config.k8s.io/v1beta1`), and merged as
//! upstream merges them. Read once on the main thread at start-up.
//!
//! - [`load`] reads one file; it must say `apiVersion` and `kind`, as upstream's
//!   decoder requires.
//! - [`dropins`] lists a drop-in folder as upstream walks it: every `*.conf` file, in
//!   lexical order within each folder, subfolders in their place; other files are
//!   skipped.
//! - [`merge_patch`] is JSON merge patch (RFC 7386), how upstream lays each drop-in
//!   over the configuration so far: objects (maps too) merge key by key, a `null`
//!   removes a key, anything else replaces.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The only `apiVersion` litelet reads.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The only `kind` litelet reads.
pub const KIND: &str = "KubeletConfiguration";

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is empty")]
    Empty { path: PathBuf },
    #[error("config file {path} is not valid YAML: {source}")]
    Syntax {
        path: PathBuf,
        source: serde_yaml_ng::Error,
    },
    #[error("config file {path}: {why}")]
    NotKubeletConfiguration { path: PathBuf, why: String },
    #[error("cannot read drop-in folder {path}: {source}")]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A config file's fields (without `apiVersion` and `kind`).
pub fn load(path: &Path) -> Result<Map<String, Value>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// The fields of `text`; `path` names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<Map<String, Value>, ConfigFileError> {
    if text.trim().is_empty() {
        return Err(ConfigFileError::Empty {
            path: path.to_owned(),
        });
    }
    let value: Value = serde_yaml_ng::from_str(text).map_err(|source| ConfigFileError::Syntax {
        path: path.to_owned(),
        source,
    })?;
    let not = |why: String| ConfigFileError::NotKubeletConfiguration {
        path: path.to_owned(),
        why,
    };
    let Value::Object(mut map) = value else {
        return Err(not("expected a mapping of fields".into()));
    };
    for (key, expected) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        match map.remove(key) {
            Some(Value::String(found)) if found == expected => {}
            Some(found) => return Err(not(format!("{key} {found} is not {expected:?}"))),
            None => return Err(not(format!("{key} is missing (expected {expected:?})"))),
        }
    }
    Ok(map)
}

/// The drop-ins of `dir`: `*.conf` files in upstream's order, and the other files
/// (skipped).
pub fn dropins(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ConfigFileError> {
    let mut conf = Vec::new();
    let mut skipped = Vec::new();
    walk(dir, &mut conf, &mut skipped)?;
    Ok((conf, skipped))
}

fn walk(
    dir: &Path,
    conf: &mut Vec<PathBuf>,
    skipped: &mut Vec<PathBuf>,
) -> Result<(), ConfigFileError> {
    let folder_error = |source| ConfigFileError::Folder {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(folder_error)?
        .collect::<Result<_, _>>()
        .map_err(folder_error)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let file_type = entry.file_type().map_err(folder_error)?;
        if file_type.is_dir() {
            walk(&path, conf, skipped)?;
        } else if path.extension().is_some_and(|e| e == "conf") {
            conf.push(path);
        } else {
            skipped.push(path);
        }
    }
    Ok(())
}

/// Lays `patch` over `target` (RFC 7386).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests;
