//! The wire format without a bus: round trips of the shapes systemd and logind use,
//! alignment, both byte orders, signature parsing, addresses, and hostile input.

use super::address::{parse, Target};
use super::marshal::{Decoder, Encoder};
use super::message::{decode, message_len, Message, MessageKind};
use super::value::{parse_signature, Type, Value};
use super::DbusError;

fn round_trip(m: &Message) -> Message {
    let bytes = m.encode(7).expect("encode");
    let mut head = [0u8; 16];
    head.copy_from_slice(&bytes[..16]);
    assert_eq!(message_len(&head).expect("length"), bytes.len());
    let (back, nfds) = decode(&bytes).expect("decode");
    assert_eq!(nfds, m.fds.len());
    back
}

#[test]
fn start_transient_unit_arguments_survive_a_round_trip() {
    let props = Value::properties(vec![
        ("Description", Value::str("pod")),
        (
            "Wants",
            Value::array("s", vec![Value::str("kubepods.slice")]),
        ),
        ("CPUWeight", Value::U64(39)),
        ("MemoryMax", Value::U64(128 << 20)),
        ("DefaultDependencies", Value::Bool(false)),
    ]);
    let call = Message::method_call(
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
    )
    .arg(Value::str("kubepods-pod1.slice"))
    .arg(Value::str("replace"))
    .arg(props)
    .arg(Value::array("(sa(sv))", vec![]));
    assert_eq!(call.signature(), "ssa(sv)a(sa(sv))");
    let back = round_trip(&call);
    assert_eq!(back.kind, MessageKind::MethodCall);
    assert_eq!(back.serial, 7);
    assert_eq!(back.member.as_deref(), Some("StartTransientUnit"));
    assert_eq!(back.path.as_deref(), Some("/org/freedesktop/systemd1"));
    assert_eq!(back.body, call.body);
}

#[test]
fn dictionaries_nested_variants_and_every_basic_type_round_trip() {
    let body = vec![
        Value::Byte(1),
        Value::I16(-2),
        Value::U16(3),
        Value::I32(-4),
        Value::Byte(5),
        Value::I64(-6),
        Value::Byte(7),
        Value::U64(u64::MAX),
        Value::F64(1.5),
        Value::ObjectPath("/a/b".into()),
        Value::Signature("a{sv}".into()),
        Value::dict_sv(vec![
            ("x", Value::variant(Value::Bool(true))),
            ("y", Value::array("y", vec![])),
        ]),
        Value::Struct(vec![Value::Byte(9), Value::array("t", vec![Value::U64(1)])]),
    ];
    let mut m = Message::signal("/p", "org.example.I", "S");
    m.body = body.clone();
    assert_eq!(round_trip(&m).body, body);
}

#[test]
fn values_are_aligned_from_the_start_of_the_message() {
    let mut e = Encoder::default();
    e.value(&Value::Byte(1)).unwrap();
    e.value(&Value::U32(2)).unwrap();
    e.value(&Value::Byte(3)).unwrap();
    e.value(&Value::U64(4)).unwrap();
    // y, 3 pad, u, y, 7 pad, t
    assert_eq!(e.buf.len(), 24);
    assert_eq!(&e.buf[4..8], &2u32.to_le_bytes());
    assert_eq!(&e.buf[16..24], &4u64.to_le_bytes());
    // An empty array of structs still pads to the (8-aligned) first element.
    let mut e = Encoder::default();
    e.value(&Value::array("(sv)", vec![])).unwrap();
    assert_eq!(e.buf, vec![0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn big_endian_values_decode() {
    let buf = [0, 0, 0, 5, 0, 0, 0, 1, b'x', 0];
    let mut d = Decoder::new(&buf, 0, true);
    assert_eq!(d.value(&Type::U32).unwrap(), Value::U32(5));
    assert_eq!(d.value(&Type::Str).unwrap(), Value::str("x"));
}

#[test]
fn an_array_element_of_another_type_is_refused() {
    let mut e = Encoder::default();
    let err = e
        .value(&Value::array("s", vec![Value::U32(1)]))
        .expect_err("u in an array of s");
    assert!(matches!(err, DbusError::Type { .. }), "{err}");
}

#[test]
fn signatures_parse_and_malformed_ones_are_refused() {
    let types = parse_signature("sa{sv}a(sa(sv))h").unwrap();
    assert_eq!(types.len(), 4);
    assert_eq!(types[2].signature(), "a(sa(sv))");
    for bad in ["a", "(", "()", "a{s", "a{sv", "z", "(s"] {
        assert!(parse_signature(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn addresses_give_paths_and_abstract_names_and_skip_other_transports() {
    assert_eq!(
        parse("unix:path=/run/dbus/system_bus_socket").unwrap(),
        vec![Target::Path("/run/dbus/system_bus_socket".into())]
    );
    assert_eq!(
        parse("tcp:host=x,port=1;unix:abstract=/tmp/dbus%2dA,guid=ab").unwrap(),
        vec![Target::Abstract(b"/tmp/dbus-A".to_vec())]
    );
    assert!(parse("tcp:host=x,port=1").is_err());
    assert!(parse("unix:path=%zz").is_err());
}

#[test]
fn error_replies_carry_the_name_and_text() {
    let mut call = Message::method_call("d", "/", "i", "m");
    call.serial = 3;
    call.sender = Some(":1.5".into());
    let back = round_trip(&Message::error(&call, "org.example.Error.Nope", "no way"));
    assert_eq!(back.kind, MessageKind::Error);
    assert_eq!(back.reply_serial, Some(3));
    assert_eq!(back.destination.as_deref(), Some(":1.5"));
    assert_eq!(back.error_name.as_deref(), Some("org.example.Error.Nope"));
    assert_eq!(back.error_text(), "no way");
}

#[test]
fn deeply_nested_variants_are_refused_not_a_stack_overflow() {
    let mut v = Value::U32(1);
    for _ in 0..100 {
        v = Value::variant(v);
    }
    let mut m = Message::signal("/p", "org.example.I", "S");
    m.body.push(v);
    let bytes = m.encode(1).unwrap();
    assert!(decode(&bytes).is_err());
}

proptest::proptest! {
    /// Whatever a peer sends, decoding answers with a value or an error.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 16..256)) {
        bytes[0] = b'l';
        let _ = decode(&bytes);
    }

    /// Truncating a valid message anywhere gives an error.
    #[test]
    fn a_truncated_message_is_an_error(cut in 0usize..200) {
        let m = Message::method_call("d", "/o", "i.f", "M")
            .arg(Value::properties(vec![("A", Value::U64(1)), ("B", Value::str("x"))]));
        let bytes = m.encode(1).unwrap();
        let cut = cut.min(bytes.len() - 1);
        proptest::prop_assert!(decode(&bytes[..cut]).is_err());
    }
}
