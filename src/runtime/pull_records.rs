//! Which credentials pulled each image (upstream's image pull manager, KEP-2535, for
//! `imagePullCredentialsVerificationPolicy`). A pod whose `IfNotPresent` image is
//! already on the node may use it only if the image was pulled without credentials or
//! with node-wide ones, or if the pod offers a credential that pulled it; otherwise
//! the image is pulled again with the pod's credentials, so a pod without access to
//! a private image cannot run it just because another pod pulled it.
//!
//! The decisions ([`requires_verification`], [`must_pull`], the allowlist) are pure. The records sit behind one short lock (pod
//! worker threads) and are written atomically to `<root-dir>/image_manager/
//! pulled.json` so they survive restarts: only secret coordinates and SHA-256 hashes
//! of credentials, never a credential.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::credentialprovider::{Credential, CredentialSource};

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
pub fn check_allowlist_entry(entry: &str) -> Result<(), String> {
    let path = entry.strip_suffix("/*").unwrap_or(entry);
    let last = path.rsplit('/').next().unwrap_or(path);
    if path.is_empty() || !path.contains('/') {
        return Err(format!("{entry:?}: must name a registry host and a path"));
    }
    if path.contains('*') || path.contains(char::is_whitespace) {
        return Err(format!(
            "{entry:?}: a wildcard is allowed only as a final \"/*\""
        ));
    }
    if path.contains('@') || last.contains(':') {
        return Err(format!("{entry:?}: must not have a tag or digest"));
    }
    Ok(())
}

/// True when `repository` (normalised, no tag) is on `allowlist`.
pub fn is_allowlisted(allowlist: &[String], repository: &str) -> bool {
    allowlist.iter().any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => repository.starts_with(prefix),
        None => repository == entry,
    })
}

/// A secret that pulled an image, with the hash of the credential it gave.
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
/// pod's matching credentials) before the pod may use it.
pub fn must_pull(
    policy: VerificationPolicy,
    allowlisted: bool,
    pulled: &Pulled,
    offered: &[Credential],
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
            let hash = cred.hash();
            record.secrets.iter().any(|s| s.credential_hash == hash)
        }
    };
    !offered.iter().any(accepted)
}

/// Image ID → repository (no tag or digest) → how it was pulled.
type Records = BTreeMap<String, BTreeMap<String, PullRecord>>;

/// The records, in memory and on disk.
pub struct PullRecords {
    path: Option<PathBuf>,
    records: Mutex<Records>,
}

impl PullRecords {
    /// Records kept only in memory (tests, standalone use).
    pub fn in_memory() -> PullRecords {
        PullRecords {
            path: None,
            records: Mutex::new(BTreeMap::new()),
        }
    }

    /// The records under `root_dir`; an unreadable file starts empty, with a warning.
    pub fn load(root_dir: &Path) -> PullRecords {
        let path = root_dir.join("image_manager").join("pulled.json");
        let records = match std::fs::read(&path) {
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
        PullRecords {
            path: Some(path),
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
                    credential_hash: credential.map(Credential::hash).unwrap_or_default(),
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

fn write_atomic(path: &Path, records: &Records) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec_pretty(records).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
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
            assert_eq!(must_pull(policy, false, pulled, &offered), want, "{name}");
        }
        // The allowlist exempts what it names, pulled by litelet or not.
        let allow = NeverVerifyAllowlistedImages;
        assert!(!must_pull(allow, true, &private, &[]), "allowlisted");
        assert!(
            must_pull(allow, false, &private, &[]),
            "not allowlisted, secret pull"
        );
        assert!(
            must_pull(allow, false, &preloaded, &[]),
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
            &[secret_cred("s", "hunter2")]
        ));
    }
}
