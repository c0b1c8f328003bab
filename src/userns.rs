//! User namespaces for `hostUsers: false` pods (upstream `pkg/kubelet/userns`): each
//! such pod gets 65536 host IDs of its own, mapped to IDs 0-65535 inside, from the
//! node's range for pods (the `kubelet` entry of `/etc/subuid` and `/etc/subgid`, else
//! upstream's default: from 65536 to the end of the 32-bit ID space). The runtime
//! creates the namespace from the mappings in the sandbox's and containers'
//! `NamespaceOption.userns_options`.
//!
//! The allocation lives on disk only, upstream's record `<root>/pods/<uid>/userns`
//! (JSON, written atomically): a pod keeps its range across restarts of litelet, and a
//! range is free again once its pod's directory is removed after the pod finished, so
//! there is no release path to get wrong. Allocating reads the records of every pod
//! directory under one lock (pod worker threads); only pods with `hostUsers: false` do.
//! A record that cannot be read fails the pod's sandbox: a pod that asked for its own
//! user namespace never runs in the host's.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use protobuf::EnumOrUnknown;
use serde::{Deserialize, Serialize};

use crate::cri::pb;

/// IDs each pod gets (upstream's default `idsPerPod`).
pub const IDS_PER_POD: u32 = 1 << 16;
/// The record's file name in a pod's directory.
pub const RECORD: &str = "userns";
/// Upstream's message when the runtime (handler) cannot create user namespaces
/// (kubelet userns manager, kubernetes#131623).
pub const NO_RUNTIME_SUPPORT: &str =
    "can't set `spec.hostUsers: false`, runtime does not support user namespaces";

/// Why a pod's user namespace cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid user namespace record {path}: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("invalid user namespace record {path}: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "invalid user namespace record {path}: want one identical UID and GID mapping of 65536 IDs from 0"
    )]
    Mappings { path: PathBuf },
    #[error("no free range of {IDS_PER_POD} IDs left for pod user namespaces")]
    Exhausted,
    #[error("invalid kubelet ID range in {file}: {message}")]
    Range { file: String, message: String },
    /// The node has no usable range (found at start-up); no pod gets a user namespace.
    #[error("invalid kubelet ID range in /etc/subuid, /etc/subgid: {0}")]
    NoRange(#[source] Arc<UsernsError>),
}

/// The host IDs pods may be given: `[first, first + len)`, both multiples of 65536.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub first: u32,
    pub len: u32,
}

impl Default for IdRange {
    /// Upstream's default when the node has no `kubelet` sub-ID entries.
    fn default() -> IdRange {
        IdRange {
            first: IDS_PER_POD,
            len: u32::MAX - IDS_PER_POD + 1,
        }
    }
}

/// The `kubelet` entry of a subuid/subgid file (`name:first:count` lines).
fn kubelet_entry(text: &str, file: &str) -> Result<Option<IdRange>, UsernsError> {
    let bad = |message: String| UsernsError::Range {
        file: file.to_owned(),
        message,
    };
    for line in text.lines() {
        let mut parts = line.trim().split(':');
        if parts.next() != Some("kubelet") {
            continue;
        }
        let (Some(first), Some(len)) = (parts.next(), parts.next()) else {
            return Err(bad(format!("{line:?} is not name:first:count")));
        };
        let first: u32 = first
            .parse()
            .map_err(|_| bad(format!("bad first ID in {line:?}")))?;
        let len: u32 = len
            .parse()
            .map_err(|_| bad(format!("bad count in {line:?}")))?;
        if first % IDS_PER_POD != 0 || len % IDS_PER_POD != 0 || len == 0 {
            return Err(bad(format!(
                "{line:?}: first ID and count must be non-zero multiples of {IDS_PER_POD}"
            )));
        }
        return Ok(Some(IdRange { first, len }));
    }
    Ok(None)
}

/// The range for pods from the contents of `/etc/subuid` and `/etc/subgid` (either
/// may be missing: ""): the `kubelet` entries, which must agree, else the default.
pub fn kubelet_range(subuid: &str, subgid: &str) -> Result<IdRange, UsernsError> {
    let uids = kubelet_entry(subuid, "/etc/subuid")?;
    let gids = kubelet_entry(subgid, "/etc/subgid")?;
    match (uids, gids) {
        (None, None) => Ok(IdRange::default()),
        (Some(u), Some(g)) if u == g => Ok(u),
        _ => Err(UsernsError::Range {
            file: "/etc/subuid, /etc/subgid".into(),
            message: "the kubelet entries must exist in both and be equal".into(),
        }),
    }
}

/// One mapping as upstream's record spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mapping {
    container_id: u32,
    host_id: u32,
    length: u32,
}

/// Upstream's `userns` record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    uid_mappings: Vec<Mapping>,
    gid_mappings: Vec<Mapping>,
}

impl Record {
    fn for_block(first_host_id: u32) -> Record {
        let m = Mapping {
            container_id: 0,
            host_id: first_host_id,
            length: IDS_PER_POD,
        };
        Record {
            uid_mappings: vec![m],
            gid_mappings: vec![m],
        }
    }

    /// The one host ID range this record holds (as upstream requires: one mapping,
    /// the same for UIDs and GIDs, from container ID 0).
    fn host_id(&self, path: &Path) -> Result<u32, UsernsError> {
        match (self.uid_mappings.as_slice(), self.gid_mappings.as_slice()) {
            ([u], [g]) if u == g && u.container_id == 0 && u.length == IDS_PER_POD => Ok(u.host_id),
            _ => Err(UsernsError::Mappings {
                path: path.to_owned(),
            }),
        }
    }

