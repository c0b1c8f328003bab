//! Which pod sysctls this node allows (upstream `pkg/kubelet/sysctl`): the safe
//! sysctls the node's kernel namespaces, plus `--allowed-unsafe-sysctls` (names, or
//! prefixes ending in `*`). Pure: the kernel version and the patterns are inputs.
//!
//! A pod asking for any other sysctl is refused at admission with `SysctlForbidden`,
//! before a sandbox is made (the runtime would refuse it on every retry). A sysctl of
//! the net namespace is refused with `hostNetwork`, one of the IPC namespace with
//! `hostIPC`: setting it would change the host's value.

use std::collections::BTreeMap;

use crate::api::pod::Pod;

/// The reason of a refusal (upstream `sysctl.ForbiddenReason`).
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";
/// Longest sysctl name (upstream `SysctlMaxLength`).
const MAX_LENGTH: usize = 253;

/// The safe sysctls, with the kernel version that first namespaced each (if later
/// than any kernel Kubernetes supports).
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// The kernel namespace a sysctl lives in, as upstream's messages name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }

    /// The namespace of a sysctl name or prefix; `None` when not known to be namespaced.
    fn of(name: &str) -> Option<Namespace> {
        if name == "kernel.sem" {
            return Some(Namespace::Ipc);
        }
        if ["kernel.shm", "kernel.msg", "fs.mqueue."]
            .iter()
            .any(|p| name.starts_with(p))
        {
            return Some(Namespace::Ipc);
        }
        name.starts_with("net.").then_some(Namespace::Net)
    }
}

/// A bad `--allowed-unsafe-sysctls` entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    #[error("sysctl {0:?} must have at most 253 characters and be dot- or slash-separated lowercase names, optionally ending in *")]
    Pattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// `a/b.c` is the same sysctl as `a.b/c` (upstream `convertSysctlVariableToDotsSeparator`):
/// when the first separator is a slash, slashes and dots swap.
fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Checks one `--allowed-unsafe-sysctls` entry's spelling (upstream
/// `IsValidSysctlPattern`): segments of `[a-z0-9_-]` that start and end
/// alphanumeric, joined by `.` or `/`, with an optional final `*`.
pub fn check_pattern(pattern: &str) -> Result<(), SysctlError> {
    let bad = || SysctlError::Pattern(pattern.to_owned());
    if pattern.is_empty() || pattern.len() > MAX_LENGTH {
        return Err(bad());
    }
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if body.is_empty() {
        return Ok(()); // "*" alone: upstream's regex accepts it (it then fails namespacing)
    }
    // A prefix may end in a separator ("net.*"); every full segment must be well formed.
    let body = body.strip_suffix(['.', '/']).unwrap_or(body);
    let segment_ok = |s: &str| {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        s.chars().next().is_some_and(alnum)
            && s.chars().last().is_some_and(alnum)
            && s.chars().all(|c| alnum(c) || c == '-' || c == '_')
    };
    if body.split(['.', '/']).all(segment_ok) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// The node's allowed sysctls.
#[derive(Clone, Debug, PartialEq)]
pub struct SysctlAllowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Default for SysctlAllowlist {
    /// The safe sysctls of an unknown kernel (the kernel-gated ones left out).
    fn default() -> Self {
        Self::safe(None)
    }
}

impl SysctlAllowlist {
    /// The safe sysctls namespaced by a kernel of `version` (major, minor).
    pub fn safe(kernel: Option<(u32, u32)>) -> Self {
        let names = SAFE_SYSCTLS
            .iter()
            .filter(|(_, since)| since.is_none_or(|v| kernel.is_some_and(|k| k >= v)))
            .filter_map(|(name, _)| Some(((*name).to_owned(), Namespace::of(name)?)))
            .collect();
        SysctlAllowlist {
            names,
            prefixes: BTreeMap::new(),
        }
    }

    /// The safe sysctls plus the admin's unsafe ones; a pattern that is badly spelt or
    /// not namespaced is an error (upstream refuses to start).
    pub fn new(kernel: Option<(u32, u32)>, unsafe_sysctls: &[String]) -> Result<Self, SysctlError> {
        let mut list = Self::safe(kernel);
        for pattern in unsafe_sysctls {
            check_pattern(pattern)?;
            let pattern = normalize(pattern);
            let not_namespaced = || SysctlError::NotNamespaced(pattern.clone());
            match pattern.strip_suffix('*') {
                Some(prefix) => {
                    let ns = Namespace::of(prefix).ok_or_else(not_namespaced)?;
                    list.prefixes.insert(prefix.to_owned(), ns);
                }
                None => {
                    let ns = Namespace::of(&pattern).ok_or_else(not_namespaced)?;
                    list.names.insert(pattern.clone(), ns);
                }
            }
        }
        Ok(list)
    }

    /// Why `name` may not be set in a pod with these host namespaces, if it may not.
    fn refusal(&self, name: &str, host_net: bool, host_ipc: bool) -> Option<String> {
        let name = normalize(name);
        let ns = self.names.get(&name).or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, ns)| ns)
        });
        match ns {
            None => Some(format!("{name:?} not allowlisted")),
            Some(ns)
                if (*ns == Namespace::Net && host_net) || (*ns == Namespace::Ipc && host_ipc) =>
            {
                Some(format!(
                    "{name:?} not allowed with host {} enabled",
                    ns.as_str()
                ))
            }
            Some(_) => None,
        }
    }

    /// The message refusing `pod`, if one of its sysctls is not allowed.
    pub fn check(&self, pod: &Pod) -> Option<String> {
        let sysctls = pod.spec.security_context.as_ref()?.sysctls.as_slice();
        let host_net = pod.spec.host_network.unwrap_or(false);
        let host_ipc = pod.spec.host_ipc.unwrap_or(false);
        sysctls
            .iter()
            .find_map(|s| self.refusal(&s.name, host_net, host_ipc))
            .map(|why| format!("forbidden sysctl: {why}"))
    }
}

