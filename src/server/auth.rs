//! Authentication of node server requests, as upstream's delegating authenticator:
//! 1. an x509 client certificate verified against `--client-ca-file` (user = CN,
//!    groups = O);
//! 2. a bearer token, asked of the API server through TokenReview and cached
//!    (success 2 min, rejection 10 s, keyed by the token's SHA-256, never the token);
//! 3. with neither credential, `system:anonymous` when `--anonymous-auth` is on.
//!
//! Like upstream's union: the first method that succeeds wins; a credential that is
//! presented but fails (untrusted certificate, unknown token, review error) gives 401
//! even when anonymous access is on. Authenticated users get `system:authenticated`.
//! Called from connection threads; the cache is the only shared state.

use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

use crate::api::review::{TokenReview, UserInfo, TOKEN_REVIEWS_PATH};
use crate::api::ApiClient;
use crate::server::cache::TtlCache;
use crate::server::tls::ClientCertCheck;
use crate::server::x509;

/// How long a TokenReview answer is trusted.
#[derive(Clone, Copy, Debug)]
pub struct TokenCacheTtl {
    pub authenticated: Duration,
    pub rejected: Duration,
}

impl Default for TokenCacheTtl {
    fn default() -> Self {
        TokenCacheTtl {
            authenticated: Duration::from_secs(120),
            rejected: Duration::from_secs(10),
        }
    }
}

/// Why a request has no user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    #[error("no credentials and anonymous access is off")]
    NoCredentials,
    #[error("client certificate not trusted: {0}")]
    BadCertificate(String),
    #[error("bearer token not authenticated")]
    BadToken,
    #[error("token review failed: {0}")]
    Review(String),
}

pub struct Authenticator {
    client_certs: Option<ClientCertCheck>,
    api: Option<ApiClient>,
    anonymous: bool,
    ttl: TokenCacheTtl,
    /// SHA-256 of a token → the user it belongs to, or None when rejected.
    tokens: TtlCache<[u8; 32], Option<UserInfo>>,
}

/// Which credential authenticated a request (the connection budget's class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// An x509 client certificate the client CA signed.
    ClientCertificate,
    /// A bearer token the API server reviewed.
    Token,
    /// No credential, with anonymous access on.
    Anonymous,
}

pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const AUTHENTICATED: &str = "system:authenticated";

impl Authenticator {
    pub fn new(
        client_certs: Option<ClientCertCheck>,
        api: Option<ApiClient>,
        anonymous: bool,
        ttl: TokenCacheTtl,
    ) -> Authenticator {
        Authenticator {
            client_certs,
            api,
            anonymous,
            ttl,
            tokens: TtlCache::new(4096),
        }
    }

    /// The user of a request with this peer chain and `Authorization` header, and
    /// the credential that proved it.
    #[inline(never)]
    pub fn authenticate(
        &self,
        chain: Option<&[CertificateDer<'_>]>,
        authorization: Option<&str>,
    ) -> Result<(UserInfo, Credential), AuthnError> {
        let mut failure = None;
        if let Some(chain) = chain.filter(|c| !c.is_empty()) {
            match self.user_of_certificate(chain) {
                Ok(user) => return Ok((authenticated(user), Credential::ClientCertificate)),
                Err(err) => failure = Some(err),
            }
        }
        if let Some(token) = authorization.and_then(bearer) {
            if self.api.is_some() {
                match self.user_of_token(token) {
                    Ok(user) => return Ok((authenticated(user), Credential::Token)),
                    Err(err) => failure = Some(err),
                }
            }
        }
        if let Some(err) = failure {
            return Err(err);
        }
        if self.anonymous {
            let user = UserInfo {
                username: ANONYMOUS.into(),
                groups: vec![UNAUTHENTICATED.into()],
                ..Default::default()
            };
            return Ok((user, Credential::Anonymous));
        }
        Err(AuthnError::NoCredentials)
    }

    fn user_of_certificate(&self, chain: &[CertificateDer<'_>]) -> Result<UserInfo, AuthnError> {
        let Some(check) = &self.client_certs else {
            return Err(AuthnError::BadCertificate("no client CA configured".into()));
        };
        check
            .verify(chain)
            .map_err(|e| AuthnError::BadCertificate(e.to_string()))?;
        let subject = x509::subject(&chain[0])
            .ok_or_else(|| AuthnError::BadCertificate("unreadable subject".into()))?;
        if subject.common_name.is_empty() {
            return Err(AuthnError::BadCertificate("empty common name".into()));
        }
        Ok(UserInfo {
            username: subject.common_name,
            groups: subject.organizations,
            ..Default::default()
        })
    }

    fn user_of_token(&self, token: &str) -> Result<UserInfo, AuthnError> {
        let key = token_key(token);
        let now = Instant::now();
        if let Some(cached) = self.tokens.get(&key, now) {
            return cached.ok_or(AuthnError::BadToken);
        }
        let Some(api) = &self.api else {
            return Err(AuthnError::BadToken);
        };
        let answer = api
            .create(TOKEN_REVIEWS_PATH, &TokenReview::new(token))
            .map_err(|e| AuthnError::Review(e.to_string()))?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated && !status.user.username.is_empty() {
            self.tokens
                .put(key, Some(status.user.clone()), self.ttl.authenticated, now);
            Ok(status.user)
        } else {
            self.tokens.put(key, None, self.ttl.rejected, now);
            Err(AuthnError::BadToken)
        }
    }
}

fn authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn token_key(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }

    #[test]
    fn anonymous_only_without_credentials() {
        let anon = Authenticator::new(None, None, true, Default::default());
        let (user, credential) = anon.authenticate(None, None).unwrap();
        assert_eq!(credential, Credential::Anonymous);
        assert_eq!(user.username, ANONYMOUS);
        assert_eq!(user.groups, vec![UNAUTHENTICATED.to_string()]);
        let closed = Authenticator::new(None, None, false, Default::default());
        assert_eq!(
            closed.authenticate(None, None),
            Err(AuthnError::NoCredentials)
        );
        // A certificate without a configured CA is a failed credential, not anonymous.
        let cert = CertificateDer::from(vec![0x30, 0x00]);
        assert!(matches!(
            anon.authenticate(Some(&[cert]), None),
            Err(AuthnError::BadCertificate(_))
        ));
    }
}
