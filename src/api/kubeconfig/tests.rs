//! Kubeconfig loading: small YAML fixtures written here, good and bad.

use std::path::Path;

use super::*;

/// A real self-signed pair: certificates are checked at load time, so placeholders
/// no longer pass.
fn pair() -> &'static (String, String) {
    static PAIR: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    PAIR.get_or_init(|| {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["node".into()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    })
}

fn cert_pem() -> &'static str {
    &pair().0
}

fn key_pem() -> &'static str {
    &pair().1
}

fn b64(s: &str) -> String {
    crate::api::base64::encode(s.as_bytes())
}

fn with_user(user: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Config
current-context: kubelet
clusters:
- name: local
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: {ca}
contexts:
- name: kubelet
  context:
    cluster: local
    user: node
users:
- name: node
  user:
{user}
"#,
        ca = b64(cert_pem())
    )
}

fn load_str(yaml: &str) -> Result<ClientConfig, KubeconfigError> {
    from_yaml(yaml, Path::new("/etc/kubernetes/kubelet.conf"), None)
}

fn err(yaml: &str) -> String {
    load_str(yaml)
        .expect_err("kubeconfig should be refused")
        .to_string()
}

#[test]
fn inline_cert_and_key() {
    let yaml = with_user(&format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(cert_pem()),
        b64(key_pem())
    ));
    let c = load_str(&yaml).unwrap();
    assert_eq!(c.server, "https://10.0.0.1:6443");
    assert_eq!(c.ca_pem.as_deref(), Some(cert_pem().as_bytes()));
    assert_eq!(c.client_cert_pem.as_deref(), Some(cert_pem().as_bytes()));
    assert_eq!(c.client_key_pem.as_deref(), Some(key_pem().as_bytes()));
    assert!(c.token.is_none());
    assert!(!c.insecure_skip_tls_verify);
    // Secrets stay out of Debug output.
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
}

#[test]
fn files_resolve_against_kubeconfig_dir_and_token_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pki")).unwrap();
    std::fs::write(dir.path().join("pki/ca.crt"), cert_pem()).unwrap();
    std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
    let yaml = r#"
current-context: c
clusters:
- name: k
  cluster:
    server: http://127.0.0.1:8080
    certificate-authority: pki/ca.crt
    insecure-skip-tls-verify: true
contexts:
- {name: c, context: {cluster: k, user: u}}
users:
- name: u
  user:
    tokenFile: token
"#;
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, yaml).unwrap();
    let c = load(&path).unwrap();
    assert_eq!(c.server, "http://127.0.0.1:8080");
    assert_eq!(c.ca_pem.as_deref(), Some(cert_pem().as_bytes()));
    assert_eq!(c.token.as_deref(), Some("s3cret"));
    assert!(c.insecure_skip_tls_verify);
    assert!(!format!("{c:?}").contains("s3cret"));
}

#[test]
fn inline_token_wins_over_token_file_and_context_override() {
    let yaml = r#"
current-context: a
clusters:
- {name: one, cluster: {server: "https://one"}}
- {name: two, cluster: {server: "https://two"}}
contexts:
- {name: a, context: {cluster: one, user: u}}
- {name: b, context: {cluster: two}}
users:
- {name: u, user: {token: abc, tokenFile: /does/not/exist}}
"#;
    let c = load_str(yaml).unwrap();
    assert_eq!(c.server, "https://one");
    assert_eq!(c.token.as_deref(), Some("abc"));
    let c = from_yaml(yaml, Path::new("/k"), Some("b")).unwrap();
    assert_eq!(c.server, "https://two");
    assert!(c.token.is_none());
}

