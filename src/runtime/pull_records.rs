//! Which credentials pulled each image (upstream's image pull manager, KEP-2535, for
//! `imagePullCredentialsVerificationPolicy`). A pod whose `IfNotPresent` image is
//! already on the node may use it only if the image was pulled without credentials or
//! with node-wide ones, or if the pod offers a credential that pulled it; otherwise
//! the image is pulled again with the pod's credentials, so a pod without access to
//! a private image cannot run it just because another pod pulled it.
//!
//! The decisions ([`requires_verification`], [`must_pull`], the allowlist) are pure. The records sit behind one short lock (pod
//! worker threads) and are written atomically to `<root-dir>/image_manager/
//! pulled.json` (mode 0600) so they survive restarts: only secret coordinates and
//! HMAC-SHA256 digests of credentials, never a credential. The HMAC key is a random
//! per-node secret in `<root-dir>/image_manager/credential_digest.key` (0600, made
//! once), so a copy of the records allows no offline guessing of weak passwords.
//! Digests of another scheme (the unkeyed SHA-256 of earlier versions) never match:
//! they are dropped at load, and the images they covered are verified again (pulled
//! with the pod's credentials) at their next use.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::credentialprovider::keyring::DIGEST_SCHEME;
use crate::credentialprovider::{Credential, CredentialSource};

/// File of the per-node HMAC key, next to `pulled.json`.
const KEY_FILE: &str = "credential_digest.key";
const KEY_LEN: usize = 32;

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

/// How one repository of an image (by image ID) was pulled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRecord {
    /// Pulled without credentials or with the node's: every pod may use it.
    #[serde(default)]
    pub node_wide: bool,
    #[serde(default)]
    pub secrets: BTreeSet<SecretCoordinates>,
}

/// What the records say about one image and repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pulled {
    /// litelet never pulled this image (by ID): preloaded or pulled by someone else.
    Never,
    /// litelet pulled the image, but never under this repository name.
    OtherRepository,
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
        // Upstream re-verifies an image ID it pulled once even under a name it never
        // pulled; litelet does not: the runtime knows that name only because someone
        // else put the image there, so it is preloaded under it.
        VerificationPolicy::NeverVerifyPreloadedImages => matches!(pulled, Pulled::As(_)),
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
        // Never pulled by litelet under this name: nothing proves the pod's access.
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
    };
    !offered.iter().any(accepted)
}

/// Image ID → repository (no tag or digest) → how it was pulled.
type Records = BTreeMap<String, BTreeMap<String, PullRecord>>;

/// The records, in memory and on disk.
pub struct PullRecords {
    path: Option<PathBuf>,
    /// The per-node HMAC key; `None` when no random key could be made, and then no
    /// secret's record ever matches (every such image is verified again).
    key: Option<hmac::Key>,
    records: Mutex<Records>,
}

impl PullRecords {
    /// Records kept only in memory (tests, standalone use).
    pub fn in_memory() -> PullRecords {
        PullRecords {
            path: None,
            key: random_secret().map(|s| hmac::Key::new(hmac::HMAC_SHA256, &s)),
            records: Mutex::new(BTreeMap::new()),
        }
    }

    /// The digest recorded for `cred` (see [`Credential::digest`]).
    pub fn digest(&self, cred: &Credential) -> Option<String> {
        self.key.as_ref().map(|key| cred.digest(key))
    }

