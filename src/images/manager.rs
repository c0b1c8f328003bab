//! Makes sure a container's image is present before it is created (upstream
//! EnsureImageExists): default tag, pull policy, per-image pull back-off, events, and
//! registry credentials: the pod's pull secrets, then the node's Docker config, then
//! the credential provider plugins' answers, matched to the image
//! (`credentialprovider`) and tried in order until one pull succeeds.
//! An image already present that was pulled with a secret is checked against the
//! pod's credentials first (`pull_records`).
//!
//! Failures are [`EnsureError`]s, each naming the container's waiting reason; the
//! runtime manager turns them into its step failures. Called from pod worker threads; the back-off table and the pull records are the
//! shared state, each behind a short lock never held across a CRI call. Pulls take a
//! slot of the pull limiter first (`pull_limit.rs`: one at a time unless
//! `serializeImagePulls` is false). Secrets are
//! read only when a pull or a check needs them. No credential is ever logged.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use protobuf::MessageField;

use super::pull_limit::{PullConcurrency, PullLimiter};
use super::pull_records::{is_allowlisted, must_pull, PullRecords, VerificationPolicy};
use crate::api::pod::{Container, ImagePullPolicy, Pod};
use crate::backoff::Backoff;
use crate::credentialprovider::keyring::{lookup_union, normalize_repository};
use crate::credentialprovider::plugin::{CredentialPlugins, PodIdentity};
use crate::credentialprovider::{keyring_from_secrets, Credential, NodeDockerConfig, PullSecret};
use crate::cri::{pb, CriError, ImageClient};
use crate::events::{EventType, Recorder};

/// Waiting reasons a container's image can leave on it (upstream's images errors).
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";

/// The waiting reason when the runtime cannot tell whether the image is present.
pub const IMAGE_INSPECT_ERROR: &str = "ImageInspectError";

/// The reason of a pull given up because the pod worker's sync was cancelled (never
/// shown: a cancelled sync reports no waiting reasons).
pub const PULL_CANCELLED: &str = "PullCancelled";

/// Why a pull did not give an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// Every attempt failed; the attempts' errors, joined.
    #[error("{0}")]
    Failed(String),
    /// The pod worker's sync was cancelled during the pull (the call was cancelled).
    #[error("pull cancelled")]
    Cancelled,
}

/// Why a container's image is not there to create it from. Each kind is a waiting
/// reason ([`EnsureError::reason`]); the message is the one the container shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnsureError {
    /// The reference does not parse.
    #[error("{0}")]
    InvalidName(String),
    /// The runtime could not tell whether the image is present.
    #[error("{0}")]
    Inspect(String),
    /// The image is absent and the pull policy is Never.
    #[error("{0}")]
    NeverPull(String),
    /// A recent pull failed: the next may be made in `retry_in`.
    #[error("{message}")]
    BackOff { message: String, retry_in: Duration },
    /// The pull failed: the next may be made in `retry_in`.
    #[error("{message}")]
    Pull { message: String, retry_in: Duration },
    /// The pod worker's sync was cancelled before or during the pull.
    #[error("{0}")]
    Cancelled(String),
}

impl EnsureError {
    /// The container's waiting reason (upstream's name).
    pub fn reason(&self) -> &'static str {
        match self {
            EnsureError::InvalidName(_) => INVALID_IMAGE_NAME,
            EnsureError::Inspect(_) => IMAGE_INSPECT_ERROR,
            EnsureError::NeverPull(_) => ERR_IMAGE_NEVER_PULL,
            EnsureError::BackOff { .. } => IMAGE_PULL_BACK_OFF,
            EnsureError::Pull { .. } => ERR_IMAGE_PULL,
            EnsureError::Cancelled(_) => PULL_CANCELLED,
        }
    }

    /// When a back-off decides the next attempt: how long until it may be made.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            EnsureError::BackOff { retry_in, .. } | EnsureError::Pull { retry_in, .. } => {
                Some(*retry_in)
            }
            _ => None,
        }
    }
}

