//! A real control plane for tests: etcd + kube-apiserver from `KUBEBUILDER_ASSETS`
//! (the envtest convention: a folder with `kube-apiserver`, `etcd` and `kubectl`;
//! `.ci/run` fills it from `../shared/k8s-assets/unpack.sh`).
//!
//! Everything runs on free loopback ports with a throwaway PKI made in-process
//! (rcgen): one CA signs the apiserver's serving certificate, an admin client
//! (`system:masters`), node clients (`system:node:<name>` in `system:nodes`, so the
//! Node authorizer and NodeRestriction apply as in a cluster), the apiserver's client
//! certificate towards kubelets, and a service-account key pair.
//!
//! One control plane is shared by the tests of a binary ([`ControlPlane::shared`]):
//! each test takes its own node name and namespace. Rust never drops statics, so a
//! watchdog process (its own process group) waits for the test process to end, then
//! stops etcd and the apiserver by PID, removes the node address it put on `lo` and
//! the data dir. Without the assets the tests skip loudly, unless `CI=true`, where
//! missing assets fail.
//!
//! No controller-manager runs: [`ControlPlane::namespace`] creates what it would
//! (the namespace, its `default` ServiceAccount and `kube-root-ca.crt`), and tests
//! bind pods themselves with `spec.nodeName`.

use super::free_port;
use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use litelet::api::{ApiClient, ClientConfig, DeleteOptions, PatchType};
use serde_json::{json, Value};

use super::https::{self, Identity, Pki};

// The real-cluster tests take `skip` from here.
pub use super::skip;

/// A running etcd + kube-apiserver and the credentials to talk to it.
pub struct ControlPlane {
    dir: PathBuf,
    assets: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    addr: SocketAddr,
    pki: Pki,
    pub ca_pem: String,
    admin: Identity,
    admin_kubeconfig: PathBuf,
    /// A non-loopback address on `lo` that kubelets under test advertise, so the
    /// apiserver reaches their port for logs, exec and port-forward.
    pub node_ip: Ipv4Addr,
    children: Mutex<Vec<Child>>,
    namespaces: Mutex<Vec<String>>,
    /// Set once the controller-manager and scheduler were started.
    controllers: OnceLock<Result<(), String>>,
}

/// The shared instance (None when it could not start and we may skip).
static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// An address from 10.254.0.0/16 for this process, so test binaries running side by
/// side do not remove each other's.
fn process_node_ip() -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(10, 254, ((pid >> 8) & 0xff) as u8, (pid & 0xfe) as u8 | 1)
}

const AUDIT_LOG: &str = "audit.log";

/// The apiserver's audit flags when `LITELET_CP_AUDIT=1`: every request of a node
/// (group `system:nodes`) at Metadata level, nothing else, into `<dir>/audit.log`.
fn audit_args(dir: &Path) -> Result<Vec<String>, String> {
    if std::env::var("LITELET_CP_AUDIT").as_deref() != Ok("1") {
        return Ok(Vec::new());
    }
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: Metadata\n  userGroups: [\"system:nodes\"]\n- level: None\n",
    )
    .map_err(|e| format!("write {}: {e}", policy.display()))?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", dir.join(AUDIT_LOG).display()),
        "--audit-log-format=json".to_owned(),
        "--audit-log-mode=blocking".to_owned(),
    ])
}

