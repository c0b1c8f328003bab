//! The pod's image pull secrets for the image manager (`images::manager`; upstream
//! getPullSecretsForPod): each `imagePullSecrets` name read through the volume
//! manager's secret cache, which the Node authorizer allows for pods bound here.
//! Called on pod worker threads, only when a pull or a credential check needs them.

use super::deps::PodVolumes;
use crate::api::pod::Pod;
use crate::credentialprovider::PullSecret;
use crate::images::manager::PullSecretSource;

/// Reads pull secrets through `PodVolumes::pull_secret`.
pub struct VolumePullSecrets<'a>(pub &'a dyn PodVolumes);

impl PullSecretSource for VolumePullSecrets<'_> {
    fn pull_secrets(&self, pod: &Pod) -> (Vec<PullSecret>, Vec<String>) {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for reference in &pod.spec.image_pull_secrets {
            let Some(name) = reference.name.as_deref().filter(|n| !n.is_empty()) else {
                // The API allowed empty names once (kubernetes#99454): nothing to read.
                continue;
            };
            match self.0.pull_secret(pod, name) {
                Ok(Some(secret)) => found.push(secret),
                Ok(None) => missing.push(name.to_owned()),
                Err(err) => {
                    log::info!(
                        "pod {}/{} ({}): cannot read image pull secret {name:?}: {err}",
                        pod.namespace(),
                        pod.name(),
                        pod.uid()
                    );
                    missing.push(name.to_owned());
                }
            }
        }
        (found, missing)
    }
}
