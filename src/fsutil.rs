//! Durable file writes: a file replaced whole or not at all, surviving a crash at
//! any instant (temp file beside it created exclusively with its final mode, write,
//! fsync, rename over the target, fsync of the directory so the rename itself is on
//! disk). Used by whoever keeps state or credentials on disk; no thread of its own.
//! Also [`SharedIoError`], an io error kept whole inside errors that must be `Clone`
//! and `Eq`.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

/// Replaces `path` with `data`, created with `mode` (never wider, whatever the
/// umask leaves). A temp file left by a crash is replaced by the next write.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(data)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_dir(dir.unwrap_or(Path::new(".")))
}

/// Makes the directory's entries (a rename, a new symlink) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
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

    #[test]
    fn replaces_the_file_whole_with_the_mode_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.pem");
        write_atomic(&path, b"one", 0o600).unwrap();
        write_atomic(&path, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A temp file left by a crash does not stop the next write.
        fs::write(dir.path().join(".secret.pem.tmp"), b"stale").unwrap();
        write_atomic(&path, b"three", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the file itself remains");
    }
}
