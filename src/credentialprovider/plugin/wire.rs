//! What litelet and a credential provider plugin exchange (upstream
//! `credentialprovider.kubelet.k8s.io` v1, v1beta1, v1alpha1; pure): the
//! CredentialProviderRequest written to the plugin's stdin and the
//! CredentialProviderResponse read from its stdout.
//!
//! As upstream: the response's `apiVersion` must be the one configured for the
//! plugin, its `kind` CredentialProviderResponse, unknown fields are refused, and a
//! response that does not decode is reported without its content (it may hold
//! credentials). `cacheKeyType` must be Image, Registry or Global.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::PluginError;
use crate::credentialprovider::config::{DockerConfig, DockerConfigEntry};

/// A Go duration parser (the flag layer's `config::parse_duration`, handed in).
pub type DurationParser = fn(&str) -> Result<Duration, String>;

/// The plugin protocol's API group.
pub const GROUP: &str = "credentialprovider.kubelet.k8s.io";
const REQUEST_KIND: &str = "CredentialProviderRequest";
const RESPONSE_KIND: &str = "CredentialProviderResponse";

/// A version of the plugin protocol (a provider's `apiVersion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolVersion {
    V1,
    V1Beta1,
    V1Alpha1,
}

impl ProtocolVersion {
    pub const ALL: [ProtocolVersion; 3] = [Self::V1, Self::V1Alpha1, Self::V1Beta1];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "credentialprovider.kubelet.k8s.io/v1",
            Self::V1Beta1 => "credentialprovider.kubelet.k8s.io/v1beta1",
            Self::V1Alpha1 => "credentialprovider.kubelet.k8s.io/v1alpha1",
        }
    }

    pub fn parse(text: &str) -> Option<ProtocolVersion> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// What a plugin is asked: the image's repository, and in service account token
/// mode the token and the service account's annotations the config names.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    api_version: &'static str,
    kind: &'static str,
    image: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    service_account_token: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    service_account_annotations: &'a BTreeMap<String, String>,
}

/// The request's JSON for `image` (a token only in service account token mode).
pub fn encode_request(
    version: ProtocolVersion,
    image: &str,
    token: &str,
    annotations: &BTreeMap<String, String>,
) -> Vec<u8> {
    let request = Request {
        api_version: version.as_str(),
        kind: REQUEST_KIND,
        image,
        service_account_token: token,
        service_account_annotations: annotations,
    };
    // Strings and a map of strings: serialising cannot fail.
    serde_json::to_vec(&request).unwrap_or_default()
}

/// How the answer may be reused (`cacheKeyType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKeyType {
    /// For this image (repository) only.
    Image,
    /// For every image of the image's registry (host and port).
    Registry,
    /// For every image the plugin matches.
    Global,
}

/// A plugin's answer, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub cache_key_type: CacheKeyType,
    /// `None`: the provider's `defaultCacheDuration`; zero: not cached.
    pub cache_duration: Option<Duration>,
    /// Registry key → credentials, matched to images as Docker config keys are.
    pub auth: DockerConfig,
}

#[derive(Deserialize)]
struct TypeMeta {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResponse {
    /// Checked before (from [`TypeMeta`]); here so that it is a known field.
    #[serde(default, rename = "apiVersion")]
    _api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, RawAuth>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// Decodes plugin `plugin`'s stdout, expecting protocol `version`; `duration`
/// parses `cacheDuration` (a Go duration).
pub fn decode_response(
    plugin: &str,
    version: ProtocolVersion,
    stdout: &[u8],
    duration: DurationParser,
) -> Result<Response, PluginError> {
    let bad = |why: String| PluginError::Response {
        plugin: plugin.to_owned(),
        why,
    };
    let meta: TypeMeta = serde_json::from_slice(stdout)
        .map_err(|e| bad(format!("reading apiVersion: {}", e.classify_text())))?;
    if meta.api_version != version.as_str() {
        return Err(bad(format!(
            "apiVersion {:?} is not the expected {:?}",
            meta.api_version,
            version.as_str()
        )));
    }
    // The decoder's message may quote a credential: say only that it failed.
    let raw: RawResponse = serde_json::from_slice(stdout)
        .map_err(|_| bad("the response does not decode as a CredentialProviderResponse".into()))?;
    if raw.kind != RESPONSE_KIND {
        return Err(bad(format!("kind {:?} is not {RESPONSE_KIND}", raw.kind)));
    }
    let cache_key_type = match raw.cache_key_type.as_str() {
        "Image" => CacheKeyType::Image,
        "Registry" => CacheKeyType::Registry,
        "Global" => CacheKeyType::Global,
        other => {
            return Err(bad(format!(
                "cacheKeyType {other:?} is not Image, Registry or Global"
            )))
        }
    };
    let cache_duration = match raw.cache_duration.as_deref() {
        None => None,
        Some(text) => Some(duration(text).map_err(|why| bad(format!("cacheDuration: {why}")))?),
    };
    let auth = raw
        .auth
        .into_iter()
        .map(|(key, a)| {
            let entry = DockerConfigEntry {
                username: a.username,
                password: a.password,
                email: String::new(),
            };
            (key, entry)
        })
        .collect();
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth,
    })
}

