//! The wire format without a bus: round trips of the shapes systemd and logind use,
//! alignment, both byte orders, signature parsing, addresses, and hostile input.

use super::address::{parse, Target};
use super::marshal::VALUE_COST;
use super::marshal::{Decoder, Encoder};
use super::message::{decode, decode_header, message_len, Message, MessageKind};
use super::value::{parse_signature, Type, Value};
use super::{DbusError, MAX_DECODED, MAX_DECODE_DEPTH, MAX_INCOMING_MESSAGE};

fn round_trip(m: &Message) -> Message {
    let bytes = m.encode(7).expect("encode");
    let mut head = [0u8; 16];
    head.copy_from_slice(&bytes[..16]);
    assert_eq!(message_len(&head).expect("length"), bytes.len());
    let (back, nfds) = decode(&bytes, MAX_DECODED).expect("decode");
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
            ("y", Value::Bytes(vec![])),
            ("z", Value::Bytes(vec![1, 2, 3])),
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
    let mut d = Decoder::new(&buf, 0, true, MAX_DECODED);
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

/// The bytes of a signal whose body is `v`, encoded on a thread with room for any
/// nesting (the encoder and the value's drop recurse as deep as the value).
fn signal_with(v: impl FnOnce() -> Value + Send + 'static) -> Vec<u8> {
    std::thread::Builder::new()
        .name("encoder".into())
        .stack_size(256 << 20)
        .spawn(move || {
            let mut m = Message::signal("/p", "org.example.I", "S");
            m.body.push(v());
            m.encode(1).expect("encode")
        })
        .expect("spawn")
        .join()
        .expect("encoder thread")
}

/// Decodes `bytes` on a thread with the stack of the smallest thread that reads a bus
/// (`node-shutdown`, 256 KiB). Tests run debug code, whose frames are several times
/// larger than release ones (about 1.5 KiB a container here, 96 KiB for the deepest
/// message), so this leaves the release reader most of its stack. A stack overflow
/// aborts the test binary.
fn decode_on_a_reader_stack(bytes: Vec<u8>) -> Result<(), DbusError> {
    std::thread::Builder::new()
        .name("decoder".into())
        .stack_size(256 * 1024)
        .spawn(move || decode(&bytes, MAX_DECODED).map(drop))
        .expect("spawn")
        .join()
        .expect("decoder thread")
}

/// `depth` containers around a u32: variants, arrays and structs in turn.
fn nested(depth: usize) -> Value {
    let mut v = Value::U32(1);
    for i in 0..depth {
        v = match i % 3 {
            0 => Value::variant(v),
            1 => Value::array(&v.signature(), vec![v]),
            _ => Value::Struct(vec![v]),
        };
    }
    v
}

#[test]
fn the_deepest_message_the_decoder_takes_fits_the_smallest_reader_stack() {
    let deepest = signal_with(|| nested(usize::from(MAX_DECODE_DEPTH)));
    decode_on_a_reader_stack(deepest).expect("64 nested containers decode");
    let deeper = signal_with(|| nested(usize::from(MAX_DECODE_DEPTH) + 1));
    let err = decode_on_a_reader_stack(deeper).expect_err("65 are refused");
    assert!(err.to_string().contains("nested"), "{err}");
}

#[test]
fn variants_cannot_start_the_nesting_count_again() {
    // Each variant holds 31 arrays and the next variant: every signature is short and
    // valid, but the message nests 2,048 containers (a stack overflow before).
    let chain = signal_with(|| {
        let mut v = Value::U32(1);
        for _ in 0..64 {
            v = Value::variant(v);
            for _ in 0..31 {
                v = Value::array(&v.signature(), vec![v]);
            }
        }
        v
    });
    let err = decode_on_a_reader_stack(chain).expect_err("refused");
    assert!(err.to_string().contains("nested"), "{err}");
}

#[test]
fn a_byte_array_decodes_into_one_vector_accounted_at_its_length() {
    let payload: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut m = Message::signal("/p", "org.example.I", "S");
    m.body.push(Value::Bytes(payload.clone()));
    let bytes = m.encode(1).unwrap();
    let (_, body) = decode_header(&bytes, MAX_DECODED).unwrap();
    let (values, cost) = body.decode(&bytes, MAX_DECODED).unwrap();
    assert_eq!(values, vec![Value::Bytes(payload)]);
    assert!(
        cost <= (1 << 20) + 2 * VALUE_COST,
        "1 MiB of bytes accounted at {cost}"
    );
}

#[test]
fn a_body_that_would_decode_past_the_budget_is_refused() {
    // 240 KB on the wire: 120,000 empty signatures of 2 bytes, 48 bytes each decoded.
    let sigs = vec![Value::Signature(String::new()); 120_000];
    let mut m = Message::signal("/p", "org.example.I", "S");
    m.body.push(Value::array("g", sigs));
    let bytes = m.encode(1).unwrap();
    assert!(bytes.len() < MAX_INCOMING_MESSAGE);
    let (_, body) = decode_header(&bytes, MAX_DECODED).unwrap();
    let err = body
        .decode(&bytes, MAX_DECODED)
        .expect_err("over the budget");
    assert!(
        matches!(err, DbusError::TooLarge { limit, .. } if limit == MAX_DECODED),
        "{err}"
    );
}

#[test]
fn signatures_nest_32_arrays_32_structs_and_32_dict_entries_at_most() {
    let arrays = |n| "a".repeat(n) + "y";
    let structs = |n| "(".repeat(n) + "y" + &")".repeat(n);
    let dicts = |n| "a{s".repeat(n) + "y" + &"}".repeat(n);
    assert!(parse_signature(&arrays(32)).is_ok());
    assert!(parse_signature(&arrays(33)).is_err());
    assert!(parse_signature(&structs(32)).is_ok());
    assert!(parse_signature(&structs(33)).is_err());
    assert!(parse_signature(&format!("{}{}", "a".repeat(32), structs(32))).is_ok());
    // a{ counts as an array and a dict entry.
    assert!(parse_signature(&dicts(32)).is_ok());
    assert!(parse_signature(&dicts(33)).is_err());
}

proptest::proptest! {
    /// Whatever a peer sends, decoding answers with a value or an error.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 16..256)) {
        bytes[0] = b'l';
        let _ = decode(&bytes, MAX_DECODED);
    }

    /// Truncating a valid message anywhere gives an error.
    #[test]
    fn a_truncated_message_is_an_error(cut in 0usize..200) {
        let m = Message::method_call("d", "/o", "i.f", "M")
            .arg(Value::properties(vec![("A", Value::U64(1)), ("B", Value::str("x"))]));
        let bytes = m.encode(1).unwrap();
        let cut = cut.min(bytes.len() - 1);
        proptest::prop_assert!(decode(&bytes[..cut], MAX_DECODED).is_err());
    }
}
