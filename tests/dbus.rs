//! The D-Bus client against a real, private `dbus-daemon`: the bus's own methods,
//! typed remote errors, properties, signals between two connections, a unix fd
//! passed in a reply, and timeouts.

mod support;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::time::Duration;

use litelet::dbus::{Connection, DbusError, Message, MessageKind, Value, BUS_NAME};
use support::dbus_daemon::DbusDaemon;

const T: Duration = Duration::from_secs(5);

#[test]
fn list_names_holds_the_bus_and_our_unique_name() {
    let Some(bus) = DbusDaemon::start("list_names_holds_the_bus_and_our_unique_name") else {
        return;
    };
    let mut conn = Connection::open(bus.address()).expect("connect");
    assert!(
        conn.unique_name().starts_with(':'),
        "{}",
        conn.unique_name()
    );
    assert!(conn.fd_passing(), "a unix socket bus agrees to pass fds");
    let names = conn.list_names().expect("ListNames");
    assert!(names.iter().any(|n| n == BUS_NAME), "{names:?}");
    assert!(names.iter().any(|n| n == conn.unique_name()), "{names:?}");
}

#[test]
fn unknown_name_owner_is_a_remote_error_with_its_dbus_name() {
    let Some(bus) = DbusDaemon::start("unknown_name_owner_is_a_remote_error_with_its_dbus_name")
    else {
        return;
    };
    let mut conn = Connection::open(bus.address()).expect("connect");
    let err = conn
        .get_name_owner("org.example.Nobody")
        .expect_err("nobody owns the name");
    assert_eq!(
        err.remote_name(),
        Some("org.freedesktop.DBus.Error.NameHasNoOwner"),
        "{err}"
    );
    // A known name resolves to its owner.
    let me = conn.unique_name().to_owned();
    assert_eq!(conn.get_name_owner(&me).expect("own name"), me);
}

#[test]
fn properties_get_unwraps_the_variant() {
    let Some(bus) = DbusDaemon::start("properties_get_unwraps_the_variant") else {
        return;
    };
    let mut conn = Connection::open(bus.address()).expect("connect");
    let interfaces = conn
        .get_property(
            BUS_NAME,
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Interfaces",
            T,
        )
        .expect("Properties.Get");
    let names: Vec<&str> = interfaces
        .as_array()
        .expect("as")
        .iter()
        .map(|v| v.as_str().expect("s"))
        .collect();
    assert!(
        names.contains(&"org.freedesktop.DBus.Monitoring"),
        "{names:?}"
    );
}

#[test]
fn signal_from_another_connection_arrives_after_add_match() {
    let Some(bus) = DbusDaemon::start("signal_from_another_connection_arrives_after_add_match")
    else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut emitter = Connection::open(bus.address()).expect("connect emitter");
    listener
        .add_match("type='signal',interface='org.example.Test',member='Ping'")
        .expect("AddMatch");
    // A signal outside the rule must not be delivered; the one inside must.
    emitter
        .send(&Message::signal("/org/example", "org.example.Test", "Other").arg(Value::U32(1)))
        .expect("emit Other");
    let props = Value::properties(vec![("Result", Value::str("done"))]);
    emitter
        .send(
            &Message::signal("/org/example", "org.example.Test", "Ping")
                .arg(Value::U32(42))
                .arg(props.clone()),
        )
        .expect("emit Ping");
    // The listener thread receives on its own: connections are Send.
    let got = std::thread::spawn(move || {
        loop {
            let m = listener
                .next_message(T)
                .expect("receive")
                .expect("a signal within the timeout");
            // The bus greets every connection with NameAcquired; skip it.
            if m.interface.as_deref() == Some("org.example.Test") {
                return m;
            }
        }
    })
    .join()
    .expect("listener thread");
    assert_eq!(got.kind, MessageKind::Signal);
    assert_eq!(got.member.as_deref(), Some("Ping"));
    assert_eq!(got.sender.as_deref(), Some(emitter.unique_name()));
    assert_eq!(got.body, vec![Value::U32(42), props]);
}

#[test]
fn a_unix_fd_in_a_reply_reaches_the_caller() {
    let Some(bus) = DbusDaemon::start("a_unix_fd_in_a_reply_reaches_the_caller") else {
        return;
    };
    let mut caller = Connection::open(bus.address()).expect("connect caller");
    let mut server = Connection::open(bus.address()).expect("connect server");
    let server_name = server.unique_name().to_owned();
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    // The server answers one Inhibit-like call with the pipe's write end.
    let serving = std::thread::spawn(move || loop {
        let call = server
            .next_message(T)
            .expect("receive")
            .expect("the call within the timeout");
        if call.kind == MessageKind::MethodCall && call.member.as_deref() == Some("Inhibit") {
            assert_eq!(call.body, vec![Value::str("shutdown")]);
            server
                .send(&Message::method_return(&call).fd_arg(write_end))
                .expect("reply");
            return;
        }
    });
    let mut reply = caller
        .call(
            Message::method_call(&server_name, "/org/example", "org.example.Test", "Inhibit")
                .arg(Value::str("shutdown")),
            T,
        )
        .expect("Inhibit call");
    serving.join().expect("server thread");
    assert_eq!(reply.body, vec![Value::UnixFd(0)]);
    let h = reply.body[0].clone();
    let fd: OwnedFd = reply.take_fd(&h).expect("the fd");
    std::fs::File::from(fd)
        .write_all(b"through the bus")
        .expect("write to the passed fd");
    let mut got = String::new();
    std::fs::File::from(read_end)
        .read_to_string(&mut got)
        .expect("read the pipe");
    assert_eq!(got, "through the bus");
    assert!(reply.take_fd(&h).is_err(), "an fd is handed out once");
}

#[test]
fn an_unanswered_call_times_out_and_the_connection_stays_usable() {
    let Some(bus) =
        DbusDaemon::start("an_unanswered_call_times_out_and_the_connection_stays_usable")
    else {
        return;
    };
    let mut caller = Connection::open(bus.address()).expect("connect caller");
    let silent = Connection::open(bus.address()).expect("connect silent peer");
    let started = std::time::Instant::now();
    let err = caller
        .call(
            Message::method_call(silent.unique_name(), "/", "org.example.Test", "Never"),
            Duration::from_millis(300),
        )
        .expect_err("no reply comes");
    assert!(matches!(err, DbusError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(caller.list_names().is_ok());
}

#[test]
fn an_unknown_method_on_the_bus_is_a_typed_error() {
    let Some(bus) = DbusDaemon::start("an_unknown_method_on_the_bus_is_a_typed_error") else {
        return;
    };
    let mut conn = Connection::open(bus.address()).expect("connect");
    let err = conn
        .call(
            Message::method_call(BUS_NAME, "/org/freedesktop/DBus", BUS_NAME, "NoSuchMethod"),
            T,
        )
        .expect_err("unknown method");
    assert_eq!(
        err.remote_name(),
        Some("org.freedesktop.DBus.Error.UnknownMethod"),
        "{err}"
    );
}
