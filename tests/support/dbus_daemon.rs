//! A private `dbus-daemon` for the D-Bus tests: its own config and socket in a temp
//! dir, killed on drop. Missing `dbus-daemon` skips the test loudly, or fails it when
//! `CI=true`.
//!
//! Forgers: like the system bus, the daemon lets any user connect and send a signal
//! to any connection. [`DbusDaemon::forge_signal`] (`dbus-send`) and
//! [`DbusDaemon::forge_big_signal`] (`forge-signal.pl`, a 32 MiB `ay`) send one as
//! user `nobody` from another process when the test runs as root (as this user
//! otherwise), and return once the bus has dispatched it: a signal the test sends
//! afterwards reaches its destination after the forged one.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use litelet::dbus::{Connection, SignalMatch, Value, BUS_NAME};

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
        // Other users (the forgers) reach the socket.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the bus dir");
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
    <allow user="*"/>
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

    /// `dbus-send --type=signal --dest=DEST PATH INTERFACE.MEMBER ARGS…` as another
    /// user; returns once the bus has dispatched the signal.
    pub fn forge_signal(&self, dest: &str, path: &str, member: &str, args: &[&str]) {
        let bus = format!("--bus={}", self.address);
        let dest = format!("--dest={dest}");
        let mut argv = vec![bus.as_str(), "--type=signal", dest.as_str(), path, member];
        argv.extend_from_slice(args);
        self.as_another_user("dbus-send", &argv, b"");
    }

    /// A signal `interface.member` on `path` whose body is an `ay` of `size` bytes,
    /// addressed to `dest`, sent as another user (`forge-signal.pl`); returns once
    /// the bus has taken and dispatched it.
    pub fn forge_big_signal(
        &self,
        dest: &str,
        path: &str,
        interface: &str,
        member: &str,
        size: usize,
    ) {
        let socket = self
            .address
            .strip_prefix("unix:path=")
            .and_then(|rest| rest.split(',').next())
            .expect("a unix:path= address");
        let size = size.to_string();
        // The script comes on stdin: the user may not read the checkout.
        self.as_another_user(
            "perl",
            &["-", socket, dest, path, interface, member, &size],
            include_bytes!("forge-signal.pl"),
        );
    }

    /// Runs `program` as user `nobody` (when root; as this user otherwise), then
    /// waits until the bus announces the end of a connection that was not there
    /// before: the bus dispatches what it read from a connection before its end.
    fn as_another_user(&self, program: &str, args: &[&str], stdin: &[u8]) {
        let mut watcher = Connection::open(&self.address).expect("connect the watcher");
        watcher
            .subscribe(SignalMatch::new(
                BUS_NAME,
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "NameOwnerChanged",
                "sss",
            ))
            .expect("follow connections");
        let before = watcher.list_names().expect("ListNames");
        let mut command = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--", program]);
            c
        } else {
            Command::new(program)
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin)
            .expect("feed the forger");
        let status = child.wait().expect("wait for the forger");
        assert!(status.success(), "{program} {args:?}: {status}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let Some(m) = watcher
                .next_message(Duration::from_millis(200))
                .expect("watch the bus")
            else {
                continue;
            };
            if let [Value::Str(name), Value::Str(_), Value::Str(new)] = m.body.as_slice() {
                if name.starts_with(':') && new.is_empty() && !before.contains(name) {
                    return;
                }
            }
        }
        panic!("the bus never saw the forger ({program}) leave");
    }
}

impl Drop for DbusDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