/// The kernel's (major, minor) from a release string such as `6.1.0-18-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{PodSecurityContext, Sysctl};

    fn pod(names: &[&str], host_net: bool, host_ipc: bool) -> Pod {
        let mut pod = Pod::default();
        pod.spec.host_network = Some(host_net);
        pod.spec.host_ipc = Some(host_ipc);
        pod.spec.security_context = Some(PodSecurityContext {
            sysctls: names
                .iter()
                .map(|n| Sysctl {
                    name: (*n).to_owned(),
                    value: "1".into(),
                })
                .collect(),
            ..Default::default()
        });
        pod
    }

    /// `want` is `None` for admitted, else the refusal message.
    fn check(name: &str, list: &SysctlAllowlist, pod: Pod, want: Option<&str>) {
        assert_eq!(list.check(&pod).as_deref(), want, "{name}");
    }

    #[test]
    fn sysctl_admission_table() {
        let modern = SysctlAllowlist::new(
            Some((6, 1)),
            &["kernel.msg*".into(), "net.core.somaxconn".into()],
        )
        .unwrap();
        let safe = SysctlAllowlist::safe(Some((6, 1)));
        check("no sysctls", &safe, Pod::default(), None);
        check(
            "safe",
            &safe,
            pod(
                &["kernel.shm_rmid_forced", "net.ipv4.tcp_rmem"],
                false,
                false,
            ),
            None,
        );
        check(
            "slash spelling",
            &safe,
            pod(&["net/ipv4/ip_local_port_range"], false, false),
            None,
        );
        check(
            "unsafe not enabled",
            &safe,
            pod(
                &["net.ipv4.ip_local_port_range", "kernel.msgmax"],
                false,
                false,
            ),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted"),
        );
        check(
            "unsafe enabled by prefix",
            &modern,
            pod(&["kernel.msgmax"], false, false),
            None,
        );
        check(
            "unsafe enabled by name",
            &modern,
            pod(&["net.core.somaxconn"], false, false),
            None,
        );
        check(
            "net sysctl with hostNetwork",
            &safe,
            pod(&["net.ipv4.tcp_syncookies"], true, false),
            Some("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"),
        );
        check(
            "ipc sysctl with hostIPC",
            &modern,
            pod(&["kernel.msgmax"], false, true),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowed with host ipc enabled"),
        );
        check(
            "ipc sysctl with hostNetwork only",
            &modern,
            pod(&["kernel.msgmax"], true, false),
            None,
        );
        check(
            "never namespaced",
            &modern,
            pod(&["vm.swappiness"], false, false),
            Some("forbidden sysctl: \"vm.swappiness\" not allowlisted"),
        );
        let old = SysctlAllowlist::safe(Some((4, 4)));
        check(
            "kernel too old for keepalive",
            &old,
            pod(&["net.ipv4.tcp_keepalive_time"], false, false),
            Some("forbidden sysctl: \"net.ipv4.tcp_keepalive_time\" not allowlisted"),
        );
        check(
            "4.4 has reserved ports",
            &old,
            pod(&["net.ipv4.ip_local_reserved_ports"], false, false),
            None,
        );
    }

    #[test]
    fn unsafe_sysctl_patterns_are_checked() {
        assert!(SysctlAllowlist::new(
            None,
            &["net.*".into(), "fs.mqueue.*".into(), "kernel.sem".into()]
        )
        .is_ok());
        assert_eq!(
            SysctlAllowlist::new(None, &["vm.swappiness".into()]),
            Err(SysctlError::NotNamespaced("vm.swappiness".into()))
        );
        assert_eq!(
            SysctlAllowlist::new(None, &["*".into()]),
            Err(SysctlError::NotNamespaced("*".into()))
        );
        for bad in ["", "Net.core", "net..core", "net.core*x", "-net.core"] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
        for good in [
            "net.core.somaxconn",
            "net/ipv4/conf/eth0.100/forwarding",
            "kernel.shm*",
            "net.*",
        ] {
            assert!(check_pattern(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn kernel_release_parsing() {
        assert_eq!(kernel_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("4.19.112+\n"), Some((4, 19)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
