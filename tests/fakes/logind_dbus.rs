//! The logind seam over D-Bus (`nodeshutdown::dbus_logind`) against a private
//! `dbus-daemon` with a fake logind and systemd on it: the delay property, the drop-in
//! and the SIGHUP through KillUnit, the delay lock as a passed fd (held until dropped),
//! and PrepareForShutdown signals, only from the current owner of logind's name:
//! neither another user's forgery addressed to litelet's connection nor anything
//! before a restarted logind counts.

use crate::support;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::dbus_daemon::DbusDaemon;
use crossbeam_channel::{Receiver, Sender};
use litelet::dbus::{Connection, Message, MessageKind, Value, BUS_NAME};
use litelet::nodeshutdown::dbus_logind::DbusLogind;
use litelet::nodeshutdown::logind::Logind;
use nix::fcntl::{fcntl, FcntlArg, OFlag};

const T: Duration = Duration::from_secs(5);

/// What the fake services were asked.
#[derive(Default)]
struct Seen {
    delay_usec: u64,
    inhibits: Vec<Vec<Value>>,
    kill_units: Vec<Vec<Value>>,
    /// Read ends of the lock pipes handed out.
    locks: Vec<OwnedFd>,
    /// The unique names that called.
    callers: Vec<String>,
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
        seen.lock().unwrap().callers.extend(call.sender.clone());
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
    bus: DbusDaemon,
    address: String,
    seen: Arc<Mutex<Seen>>,
    services: Services,
    conf: tempfile::TempDir,
}

/// The fake services: their signal channel, thread and unique name.
struct Services {
    signals: Sender<bool>,
    thread: std::thread::JoinHandle<()>,
    name: String,
}

/// Connects the fake logind and systemd, asks for their names and serves them on a
/// thread until `signals` is dropped. The names are theirs at once, or (after a
/// restart) once the former owner has gone: RequestName answers 1, or 2 (queued).
fn start_services(address: &str, seen: Arc<Mutex<Seen>>, conf: &std::path::Path) -> Services {
    let mut services = Connection::open(address).expect("connect services");
    services.serve_calls();
    for name in ["org.freedesktop.login1", "org.freedesktop.systemd1"] {
        let call = Message::method_call(BUS_NAME, "/org/freedesktop/DBus", BUS_NAME, "RequestName")
            .arg(Value::str(name))
            .arg(Value::U32(0));
        let reply = services.call(call, T).expect("RequestName");
        assert!(
            matches!(reply.body[..], [Value::U32(1 | 2)]),
            "{name}: {:?}",
            reply.body
        );
    }
    let name = services.unique_name().to_owned();
    let (signals, signals_rx) = crossbeam_channel::unbounded();
    let conf = conf.to_owned();
    let thread = std::thread::spawn(move || serve(services, seen, signals_rx, conf));
    Services {
        signals,
        thread,
        name,
    }
}

fn fixture(test: &str) -> Option<Fixture> {
    let bus = DbusDaemon::start(test)?;
    let address = bus.address().to_owned();
    let seen = Arc::new(Mutex::new(Seen {
        delay_usec: 5_000_000,
        ..Default::default()
    }));
    let conf = tempfile::tempdir().unwrap();
    let services = start_services(&address, seen.clone(), conf.path());
    Some(Fixture {
        bus,
        address,
        seen,
        services,
        conf,
    })
}

impl Fixture {
    /// Sends PrepareForShutdown(active) from the fake logind.
    fn emit(&self, active: bool) {
        self.services
            .signals
            .send(active)
            .expect("the services' thread");
    }

    /// logind (and systemd) restart: the services' connection goes, and a new one
    /// owns their names.
    fn restart_services(&mut self) {
        let new = start_services(&self.address, self.seen.clone(), self.conf.path());
        let old = std::mem::replace(&mut self.services, new);
        drop(old.signals);
        old.thread.join().expect("the old services' thread");
        let mut observer = Connection::open(&self.address).expect("connect observer");
        assert!(
            support::wait_until(T, || observer
                .get_name_owner("org.freedesktop.login1")
                .is_ok_and(|owner| owner == self.services.name)),
            "the restarted services never owned org.freedesktop.login1"
        );
    }
}

/// The next event within the timeout, polling as the node-shutdown thread does.
fn next(logind: &mut DbusLogind) -> Option<bool> {
    let deadline = std::time::Instant::now() + T;
    while std::time::Instant::now() < deadline {
        if let Some(v) = logind.next_event(Duration::from_millis(200)).expect("next") {
            return Some(v);
        }
    }
    None
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
    assert_eq!(
        logind.next_event(Duration::from_millis(500)).expect("next"),
        None,
        "the spoofed signal must not arrive"
    );
    f.emit(true);
    assert_eq!(next(&mut logind), Some(true));
    f.emit(false);
    assert_eq!(next(&mut logind), Some(false));
}

#[test]
fn prepare_for_shutdown_another_user_addresses_to_litelet_is_ignored() {
    let Some(f) = fixture("prepare_for_shutdown_another_user_addresses_to_litelet_is_ignored")
    else {
        return;
    };
    let mut logind = DbusLogind::open(Some(&f.address), f.conf.path().to_owned()).expect("open");
    logind.subscribe().expect("subscribe");
    let _lock = logind.inhibit_shutdown().expect("Inhibit");
    // litelet's unique name, as the fake logind saw it call (`busctl list` shows it).
    let litelet = f.seen.lock().unwrap().callers[0].clone();
    f.bus.forge_signal(
        &litelet,
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager.PrepareForShutdown",
        &["boolean:true"],
    );
    // logind's own signal comes after the forged one: it is the first event.
    f.emit(false);
    assert_eq!(next(&mut logind), Some(false));
    f.emit(true);
    assert_eq!(next(&mut logind), Some(true));
}

#[test]
fn a_restarted_logind_is_followed() {
    let Some(mut f) = fixture("a_restarted_logind_is_followed") else {
        return;
    };
    let mut logind = DbusLogind::open(Some(&f.address), f.conf.path().to_owned()).expect("open");
    logind.subscribe().expect("subscribe");
    f.emit(false);
    assert_eq!(next(&mut logind), Some(false));
    f.restart_services();
    // The restarted logind answers and signals: litelet follows its new name.
    assert_eq!(logind.inhibit_delay_max().unwrap(), Duration::from_secs(5));
    f.emit(true);
    assert_eq!(next(&mut logind), Some(true));
}
