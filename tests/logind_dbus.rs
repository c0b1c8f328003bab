//! The logind seam over D-Bus (`nodeshutdown::dbus_logind`) against a private
//! `dbus-daemon` with a fake logind and systemd on it: the delay property, the drop-in
//! and the SIGHUP through KillUnit, the delay lock as a passed fd (held until dropped),
//! and PrepareForShutdown signals, only from logind's name.

mod support;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use litelet::dbus::{Connection, Message, MessageKind, Value, BUS_NAME};
use litelet::nodeshutdown::dbus_logind::DbusLogind;
use litelet::nodeshutdown::logind::Logind;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use support::dbus_daemon::DbusDaemon;

const T: Duration = Duration::from_secs(5);

/// What the fake services were asked.
#[derive(Default)]
struct Seen {
    delay_usec: u64,
    inhibits: Vec<Vec<Value>>,
    kill_units: Vec<Vec<Value>>,
    /// Read ends of the lock pipes handed out.
    locks: Vec<OwnedFd>,
}

fn request_name(conn: &mut Connection, name: &str) {
    let call = Message::method_call(BUS_NAME, "/org/freedesktop/DBus", BUS_NAME, "RequestName")
        .arg(Value::str(name))
        .arg(Value::U32(0));
    let reply = conn.call(call, T).expect("RequestName");
    assert_eq!(reply.body, vec![Value::U32(1)], "primary owner of {name}");
}

