//! What one entry of the pod data store holds and how it is written (pure): a
//! configMap or secret a pod references ([`KeptObject`], with the resourceVersion it
//! was read at and the pods that use it) or a pod's service-account token
//! ([`KeptToken`], with its expiry), one file each.
//!
//! File names say what an entry is (`secret_<namespace>_<name>`,
//! `configmap_<namespace>_<name>`, `token_<pod uid>_<16 hex digits>`); API names
//! cannot hold `_`, so no two entries share a name. The content is the checkpoint
//! format of `sources::checkpoint` (header with an FNV-1a checksum, JSON body naming
//! the node and the entry under its file name), sealed whole when a key is given
//! (`seal.rs`). A file whose checksum, seal, node or name does not match is
//! [`Damage`]: the store treats it as absent.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::seal::SealKey;
use crate::sources::checkpoint::{self, Contents, DecodeError, Kind};

/// The format of a plain entry (inside a sealed one too).
pub const FORMAT: Kind = Kind {
    name: "pod-data",
    version: 1,
};
/// The first line of a sealed entry; the sealed bytes follow.
const SEALED_HEADER: &[u8] = b"litelet-pod-data-sealed v1\n";

/// The two kinds of object pods read data from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        }
    }
}

/// A configMap or secret as pods use it, read at `resource_version`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptObject {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// Every key with its bytes (base64 on disk).
    #[serde(with = "base64_map")]
    pub files: BTreeMap<String, Vec<u8>>,
    /// The keys usable as environment values.
    pub env: BTreeMap<String, String>,
    /// UIDs of the pods that use it; the entry goes with the last one.
    #[serde(default)]
    pub pods: BTreeSet<String>,
}

// By hand: the data never reaches a log.
impl std::fmt::Debug for KeptObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptObject")
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("resource_version", &self.resource_version)
            .field("keys", &self.files.keys().collect::<Vec<_>>())
            .field("pods", &self.pods)
            .finish_non_exhaustive()
    }
}

/// What one projected token is requested for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenKey {
    pub pod_uid: String,
    pub namespace: String,
    pub service_account: String,
    pub audience: String,
    pub expiration_seconds: i64,
}

/// A pod's token as the TokenRequest answered it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptToken {
    #[serde(flatten)]
    pub key: TokenKey,
    pub token: String,
    /// Unix seconds: when the node received it.
    pub received: i64,
    /// Unix seconds: the answer's `expirationTimestamp`.
    pub expires: i64,
}

// By hand: the token never reaches a log.
impl std::fmt::Debug for KeptToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptToken")
            .field("key", &self.key)
            .field("received", &self.received)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// One entry of the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Entry {
    Object(KeptObject),
    Token(KeptToken),
}

/// A name that cannot be part of an entry's file name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} cannot name a kept entry")]
pub struct BadName {
    pub what: &'static str,
    pub value: String,
}

/// Why a file is not a usable entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("{0}")]
    Format(String),
    #[error("sealed, but no key file is configured")]
    SealedWithoutKey,
    #[error("not sealed, but a key file is configured")]
    PlainWithKey,
    #[error(transparent)]
    Seal(#[from] super::seal::SealError),
    #[error("written by node {0:?}")]
    OtherNode(String),
    #[error("holds no entry named after its file")]
    Misnamed,
}

/// `value` when it may be part of a file name: an API name (lowercase letters,
/// digits, `-`, `.`) or a UID (also uppercase), not starting with `.`.
fn part<'a>(what: &'static str, value: &'a str) -> Result<&'a str, BadName> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && !value.starts_with('.')
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    match ok {
        true => Ok(value),
        false => Err(BadName {
            what,
            value: value.to_owned(),
        }),
    }
}

/// The file name of a configMap's or secret's entry.
pub fn object_file(kind: ObjectKind, namespace: &str, name: &str) -> Result<String, BadName> {
    Ok(format!(
        "{}_{}_{}",
        kind.as_str(),
        part("namespace", namespace)?,
        part("name", name)?
    ))
}

/// The prefix of every token file of pod `uid`.
pub fn token_prefix(uid: &str) -> Result<String, BadName> {
    Ok(format!("token_{}_", part("pod uid", uid)?))
}

/// The file name of a token's entry: the pod and a digest of the rest of its key
/// (an audience may hold any character).
pub fn token_file(key: &TokenKey) -> Result<String, BadName> {
    let rest = format!(
        "{}\n{}\n{}\n{}",
        key.namespace, key.service_account, key.audience, key.expiration_seconds
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, rest.as_bytes());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(format!("{}{hex}", token_prefix(&key.pod_uid)?))
}

/// The bytes of entry `entry` in file `name` written by `node`.
pub fn encode(
    name: &str,
    node: &str,
    entry: &Entry,
    key: Option<&SealKey>,
) -> Result<Vec<u8>, String> {
    let resource_version = match entry {
        Entry::Object(o) => Some(o.resource_version.clone()),
        Entry::Token(_) => None,
    };
    let contents = Contents {
        node: node.to_owned(),
        resource_version,
        items: BTreeMap::from([(name.to_owned(), entry.clone())]),
    };
    let plain = checkpoint::encode(FORMAT, &contents)?;
    let Some(key) = key else { return Ok(plain) };
    let sealed = key.seal(name, &plain).map_err(|e| e.to_string())?;
    let mut out = SEALED_HEADER.to_vec();
    out.extend_from_slice(&sealed);
    Ok(out)
}

