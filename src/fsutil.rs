//! Durable file writes: a file replaced whole or not at all, surviving a crash at
//! any instant. [`write_atomic`] writes a temp file beside the target, created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` under a name no other writer uses (the pid, a
//! process-wide counter and random bytes), with its final mode; fsyncs it; renames it
//! over the target; fsyncs the directory so the rename itself is on disk.
//! [`symlink_atomic`] swaps a symlink the same way. Concurrent writers of one file
//! never share a temp file: the last rename wins and each rename installs a complete
//! file. A temp file a crash left behind (another pid's, or the fixed `.<name>.tmp`
//! of earlier versions) is removed by the next write of the same target.
//!
//! Used by whoever keeps state or credentials on disk; no thread of its own. Also
//! [`SharedIoError`], an io error kept whole inside errors that must be `Clone` and
//! `Eq`.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many fresh names a writer tries before giving up (a name can only collide
/// with a file someone planted: the pid, counter and random part are unique).
const NAME_ATTEMPTS: usize = 8;

/// Replaces `path` with `data`, created with `mode` (never wider, whatever the
/// umask leaves).
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let (tmp, mut file) = create_temp(path, mode)?;
    let (dir, _) = split(path)?;
    let written = file
        .write_all(data)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            fs::rename(&tmp, path)
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Points the symlink `link` at `target`: a new link under a unique name beside it,
/// renamed over it, then the directory synced, so there is never a moment without
/// a link and a crash leaves the old or the new one.
pub fn symlink_atomic(target: &Path, link: &Path) -> io::Result<()> {
    let (dir, name) = split(link)?;
    remove_stale_temps(dir, name);
    let tmp = (0..NAME_ATTEMPTS)
        .map(|_| dir.join(temp_name(name)))
        .find_map(|tmp| match std::os::unix::fs::symlink(target, &tmp) {
            Ok(()) => Some(Ok(tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
            Err(e) => Some(Err(e)),
        })
        .unwrap_or_else(|| Err(taken(dir)))?;
    if let Err(e) = fs::rename(&tmp, link) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Makes the directory's entries (a rename, a new symlink) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// The directory (`.` for a bare name) and file name of `path`.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((dir, name))
}

/// A new temp file beside `path`, to be renamed over it: created exclusively (never
/// an existing file or a symlink someone planted) under a name no other writer uses,
/// with `mode`. Temp files of `path` a crash left behind are removed first. For
/// writers that must do the steps of [`write_atomic`] themselves.
pub fn create_temp(path: &Path, mode: u32) -> io::Result<(PathBuf, fs::File)> {
    let (dir, name) = split(path)?;
    remove_stale_temps(dir, name);
    for _ in 0..NAME_ATTEMPTS {
        let tmp = dir.join(temp_name(name));
        let opened = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp);
        match opened {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(taken(dir))
}

fn taken(dir: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no free temp file name in {}", dir.display()),
    )
}

/// `.<name>.<pid>.<counter>.<random>.tmp`: unique per write of this process.
fn temp_name(name: &OsStr) -> OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut random = [0u8; 8];
    // Without random bytes the pid and counter still make the name unique to this
    // process; O_EXCL refuses anything planted under it.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random);
    let mut tmp = temp_prefix(name);
    tmp.push(format!(
        "{}.{}.{:016x}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        u64::from_ne_bytes(random)
    ));
    tmp
}

/// `.<name>.`: what every temp file of `name` starts with.
fn temp_prefix(name: &OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    prefix
}

/// Removes temp files of `name` left by a crash: those of another process, and the
/// fixed `.<name>.tmp` earlier versions used. Best effort: a failure costs litter,
/// never the write.
fn remove_stale_temps(dir: &Path, name: &OsStr) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = temp_prefix(name);
    let own = format!("{}.", std::process::id());
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let stale = rest == b"tmp"
            || (rest.ends_with(b".tmp") && !rest.starts_with(own.as_bytes()) && {
                // `<pid>.<counter>.<random>.tmp` of a process that is gone.
                let pid = rest.split(|b| *b == b'.').next().unwrap_or_default();
                !pid.is_empty() && pid.iter().all(u8::is_ascii_digit)
            });
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// An io error as the `#[source]` of an error that must be `Clone` and `Eq` (reports
/// compared between passes): shared, and equal when kind and message are, as the
/// message alone was. Displays as the io error itself.
#[derive(Clone, Debug)]
pub struct SharedIoError(pub Arc<io::Error>);

impl From<io::Error> for SharedIoError {
    fn from(e: io::Error) -> Self {
        Self(Arc::new(e))
    }
}

impl PartialEq for SharedIoError {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for SharedIoError {}

impl std::fmt::Display for SharedIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedIoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_file_whole_with_the_mode_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.pem");
        write_atomic(&path, b"one", 0o600).unwrap();
        write_atomic(&path, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Temp files left by a crash (earlier versions' fixed name, a dead
        // process's unique one) do not stop the next write and are cleared by it.
        fs::write(dir.path().join(".secret.pem.tmp"), b"stale").unwrap();
        fs::write(
            dir.path().join(".secret.pem.999999999.3.00ff.tmp"),
            b"stale",
        )
        .unwrap();
        write_atomic(&path, b"three", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
        assert_eq!(names(dir.path()), ["secret.pem"], "only the file remains");
    }

    /// Many threads replacing one file at once: every write succeeds, the file ends
    /// whole (one writer's bytes, never a mix or a truncation) and no temp file is
    /// left. With one shared temp name, writers failed or renamed each other's
    /// half-written files.
    #[test]
    fn concurrent_writers_never_share_a_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.json");
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|s| {
            for i in 0..16u8 {
                let (path, barrier) = (&path, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for round in 0..20u8 {
                        let data = vec![i; 4096 + usize::from(round)];
                        write_atomic(path, &data, 0o600).expect("concurrent write");
                    }
                });
            }
        });
        let data = fs::read(&path).unwrap();
        assert!(data.len() >= 4096, "truncated: {} bytes", data.len());
        assert!(data.iter().all(|b| *b == data[0]), "mixed writers' bytes");
        assert_eq!(names(dir.path()), ["records.json"]);
    }

    /// A symlink planted where an older version put its temp file is not followed:
    /// its target is untouched and the write still lands.
    #[test]
    fn a_planted_symlink_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep me").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(".state.json.tmp")).unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"{}", 0o600).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        assert_eq!(fs::read(&path).unwrap(), b"{}");
    }

    #[test]
    fn a_symlink_is_swapped_whole() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("current.pem");
        symlink_atomic(Path::new("a.pem"), &link).unwrap();
        symlink_atomic(Path::new("b.pem"), &link).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("b.pem"));
        // A stale temp link of a dead process goes with the next swap.
        std::os::unix::fs::symlink("x", dir.path().join(".current.pem.999999999.0.00.tmp"))
            .unwrap();
        symlink_atomic(Path::new("c.pem"), &link).unwrap();
        assert_eq!(names(dir.path()), ["current.pem"]);
    }
}