    /// The records under `root_dir`; an unreadable file starts empty, with a warning.
    pub fn load(root_dir: &Path) -> PullRecords {
        let dir = root_dir.join("image_manager");
        let path = dir.join("pulled.json");
        let key = node_key(&dir).map(|s| hmac::Key::new(hmac::HMAC_SHA256, &s));
        let mut records: Records = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                log::warn!(
                    "ignoring damaged image pull records {}: {e}",
                    path.display()
                );
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                log::warn!("cannot read image pull records {}: {e}", path.display());
                BTreeMap::new()
            }
        };
        let dropped = drop_foreign_digests(&mut records);
        if dropped > 0 {
            log::info!(
                "dropped {dropped} unkeyed credential digests from {}; their images are \
                 verified again at their next use",
                path.display()
            );
        }
        // Rewritten when old digests went, and whenever the file is readable by others
        // (written by an earlier version with the umask's mode).
        let loose = std::fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o077 != 0)
            .unwrap_or(false);
        if dropped > 0 || loose {
            if let Err(e) = write_atomic(&path, &records) {
                log::warn!("cannot rewrite image pull records {}: {e}", path.display());
            }
        }
        PullRecords {
            path: Some(path),
            key,
            records: Mutex::new(records),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        // Each update is one insert: a panic elsewhere leaves no half-written record.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is known of `repository` (normalised, no tag) as image `image_id`.
    pub fn get(&self, image_id: &str, repository: &str) -> Pulled {
        match self.lock().get(image_id) {
            None => Pulled::Never,
            Some(by_repo) => match by_repo.get(repository) {
                None => Pulled::OtherRepository,
                Some(record) => Pulled::As(record.clone()),
            },
        }
    }

    /// Notes that `repository` was pulled as `image_id` with `credential` (`None`:
    /// anonymously).
    pub fn record(&self, image_id: &str, repository: &str, credential: Option<&Credential>) {
        let snapshot = {
            let mut records = self.lock();
            let record = records
                .entry(image_id.to_owned())
                .or_default()
                .entry(repository.to_owned())
                .or_default();
            let changed = match credential.map(|c| &c.source) {
                None | Some(CredentialSource::Node) => {
                    !std::mem::replace(&mut record.node_wide, true)
                }
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
            };
            if !changed {
                return;
            }
            records.clone()
        };
        if let Some(path) = &self.path {
            if let Err(e) = write_atomic(path, &snapshot) {
                log::warn!("cannot write image pull records {}: {e}", path.display());
            }
        }
    }
}

/// 0600: the digests are the node's business only.
fn write_atomic(path: &Path, records: &Records) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec_pretty(records).map_err(std::io::Error::other)?;
    crate::fsutil::write_atomic(path, &bytes, 0o600)
}

/// Removes every secret digest not made by [`Credential::digest`]; returns how many.
fn drop_foreign_digests(records: &mut Records) -> usize {
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
    dropped
}

fn random_secret() -> Option<[u8; KEY_LEN]> {
    let mut secret = [0u8; KEY_LEN];
    match SystemRandom::new().fill(&mut secret) {
        Ok(()) => Some(secret),
        Err(_) => {
            log::error!("no random bytes for the credential digest key: images pulled with secrets are verified at every use");
            None
        }
    }
}

