//! Registry credentials for image pulls (upstream pkg/credentialprovider): the Docker
//! config formats (`config.rs`), the keyring that matches an image to credentials as
//! the Docker client does (`keyring.rs`), pull secrets turned into a keyring
//! (`secrets.rs`), the node-wide Docker config files (`node.rs`), and kubelet
//! credential provider plugins (`plugin/`: child processes, and the API server for
//! service account tokens). Only `node.rs` and `plugin/` do I/O.
//!
//! Called from pod worker threads when an image must be pulled. Credentials live in
//! memory only and are never logged: `Credential`'s `Debug` hides the password.

pub mod config;
pub mod keyring;
pub mod node;
pub mod plugin;
pub mod secrets;

pub use config::{DockerConfig, DockerConfigEntry};
pub use keyring::{Credential, CredentialSource, Keyring};
pub use node::NodeDockerConfig;
pub use secrets::{keyring_from_secrets, PullSecret};

/// Why a Docker config (a secret or a node file) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The JSON does not parse as the expected Docker config format.
    #[error("{source_name}: invalid {format} JSON: {source}")]
    Parse {
        source_name: String,
        format: &'static str,
        source: serde_json::Error,
    },
    /// One registry's entry does not have the expected shape.
    #[error("{source_name}: invalid {format} JSON: registry {registry:?}: {source}")]
    ParseEntry {
        source_name: String,
        format: &'static str,
        registry: String,
        source: serde_json::Error,
    },
    /// An entry's `auth` field is not base64 of `username:password`.
    #[error("{source_name}: registry {registry:?}: unable to parse auth field, must be formatted as base64(username:password)")]
    Auth {
        source_name: String,
        registry: String,
    },
    /// A pull secret lacks the key its type requires.
    #[error("{source_name}: secret of type {type_} has no {key:?} key")]
    MissingKey {
        source_name: String,
        type_: String,
        key: &'static str,
    },
    /// A pull secret of a type that carries no registry credentials.
    #[error("{source_name}: secret type {type_:?} is not kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg")]
    WrongType { source_name: String, type_: String },
}
