//! One configured plugin (upstream pluginProvider.provide): is the image one it
//! matches; in service account token mode, the pod's service account, its
//! annotations and a token; then the cached answer, or a run of the plugin (one per
//! image and service account at a time), checked and cached for `cacheDuration`
//! (else `defaultCacheDuration`; zero: not cached).
//!
//! Called from pod worker threads; the cache sits behind a short lock never held
//! across a plugin run or an API request. Tokens are never logged nor kept (the
//! cache holds their SHA-256 for `cacheType: Token`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::cache::{AccountKey, Base, Cache, CAPACITY};
use super::config::{ProviderConfig, TokenAttributes, TokenCacheType};
use super::exec::{self, Limits};
use super::flight::Flights;
use super::service_account::{select_annotations, ServiceAccounts, TokenFor};
use super::wire::{decode_response, encode_request, DurationParser, Response};
use super::{PluginError, PodIdentity};
use crate::credentialprovider::config::DockerConfig;
use crate::credentialprovider::keyring::{urls_match, CredentialSource};

/// A plugin's credentials for one image, and whose they are.
#[derive(Clone, Debug)]
pub struct Provided {
    pub auth: DockerConfig,
    /// `Node` unless the plugin is in service account token mode with a service
    /// account: then the pods of that account only.
    pub source: CredentialSource,
}

/// The pod's service account, as the plugin sees it.
struct Account {
    key: AccountKey,
    /// Never logged, never cached.
    token: String,
}

/// What token mode makes of a pod.
enum Mode {
    /// Do not ask the plugin (no service account but one is required, or a
    /// required annotation is missing).
    Skip,
    /// Ask without a token (no service account, none required).
    Anonymous,
    WithAccount(Account),
}

type FlightKey = (String, Option<AccountKey>);

/// One plugin; see the module doc.
pub struct Provider {
    config: ProviderConfig,
    binary: PathBuf,
    limits: Limits,
    duration: DurationParser,
    cache: Mutex<Cache>,
    flights: Flights<FlightKey, Result<Arc<Response>, PluginError>>,
}

