//! The kubelet's volume seam (`kubelet::deps::PodVolumes`) implemented by the
//! `VolumeManager`, so the syncer's pod workers set up and tear down real volumes.
//! Errors become their messages (the syncer records the FailedMount event); env
//! references go through the manager's node-wide `ConfigSource`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::VolumeManager;
use crate::api::pod::Pod;
use crate::kubelet::deps::PodVolumes;
use crate::runtime::env::ConfigSource;

impl PodVolumes for VolumeManager {
    fn setup(&self, pod: &Pod) -> Result<BTreeMap<String, PathBuf>, String> {
        self.setup_pod(pod).map_err(|err| err.to_string())
    }

    fn teardown(&self, uid: &str) -> Result<(), String> {
        self.teardown_pod(uid).map_err(|err| err.to_string())
    }

    fn config_source(&self) -> &dyn ConfigSource {
        self
    }
}
