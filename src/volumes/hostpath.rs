//! hostPath volumes: the type check (and creation for the `...OrCreate` types) of the
//! host path before it is handed to the runtime. The path itself is the volume; no
//! directory under the pod is made and tear-down leaves it alone.
//!
//! Thin shell over `stat`/`mkdir`/`open`, called from pod worker threads.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::error::VolumeError;

/// What a path on the host is, in the API's words.
fn describe(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "Directory"
    } else if t.is_file() {
        "File"
    } else if t.is_socket() {
        "Socket"
    } else if t.is_char_device() {
        "CharDevice"
    } else if t.is_block_device() {
        "BlockDevice"
    } else {
        "other"
    }
}

fn mismatch(path: &Path, expected: &str, found: &str) -> VolumeError {
    VolumeError::HostPathType {
        path: path.to_path_buf(),
        expected: expected.to_owned(),
        found: found.to_owned(),
    }
}

/// Checks `path` against the hostPath `type` (symlinks are followed, as upstream).
/// `DirectoryOrCreate` makes the directory (and its parents) with mode 0755,
/// `FileOrCreate` makes an empty file with mode 0644 (its parent must exist).
/// An empty or absent type checks nothing.
pub fn check(path: &Path, type_: Option<&str>) -> Result<(), VolumeError> {
    if !path.is_absolute() {
        return Err(mismatch(path, "absolute path", "relative path"));
    }
    let type_ = type_.unwrap_or("");
    let found = match fs::metadata(path) {
        Ok(meta) => Some(meta.file_type()),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(VolumeError::io("stat host path", path, e)),
    };
    let expect = |wanted: &str, ok: fn(&fs::FileType) -> bool| match found {
        Some(t) if ok(&t) => Ok(()),
        Some(t) => Err(mismatch(path, wanted, describe(t))),
        None => Err(mismatch(path, wanted, "does not exist")),
    };
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" if found.is_none() => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(|e| VolumeError::io("create host directory", path, e)),
        "DirectoryOrCreate" | "Directory" => expect("Directory", fs::FileType::is_dir),
        "FileOrCreate" if found.is_none() => {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(path)
            {
                Ok(_) => Ok(()),
                // Lost a race with another creator: check what is there now.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => check(path, Some("File")),
                Err(e) => Err(VolumeError::io("create host file", path, e)),
            }
        }
        "FileOrCreate" | "File" => expect("File", fs::FileType::is_file),
        "Socket" => expect("Socket", fs::FileType::is_socket),
        "CharDevice" => expect("CharDevice", fs::FileType::is_char_device),
        "BlockDevice" => expect("BlockDevice", fs::FileType::is_block_device),
        other => Err(mismatch(path, other, "unknown hostPath type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_checked_and_created() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        check(&dir, Some("DirectoryOrCreate")).unwrap();
        assert!(dir.is_dir());
        check(&dir, Some("Directory")).unwrap();
        check(&dir, Some("DirectoryOrCreate")).unwrap();
        let err = check(&dir, Some("File")).unwrap_err().to_string();
        assert!(err.contains("is not a File (Directory)"), "{err}");

        let file = dir.join("f");
        let err = check(&file, Some("File")).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
        check(&file, Some("FileOrCreate")).unwrap();
        assert!(file.is_file());
        check(&file, Some("File")).unwrap();
        assert!(check(&file, Some("Directory")).is_err());
        assert!(check(&file, Some("DirectoryOrCreate")).is_err());
        // FileOrCreate does not make missing parents.
        assert!(check(&tmp.path().join("x/y"), Some("FileOrCreate")).is_err());

        let sock_path = tmp.path().join("s.sock");
        let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        check(&sock_path, Some("Socket")).unwrap();
        assert!(check(&file, Some("Socket")).is_err());
        check(Path::new("/dev/null"), Some("CharDevice")).unwrap();
        assert!(check(Path::new("/dev/null"), Some("BlockDevice")).is_err());

        // No type: anything goes, even a missing path (the runtime decides).
        check(&tmp.path().join("missing"), None).unwrap();
        assert!(check(Path::new("relative"), None).is_err());
        assert!(check(&file, Some("Fifo")).is_err());
    }
}
