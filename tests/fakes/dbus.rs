//! The D-Bus client against a real, private `dbus-daemon`: the bus's own methods,
//! typed remote errors, properties, signals from the owner of a trusted name (and
//! not from anyone else, nor from a former owner), a unix fd passed in a reply,
//! timeouts, and the memory bounds under a 32 MiB forged signal and a flood.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crate::support::dbus_daemon::DbusDaemon;
use litelet::dbus::{
    Connection, DbusError, Message, MessageKind, SignalMatch, Value, BUS_NAME,
    MAX_INCOMING_MESSAGE, MAX_QUEUED_BYTES,
};

const T: Duration = Duration::from_secs(5);

/// The service of the signal tests: a well-known name, its path and interface.
const SERVICE: &str = "org.example.Test";
const PATH: &str = "/org/example";

/// `RequestName` flags.
const ALLOW_REPLACEMENT: u32 = 1;
const REPLACE_EXISTING: u32 = 2;
const DO_NOT_QUEUE: u32 = 4;

/// Takes `name` on `conn` with `flags`; it must become the primary owner.
fn request_name(conn: &mut Connection, name: &str, flags: u32) {
    let call = Message::method_call(BUS_NAME, "/org/freedesktop/DBus", BUS_NAME, "RequestName")
        .arg(Value::str(name))
        .arg(Value::U32(flags));
    let reply = conn.call(call, T).expect("RequestName");
    assert_eq!(reply.body, vec![Value::U32(1)], "primary owner of {name}");
}

/// `SERVICE.member(signature)` on `PATH`, from the owner of `SERVICE`.
fn service_signal(member: &str, signature: &str) -> SignalMatch {
    SignalMatch::new(SERVICE, PATH, SERVICE, member, signature)
}

/// A `Tick(u)` signal, addressed to `dest` (None: broadcast).
fn tick(n: u32, dest: Option<&str>) -> Message {
    let mut m = Message::signal(PATH, SERVICE, "Tick").arg(Value::U32(n));
    m.destination = dest.map(str::to_owned);
    m
}

/// Sends `msg` from `conn`, then makes a round trip to the bus: once it is answered,
/// the bus has dispatched `msg` (it handles a connection's messages in order).
fn send_dispatched(conn: &mut Connection, msg: &Message) {
    conn.send(msg).expect("send");
    conn.get_name_owner(BUS_NAME).expect("round trip");
}

/// The number each of the next `count` messages carries (as `Tick(u)` does).
fn next_ticks(conn: &mut Connection, count: usize) -> Vec<u64> {
    (0..count)
        .map(|_| {
            let m = conn
                .next_message(T)
                .expect("receive")
                .expect("a signal within the timeout");
            m.body[0].as_u64().expect("u")
        })
        .collect()
}

/// The peak resident set of this process (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

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
fn a_subscribed_signal_arrives_from_the_owner_of_the_trusted_name() {
    let Some(bus) =
        DbusDaemon::start("a_subscribed_signal_arrives_from_the_owner_of_the_trusted_name")
    else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut emitter = Connection::open(bus.address()).expect("connect emitter");
    request_name(&mut emitter, SERVICE, 0);
    listener
        .subscribe(service_signal("Ping", "ua(sv)"))
        .expect("subscribe");
    assert_eq!(
        listener.followed_owner(SERVICE),
        Some(emitter.unique_name())
    );
    // A signal outside the subscription is not delivered; the one inside is.
    emitter
        .send(&Message::signal(PATH, SERVICE, "Other").arg(Value::U32(1)))
        .expect("emit Other");
    let props = Value::properties(vec![("Result", Value::str("done"))]);
    emitter
        .send(
            &Message::signal(PATH, SERVICE, "Ping")
                .arg(Value::U32(42))
                .arg(props.clone()),
        )
        .expect("emit Ping");
    // The listener thread receives on its own: connections are Send.
    let got = std::thread::spawn(move || {
        listener
            .next_message(T)
            .expect("receive")
            .expect("a signal within the timeout")
    })
    .join()
    .expect("listener thread");
    assert_eq!(got.kind, MessageKind::Signal);
    assert_eq!(got.member.as_deref(), Some("Ping"));
    assert_eq!(got.sender.as_deref(), Some(emitter.unique_name()));
    assert_eq!(got.body, vec![Value::U32(42), props]);
}

