//! Which credentials pulled each image (upstream's image pull manager, KEP-2535, for
//! `imagePullCredentialsVerificationPolicy`). A pod whose `IfNotPresent` image is
//! already on the node may use it only if the image was pulled without credentials or
//! with node-wide ones, or if the pod offers a credential that pulled it; otherwise
//! the image is pulled again with the pod's credentials, so a pod without access to
//! a private image cannot run it just because another pod pulled it.
//!
//! Crash consistency, as upstream designed it and stricter where upstream fails open:
//! - an intent (`pulling/<hash>.json`) is written and synced *before* each pull and
//!   removed only once the pull's record is on disk; at start, an intent whose image
//!   the runtime holds becomes a record without credentials (every pod must show its
//!   credentials again: a crash between pull and record never opens the image);
//! - records are written under the lock that changes them (no lost update), through
//!   `fsutil::write_atomic` (a unique `O_EXCL` temp file, fsync, rename, dir fsync);
//! - "preloaded" (`NeverVerifyPreloadedImages`) means in the inventory
//!   (`preloaded.json`) of images the runtime held when litelet first recorded
//!   anything (taken at the first start, or again at a start that finds records
//!   intact and no inventory: an upgrade, or an admin who removed it on purpose).
//!   Upstream counts any image without a record or intent as preloaded, so a lost
//!   record opened its image to every pod; here an image that arrived later has no
//!   record only if someone else put it there, and is verified like any other;
//! - a records file that does not decode is moved aside (`pulled.json.damaged`) and
//!   reported: the images litelet pulled are absent from the inventory, so each is
//!   verified again; a damaged or unreadable inventory counts nothing as preloaded.
//!
//! The decisions ([`requires_verification`], [`must_pull`], the allowlist) are pure.
//! The records sit behind one short lock (pod worker threads), held across their own
//! file write, never across a CRI call. Only secret coordinates and HMAC-SHA256
//! digests of credentials are kept, never a credential. The HMAC key is a random
//! per-node secret in `image_manager/credential_digest.key` (0600, made once), so a
//! copy of the records allows no offline guessing of weak passwords. Digests of
//! another scheme (the unkeyed SHA-256 of earlier versions) never match: they are
//! dropped at load, and the images they covered are verified again at their next use.
//! `files.rs` holds the on-disk layout.

mod files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use ring::hmac;

use crate::credentialprovider::keyring::{normalize_repository, DIGEST_SCHEME};
use crate::credentialprovider::{Credential, CredentialSource};
use crate::cri::CriError;

use files::{Files, Inventory, Read};

/// Upstream's `imagePullCredentialsVerificationPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerificationPolicy {
    /// Any pod may use any image on the node (the pre-1.33 behaviour).
    NeverVerify,
    /// Images the kubelet did not pull (no record) need no check; the others do.
    #[default]
    NeverVerifyPreloadedImages,
    /// Images on `preloadedImagesVerificationAllowlist` need no check; others do.
    NeverVerifyAllowlistedImages,
    /// Every image on the node needs a check, preloaded ones too.
    AlwaysVerify,
}

impl VerificationPolicy {
    /// Upstream's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeverVerify => "NeverVerify",
            Self::NeverVerifyPreloadedImages => "NeverVerifyPreloadedImages",
            Self::NeverVerifyAllowlistedImages => "NeverVerifyAllowlistedImages",
            Self::AlwaysVerify => "AlwaysVerify",
        }
    }
}

impl std::str::FromStr for VerificationPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "NeverVerify" => Ok(Self::NeverVerify),
            "NeverVerifyPreloadedImages" => Ok(Self::NeverVerifyPreloadedImages),
            "NeverVerifyAllowlistedImages" => Ok(Self::NeverVerifyAllowlistedImages),
            "AlwaysVerify" => Ok(Self::AlwaysVerify),
            other => Err(format!(
                "unknown imagePullCredentialsVerificationPolicy {other:?}"
            )),
        }
    }
}

/// Checks one `preloadedImagesVerificationAllowlist` entry: a repository with its
/// registry host, no tag or digest, optionally ending in `/*` (every repository
/// under that path).
pub fn check_allowlist_entry(entry: &str) -> Result<(), AllowlistError> {
    let path = entry.strip_suffix("/*").unwrap_or(entry);
    let last = path.rsplit('/').next().unwrap_or(path);
    if path.is_empty() || !path.contains('/') {
        return Err(AllowlistError::NoRegistry(entry.to_owned()));
    }
    if path.contains('*') || path.contains(char::is_whitespace) {
        return Err(AllowlistError::Wildcard(entry.to_owned()));
    }
    if path.contains('@') || last.contains(':') {
        return Err(AllowlistError::TagOrDigest(entry.to_owned()));
    }
    Ok(())
}

