//! Encryption at rest of the pod data store, when the operator gives a key file
//! (`--checkpoint-secrets-key-file`, e.g. on removable media): ChaCha20-Poly1305
//! from `ring` (already the TLS provider, so no new crate). Each entry is sealed with
//! a fresh random 96-bit nonce and its file name as associated data, so an entry
//! cannot be passed off under another name; the tag also detects any damage.
//!
//! Sealed bytes: `nonce (12) || ciphertext || tag (16)`. Pure but for the random
//! nonce and [`SealKey::from_file`]. The key never reaches a log (`Debug` redacts).

use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// Bytes in a key.
pub const KEY_LEN: usize = 32;

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key file {path}: must hold 32 bytes, raw or as 64 hex digits (found {found} bytes)")]
    Length { path: PathBuf, found: usize },
}

/// Why an entry cannot be sealed or opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no random nonce available")]
    Random,
    #[error("sealed entry shorter than its nonce and tag")]
    Short,
    /// Another key, another name, or damaged bytes: the tag does not match.
    #[error("does not open with this key (another key, or damaged)")]
    Open,
}

/// The store's key.
pub struct SealKey(LessSafeKey);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(<redacted>)")
    }
}

/// The 32 key bytes of a key file's content: 32 raw bytes, or 64 hex digits with
/// surrounding whitespace (e.g. `head -c 32 /dev/urandom | xxd -p -c 64`).
fn key_bytes(content: &[u8]) -> Option<[u8; KEY_LEN]> {
    if let Ok(raw) = <[u8; KEY_LEN]>::try_from(content) {
        return Some(raw);
    }
    let text = std::str::from_utf8(content).ok()?.trim();
    if text.len() != 2 * KEY_LEN {
        return None;
    }
    let mut out = [0u8; KEY_LEN];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl SealKey {
    /// Reads the key file at `path` (see [`SealKey::parse`]). A file others may read
    /// is used, with a warning: the key guards every kept secret.
    pub fn from_file(path: &Path) -> Result<SealKey, KeyFileError> {
        let content = std::fs::read(path).map_err(|source| KeyFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        if let Ok(meta) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o077 != 0 {
                log::warn!(
                    "key file {} can be read by others than its owner; make it 0600",
                    path.display()
                );
            }
        }
        SealKey::parse(&content).ok_or(KeyFileError::Length {
            path: path.to_owned(),
            found: content.len(),
        })
    }

    /// A key from a key file's content: 32 raw bytes or 64 hex digits.
    pub fn parse(content: &[u8]) -> Option<SealKey> {
        let bytes = key_bytes(content)?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).ok()?;
        Some(SealKey(LessSafeKey::new(key)))
    }

    /// `plain` sealed under `name`.
    pub fn seal(&self, name: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = plain.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::Random)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// The plain bytes of `sealed`, which must have been sealed under `name`.
    pub fn open(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return Err(SealError::Short);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Short)?;
        let mut data = body.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut data)
            .map_err(|_| SealError::Open)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_holds_32_raw_bytes_or_64_hex_digits() {
        let raw = [7u8; 32];
        assert!(SealKey::parse(&raw).is_some());
        let hex = format!("{}\n", "0a".repeat(32));
        assert_eq!(key_bytes(hex.as_bytes()), Some([10u8; 32]));
        for bad in [&b""[..], &[1u8; 31], &[1u8; 33], "zz".repeat(32).as_bytes()] {
            assert!(SealKey::parse(bad).is_none(), "{bad:?}");
        }
        assert_eq!(
            format!("{:?}", SealKey::parse(&raw).unwrap()),
            "SealKey(<redacted>)"
        );
    }

    #[test]
    fn sealed_bytes_open_only_with_the_same_key_and_name_and_undamaged() {
        let key = SealKey::parse(&[1u8; 32]).unwrap();
        let other = SealKey::parse(&[2u8; 32]).unwrap();
        let sealed = key.seal("secret_ns_a", b"password").unwrap();
        assert!(
            !sealed.windows(8).any(|w| w == b"password"),
            "no plain text"
        );
        assert_eq!(key.open("secret_ns_a", &sealed).unwrap(), b"password");
        assert_eq!(other.open("secret_ns_a", &sealed), Err(SealError::Open));
        assert_eq!(key.open("secret_ns_b", &sealed), Err(SealError::Open));
        let mut damaged = sealed.clone();
        damaged[20] ^= 1;
        assert_eq!(key.open("secret_ns_a", &damaged), Err(SealError::Open));
        assert_eq!(
            key.open("secret_ns_a", &sealed[..20]),
            Err(SealError::Short)
        );
        assert_ne!(
            key.seal("secret_ns_a", b"password").unwrap(),
            sealed,
            "a fresh nonce each time"
        );
    }
}
