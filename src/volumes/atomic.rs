//! The atomic writer (upstream AtomicWriter): projects a set of files into a volume
//! directory so that a reader never sees a half-written set.
//!
//! Layout inside the target directory:
//!
//! ```text
//! ..2024_01_02_03_04_05.8731_12/   the files of one version (written whole, then never changed)
//! ..data -> ..2024_01_02_03_04_05.8731_12
//! key    -> ..data/key            one visible link per top-level name
//! ```
//!
//! A write makes a new timestamped directory, fills it, points `..data_tmp` at it and
//! renames `..data_tmp` over `..data` (rename(2) is atomic), then removes the visible
//! links of names that are gone and the old directory. Unchanged content (same
//! paths, bytes and modes) is not rewritten. Called by the pod's worker thread through
//! `VolumeManager::setup_pod`; one writer per directory at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::VolumeError;
use super::paths::clean_file_path;
use crate::api::meta::Time;

/// The link readers follow to the current version.
pub const DATA_LINK: &str = "..data";
const DATA_TMP_LINK: &str = "..data_tmp";

/// One file to project: its bytes and permission bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative file path (cleaned) → content.
pub type Payload = BTreeMap<String, FileProjection>;

/// Relative file path → (bytes, mode), as found on disk or about to be written.
type Files = BTreeMap<String, (Vec<u8>, u32)>;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// Writes `payload` into `target` (which must exist) atomically; with `fs_group`,
/// files and directories get that group and files become group-readable. Returns
/// whether a new version was written.
pub fn write(target: &Path, payload: &Payload, fs_group: Option<u32>) -> Result<bool, VolumeError> {
    check_payload(payload)?;
    let data_link = target.join(DATA_LINK);
    let old_dir = match fs::read_link(&data_link) {
        Ok(name) => Some(name),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(VolumeError::io("read link", &data_link, e)),
    };
    // A link that does not name a sibling version directory is not ours: rewrite.
    let old_dir = old_dir
        .filter(|n| {
            n.to_str()
                .is_some_and(|s| s.starts_with("..") && !s.contains('/'))
        })
        .map(|n| target.join(n));
    let old_files = match &old_dir {
        Some(dir) => read_tree(dir)?,
        None => None,
    };
    let wanted: Files = payload
        .iter()
        .map(|(path, file)| {
            (
                path.clone(),
                (file.data.clone(), final_mode(file.mode, fs_group)),
            )
        })
        .collect();
    if old_files.as_ref() == Some(&wanted) {
        return Ok(false);
    }

    let new_dir = new_version_dir(target)?;
    let new_name = new_dir.file_name().map(PathBuf::from).unwrap_or_default();
    if let Err(e) = fill(&new_dir, &wanted, fs_group) {
        let _ = fs::remove_dir_all(&new_dir);
        return Err(e);
    }
    let new_top: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    for name in &new_top {
        let visible = target.join(name);
        match fs::symlink_metadata(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(Path::new(DATA_LINK).join(name), &visible)
                    .map_err(|e| VolumeError::io("create link", &visible, e))?;
            }
            Err(e) => return Err(VolumeError::io("stat", &visible, e)),
        }
    }
    let tmp_link = target.join(DATA_TMP_LINK);
    let _ = fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&new_name, &tmp_link)
        .map_err(|e| VolumeError::io("create link", &tmp_link, e))?;
    if let Err(e) = fs::rename(&tmp_link, &data_link) {
        let _ = fs::remove_file(&tmp_link);
        let _ = fs::remove_dir_all(&new_dir);
        return Err(VolumeError::io("swap data link", &data_link, e));
    }

    // The new version is live. Drop visible links of names that are gone, and every
    // other version directory (the previous one and leftovers of a crash).
    let entries = fs::read_dir(target).map_err(|e| VolumeError::io("read dir", target, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
        let path = entry.path();
        if name == DATA_LINK || Path::new(name) == new_name {
            continue;
        }
        if name.starts_with("..") {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(&path).map_err(|e| VolumeError::io("remove", &path, e))?;
            }
        } else if is_link && !new_top.contains(name) {
            fs::remove_file(&path).map_err(|e| VolumeError::io("remove", &path, e))?;
        }
    }
    Ok(true)
}

fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

fn final_mode(mode: u32, fs_group: Option<u32>) -> u32 {
    let mode = mode & 0o7777;
    if fs_group.is_some() {
        mode | 0o440
    } else {
        mode
    }
}

/// Refuses unclean paths and a path that is both a file and a directory.
fn check_payload(payload: &Payload) -> Result<(), VolumeError> {
    for path in payload.keys() {
        if clean_file_path(path)? != *path {
            return Err(VolumeError::InvalidPath {
                path: path.clone(),
                why: "must be clean",
            });
        }
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() && payload.contains_key(&prefix) {
                return Err(VolumeError::InvalidPath {
                    path: path.clone(),
                    why: "a parent of it is also a file",
                });
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
        }
    }
    Ok(())
}

/// The files of a version directory with their bytes and modes; `None` when it is
/// missing or holds something the writer never makes (then it is rewritten).
fn read_tree(dir: &Path) -> Result<Option<Files>, VolumeError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(VolumeError::io("read dir", &path, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| VolumeError::io("read dir", &path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let child = entry.path();
            let meta =
                fs::symlink_metadata(&child).map_err(|e| VolumeError::io("stat", &child, e))?;
            if meta.is_dir() {
                stack.push((child, child_rel));
            } else if meta.is_file() {
                let data = fs::read(&child).map_err(|e| VolumeError::io("read", &child, e))?;
                out.insert(child_rel, (data, meta.permissions().mode() & 0o7777));
            } else {
                return Ok(None);
            }
        }
    }
    Ok(Some(out))
}