/// The back-off key of an image pull: `<pod uid>_<image>`.
pub fn image_pull_key(pod_uid: &str, image: &str) -> String {
    format!("{pod_uid}_{image}")
}

/// The user an image runs as, from CRI `Image.uid` / `Image.username`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

/// The event reason when a pull secret cannot be read or used (upstream's name).
pub const FAILED_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";

/// Reads a pod's image pull secrets from the API server (the kubelet implements it).
pub trait PullSecretSource: Send + Sync {
    /// The pod's pull secrets that exist, in `imagePullSecrets` order, and the names
    /// of those that could not be read (missing, forbidden, API failure).
    fn pull_secrets(&self, pod: &Pod) -> (Vec<PullSecret>, Vec<String>);
}

/// How pulls find credentials and whether present images are checked.
pub struct CredentialSettings {
    pub node_config: NodeDockerConfig,
    /// `--image-credential-provider-config`'s plugins, asked after the node config.
    pub plugins: Option<std::sync::Arc<CredentialPlugins>>,
    pub records: PullRecords,
    pub policy: VerificationPolicy,
    /// `preloadedImagesVerificationAllowlist` (for `NeverVerifyAllowlistedImages`).
    pub allowlist: Vec<String>,
}

impl Default for CredentialSettings {
    fn default() -> Self {
        CredentialSettings {
            node_config: NodeDockerConfig::default(),
            plugins: None,
            records: PullRecords::in_memory(),
            policy: VerificationPolicy::default(),
            allowlist: Vec::new(),
        }
    }
}

/// Pulls images and remembers which pulls failed recently.
pub struct ImageManager {
    client: ImageClient,
    backoff: Mutex<Backoff>,
    recorder: Recorder,
    credentials: CredentialSettings,
    limiter: PullLimiter,
}

/// An image reference that does not parse (upstream's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image name {0:?}: invalid reference format")]
pub struct InvalidImageName(pub String);

/// Adds `:latest` to a reference with neither tag nor digest; rejects malformed names
/// (uppercase or odd characters in the repository, whitespace anywhere).
pub fn with_default_tag(image: &str) -> Result<String, InvalidImageName> {
    let invalid = || InvalidImageName(image.to_owned());
    let repository = repository_part(image);
    let repo_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:".contains(c);
    if repository.is_empty() || repository.ends_with('/') || !repository.chars().all(repo_char) {
        return Err(invalid());
    }
    if image.chars().any(char::is_whitespace) {
        return Err(invalid());
    }
    if image.contains('@') || has_tag(image) {
        Ok(image.to_owned())
    } else {
        Ok(format!("{image}:latest"))
    }
}

