//! `tlsCipherSuites` and `tlsMinVersion` (`--tls-cipher-suites`, `--tls-min-version`):
//! Go's names, as the upstream kubelet reads them (`k8s.io/component-base/cli/flag`),
//! mapped onto what rustls (ring provider) offers. Pure; parsed once at start-up by
//! the config layer (a bad value refuses the start) and turned into the server's
//! crypto provider by [`TlsPolicy::provider`].
//!
//! As in Go, the list selects TLS 1.0–1.2 suites only: TLS 1.3 suites are not
//! configurable and always on. rustls speaks TLS 1.2 and 1.3 with AEAD suites and
//! ECDHE key exchange only, so of the suites Go knows, the RSA key exchange, CBC,
//! 3DES and RC4 ones cannot be offered: a list that names some of them alongside
//! suites rustls has (the CIS Benchmark's list does) is honoured by offering the
//! latter, with one warning naming the dropped ones; a list with none rustls can
//! offer is refused, naming them. A name Go does not know is refused, as upstream
//! refuses it. `VersionTLS10`/`VersionTLS11` as the minimum are accepted with a
//! warning: litelet never speaks below TLS 1.2, which only narrows what they allow.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, SupportedCipherSuite, SupportedProtocolVersion};

/// Go's cipher suite names (`tls.CipherSuites()`, `tls.InsecureCipherSuites()` and
/// the pre-Go 1.14 ChaCha20 names component-base still accepts), each with the
/// rustls suite it is, if rustls has it.
const GO_SUITES: &[(&str, Option<CipherSuite>)] = &[
    // TLS 1.3: always on, whatever the list says.
    (
        "TLS_AES_128_GCM_SHA256",
        Some(CipherSuite::TLS13_AES_128_GCM_SHA256),
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        Some(CipherSuite::TLS13_AES_256_GCM_SHA384),
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        Some(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ),
    // Go knows these; rustls has none of them (CBC, RSA key exchange, 3DES, RC4).
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", None),
    ("TLS_ECDHE_RSA_WITH_RC4_128_SHA", None),
    ("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", None),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", None),
    ("TLS_RSA_WITH_AES_256_GCM_SHA384", None),
    ("TLS_RSA_WITH_AES_128_CBC_SHA", None),
    ("TLS_RSA_WITH_AES_256_CBC_SHA", None),
    ("TLS_RSA_WITH_AES_128_CBC_SHA256", None),
    ("TLS_RSA_WITH_3DES_EDE_CBC_SHA", None),
    ("TLS_RSA_WITH_RC4_128_SHA", None),
];

/// The lowest TLS version the server speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3 (also what `VersionTLS10`/`VersionTLS11` get).
    #[default]
    Tls12,
    Tls13,
}

/// A `tlsCipherSuites`/`tlsMinVersion` value litelet cannot honour.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    #[error("tlsCipherSuites: unknown cipher suite {0:?}")]
    UnknownSuite(String),
    #[error(
        "tlsCipherSuites: none of the listed TLS 1.2 suites can be offered (rustls has no \
         RSA key exchange, CBC, 3DES or RC4 suites): {}",
        .0.join(", ")
    )]
    NoneUsable(Vec<String>),
    #[error("tlsMinVersion: unknown TLS version {0:?} (VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13)")]
    UnknownVersion(String),
}

/// What the server offers: TLS 1.2 suites (all of rustls's when `None`), always
/// every TLS 1.3 suite, from `min_version` up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPolicy {
    pub tls12_suites: Option<Vec<CipherSuite>>,
    pub min_version: MinVersion,
    /// Listed names left out because rustls cannot offer them (for the one warning).
    pub dropped: Vec<String>,
    /// True when a minimum below TLS 1.2 was asked for.
    pub raised_min_version: bool,
}

/// Reads Go's names (pure). An empty list keeps rustls's TLS 1.2 suites; an empty
/// version keeps the default (TLS 1.2).
pub fn parse(suites: &[String], min_version: &str) -> Result<TlsPolicy, CipherError> {
    let (min_version, raised_min_version) = match min_version.trim() {
        "" | "VersionTLS12" => (MinVersion::Tls12, false),
        "VersionTLS10" | "VersionTLS11" => (MinVersion::Tls12, true),
        "VersionTLS13" => (MinVersion::Tls13, false),
        other => return Err(CipherError::UnknownVersion(other.to_owned())),
    };
    let mut policy = TlsPolicy {
        min_version,
        raised_min_version,
        ..TlsPolicy::default()
    };
    if suites.iter().all(|s| s.trim().is_empty()) {
        return Ok(policy);
    }
    let mut tls12 = Vec::new();
    for name in suites.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let Some((_, suite)) = GO_SUITES.iter().find(|(go, _)| *go == name) else {
            return Err(CipherError::UnknownSuite(name.to_owned()));
        };
        match suite {
            Some(s) if is_tls13(*s) => {}
            Some(s) => tls12.push(*s),
            None => policy.dropped.push(name.to_owned()),
        }
    }
    let only_tls13_listed = tls12.is_empty() && policy.dropped.is_empty();
    if tls12.is_empty() && !only_tls13_listed && min_version == MinVersion::Tls12 {
        return Err(CipherError::NoneUsable(policy.dropped));
    }
    policy.tls12_suites = Some(tls12);
    Ok(policy)
}

fn is_tls13(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS13_AES_256_GCM_SHA384
            | CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    )
}

impl TlsPolicy {
    /// The ring provider with the suites this policy allows.
    pub fn provider(&self) -> Arc<CryptoProvider> {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(allowed) = &self.tls12_suites {
            provider.cipher_suites.retain(|s| match s {
                SupportedCipherSuite::Tls13(_) => true,
                SupportedCipherSuite::Tls12(_) => allowed.contains(&s.suite()),
            });
        }
        Arc::new(provider)
    }

    /// The protocol versions from the minimum up.
    pub fn versions(&self) -> &'static [&'static SupportedProtocolVersion] {
        static TLS13_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
        match self.min_version {
            MinVersion::Tls12 => rustls::DEFAULT_VERSIONS,
            MinVersion::Tls13 => TLS13_ONLY,
        }
    }

    /// What an operator should know about how the setting was read, if anything.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.dropped.is_empty() {
            out.push(format!(
                "tlsCipherSuites: not offering {} (rustls has no RSA key exchange, CBC, 3DES \
                 or RC4 suites); the other listed suites are",
                self.dropped.join(", ")
            ));
        }
        if self.raised_min_version {
            out.push(
                "tlsMinVersion: litelet speaks TLS 1.2 and 1.3 only; clients below TLS 1.2 \
                 are refused"
                    .to_owned(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests;