fn new_version_dir(target: &Path) -> Result<PathBuf, VolumeError> {
    let stamp = Time::now()
        .to_string()
        .trim_end_matches('Z')
        .replace(['-', ':', 'T'], "_");
    loop {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir = target.join(format!("..{stamp}.{}_{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {
                // Others must be able to walk in, whatever the umask.
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                    .map_err(|e| VolumeError::io("chmod", &dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(VolumeError::io("create dir", &dir, e)),
        }
    }
}

fn chgrp(path: &Path, gid: Option<u32>) -> Result<(), VolumeError> {
    if let Some(gid) = gid {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(|e| {
            VolumeError::io("chown", path, std::io::Error::from_raw_os_error(e as i32))
        })?;
    }
    Ok(())
}

fn fill(dir: &Path, files: &Files, fs_group: Option<u32>) -> Result<(), VolumeError> {
    chgrp(dir, fs_group)?;
    for (rel, (data, mode)) in files {
        let path = dir.join(rel);
        // Parent directories, one by one so each gets its mode and group.
        let mut parent = dir.to_path_buf();
        let parts: Vec<&str> = rel.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            parent.push(part);
            match fs::create_dir(&parent) {
                Ok(()) => {
                    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755))
                        .map_err(|e| VolumeError::io("chmod", &parent, e))?;
                    chgrp(&parent, fs_group)?;
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(VolumeError::io("create dir", &parent, e)),
            }
        }
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| VolumeError::io("create file", &path, e))?;
        file.write_all(data)
            .map_err(|e| VolumeError::io("write", &path, e))?;
        chgrp(&path, fs_group)?;
        // The mode is set after the write and regardless of the umask.
        fs::set_permissions(&path, fs::Permissions::from_mode(*mode))
            .map_err(|e| VolumeError::io("chmod", &path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_swaps_and_prunes() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path();
        let mut payload = Payload::new();
        payload.insert("a".into(), file("one", 0o644));
        payload.insert("dir/b".into(), file("two", 0o600));
        assert!(write(target, &payload, None).unwrap());
        assert_eq!(fs::read_to_string(target.join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(target.join("dir/b")).unwrap(), "two");
        assert_eq!(
            fs::read_link(target.join("a")).unwrap(),
            Path::new("..data/a")
        );
        let mode = fs::metadata(target.join("dir/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let first = fs::read_link(target.join(DATA_LINK)).unwrap();

        // The same content is not rewritten.
        assert!(!write(target, &payload, None).unwrap());
        assert_eq!(fs::read_link(target.join(DATA_LINK)).unwrap(), first);

        // A new version: changed value, a removed name, a mode change.
        payload.remove("dir/b");
        payload.insert("a".into(), file("uno", 0o640));
        payload.insert("c".into(), file("three", 0o644));
        assert!(write(target, &payload, None).unwrap());
        let second = fs::read_link(target.join(DATA_LINK)).unwrap();
        assert_ne!(first, second);
        assert_eq!(fs::read_to_string(target.join("a")).unwrap(), "uno");
        assert!(
            fs::symlink_metadata(target.join("dir")).is_err(),
            "gone name pruned"
        );
        let mut expected = vec!["..data".to_owned(), "a".into(), "c".into()];
        expected.push(second.to_string_lossy().into_owned());
        expected.sort();
        assert_eq!(names(target), expected, "old version directory removed");

        // Only the mode changes: still a new version.
        payload.insert("c".into(), file("three", 0o400));
        assert!(write(target, &payload, None).unwrap());
    }

    #[test]
    fn empty_payload_and_crash_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path();
        // Leftovers of a crash between directory creation and the swap.
        fs::create_dir(target.join("..2020_01_01_00_00_00.1_1")).unwrap();
        std::os::unix::fs::symlink("..nowhere", target.join(DATA_TMP_LINK)).unwrap();
        assert!(write(target, &Payload::new(), None).unwrap());
        let names = names(target);
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(target.join(DATA_LINK).is_dir());
    }

    #[test]
    fn bad_payloads_are_refused_before_any_write() {
        let tmp = tempfile::tempdir().unwrap();
        let mut payload = Payload::new();
        payload.insert("a".into(), file("x", 0o644));
        payload.insert("a/b".into(), file("y", 0o644));
        assert!(write(tmp.path(), &payload, None).is_err());
        let mut payload = Payload::new();
        payload.insert("../escape".into(), file("x", 0o644));
        assert!(write(tmp.path(), &payload, None).is_err());
        assert_eq!(names(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn readers_never_see_a_mixed_version() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().to_path_buf();
        let payload = |v: usize| {
            let mut p = Payload::new();
            p.insert("x".into(), file(&format!("{v}"), 0o644));
            p.insert("y".into(), file(&format!("{v}"), 0o644));
            p
        };
        write(&target, &payload(0), None).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            let target = target.clone();
            std::thread::spawn(move || {
                let mut checked = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Resolve the version once, then read both files from it.
                    let Ok(version) = fs::read_link(target.join(DATA_LINK)) else {
                        continue;
                    };
                    let dir = target.join(version);
                    let (Ok(x), Ok(y)) = (
                        fs::read_to_string(dir.join("x")),
                        fs::read_to_string(dir.join("y")),
                    ) else {
                        continue; // that version was already removed
                    };
                    assert_eq!(x, y, "a version directory is never half written");
                    checked += 1;
                }
                checked
            })
        };
        for v in 1..200 {
            write(&target, &payload(v), None).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}
