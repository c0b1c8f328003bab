//! A private image registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry v2) on a free loopback port, serving TLS with a certificate
//! from a throwaway CA (rcgen) and requiring htpasswd (bcrypt) basic auth for every
//! request, pull included. `hosts_dir()` is a containerd hosts directory
//! (`<host>/hosts.toml`: the https endpoint and the CA) for `ctr images push` and for
//! the CRI plugin's `registry.config_path`. Stopped (by its PID) on drop.

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::control_plane::skip;
use super::https::Pki;
use super::wait_until;

pub struct Registry {
    dir: tempfile::TempDir,
    child: Child,
    /// `127.0.0.1:<port>`, the registry part of image references.
    pub host: String,
    pub user: String,
    pub password: String,
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Registry {
    /// Starts a registry that accepts only `user`:`password` (skips loudly outside CI
    /// when the tools are missing: `scripts/install-deps.sh` installs them).
    pub fn start(test: &str, user: &str, password: &str) -> Option<Registry> {
        for tool in ["docker-registry", "htpasswd"] {
            if !have(tool) {
                return skip(
                    test,
                    &format!("{tool} is not installed (scripts/install-deps.sh)"),
                );
            }
        }
        let dir = tempfile::tempdir().expect("registry temp dir");
        let d = dir.path();
        let pki = Pki::new("litelet-test-registry-ca");
        let server = pki.server(&["127.0.0.1"]);
        std::fs::write(d.join("ca.crt"), &pki.ca_pem).expect("write ca");
        std::fs::write(d.join("tls.crt"), &server.cert_pem).expect("write cert");
        std::fs::write(d.join("tls.key"), &server.key_pem).expect("write key");
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("run htpasswd");
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(d.join("htpasswd"), &htpasswd.stdout).expect("write htpasswd");
        let host = format!("127.0.0.1:{}", free_port());
        let config = format!(
            "version: 0.1\n\
             log: {{level: warn}}\n\
             storage: {{filesystem: {{rootdirectory: {root}}}}}\n\
             http: {{addr: \"{host}\", tls: {{certificate: {d}/tls.crt, key: {d}/tls.key}}}}\n\
             auth: {{htpasswd: {{realm: litelet-test, path: {d}/htpasswd}}}}\n",
            root = d.join("data").display(),
            d = d.display(),
        );
        std::fs::write(d.join("config.yml"), config).expect("write registry config");
        write_hosts_toml(d, &host);
        let log = std::fs::File::create(d.join("registry.log")).expect("registry log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let registry = Registry {
            dir,
            child,
            host: host.clone(),
            user: user.to_owned(),
            password: password.to_owned(),
        };
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(&host).is_ok()
        });
        assert!(
            up,
            "docker-registry did not listen on {host}:\n{}",
            registry.log()
        );
        Some(registry)
    }

    /// Makes the runtime trust this registry's CA at `host` too (e.g. a
    /// [`super::tcp_proxy::TcpProxy`] in front of it: the certificate names the
    /// address, not the port).
    pub fn trust_alias(&self, host: &str) {
        write_hosts_toml(self.dir.path(), host);
    }

    /// The containerd hosts directory that trusts this registry.
    pub fn hosts_dir(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Pushes `local` (an image in the containerd at `socket`) as `<host>/<repository>`
    /// with the registry's credentials, then untags it there so a pod must pull it.
    pub fn push(&self, socket: &Path, local: &str, repository: &str) -> String {
        let remote = format!("{}/{repository}", self.host);
        let ctr = |args: &[&str]| {
            let out = Command::new("ctr")
                .arg("-a")
                .arg(socket)
                .args(["-n", "k8s.io", "images"])
                .args(args)
                .output()
                .expect("run ctr");
            assert!(
                out.status.success(),
                "ctr images {args:?} failed: {}{}\nregistry log:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        };
        ctr(&["tag", "--force", local, &remote]);
        let user = format!("{}:{}", self.user, self.password);
        let hosts = self.hosts_dir().display().to_string();
        ctr(&["push", "--user", &user, "--hosts-dir", &hosts, &remote]);
        ctr(&["rm", &remote]);
        remote
    }
}

/// `<dir>/hosts/<host>/hosts.toml`: `host` over https with the registry's CA.
fn write_hosts_toml(dir: &Path, host: &str) {
    let hosts = dir.join("hosts").join(host);
    std::fs::create_dir_all(&hosts).expect("hosts dir");
    std::fs::write(
        hosts.join("hosts.toml"),
        format!(
            "server = \"https://{host}\"\n[host.\"https://{host}\"]\n  ca = \"{}\"\n",
            dir.join("ca.crt").display()
        ),
    )
    .expect("write hosts.toml");
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
