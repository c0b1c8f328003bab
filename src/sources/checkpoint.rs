//! Node-local checkpoints of what the API server last told this node (edge
//! autonomy; design note `docs/autonomy.md`): the API source's pods and the
//! cluster's Services, so a litelet restarted while cut off from its API server can
//! keep running, restarting and probing its pods.
//!
//! One file per kind under `<root-dir>/checkpoints/` (directory 0700, files 0600):
//! a header line `<magic> v<version> <FNV-1a 64 of the body, 16 hex>` and a JSON body
//! `{"node", "resourceVersion", "items": {key: object}}`. Written atomically (temp
//! file, fsync, rename, directory fsync), so a crash at any instant leaves the old or
//! the new file. Reading is strict: a missing file is `Ok(None)`; another version, a
//! checksum mismatch, a bad body or another node's file is an error the caller logs
//! and ignores (never a crash, never a killed pod).
//!
//! Who calls it: `checkpoint/writer.rs` (the debounced writer threads) writes; the
//! `api-watch` and `services` threads read once, when their first list fails.
//! Encoding and decoding are pure; [`CheckpointFile`] is the thin file shell.

pub mod writer;

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The directory under `--root-dir` that holds every checkpoint of this module.
pub const CHECKPOINT_DIR: &str = "checkpoints";

/// One kind of checkpoint: its file name and format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// File name under [`CHECKPOINT_DIR`], also the header's magic word.
    pub name: &'static str,
    pub version: u32,
}

/// The API source's pods, by UID.
pub const API_PODS: Kind = Kind {
    name: "api-pods",
    version: 1,
};
/// The cluster's Services (for service variables), by `namespace/name`.
pub const SERVICES: Kind = Kind {
    name: "services",
    version: 1,
};

/// Where a source thread keeps its checkpoint; `None` in its options turns
/// checkpointing off (`--checkpoint-api-pods=false`, or no root dir in tests).
#[derive(Clone, Debug)]
pub struct CheckpointSpec {
    /// `--root-dir`; the files go under its [`CHECKPOINT_DIR`].
    pub root_dir: PathBuf,
    /// This node's name (written into the file, checked on load).
    pub node: String,
    pub debounce: writer::Debounce,
}

impl CheckpointSpec {
    pub fn new(root_dir: &Path, node: &str) -> Self {
        CheckpointSpec {
            root_dir: root_dir.to_owned(),
            node: node.to_owned(),
            debounce: writer::Debounce::default(),
        }
    }

    /// Starts the writer thread of `kind` (named `ckpt-<kind>`).
    pub fn start<V: Serialize + Send + 'static>(
        &self,
        kind: Kind,
    ) -> std::io::Result<(CheckpointFile, writer::Writer<V>)> {
        let file = CheckpointFile::new(&self.root_dir, kind);
        let (w, _thread) = writer::spawn(
            &format!("ckpt-{}", kind.name),
            file.clone(),
            self.node.clone(),
            self.debounce,
        )?;
        Ok((file, w))
    }
}

/// What a checkpoint holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contents<V> {
    /// The node that wrote it; another node's file is refused.
    pub node: String,
    /// The resourceVersion of the list or event the items reflect.
    #[serde(rename = "resourceVersion", default)]
    pub resource_version: Option<String>,
    pub items: BTreeMap<String, V>,
}

/// Why a checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {path}: {step}: {source}")]
    Io {
        path: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },
    #[error("checkpoint {path} is damaged: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("checkpoint {path} has another format ({found:?}); ignored")]
    Stale { path: PathBuf, found: String },
    #[error("checkpoint {path} belongs to node {node:?}, not this one; ignored")]
    OtherNode { path: PathBuf, node: String },
    #[error("checkpoint {path}: cannot encode: {reason}")]
    Encode { path: PathBuf, reason: String },
}

/// A decode failure, before the path is known.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Written by another format version (or another kind).
    Stale(String),
    Corrupt(String),
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn header_prefix(kind: Kind) -> String {
    format!("litelet-{} v{}", kind.name, kind.version)
}

