//! Tables for the pod hostname rules and byte-exact hosts file contents.

use super::*;
use crate::api::pod::VolumeMount;

fn pod() -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("web-0".into());
    pod.metadata.namespace = Some("shop".into());
    pod.metadata.uid = Some("uid-1".into());
    pod.spec.containers.push(Container {
        name: "app".into(),
        ..Default::default()
    });
    pod
}

fn alias(ip: &str, names: &[&str]) -> HostAlias {
    HostAlias {
        ip: ip.into(),
        hostnames: names.iter().map(|s| s.to_string()).collect(),
    }
}

/// One row of the hostname table: what the pod sets, and the expected (hostname,
/// domain) and sandbox hostname, or the error.
struct Case {
    name: &'static str,
    hostname: Option<&'static str>,
    subdomain: Option<&'static str>,
    override_: Option<&'static str>,
    as_fqdn: Option<bool>,
    host_network: bool,
    want: Result<(&'static str, &'static str, &'static str), HostnameError>,
}

const BASE: Case = Case {
    name: "",
    hostname: None,
    subdomain: None,
    override_: None,
    as_fqdn: None,
    host_network: false,
    want: Ok(("web-0", "", "web-0")),
};

fn check(case: &Case) {
    let mut p = pod();
    p.spec.hostname = case.hostname.map(Into::into);
    p.spec.subdomain = case.subdomain.map(Into::into);
    p.spec.hostname_override = case.override_.map(Into::into);
    p.spec.set_hostname_as_fqdn = case.as_fqdn;
    p.spec.host_network = Some(case.host_network);
    let got = pod_names(&p, "cluster.local").and_then(|names| {
        let sandbox = sandbox_hostname(&p, "cluster.local")?;
        Ok((names.hostname, names.domain, sandbox))
    });
    let want = case
        .want
        .clone()
        .map(|(h, d, s)| (h.to_owned(), d.to_owned(), s.to_owned()));
    assert_eq!(got, want, "case {}", case.name);
}

/// 70 characters in two labels: longer than a hostname may be.
const LONG: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

#[test]
fn hostname_and_domain_follow_upstream_rules() {
    let cases = [
        Case {
            name: "pod name by default",
            ..BASE
        },
        Case {
            name: "spec.hostname wins over the pod name",
            hostname: Some("db"),
            want: Ok(("db", "", "db")),
            ..BASE
        },
        Case {
            name: "subdomain gives the domain; the sandbox keeps the short name",
            hostname: Some("db"),
            subdomain: Some("backend"),
            want: Ok(("db", "backend.shop.svc.cluster.local", "db")),
            ..BASE
        },
        Case {
            name: "setHostnameAsFQDN puts the FQDN in the sandbox",
            hostname: Some("db"),
            subdomain: Some("backend"),
            as_fqdn: Some(true),
            want: Ok((
                "db",
                "backend.shop.svc.cluster.local",
                "db.backend.shop.svc.cluster.local",
            )),
            ..BASE
        },
        Case {
            name: "setHostnameAsFQDN without a subdomain is the short name",
            as_fqdn: Some(true),
            ..BASE
        },
        Case {
            name: "hostnameOverride wins over hostname and subdomain, with no domain",
            hostname: Some("db"),
            subdomain: Some("backend"),
            override_: Some("my.host.example"),
            want: Ok(("my.host.example", "", "my.host.example")),
            ..BASE
        },
        Case {
            name: "hostnameOverride makes setHostnameAsFQDN moot",
            subdomain: Some("backend"),
            override_: Some("node-a"),
            as_fqdn: Some(true),
            want: Ok(("node-a", "", "node-a")),
            ..BASE
        },
        Case {
            name: "hostnameOverride must be a DNS subdomain",
            override_: Some("Not_Valid"),
            want: Err(HostnameError::InvalidOverride("Not_Valid".into())),
            ..BASE
        },
        Case {
            name: "hostname must be a DNS label",
            hostname: Some("a.b"),
            want: Err(HostnameError::InvalidHostname("a.b".into())),
            ..BASE
        },
        Case {
            name: "subdomain must be a DNS label",
            subdomain: Some("-x"),
            want: Err(HostnameError::InvalidSubdomain("-x".into())),
            ..BASE
        },
        Case {
            name: "a long override is cut to 63 characters",
            override_: Some(LONG),
            want: Ok((&LONG[..63], "", &LONG[..63])),
            ..BASE
        },
        Case {
            name: "an FQDN over 64 characters fails the sandbox",
            hostname: Some("abcdefghijabcdefghijabcdefghijabcdefghij"),
            subdomain: Some("backend"),
            as_fqdn: Some(true),
            want: Err(HostnameError::FqdnTooLong(
                "abcdefghijabcdefghijabcdefghijabcdefghij.backend.shop.svc.cluster.local".into(),
            )),
            ..BASE
        },
        Case {
            name: "host-network sandboxes get no hostname",
            host_network: true,
            hostname: Some("db"),
            want: Ok(("db", "", "")),
            ..BASE
        },
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn truncation_drops_trailing_dashes_and_dots() {
    let mut p = pod();
    let thirty = "a".repeat(30);
    p.spec.hostname_override = Some(format!("{thirty}.{thirty}--b"));
    assert_eq!(
        pod_names(&p, "").unwrap().hostname,
        format!("{thirty}.{thirty}")
    );
    p.spec.hostname_override = Some(format!("{}.{}", "a".repeat(62), "b".repeat(10)));
    assert_eq!(pod_names(&p, "").unwrap().hostname, "a".repeat(62));
}

#[test]
fn subdomain_without_cluster_domain_ends_at_svc() {
    let mut p = pod();
    p.spec.subdomain = Some("backend".into());
    assert_eq!(pod_names(&p, "").unwrap().domain, "backend.shop.svc");
}

const LOCALHOST: &str = "# Kubernetes-managed hosts file.\n\
127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
fe00::0\tip6-mcastprefix\n\
fe00::1\tip6-allnodes\n\
fe00::2\tip6-allrouters\n";

fn names(hostname: &str, domain: &str) -> PodNames {
    PodNames {
        hostname: hostname.into(),
        domain: domain.into(),
    }
}

#[test]
fn managed_content_lists_localhost_then_the_pod_ip() {
    let got = managed_content(&["10.1.0.7".into()], &names("web-0", ""), &[]);
    let want = format!("{LOCALHOST}10.1.0.7\tweb-0\n");
    assert_eq!(String::from_utf8(got).unwrap(), want);
}

#[test]
fn managed_content_puts_the_fqdn_first_for_every_ip_including_ipv6() {
    let ips = ["10.1.0.7".to_string(), "fd00::7".to_string()];
    let got = managed_content(&ips, &names("db", "backend.shop.svc.cluster.local"), &[]);
    let want = format!(
        "{LOCALHOST}10.1.0.7\tdb.backend.shop.svc.cluster.local\tdb\n\
         fd00::7\tdb.backend.shop.svc.cluster.local\tdb\n"
    );
    assert_eq!(String::from_utf8(got).unwrap(), want);
}

#[test]
fn managed_content_appends_host_aliases_under_their_comment() {
    let aliases = [
        alias("1.2.3.4", &["foo.local", "bar.local"]),
        alias("::5", &["v6.local"]),
    ];
    let got = managed_content(&["10.1.0.7".into()], &names("web-0", ""), &aliases);
    let want = format!(
        "{LOCALHOST}10.1.0.7\tweb-0\n\n# Entries added by HostAliases.\n\
         1.2.3.4\tfoo.local\tbar.local\n::5\tv6.local\n"
    );
    assert_eq!(String::from_utf8(got).unwrap(), want);
}

#[test]
fn host_network_content_is_the_node_file_plus_aliases() {
    let node = b"127.0.0.1 localhost\n192.0.2.2 node-a\n";
    assert_eq!(
        host_network_content(node, &[]),
        b"# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.0.2.2 node-a\n"
    );
    let got = host_network_content(node, &[alias("1.2.3.4", &["foo"])]);
    assert!(
        got.ends_with(b"node-a\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn mount_decision() {
    let p = pod();
    let app = &p.spec.containers[0];
    let ip = ["10.1.0.7".to_string()];
    assert!(needs_hosts_file(&p, app, &ip), "pod-network pod with an IP");
    assert!(!needs_hosts_file(&p, app, &[]), "no IP yet: not managed");

    let mut host = pod();
    host.spec.host_network = Some(true);
    assert!(
        needs_hosts_file(&host, &host.spec.containers[0], &[]),
        "host-network pods need no pod IP"
    );

    let own = Container {
        name: "own".into(),
        volume_mounts: vec![VolumeMount {
            name: "hosts".into(),
            mount_path: "/etc/hosts".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert!(
        !needs_hosts_file(&p, &own, &ip),
        "container mounts /etc/hosts"
    );
    let file = Path::new("/var/lib/litelet/pods/uid-1/etc-hosts");
    assert_eq!(hosts_mount(&own, Some(file)), None);
    let mount = hosts_mount(app, Some(file)).unwrap();
    assert_eq!(
        (mount.container_path.as_str(), mount.host_path.as_str()),
        ("/etc/hosts", "/var/lib/litelet/pods/uid-1/etc-hosts")
    );
    assert!(!mount.readonly);
    assert_eq!(hosts_mount(app, None), None);
}

#[test]
fn ensure_writes_the_pod_file_and_reads_the_injected_node_file() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let node_hosts = tmp.path().join("node-hosts");
    std::fs::write(&node_hosts, "192.0.2.2 node-a\n").unwrap();
    let inputs = HostsInputs {
        root_dir: tmp.path(),
        node_hosts_file: &node_hosts,
        cluster_domain: "cluster.local",
    };
    let mut p = pod();
    p.spec.host_aliases = vec![alias("1.2.3.4", &["foo"])];
    let app = p.spec.containers[0].clone();

    assert_eq!(ensure_hosts_file(&inputs, &p, &app, &[]).unwrap(), None);
    let path = ensure_hosts_file(&inputs, &p, &app, &["10.1.0.7".into()])
        .unwrap()
        .unwrap();
    assert_eq!(path, tmp.path().join("pods/uid-1/etc-hosts"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("10.1.0.7\tweb-0\n") && text.ends_with("1.2.3.4\tfoo\n"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);

    p.spec.host_network = Some(true);
    ensure_hosts_file(&inputs, &p, &app, &[]).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# Kubernetes-managed hosts file (host network).\n192.0.2.2 node-a\n"));

    let missing = HostsInputs {
        node_hosts_file: &tmp.path().join("absent"),
        ..inputs
    };
    let err = ensure_hosts_file(&missing, &p, &app, &[]).unwrap_err();
    assert!(matches!(err, HostsError::ReadNodeHosts { .. }), "{err}");
}
