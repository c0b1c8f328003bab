//! The pod data store (edge autonomy, `docs/autonomy.md`, "Pod data"): what the
//! node's pods need to start and nothing more, kept on the node so that after a
//! reboot (or a litelet upgrade, or a containerd restart) while the API server is
//! unreachable their volumes and environment can be rebuilt: the projected
//! service-account tokens (with their expiry) and the configMaps and secrets the
//! pods reference (volumes, `env`, `envFrom`, projected sources), each with the
//! resourceVersion it was read at.
//!
//! `<root-dir>/checkpoints/pod-data/` (0700), one file per entry (0600), written
//! through `fsutil::write_atomic` and checksummed, or sealed with the operator's key
//! (`entry.rs`, `seal.rs`). An object's entry lists the pods that use it and goes
//! with the last of them; a token's goes with its pod ([`Store::forget_pod`]). A
//! damaged entry (checksum, seal, another node's) is logged, removed and treated as
//! absent: it is a copy of the API server's data, read again when it answers.
//!
//! Who calls it: the volume manager's object cache and token manager on pod worker
//! threads (keep on each fresh read, read back only when the API server cannot be
//! reached), its tear-down, and housekeeping (through the volume manager: pods known
//! here count as pod directories, so an entry whose pod is gone is removed). One
//! small mutex guards the index (file name → resourceVersion and pods); it is held
//! across an entry's write so that two pods adding themselves to one object do not
//! lose each other. Reads of an entry's file take no lock (files are replaced whole).

pub mod entry;
pub mod seal;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

pub use entry::{Entry, KeptObject, KeptToken, ObjectKind, TokenKey};
pub use seal::{KeyFileError, SealKey};

use crate::sources::checkpoint::CHECKPOINT_DIR;

/// The store's directory under [`CHECKPOINT_DIR`].
pub const STORE_DIR: &str = "pod-data";

/// The store's directory under `root_dir`.
pub fn store_dir(root_dir: &Path) -> PathBuf {
    root_dir.join(CHECKPOINT_DIR).join(STORE_DIR)
}

/// Why the store could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum PodDataError {
    #[error("pod data {path}: {step}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("pod data: {0}")]
    Name(#[from] entry::BadName),
    #[error("pod data {name}: cannot encode: {reason}")]
    Encode { name: String, reason: String },
}

/// What the index knows of an entry without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Indexed {
    Object {
        resource_version: String,
        pods: BTreeSet<String>,
    },
    Token {
        pod_uid: String,
    },
}

/// The store; shared by every pod worker (`&self` methods).
pub struct Store {
    dir: PathBuf,
    node: String,
    key: Option<SealKey>,
    index: Mutex<BTreeMap<String, Indexed>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("sealed", &self.key.is_some())
            .finish_non_exhaustive()
    }
}

fn io<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PodDataError + 'a {
    move |source| PodDataError::Io {
        step,
        path: path.to_owned(),
        source,
    }
}

/// Removes everything kept under `root_dir` (`--checkpoint-secrets=false`), so no
/// copy outlives the decision; logs what it did.
pub fn remove_all(root_dir: &Path) {
    let dir = store_dir(root_dir);
    match fs::remove_dir_all(&dir) {
        Ok(()) => log::info!("pod data {} removed (disabled)", dir.display()),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => log::warn!("removing pod data {}: {e}", dir.display()),
    }
}

impl Store {
    /// Opens the store under `root_dir` for `node`, sealing with `key` when given:
    /// makes the directory (0700) and reads every entry into the index, removing
    /// (and logging) those that cannot be used.
    pub fn open(root_dir: &Path, node: &str, key: Option<SealKey>) -> Result<Store, PodDataError> {
        let dir = store_dir(root_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io("create directory", &dir))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io("chmod", &dir))?;
        let store = Store {
            dir,
            node: node.to_owned(),
            key,
            index: Mutex::new(BTreeMap::new()),
        };
        let mut index = BTreeMap::new();
        for name in store.file_names()? {
            let indexed = match store.read(&name) {
                Ok(Some(Entry::Object(o))) => Indexed::Object {
                    resource_version: o.resource_version,
                    pods: o.pods,
                },
                Ok(Some(Entry::Token(t))) => Indexed::Token {
                    pod_uid: t.key.pod_uid,
                },
                Ok(None) => continue,
                Err(e) => {
                    log::warn!("{e}; left out");
                    continue;
                }
            };
            index.insert(name, indexed);
        }
        log::info!(
            "pod data: {} entries kept in {}{}",
            index.len(),
            store.dir.display(),
            if store.key.is_some() { " (sealed)" } else { "" }
        );
        *store.lock() = index;
        Ok(store)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Indexed>> {
        // Each update is one insert or remove after its file is written.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entry files in the directory (temp files of an interrupted write excepted).
    fn file_names(&self) -> Result<Vec<String>, PodDataError> {
        let entries = fs::read_dir(&self.dir).map_err(io("read directory", &self.dir))?;
        Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect())
    }

