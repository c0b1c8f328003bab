//! The on-disk layout of pod volumes under `--root-dir`, as upstream lays it out:
//!
//! ```text
//! <root>/pods/<uid>/volumes/<plugin>/<volume name>
//!     plugin = kubernetes.io~empty-dir | ~configmap | ~secret | ~downward-api | ~projected
//! ```
//!
//! and the checks on untrusted names and file paths before they are joined to it.
//! Pure: string and path building only.

use std::path::{Component, Path, PathBuf};

use super::error::VolumeError;

pub const PLUGIN_EMPTY_DIR: &str = "kubernetes.io~empty-dir";
pub const PLUGIN_CONFIG_MAP: &str = "kubernetes.io~configmap";
pub const PLUGIN_SECRET: &str = "kubernetes.io~secret";
pub const PLUGIN_DOWNWARD_API: &str = "kubernetes.io~downward-api";
pub const PLUGIN_PROJECTED: &str = "kubernetes.io~projected";

/// Longest file path inside a volume, and longest single name in it.
const MAX_PATH_LEN: usize = 4096;
const MAX_NAME_LEN: usize = 255;

/// Refuses a name that could change the shape of a path it is joined to.
pub fn check_segment(what: &'static str, name: &str) -> Result<(), VolumeError> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\0')
        || name.len() > MAX_NAME_LEN;
    if bad {
        return Err(VolumeError::InvalidName {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// `<root>/pods`.
pub fn pods_dir(root: &Path) -> PathBuf {
    root.join("pods")
}

/// `<root>/pods/<uid>`, after checking the UID.
pub fn pod_dir(root: &Path, uid: &str) -> Result<PathBuf, VolumeError> {
    check_segment("pod uid", uid)?;
    Ok(pods_dir(root).join(uid))
}

/// `<root>/pods/<uid>/volumes`.
pub fn pod_volumes_dir(root: &Path, uid: &str) -> Result<PathBuf, VolumeError> {
    Ok(pod_dir(root, uid)?.join("volumes"))
}

/// `<root>/pods/<uid>/volumes/<plugin>/<name>`, after checking the names.
pub fn volume_dir(
    root: &Path,
    uid: &str,
    plugin: &str,
    name: &str,
) -> Result<PathBuf, VolumeError> {
    check_segment("volume name", name)?;
    Ok(pod_volumes_dir(root, uid)?.join(plugin).join(name))
}

/// Checks a file path inside a volume (configMap items, downwardAPI, token path) and
/// returns it cleaned (`a//b/./c` → `a/b/c`). Refused: empty, absolute, any `..`
/// element, a first element starting with `..` (reserved for the writer's own
/// `..data` and timestamped directories), over-long names or paths.
pub fn clean_file_path(path: &str) -> Result<String, VolumeError> {
    let invalid = |why| VolumeError::InvalidPath {
        path: path.to_owned(),
        why,
    };
    if path.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(invalid("longer than 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(invalid("must not contain NUL"));
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) => {
                let name = name.to_str().unwrap_or_default();
                if name.len() > MAX_NAME_LEN {
                    return Err(invalid("a file name is longer than 255 bytes"));
                }
                parts.push(name);
            }
            Component::CurDir => {}
            Component::ParentDir => return Err(invalid("must not contain '..'")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid("must be a relative path"))
            }
        }
    }
    match parts.first() {
        None => Err(invalid("must name a file")),
        Some(first) if first.starts_with("..") => Err(invalid("must not start with '..'")),
        Some(_) => Ok(parts.join("/")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_upstream() {
        let dir = volume_dir(Path::new("/var/lib/litelet"), "u1", PLUGIN_SECRET, "creds").unwrap();
        assert_eq!(
            dir,
            Path::new("/var/lib/litelet/pods/u1/volumes/kubernetes.io~secret/creds")
        );
        for bad in ["", ".", "..", "a/b", "x\0"] {
            assert!(pod_dir(Path::new("/r"), bad).is_err(), "uid {bad:?}");
            assert!(volume_dir(Path::new("/r"), "u", PLUGIN_EMPTY_DIR, bad).is_err());
        }
    }

    #[test]
    fn file_paths_are_cleaned_or_refused() {
        assert_eq!(clean_file_path("token").unwrap(), "token");
        assert_eq!(clean_file_path("a//b/./c").unwrap(), "a/b/c");
        assert_eq!(clean_file_path("a/..b").unwrap(), "a/..b");
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "..data",
            "..2024",
            ".",
            "./",
        ] {
            assert!(clean_file_path(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(clean_file_path(&"x".repeat(256)).is_err());
    }
}
