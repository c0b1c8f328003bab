//! Bound service account tokens for projected volumes (upstream token manager): one
//! TokenRequest per (pod, service account, audience, lifetime), kept and re-requested
//! once 80 % of the token's lifetime has passed (or after 24 h, whichever is first).
//!
//! - The lifetime is measured from our receipt of the token to its
//!   `expirationTimestamp`, so a server that extends tokens (to a year) still sees a
//!   refresh every 24 h, and clock skew between node and server does not make the
//!   token look older than it is.
//! - A failed refresh keeps serving the cached token while it has not expired, or,
//!   when the API server cannot be reached, while it would still accept it: the
//!   3607 s tokens of automounted volumes are extended by the API server (the
//!   answer's `expirationTimestamp` is the expiry asked for, the token's claims
//!   carry it as `kubernetes.io.warnafter` and the real one as `exp`, a year later
//!   by default); [`usable_until`] decides.
//! - Edge autonomy (`docs/autonomy.md`): with a pod data store, every token received
//!   is kept on the node (`poddata`); when the API server cannot be reached and no
//!   token is held in memory (after a reboot or a restart), the node's copy is
//!   served ([`Token::kept`]) while the API server would accept it, else the pod
//!   waits with [`VolumeError::KeptTokenExpired`]. While it stays unreachable a
//!   kept token is served without trying again; the first sync after it answers
//!   requests a fresh one.
//! - No lock is held across a request. Any pod worker thread may call it.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use super::error::VolumeError;
use crate::api::meta::Time;
use crate::api::token::{claims, TokenRequest};
use crate::api::{paths, ApiClient, ApiError};
use crate::poddata::{KeptToken, Store, TokenKey};

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

#[derive(Clone)]
struct Cached {
    token: String,
    received: SystemTime,
    expires: SystemTime,
    /// Until when the API server accepts it: later than `expires` for a token it
    /// extended (the claims' `exp` when they carry `warnafter`).
    accepted_until: SystemTime,
    /// Read back from the node's copy, not received in this run.
    kept: bool,
}

impl Cached {
    fn new(token: String, received: SystemTime, expires: SystemTime, kept: bool) -> Self {
        let extended = claims(&token)
            .and_then(|c| c.extended_expiry())
            .map(from_unix_seconds);
        Cached {
            accepted_until: extended.filter(|e| *e > expires).unwrap_or(expires),
            token,
            received,
            expires,
            kept,
        }
    }
}

/// A token to mount.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub value: String,
    /// From the node's copy (the API server could not be reached).
    pub kept: bool,
    /// When it expires (the answer's `expirationTimestamp`).
    pub expires: SystemTime,
}

/// Until when a token may be mounted after a failed refresh: its expiry, or, when
/// the API server could not be reached (so cannot have revoked it by other means
/// than its expiry), the later expiry it really carries when the server extended
/// it (pure).
pub fn usable_until(
    expires: SystemTime,
    accepted_until: SystemTime,
    unreachable: bool,
) -> SystemTime {
    match unreachable {
        true => expires.max(accepted_until),
        false => expires,
    }
}

// By hand: the token never reaches a log.
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("kept", &self.kept)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

fn from_unix_seconds(s: i64) -> SystemTime {
    Time::from_unix_seconds(s).to_system_time()
}

impl Key {
    fn of(spec: &TokenSpec<'_>) -> Key {
        Key {
            pod_uid: spec.pod_uid.to_owned(),
            namespace: spec.namespace.to_owned(),
            service_account: spec.service_account.to_owned(),
            audience: spec.audience.unwrap_or("").to_owned(),
            expiration_seconds: spec
                .expiration_seconds
                .unwrap_or(DEFAULT_EXPIRATION_SECONDS),
        }
    }

    fn kept(&self) -> TokenKey {
        TokenKey {
            pod_uid: self.pod_uid.clone(),
            namespace: self.namespace.clone(),
            service_account: self.service_account.clone(),
            audience: self.audience.clone(),
            expiration_seconds: self.expiration_seconds,
        }
    }
}

/// Why a TokenRequest gave no token.
enum TokenFailure {
    /// The request failed (maybe a cached or kept token serves).
    Request(ApiError),
    /// The answer is unusable.
    Answer(VolumeError),
}

