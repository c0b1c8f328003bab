//! The pull records on disk, under `<root-dir>/image_manager/` (0700; every file
//! 0600, replaced whole through `fsutil::write_atomic`):
//! - `pulled.json`: image ID → repository → how it was pulled;
//! - `preloaded.json`: the inventory of images (ID → repositories) on the node before
//!   litelet recorded anything;
//! - `pulling/<sha256 of the reference>.json`: one intent per image being pulled,
//!   written and synced before the pull starts, removed once its record is on disk;
//! - `credential_digest.key`: the per-node HMAC key of the credential digests.
//!
//! A file that does not decode is moved aside to `<name>.damaged` (for the admin) and
//! reported; the caller decides what that means (it always fails closed). Called by
//! `PullRecords` under its locks; no thread of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{PullRecordsError, Records};

/// Image ID → repositories (normalised, no tag) the runtime held before litelet
/// recorded anything.
pub(super) type Inventory = BTreeMap<String, BTreeSet<String>>;

pub(super) const KEY_LEN: usize = 32;
const KEY_FILE: &str = "credential_digest.key";
const RECORDS_FILE: &str = "pulled.json";
const INVENTORY_FILE: &str = "preloaded.json";
const INTENTS_DIR: &str = "pulling";

/// What reading one JSON file gave.
pub(super) enum Read<T> {
    Missing,
    Loaded(T),
    /// It did not decode; moved aside to `kept` when that worked.
    Damaged {
        kept: Option<PathBuf>,
        reason: String,
    },
    Unreadable(io::Error),
}

/// One intent file's content.
#[derive(Serialize, Deserialize)]
struct Intent {
    image: String,
}

/// The paths under `<root-dir>/image_manager/`.
pub(super) struct Files {
    dir: PathBuf,
}

impl Files {
    pub fn new(root_dir: &Path) -> Files {
        Files {
            dir: root_dir.join("image_manager"),
        }
    }

    pub fn records(&self) -> PathBuf {
        self.dir.join(RECORDS_FILE)
    }

    pub fn inventory(&self) -> PathBuf {
        self.dir.join(INVENTORY_FILE)
    }

    fn intents(&self) -> PathBuf {
        self.dir.join(INTENTS_DIR)
    }

    fn intent(&self, image: &str) -> PathBuf {
        let digest = ring::digest::digest(&ring::digest::SHA256, image.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        self.intents().join(format!("{hex}.json"))
    }

    pub fn read_records(&self) -> Read<Records> {
        read_json(&self.records())
    }

    pub fn read_inventory(&self) -> Read<Inventory> {
        read_json(&self.inventory())
    }

    /// True when the records file is readable by others (written by an earlier
    /// version with the umask's mode): it is then rewritten 0600.
    pub fn records_loose(&self) -> bool {
        std::fs::metadata(self.records()).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
    }

    pub fn write_records(&self, records: &Records) -> Result<(), PullRecordsError> {
        write_json(&self.dir, &self.records(), records)
    }

    pub fn write_inventory(&self, inventory: &Inventory) -> Result<(), PullRecordsError> {
        write_json(&self.dir, &self.inventory(), inventory)
    }

    /// Records, durably, that `image` is about to be pulled.
    pub fn write_intent(&self, image: &str) -> Result<(), PullRecordsError> {
        let path = self.intent(image);
        let error = |source| PullRecordsError::Intent {
            image: image.to_owned(),
            path: path.clone(),
            source,
        };
        create_private_dir(&self.intents()).map_err(error)?;
        let intent = Intent {
            image: image.to_owned(),
        };
        let bytes = serde_json::to_vec(&intent).map_err(|e| error(io::Error::other(e)))?;
        crate::fsutil::write_atomic(&path, &bytes, 0o600).map_err(error)
    }

    /// Drops the intent of `image` (gone already is fine).
    pub fn remove_intent(&self, image: &str) -> Result<(), PullRecordsError> {
        let path = self.intent(image);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(PullRecordsError::Intent {
                image: image.to_owned(),
                path,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The images of the intents left on disk; an intent that does not decode names
    /// no image and is removed (the inventory already keeps its image from counting
    /// as preloaded).
    pub fn list_intents(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.intents()) else {
            return Vec::new();
        };
        let mut images = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Intent>(&b).ok())
            {
                Some(intent) => images.push(intent.image),
                None => {
                    log::warn!("removing undecodable image pull intent {}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        images.sort();
        images
    }

    /// The node's HMAC key, made (0600) when missing or damaged. When it cannot be
    /// stored, a key for this run only: the records of earlier runs then match
    /// nothing, which costs re-pulls, never access.
    pub fn node_key(&self) -> Option<[u8; KEY_LEN]> {
        let path = self.dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == KEY_LEN => {
                let mut secret = [0u8; KEY_LEN];
                secret.copy_from_slice(&bytes);
                if let Err(e) =
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                {
                    log::warn!("cannot restrict {}: {e}", path.display());
                }
                return Some(secret);
            }
            Ok(_) => log::warn!("replacing damaged credential digest key {}", path.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("cannot read credential digest key {}: {e}", path.display()),
        }
        let secret = random_secret()?;
        let stored = create_private_dir(&self.dir)
            .and_then(|()| crate::fsutil::write_atomic(&path, &secret, 0o600));
        if let Err(e) = stored {
            log::warn!(
                "cannot store credential digest key {}: {e}; images pulled with secrets in \
                 earlier runs are verified again",
                path.display()
            );
        }
        Some(secret)
    }
}

pub(super) fn random_secret() -> Option<[u8; KEY_LEN]> {
    let mut secret = [0u8; KEY_LEN];
    match SystemRandom::new().fill(&mut secret) {
        Ok(()) => Some(secret),
        Err(_) => {
            log::error!(
                "no random bytes for the credential digest key: images pulled with secrets \
                 are verified at every use"
            );
            None
        }
    }
}

/// Reads `path` as JSON; a file that does not decode is moved aside.
fn read_json<T: DeserializeOwned>(path: &Path) -> Read<T> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Read::Missing,
        Err(e) => return Read::Unreadable(e),
    };
    match serde_json::from_slice(&bytes) {
        Ok(value) => Read::Loaded(value),
        Err(e) => {
            let mut kept = path.as_os_str().to_owned();
            kept.push(".damaged");
            let kept = PathBuf::from(kept);
            let kept = std::fs::rename(path, &kept).ok().map(|()| kept);
            Read::Damaged {
                kept,
                reason: e.to_string(),
            }
        }
    }
}

/// Replaces `path` (in `dir`, made 0700 when missing) with `value` as JSON, 0600.
fn write_json<T: Serialize>(dir: &Path, path: &Path, value: &T) -> Result<(), PullRecordsError> {
    let error = |source| PullRecordsError::Write {
        path: path.to_owned(),
        source,
    };
    create_private_dir(dir).map_err(error)?;
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| error(io::Error::other(e)))?;
    crate::fsutil::write_atomic(path, &bytes, 0o600).map_err(error)
}

/// Creates `dir` (and parents) 0700 when missing; an existing one is kept.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
