//! The allocation checkpoint: every admitted pod's allocated resources in one file,
//! `<root-dir>/allocated_pods_state` (upstream's name), so that a litelet restart
//! admits and runs pods at what the node admitted, not at whatever the API asks now.
//!
//! Written by `ResizeManager` (sync loop thread on admission, pod worker threads on
//! resize and removal) under its state lock, so writes never interleave.
//!
//! Crash safety: the new content goes to a temp file beside it, created exclusively
//! under a unique name (`fsutil::create_temp`: never an existing file or a planted
//! symlink), which is fsynced, renamed over the file, and the directory fsynced. A
//! crash at any instant leaves either the old or the new file complete (rename is
//! atomic); a half-written temp file is never read and is removed by a later write
//! (of another process). The steps are spelled out here rather than in
//! `fsutil::write_atomic` so that tests can stop between them. The file starts with a checksum line (FNV-1a
//! 64 of the JSON body) so that a damaged file is refused rather than half believed.
//!
//! Format: `litelet-allocations v1 <16 hex digits>\n{"pods":{"<uid>":{"containers":{...}}}}`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::allocation::PodAllocation;

/// The checkpoint's file name under `--root-dir`.
pub const CHECKPOINT_FILE: &str = "allocated_pods_state";
const MAGIC: &str = "litelet-allocations v1";

/// Allocations by pod UID.
pub type Allocations = BTreeMap<String, PodAllocation>;

/// A failed checkpoint read or write.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("allocation checkpoint {path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },
    #[error("allocation checkpoint {path} is damaged: {source}")]
    Corrupt { path: PathBuf, source: DecodeError },
}

/// Why a checkpoint's content cannot be believed.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("no header line")]
    NoHeader,
    #[error("header is not text")]
    HeaderNotText,
    #[error("unknown header {0:?}")]
    UnknownHeader(String),
    #[error("checksum mismatch")]
    Checksum,
    #[error("bad body: {0}")]
    Body(serde_json::Error),
}

#[derive(Serialize, Deserialize)]
struct Body {
    pods: Allocations,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The file content for `pods`.
pub fn encode(pods: &Allocations) -> Vec<u8> {
    let body = serde_json::to_vec(&Body { pods: pods.clone() }).unwrap_or_else(|_| {
        // Maps of strings to quantities always serialise; stay total anyway.
        b"{\"pods\":{}}".to_vec()
    });
    let mut out = format!("{MAGIC} {:016x}\n", fnv1a(&body)).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The allocations in a file's content.
pub fn decode(bytes: &[u8]) -> Result<Allocations, DecodeError> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or(DecodeError::NoHeader)?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| DecodeError::HeaderNotText)?;
    let sum = header
        .strip_prefix(MAGIC)
        .map(str::trim)
        .ok_or_else(|| DecodeError::UnknownHeader(header.to_owned()))?;
    let body = &bytes[newline + 1..];
    if format!("{:016x}", fnv1a(body)) != sum {
        return Err(DecodeError::Checksum);
    }
    serde_json::from_slice::<Body>(body)
        .map(|b| b.pods)
        .map_err(DecodeError::Body)
}

/// Where the checkpoint lives.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    path: PathBuf,
}

/// How far a write got; tests stop a write at each stage to play a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    /// Half the bytes are in the temp file.
    PartialTemp,
    /// The temp file is complete but not synced.
    TempWritten,
    /// The temp file is synced.
    TempSynced,
    /// The rename happened; the directory is not synced.
    Renamed,
    /// Everything.
    Done,
}

impl Checkpoint {
    /// The checkpoint under `root_dir`.
    pub fn new(root_dir: &Path) -> Checkpoint {
        Checkpoint {
            path: root_dir.join(CHECKPOINT_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, step: &'static str) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
        move |source| CheckpointError::Io {
            path: self.path.clone(),
            step,
            source,
        }
    }

    /// The stored allocations; none when the file does not exist yet.
    pub fn load(&self) -> Result<Allocations, CheckpointError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Allocations::new()),
            Err(e) => return Err(self.io("read")(e)),
        };
        decode(&bytes).map_err(|source| CheckpointError::Corrupt {
            path: self.path.clone(),
            source,
        })
    }

    /// Replaces the stored allocations, atomically.
    pub fn store(&self, pods: &Allocations) -> Result<(), CheckpointError> {
        self.write_until(&encode(pods), Stage::Done)
    }

    pub(crate) fn write_until(&self, bytes: &[u8], stop: Stage) -> Result<(), CheckpointError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(self.io("create directory"))?;
        let (tmp, mut file) =
            crate::fsutil::create_temp(&self.path, 0o600).map_err(self.io("create temp file"))?;
        if stop == Stage::PartialTemp {
            let half = &bytes[..bytes.len() / 2];
            return file.write_all(half).map_err(self.io("write temp file"));
        }
        file.write_all(bytes).map_err(self.io("write temp file"))?;
        if stop == Stage::TempWritten {
            return Ok(());
        }
        file.sync_all().map_err(self.io("sync temp file"))?;
        drop(file);
        if stop == Stage::TempSynced {
            return Ok(());
        }
        fs::rename(&tmp, &self.path).map_err(self.io("rename temp file"))?;
        if stop == Stage::Renamed {
            return Ok(());
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(self.io("sync directory"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::pod_resources::tests::{container, pod};

    fn allocations(cpu: &str) -> Allocations {
        let p = pod(
            vec![container("app", &[("cpu", cpu)], &[("memory", "64Mi")])],
            vec![],
        );
        Allocations::from([("uid-1".to_owned(), PodAllocation::of(&p))])
    }

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path());
        assert!(cp.load().unwrap().is_empty());
        cp.store(&allocations("250m")).unwrap();
        assert_eq!(cp.load().unwrap(), allocations("250m"));
        let text = fs::read_to_string(cp.path()).unwrap();
        assert!(text.starts_with("litelet-allocations v1 "), "{text}");
    }

    /// A crash at every stage of a write leaves the old or the new allocations, never
    /// an error or a mix.
    #[test]
    fn crash_at_any_stage_leaves_old_or_new() {
        let stages = [
            Stage::PartialTemp,
            Stage::TempWritten,
            Stage::TempSynced,
            Stage::Renamed,
            Stage::Done,
        ];
        for stage in stages {
            let dir = tempfile::tempdir().unwrap();
            let cp = Checkpoint::new(dir.path());
            cp.store(&allocations("250m")).unwrap();
            cp.write_until(&encode(&allocations("500m")), stage)
                .unwrap();
            let loaded = cp.load().unwrap();
            let want = if stage >= Stage::Renamed {
                "500m"
            } else {
                "250m"
            };
            assert_eq!(loaded, allocations(want), "crash after {stage:?}");
            // The next write after the "restart" works over any leftover temp file.
            cp.store(&allocations("1")).unwrap();
            assert_eq!(cp.load().unwrap(), allocations("1"), "{stage:?}");
        }
    }

    #[test]
    fn damage_is_reported_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path());
        let mut bytes = encode(&allocations("250m"));
        let last = bytes.len() - 3;
        bytes[last] ^= 0x20;
        fs::write(cp.path(), &bytes).unwrap();
        assert!(matches!(cp.load(), Err(CheckpointError::Corrupt { .. })));
        fs::write(cp.path(), b"{}").unwrap();
        assert!(matches!(cp.load(), Err(CheckpointError::Corrupt { .. })));
        assert!(decode(&encode(&Allocations::new())).unwrap().is_empty());
    }
}
