//! Bound service account tokens for projected volumes (upstream token manager): one
//! TokenRequest per (pod, service account, audience, lifetime), kept and re-requested
//! once 80 % of the token's lifetime has passed (or after 24 h, whichever is first).
//!
//! - The lifetime is measured from our receipt of the token to its
//!   `expirationTimestamp`, so a server that extends tokens (to a year) still sees a
//!   refresh every 24 h, and clock skew between node and server does not make the
//!   token look older than it is.
//! - A failed refresh keeps serving the cached token while it has not expired.
//! - No lock is held across a request. Any pod worker thread may call it.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::error::VolumeError;
use crate::api::token::TokenRequest;
use crate::api::{paths, ApiClient};

/// Token lifetime when the projection names none (the API's default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// A token older than this is refreshed whatever its expiry.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    pod_uid: String,
    namespace: String,
    service_account: String,
    audience: String,
    expiration_seconds: i64,
}

#[derive(Clone, Debug)]
struct Cached {
    token: String,
    received: SystemTime,
    expires: SystemTime,
}

/// What one projection asks for.
pub struct TokenSpec<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
    pub audience: Option<&'a str>,
    pub expiration_seconds: Option<i64>,
}

/// True when a token received at `received` and expiring at `expires` must be
/// requested again at `now`: 80 % of its lifetime has passed, it is older than 24 h,
/// or it has expired.
pub fn needs_refresh(received: SystemTime, expires: SystemTime, now: SystemTime) -> bool {
    if now >= expires {
        return true;
    }
    let lifetime = expires.duration_since(received).unwrap_or_default();
    let refresh_after = (lifetime * 4 / 5).min(MAX_AGE);
    match now.duration_since(received) {
        Ok(age) => age >= refresh_after,
        // The clock went back: the token is younger than it looks; keep it.
        Err(_) => false,
    }
}

/// The token cache; see the module doc.
pub struct TokenManager {
    client: Option<ApiClient>,
    tokens: Mutex<BTreeMap<Key, Cached>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one insert or retain: a panic elsewhere leaves the map whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TokenManager {
    pub fn new(client: Option<ApiClient>) -> Self {
        Self {
            client,
            tokens: Mutex::new(BTreeMap::new()),
        }
    }

    /// A valid token for `spec`, from the cache or a new TokenRequest.
    pub fn token(&self, spec: &TokenSpec<'_>, now: SystemTime) -> Result<String, VolumeError> {
        let expiration_seconds = spec
            .expiration_seconds
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        let key = Key {
            pod_uid: spec.pod_uid.to_owned(),
            namespace: spec.namespace.to_owned(),
            service_account: spec.service_account.to_owned(),
            audience: spec.audience.unwrap_or("").to_owned(),
            expiration_seconds,
        };
        let cached = lock(&self.tokens).get(&key).cloned();
        if let Some(c) = &cached {
            if !needs_refresh(c.received, c.expires, now) {
                return Ok(c.token.clone());
            }
        }
        let Some(client) = &self.client else {
            return Err(VolumeError::NoApiServer {
                kind: "serviceaccount token",
                name: spec.service_account.to_owned(),
            });
        };
        let request = TokenRequest::for_pod(
            spec.audience,
            expiration_seconds,
            spec.pod_name,
            spec.pod_uid,
        );
        let path = paths::service_account_token(spec.namespace, spec.service_account);
        let answer = match client.create(&path, &request) {
            Ok(answer) => answer,
            Err(source) => {
                if let Some(c) = cached.filter(|c| now < c.expires) {
                    log::warn!(
                        "refreshing token of service account {}/{} failed, keeping the current one: {source}",
                        spec.namespace,
                        spec.service_account
                    );
                    return Ok(c.token);
                }
                return Err(VolumeError::Token {
                    namespace: spec.namespace.to_owned(),
                    service_account: spec.service_account.to_owned(),
                    source: Box::new(source),
                });
            }
        };
        let bad = |message: &str| VolumeError::TokenAnswer {
            namespace: spec.namespace.to_owned(),
            service_account: spec.service_account.to_owned(),
            message: message.to_owned(),
        };
        if answer.status.token.is_empty() {
            return Err(bad("the answer holds no token"));
        }
        let expires = answer
            .status
            .expiration_timestamp
            .ok_or_else(|| bad("the answer holds no expirationTimestamp"))?
            .to_system_time();
        if expires <= now {
            return Err(bad("the token expired on arrival (node clock ahead?)"));
        }
        let token = answer.status.token;
        lock(&self.tokens).insert(
            key,
            Cached {
                token: token.clone(),
                received: now,
                expires,
            },
        );
        Ok(token)
    }

    /// Forgets the tokens of pod `uid`.
    pub fn forget_pod(&self, uid: &str) {
        lock(&self.tokens).retain(|k, _| k.pod_uid != uid);
    }

    /// Tokens held (for tests and stats).
    pub fn len(&self) -> usize {
        lock(&self.tokens).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_at_eighty_percent_or_a_day() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = Duration::from_secs;
        let hour = t0 + s(3600);
        let cases = [
            ("fresh", t0, hour, t0, false),
            ("at 79 %", t0, hour, t0 + s(2843), false),
            ("at 80 %", t0, hour, t0 + s(2880), true),
            ("expired", t0, hour, t0 + s(4000), true),
            ("clock went back", t0, hour, t0 - s(60), false),
            (
                "year token, 23 h",
                t0,
                t0 + s(365 * 86400),
                t0 + s(23 * 3600),
                false,
            ),
            (
                "year token, 24 h",
                t0,
                t0 + s(365 * 86400),
                t0 + s(24 * 3600),
                true,
            ),
            ("zero lifetime", t0, t0, t0, true),
        ];
        for (name, received, expires, now, want) in cases {
            assert_eq!(needs_refresh(received, expires, now), want, "{name}");
        }
    }

    #[test]
    fn standalone_has_no_tokens() {
        let m = TokenManager::new(None);
        let spec = TokenSpec {
            namespace: "ns",
            service_account: "default",
            pod_name: "p",
            pod_uid: "u",
            audience: None,
            expiration_seconds: None,
        };
        let err = m.token(&spec, SystemTime::now()).unwrap_err().to_string();
        assert!(err.contains("without an API server"), "{err}");
    }
}
