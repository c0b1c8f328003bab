//! Authorization of node server requests, as upstream's kubelet: a request becomes
//! `<verb> nodes/<subresource>` on this node's name and is decided by the API server
//! through a SubjectAccessReview (webhook mode; answers cached: allowed 5 min, denied
//! 30 s), or allowed outright in AlwaysAllow mode (only when configured).
//!
//! The mapping ([`attributes`]) is pure: the verb follows the HTTP method; the path
//! prefix picks the subresource (`/stats` → stats, `/metrics` → metrics, `/logs` →
//! log, `/spec` → spec, `/checkpoint` → checkpoint, `/pods` → pods then proxy,
//! `/runningpods` → pods then proxy, `/healthz` → healthz then proxy, `/configz` →
//! configz then proxy, anything else →
//! proxy). The "then proxy" fallbacks
//! are upstream's fine-grained authorization: a user allowed `nodes/proxy` keeps access.
//! Called from connection threads.

use std::time::{Duration, Instant};

use crate::api::review::{
    ResourceAttributes, SubjectAccessReview, UserInfo, SUBJECT_ACCESS_REVIEWS_PATH,
};
use crate::api::ApiClient;
use crate::server::cache::TtlCache;

/// `--authorization-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed.
    AlwaysAllow,
    /// Ask the API server with a SubjectAccessReview.
    #[default]
    Webhook,
}

impl AuthorizationMode {
    /// Upstream's name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        }
    }
}

/// An authorization mode other than upstream's two.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an authorization mode (Webhook or AlwaysAllow)")]
pub struct UnknownAuthorizationMode(pub String);

impl std::str::FromStr for AuthorizationMode {
    type Err = UnknownAuthorizationMode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            other => Err(UnknownAuthorizationMode(other.to_owned())),
        }
    }
}

/// The resource attributes of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    /// Subresources of `nodes` to try in order; the first allowed one wins.
    pub subresources: Vec<&'static str>,
}

/// The attributes of `method` on `path` (pure; upstream GetRequestAttributes).
pub fn attributes(method: &str, path: &str) -> Attributes {
    let verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let under = |prefix: &str| {
        path == prefix
            || path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    let subresources = if under("/stats") {
        vec!["stats"]
    } else if under("/metrics") {
        vec!["metrics"]
    } else if under("/logs") {
        vec!["log"]
    } else if under("/spec") {
        vec!["spec"]
    } else if under("/checkpoint") {
        vec!["checkpoint"]
    } else if under("/pods") || under("/runningpods") {
        vec!["pods", "proxy"]
    } else if under("/healthz") {
        vec!["healthz", "proxy"]
    } else if under("/configz") {
        vec!["configz", "proxy"]
    } else {
        vec!["proxy"]
    };
    Attributes { verb, subresources }
}

/// The outcome for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied; upstream's message (`Forbidden (user=..., verb=..., ...)`).
    Deny(String),
    /// The review could not be made; answered 500.
    Error(String),
}

/// Why a SubjectAccessReview could not be had.
#[derive(Debug, thiserror::Error)]
enum ReviewError {
    #[error("webhook authorization needs an API server (--kubeconfig)")]
    NoApiServer,
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
}

/// How long review answers are trusted.
#[derive(Clone, Copy, Debug)]
pub struct AuthzCacheTtl {
    pub allowed: Duration,
    pub denied: Duration,
}

impl Default for AuthzCacheTtl {
    fn default() -> Self {
        AuthzCacheTtl {
            allowed: Duration::from_secs(300),
            denied: Duration::from_secs(30),
        }
    }
}

pub struct Authorizer {
    mode: AuthorizationMode,
    api: Option<ApiClient>,
    node: String,
    ttl: AuthzCacheTtl,
    cache: TtlCache<String, bool>,
}

impl Authorizer {
    pub fn new(
        mode: AuthorizationMode,
        api: Option<ApiClient>,
        node: &str,
        ttl: AuthzCacheTtl,
    ) -> Authorizer {
        Authorizer {
            mode,
            api,
            node: node.to_owned(),
            ttl,
            cache: TtlCache::new(4096),
        }
    }

