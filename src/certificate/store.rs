//! The certificate directory (`--cert-dir`): each issued pair is one file
//! `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (certificate chain then key, mode 0600,
//! written durably through `fsutil::write_atomic`), and `<prefix>-current.pem` is a
//! symlink to the newest, swapped atomically (`fsutil::symlink_atomic`: a new link
//! under a unique name renamed over it, then the directory synced), so a kubeconfig
//! that names the link never changes and a crash leaves either the old or the new
//! pair current, never a half-written one. A pair is checked (the key belongs to the
//! certificate, rustls can use both, not expired) before anything is written: a bad
//! pair never becomes current. The layout is upstream's, so tools that look for
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
    #[error("refusing to store a {prefix} pair: {why}")]
    Unusable {
        prefix: &'static str,
        #[source]
        why: super::Unusable,
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

    /// Checks a new pair at `now` (Unix seconds), stores it and makes it current;
    /// the path of the link. A pair that fails the check changes nothing.
    pub fn store(&self, cert_pem: &[u8], key_pem: &[u8], now: i64) -> Result<PathBuf, StoreError> {
        super::check_pair_at(cert_pem, key_pem, now).map_err(|why| StoreError::Unusable {
            prefix: self.prefix,
            why,
        })?;
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
        crate::fsutil::symlink_atomic(Path::new(&name), &current).map_err(io("link", &current))?;
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
    let t = crate::api::meta::utc_from_unix(unix);
    format!(
        "{:04}-{:02}-{:02}-{:02}-{:02}-{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_pairs::pair;
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

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_stored_pair_becomes_current_through_a_private_file_and_a_link() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pki");
        let store = CertStore::new(&dir, "kubelet-client");
        assert_eq!(store.current().unwrap(), None);
        let (cert1, key1) = pair(0, 10_000);
        let first = store
            .store(cert1.as_bytes(), key1.as_bytes(), 1_000)
            .unwrap();
        assert_eq!(first, dir.join("kubelet-client-current.pem"));
        let stored = store.current().unwrap().unwrap();
        assert_eq!(stored, format!("{cert1}{key1}").into_bytes());
        let (cert2, key2) = pair(0, 10_000);
        store
            .store(cert2.as_bytes(), key2.as_bytes(), 2_000)
            .unwrap();
        let stored = store.current().unwrap().unwrap();
        assert_eq!(stored, format!("{cert2}{key2}").into_bytes());
        let target = std::fs::read_link(&first).unwrap();
        assert_eq!(target, Path::new("kubelet-client-1970-01-01-00-33-20.pem"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join(&target)), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // Both pairs are kept (upstream keeps them too); no temp link is left.
        assert_eq!(
            names(&dir),
            [
                "kubelet-client-1970-01-01-00-16-40.pem",
                "kubelet-client-1970-01-01-00-33-20.pem",
                "kubelet-client-current.pem"
            ]
        );
    }

    /// A key that is not the certificate's, or an expired certificate, is refused
    /// before anything is written: the current pair stays current. A certificate
    /// whose notBefore is still ahead (node clock behind the signer's) is stored.
    #[test]
    fn a_bad_pair_is_refused_before_it_is_stored() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("pki");
        let store = CertStore::new(&dir, "kubelet-client");
        let (good, good_key) = pair(0, 10_000);
        store
            .store(good.as_bytes(), good_key.as_bytes(), 1_000)
            .unwrap();
        let before = names(&dir);
        let (other, _) = pair(0, 10_000);
        let err = store
            .store(other.as_bytes(), good_key.as_bytes(), 2_000)
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Unusable {
                    why: super::super::Unusable::Pair(_),
                    ..
                }
            ),
            "{err}"
        );
        let (old, old_key) = pair(0, 1_500);
        let err = store
            .store(old.as_bytes(), old_key.as_bytes(), 2_000)
            .unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        let err = store.store(b"not pem", b"not pem", 2_000).unwrap_err();
        assert!(matches!(err, StoreError::Unusable { .. }), "{err}");
        assert_eq!(names(&dir), before, "nothing written");
        let current = store.current().unwrap().unwrap();
        assert_eq!(current, format!("{good}{good_key}").into_bytes());
        // Issued in the node's future (its clock runs 10 minutes behind).
        let (ahead, ahead_key) = pair(2_600, 10_000);
        store
            .store(ahead.as_bytes(), ahead_key.as_bytes(), 2_000)
            .unwrap();
        let current = store.current().unwrap().unwrap();
        assert_eq!(current, format!("{ahead}{ahead_key}").into_bytes());
    }
}