#[test]
fn a_signal_another_user_addresses_to_us_is_dropped_unread() {
    let Some(bus) = DbusDaemon::start("a_signal_another_user_addresses_to_us_is_dropped_unread")
    else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut owner = Connection::open(bus.address()).expect("connect owner");
    request_name(&mut owner, SERVICE, 0);
    listener
        .subscribe(service_signal("Tick", "u"))
        .expect("subscribe");
    // (The bus's own NameAcquired counts too.)
    let dropped_before = listener.stats().unwanted;
    // Broadcast, the bus's rule keeps it away; addressed to us, only our check does.
    bus.forge_signal(SERVICE, PATH, "org.example.Test.Tick", &["uint32:666"]);
    bus.forge_signal(
        listener.unique_name(),
        PATH,
        "org.example.Test.Tick",
        &["uint32:666"],
    );
    send_dispatched(&mut owner, &tick(1, None));
    send_dispatched(&mut owner, &tick(2, Some(listener.unique_name())));
    assert_eq!(next_ticks(&mut listener, 2), [1, 2]);
    let stats = listener.stats();
    assert_eq!(stats.unwanted, dropped_before + 1, "{stats:?}");
    assert_eq!(stats.queued, 0, "{stats:?}");
}

#[test]
fn a_new_owner_of_the_name_is_followed_and_a_former_one_is_not_believed() {
    let Some(bus) =
        DbusDaemon::start("a_new_owner_of_the_name_is_followed_and_a_former_one_is_not_believed")
    else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut first = Connection::open(bus.address()).expect("connect first");
    request_name(&mut first, SERVICE, ALLOW_REPLACEMENT | DO_NOT_QUEUE);
    listener
        .subscribe(service_signal("Tick", "u"))
        .expect("subscribe");
    send_dispatched(&mut first, &tick(1, None));
    assert_eq!(next_ticks(&mut listener, 1), [1]);
    let dropped_before = listener.stats().unwanted;

    // A restart: a second service takes the name over; the first one is still on
    // the bus, and what it sends (even addressed to us) no longer counts.
    let mut second = Connection::open(bus.address()).expect("connect second");
    request_name(&mut second, SERVICE, REPLACE_EXISTING);
    send_dispatched(&mut first, &tick(2, Some(listener.unique_name())));
    send_dispatched(&mut second, &tick(3, None));
    assert_eq!(next_ticks(&mut listener, 1), [3]);
    assert_eq!(listener.followed_owner(SERVICE), Some(second.unique_name()));

    // The service leaves: nobody's signal counts until a third one takes the name.
    drop(second);
    let deadline = Instant::now() + T;
    while listener.followed_owner(SERVICE).is_some() && Instant::now() < deadline {
        assert!(listener
            .next_message(Duration::from_millis(100))
            .expect("receive")
            .is_none());
    }
    assert_eq!(listener.followed_owner(SERVICE), None);
    send_dispatched(&mut first, &tick(4, Some(listener.unique_name())));
    let mut third = Connection::open(bus.address()).expect("connect third");
    request_name(&mut third, SERVICE, 0);
    send_dispatched(&mut third, &tick(5, None));
    assert_eq!(next_ticks(&mut listener, 1), [5]);
    let stats = listener.stats();
    assert_eq!(stats.unwanted, dropped_before + 2, "{stats:?}");
}

