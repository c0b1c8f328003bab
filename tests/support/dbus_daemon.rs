//! A private `dbus-daemon` for the D-Bus tests: its own config and socket in a temp
//! dir, killed on drop. Missing `dbus-daemon` skips the test loudly, or fails it when
//! `CI=true`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct DbusDaemon {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl DbusDaemon {
    /// Starts a daemon, or None (after saying so) when `dbus-daemon` is not installed.
    pub fn start(test: &str) -> Option<DbusDaemon> {
        let found = Command::new("dbus-daemon")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return super::skip(
                test,
                "dbus-daemon is missing (scripts/install-deps.sh installs it)",
            );
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .expect("write bus config");
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start dbus-daemon");
        // The daemon prints its address once it listens.
        let mut line = String::new();
        let stdout = child.stdout.take().expect("daemon stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the daemon's address");
        let address = line.trim().to_owned();
        assert!(address.starts_with("unix:"), "daemon printed {address:?}");
        Some(DbusDaemon {
            child,
            address,
            _dir: dir,
        })
    }

    /// The bus address to connect to.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for DbusDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
