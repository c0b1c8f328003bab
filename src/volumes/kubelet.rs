//! The kubelet's volume seam (`kubelet::deps::PodVolumes`) implemented by the
//! `VolumeManager`, so the syncer's pod workers set up and tear down real volumes.
//! Errors go whole into the seam's `PodVolumesError` (the syncer records the
//! FailedMount event); env references go through the pod's `PodConfigSource`; image
//! pull secrets through the same per-pod object cache as secret volumes (not kept
//! on the node: the images stay).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::cache::{ObjectKind, ObjectRef};
use super::VolumeManager;
use crate::api::pod::Pod;
use crate::credentialprovider::PullSecret;
use crate::kubelet::deps::{PodVolumes, PodVolumesError};
use crate::runtime::env::ConfigSource;

impl PodVolumes for VolumeManager {
    fn setup(&self, pod: &Pod) -> Result<BTreeMap<String, PathBuf>, PodVolumesError> {
        self.setup_pod(pod)
            .map_err(|err| PodVolumesError::Setup(Arc::new(err)))
    }

    fn teardown(&self, uid: &str) -> Result<(), PodVolumesError> {
        self.teardown_pod(uid)
            .map_err(|err| PodVolumesError::Teardown {
                uid: uid.to_owned(),
                source: Arc::new(err),
            })
    }

    fn config_source<'a>(&'a self, pod: &'a Pod) -> Box<dyn ConfigSource + 'a> {
        Box::new(VolumeManager::config_source(self, pod))
    }

    fn pull_secret(&self, pod: &Pod, name: &str) -> Result<Option<PullSecret>, PodVolumesError> {
        let object = ObjectRef {
            kind: ObjectKind::Secret,
            namespace: pod.namespace(),
            name,
            keep: false,
        };
        let found = self
            .objects
            .get(&object, pod.uid(), Instant::now())
            .map_err(|err| PodVolumesError::PullSecret {
                name: name.to_owned(),
                source: Arc::new(err),
            })?;
        Ok(found.map(|data| PullSecret {
            namespace: pod.namespace().to_owned(),
            name: name.to_owned(),
            uid: data.uid.clone(),
            type_: data.secret_type.clone(),
            data: data.files.clone(),
        }))
    }
}