/// The file content for `contents`.
pub fn encode<V: Serialize>(kind: Kind, contents: &Contents<V>) -> Result<Vec<u8>, String> {
    let body = serde_json::to_vec(contents).map_err(|e| e.to_string())?;
    let mut out = format!("{} {:016x}\n", header_prefix(kind), fnv1a(&body)).into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

/// The contents of a file written by [`encode`] for `kind`.
pub fn decode<V: DeserializeOwned>(kind: Kind, bytes: &[u8]) -> Result<Contents<V>, DecodeError> {
    let corrupt = |s: &str| DecodeError::Corrupt(s.to_owned());
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no header line"))?;
    let header =
        std::str::from_utf8(&bytes[..newline]).map_err(|_| corrupt("header is not text"))?;
    let (format, sum) = header
        .rsplit_once(' ')
        .ok_or_else(|| corrupt("header has no checksum"))?;
    if format != header_prefix(kind) {
        // Same kind, other version: an older or newer litelet wrote it.
        if format.starts_with(&format!("litelet-{} v", kind.name)) {
            return Err(DecodeError::Stale(format.to_owned()));
        }
        return Err(DecodeError::Corrupt(format!("unknown header {format:?}")));
    }
    let body = &bytes[newline + 1..];
    if format!("{:016x}", fnv1a(body)) != sum {
        return Err(corrupt("checksum mismatch"));
    }
    serde_json::from_slice(body).map_err(|e| DecodeError::Corrupt(format!("bad body: {e}")))
}

/// One checkpoint file on disk.
#[derive(Clone, Debug)]
pub struct CheckpointFile {
    path: PathBuf,
    kind: Kind,
}

impl CheckpointFile {
    /// The `kind` checkpoint under `root_dir`.
    pub fn new(root_dir: &Path, kind: Kind) -> CheckpointFile {
        CheckpointFile {
            path: root_dir.join(CHECKPOINT_DIR).join(kind.name),
            kind,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn io(&self, step: &'static str) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
        move |source| CheckpointError::Io {
            path: self.path.clone(),
            step,
            source,
        }
    }

    /// The stored contents for `node`; `Ok(None)` when there is no file.
    pub fn load<V: DeserializeOwned>(
        &self,
        node: &str,
    ) -> Result<Option<Contents<V>>, CheckpointError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io("read")(e)),
        };
        let contents: Contents<V> = decode(self.kind, &bytes).map_err(|e| match e {
            DecodeError::Stale(found) => CheckpointError::Stale {
                path: self.path.clone(),
                found,
            },
            DecodeError::Corrupt(reason) => CheckpointError::Corrupt {
                path: self.path.clone(),
                reason,
            },
        })?;
        if contents.node != node {
            return Err(CheckpointError::OtherNode {
                path: self.path.clone(),
                node: contents.node,
            });
        }
        Ok(Some(contents))
    }

    /// Replaces the stored contents, atomically.
    pub fn store<V: Serialize>(&self, contents: &Contents<V>) -> Result<(), CheckpointError> {
        let bytes = encode(self.kind, contents).map_err(|reason| CheckpointError::Encode {
            path: self.path.clone(),
            reason,
        })?;
        self.write_bytes(&bytes)
    }

    /// Temp file (0600), fsync, rename over the file, fsync the directory.
    pub(crate) fn write_bytes(&self, bytes: &[u8]) -> Result<(), CheckpointError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(self.io("create directory"))?;
        crate::fsutil::write_atomic(&self.path, bytes, 0o600).map_err(self.io("write atomically"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn contents(node: &str) -> Contents<String> {
        Contents {
            node: node.into(),
            resource_version: Some("42".into()),
            items: BTreeMap::from([("a".into(), "pod a".into()), ("b".into(), "pod b".into())]),
        }
    }

    #[test]
    fn round_trips_and_a_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        assert!(file.load::<String>("n1").unwrap().is_none());
        file.store(&contents("n1")).unwrap();
        assert_eq!(file.load::<String>("n1").unwrap(), Some(contents("n1")));
        let mode = fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "checkpoint files are private");
        let dir_mode = fs::metadata(file.path().parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
    }

    #[test]
    fn a_damaged_file_is_refused_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        file.store(&contents("n1")).unwrap();
        let mut bytes = fs::read(file.path()).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x20;
        fs::write(file.path(), &bytes).unwrap();
        let err = file.load::<String>("n1").unwrap_err();
        assert!(matches!(err, CheckpointError::Corrupt { .. }), "{err}");
        for garbage in [
            &b""[..],
            b"no newline",
            b"litelet-api-pods v1\n{}",
            b"\xff\xfe\n{}",
        ] {
            fs::write(file.path(), garbage).unwrap();
            assert!(
                matches!(
                    file.load::<String>("n1"),
                    Err(CheckpointError::Corrupt { .. })
                ),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn another_format_version_or_node_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        let newer = Kind {
            version: 2,
            ..API_PODS
        };
        fs::create_dir_all(file.path().parent().unwrap()).unwrap();
        fs::write(file.path(), encode(newer, &contents("n1")).unwrap()).unwrap();
        assert!(matches!(
            file.load::<String>("n1"),
            Err(CheckpointError::Stale { .. })
        ));
        file.store(&contents("other")).unwrap();
        assert!(matches!(
            file.load::<String>("n1"),
            Err(CheckpointError::OtherNode { .. })
        ));
        // A services file is not a pods file.
        fs::write(file.path(), encode(SERVICES, &contents("n1")).unwrap()).unwrap();
        assert!(matches!(
            file.load::<String>("n1"),
            Err(CheckpointError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_interrupted_write_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path(), API_PODS);
        file.store(&contents("n1")).unwrap();
        // A crash after the temp file was half written: only the temp is touched.
        let tmp = file.path().with_file_name(".api-pods.tmp");
        fs::write(&tmp, b"litelet-api-pods v1 00").unwrap();
        assert_eq!(file.load::<String>("n1").unwrap(), Some(contents("n1")));
        file.store(&contents("n1")).unwrap();
        assert!(
            !tmp.exists(),
            "the next write replaces and renames the temp file"
        );
    }
}