/// A `preloadedImagesVerificationAllowlist` entry upstream would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("{0:?}: must name a registry host and a path")]
    NoRegistry(String),
    #[error("{0:?}: a wildcard is allowed only as a final \"/*\"")]
    Wildcard(String),
    #[error("{0:?}: must not have a tag or digest")]
    TagOrDigest(String),
}

/// True when `repository` (normalised, no tag) is on `allowlist`.
pub fn is_allowlisted(allowlist: &[String], repository: &str) -> bool {
    allowlist.iter().any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => repository.starts_with(prefix),
        None => repository == entry,
    })
}

/// A secret that pulled an image, with the digest of the credential it gave
/// ([`PullRecords::digest`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SecretCoordinates {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub credential_hash: String,
}

/// A service account whose credential provider plugin credentials pulled an image
/// (upstream ImagePullServiceAccount).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceAccountCoordinates {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// How one repository of an image (by image ID) was pulled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRecord {
    /// Pulled without credentials or with the node's: every pod may use it.
    #[serde(default)]
    pub node_wide: bool,
    #[serde(default)]
    pub secrets: BTreeSet<SecretCoordinates>,
    /// Pulled with a service-account-token plugin's credentials: pods running as
    /// one of these service accounts may use it.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub service_accounts: BTreeSet<ServiceAccountCoordinates>,
}

/// What the records say about one image and repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pulled {
    /// No record, and in the inventory of images on the node before litelet recorded
    /// anything (under this repository): preloaded.
    Preloaded,
    /// No record and not preloaded: pulled by litelet with its record lost, being
    /// pulled now, or put there by someone else since. Nothing proves any access.
    Unrecorded,
    /// How this repository of the image was pulled.
    As(PullRecord),
}

/// True when a present image's use by a pod must be checked against the records
/// (upstream RequireCredentialVerificationForImage).
pub fn requires_verification(
    policy: VerificationPolicy,
    allowlisted: bool,
    pulled: &Pulled,
) -> bool {
    match policy {
        VerificationPolicy::NeverVerify => false,
        VerificationPolicy::AlwaysVerify => true,
        VerificationPolicy::NeverVerifyPreloadedImages => !matches!(pulled, Pulled::Preloaded),
        VerificationPolicy::NeverVerifyAllowlistedImages => !allowlisted,
    }
}

/// True when an image present on the node must be pulled again (with `offered`, the
/// pod's matching credentials) before the pod may use it. `digest` is the records'
/// keyed digest of a credential ([`PullRecords::digest`]); `None` matches nothing.
pub fn must_pull(
    policy: VerificationPolicy,
    allowlisted: bool,
    pulled: &Pulled,
    offered: &[Credential],
    digest: impl Fn(&Credential) -> Option<String>,
) -> bool {
    if !requires_verification(policy, allowlisted, pulled) {
        return false;
    }
    let Pulled::As(record) = pulled else {
        // No record of this repository of the image: nothing proves the pod's access.
        return true;
    };
    if record.node_wide {
        return false;
    }
    let accepted = |cred: &Credential| match &cred.source {
        CredentialSource::Node => true,
        CredentialSource::Secret { .. } => {
            // The same credential in another secret is as good (upstream matches hashes).
            match digest(cred) {
                Some(d) => record.secrets.iter().any(|s| s.credential_hash == d),
                None => false,
            }
        }
        CredentialSource::ServiceAccount {
            namespace,
            name,
            uid,
        } => record
            .service_accounts
            .iter()
            .any(|sa| (&sa.namespace, &sa.name, &sa.uid) == (namespace, name, uid)),
    };
    !offered.iter().any(accepted)
}

/// Image ID → repository (no tag or digest) → how it was pulled.
type Records = BTreeMap<String, BTreeMap<String, PullRecord>>;

/// One image the runtime holds, as ListImages reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeImage {
    pub id: String,
    /// Its repo tags and repo digests.
    pub names: Vec<String>,
}

/// Which images count as preloaded.
enum Preloaded {
    /// Every image without a record (upstream's rule; an in-memory store has no
    /// history to lose).
    Unrecorded,
    /// Those of the inventory.
    Listed(Inventory),
}