fn token_error(spec: &TokenSpec<'_>, source: ApiError) -> VolumeError {
    VolumeError::Token {
        namespace: spec.namespace.to_owned(),
        service_account: spec.service_account.to_owned(),
        source: Box::new(source),
    }
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
    /// The node's copies (edge autonomy); `None` with `--checkpoint-secrets=false`.
    store: Option<Arc<Store>>,
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
            store: None,
        }
    }

    /// The same manager keeping every token received in `store`.
    pub fn with_store(mut self, store: Arc<Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// A valid token for `spec`, from the cache, a new TokenRequest or the node's
    /// copy (see the module doc).
    pub fn token(&self, spec: &TokenSpec<'_>, now: SystemTime) -> Result<Token, VolumeError> {
        let key = Key::of(spec);
        let cached = lock(&self.tokens).get(&key).cloned();
        let Some(client) = &self.client else {
            return Err(VolumeError::NoApiServer {
                kind: "serviceaccount token",
                name: spec.service_account.to_owned(),
            });
        };
        if let Some(c) = &cached {
            let fresh = !c.kept && !needs_refresh(c.received, c.expires, now);
            if fresh || (c.kept && client.reachability().is_cut_off()) {
                return self.serve(spec, c, now, true);
            }
        }
        let source = match self.request(client, spec, &key, now) {
            Ok(token) => return Ok(token),
            Err(TokenFailure::Answer(e)) => return Err(e),
            Err(TokenFailure::Request(source)) => source,
        };
        let unreachable = super::cache::is_transient(&source);
        let fallback = match cached {
            Some(c) => Some(c),
            None if unreachable => self.kept_copy(&key),
            None => None,
        };
        let Some(c) = fallback else {
            return Err(token_error(spec, source));
        };
        if !c.kept {
            log::warn!(
                "refreshing token of service account {}/{} failed, keeping the current one: {source}",
                spec.namespace,
                spec.service_account
            );
        }
        lock(&self.tokens).insert(key, c.clone());
        self.serve(spec, &c, now, unreachable)
            .map_err(|kept_expired| match c.kept && unreachable {
                true => kept_expired,
                false => token_error(spec, source),
            })
    }

    /// `c` when it may still be mounted at `now`.
    fn serve(
        &self,
        spec: &TokenSpec<'_>,
        c: &Cached,
        now: SystemTime,
        unreachable: bool,
    ) -> Result<Token, VolumeError> {
        if now < usable_until(c.expires, c.accepted_until, unreachable) {
            return Ok(Token {
                value: c.token.clone(),
                kept: c.kept,
                expires: c.expires,
            });
        }
        Err(VolumeError::KeptTokenExpired {
            namespace: spec.namespace.to_owned(),
            service_account: spec.service_account.to_owned(),
            expired: Time::from_system_time(usable_until(c.expires, c.accepted_until, true))
                .to_string(),
        })
    }

    /// A new TokenRequest; kept in memory and on the node.
    fn request(
        &self,
        client: &ApiClient,
        spec: &TokenSpec<'_>,
        key: &Key,
        now: SystemTime,
    ) -> Result<Token, TokenFailure> {
        let request = TokenRequest::for_pod(
            spec.audience,
            key.expiration_seconds,
            spec.pod_name,
            spec.pod_uid,
        );
        let path = paths::service_account_token(spec.namespace, spec.service_account);
        let answer = client
            .create(&path, &request)
            .map_err(TokenFailure::Request)?;
        let bad = |message: &str| {
            TokenFailure::Answer(VolumeError::TokenAnswer {
                namespace: spec.namespace.to_owned(),
                service_account: spec.service_account.to_owned(),
                message: message.to_owned(),
            })
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
        let cached = Cached::new(answer.status.token, now, expires, false);
        self.keep(key, &cached);
        let token = Token {
            value: cached.token.clone(),
            kept: false,
            expires,
        };
        lock(&self.tokens).insert(key.clone(), cached);
        Ok(token)
    }

    /// Writes a token received now to the node's copy; a failure costs autonomy only.
    fn keep(&self, key: &Key, c: &Cached) {
        let Some(store) = &self.store else { return };
        let kept = KeptToken {
            key: key.kept(),
            token: c.token.clone(),
            received: Time::from_system_time(c.received).unix_seconds(),
            expires: Time::from_system_time(c.expires).unix_seconds(),
        };
        if let Err(e) = store.keep_token(&kept) {
            log::warn!("{e}");
        }
    }

    /// The node's copy of the token for `key`.
    fn kept_copy(&self, key: &Key) -> Option<Cached> {
        let store = self.store.as_ref()?;
        match store.token(&key.kept()) {
            Ok(kept) => kept.map(|t| {
                log::warn!(
                    "token of service account {}/{} for pod {}: the API server is \
                     unreachable; using the node's copy",
                    key.namespace,
                    key.service_account,
                    key.pod_uid
                );
                Cached::new(
                    t.token,
                    from_unix_seconds(t.received),
                    from_unix_seconds(t.expires),
                    true,
                )
            }),
            Err(e) => {
                log::warn!("{e}");
                None
            }
        }
    }

    /// Forgets the tokens of pod `uid` (the node's copies go with the pod's other
    /// kept data, `VolumeManager::teardown_pod`).
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