fn lock(m: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    // Each update is one insert or removal: a panic elsewhere leaves the map whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn sha256_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Provider {
    pub fn new(
        config: ProviderConfig,
        binary: PathBuf,
        limits: Limits,
        duration: DurationParser,
    ) -> Provider {
        Provider {
            config,
            binary,
            limits,
            duration,
            cache: Mutex::new(Cache::new(CAPACITY)),
            flights: Flights::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// True when `repository` is one of the plugin's `matchImages`.
    pub fn matches(&self, repository: &str) -> bool {
        self.config
            .match_images
            .iter()
            .any(|pattern| urls_match(pattern, repository))
    }

    /// The plugin's credentials for `repository` (normalised, no tag) pulled by
    /// `pod`; `None` when the plugin is not to be asked.
    pub fn provide(
        &self,
        repository: &str,
        pod: &PodIdentity<'_>,
        accounts: Option<&dyn ServiceAccounts>,
    ) -> Result<Option<Provided>, PluginError> {
        if !self.matches(repository) {
            return Ok(None);
        }
        let account = match &self.config.token_attributes {
            None => None,
            Some(attrs) => match self.account(attrs, pod, accounts)? {
                Mode::Skip => return Ok(None),
                Mode::Anonymous => None,
                Mode::WithAccount(account) => Some(account),
            },
        };
        let source = account.as_ref().map_or(CredentialSource::Node, |a| {
            CredentialSource::ServiceAccount {
                namespace: a.key.namespace.clone(),
                name: a.key.name.clone(),
                uid: a.key.uid.clone(),
            }
        });
        let key = account.as_ref().map(|a| a.key.clone());
        if let Some(auth) = lock(&self.cache).get(repository, key.as_ref(), Instant::now()) {
            return Ok(Some(Provided { auth, source }));
        }
        let abandoned = Err(PluginError::Abandoned {
            plugin: self.config.name.clone(),
        });
        let flight = (repository.to_owned(), key.clone());
        let response = self.flights.run(
            &flight,
            || self.run(repository, account.as_ref()).map(Arc::new),
            abandoned,
        )?;
        if let Some(account) = &account {
            self.check_not_echoed(&response, account, repository)?;
        }
        let ttl = response
            .cache_duration
            .unwrap_or(self.config.default_cache_duration);
        if !ttl.is_zero() {
            lock(&self.cache).insert(
                Base::of(response.cache_key_type, repository),
                key,
                response.auth.clone(),
                ttl,
                Instant::now(),
            );
        }
        Ok(Some(Provided {
            auth: response.auth.clone(),
            source,
        }))
    }

    /// Token mode: the pod's service account, its annotations and a token.
    fn account(
        &self,
        attrs: &TokenAttributes,
        pod: &PodIdentity<'_>,
        accounts: Option<&dyn ServiceAccounts>,
    ) -> Result<Mode, PluginError> {
        let plugin = || self.config.name.clone();
        if pod.service_account.is_empty() {
            if attrs.require_service_account {
                log::debug!(
                    "credential provider {:?}: pod {}/{} has no service account, which the plugin requires",
                    self.config.name,
                    pod.namespace,
                    pod.name
                );
                return Ok(Mode::Skip);
            }
            return Ok(Mode::Anonymous);
        }
        let (namespace, name) = (pod.namespace, pod.service_account);
        let accounts = accounts.ok_or_else(|| PluginError::NoApiServer { plugin: plugin() })?;
        let data = accounts
            .service_account(namespace, name)
            .map_err(|source| PluginError::ServiceAccount {
                plugin: plugin(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source: Box::new(source),
            })?;
        let Some(annotations) = select_annotations(
            &data.annotations,
            &attrs.required_annotation_keys,
            &attrs.optional_annotation_keys,
        ) else {
            // How a workload opts in: quiet, as upstream (verbose level).
            log::debug!(
                "credential provider {:?}: service account {namespace}/{name} lacks a required annotation",
                self.config.name
            );
            return Ok(Mode::Skip);
        };
        let token = accounts
            .token(&TokenFor {
                namespace,
                service_account: name,
                service_account_uid: &data.uid,
                audience: &attrs.audience,
                pod_name: pod.name,
                pod_uid: pod.uid,
            })
            .map_err(|source| PluginError::Token {
                plugin: plugin(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source: Box::new(source),
            })?;
        if token.is_empty() {
            return Err(PluginError::EmptyToken {
                plugin: plugin(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        let token_hash = (attrs.cache_type == TokenCacheType::Token).then(|| sha256_hex(&token));
        let key = AccountKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: data.uid,
            annotations,
            token_hash,
        };
        Ok(Mode::WithAccount(Account { key, token }))
    }

    /// Only `cacheType: Token` may hand the token back as the password: other cache
    /// types would keep it past its owner's use (upstream's check).
    fn check_not_echoed(
        &self,
        response: &Response,
        account: &Account,
        repository: &str,
    ) -> Result<(), PluginError> {
        let token_mode = self.config.token_attributes.as_ref();
        let cache_type = token_mode.map(|t| t.cache_type);
        if cache_type != Some(TokenCacheType::Token)
            && response
                .auth
                .iter()
                .any(|(_, e)| e.password == account.token)
        {
            return Err(PluginError::EchoedToken {
                plugin: self.config.name.clone(),
                image: repository.to_owned(),
            });
        }
        Ok(())
    }

    /// Runs the plugin once for `repository` and decodes its answer.
    fn run(&self, repository: &str, account: Option<&Account>) -> Result<Response, PluginError> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        let (token, annotations) = match account {
            Some(a) => (a.token.as_str(), &a.key.annotations),
            None => ("", &NONE),
        };
        let request = encode_request(self.config.api_version, repository, token, annotations);
        let plugin = &self.config.name;
        log::debug!("credential provider {plugin:?}: asking for {repository}");
        let started = Instant::now();
        let finished = exec::run(
            &self.binary,
            &self.config.args,
            &self.config.env,
            &request,
            self.limits,
        )
        .map_err(|e| PluginError::Exec {
            plugin: plugin.clone(),
            path: self.binary.clone(),
            why: e.to_string(),
        })?;
        let stderr = String::from_utf8_lossy(&finished.stderr).trim().to_owned();
        if !finished.status.success() {
            return Err(PluginError::Failed {
                plugin: plugin.clone(),
                status: finished.status.to_string(),
                stderr,
            });
        }
        if !stderr.is_empty() {
            log::info!("credential provider {plugin:?} for {repository}: stderr: {stderr}");
        }
        log::debug!(
            "credential provider {plugin:?} answered for {repository} in {:?}",
            started.elapsed()
        );
        decode_response(
            plugin,
            self.config.api_version,
            &finished.stdout,
            self.duration,
        )
    }

    /// Answers kept now (for tests).
    pub fn cached(&self) -> usize {
        lock(&self.cache).len()
    }
}