/// Why the records cannot be trusted, read or written; each fails closed (images
/// are verified again) and is logged and reported as a node event by the caller.
#[derive(Debug, thiserror::Error)]
pub enum PullRecordsError {
    #[error(
        "image pull records {path}: damaged ({reason}), kept as {kept}; every image \
         litelet pulled is verified again before a pod uses it"
    )]
    DamagedRecords {
        path: PathBuf,
        kept: String,
        reason: String,
    },
    #[error(
        "image pull records {path}: cannot read ({source}); every image litelet pulled \
         is verified again before a pod uses it"
    )]
    UnreadableRecords {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "image pull records {path} are missing; every image litelet pulled is verified \
         again before a pod uses it"
    )]
    MissingRecords { path: PathBuf },
    #[error(
        "preloaded image inventory {path}: damaged ({reason}), kept as {kept}; no image \
         counts as preloaded: each is verified before a pod uses it"
    )]
    DamagedInventory {
        path: PathBuf,
        kept: String,
        reason: String,
    },
    #[error(
        "preloaded image inventory {path}: cannot read ({source}); no image counts as \
         preloaded in this run"
    )]
    UnreadableInventory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "listing the runtime's images for the pull records: {source}; no image counts as \
         preloaded in this run"
    )]
    ListImages {
        #[source]
        source: CriError,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("recording the intent to pull {image} in {path}: {source}")]
    Intent {
        image: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How the records file was found at start.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Found {
    Missing,
    Loaded,
    /// Damaged or unreadable: what it held is lost.
    Lost,
}

/// The records, in memory and on disk.
pub struct PullRecords {
    files: Option<Files>,
    /// The per-node HMAC key; `None` when no random key could be made, and then no
    /// secret's record ever matches (every such image is verified again).
    key: Option<hmac::Key>,
    records: Mutex<Records>,
    preloaded: Preloaded,
    /// Image reference → pulls of it in flight (its intent file exists while > 0).
    pulling: Mutex<BTreeMap<String, usize>>,
}

/// A pull about to happen, its intent on disk; [`PullIntent::pulled`] records the
/// outcome, and dropping it (a failed or cancelled pull) withdraws the intent.
pub struct PullIntent<'a> {
    records: &'a PullRecords,
    image: String,
    settled: bool,
}

impl PullIntent<'_> {
    /// The pull gave `image_id` for `repository` with `credential` (`None`:
    /// anonymously). The intent stays on disk when the record could not be written,
    /// so the next start still treats the image as pulled without a known credential.
    pub fn pulled(mut self, image_id: &str, repository: &str, credential: Option<&Credential>) {
        let kept = match self.records.record(image_id, repository, credential) {
            Ok(()) => false,
            Err(e) => {
                log::error!("{e}; the pull intent of {} stays on disk", self.image);
                true
            }
        };
        self.records.release(&self.image, kept);
        self.settled = true;
    }
}

impl Drop for PullIntent<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.records.release(&self.image, false);
        }
    }
}

impl PullRecords {
    /// Records kept only in memory (tests, standalone use): any image without a
    /// record counts as preloaded.
    pub fn in_memory() -> PullRecords {
        PullRecords {
            files: None,
            key: files::random_secret().map(|s| hmac::Key::new(hmac::HMAC_SHA256, &s)),
            records: Mutex::new(BTreeMap::new()),
            preloaded: Preloaded::Unrecorded,
            pulling: Mutex::new(BTreeMap::new()),
        }
    }

    /// The digest recorded for `cred` (see [`Credential::digest`]).
    pub fn digest(&self, cred: &Credential) -> Option<String> {
        self.key.as_ref().map(|key| cred.digest(key))
    }