/// The reference without its tag and digest (a registry port stays).
fn repository_part(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

fn has_tag(image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.contains(':')
}

/// The pull policy, defaulted as the API server would for pods that did not pass
/// through it (static pods): Always for `:latest` or no tag, else IfNotPresent.
pub fn pull_policy(container: &Container) -> ImagePullPolicy {
    if let Some(policy) = &container.image_pull_policy {
        return policy.clone();
    }
    let image = container.image.as_deref().unwrap_or("");
    if image.contains('@') {
        return ImagePullPolicy::IfNotPresent;
    }
    if !has_tag(image) || image.ends_with(":latest") {
        ImagePullPolicy::Always
    } else {
        ImagePullPolicy::IfNotPresent
    }
}

impl ImageManager {
    pub fn new(client: ImageClient, recorder: Recorder) -> ImageManager {
        ImageManager {
            client,
            backoff: Mutex::new(Backoff::default()),
            recorder,
            credentials: CredentialSettings::default(),
            limiter: PullLimiter::new(PullConcurrency::Parallel(None)),
        }
    }

    /// Runs pulls `concurrency` at a time (no limit until this is called).
    pub fn set_pull_concurrency(&mut self, concurrency: PullConcurrency) {
        self.limiter = PullLimiter::new(concurrency);
    }

    /// Uses `credentials` for pulls and checks of present images.
    pub fn set_credentials(&mut self, credentials: CredentialSettings) {
        self.credentials = credentials;
    }

    /// The credentials for `image`, pod secrets first, then the node's Docker config,
    /// then the plugins (upstream's keyring order): unreadable or malformed secrets
    /// become one warning event each and are skipped; a failing plugin is logged.
    fn credentials_for(
        &self,
        pod: &Pod,
        image: &str,
        secrets: Option<&dyn PullSecretSource>,
    ) -> Vec<Credential> {
        let (found, missing) = match secrets {
            Some(source) if !pod.spec.image_pull_secrets.is_empty() => source.pull_secrets(pod),
            _ => (Vec::new(), Vec::new()),
        };
        if !missing.is_empty() {
            let message = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            );
            self.recorder
                .pod(pod, EventType::Warning, FAILED_PULL_SECRET, message);
        }
        let (pod_keyring, problems) = keyring_from_secrets(&found);
        for problem in problems {
            let message =
                format!("Unable to use image pull secret: {problem}; trying the other credentials");
            self.recorder
                .pod(pod, EventType::Warning, FAILED_PULL_SECRET, message);
        }
        let node_keyring = self.credentials.node_config.read();
        let repository = normalize_repository(image);
        let plugin_keyring = match &self.credentials.plugins {
            Some(plugins) => plugins.keyring(&PodIdentity::of(pod), &repository),
            None => Default::default(),
        };
        lookup_union(&[&pod_keyring, &node_keyring, &plugin_keyring], &repository)
    }

    /// Pulls `image` with each credential in turn (anonymously when there is none)
    /// until one succeeds; records which one did, after an intent written before the
    /// pull (`pull_records`). The error joins every attempt's.
    fn pull(
        &self,
        image: &str,
        credentials: &[Credential],
        sandbox_config: &pb::PodSandboxConfig,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<String, PullError> {
        let request = |auth: Option<pb::AuthConfig>| pb::PullImageRequest {
            image: MessageField::some(pb::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            auth: auth.into(),
            sandbox_config: MessageField::some(sandbox_config.clone()),
            ..Default::default()
        };
        // On disk before the pull: a crash before its record leaves the image verified.
        let intent = self
            .credentials
            .records
            .intend(image)
            .map_err(|e| PullError::Failed(e.to_string()))?;
        let attempts: Vec<Option<&Credential>> = if credentials.is_empty() {
            vec![None]
        } else {
            credentials.iter().map(Some).collect()
        };
        // One slot for all the credential attempts of this pull.
        let Some(_slot) = self.limiter.acquire(cancelled) else {
            return Err(PullError::Cancelled);
        };
        let mut errors = Vec::new();
        for credential in attempts {
            let auth = credential.map(|c| pb::AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..Default::default()
            });
            let pulled = self
                .client
                .pull_image_cancellable(&request(auth), cancelled);
            match pulled {
                Ok(response) => {
                    let reference = if response.image_ref.is_empty() {
                        image.to_owned()
                    } else {
                        response.image_ref
                    };
                    let repository = normalize_repository(image);
                    intent.pulled(&reference, &repository, credential);
                    return Ok(reference);
                }
                Err(CriError::Cancelled { .. }) => return Err(PullError::Cancelled),
                Err(err) => errors.push(describe_pull_error(&err, credential.is_some())),
            }
        }
        Err(PullError::Failed(errors.join("; ")))
    }

    fn image_ref(&self, image: &str) -> Result<Option<String>, CriError> {
        let response = self.client.image_status(&pb::ImageStatusRequest {
            image: MessageField::some(pb::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        Ok(response.image.into_option().map(|i| i.id))
    }

    /// The user `image` runs as (ImageStatus, not verbose); an image the runtime
    /// does not know has none (upstream then assumes root).
    pub fn image_user(&self, image: &str) -> Result<ImageUser, CriError> {
        let response = self.client.image_status(&pb::ImageStatusRequest {
            image: MessageField::some(pb::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        })?;
        Ok(response
            .image
            .into_option()
            .map(|i| ImageUser {
                uid: i.uid.into_option().map(|u| u.value),
                username: i.username,
            })
            .unwrap_or_default())
    }

    /// Returns the image reference to create the container from, pulling the image
    /// when the policy says so; the failure carries the upstream waiting reason.
    /// `cancelled` tells when the pod worker's sync was cancelled.
    pub fn ensure_image(
        &self,
        pod: &Pod,
        container: &Container,
        sandbox_config: &pb::PodSandboxConfig,
        secrets: Option<&dyn PullSecretSource>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<String, EnsureError> {
        let name = &container.name;
        let raw = container.image.as_deref().unwrap_or("");
        let (image, present) = self.inspect(pod, name, raw)?;
        let (should_pull, credentials) =
            self.pull_needed(pod, container, &image, present.as_deref(), secrets);
        if !should_pull {
            return self.use_present(pod, name, raw, present);
        }

        let key = image_pull_key(pod.uid(), raw);
        let waiting = self
            .lock_backoff()
            .remaining_since_update(&key, SystemTime::now());
        if let Some(left) = waiting {
            let message = format!("Back-off pulling image {raw:?}");
            self.recorder
                .container(pod, name, EventType::Normal, "BackOff", &message);
            return Err(EnsureError::BackOff {
                message,
                retry_in: left,
            });
        }
        self.recorder.container(
            pod,
            name,
            EventType::Normal,
            "Pulling",
            format!("Pulling image {raw:?}"),
        );
        let started = Instant::now();
        let credentials = credentials.unwrap_or_else(|| self.credentials_for(pod, &image, secrets));
        if cancelled() {
            return Err(EnsureError::Cancelled(
                "sync cancelled before the pull".to_owned(),
            ));
        }
        match self.pull(&image, &credentials, sandbox_config, cancelled) {
            Ok(reference) => {
                let message = format!(
                    "Successfully pulled image {raw:?} in {:?}",
                    started.elapsed()
                );
                self.recorder
                    .container(pod, name, EventType::Normal, "Pulled", message);
                self.lock_backoff().gc(SystemTime::now());
                Ok(reference)
            }
            // Not a failure of the image: no event, no back-off.
            Err(PullError::Cancelled) => Err(EnsureError::Cancelled(format!(
                "pulling image {raw:?}: sync cancelled"
            ))),
            Err(PullError::Failed(err)) => {
                let message = format!("Failed to pull image {raw:?}: {err}");
                self.recorder
                    .container(pod, name, EventType::Warning, "Failed", &message);
                let now = SystemTime::now();
                let delay = {
                    let mut backoff = self.lock_backoff();
                    backoff.next(&key, now, now);
                    backoff.get(&key)
                };
                Err(EnsureError::Pull {
                    message,
                    retry_in: delay,
                })
            }
        }
    }

    /// The image's full name and, when the runtime has it, its reference.
    fn inspect(
        &self,
        pod: &Pod,
        name: &str,
        raw: &str,
    ) -> Result<(String, Option<String>), EnsureError> {
        let image = with_default_tag(raw).map_err(|err| {
            let message = err.to_string();
            self.recorder
                .container(pod, name, EventType::Warning, "InspectFailed", &message);
            EnsureError::InvalidName(message)
        })?;
        let present = self.image_ref(&image).map_err(|err| {
            let message = format!("Failed to inspect image {image:?}: {err}");
            self.recorder
                .container(pod, name, EventType::Warning, "InspectFailed", &message);
            EnsureError::Inspect(message)
        })?;
        Ok((image, present))
    }

    /// Whether the image must be pulled, with the pod's credentials when deciding it
    /// needed them.
    fn pull_needed(
        &self,
        pod: &Pod,
        container: &Container,
        image: &str,
        present: Option<&str>,
        secrets: Option<&dyn PullSecretSource>,
    ) -> (bool, Option<Vec<Credential>>) {
        let reference = match (pull_policy(container), present) {
            (ImagePullPolicy::Never, _) => return (false, None),
            (ImagePullPolicy::Always, _) | (_, None) => return (true, None),
            (_, Some(reference)) => reference,
        };
        // IfNotPresent on a present image: may this pod use it?
        let policy = self.credentials.policy;
        let repository = normalize_repository(image);
        let pulled = self.credentials.records.get(reference, &repository);
        let allowlisted = is_allowlisted(&self.credentials.allowlist, &repository);
        let records = &self.credentials.records;
        let digest = |c: &Credential| records.digest(c);
        // Offered credentials can only lift the need to pull: read secrets only when
        // the image would be pulled without them.
        if !must_pull(policy, allowlisted, &pulled, &[], digest) {
            return (false, None);
        }
        let offered = self.credentials_for(pod, image, secrets);
        let pull = must_pull(policy, allowlisted, &pulled, &offered, digest);
        (pull, Some(offered))
    }

    /// The outcome when no pull is wanted: the present image, or Never's refusal.
    fn use_present(
        &self,
        pod: &Pod,
        name: &str,
        raw: &str,
        present: Option<String>,
    ) -> Result<String, EnsureError> {
        match present {
            Some(reference) => {
                let message = format!("Container image {raw:?} already present on machine");
                self.recorder
                    .container(pod, name, EventType::Normal, "Pulled", message);
                Ok(reference)
            }
            None => {
                let message =
                    format!("Container image {raw:?} is not present with pull policy of Never");
                self.recorder.container(
                    pod,
                    name,
                    EventType::Warning,
                    "ErrImageNeverPull",
                    &message,
                );
                Err(EnsureError::NeverPull(message))
            }
        }
    }

    fn lock_backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The runtime's pull error, saying plainly when the registry refused the credentials
/// (or their absence), since runtimes bury that in a long resolver message.
fn describe_pull_error(err: &CriError, with_credentials: bool) -> String {
    let text = err.to_string();
    let lower = text.to_ascii_lowercase();
    let refused = lower.contains("401 unauthorized")
        || lower.contains("403 forbidden")
        || lower.contains("authorization failed")
        || lower.contains("unauthorized");
    match (refused, with_credentials) {
        (true, true) => {
            format!("authentication failed: the registry refused the credentials: {text}")
        }
        (true, false) => {
            format!("authentication required: the registry refused an anonymous pull: {text}")
        }
        (false, _) => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tag_and_validation() {
        let cases = [
            ("busybox", Ok("busybox:latest")),
            ("busybox:1.36", Ok("busybox:1.36")),
            ("localhost:5000/app", Ok("localhost:5000/app:latest")),
            ("localhost:5000/app:v2", Ok("localhost:5000/app:v2")),
            ("app@sha256:abcd", Ok("app@sha256:abcd")),
            ("repo/App:1", Err(())),
            ("has space", Err(())),
            ("", Err(())),
            ("trailing/", Err(())),
        ];
        for (input, want) in cases {
            let got = with_default_tag(input);
            match want {
                Ok(expected) => assert_eq!(got.as_deref(), Ok(expected), "{input}"),
                Err(()) => assert!(got.is_err(), "{input} should be rejected"),
            }
        }
        assert!(
            with_default_tag("app:MixedCaseTag").is_ok(),
            "uppercase is fine in a tag"
        );
    }

    #[test]
    fn pull_policy_defaults_like_the_api_server() {
        let container = |image: &str| Container {
            image: Some(image.into()),
            ..Default::default()
        };
        assert_eq!(pull_policy(&container("busybox")), ImagePullPolicy::Always);
        assert_eq!(
            pull_policy(&container("busybox:latest")),
            ImagePullPolicy::Always
        );
        assert_eq!(
            pull_policy(&container("busybox:1.0")),
            ImagePullPolicy::IfNotPresent
        );
        assert_eq!(
            pull_policy(&container("localhost:5000/busybox")),
            ImagePullPolicy::Always
        );
        let mut explicit = container("busybox");
        explicit.image_pull_policy = Some(ImagePullPolicy::Never);
        assert_eq!(pull_policy(&explicit), ImagePullPolicy::Never);
    }
}