#[test]
fn bad_kubeconfigs_name_the_field() {
    let cases: &[(&str, String, &str)] = &[
        (
            "unknown cluster",
            "current-context: foo\ncontexts:\n- {name: foo, context: {cluster: bar}}\n".into(),
            "kubeconfig /etc/kubernetes/kubelet.conf: context \"foo\" names unknown cluster \"bar\"",
        ),
        (
            "unknown user",
            "current-context: foo\nclusters:\n- {name: c, cluster: {server: https://x}}\ncontexts:\n- {name: foo, context: {cluster: c, user: who}}\n".into(),
            "context \"foo\" names unknown user \"who\"",
        ),
        (
            "no current context",
            "clusters: []\n".into(),
            "current-context is not set",
        ),
        (
            "missing context",
            "current-context: nope\n".into(),
            "context \"nope\" not found",
        ),
        (
            "bad base64",
            with_user("    client-certificate-data: '!!notbase64'\n    client-key-data: AAAA\n"),
            "users[0].user.client-certificate-data: invalid base64",
        ),
        (
            "cert without key",
            with_user(&format!("    client-certificate-data: {}\n", b64(cert_pem()))),
            "users[0].user: client-certificate given without client-key",
        ),
        (
            "key is not a key",
            with_user(&format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert_pem()),
                b64(cert_pem())
            )),
            "users[0].user.client-key: no PEM private key found",
        ),
        (
            "data and file both",
            with_user(&format!(
                "    client-certificate-data: {}\n    client-certificate: /x\n    client-key-data: {}\n",
                b64(cert_pem()),
                b64(key_pem())
            )),
            "users[0].user.client-certificate: both client-certificate and client-certificate-data are set",
        ),
        (
            "exec plugin",
            with_user("    exec: {command: aws}\n"),
            "users[0].user.exec: credential plugins are not supported",
        ),
        (
            "missing referenced file",
            with_user("    client-certificate: missing.crt\n    client-key: missing.key\n"),
            "users[0].user.client-certificate: read /etc/kubernetes/missing.crt",
        ),
        (
            "server missing",
            "current-context: c\nclusters:\n- {name: k, cluster: {}}\ncontexts:\n- {name: c, context: {cluster: k}}\n".into(),
            "clusters[0].cluster.server: missing",
        ),
        (
            "server not a URL",
            "current-context: c\nclusters:\n- {name: k, cluster: {server: 'ftp://x'}}\ncontexts:\n- {name: c, context: {cluster: k}}\n".into(),
            "clusters[0].cluster.server: \"ftp://x\" is not an http:// or https:// URL",
        ),
        (
            "ca is not a certificate",
            format!("current-context: c\nclusters:\n- {{name: k, cluster: {{server: 'https://x', certificate-authority-data: {}}}}}\ncontexts:\n- {{name: c, context: {{cluster: k}}}}\n", b64("hello")),
            "clusters[0].cluster.certificate-authority: no PEM certificate found",
        ),
        (
            "not yaml",
            "clusters: [\n".into(),
            "kubeconfig /etc/kubernetes/kubelet.conf: parse yaml:",
        ),
    ];
    for (name, yaml, want) in cases {
        let got = err(yaml);
        assert!(
            got.contains(want),
            "{name}: got {got:?}, want it to contain {want:?}"
        );
    }
}

#[test]
fn read_error_names_the_kubeconfig() {
    let e = load(Path::new("/nonexistent/kubeconfig")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("read kubeconfig /nonexistent/kubeconfig:"),
        "{e}"
    );
}

/// A key that does not belong to the certificate is refused at load, naming the
/// certificate's file, rather than on the first connection.
#[test]
fn a_key_of_another_certificate_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(dir.path().join("node.crt"), cert_pem()).unwrap();
    std::fs::write(dir.path().join("node.key"), other.serialize_pem()).unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        with_user("    client-certificate: node.crt\n    client-key: node.key\n"),
    )
    .unwrap();
    let got = load(&path).unwrap_err().to_string();
    let file = dir.path().join("node.crt");
    assert!(
        got.contains(&format!(
            "users[0].user.client-certificate (file {}): private key does not belong",
            file.display()
        )),
        "{got}"
    );
}

#[test]
fn an_unusable_ca_names_the_inline_field() {
    let broken = "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n";
    let yaml = format!(
        "current-context: c\nclusters:\n- {{name: k, cluster: {{server: 'https://x', certificate-authority-data: {}}}}}\ncontexts:\n- {{name: c, context: {{cluster: k}}}}\n",
        b64(broken)
    );
    let got = err(&yaml);
    assert!(
        got.contains("clusters[0].cluster.certificate-authority-data: certificate 1: not usable as a trust anchor"),
        "{got}"
    );
}