    /// The records under `root_dir` (see the module doc), with what went wrong reading
    /// them; `list_images` (the runtime's ListImages) is asked only when intents are
    /// left or the inventory must be taken. Runs once at start, before any pull.
    pub fn open(
        root_dir: &std::path::Path,
        list_images: &dyn Fn() -> Result<Vec<RuntimeImage>, CriError>,
    ) -> (PullRecords, Vec<PullRecordsError>) {
        let files = Files::new(root_dir);
        let mut problems = Vec::new();
        let key = files
            .node_key()
            .map(|s| hmac::Key::new(hmac::HMAC_SHA256, &s));
        let (mut records, found) = load_records(&files, &mut problems);
        let intents = files.list_intents();
        let inventory = files.read_inventory();
        let take_inventory = matches!(inventory, Read::Missing) && found != Found::Lost;
        let images = if !intents.is_empty() || take_inventory {
            list_images()
                .map_err(|source| problems.push(PullRecordsError::ListImages { source }))
                .ok()
        } else {
            None
        };
        let mut changed = found != Found::Loaded || files.records_loose();
        changed |= drop_foreign_digests(&mut records, &files.records()) > 0;
        if let Some(images) = &images {
            changed |= settle_intents(&files, &mut records, &intents, images);
        }
        if changed {
            if let Err(e) = files.write_records(&records) {
                problems.push(e);
            }
        }
        let (inventory, more) =
            settle_inventory(&files, inventory, found, images.as_deref(), &records);
        problems.extend(more);
        let store = PullRecords {
            files: Some(files),
            key,
            records: Mutex::new(records),
            preloaded: Preloaded::Listed(inventory),
            pulling: Mutex::new(BTreeMap::new()),
        };
        (store, problems)
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        // Each update is one insert: a panic elsewhere leaves no half-written record.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is known of `repository` (normalised, no tag) as image `image_id`.
    pub fn get(&self, image_id: &str, repository: &str) -> Pulled {
        if let Some(record) = self.lock().get(image_id).and_then(|r| r.get(repository)) {
            return Pulled::As(record.clone());
        }
        let preloaded = match &self.preloaded {
            Preloaded::Unrecorded => true,
            Preloaded::Listed(inventory) => inventory
                .get(image_id)
                .is_some_and(|repos| repos.contains(repository)),
        };
        if preloaded {
            Pulled::Preloaded
        } else {
            Pulled::Unrecorded
        }
    }

    /// Notes, on disk before it returns, that `repository` was pulled as `image_id`
    /// with `credential` (`None`: anonymously). The write happens under the lock, so
    /// concurrent records never overwrite each other with older snapshots.
    pub fn record(
        &self,
        image_id: &str,
        repository: &str,
        credential: Option<&Credential>,
    ) -> Result<(), PullRecordsError> {
        let mut records = self.lock();
        let record = records
            .entry(image_id.to_owned())
            .or_default()
            .entry(repository.to_owned())
            .or_default();
        let changed = match credential.map(|c| &c.source) {
            None | Some(CredentialSource::Node) => !std::mem::replace(&mut record.node_wide, true),
            Some(CredentialSource::Secret {
                namespace,
                name,
                uid,
            }) => record.secrets.insert(SecretCoordinates {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
                credential_hash: credential.and_then(|c| self.digest(c)).unwrap_or_default(),
            }),
            Some(CredentialSource::ServiceAccount {
                namespace,
                name,
                uid,
            }) => record.service_accounts.insert(ServiceAccountCoordinates {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
            }),
        };
        match &self.files {
            Some(files) if changed => files.write_records(&records),
            _ => Ok(()),
        }
    }

    /// Records, durably, that `image` (the reference about to be pulled) is being
    /// pulled; call before the pull. An error means the pull must not happen.
    pub fn intend(&self, image: &str) -> Result<PullIntent<'_>, PullRecordsError> {
        let mut pulling = self.pulling.lock().unwrap_or_else(|p| p.into_inner());
        let count = pulling.get(image).copied().unwrap_or(0);
        if count == 0 {
            if let Some(files) = &self.files {
                files.write_intent(image)?;
            }
        }
        pulling.insert(image.to_owned(), count + 1);
        Ok(PullIntent {
            records: self,
            image: image.to_owned(),
            settled: false,
        })
    }

    /// One pull of `image` is over; the last one removes the intent file unless
    /// `keep_file`.
    fn release(&self, image: &str, keep_file: bool) {
        let mut pulling = self.pulling.lock().unwrap_or_else(|p| p.into_inner());
        match pulling.get_mut(image) {
            Some(count) if *count > 1 => *count -= 1,
            _ => {
                pulling.remove(image);
                if let (Some(files), false) = (&self.files, keep_file) {
                    if let Err(e) = files.remove_intent(image) {
                        log::warn!("{e}");
                    }
                }
            }
        }
    }
}

/// The records file's content and how it was found; a damaged one is reported.
fn load_records(files: &Files, problems: &mut Vec<PullRecordsError>) -> (Records, Found) {
    let path = files.records();
    match files.read_records() {
        Read::Loaded(records) => (records, Found::Loaded),
        Read::Missing => (Records::new(), Found::Missing),
        Read::Damaged { kept, reason } => {
            problems.push(PullRecordsError::DamagedRecords {
                path,
                kept: kept_name(kept),
                reason,
            });
            (Records::new(), Found::Lost)
        }
        Read::Unreadable(source) => {
            problems.push(PullRecordsError::UnreadableRecords { path, source });
            (Records::new(), Found::Lost)
        }
    }
}

