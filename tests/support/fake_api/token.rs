//! The fake API server's TokenRequest subresource:
//! `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`.
//!
//! Like the real server it checks the bound pod (it must exist with the given UID),
//! honours `expirationSeconds` (default 3600; no lower bound, so tests can use short
//! lifetimes) and answers `status.token` and `status.expirationTimestamp`. Tokens
//! are JWT-shaped (unsigned) with the real server's claims: `iat`, `exp` and the
//! `kubernetes.io` private claims; like kube-apiserver's default
//! `--service-account-extend-token-expiration`, a pod-bound token asked for 3607 s
//! with the server's own audience gets `exp` a year later and `warnafter` at the
//! time asked for (the answer's `expirationTimestamp`). Every issued token is unique
//! and recorded for assertions. Service accounts themselves are not modelled: any
//! name is accepted.

use std::time::{Duration, SystemTime};

use litelet::api::meta::Time;
use serde_json::{json, Value};

use super::http::Request;
use super::server::{lock, Shared};
use super::store::{self, Failure};

/// The expiry automounted token volumes ask for, which the real server extends.
const WARN_ONLY_EXPIRATION: i64 = 3607;
/// How far the real server extends it (a year).
const EXTENSION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A JWT-shaped token carrying `claims` (the signature is a placeholder).
fn jwt(claims: &Value) -> String {
    let url = |bytes: &[u8]| {
        litelet::api::base64::encode(bytes)
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    };
    format!(
        "{}.{}.{}",
        url(br#"{"alg":"RS256","kid":"fake"}"#),
        url(claims.to_string().as_bytes()),
        url(b"unsigned")
    )
}

/// One token the fake issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    pub namespace: String,
    pub service_account: String,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub token: String,
}

/// `(namespace, service account)` when `path` is a TokenRequest path.
pub fn token_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match segs.as_slice() {
        [ns, "serviceaccounts", name, "token"] => Some((ns.to_string(), name.to_string())),
        _ => None,
    }
}

/// Serves a TokenRequest; the answer body or a failure.
pub fn serve(shared: &Shared, req: &Request, ns: &str, sa: &str) -> Result<Value, Failure> {
    if req.method != "POST" {
        return Err(Failure::new(
            405,
            "MethodNotAllowed",
            "only POST is supported on serviceaccounts/token",
        ));
    }
    let mut body: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Failure::bad_request(format!("the body is not valid JSON: {e}")))?;
    if body.get("kind").and_then(Value::as_str) != Some("TokenRequest") {
        return Err(Failure::bad_request("kind must be TokenRequest"));
    }
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if expiration <= 0 {
        return Err(Failure::new(
            422,
            "Invalid",
            "expirationSeconds must be positive",
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut pod_name = String::new();
    let pod_bound = spec.get("boundObjectRef").is_some_and(|b| !b.is_null());
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        if bound.get("kind").and_then(Value::as_str) != Some("Pod") {
            return Err(Failure::bad_request("boundObjectRef must be a Pod"));
        }
        pod_name = bound
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let uid = bound.get("uid").and_then(Value::as_str).unwrap_or("");
        let pod = lock(&shared.store).get(store::kind("pods"), ns, &pod_name)?;
        if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
            return Err(Failure::new(
                409,
                "Conflict",
                format!("the UID in the bound object reference ({uid}) does not match the UID in record"),
            ));
        }
    }
    let mut issued = lock(&shared.tokens);
    let now = SystemTime::now();
    let expires = now + Duration::from_secs(expiration as u64);
    let extended = pod_bound && audiences.is_empty() && expiration == WARN_ONLY_EXPIRATION;
    let token = jwt(&json!({
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": format!("fake-{}", issued.len() + 1),
        "iat": Time::from_system_time(now).unix_seconds(),
        "exp": Time::from_system_time(match extended {
            true => now + EXTENSION,
            false => expires,
        })
        .unix_seconds(),
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
        "kubernetes.io": {
            "namespace": ns,
            "pod": {"name": pod_name},
            "serviceaccount": {"name": sa},
            "warnafter": extended.then(|| Time::from_system_time(expires).unix_seconds()),
        },
    }));
    issued.push(IssuedToken {
        namespace: ns.to_owned(),
        service_account: sa.to_owned(),
        audiences: audiences.clone(),
        expiration_seconds: expiration,
        pod_name,
        token: token.clone(),
    });
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["metadata"] = json!({"name": sa, "namespace": ns});
    if audiences.is_empty() {
        body["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    body["status"] = json!({
        "token": token,
        "expirationTimestamp": Time::from_system_time(expires).to_string(),
    });
    Ok(body)
}
