//! Validation of a plugin's registration (upstream `csi_plugin.go`
//! `ValidatePlugin` and `highestSupportedVersion`): what GetInfo must say before a
//! driver is used. Pure: takes the reply, returns the driver's endpoint or why not.

use std::path::PathBuf;

use super::reg_pb::PluginInfo;

/// The plugin type the watcher serves (device plugins are not handled by litelet).
pub const CSI_PLUGIN: &str = "CSIPlugin";

/// Why a registration is refused (sent back in NotifyRegistrationStatus).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RegistrationError {
    #[error("plugin type {0:?} is not supported (only {CSI_PLUGIN})")]
    WrongType(String),
    #[error("plugin name is empty")]
    NoName,
    #[error("plugin {name}: none of the versions {versions:?} is a supported 1.x version")]
    NoSupportedVersion { name: String, versions: Vec<String> },
    #[error("plugin {name}: endpoint {endpoint:?} must be an absolute path to a unix socket")]
    BadEndpoint { name: String, endpoint: String },
}

/// A driver accepted for registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub name: String,
    pub endpoint: PathBuf,
    /// The highest 1.x version offered, as given.
    pub version: String,
}

/// Parses `1`, `1.2`, `1.2.3`, with an optional `v` (semver prefixes such as
/// `1.0.0-rc1` keep their numeric part); `None` if the major is not a number.
fn major_minor_patch(v: &str) -> Option<(u64, u64, u64)> {
    let v = v.trim().trim_start_matches('v');
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

/// Checks a GetInfo reply: type CSIPlugin, a name, a 1.x version, an absolute
/// endpoint (an empty one means the registration socket's own driver socket is
/// unknown: refused, as litelet does not guess paths).
pub fn validate(info: &PluginInfo) -> Result<Accepted, RegistrationError> {
    if info.type_ != CSI_PLUGIN {
        return Err(RegistrationError::WrongType(info.type_.clone()));
    }
    if info.name.is_empty() {
        return Err(RegistrationError::NoName);
    }
    let version = info
        .supported_versions
        .iter()
        .filter_map(|v| major_minor_patch(v).map(|n| (n, v)))
        .filter(|((major, _, _), _)| *major == 1)
        .max_by_key(|(n, _)| *n)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| RegistrationError::NoSupportedVersion {
            name: info.name.clone(),
            versions: info.supported_versions.to_vec(),
        })?;
    let endpoint = info
        .endpoint
        .strip_prefix("unix://")
        .unwrap_or(&info.endpoint);
    if !endpoint.starts_with('/') {
        return Err(RegistrationError::BadEndpoint {
            name: info.name.clone(),
            endpoint: info.endpoint.clone(),
        });
    }
    Ok(Accepted {
        name: info.name.clone(),
        endpoint: PathBuf::from(endpoint),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(type_: &str, name: &str, endpoint: &str, versions: &[&str]) -> PluginInfo {
        PluginInfo {
            type_: type_.into(),
            name: name.into(),
            endpoint: endpoint.into(),
            supported_versions: versions.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }
    }

    fn check(given: PluginInfo, want: Result<(&str, &str), &str>) {
        let got = validate(&given);
        match (got, want) {
            (Ok(a), Ok((endpoint, version))) => {
                assert_eq!(a.endpoint, PathBuf::from(endpoint), "{given:?}");
                assert_eq!(a.version, version, "{given:?}");
            }
            (Err(e), Err(needle)) => {
                assert!(e.to_string().contains(needle), "{e} lacks {needle:?}")
            }
            (got, want) => panic!("{given:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn registrations_are_validated_as_upstream() {
        let sock = "/var/lib/litelet/plugins/d/csi.sock";
        // The registrar v2.17.0's reply.
        check(
            info("CSIPlugin", "hostpath.csi.k8s.io", sock, &["1.0.0"]),
            Ok((sock, "1.0.0")),
        );
        check(
            info("CSIPlugin", "d", &format!("unix://{sock}"), &["v1.0.0"]),
            Ok((sock, "v1.0.0")),
        );
        check(
            info("CSIPlugin", "d", sock, &["0.3.0", "1.2", "1.10.1", "2.0.0"]),
            Ok((sock, "1.10.1")),
        );
        check(
            info("DevicePlugin", "d", sock, &["1.0.0"]),
            Err("plugin type \"DevicePlugin\" is not supported"),
        );
        check(
            info("CSIPlugin", "", sock, &["1.0.0"]),
            Err("name is empty"),
        );
        check(
            info("CSIPlugin", "d", sock, &["0.3.0", "2.0.0", "x"]),
            Err("none of the versions"),
        );
        check(
            info("CSIPlugin", "d", sock, &[]),
            Err("none of the versions"),
        );
        check(
            info("CSIPlugin", "d", "csi.sock", &["1.0.0"]),
            Err("must be an absolute path"),
        );
        check(
            info("CSIPlugin", "d", "", &["1.0.0"]),
            Err("must be an absolute path"),
        );
    }
}
