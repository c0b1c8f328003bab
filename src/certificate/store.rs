//! The certificate directory (`--cert-dir`): each issued pair is one file
//! `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (certificate chain then key, mode 0600),
//! and `<prefix>-current.pem` is a symlink to the newest, replaced atomically, so a
//! kubeconfig that names the link never changes and a crash leaves either the old
//! or the new pair current. The layout is upstream's, so tools that look for
//! `kubelet-client-current.pem` find it.

use std::io;
use std::path::{Path, PathBuf};

/// Why the directory could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("certificate directory {path}: {op}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// One kind of pair (`kubelet-client`) in one directory.
pub struct CertStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl CertStore {
    pub fn new(dir: &Path, prefix: &'static str) -> CertStore {
        CertStore {
            dir: dir.to_owned(),
            prefix,
        }
    }

    /// The link that always names the newest pair.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The newest pair's PEM, None when there is none.
    pub fn current(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.current_path();
        match std::fs::read(&path) {
            Ok(pem) => Ok(Some(pem)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Io {
                op: "read",
                path,
                source,
            }),
        }
    }

    /// Stores a new pair issued at `now` (Unix seconds) and makes it current; the
    /// path of the link.
    pub fn store(&self, cert_pem: &[u8], key_pem: &[u8], now: i64) -> Result<PathBuf, StoreError> {
        let io = |op, path: &Path| {
            let path = path.to_owned();
            move |source| StoreError::Io { op, path, source }
        };
        create_private_dir(&self.dir).map_err(io("create", &self.dir))?;
        let name = format!("{}-{}.pem", self.prefix, timestamp(now));
        let file = self.dir.join(&name);
        let mut pair = cert_pem.to_vec();
        if !pair.ends_with(b"\n") {
            pair.push(b'\n');
        }
        pair.extend_from_slice(key_pem);
        crate::fsutil::write_atomic(&file, &pair, 0o600).map_err(io("write", &file))?;
        // A new link beside the old one, renamed over it: never a moment without.
        let current = self.current_path();
        let tmp = self.dir.join(format!(".{}-current.pem.tmp", self.prefix));
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io("remove", &tmp)(e)),
            _ => {}
        }
        std::os::unix::fs::symlink(&name, &tmp).map_err(io("link", &tmp))?;
        std::fs::rename(&tmp, &current).map_err(io("rename", &current))?;
        crate::fsutil::sync_dir(&self.dir).map_err(io("sync", &self.dir))?;
        Ok(current)
    }
}

/// Creates `dir` (and parents) with mode 0700 when missing; an existing one is kept.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// `YYYY-MM-DD-HH-MM-SS` in UTC, as upstream names the files.
fn timestamp(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    let (year, month, day) = crate::api::meta::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}-{:02}-{:02}-{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn timestamps_are_utc_civil_times() {
        assert_eq!(timestamp(0), "1970-01-01-00-00-00");
        // `date -u -d @1772236800`: 2026-02-28; a leap day and the day after.
        assert_eq!(timestamp(1_772_236_800 + 3_661), "2026-02-28-01-01-01");
        assert_eq!(timestamp(951_782_400), "2000-02-29-00-00-00");
        assert_eq!(timestamp(951_868_800), "2000-03-01-00-00-00");
    }

    #[test]
    fn a_stored_pair_becomes_current_through_a_private_file_and_a_link() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pki");
        let store = CertStore::new(&dir, "kubelet-client");
        assert_eq!(store.current().unwrap(), None);
        let first = store.store(b"CERT1", b"KEY1", 1_000).unwrap();
        assert_eq!(first, dir.join("kubelet-client-current.pem"));
        assert_eq!(store.current().unwrap().unwrap(), b"CERT1\nKEY1");
        store.store(b"CERT2\n", b"KEY2", 2_000).unwrap();
        assert_eq!(store.current().unwrap().unwrap(), b"CERT2\nKEY2");
        let target = std::fs::read_link(&first).unwrap();
        assert_eq!(target, Path::new("kubelet-client-1970-01-01-00-33-20.pem"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join(&target)), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // Both pairs are kept (upstream keeps them too); no temp link is left.
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "kubelet-client-1970-01-01-00-16-40.pem",
                "kubelet-client-1970-01-01-00-33-20.pem",
                "kubelet-client-current.pem"
            ]
        );
    }
}