fn write_pem(path: &Path, pem: &str) {
    std::fs::write(path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl ControlPlane {
    /// The control plane shared by this test binary, started on first use; None (after
    /// a loud message) when this machine cannot run it and we are not in CI.
    pub fn shared(test: &str) -> Option<&'static ControlPlane> {
        if !nix::unistd::geteuid().is_root() {
            return skip(test, "needs root (a node address on lo, real containerd)");
        }
        let Some(assets) = std::env::var_os("KUBEBUILDER_ASSETS") else {
            return skip(
                test,
                "KUBEBUILDER_ASSETS is not set (a folder with kube-apiserver, etcd and kubectl; \
                 ../shared/k8s-assets/unpack.sh makes one)",
            );
        };
        let assets = PathBuf::from(assets);
        for bin in ["kube-apiserver", "etcd", "kubectl"] {
            if !assets.join(bin).exists() {
                return skip(
                    test,
                    &format!("KUBEBUILDER_ASSETS={} has no {bin}", assets.display()),
                );
            }
        }
        match SHARED.get_or_init(|| ControlPlane::start(&assets)) {
            Ok(cp) => Some(cp),
            Err(e) => panic!("{test}: the control plane did not start: {e}"),
        }
    }

    fn start(assets: &Path) -> Result<ControlPlane, String> {
        let started = Instant::now();
        let dir = std::env::temp_dir().join(format!("litelet-cp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pki")).map_err(|e| e.to_string())?;
        let pki = Pki::new("litelet-test-ca");
        let ca_pem = pki.ca_pem.clone();
        let node_ip = process_node_ip();

        // Serving certificate, clients and the service-account key pair.
        let serving = pki.server(&[
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.0.0.1",
            // The host's loopback as the VM tier's QEMU guests reach it.
            "10.0.2.2",
        ]);
        let admin = pki.client("admin", &["system:masters"]);
        let kubelet_client = pki.client("kube-apiserver-kubelet-client", &["system:masters"]);
        let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let p = dir.join("pki");
        write_pem(&p.join("ca.crt"), &ca_pem);
        write_pem(&p.join("apiserver.crt"), &serving.cert_pem);
        write_pem(&p.join("apiserver.key"), &serving.key_pem);
        write_pem(&p.join("kubelet-client.crt"), &kubelet_client.cert_pem);
        write_pem(&p.join("kubelet-client.key"), &kubelet_client.key_pem);
        write_pem(&p.join("sa.key"), &sa.serialize_pem());
        write_pem(&p.join("sa.pub"), &sa.public_key_pem());

        let mut children = Vec::new();
        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Command::new(assets.join("etcd"))
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &etcd_url])
            .args(["--advertise-client-urls", &etcd_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            // A test cluster lives for minutes: durability buys nothing here.
            .arg("--unsafe-no-fsync")
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log_file(&dir, "etcd.log")?)
            .spawn()
            .map_err(|e| format!("start etcd: {e}"))?;
        children.push(etcd);
        // The watchdog goes up right after the first child, so nothing outlives us.
        let mut cp = ControlPlane {
            dir: dir.clone(),
            assets: assets.to_owned(),
            url: String::new(),
            addr: "127.0.0.1:1".parse().map_err(|e| format!("{e}"))?,
            pki,
            ca_pem,
            admin,
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            node_ip,
            children: Mutex::new(children),
            namespaces: Mutex::new(Vec::new()),
            controllers: OnceLock::new(),
        };
        let etcd_addr: SocketAddr = format!("127.0.0.1:{etcd_port}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let healthy = super::wait_until(Duration::from_secs(30), || {
            plain_get(etcd_addr, "/health").is_ok_and(|body| body.contains("true"))
        });
        if !healthy {
            return Err(format!(
                "etcd not healthy in 30 s:\n{}",
                cp.log_tail("etcd.log")
            ));
        }

        let port = free_port();
        cp.addr = format!("127.0.0.1:{port}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        cp.url = format!("https://127.0.0.1:{port}");
        let issuer = "https://kubernetes.default.svc.cluster.local";
        let audit = audit_args(&dir)?;
        let apiserver = Command::new(assets.join("kube-apiserver"))
            .args(["--etcd-servers", &etcd_url])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--advertise-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .arg(format!("--client-ca-file={}", p.join("ca.crt").display()))
            .arg(format!(
                "--tls-cert-file={}",
                p.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                p.join("apiserver.key").display()
            ))
            .arg(format!(
                "--service-account-key-file={}",
                p.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p.join("sa.key").display()
            ))
            .arg(format!("--service-account-issuer={issuer}"))
            .arg(format!("--api-audiences={issuer}"))
            .args(["--authorization-mode", "Node,RBAC"])
            .args(["--enable-admission-plugins", "NodeRestriction"])
            .arg(format!(
                "--kubelet-client-certificate={}",
                p.join("kubelet-client.crt").display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                p.join("kubelet-client.key").display()
            ))
            .args(["--kubelet-preferred-address-types", "InternalIP,Hostname"])
            .arg("--allow-privileged=true")
            // Bootstrap tokens (kubeadm join's credentials) for the TLS bootstrap tests.
            .arg("--enable-bootstrap-token-auth=true")
            .args(["--service-cluster-ip-range", "10.0.0.0/24"])
            .args(["--endpoint-reconciler-type", "none"])
            .arg(format!(
                "--cert-dir={}",
                dir.join("apiserver-certs").display()
            ))
            .args(["--v", "1"])
            .args(audit)
            .stdout(Stdio::null())
            .stderr(log_file(&dir, "kube-apiserver.log")?)
            .spawn()
            .map_err(|e| format!("start kube-apiserver: {e}"))?;
        cp.children
            .lock()
            .map_err(|e| e.to_string())?
            .push(apiserver);
        cp.start_watchdog()?;

        let ready = super::wait_until(Duration::from_secs(60), || {
            https::get(
                cp.addr,
                cp.ca_pem.as_bytes(),
                Some(&cp.admin),
                "GET",
                "/readyz",
                &[],
            )
            .is_ok_and(|a| a.status == 200)
        });
        if !ready {
            return Err(format!(
                "kube-apiserver not ready in 60 s:\n{}",
                cp.log_tail("kube-apiserver.log")
            ));
        }
        std::fs::write(&cp.admin_kubeconfig, cp.kubeconfig_yaml(&cp.admin))
            .map_err(|e| e.to_string())?;
        // The node address on lo (removed by the watchdog).
        let add = Command::new("ip")
            .args(["addr", "replace", &format!("{node_ip}/32"), "dev", "lo"])
            .output()
            .map_err(|e| format!("ip addr: {e}"))?;
        if !add.status.success() {
            return Err(format!(
                "ip addr replace {node_ip}/32 dev lo: {}",
                String::from_utf8_lossy(&add.stderr)
            ));
        }
        eprintln!(
            "control plane up at {} in {:.1} s (data in {})",
            cp.url,
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        Ok(cp)
    }

    /// The apiserver's audit log (JSON lines, Metadata level, requests of the
    /// `system:nodes` group only), written when `LITELET_CP_AUDIT=1` was set as the
    /// control plane started: what the side-by-side benchmark counts per node.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(AUDIT_LOG)
    }

    /// A process in its own group that outlives a killed test binary: when our PID is
    /// gone it stops the control plane and removes what the harness made.
    fn start_watchdog(&self) -> Result<(), String> {
        let pids: Vec<String> = self
            .children
            .lock()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        let cleanup = format!(
            "ip addr del {ip}/32 dev lo 2>/dev/null; rm -rf '{dir}'",
            ip = self.node_ip,
            dir = self.dir.display(),
        );
        watchdog(&pids, &cleanup)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of one of the control plane's logs.
    pub fn log_tail(&self, file: &str) -> String {
        let log = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn kubeconfig_yaml(&self, id: &Identity) -> String {
        let b64 = |s: &str| base64(s.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: user\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: default\n  context:\n    cluster: test\n    user: user\ncurrent-context: default\n",
            self.url,
            b64(&self.ca_pem),
            b64(&id.cert_pem),
            b64(&id.key_pem)
        )
    }

    /// Writes a kubeconfig for the kubelet of `node` (`system:node:<node>` in
    /// `system:nodes`) to `path`.
    pub fn write_node_kubeconfig(&self, node: &str, path: &Path) {
        let id = self
            .pki
            .client(&format!("system:node:{node}"), &["system:nodes"]);
        std::fs::write(path, self.kubeconfig_yaml(&id)).expect("write node kubeconfig");
    }

    /// Starts what a full control plane adds to etcd and the apiserver: a
    /// kube-controller-manager (from the assets; it makes the namespaces' `default`
    /// ServiceAccounts and `kube-root-ca.crt`, approves and signs CSRs, collects
    /// garbage) and, given its path, the kube-scheduler (for pods created without
    /// `spec.nodeName`). Both run as their own users, so RBAC's bootstrap roles apply.
    /// A watchdog stops them when the test process ends. Once per control plane: a
    /// later call returns the first one's outcome.
    pub fn start_controllers(&self, scheduler: Option<&Path>) -> Result<(), String> {
        self.start_controllers_signing_for(scheduler, None)
    }

    /// [`Self::start_controllers`], the controller-manager signing certificates valid
    /// for `duration` (a Go duration such as `3m`) instead of a year.
    pub fn start_controllers_signing_for(
        &self,
        scheduler: Option<&Path>,
        duration: Option<&str>,
    ) -> Result<(), String> {
        self.controllers
            .get_or_init(|| self.spawn_controllers(scheduler, duration))
            .clone()
    }

    fn spawn_controllers(
        &self,
        scheduler: Option<&Path>,
        duration: Option<&str>,
    ) -> Result<(), String> {
        let p = self.dir.join("pki");
        write_pem(&p.join("ca.key"), &self.pki.ca_key_pem());
        let kubeconfig = |user: &str| -> Result<PathBuf, String> {
            let id = self.pki.client(&format!("system:{user}"), &[]);
            let path = self.dir.join(format!("{user}.kubeconfig"));
            std::fs::write(&path, self.kubeconfig_yaml(&id)).map_err(|e| e.to_string())?;
            Ok(path)
        };
        let kcm_config = kubeconfig("kube-controller-manager")?;
        let scheduler_config = kubeconfig("kube-scheduler")?;
        let arg = |flag: &str, path: &Path| format!("--{flag}={}", path.display());
        let kcm = Command::new(self.assets.join("kube-controller-manager"))
            .arg(arg("kubeconfig", &kcm_config))
            .args(["--controllers", "*"])
            .arg("--use-service-account-credentials=true")
            .arg(arg("service-account-private-key-file", &p.join("sa.key")))
            .arg(arg("root-ca-file", &p.join("ca.crt")))
            .arg(arg("cluster-signing-cert-file", &p.join("ca.crt")))
            .arg(arg("cluster-signing-key-file", &p.join("ca.key")))
            .args(duration.map(|d| format!("--cluster-signing-duration={d}")))
            .args(["--service-cluster-ip-range", "10.0.0.0/24"])
            .arg("--allocate-node-cidrs=false")
            .arg("--leader-elect=false")
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &free_port().to_string()])
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, "kube-controller-manager.log")?)
            .spawn()
            .map_err(|e| format!("start kube-controller-manager: {e}"))?;
        let mut started = vec![kcm];
        if let Some(scheduler) = scheduler {
            let sched = Command::new(scheduler)
                .arg(arg("kubeconfig", &scheduler_config))
                .arg("--leader-elect=false")
                .args(["--bind-address", "127.0.0.1"])
                .args(["--secure-port", &free_port().to_string()])
                .stdout(Stdio::null())
                .stderr(log_file(&self.dir, "kube-scheduler.log")?)
                .spawn()
                .map_err(|e| format!("start kube-scheduler: {e}"))?;
            started.push(sched);
        }
        let pids: Vec<String> = started.iter().map(|c| c.id().to_string()).collect();
        self.children
            .lock()
            .map_err(|e| e.to_string())?
            .extend(started);
        watchdog(&pids, "")
    }

    /// A bootstrap token (`<id>.<secret>`) as `kubeadm token create` makes one, with
    /// the RBAC kubeadm sets up: its group may create CertificateSigningRequests,
    /// and node client requests of bootstrappers and renewals of nodes are approved
    /// automatically (by the controller-manager's csrapproving controller).
    pub fn bootstrap_token(&self) -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!("lt{:04}", NEXT.fetch_add(1, Ordering::Relaxed) % 10_000);
        let secret = "0123456789abcdef";
        let api = self.admin();
        created_or_kept(
            api.create(
                "/api/v1/namespaces/kube-system/secrets",
                &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
                    "type": "bootstrap.kubernetes.io/token",
                    "stringData": {"token-id": id, "token-secret": secret,
                        "usage-bootstrap-authentication": "true",
                        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}),
            ),
            "bootstrap token",
        );
        let binding = |name: &str, role: &str, group: &str| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
        };
        let bindings = [
            (
                "kubeadm:kubelet-bootstrap",
                "system:node-bootstrapper",
                "system:bootstrappers",
            ),
            (
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                "system:bootstrappers",
            ),
            (
                "kubeadm:node-autoapprove-certificate-rotation",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                "system:nodes",
            ),
        ];
        for (name, role, group) in bindings {
            created_or_kept(
                api.create(
                    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                    &binding(name, role, group),
                ),
                name,
            );
        }
        format!("{id}.{secret}")
    }

    /// A kubeconfig with bootstrap token `token` (what kubeadm writes to
    /// `/etc/kubernetes/bootstrap-kubelet.conf`).
    pub fn bootstrap_kubeconfig_yaml(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\ncontexts:\n- name: bootstrap\n  context:\n    cluster: test\n    user: tls-bootstrap-token-user\ncurrent-context: bootstrap\n",
            self.url,
            base64(self.ca_pem.as_bytes()),
        )
    }

    /// Where the apiserver listens (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin kubeconfig (for kubectl).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// An API client with admin rights.
    pub fn admin(&self) -> ApiClient {
        let mut config = ClientConfig::new(&self.url);
        config.ca_pem = Some(self.ca_pem.clone().into_bytes());
        config.client_cert_pem = Some(self.admin.cert_pem.clone().into_bytes());
        config.client_key_pem = Some(self.admin.key_pem.clone().into_bytes());
        config.qps = 0.0;
        ApiClient::new(&config).expect("admin client")
    }

    /// Runs kubectl (from the assets) as admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.assets.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    /// A kubectl command as admin, for streaming uses (logs -f, port-forward).
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(self.assets.join("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.admin_kubeconfig);
        cmd
    }

    /// Creates namespace `ns` with what a controller-manager would put there: the
    /// `default` ServiceAccount and the `kube-root-ca.crt` configMap.
    pub fn namespace(&self, ns: &str) {
        let api = self.admin();
        created_or_kept(
            api.create(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
            "namespace",
        );
        created_or_kept(
            api.create(
                &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
                &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
            ),
            "serviceaccount",
        );
        created_or_kept(
            api.create(
                &format!("/api/v1/namespaces/{ns}/configmaps"),
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "kube-root-ca.crt"},
                        "data": {"ca.crt": self.ca_pem}}),
            ),
            "kube-root-ca.crt",
        );
        if let Ok(mut list) = self.namespaces.lock() {
            list.push(ns.to_owned());
        }
    }

    /// GET an object as admin; None on 404.
    pub fn get(&self, path: &str) -> Option<Value> {
        match self.admin().get::<Value>(path) {
            Ok(v) => Some(v),
            Err(e) if e.status_code() == Some(404) => None,
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// POST an object to a collection as admin.
    pub fn create(&self, collection: &str, obj: &Value) -> Value {
        self.admin()
            .create(collection, obj)
            .unwrap_or_else(|e| panic!("POST {collection}: {e}"))
    }

    /// A strategic-merge PATCH as admin.
    pub fn patch(&self, path: &str, patch: &Value) -> Value {
        self.admin()
            .patch(path, PatchType::StrategicMerge, patch)
            .unwrap_or_else(|e| panic!("PATCH {path}: {e}"))
    }

    /// DELETE as admin with the object's default grace period.
    pub fn delete(&self, path: &str) {
        match self.admin().delete(path, &DeleteOptions::default()) {
            Ok(()) => {}
            Err(e) if e.status_code() == Some(404) => {}
            Err(e) => panic!("DELETE {path}: {e}"),
        }
    }
}

/// A process in its own group that waits for the test process to end, then stops
/// `pids` (TERM, then KILL) and runs `cleanup` (shell).
fn watchdog(pids: &[String], cleanup: &str) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
         kill {pids} 2>/dev/null; sleep 2; kill -9 {pids} 2>/dev/null; {cleanup}",
        me = std::process::id(),
        pids = pids.join(" "),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("start watchdog: {e}"))?;
    Ok(())
}

/// A create that finds the object already there (409) is fine: set-up runs once per
/// test and some objects are shared.
fn created_or_kept(result: Result<Value, litelet::api::ApiError>, what: &str) {
    match result {
        Ok(_) => {}
        Err(e) if e.status_code() == Some(409) => {}
        Err(e) => panic!("create {what}: {e}"),
    }
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::File::create(dir.join(name)).map_err(|e| format!("create {name}: {e}"))
}

/// GET over plain HTTP/1.0 (etcd's health endpoint); the body.
fn plain_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    sock.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(sock, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut body = String::new();
    BufReader::new(sock).read_to_string(&mut body)?;
    Ok(body)
}

/// Standard base64 with padding (kubeconfig `*-data` fields).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