/// Serves login1 and systemd1 on `conn` until `signals` disconnects; sends the
/// signals it is given as PrepareForShutdown.
fn serve(
    mut conn: Connection,
    seen: Arc<Mutex<Seen>>,
    signals: Receiver<bool>,
    conf: std::path::PathBuf,
) {
    loop {
        match signals.try_recv() {
            Ok(active) => {
                conn.send(
                    &Message::signal(
                        "/org/freedesktop/login1",
                        "org.freedesktop.login1.Manager",
                        "PrepareForShutdown",
                    )
                    .arg(Value::Bool(active)),
                )
                .expect("emit");
            }
            Err(crossbeam_channel::TryRecvError::Disconnected) => return,
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
        let Some(call) = conn
            .next_message(Duration::from_millis(50))
            .expect("receive")
        else {
            continue;
        };
        if call.kind != MessageKind::MethodCall {
            continue;
        }
        let reply = match call.member.as_deref() {
            Some("Get") => {
                assert_eq!(
                    call.body,
                    vec![
                        Value::str("org.freedesktop.login1.Manager"),
                        Value::str("InhibitDelayMaxUSec")
                    ]
                );
                let usec = seen.lock().unwrap().delay_usec;
                Message::method_return(&call).arg(Value::variant(Value::U64(usec)))
            }
            Some("Inhibit") => {
                // Close-on-exec: a dbus-daemon a parallel test starts must not inherit
                // the write end (the lock would then never read as released).
                let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe");
                fcntl(read.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("nonblocking");
                let mut s = seen.lock().unwrap();
                s.inhibits.push(call.body.clone());
                s.locks.push(read);
                Message::method_return(&call).fd_arg(write)
            }
            Some("KillUnit") => {
                // logind reloads: the drop-in's value becomes the property.
                let text = std::fs::read_to_string(conf.join("99-litelet.conf")).unwrap();
                let secs: u64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
                    .and_then(|v| v.parse().ok())
                    .expect("InhibitDelayMaxSec in the drop-in");
                let mut s = seen.lock().unwrap();
                s.kill_units.push(call.body.clone());
                s.delay_usec = secs * 1_000_000;
                Message::method_return(&call)
            }
            _ => Message::error(&call, "org.freedesktop.DBus.Error.UnknownMethod", "no"),
        };
        conn.send(&reply).expect("reply");
    }
}

/// Whether the lock's pipe still has a writer (the lock is held).
fn held(read: &OwnedFd) -> bool {
    let mut file = std::fs::File::from(read.try_clone().expect("dup"));
    let mut buf = [0u8; 1];
    match file.read(&mut buf) {
        Ok(0) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        other => panic!("unexpected read on the lock pipe: {other:?}"),
    }
}

struct Fixture {
    _bus: DbusDaemon,
    address: String,
    seen: Arc<Mutex<Seen>>,
    signals: Sender<bool>,
    conf: tempfile::TempDir,
}

fn fixture(test: &str) -> Option<Fixture> {
    let bus = DbusDaemon::start(test)?;
    let address = bus.address().to_owned();
    let mut services = Connection::open(&address).expect("connect services");
    request_name(&mut services, "org.freedesktop.login1");
    request_name(&mut services, "org.freedesktop.systemd1");
    let seen = Arc::new(Mutex::new(Seen {
        delay_usec: 5_000_000,
        ..Default::default()
    }));
    let conf = tempfile::tempdir().unwrap();
    let (signals, signals_rx) = crossbeam_channel::unbounded();
    let (s, dir) = (seen.clone(), conf.path().to_owned());
    std::thread::spawn(move || serve(services, s, signals_rx, dir));
    Some(Fixture {
        _bus: bus,
        address,
        seen,
        signals,
        conf,
    })
}

#[test]
fn the_delay_is_read_raised_through_the_drop_in_and_logind_is_told_to_reload() {
    let Some(f) =
        fixture("the_delay_is_read_raised_through_the_drop_in_and_logind_is_told_to_reload")
    else {
        return;
    };
    let mut logind = DbusLogind::open(Some(&f.address), f.conf.path().to_owned()).expect("open");
    assert_eq!(logind.inhibit_delay_max().unwrap(), Duration::from_secs(5));
    logind
        .override_inhibit_delay(Duration::from_secs(30))
        .expect("override");
    let text = std::fs::read_to_string(f.conf.path().join("99-litelet.conf")).unwrap();
    assert!(text.contains("[Login]\nInhibitDelayMaxSec=30\n"), "{text}");
    assert_eq!(
        f.seen.lock().unwrap().kill_units,
        [vec![
            Value::str("systemd-logind.service"),
            Value::str("all"),
            Value::I32(1)
        ]],
        "SIGHUP to systemd-logind through KillUnit"
    );
    assert_eq!(logind.inhibit_delay_max().unwrap(), Duration::from_secs(30));
}

#[test]
fn the_delay_lock_is_a_passed_fd_held_until_released() {
    let Some(f) = fixture("the_delay_lock_is_a_passed_fd_held_until_released") else {
        return;
    };
    let mut logind = DbusLogind::open(Some(&f.address), f.conf.path().to_owned()).expect("open");
    let lock = logind.inhibit_shutdown().expect("Inhibit");
    // The fake service's and the bus daemon's copies of the fd close just after the
    // reply goes out; give them that moment, so that only litelet's copy is left.
    std::thread::sleep(Duration::from_millis(300));
    {
        let seen = f.seen.lock().unwrap();
        assert_eq!(
            seen.inhibits,
            [vec![
                Value::str("shutdown"),
                Value::str("litelet"),
                Value::str("Kubelet needs time to handle node shutdown"),
                Value::str("delay"),
            ]]
        );
        assert!(held(&seen.locks[0]), "the lock is held");
    }
    lock.release();
    assert!(
        support::wait_until(T, || !held(&f.seen.lock().unwrap().locks[0])),
        "released: the fd is closed"
    );
}

#[test]
fn prepare_for_shutdown_arrives_only_from_loginds_name() {
    let Some(f) = fixture("prepare_for_shutdown_arrives_only_from_loginds_name") else {
        return;
    };
    let mut logind = DbusLogind::open(Some(&f.address), f.conf.path().to_owned()).expect("open");
    logind.subscribe().expect("AddMatch");
    // Someone else on the bus sends the same signal: not delivered.
    let mut spoofer = Connection::open(&f.address).expect("connect spoofer");
    spoofer
        .send(
            &Message::signal(
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "PrepareForShutdown",
            )
            .arg(Value::Bool(true)),
        )
        .expect("spoof");
    let next = |logind: &mut DbusLogind| -> Option<bool> {
        let deadline = std::time::Instant::now() + T;
        while std::time::Instant::now() < deadline {
            if let Some(v) = logind.next_event(Duration::from_millis(200)).expect("next") {
                return Some(v);
            }
        }
        None
    };
    assert_eq!(
        logind.next_event(Duration::from_millis(500)).expect("next"),
        None,
        "the spoofed signal must not arrive"
    );
    f.signals.send(true).unwrap();
    assert_eq!(next(&mut logind), Some(true));
    f.signals.send(false).unwrap();
    assert_eq!(next(&mut logind), Some(false));
}
