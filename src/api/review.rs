//! Wire types of the two review APIs the node server asks on each new credential or
//! request shape: `TokenReview` (authentication.k8s.io/v1: who holds this bearer
//! token?) and `SubjectAccessReview` (authorization.k8s.io/v1: may this user do
//! this to `nodes/<subresource>`?). Both are created with a POST and answered in
//! `status`; nothing is stored by the API server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::meta::ObjectMeta;

/// Where TokenReviews are created.
pub const TOKEN_REVIEWS_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// Where SubjectAccessReviews are created.
pub const SUBJECT_ACCESS_REVIEWS_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// A user as the API server describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TokenReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TokenReviewStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewSpec {
    #[serde(default)]
    pub token: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReviewStatus {
    #[serde(default)]
    pub authenticated: bool,
    #[serde(default)]
    pub user: UserInfo,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl TokenReview {
    /// A review of `token`.
    pub fn new(token: &str) -> TokenReview {
        TokenReview {
            api_version: "authentication.k8s.io/v1".into(),
            kind: "TokenReview".into(),
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Vec::new(),
            },
            ..Default::default()
        }
    }
}

// Hand-written so the token never reaches a log.
impl std::fmt::Display for TokenReview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenReview(token=<redacted>)")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SubjectAccessReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SubjectAccessReviewStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAttributes {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verb: String,
    /// The API group; "" is the core group.
    #[serde(default)]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAccessReviewStatus {
    #[serde(default)]
    pub allowed: bool,
    #[serde(default)]
    pub denied: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

impl SubjectAccessReview {
    /// A review of `user` doing `attributes`.
    pub fn new(user: &UserInfo, attributes: ResourceAttributes) -> SubjectAccessReview {
        SubjectAccessReview {
            api_version: "authorization.k8s.io/v1".into(),
            kind: "SubjectAccessReview".into(),
            spec: SubjectAccessReviewSpec {
                resource_attributes: Some(attributes),
                user: user.username.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                uid: user.uid.clone(),
            },
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sar_wire_shape() {
        let user = UserInfo {
            username: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        };
        let sar = SubjectAccessReview::new(
            &user,
            ResourceAttributes {
                verb: "get".into(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: "proxy".into(),
                name: "n1".into(),
                ..Default::default()
            },
        );
        let v = serde_json::to_value(&sar).unwrap();
        assert_eq!(v["kind"], "SubjectAccessReview");
        assert_eq!(v["spec"]["user"], "alice");
        assert_eq!(v["spec"]["groups"][0], "dev");
        assert_eq!(v["spec"]["resourceAttributes"]["subresource"], "proxy");
        assert_eq!(v["spec"]["resourceAttributes"]["group"], "");
        assert!(v.get("status").is_none());
        let answer: SubjectAccessReview =
            serde_json::from_str(r#"{"status":{"allowed":true,"reason":"rbac"}}"#).unwrap();
        assert!(answer.status.unwrap().allowed);
    }

    #[test]
    fn token_review_wire_shape() {
        let v = serde_json::to_value(TokenReview::new("abc")).unwrap();
        assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(v["spec"]["token"], "abc");
        assert_eq!(
            format!("{}", TokenReview::new("abc")),
            "TokenReview(token=<redacted>)"
        );
        let answer: TokenReview = serde_json::from_str(
            r#"{"status":{"authenticated":true,"user":{"username":"bob","groups":["g"]}}}"#,
        )
        .unwrap();
        let status = answer.status.unwrap();
        assert!(status.authenticated);
        assert_eq!(status.user.username, "bob");
    }
}
