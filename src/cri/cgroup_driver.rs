//! Which cgroup driver the runtime uses, so that litelet can refuse to start with the
//! other one (pods would get cgroups in one tree and containers in another). Upstream
//! asks CRI `RuntimeConfig`; runtimes before it (containerd 1.6/1.7) answer
//! UNIMPLEMENTED, and then containerd's verbose `Status` tells: its CRI config under
//! `info["config"]`, whose default runc runtime has `options.SystemdCgroup`.
//!
//! The parsing and the comparison are pure; [`detect`] makes the (at most two) calls.

use std::collections::HashMap;

use super::{pb, CriError, RuntimeClient};

/// The two drivers, by their flag names.
pub const SYSTEMD: &str = "systemd";
pub const CGROUPFS: &str = "cgroupfs";

/// What the runtime says about its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeDriver {
    /// The runtime uses this driver (`systemd` or `cgroupfs`); `source` says how we know.
    Known {
        driver: &'static str,
        source: &'static str,
    },
    /// It could not be learned; why.
    Unknown(String),
}

/// The driver from a `RuntimeConfig` reply.
pub fn from_runtime_config(reply: &pb::RuntimeConfigResponse) -> RuntimeDriver {
    let Some(linux) = reply.linux.as_ref() else {
        return RuntimeDriver::Unknown("RuntimeConfig has no linux section".into());
    };
    let driver = match linux.cgroup_driver.enum_value() {
        Ok(pb::CgroupDriver::SYSTEMD) => SYSTEMD,
        Ok(pb::CgroupDriver::CGROUPFS) => CGROUPFS,
        Err(n) => return RuntimeDriver::Unknown(format!("RuntimeConfig cgroup driver {n}")),
    };
    RuntimeDriver::Known {
        driver,
        source: "CRI RuntimeConfig",
    }
}

/// The driver from containerd's verbose `Status` info: the default runtime's
/// `SystemdCgroup` option (runc's default, cgroupfs, when the option is absent).
pub fn from_status_info(info: &HashMap<String, String>) -> RuntimeDriver {
    let Some(text) = info.get("config") else {
        return RuntimeDriver::Unknown("the runtime's status has no config".into());
    };
    let config: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return RuntimeDriver::Unknown(format!("the runtime's config is not JSON: {e}")),
    };
    let containerd = &config["containerd"];
    let Some(name) = containerd["defaultRuntimeName"].as_str() else {
        return RuntimeDriver::Unknown("the runtime's config names no default runtime".into());
    };
    let runtime = &containerd["runtimes"][name];
    let kind = runtime["runtimeType"].as_str().unwrap_or("");
    if !kind.contains("runc") {
        return RuntimeDriver::Unknown(format!("default runtime {name:?} is {kind:?}, not runc"));
    }
    let systemd = match &runtime["options"]["SystemdCgroup"] {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Null => false,
        other => return RuntimeDriver::Unknown(format!("SystemdCgroup is {other}, not a boolean")),
    };
    RuntimeDriver::Known {
        driver: if systemd { SYSTEMD } else { CGROUPFS },
        source: "containerd's config (runc option SystemdCgroup)",
    }
}

/// Asks the runtime: `RuntimeConfig`, else (UNIMPLEMENTED) the verbose `Status`.
pub fn detect(runtime: &RuntimeClient) -> RuntimeDriver {
    match runtime.runtime_config(&pb::RuntimeConfigRequest::default()) {
        Ok(reply) => return from_runtime_config(&reply),
        Err(CriError::Other { code, .. })
            if code == i32::from(grpcio::RpcStatusCode::UNIMPLEMENTED) => {}
        Err(e) => return RuntimeDriver::Unknown(format!("RuntimeConfig failed: {e}")),
    }
    let request = pb::StatusRequest {
        verbose: true,
        ..Default::default()
    };
    match runtime.status(&request) {
        Ok(status) => from_status_info(&status.info),
        Err(e) => RuntimeDriver::Unknown(format!("Status failed: {e}")),
    }
}

/// Checks litelet's driver against the runtime's: an error naming both when they
/// differ; a warning to log when the runtime's is unknown.
pub fn check(configured: &str, runtime: &RuntimeDriver) -> Result<Option<String>, String> {
    match runtime {
        RuntimeDriver::Known { driver, source } if *driver != configured => Err(format!(
            "cgroup driver mismatch: litelet is configured with {configured:?} \
             (--cgroup-driver, cgroupDriver) but the runtime uses {driver:?} (from {source}); \
             set both to the same driver"
        )),
        RuntimeDriver::Known { .. } => Ok(None),
        RuntimeDriver::Unknown(why) => Ok(Some(format!(
            "cannot tell the runtime's cgroup driver ({why}); assuming it is {configured:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn containerd_info(options: &str) -> HashMap<String, String> {
        let config = format!(
            r#"{{"containerd":{{"snapshotter":"overlayfs","defaultRuntimeName":"runc",
            "runtimes":{{"runc":{{"runtimeType":"io.containerd.runc.v2","options":{options}}}}}}},
            "cni":{{}}}}"#
        );
        HashMap::from([("config".to_owned(), config)])
    }

    #[test]
    fn containerds_runc_option_gives_the_driver() {
        assert_eq!(
            from_status_info(&containerd_info(
                r#"{"SystemdCgroup":true,"BinaryName":""}"#
            )),
            RuntimeDriver::Known {
                driver: SYSTEMD,
                source: "containerd's config (runc option SystemdCgroup)"
            }
        );
        for options in [r#"{"SystemdCgroup":false}"#, "{}", "null"] {
            assert!(
                matches!(
                    from_status_info(&containerd_info(options)),
                    RuntimeDriver::Known {
                        driver: CGROUPFS,
                        ..
                    }
                ),
                "{options}"
            );
        }
    }

    #[test]
    fn a_status_without_a_usable_config_is_unknown() {
        for info in [
            HashMap::new(),
            HashMap::from([("config".to_owned(), "not json".to_owned())]),
            HashMap::from([("config".to_owned(), r#"{"containerd":{}}"#.to_owned())]),
            containerd_info(r#"{"SystemdCgroup":"yes"}"#),
        ] {
            assert!(
                matches!(from_status_info(&info), RuntimeDriver::Unknown(_)),
                "{info:?}"
            );
        }
    }

    #[test]
    fn runtime_config_gives_the_driver() {
        let mut reply = pb::RuntimeConfigResponse::default();
        assert!(matches!(
            from_runtime_config(&reply),
            RuntimeDriver::Unknown(_)
        ));
        let linux = pb::LinuxRuntimeConfiguration {
            cgroup_driver: pb::CgroupDriver::CGROUPFS.into(),
            ..Default::default()
        };
        reply.linux = protobuf::MessageField::some(linux);
        assert!(matches!(
            from_runtime_config(&reply),
            RuntimeDriver::Known {
                driver: CGROUPFS,
                ..
            }
        ));
    }

    #[test]
    fn a_mismatch_is_refused_naming_both_and_unknown_only_warns() {
        let systemd = RuntimeDriver::Known {
            driver: SYSTEMD,
            source: "CRI RuntimeConfig",
        };
        let err = check(CGROUPFS, &systemd).unwrap_err();
        assert!(
            err.contains("\"cgroupfs\"") && err.contains("\"systemd\""),
            "{err}"
        );
        assert_eq!(check(SYSTEMD, &systemd), Ok(None));
        let warning = check(SYSTEMD, &RuntimeDriver::Unknown("x".into())).unwrap();
        assert!(warning.is_some_and(|w| w.contains("x")));
    }
}
