//! Pull secrets into a keyring (upstream credentialprovider/secrets MakeDockerKeyring,
//! pure). Unlike upstream, one malformed secret does not void the others: it becomes
//! a problem for the caller to report, and the remaining secrets still count.

use std::collections::BTreeMap;

use super::config::{parse_config_json, parse_dockercfg};
use super::keyring::{CredentialSource, Keyring};
use super::CredentialError;

/// `kubernetes.io/dockerconfigjson`: a `config.json` under `.dockerconfigjson`.
pub const TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const KEY_DOCKER_CONFIG_JSON: &str = ".dockerconfigjson";
/// `kubernetes.io/dockercfg`: a legacy `.dockercfg` under `.dockercfg`.
pub const TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const KEY_DOCKERCFG: &str = ".dockercfg";

/// A pull secret as read from the API server.
#[derive(Clone, PartialEq, Eq)]
pub struct PullSecret {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub type_: Option<String>,
    pub data: BTreeMap<String, Vec<u8>>,
}

impl std::fmt::Debug for PullSecret {
    // The data holds credentials: print only the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("type", &self.type_)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The keyring of `secrets` (in order) and the secrets that could not be used.
pub fn keyring_from_secrets(secrets: &[PullSecret]) -> (Keyring, Vec<CredentialError>) {
    let mut keyring = Keyring::default();
    let mut problems = Vec::new();
    for secret in secrets {
        let source_name = format!("secret {}/{}", secret.namespace, secret.name);
        let type_ = secret.type_.as_deref().unwrap_or("Opaque");
        let parsed = match type_ {
            TYPE_DOCKER_CONFIG_JSON => secret
                .data
                .get(KEY_DOCKER_CONFIG_JSON)
                .ok_or_else(|| CredentialError::MissingKey {
                    source_name: source_name.clone(),
                    type_: type_.to_owned(),
                    key: KEY_DOCKER_CONFIG_JSON,
                })
                .and_then(|bytes| parse_config_json(bytes, &source_name)),
            TYPE_DOCKERCFG => secret
                .data
                .get(KEY_DOCKERCFG)
                .ok_or_else(|| CredentialError::MissingKey {
                    source_name: source_name.clone(),
                    type_: type_.to_owned(),
                    key: KEY_DOCKERCFG,
                })
                .and_then(|bytes| parse_dockercfg(bytes, &source_name)),
            other => Err(CredentialError::WrongType {
                source_name: source_name.clone(),
                type_: other.to_owned(),
            }),
        };
        match parsed {
            Ok(config) => {
                let source = CredentialSource::Secret {
                    namespace: secret.namespace.clone(),
                    name: secret.name.clone(),
                    uid: secret.uid.clone(),
                };
                keyring.add(&source, &config);
            }
            Err(problem) => problems.push(problem),
        }
    }
    (keyring, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, type_: &str, key: &str, value: &str) -> PullSecret {
        PullSecret {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            type_: Some(type_.into()),
            data: [(key.to_owned(), value.as_bytes().to_vec())].into(),
        }
    }

    #[test]
    fn malformed_secrets_are_reported_and_the_others_still_count() {
        let secrets = [
            secret(
                "broken",
                TYPE_DOCKER_CONFIG_JSON,
                KEY_DOCKER_CONFIG_JSON,
                "{oops",
            ),
            secret("opaque", "Opaque", "password", "x"),
            secret("nokey", TYPE_DOCKERCFG, "other", "{}"),
            secret(
                "good",
                TYPE_DOCKER_CONFIG_JSON,
                KEY_DOCKER_CONFIG_JSON,
                r#"{"auths": {"reg.io": {"username": "u", "password": "p"}}}"#,
            ),
            secret(
                "legacy",
                TYPE_DOCKERCFG,
                KEY_DOCKERCFG,
                r#"{"reg.io": {"username": "old", "password": "p"}}"#,
            ),
        ];
        let (keyring, problems) = keyring_from_secrets(&secrets);
        let users: Vec<String> = keyring
            .lookup("reg.io/app")
            .into_iter()
            .map(|c| c.username)
            .collect();
        assert_eq!(users, ["u", "old"]);
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(
            text[0].starts_with("secret ns/broken: invalid dockerconfigjson"),
            "{text:?}"
        );
        assert!(
            text[1].contains("\"Opaque\" is not kubernetes.io/dockerconfigjson"),
            "{text:?}"
        );
        assert!(text[2].contains("has no \".dockercfg\" key"), "{text:?}");
    }
}