fn kept_name(kept: Option<PathBuf>) -> String {
    kept.map_or_else(
        || "is (it could not be moved)".into(),
        |p| p.display().to_string(),
    )
}

/// The inventory to use: the file's, or one taken now (first start, or a start that
/// finds intact records and no inventory). Anything else (damaged, unreadable,
/// records lost, no image list) gives an empty one, written so but for an unreadable
/// file or a missing list (the next start tries again): nothing counts as preloaded.
fn settle_inventory(
    files: &Files,
    read: Read<Inventory>,
    found: Found,
    images: Option<&[RuntimeImage]>,
    records: &Records,
) -> (Inventory, Vec<PullRecordsError>) {
    let path = files.inventory();
    let mut problems = Vec::new();
    let (inventory, write) = match read {
        Read::Loaded(inventory) => {
            if found == Found::Missing {
                problems.push(PullRecordsError::MissingRecords {
                    path: files.records(),
                });
            }
            (inventory, false)
        }
        Read::Unreadable(source) => {
            problems.push(PullRecordsError::UnreadableInventory { path, source });
            (Inventory::new(), false)
        }
        Read::Damaged { kept, reason } => {
            problems.push(PullRecordsError::DamagedInventory {
                path,
                kept: kept_name(kept),
                reason,
            });
            (Inventory::new(), true)
        }
        Read::Missing => match (found, images) {
            (Found::Lost, _) => (Inventory::new(), true),
            (_, Some(images)) => (inventory_of(images, records), true),
            (_, None) => (Inventory::new(), false),
        },
    };
    if write {
        if let Err(e) = files.write_inventory(&inventory) {
            problems.push(e);
        }
    }
    (inventory, problems)
}

/// Every repository of every image the runtime holds, but those with a record.
fn inventory_of(images: &[RuntimeImage], records: &Records) -> Inventory {
    let mut inventory = Inventory::new();
    for image in images {
        for name in &image.names {
            let repository = normalize_repository(name);
            let recorded = records
                .get(&image.id)
                .is_some_and(|r| r.contains_key(&repository));
            if !recorded {
                inventory
                    .entry(image.id.clone())
                    .or_default()
                    .insert(repository);
            }
        }
    }
    inventory
}

/// Turns each intent left by an earlier run whose image the runtime holds into a
/// record without credentials (pulled, by whom unknown: every pod is verified), and
/// removes the intents. True when a record was added.
fn settle_intents(
    files: &Files,
    records: &mut Records,
    intents: &[String],
    images: &[RuntimeImage],
) -> bool {
    let mut changed = false;
    for intent in intents {
        let wanted = reference_key(intent);
        let repository = normalize_repository(intent);
        for image in images {
            if !image.names.iter().any(|n| reference_key(n) == wanted) {
                continue;
            }
            let by_repo = records.entry(image.id.clone()).or_default();
            if !by_repo.contains_key(&repository) {
                log::warn!(
                    "image {intent} ({}) was pulled but not recorded before litelet \
                     stopped; every pod must show its credentials for it again",
                    image.id
                );
                by_repo.insert(repository.clone(), PullRecord::default());
                changed = true;
            }
        }
        if let Err(e) = files.remove_intent(intent) {
            log::warn!("{e}");
        }
    }
    changed
}

/// A reference as (normalised repository, `:tag` or `@digest`), so that
/// `busybox:1.36` and `docker.io/library/busybox:1.36` compare equal.
fn reference_key(image: &str) -> (String, String) {
    let version = match image.split_once('@') {
        Some((_, digest)) => format!("@{digest}"),
        None => match image.rsplit('/').next().unwrap_or(image).rsplit_once(':') {
            Some((_, tag)) => format!(":{tag}"),
            None => ":latest".to_owned(),
        },
    };
    (normalize_repository(image), version)
}

/// Removes every secret digest not made by [`Credential::digest`]; returns how many.
fn drop_foreign_digests(records: &mut Records, path: &std::path::Path) -> usize {
    let mut dropped = 0;
    for record in records
        .values_mut()
        .flat_map(|by_repo| by_repo.values_mut())
    {
        let before = record.secrets.len();
        record
            .secrets
            .retain(|s| s.credential_hash.starts_with(DIGEST_SCHEME));
        dropped += before - record.secrets.len();
    }
    if dropped > 0 {
        log::info!(
            "dropped {dropped} unkeyed credential digests from {}; their images are \
             verified again at their next use",
            path.display()
        );
    }
    dropped
}

#[cfg(test)]
mod tests;
