//! The device seam of container creation (upstream's `GetResources` device part):
//! what a device plugin's `Allocate` answer adds to one container's CRI config, and
//! the trait the runtime manager asks for it just before each CreateContainer.
//!
//! The device manager (`src/devicemanager/`, a layer above) implements
//! [`ContainerDevices`]; the agent hands it to the runtime manager. Called on pod
//! worker threads only. [`apply`] is pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::pod::{Container, Pod};
use crate::cri::pb;

/// A host path a plugin mounts into the container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMount {
    pub container_path: String,
    pub host_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// A device node a plugin exposes in the container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    pub container_path: String,
    pub host_path: String,
    /// Device cgroup permissions (any of r, w, m).
    #[serde(default)]
    pub permissions: String,
}

/// Everything device plugins ask for one container (their `ContainerAllocateResponse`s
/// merged), kept in the device checkpoint so a recreated container gets the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRunOptions {
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default)]
    pub mounts: Vec<DeviceMount>,
    #[serde(default)]
    pub devices: Vec<DeviceNode>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names.
    #[serde(default)]
    pub cdi_devices: Vec<String>,
}

impl DeviceRunOptions {
    /// Adds `other` (another resource's answer for the same container).
    pub fn merge(&mut self, other: DeviceRunOptions) {
        self.envs.extend(other.envs);
        self.mounts.extend(other.mounts);
        self.devices.extend(other.devices);
        self.annotations.extend(other.annotations);
        self.cdi_devices.extend(other.cdi_devices);
    }

    pub fn is_empty(&self) -> bool {
        *self == DeviceRunOptions::default()
    }
}

/// Why a container's devices could not be had (the device manager's error, boxed since
/// it is defined above this module).
pub type DevicesError = Box<dyn std::error::Error + Send + Sync>;

/// Asked for each container just before it is created: its devices (allocating them
/// on first use). An error's text is the container's CreateContainerConfigError message.
pub trait ContainerDevices: Send + Sync {
    fn run_options(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<DeviceRunOptions, DevicesError>;
}

/// Puts `options` into `config` as upstream does: the plugin's environment and mounts
/// before the container's own (a variable the container sets itself wins, since the
/// runtime applies later entries last), devices, annotations the pod does not set, CDI
/// devices.
pub fn apply(config: &mut pb::ContainerConfig, options: &DeviceRunOptions) {
    let mut envs: Vec<pb::KeyValue> = options
        .envs
        .iter()
        .map(|(key, value)| pb::KeyValue {
            key: key.clone(),
            value: value.clone(),
            ..Default::default()
        })
        .collect();
    envs.append(&mut config.envs);
    config.envs = envs;
    let mut mounts: Vec<pb::Mount> = options
        .mounts
        .iter()
        .map(|m| pb::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            ..Default::default()
        })
        .collect();
    mounts.append(&mut config.mounts);
    config.mounts = mounts;
    config
        .devices
        .extend(options.devices.iter().map(|d| pb::Device {
            container_path: d.container_path.clone(),
            host_path: d.host_path.clone(),
            permissions: d.permissions.clone(),
            ..Default::default()
        }));
    for (key, value) in &options.annotations {
        config
            .annotations
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    config
        .CDI_devices
        .extend(options.cdi_devices.iter().map(|name| pb::CDIDevice {
            name: name.clone(),
            ..Default::default()
        }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_envs_and_mounts_come_first_and_pod_annotations_win() {
        let mut config = pb::ContainerConfig {
            envs: vec![pb::KeyValue {
                key: "A".into(),
                value: "pod".into(),
                ..Default::default()
            }],
            mounts: vec![pb::Mount {
                container_path: "/data".into(),
                host_path: "/v".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        config.annotations.insert("x".into(), "pod".into());
        let options = DeviceRunOptions {
            envs: [("A".to_owned(), "dev".to_owned())].into(),
            mounts: vec![DeviceMount {
                container_path: "/tmp/Dev-1".into(),
                host_path: "/tmp/Dev-1".into(),
                read_only: true,
            }],
            devices: vec![DeviceNode {
                container_path: "/dev/gpu0".into(),
                host_path: "/dev/nvidia0".into(),
                permissions: "rw".into(),
            }],
            annotations: [
                ("x".to_owned(), "dev".to_owned()),
                ("y".to_owned(), "dev".to_owned()),
            ]
            .into(),
            cdi_devices: vec!["example.com/resource=CDI-Dev-1".into()],
        };
        apply(&mut config, &options);
        let envs: Vec<(&str, &str)> = config
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(envs, [("A", "dev"), ("A", "pod")]);
        assert_eq!(config.mounts[0].host_path, "/tmp/Dev-1");
        assert!(config.mounts[0].readonly);
        assert_eq!(config.mounts[1].host_path, "/v");
        assert_eq!(config.devices[0].host_path, "/dev/nvidia0");
        assert_eq!(config.devices[0].permissions, "rw");
        assert_eq!(config.annotations["x"], "pod");
        assert_eq!(config.annotations["y"], "dev");
        assert_eq!(config.CDI_devices[0].name, "example.com/resource=CDI-Dev-1");
    }
}
