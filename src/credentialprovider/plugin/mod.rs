//! Kubelet image credential provider plugins (upstream pkg/credentialprovider/plugin):
//! executables in `--image-credential-provider-bin-dir`, configured by
//! `--image-credential-provider-config`, that give registry credentials for the
//! images their `matchImages` name, such as ECR's, ACR's or GAR's, or a registry's
//! token exchange in service account token mode.
//!
//! - `config.rs`: the CredentialProviderConfig file, read and checked at start-up.
//! - `wire.rs`: the request and response JSON (pure).
//! - `exec.rs`: one run of a plugin as a child process (deadline, size caps).
//! - `cache.rs`: answers by image, registry or globally, per service account (pure).
//! - `flight.rs`: one run per image at a time, shared by concurrent pulls.
//! - `service_account.rs`: the pod's service account and its token (API server).
//! - `provider.rs`: one plugin, tying these together.
//!
//! [`CredentialPlugins::keyring`] is what a pull asks (on its pod worker thread):
//! every plugin's credentials for the image as a [`Keyring`], which the image
//! manager tries after the pod's pull secrets and the node's Docker config, as
//! upstream. A plugin that fails gives nothing; the error is logged and the pull
//! goes on with the other credentials.

pub mod cache;
pub mod config;
pub mod exec;
pub mod flight;
pub mod provider;
pub mod service_account;
pub mod wire;

use std::path::{Path, PathBuf};

pub use config::{load, ConfigError, ProviderConfig, Syntax};
pub use provider::{Provided, Provider};
pub use service_account::{AccountData, ServiceAccounts, TokenFor};
pub use wire::DurationParser;

use super::keyring::Keyring;
use crate::api::pod::Pod;
use crate::api::ApiError;

/// Why a plugin gave no credentials for an image. Each names the plugin; none
/// holds a credential or a token.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PluginError {
    #[error("credential provider {plugin:?}: running {}: {why}", path.display())]
    Exec {
        plugin: String,
        path: PathBuf,
        why: String,
    },
    #[error("credential provider {plugin:?}: plugin exited with {status}: {stderr}")]
    Failed {
        plugin: String,
        status: String,
        stderr: String,
    },
    #[error("credential provider {plugin:?}: bad response: {why}")]
    Response { plugin: String, why: String },
    #[error("credential provider {plugin:?}: service account {namespace}/{name}: {source}")]
    ServiceAccount {
        plugin: String,
        namespace: String,
        name: String,
        source: Box<ApiError>,
    },
    #[error(
        "credential provider {plugin:?}: token for service account {namespace}/{name}: {source}"
    )]
    Token {
        plugin: String,
        namespace: String,
        name: String,
        source: Box<ApiError>,
    },
    #[error("credential provider {plugin:?}: the API server sent no token for service account {namespace}/{name}")]
    EmptyToken {
        plugin: String,
        namespace: String,
        name: String,
    },
    #[error("credential provider {plugin:?}: service account token mode needs an API server (litelet runs standalone)")]
    NoApiServer { plugin: String },
    #[error("credential provider {plugin:?}: the plugin returned the service account token as the password for {image}, which only tokenAttributes.cacheType Token allows")]
    EchoedToken { plugin: String, image: String },
    #[error("credential provider {plugin:?}: the run another pull was waiting for ended without an answer")]
    Abandoned { plugin: String },
}

/// The pod a pull is for, as plugins see it.
#[derive(Clone, Copy, Debug)]
pub struct PodIdentity<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    /// `spec.serviceAccountName`; empty for none.
    pub service_account: &'a str,
}

impl<'a> PodIdentity<'a> {
    pub fn of(pod: &'a Pod) -> PodIdentity<'a> {
        PodIdentity {
            namespace: pod.namespace(),
            name: pod.name(),
            uid: pod.uid(),
            service_account: pod.spec.service_account_name.as_deref().unwrap_or(""),
        }
    }
}

/// Every configured plugin, in the config's order.
pub struct CredentialPlugins {
    providers: Vec<Provider>,
    accounts: Option<Box<dyn ServiceAccounts>>,
}

impl CredentialPlugins {
    /// The plugins of `configs`, run from `bin_dir` within `limits`; `duration`
    /// parses responses' `cacheDuration`; `accounts` serves token mode (`None`:
    /// standalone, no tokens).
    pub fn new(
        configs: Vec<ProviderConfig>,
        bin_dir: &Path,
        limits: exec::Limits,
        duration: DurationParser,
        accounts: Option<Box<dyn ServiceAccounts>>,
    ) -> CredentialPlugins {
        let providers = configs
            .into_iter()
            .map(|c| {
                let binary = bin_dir.join(&c.name);
                Provider::new(c, binary, limits, duration)
            })
            .collect();
        CredentialPlugins {
            providers,
            accounts,
        }
    }

    pub fn providers(&self) -> &[Provider] {
        &self.providers
    }

    /// Every plugin's credentials for `repository` (normalised, no tag) pulled by
    /// `pod`. A failing plugin is logged and contributes nothing.
    pub fn keyring(&self, pod: &PodIdentity<'_>, repository: &str) -> Keyring {
        let mut keyring = Keyring::default();
        for provider in &self.providers {
            match provider.provide(repository, pod, self.accounts.as_deref()) {
                Ok(Some(provided)) => keyring.add(&provided.source, &provided.auth),
                Ok(None) => {}
                Err(err) => log::warn!(
                    "pod {}/{} ({}): {err}; pulling {repository} without its credentials",
                    pod.namespace,
                    pod.name,
                    pod.uid
                ),
            }
        }
        keyring
    }
}

#[cfg(test)]
mod tests;
