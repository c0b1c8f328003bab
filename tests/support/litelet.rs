//! The litelet binary as a test process on the fakes (`tests/fakes/kubelet_e2e.rs`,
//! `tests/fakes/service_env.rs`): a node on the CRI at an endpoint, its root, pod logs,
//! device-plugin folder and log (`litelet.log`, debug level) in a fresh directory,
//! and its own cgroup root. Stopped on drop (SIGTERM, SIGKILL after 10 s), with its
//! cgroups and what its pods left mounted. `LITELET_TEST_BINARY` runs another build.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::containerd::remove_cgroup_tree;
use super::fake_api::FakeApi;
use super::{unmount_everything_below, wait_until};

pub struct Litelet {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub cgroup_root: String,
}

impl Litelet {
    /// Starts litelet as `node` on the CRI at `endpoint` as the tests on the fakes run
    /// it: syncing every 2 s and with no eviction thresholds unless `extra` sets its
    /// own (upstream's defaults, imagefs.available<15% and nodefs.available<10%, judge
    /// the test machine's own disk, which a busy build machine can be past), reading
    /// `api` and the static pods in `manifests` when given.
    pub fn on_fakes(
        endpoint: &str,
        node: &str,
        tag: &str,
        api: Option<&FakeApi>,
        manifests: Option<&Path>,
        extra: &[&str],
    ) -> Litelet {
        Litelet::spawn(endpoint, node, tag, |cmd, dir| {
            cmd.args(extra);
            if !extra.contains(&"--sync-frequency") {
                cmd.args(["--sync-frequency", "2s"]);
            }
            if !extra.iter().any(|a| a.starts_with("--eviction-hard")) {
                cmd.arg("--eviction-hard=");
            }
            if let Some(api) = api {
                let kubeconfig = dir.join("kubeconfig");
                api.write_kubeconfig(&kubeconfig);
                cmd.arg("--kubeconfig").arg(&kubeconfig);
            }
            if let Some(manifests) = manifests {
                cmd.arg("--pod-manifest-path").arg(manifests);
            }
        })
    }

    /// Starts litelet as `node` on the CRI at `endpoint`, under cgroup root
    /// `/litelet-<tag>-<pid>-<n>`; `configure` adds the test's flags, given the
    /// process's directory.
    pub fn spawn(
        endpoint: &str,
        node: &str,
        tag: &str,
        configure: impl FnOnce(&mut Command, &Path),
    ) -> Litelet {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = tempfile::tempdir().unwrap();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let cgroup_root = format!("/litelet-{tag}-{}-{seq}", std::process::id());
        let binary = std::env::var_os("LITELET_TEST_BINARY")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_litelet").into());
        let mut cmd = Command::new(binary);
        cmd.args(["--container-runtime-endpoint", endpoint])
            .args(["--hostname-override", node])
            .arg("--device-plugins-dir")
            .arg(dir.path().join("device-plugins"))
            .arg("--root-dir")
            .arg(dir.path().join("root"))
            .arg("--pod-logs-dir")
            .arg(dir.path().join("logs"))
            .args(["--cgroup-root", &cgroup_root])
            .env("RUST_LOG", "info,litelet=debug")
            .env(
                litelet::kernel_tunables::TEST_ROOT_ENV,
                super::proc_sys(dir.path()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("litelet.log")).unwrap());
        configure(&mut cmd, dir.path());
        let child = cmd.spawn().unwrap();
        Litelet {
            child,
            dir,
            cgroup_root,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("litelet.log")).unwrap_or_default()
    }

    /// The last 60 lines of the log, for failure messages.
    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Waits up to 90 s for `check`; fails at once, with the log, if litelet dies
    /// meanwhile.
    pub fn wait_for(&self, what: &str, mut check: impl FnMut() -> bool) {
        let mut died = false;
        let done = wait_until(Duration::from_secs(90), || {
            died = self.is_dead();
            died || check()
        });
        let why = if died { "litelet died" } else { "timed out" };
        assert!(
            done && !died,
            "{why} waiting for {what}; litelet log:\n{}",
            self.tail()
        );
    }

    /// Whether the process has died (a zombie until it is reaped).
    pub fn is_dead(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .map(|stat| {
                let state = stat.rsplit(')').next().unwrap_or("");
                state.trim_start().starts_with('Z')
            })
            .unwrap_or(true)
    }
}

impl Drop for Litelet {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = wait_until(Duration::from_secs(10), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_cgroup_tree(&self.cgroup_root);
        // litelet leaves pods running, and their tmpfs volumes mounted.
        unmount_everything_below(self.dir.path());
    }
}