    /// Decides whether `user` may make a request with `attrs`.
    #[inline(never)]
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Decision::Allow;
        }
        let mut last = "";
        for sub in &attrs.subresources {
            last = sub;
            match self.review(user, attrs.verb, sub) {
                Ok(true) => return Decision::Allow,
                Ok(false) => continue,
                Err(err) => {
                    return Decision::Error(format!(
                        "Authorization error (user={}, verb={}, resource=nodes, subresource={sub}): {err}",
                        user.username, attrs.verb
                    ))
                }
            }
        }
        Decision::Deny(format!(
            "Forbidden (user={}, verb={}, resource=nodes, subresource={last})",
            user.username, attrs.verb
        ))
    }

    fn review(&self, user: &UserInfo, verb: &str, sub: &str) -> Result<bool, ReviewError> {
        let Some(api) = &self.api else {
            return Err(ReviewError::NoApiServer);
        };
        let mut groups = user.groups.clone();
        groups.sort();
        let key = format!(
            "{}\0{}\0{}\0{verb}\0{sub}\0{:?}",
            user.username,
            user.uid,
            groups.join(","),
            user.extra
        );
        let now = Instant::now();
        if let Some(allowed) = self.cache.get(&key, now) {
            return Ok(allowed);
        }
        let request = SubjectAccessReview::new(
            user,
            ResourceAttributes {
                verb: verb.to_owned(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: sub.to_owned(),
                name: self.node.clone(),
                ..Default::default()
            },
        );
        let answer = api.create(SUBJECT_ACCESS_REVIEWS_PATH, &request)?;
        let status = answer.status.unwrap_or_default();
        let allowed = status.allowed && !status.denied;
        let ttl = if allowed {
            self.ttl.allowed
        } else {
            self.ttl.denied
        };
        self.cache.put(key, allowed, ttl, now);
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: &str, path: &str, verb: &str, subs: &[&str]) {
        let a = attributes(method, path);
        assert_eq!(a.verb, verb, "{method} {path}");
        assert_eq!(a.subresources, subs, "{method} {path}");
    }

    #[test]
    fn upstream_mapping() {
        check("GET", "/stats/summary", "get", &["stats"]);
        check("GET", "/metrics", "get", &["metrics"]);
        check("GET", "/metrics/cadvisor", "get", &["metrics"]);
        check("GET", "/metrics/probes", "get", &["metrics"]);
        check("GET", "/metricsfoo", "get", &["proxy"]);
        check("GET", "/logs/syslog", "get", &["log"]);
        check("GET", "/spec/", "get", &["spec"]);
        check("POST", "/checkpoint/ns/p/c", "create", &["checkpoint"]);
        check("GET", "/pods", "get", &["pods", "proxy"]);
        check("GET", "/runningpods/", "get", &["pods", "proxy"]);
        check("GET", "/healthz", "get", &["healthz", "proxy"]);
        check("GET", "/configz", "get", &["configz", "proxy"]);
        check("GET", "/configzz", "get", &["proxy"]);
        check("GET", "/containerLogs/ns/p/c", "get", &["proxy"]);
        check("POST", "/exec/ns/p/c", "create", &["proxy"]);
        check("GET", "/exec/ns/p/c", "get", &["proxy"]);
        check("PUT", "/x", "update", &["proxy"]);
        check("DELETE", "/x", "delete", &["proxy"]);
        check("PATCH", "/x", "patch", &["proxy"]);
    }

    #[test]
    fn always_allow_and_webhook_without_api() {
        let user = UserInfo {
            username: "u".into(),
            ..Default::default()
        };
        let attrs = attributes("GET", "/pods");
        let allow = Authorizer::new(
            AuthorizationMode::AlwaysAllow,
            None,
            "n",
            Default::default(),
        );
        assert_eq!(allow.authorize(&user, &attrs), Decision::Allow);
        let webhook = Authorizer::new(AuthorizationMode::Webhook, None, "n", Default::default());
        assert!(matches!(
            webhook.authorize(&user, &attrs),
            Decision::Error(_)
        ));
    }
}
