//! The two Docker config formats pull secrets and node files use (pure):
//! `config.json` / `kubernetes.io/dockerconfigjson` (`{"auths": {registry: entry}}`)
//! and the legacy `.dockercfg` / `kubernetes.io/dockercfg` (`{registry: entry}`).
//! An entry's `auth` (base64 of `username:password`) wins over its
//! `username`/`password`, as upstream's DockerConfigEntry decoding does.

use serde::Deserialize;

use super::CredentialError;
use crate::api::base64;

/// One registry's credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfigEntry {
    pub username: String,
    pub password: String,
    pub email: String,
}

impl std::fmt::Debug for DockerConfigEntry {
    // Never print a password, even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerConfigEntry")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Registry key (host, optional port and path, optional scheme) → credentials, in
/// the file's order.
pub type DockerConfig = Vec<(String, DockerConfigEntry)>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEntry {
    username: String,
    password: String,
    email: String,
    auth: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawConfigJson {
    auths: serde_json::Map<String, serde_json::Value>,
}

/// Parses `config.json` / `.dockerconfigjson` bytes; `source_name` names the file or
/// secret in errors.
pub fn parse_config_json(bytes: &[u8], source_name: &str) -> Result<DockerConfig, CredentialError> {
    let raw: RawConfigJson =
        serde_json::from_slice(bytes).map_err(|source| CredentialError::Parse {
            source_name: source_name.to_owned(),
            format: "dockerconfigjson",
            source,
        })?;
    entries(raw.auths, source_name, "dockerconfigjson")
}

/// Parses legacy `.dockercfg` bytes.
pub fn parse_dockercfg(bytes: &[u8], source_name: &str) -> Result<DockerConfig, CredentialError> {
    let raw: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes).map_err(|source| CredentialError::Parse {
            source_name: source_name.to_owned(),
            format: "dockercfg",
            source,
        })?;
    entries(raw, source_name, "dockercfg")
}

fn entries(
    raw: serde_json::Map<String, serde_json::Value>,
    source_name: &str,
    format: &'static str,
) -> Result<DockerConfig, CredentialError> {
    let mut out = Vec::with_capacity(raw.len());
    for (registry, value) in raw {
        let raw: RawEntry =
            serde_json::from_value(value).map_err(|source| CredentialError::ParseEntry {
                source_name: source_name.to_owned(),
                format,
                registry: registry.clone(),
                source,
            })?;
        let mut entry = DockerConfigEntry {
            username: raw.username,
            password: raw.password,
            email: raw.email,
        };
        if !raw.auth.is_empty() {
            let bad = || CredentialError::Auth {
                source_name: source_name.to_owned(),
                registry: registry.clone(),
            };
            let decoded = base64::decode(&raw.auth).map_err(|_| bad())?;
            let text = String::from_utf8(decoded).map_err(|_| bad())?;
            let (user, pass) = text.split_once(':').ok_or_else(bad)?;
            entry.username = user.to_owned();
            entry.password = pass.to_owned();
        }
        out.push((registry, entry));
    }
    Ok(out)
}

/// The entries as a map.
#[cfg(test)]
fn as_map(config: &DockerConfig) -> std::collections::BTreeMap<&str, &DockerConfigEntry> {
    config.iter().map(|(k, v)| (k.as_str(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_field_wins_over_username_and_password() {
        // base64("alice:s3cr:et") — a password may hold a colon.
        let json = br#"{"auths": {"reg.example.com": {"username": "x", "password": "y",
            "auth": "YWxpY2U6czNjcjpldA=="}, "other.io": {"username": "bob", "password": "pw"}}}"#;
        let config = parse_config_json(json, "secret ns/s").unwrap();
        let map = as_map(&config);
        assert_eq!(map["reg.example.com"].username, "alice");
        assert_eq!(map["reg.example.com"].password, "s3cr:et");
        assert_eq!(map["other.io"].username, "bob");
    }

    #[test]
    fn legacy_dockercfg_has_no_auths_wrapper() {
        let json = br#"{"https://index.docker.io/v1/": {"auth": "dTpw", "email": "a@b"}}"#;
        let config = parse_dockercfg(json, "f").unwrap();
        assert_eq!(config[0].0, "https://index.docker.io/v1/");
        assert_eq!(config[0].1.username, "u");
        assert_eq!(config[0].1.password, "p");
    }

    #[test]
    fn malformed_configs_name_their_source_and_hide_values() {
        let err = parse_config_json(b"{not json", "secret ns/bad").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("secret ns/bad: invalid dockerconfigjson JSON"));
        // base64("nocolon")
        let err =
            parse_config_json(br#"{"auths": {"r": {"auth": "bm9jb2xvbg=="}}}"#, "s").unwrap_err();
        assert!(
            err.to_string().contains("base64(username:password)"),
            "{err}"
        );
        assert!(!err.to_string().contains("nocolon"), "{err}");
        let entry = DockerConfigEntry {
            username: "u".into(),
            password: "hunter2".into(),
            email: String::new(),
        };
        assert!(!format!("{entry:?}").contains("hunter2"));
    }
}