/// The entry in file `name`, which must have been written by `node` (with `key`,
/// when one is configured).
pub fn decode(
    name: &str,
    node: &str,
    bytes: &[u8],
    key: Option<&SealKey>,
) -> Result<Entry, Damage> {
    let plain = match (bytes.strip_prefix(SEALED_HEADER), key) {
        (Some(sealed), Some(key)) => key.open(name, sealed)?,
        (Some(_), None) => return Err(Damage::SealedWithoutKey),
        (None, Some(_)) => return Err(Damage::PlainWithKey),
        (None, None) => bytes.to_vec(),
    };
    let contents: Contents<Entry> = checkpoint::decode(FORMAT, &plain).map_err(|e| match e {
        DecodeError::Stale(found) => Damage::Format(format!("another format ({found})")),
        DecodeError::Corrupt(why) => Damage::Format(why),
    })?;
    if contents.node != node {
        return Err(Damage::OtherNode(contents.node));
    }
    let mut items = contents.items;
    match (items.remove(name), items.is_empty()) {
        (Some(entry), true) => Ok(entry),
        _ => Err(Damage::Misnamed),
    }
}

/// Byte maps as base64 text.
mod base64_map {
    use std::collections::BTreeMap;

    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::api::base64;
    use crate::api::base64::encode;

    pub fn serialize<S: Serializer>(
        map: &BTreeMap<String, Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let text: BTreeMap<&String, String> = map.iter().map(|(k, v)| (k, encode(v))).collect();
        text.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let text = BTreeMap::<String, String>::deserialize(d)?;
        text.into_iter()
            .map(|(k, v)| match base64::decode(&v) {
                Ok(bytes) => Ok((k, bytes)),
                Err(e) => Err(D::Error::custom(format!("key {k:?}: {e}"))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn object(pods: &[&str]) -> KeptObject {
        KeptObject {
            kind: ObjectKind::Secret,
            namespace: "edge".into(),
            name: "db".into(),
            uid: "u-1".into(),
            resource_version: "42".into(),
            secret_type: Some("Opaque".into()),
            files: BTreeMap::from([("password".into(), b"s3cr\xffet".to_vec())]),
            env: BTreeMap::from([("password".into(), "s3cr?et".into())]),
            pods: pods.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn token() -> KeptToken {
        KeptToken {
            key: TokenKey {
                pod_uid: "pod-1".into(),
                namespace: "edge".into(),
                service_account: "default".into(),
                audience: "https://x y/\n".into(),
                expiration_seconds: 3607,
            },
            token: "eyJhbGciOi.payload.sig".into(),
            received: 1_700_000_000,
            expires: 1_700_003_607,
        }
    }

    #[test]
    fn file_names_say_what_an_entry_is_and_refuse_what_could_escape() {
        assert_eq!(
            object_file(ObjectKind::Secret, "edge", "db.v2").unwrap(),
            "secret_edge_db.v2"
        );
        assert_eq!(
            object_file(ObjectKind::ConfigMap, "edge", "kube-root-ca.crt").unwrap(),
            "configmap_edge_kube-root-ca.crt"
        );
        for (ns, name) in [
            ("edge", "../x"),
            ("a/b", "x"),
            ("edge", ""),
            ("e_1", "x"),
            ("edge", ".x"),
        ] {
            assert!(
                object_file(ObjectKind::Secret, ns, name).is_err(),
                "{ns} {name}"
            );
        }
        let t = token();
        let file = token_file(&t.key).unwrap();
        assert!(file.starts_with("token_pod-1_"), "{file}");
        assert_eq!(file.len(), "token_pod-1_".len() + 16);
        let mut other = t.key.clone();
        other.audience = "vault".into();
        assert_ne!(token_file(&other).unwrap(), file, "one file per audience");
        assert!(
            !format!("{t:?}").contains("eyJ"),
            "the token is not in Debug"
        );
        assert!(!format!("{:?}", object(&[])).contains("s3cr"));
    }

    #[test]
    fn entries_round_trip_plain_and_sealed() {
        let key = SealKey::parse(&[9u8; 32]).unwrap();
        for entry in [Entry::Object(object(&["p1", "p2"])), Entry::Token(token())] {
            let name = "secret_edge_db";
            for k in [None, Some(&key)] {
                let bytes = encode(name, "n1", &entry, k).unwrap();
                assert_eq!(decode(name, "n1", &bytes, k).unwrap(), entry);
            }
            let sealed = encode(name, "n1", &entry, Some(&key)).unwrap();
            assert!(!sealed.windows(3).any(|w| w == b"eyJ" || w == b"s3c"));
        }
    }

    #[test]
    fn a_damaged_misplaced_or_foreign_entry_is_refused() {
        let key = SealKey::parse(&[9u8; 32]).unwrap();
        let entry = Entry::Object(object(&["p1"]));
        let plain = encode("secret_edge_db", "n1", &entry, None).unwrap();
        let mut flipped = plain.clone();
        let at = flipped.len() - 5;
        flipped[at] ^= 0x01;
        let sealed = encode("secret_edge_db", "n1", &entry, Some(&key)).unwrap();
        let cases: [(&str, &[u8], &str, Option<&SealKey>); 6] = [
            ("bit flip", &flipped, "secret_edge_db", None),
            ("other node", &plain, "secret_edge_db", None),
            ("renamed", &plain, "secret_edge_other", None),
            ("sealed, no key", &sealed, "secret_edge_db", None),
            ("plain, key", &plain, "secret_edge_db", Some(&key)),
            ("sealed, renamed", &sealed, "secret_edge_other", Some(&key)),
        ];
        for (what, bytes, name, k) in cases {
            let node = if what == "other node" { "n2" } else { "n1" };
            assert!(decode(name, node, bytes, k).is_err(), "{what}");
        }
        assert!(decode("x", "n1", b"", None).is_err());
    }
}
