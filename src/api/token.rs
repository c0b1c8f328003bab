//! The authentication.k8s.io/v1 TokenRequest: what the kubelet posts to
//! `serviceaccounts/<name>/token` to get a bound service account token for a pod,
//! and the claims of the issued token the node reads ([`claims`]); and the
//! ServiceAccount itself, as far as the kubelet reads it (its UID and annotations,
//! for credential provider plugins).
//!
//! This module holds wire types only: it models the JSON the API server sends and
//! accepts and performs no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::meta::{is_default, nullable, ObjectMeta, Time};

/// A token request and, in the answer, the issued token.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TokenRequest {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: TokenRequestSpec,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub status: TokenRequestStatus,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TokenRequest {
    pub const API_VERSION: &'static str = "authentication.k8s.io/v1";
    pub const KIND: &'static str = "TokenRequest";

    /// A request for a token bound to pod `name`/`uid`. No audience means the API
    /// server's own audiences.
    pub fn for_pod(
        audience: Option<&str>,
        expiration_seconds: i64,
        pod_name: &str,
        pod_uid: &str,
    ) -> Self {
        Self {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            spec: TokenRequestSpec {
                audiences: audience
                    .filter(|a| !a.is_empty())
                    .map(|a| vec![a.to_owned()])
                    .unwrap_or_default(),
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: "v1".to_owned(),
                    kind: "Pod".to_owned(),
                    name: pod_name.to_owned(),
                    uid: pod_uid.to_owned(),
                }),
            },
            ..Self::default()
        }
    }
}

/// A core/v1 ServiceAccount: only its metadata is read (UID, annotations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceAccount {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TokenRequestSpec {
    #[serde(deserialize_with = "nullable")]
    pub audiences: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_object_ref: Option<BoundObjectReference>,
}

/// The object whose deletion invalidates the token.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BoundObjectReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TokenRequestStatus {
    pub token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_timestamp: Option<Time>,
}

/// The claims of a service-account token (a JWT) the node reads. The signature is
/// the API server's business: the node only reads when its own token stops working.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct TokenClaims {
    /// Unix seconds after which the API server refuses the token.
    pub exp: Option<i64>,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// The `kubernetes.io` private claims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KubernetesClaims {
    /// Unix seconds: the expiry the TokenRequest asked for, set when the API server
    /// extended the token's real expiry past it
    /// (`--service-account-extend-token-expiration`, on by default, for the
    /// 3607 s pod tokens of automounted volumes): past it the token still works
    /// and its use is only warned about.
    pub warnafter: Option<i64>,
}

impl TokenClaims {
    /// When the API server extended the token: the real expiry (`exp`), later than
    /// the answer's `expirationTimestamp` (the `warnafter` time).
    pub fn extended_expiry(&self) -> Option<i64> {
        self.kubernetes.warnafter.and(self.exp)
    }
}

/// The claims of `token`, a JWT (`header.payload.signature`, base64url); `None`
/// when it is not one.
pub fn claims(token: &str) -> Option<TokenClaims> {
    let payload = token.split('.').nth(1)?;
    let standard: String = payload
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    let bytes = crate::api::base64::decode(&standard).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JWT with `payload` (unsigned: the node never checks signatures).
    fn jwt(payload: &serde_json::Value) -> String {
        let body = crate::api::base64::encode(payload.to_string().as_bytes())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_");
        format!("eyJhbGciOiJSUzI1NiJ9.{body}.c2ln")
    }

    #[test]
    fn an_extended_token_says_its_real_expiry_in_its_claims() {
        let extended = jwt(&serde_json::json!({
            "exp": 1_731_564_966_i64, "iat": 1_700_028_966_i64,
            "kubernetes.io": {"namespace": "default", "warnafter": 1_700_032_573_i64,
                "pod": {"name": "p", "uid": "u"}}
        }));
        let c = claims(&extended).unwrap();
        assert_eq!(c.exp, Some(1_731_564_966));
        assert_eq!(c.kubernetes.warnafter, Some(1_700_032_573));
        assert_eq!(c.extended_expiry(), Some(1_731_564_966));
        let plain = jwt(&serde_json::json!({"exp": 1_700_003_600_i64, "kubernetes.io": {}}));
        assert_eq!(claims(&plain).unwrap().extended_expiry(), None);
        for not_a_jwt in ["", "abc", "a.!!!.c", "a.bm90IGpzb24.c"] {
            assert_eq!(claims(not_a_jwt), None, "{not_a_jwt}");
        }
    }

    #[test]
    fn request_shape_and_answer() {
        let req = TokenRequest::for_pod(None, 3607, "web", "uid-1");
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(json["spec"]["audiences"], serde_json::json!([]));
        assert_eq!(json["spec"]["expirationSeconds"], 3607);
        assert_eq!(json["spec"]["boundObjectRef"]["kind"], "Pod");
        assert_eq!(json["spec"]["boundObjectRef"]["uid"], "uid-1");
        assert!(json.get("status").is_none());
        let req = TokenRequest::for_pod(Some("vault"), 600, "web", "uid-1");
        assert_eq!(req.spec.audiences, ["vault"]);

        let answer: TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": {"audiences": ["https://kubernetes.default.svc"]},
            "status": {"token": "eyJ", "expirationTimestamp": "2030-01-01T00:00:00Z"}
        }))
        .unwrap();
        assert_eq!(answer.status.token, "eyJ");
        assert_eq!(
            answer.status.expiration_timestamp,
            Some(Time::parse("2030-01-01T00:00:00Z").unwrap())
        );
    }
}