/// serde_json's error category, never the text around the error (it may quote a
/// credential).
trait ClassifyText {
    fn classify_text(&self) -> &'static str;
}

impl ClassifyText for serde_json::Error {
    fn classify_text(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "read error",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "not a JSON object",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_duration;

    fn decode(version: ProtocolVersion, text: &str) -> Result<Response, String> {
        decode_response("p", version, text.as_bytes(), parse_duration).map_err(|e| e.to_string())
    }

    #[test]
    fn request_carries_the_token_only_in_service_account_mode() {
        let none = BTreeMap::new();
        let plain = encode_request(ProtocolVersion::V1Beta1, "reg.io/app", "", &none);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&plain).unwrap(),
            serde_json::json!({
                "apiVersion": "credentialprovider.kubelet.k8s.io/v1beta1",
                "kind": "CredentialProviderRequest",
                "image": "reg.io/app",
            })
        );
        let annotations = BTreeMap::from([("a.io/role".to_owned(), "puller".to_owned())]);
        let sa = encode_request(ProtocolVersion::V1, "reg.io/app", "eyJ.tok", &annotations);
        let sa: serde_json::Value = serde_json::from_slice(&sa).unwrap();
        assert_eq!(sa["serviceAccountToken"], "eyJ.tok");
        assert_eq!(sa["serviceAccountAnnotations"]["a.io/role"], "puller");
    }

    #[test]
    fn responses_are_checked_as_upstream_decodes_them() {
        let v1 = ProtocolVersion::V1;
        let ok = decode(
            v1,
            r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse",
                "cacheKeyType":"Registry","cacheDuration":"5m",
                "auth":{"*.reg.io":{"username":"u","password":"p"},"reg.io/team":{"username":"t"}}}"#,
        )
        .unwrap();
        assert_eq!(ok.cache_key_type, CacheKeyType::Registry);
        assert_eq!(ok.cache_duration, Some(Duration::from_secs(300)));
        let keys: Vec<(&str, &str, &str)> = ok
            .auth
            .iter()
            .map(|(k, e)| (k.as_str(), e.username.as_str(), e.password.as_str()))
            .collect();
        assert_eq!(keys, [("*.reg.io", "u", "p"), ("reg.io/team", "t", "")]);
        let no_duration = decode(
            v1,
            r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#,
        )
        .unwrap();
        assert_eq!(no_duration.cache_duration, None);
        assert!(no_duration.auth.is_empty());

        let cases = [
            ("not JSON", v1, "password=hunter2", "reading apiVersion: not JSON"),
            (
                "another version than configured",
                ProtocolVersion::V1Alpha1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#,
                "apiVersion \"credentialprovider.kubelet.k8s.io/v1\" is not the expected \"credentialprovider.kubelet.k8s.io/v1alpha1\"",
            ),
            (
                "no apiVersion",
                v1,
                r#"{"kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#,
                "apiVersion \"\" is not the expected",
            ),
            (
                "wrong kind",
                v1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","cacheKeyType":"Image"}"#,
                "kind \"CredentialProviderRequest\" is not CredentialProviderResponse",
            ),
            (
                "unknown field, content not repeated",
                v1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"r":{"username":"u","password":"hunter2","extra":1}}}"#,
                "does not decode as a CredentialProviderResponse",
            ),
            (
                "bad cacheKeyType",
                v1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Pod"}"#,
                "cacheKeyType \"Pod\" is not Image, Registry or Global",
            ),
            (
                "no cacheKeyType",
                v1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse"}"#,
                "cacheKeyType \"\" is not Image",
            ),
            (
                "bad cacheDuration",
                v1,
                r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"soon"}"#,
                "cacheDuration: invalid duration",
            ),
        ];
        for (name, version, text, want) in cases {
            let err = decode(version, text).expect_err(name);
            assert!(err.contains(want), "{name}: {err}");
            assert!(
                !err.contains("hunter2"),
                "{name} repeats a credential: {err}"
            );
        }
    }
}