#[test]
fn a_32_mib_signal_from_another_user_costs_no_more_than_the_read_buffer() {
    let test = "a_32_mib_signal_from_another_user_costs_no_more_than_the_read_buffer";
    let Some(bus) = DbusDaemon::start(test) else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut owner = Connection::open(bus.address()).expect("connect owner");
    request_name(&mut owner, SERVICE, 0);
    listener
        .subscribe(service_signal("Blob", "ay"))
        .expect("subscribe");
    // Forget the peak so far (writing 5 to clear_refs resets VmHWM).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let before = peak_rss_kib();
    // The bus's own limit is 32 MiB a message: the forgery is just under it.
    let size = (32 << 20) - 4096;
    bus.forge_big_signal(listener.unique_name(), PATH, SERVICE, "Blob", size);
    send_dispatched(
        &mut owner,
        &Message::signal(PATH, SERVICE, "Blob").arg(Value::Bytes(vec![1; 1000])),
    );
    let got = listener
        .next_message(T)
        .expect("receive")
        .expect("the owner's signal after the forged one");
    assert_eq!(got.body, vec![Value::Bytes(vec![1; 1000])]);
    let grown = peak_rss_kib().saturating_sub(before);
    let stats = listener.stats();
    eprintln!("after a {size}-byte forged signal: peak RSS +{grown} KiB, {stats:?}");
    assert_eq!(stats.oversized, 1, "{stats:?}");
    assert!(
        stats.peak_read_buffer <= MAX_INCOMING_MESSAGE + 2 * 64 * 1024,
        "the read buffer grew to {} bytes",
        stats.peak_read_buffer
    );
    assert!(stats.peak_queued_bytes < 4096, "{stats:?}");
    // Parallel tests share the process: a generous margin, far below the GiBs that
    // decoding the forgery cost before.
    assert!(grown < 256 * 1024, "peak RSS grew by {grown} KiB");
}

#[test]
fn the_owners_oversized_and_flooding_signals_stay_within_the_bounds() {
    let test = "the_owners_oversized_and_flooding_signals_stay_within_the_bounds";
    let Some(bus) = DbusDaemon::start(test) else {
        return;
    };
    let mut listener = Connection::open(bus.address()).expect("connect listener");
    let mut owner = Connection::open(bus.address()).expect("connect owner");
    request_name(&mut owner, SERVICE, 0);
    listener
        .subscribe(service_signal("Blob", "ay"))
        .expect("subscribe");
    let blob =
        |n: u8, len: usize| Message::signal(PATH, SERVICE, "Blob").arg(Value::Bytes(vec![n; len]));
    // Over the message bound: passed over.
    owner.send(&blob(0, 2 << 20)).expect("send 2 MiB");
    // 6.4 MiB of signals nobody reads while the listener waits for a reply: the
    // queue keeps the newest within its bound.
    for n in 1..=100 {
        owner.send(&blob(n, 64 * 1024)).expect("send 64 KiB");
    }
    send_dispatched(&mut owner, &tick(0, None));
    listener
        .list_names()
        .expect("a call while the signals come in");
    let stats = listener.stats();
    eprintln!("after a flood: {stats:?}");
    assert_eq!(stats.oversized, 1, "{stats:?}");
    assert!(stats.overflowed > 0, "{stats:?}");
    assert!(stats.peak_queued_bytes <= MAX_QUEUED_BYTES, "{stats:?}");
    assert!(stats.queued_bytes <= MAX_QUEUED_BYTES, "{stats:?}");
    let mut last = 0;
    while let Some(m) = listener
        .next_message(Duration::from_millis(200))
        .expect("receive")
    {
        last = m.body[0].as_bytes().expect("ay")[0];
    }
    assert_eq!(last, 100, "the newest signal is kept");
}

#[test]
fn a_unix_fd_in_a_reply_reaches_the_caller() {
    let Some(bus) = DbusDaemon::start("a_unix_fd_in_a_reply_reaches_the_caller") else {
        return;
    };
    let mut caller = Connection::open(bus.address()).expect("connect caller");
    let mut server = Connection::open(bus.address()).expect("connect server");
    let server_name = server.unique_name().to_owned();
    server.serve_calls();
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
    // A connection that serves no calls drops them unread.
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
