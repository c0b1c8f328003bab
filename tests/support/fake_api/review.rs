//! The fake API server's review APIs, as the node server uses them:
//! `POST /apis/authentication.k8s.io/v1/tokenreviews` answers from a table of known
//! tokens, and `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` allows what
//! a list of `(user, verb, subresource)` grants (`*` matches anything) and denies the
//! rest. Reviews are never stored; every one shows in the request log as a `create`.

use serde_json::{json, Value};

use super::http::Request;
use super::server::{lock, Shared};
use super::store::Failure;

pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Known tokens and granted accesses.
#[derive(Default)]
pub struct Reviews {
    /// token → (user name, groups)
    pub tokens: Vec<(String, String, Vec<String>)>,
    /// (user, verb, subresource) grants.
    pub grants: Vec<(String, String, String)>,
    /// Every SubjectAccessReview spec received, in order.
    pub access_specs: Vec<Value>,
}

/// True for the two review paths.
pub fn is_review_path(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    path == TOKEN_REVIEWS || path == ACCESS_REVIEWS
}

/// Serves a review request; None when `req` is not one.
pub fn serve(shared: &Shared, req: &Request) -> Option<Result<Value, Failure>> {
    if !is_review_path(&req.path) {
        return None;
    }
    let path = req.path.trim_end_matches('/');
    if req.method != "POST" {
        return Some(Err(Failure::new(
            405,
            "MethodNotAllowed",
            "only POST is supported on reviews",
        )));
    }
    let mut body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => {
            return Some(Err(Failure::bad_request(format!(
                "the body is not valid JSON: {e}"
            ))))
        }
    };
    let mut reviews = lock(&shared.reviews);
    if path == TOKEN_REVIEWS {
        let token = body
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or("");
        body["status"] = match reviews.tokens.iter().find(|(t, _, _)| t == token) {
            Some((_, user, groups)) => {
                json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
            }
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
    } else {
        let spec = body.get("spec").cloned().unwrap_or(Value::Null);
        let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
        let verb = spec
            .pointer("/resourceAttributes/verb")
            .and_then(Value::as_str)
            .unwrap_or("");
        let sub = spec
            .pointer("/resourceAttributes/subresource")
            .and_then(Value::as_str)
            .unwrap_or("");
        let m = |want: &str, got: &str| want == "*" || want == got;
        let allowed = reviews
            .grants
            .iter()
            .any(|(u, v, s)| m(u, user) && m(v, verb) && m(s, sub));
        reviews.access_specs.push(spec);
        body["status"] = if allowed {
            json!({"allowed": true, "reason": "granted by the fake"})
        } else {
            json!({"allowed": false, "reason": "no grant in the fake"})
        };
    }
    Some(Ok(body))
}