    /// The entry in file `name`; `None` when there is none or it is damaged (then
    /// logged and removed).
    fn read(&self, name: &str) -> Result<Option<Entry>, PodDataError> {
        let path = self.dir.join(name);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        match entry::decode(name, &self.node, &bytes, self.key.as_ref()) {
            Ok(entry) => Ok(Some(entry)),
            Err(damage) => {
                log::warn!("pod data {}: {damage}; removed", path.display());
                self.remove_file(name)?;
                Ok(None)
            }
        }
    }

    fn write(&self, name: &str, entry: &Entry) -> Result<(), PodDataError> {
        let bytes =
            entry::encode(name, &self.node, entry, self.key.as_ref()).map_err(|reason| {
                PodDataError::Encode {
                    name: name.to_owned(),
                    reason,
                }
            })?;
        let path = self.dir.join(name);
        crate::fsutil::write_atomic(&path, &bytes, 0o600).map_err(io("write", &path))
    }

    fn remove_file(&self, name: &str) -> Result<(), PodDataError> {
        let path = self.dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("remove", &path)(e)),
        }
    }

    /// Keeps `object` (as read from the API server now) for pod `uid`: written when
    /// its resourceVersion changed or the pod is new to it, else nothing is done.
    pub fn keep_object(&self, object: &KeptObject, uid: &str) -> Result<(), PodDataError> {
        let name = entry::object_file(object.kind, &object.namespace, &object.name)?;
        let mut index = self.lock();
        let mut pods = match index.get(&name) {
            Some(Indexed::Object {
                resource_version,
                pods,
            }) if *resource_version == object.resource_version && pods.contains(uid) => {
                return Ok(())
            }
            Some(Indexed::Object { pods, .. }) => pods.clone(),
            _ => BTreeSet::new(),
        };
        pods.insert(uid.to_owned());
        let kept = KeptObject {
            pods: pods.clone(),
            ..object.clone()
        };
        self.write(&name, &Entry::Object(kept))?;
        index.insert(
            name,
            Indexed::Object {
                resource_version: object.resource_version.clone(),
                pods,
            },
        );
        Ok(())
    }

    /// The kept copy of an object, if any.
    pub fn object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<KeptObject>, PodDataError> {
        let file = entry::object_file(kind, namespace, name)?;
        match self.read(&file)? {
            Some(Entry::Object(o))
                if o.kind == kind && o.namespace == namespace && o.name == name =>
            {
                Ok(Some(o))
            }
            _ => Ok(None),
        }
    }

    /// Drops the copy of an object the API server says is gone, or no longer this
    /// node's to read (404, 403): a later outage never brings it back.
    pub fn drop_object(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), PodDataError> {
        let file = entry::object_file(kind, namespace, name)?;
        let mut index = self.lock();
        if index.remove(&file).is_some() {
            self.remove_file(&file)?;
            log::info!(
                "pod data: {} {namespace}/{name} is gone; its copy too",
                kind.as_str()
            );
        }
        Ok(())
    }

    /// Keeps `token` (a fresh TokenRequest answer) for its pod.
    pub fn keep_token(&self, token: &KeptToken) -> Result<(), PodDataError> {
        let name = entry::token_file(&token.key)?;
        let mut index = self.lock();
        self.write(&name, &Entry::Token(token.clone()))?;
        index.insert(
            name,
            Indexed::Token {
                pod_uid: token.key.pod_uid.clone(),
            },
        );
        Ok(())
    }

    /// The kept token for `key`, if any.
    pub fn token(&self, key: &TokenKey) -> Result<Option<KeptToken>, PodDataError> {
        let file = entry::token_file(key)?;
        match self.read(&file)? {
            Some(Entry::Token(t)) if t.key == *key => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    /// Removes pod `uid`'s tokens and its claim on objects; objects no other pod
    /// uses are removed.
    pub fn forget_pod(&self, uid: &str) -> Result<(), PodDataError> {
        let mut index = self.lock();
        let names: Vec<String> = index
            .iter()
            .filter(|(_, i)| match i {
                Indexed::Object { pods, .. } => pods.contains(uid),
                Indexed::Token { pod_uid } => pod_uid == uid,
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let rest = match index.get(&name) {
                Some(Indexed::Object { pods, .. }) => {
                    pods.iter().filter(|p| *p != uid).cloned().collect()
                }
                _ => BTreeSet::new(),
            };
            if rest.is_empty() {
                self.remove_file(&name)?;
                index.remove(&name);
                continue;
            }
            let Some(Entry::Object(object)) = self.read(&name)? else {
                index.remove(&name);
                continue;
            };
            let resource_version = object.resource_version.clone();
            let kept = KeptObject {
                pods: rest.clone(),
                ..object
            };
            self.write(&name, &Entry::Object(kept))?;
            index.insert(
                name,
                Indexed::Object {
                    resource_version,
                    pods: rest,
                },
            );
        }
        Ok(())
    }

    /// UIDs of every pod the store holds something for.
    pub fn pods(&self) -> BTreeSet<String> {
        self.lock()
            .values()
            .flat_map(|i| match i {
                Indexed::Object { pods, .. } => pods.iter().cloned().collect::<Vec<_>>(),
                Indexed::Token { pod_uid } => vec![pod_uid.clone()],
            })
            .collect()
    }

    /// Entries held (tests and logs).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