    fn to_cri(&self) -> pb::UserNamespace {
        let ids = |ms: &[Mapping]| {
            ms.iter()
                .map(|m| pb::IDMapping {
                    host_id: m.host_id,
                    container_id: m.container_id,
                    length: m.length,
                    ..Default::default()
                })
                .collect()
        };
        pb::UserNamespace {
            mode: EnumOrUnknown::new(pb::NamespaceMode::POD),
            uids: ids(&self.uid_mappings),
            gids: ids(&self.gid_mappings),
            ..Default::default()
        }
    }
}

/// The lowest block of `range` no record uses (pure).
fn pick_free(range: IdRange, used: &BTreeSet<u32>) -> Option<u32> {
    let blocks = range.len / IDS_PER_POD;
    (0..blocks)
        .map(|i| range.first + i * IDS_PER_POD)
        .find(|host_id| !used.contains(host_id))
}

/// Hands out and remembers pods' ID ranges; shared by the pod workers.
pub struct UsernsManager {
    pods_dir: PathBuf,
    /// The node's range, or why there is none (a bad `/etc/subuid` entry): then no
    /// pod gets a user namespace.
    range: Result<IdRange, Arc<UsernsError>>,
    lock: Mutex<()>,
}

impl UsernsManager {
    /// Records live under `pods_dir/<uid>/userns`.
    pub fn new(pods_dir: PathBuf, range: Result<IdRange, UsernsError>) -> UsernsManager {
        UsernsManager {
            pods_dir,
            range: range.map_err(Arc::new),
            lock: Mutex::new(()),
        }
    }

    fn read(path: &Path) -> Result<Option<Record>, UsernsError> {
        match std::fs::read(path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| UsernsError::Decode {
                        path: path.to_owned(),
                        source,
                    })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(UsernsError::Read {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Host ranges in use by every pod directory's record but `except`'s.
    fn used(&self, except: &str) -> Result<BTreeSet<u32>, UsernsError> {
        let mut used = BTreeSet::new();
        let entries = match std::fs::read_dir(&self.pods_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(used),
            Err(source) => {
                return Err(UsernsError::Read {
                    path: self.pods_dir.clone(),
                    source,
                })
            }
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy() == except {
                continue;
            }
            let path = entry.path().join(RECORD);
            if let Some(record) = Self::read(&path)? {
                used.insert(record.host_id(&path)?);
            }
        }
        Ok(used)
    }

    /// The user namespace of pod `uid`: its recorded range, else a new one.
    pub fn mappings(&self, uid: &str) -> Result<pb::UserNamespace, UsernsError> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let path = self.pods_dir.join(uid).join(RECORD);
        if let Some(record) = Self::read(&path)? {
            record.host_id(&path)?;
            return Ok(record.to_cri());
        }
        let range = self.range.clone().map_err(UsernsError::NoRange)?;
        let host_id = pick_free(range, &self.used(uid)?).ok_or(UsernsError::Exhausted)?;
        let record = Record::for_block(host_id);
        let bytes = serde_json::to_vec(&record).map_err(|source| UsernsError::Encode {
            path: path.clone(),
            source,
        })?;
        let write = |source| UsernsError::Write {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(self.pods_dir.join(uid)).map_err(write)?;
        crate::fsutil::write_atomic(&path, &bytes, 0o600).map_err(write)?;
        Ok(record.to_cri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_range_comes_from_subuid_and_subgid_or_upstreams_default() {
        assert_eq!(kubelet_range("", "").unwrap(), IdRange::default());
        assert_eq!(IdRange::default().first, 65536);
        let entry = "root:100000:65536\nkubelet:65536:7208960\n";
        assert_eq!(
            kubelet_range(entry, entry).unwrap(),
            IdRange {
                first: 65536,
                len: 7208960
            }
        );
        assert!(kubelet_range(entry, "").is_err(), "only one file");
        assert!(kubelet_range("kubelet:1000:65536", "kubelet:1000:65536").is_err());
    }

    #[test]
    fn pods_get_distinct_ranges_kept_across_calls_and_freed_with_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("pods");
        let m = UsernsManager::new(
            pods.clone(),
            Ok(IdRange {
                first: 65536,
                len: 2 * IDS_PER_POD,
            }),
        );
        let a = m.mappings("pod-a").unwrap();
        assert_eq!(a.mode.enum_value_or_default(), pb::NamespaceMode::POD);
        assert_eq!(
            (a.uids[0].host_id, a.uids[0].container_id, a.uids[0].length),
            (65536, 0, 65536)
        );
        assert_eq!(a.uids, a.gids);
        let b = m.mappings("pod-b").unwrap();
        assert_eq!(b.uids[0].host_id, 131072);
        assert_eq!(m.mappings("pod-a").unwrap(), a, "the record is kept");
        assert!(matches!(m.mappings("pod-c"), Err(UsernsError::Exhausted)));
        // A restarted litelet reads the same records.
        let again = UsernsManager::new(pods.clone(), Ok(IdRange::default()));
        assert_eq!(again.mappings("pod-b").unwrap(), b);
        // pod-a's directory is removed once it finished: its range is free again.
        std::fs::remove_dir_all(pods.join("pod-a")).unwrap();
        assert_eq!(m.mappings("pod-c").unwrap().uids[0].host_id, 65536);
    }

    #[test]
    fn a_damaged_record_fails_rather_than_sharing_a_range() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("pods");
        std::fs::create_dir_all(pods.join("pod-a")).unwrap();
        std::fs::write(pods.join("pod-a").join(RECORD), b"{not json").unwrap();
        let m = UsernsManager::new(pods, Ok(IdRange::default()));
        assert!(matches!(
            m.mappings("pod-a"),
            Err(UsernsError::Decode { .. })
        ));
        assert!(
            matches!(m.mappings("pod-b"), Err(UsernsError::Decode { .. })),
            "a range in use cannot be known, so none is handed out"
        );
    }
}