/// The node's HMAC key from `<dir>/credential_digest.key`, made (0600) when missing
/// or damaged. When it cannot be stored, a key for this run only: the records of
/// earlier runs then match nothing, which costs re-pulls, never access.
fn node_key(dir: &Path) -> Option<[u8; KEY_LEN]> {
    let path = dir.join(KEY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() == KEY_LEN => {
            let mut secret = [0u8; KEY_LEN];
            secret.copy_from_slice(&bytes);
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            {
                log::warn!("cannot restrict {}: {e}", path.display());
            }
            return Some(secret);
        }
        Ok(_) => log::warn!("replacing damaged credential digest key {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!("cannot read credential digest key {}: {e}", path.display()),
    }
    let secret = random_secret()?;
    if let Err(e) = write_key(dir, &path, &secret) {
        log::warn!(
            "cannot store credential digest key {}: {e}; images pulled with secrets in \
             earlier runs are verified again",
            path.display()
        );
    }
    Some(secret)
}

fn write_key(dir: &Path, path: &Path, secret: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::fsutil::write_atomic(path, secret, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_cred(name: &str, password: &str) -> Credential {
        Credential {
            username: "u".into(),
            password: password.into(),
            source: CredentialSource::Secret {
                namespace: "ns".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
        }
    }

    #[test]
    fn verification_decisions() {
        use VerificationPolicy::*;
        let good = secret_cred("good", "right");
        let same_elsewhere = secret_cred("copy", "right");
        let wrong = secret_cred("bad", "wrong");
        let records = PullRecords::in_memory();
        records.record("sha256:private", "reg.io/app", Some(&good));
        records.record("sha256:public", "reg.io/pub", None);
        let private = records.get("sha256:private", "reg.io/app");
        let public = records.get("sha256:public", "reg.io/pub");
        let renamed = records.get("sha256:private", "mirror.io/app");
        let preloaded = records.get("sha256:other", "reg.io/app");
        assert_eq!(preloaded, Pulled::Never);
        assert_eq!(renamed, Pulled::OtherRepository);
        let node = Credential {
            source: CredentialSource::Node,
            ..wrong.clone()
        };
        let cases = [
            (
                "preloaded image, default policy",
                NeverVerifyPreloadedImages,
                &preloaded,
                vec![],
                false,
            ),
            (
                "preloaded image, always verify",
                AlwaysVerify,
                &preloaded,
                vec![],
                true,
            ),
            (
                "anonymous pull is for everyone",
                NeverVerifyPreloadedImages,
                &public,
                vec![],
                false,
            ),
            (
                "secret pull, pod without credentials",
                NeverVerifyPreloadedImages,
                &private,
                vec![],
                true,
            ),
            (
                "secret pull, pod with the same secret",
                NeverVerifyPreloadedImages,
                &private,
                vec![good.clone()],
                false,
            ),
            (
                "secret pull, same credential in another secret",
                NeverVerifyPreloadedImages,
                &private,
                vec![same_elsewhere],
                false,
            ),
            (
                "secret pull, wrong credential",
                NeverVerifyPreloadedImages,
                &private,
                vec![wrong],
                true,
            ),
            (
                "secret pull, never verify",
                NeverVerify,
                &private,
                vec![],
                false,
            ),
            (
                "node credentials are for every pod",
                AlwaysVerify,
                &private,
                vec![node],
                false,
            ),
            (
                "same content preloaded under another name",
                NeverVerifyPreloadedImages,
                &renamed,
                vec![],
                false,
            ),
            (
                "another name, always verify",
                AlwaysVerify,
                &renamed,
                vec![good],
                true,
            ),
        ];
        for (name, policy, pulled, offered, want) in cases {
            let digest = |c: &Credential| records.digest(c);
            assert_eq!(
                must_pull(policy, false, pulled, &offered, digest),
                want,
                "{name}"
            );
        }
        // The allowlist exempts what it names, pulled by litelet or not.
        let allow = NeverVerifyAllowlistedImages;
        let digest = |c: &Credential| records.digest(c);
        assert!(
            !must_pull(allow, true, &private, &[], digest),
            "allowlisted"
        );
        assert!(
            must_pull(allow, false, &private, &[], digest),
            "not allowlisted, secret pull"
        );
        assert!(
            must_pull(allow, false, &preloaded, &[], digest),
            "not allowlisted, preloaded"
        );
    }

    #[test]
    fn allowlist_entries_and_matching() {
        for good in [
            "registry.k8s.io/pause",
            "reg.io:5000/team/*",
            "localhost/litelet/busybox",
        ] {
            assert_eq!(check_allowlist_entry(good), Ok(()), "{good}");
        }
        for bad in [
            "busybox",
            "reg.io/app:1",
            "reg.io/app@sha256:ab",
            "reg.io/*/app",
            "*",
            "",
        ] {
            assert!(check_allowlist_entry(bad).is_err(), "{bad}");
        }
        let list = vec![
            "registry.k8s.io/pause".to_owned(),
            "reg.io/team/*".to_owned(),
        ];
        assert!(is_allowlisted(&list, "registry.k8s.io/pause"));
        assert!(!is_allowlisted(&list, "registry.k8s.io/pause2"));
        assert!(is_allowlisted(&list, "reg.io/team/app"));
        assert!(is_allowlisted(&list, "reg.io/team/a/b"));
        assert!(!is_allowlisted(&list, "reg.io/teamwork"));
    }

    #[test]
    fn records_survive_a_restart_and_hold_no_credential() {
        let dir = tempfile::tempdir().unwrap();
        let records = PullRecords::load(dir.path());
        records.record(
            "sha256:img",
            "reg.io/app",
            Some(&secret_cred("s", "hunter2")),
        );
        let text = std::fs::read_to_string(dir.path().join("image_manager/pulled.json")).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        let again = PullRecords::load(dir.path());
        let Pulled::As(record) = again.get("sha256:img", "reg.io/app") else {
            panic!("the record is gone after a reload");
        };
        assert!(!record.node_wide);
        assert_eq!(record.secrets.len(), 1);
        assert!(!must_pull(
            VerificationPolicy::NeverVerifyPreloadedImages,
            false,
            &Pulled::As(record),
            &[secret_cred("s", "hunter2")],
            |c| again.digest(c)
        ));
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn plain_sha256(cred: &Credential) -> String {
        let input = format!("{}\0{}", cred.username, cred.password);
        let d = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
        d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The records and their key are readable by root only, and the file holds a
    /// keyed digest rather than the plain SHA-256 of the credential.
    #[test]
    fn records_and_key_are_private_and_digests_are_keyed() {
        let dir = tempfile::tempdir().unwrap();
        let records = PullRecords::load(dir.path());
        let cred = secret_cred("s", "hunter2");
        records.record("sha256:img", "reg.io/app", Some(&cred));
        let file = dir.path().join("image_manager/pulled.json");
        let key = dir.path().join("image_manager").join(KEY_FILE);
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&key), 0o600);
        assert_eq!(std::fs::read(&key).unwrap().len(), KEY_LEN);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains(&plain_sha256(&cred)), "{text}");
        assert!(text.contains(DIGEST_SCHEME), "{text}");
        // The key is made once: a reload digests the same way.
        let again = PullRecords::load(dir.path());
        assert_eq!(again.digest(&cred), records.digest(&cred));
    }

    /// A file written by an earlier version (world-readable, unkeyed SHA-256 digests)
    /// loads without error; the old digest matches nothing, so the image is verified
    /// again, and the file is rewritten without it, 0600.
    #[test]
    fn old_unkeyed_records_are_dropped_and_verified_again() {
        let dir = tempfile::tempdir().unwrap();
        let cred = secret_cred("s", "hunter2");
        let file = dir.path().join("image_manager/pulled.json");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let old = serde_json::json!({"sha256:img": {"reg.io/app": {"node_wide": false,
            "secrets": [{"namespace": "ns", "name": "s", "uid": "uid-s",
                         "credential_hash": plain_sha256(&cred)}]}}});
        std::fs::write(&file, old.to_string()).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();

        let records = PullRecords::load(dir.path());
        let pulled = records.get("sha256:img", "reg.io/app");
        assert!(must_pull(
            VerificationPolicy::NeverVerifyPreloadedImages,
            false,
            &pulled,
            std::slice::from_ref(&cred),
            |c| records.digest(c)
        ));
        assert_eq!(mode(&file), 0o600);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains(&plain_sha256(&cred)), "{text}");
        // After the re-pull the keyed digest is recorded and matches.
        records.record("sha256:img", "reg.io/app", Some(&cred));
        let pulled = records.get("sha256:img", "reg.io/app");
        assert!(!must_pull(
            VerificationPolicy::NeverVerifyPreloadedImages,
            false,
            &pulled,
            &[cred],
            |c| records.digest(c)
        ));
    }
}
