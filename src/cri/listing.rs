//! `ListPodSandbox` and `ListContainers` answers read lean, for the relist.
//!
//! On a runtime without container events the PLEG lists every sandbox and container
//! once a second. Decoded into the generated types, each item brings its labels and
//! annotations as two hash maps, its image spec and every other field: thousands of
//! allocations a second at 100 pods, most of an idle node's CPU. The relist reads
//! only ids, names, the pod's identity and states, so these decoders take those
//! fields straight off the wire (with the protobuf crate's `CodedInputStream`) and
//! skip the rest, unknown fields included, without keeping them. The request is the
//! generated one; the field numbers below are `proto/cri/api.proto`'s.

use grpcio::{GrpcSlice, Marshaller, MessageReader, Method, MethodType};
use protobuf::rt::WireType;
use protobuf::CodedInputStream;

use super::pb;

/// One listed sandbox: what a relist needs of `runtime.v1.PodSandbox`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedSandbox {
    pub id: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
    /// SANDBOX_READY; anything else counts as not ready.
    pub ready: bool,
    pub created_at: i64,
}

/// One listed container: what a relist needs of `runtime.v1.Container`; the pod's
/// identity comes from the labels litelet put on it (absent on someone else's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedContainer {
    pub id: String,
    pub name: String,
    pub state: pb::ContainerState,
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
}

/// The sandboxes of a `ListPodSandboxResponse`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListedSandboxes(pub Vec<ListedSandbox>);

/// The containers of a `ListContainersResponse`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListedContainers(pub Vec<ListedContainer>);

/// The labels litelet puts on every container to name its pod (upstream's keys; the
/// runtime layer's `labels` takes them from here): a listed container keeps their
/// values and no other label's.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";

pub(super) const LIST_POD_SANDBOX: Method<pb::ListPodSandboxRequest, ListedSandboxes> = Method {
    ty: MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListPodSandbox",
    req_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
    resp_mar: Marshaller {
        ser: never_sent,
        de: |mut reader| read_sandboxes(&mut reader).map_err(codec_error),
    },
};

pub(super) const LIST_CONTAINERS: Method<pb::ListContainersRequest, ListedContainers> = Method {
    ty: MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListContainers",
    req_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
    resp_mar: Marshaller {
        ser: never_sent,
        de: |mut reader| read_containers(&mut reader).map_err(codec_error),
    },
};

/// A client only receives these answers; it never encodes one.
fn never_sent<T>(_: &T, _: &mut GrpcSlice) -> grpcio::Result<()> {
    Err(grpcio::Error::Codec("a lean listing is never sent".into()))
}

fn codec_error(err: protobuf::Error) -> grpcio::Error {
    grpcio::Error::Codec(Box::new(err))
}

type Decoded<T> = protobuf::Result<T>;

/// Calls `field(stream, number, wire type)` for each field of the message (or of the
/// length-limited part being read); `field` reads or skips the field's value.
fn for_each_field(
    s: &mut CodedInputStream,
    mut field: impl FnMut(&mut CodedInputStream, u32, WireType) -> Decoded<()>,
) -> Decoded<()> {
    while let Some(tag) = s.read_raw_tag_or_eof()? {
        let wire_type =
            WireType::new(tag & 7).ok_or_else(|| bad(format!("wire type in tag {tag}")))?;
        field(s, tag >> 3, wire_type)?;
    }
    Ok(())
}

/// Reads an embedded message of `wire_type` with `read` (the stream limited to it).
fn embedded<T>(
    s: &mut CodedInputStream,
    wire_type: WireType,
    read: impl FnOnce(&mut CodedInputStream) -> Decoded<T>,
) -> Decoded<T> {
    if wire_type != WireType::LengthDelimited {
        return Err(bad(format!("an embedded message as {wire_type:?}")));
    }
    let len = s.read_raw_varint64()?;
    let outer = s.push_limit(len)?;
    let value = read(s)?;
    // The fields ran out before the length did: the answer was cut short.
    if s.bytes_until_limit() != 0 {
        return Err(bad(format!("end of an embedded message {len} bytes long")));
    }
    s.pop_limit(outer);
    Ok(value)
}

fn bad(what: String) -> protobuf::Error {
    protobuf::Error::from(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("unexpected {what}"),
    ))
}

/// `read` for a field of the expected `want` type, else the field is malformed.
fn typed<T>(
    s: &mut CodedInputStream,
    got: WireType,
    want: WireType,
    read: impl FnOnce(&mut CodedInputStream) -> Decoded<T>,
) -> Decoded<T> {
    if got != want {
        return Err(bad(format!("{got:?} where {want:?} belongs")));
    }
    read(s)
}

fn string(s: &mut CodedInputStream, wire_type: WireType) -> Decoded<String> {
    typed(s, wire_type, WireType::LengthDelimited, |s| s.read_string())
}

fn varint(s: &mut CodedInputStream, wire_type: WireType) -> Decoded<u64> {
    typed(s, wire_type, WireType::Varint, |s| s.read_raw_varint64())
}

fn read_sandboxes(reader: &mut MessageReader) -> Decoded<ListedSandboxes> {
    let mut s = CodedInputStream::from_buf_read(reader);
    decode_sandboxes(&mut s)
}

fn read_containers(reader: &mut MessageReader) -> Decoded<ListedContainers> {
    let mut s = CodedInputStream::from_buf_read(reader);
    decode_containers(&mut s)
}

/// `ListPodSandboxResponse { repeated PodSandbox items = 1; }`
fn decode_sandboxes(s: &mut CodedInputStream) -> Decoded<ListedSandboxes> {
    let mut items = Vec::new();
    for_each_field(s, |s, number, wire_type| match number {
        1 => {
            items.push(embedded(s, wire_type, decode_sandbox)?);
            Ok(())
        }
        _ => s.skip_field(wire_type),
    })?;
    Ok(ListedSandboxes(items))
}

/// `PodSandbox { id = 1; metadata = 2 { name = 1; uid = 2; namespace = 3 };
/// state = 3; created_at = 4; ... }`
fn decode_sandbox(s: &mut CodedInputStream) -> Decoded<ListedSandbox> {
    // proto3: an absent state is its zero value, SANDBOX_READY.
    let mut sandbox = ListedSandbox {
        ready: true,
        ..Default::default()
    };
    for_each_field(s, |s, number, wire_type| match number {
        1 => {
            sandbox.id = string(s, wire_type)?;
            Ok(())
        }
        2 => embedded(s, wire_type, |s| {
            for_each_field(s, |s, number, wire_type| match number {
                1 => {
                    sandbox.name = string(s, wire_type)?;
                    Ok(())
                }
                2 => {
                    sandbox.uid = string(s, wire_type)?;
                    Ok(())
                }
                3 => {
                    sandbox.namespace = string(s, wire_type)?;
                    Ok(())
                }
                _ => s.skip_field(wire_type),
            })
        }),
        3 => {
            sandbox.ready = varint(s, wire_type)? == 0;
            Ok(())
        }
        4 => {
            sandbox.created_at = varint(s, wire_type)? as i64;
            Ok(())
        }
        _ => s.skip_field(wire_type),
    })?;
    Ok(sandbox)
}

/// `ListContainersResponse { repeated Container containers = 1; }`
fn decode_containers(s: &mut CodedInputStream) -> Decoded<ListedContainers> {
    let mut items = Vec::new();
    // One buffer for every label key: only the pod's three keep their value.
    let mut key = String::new();
    for_each_field(s, |s, number, wire_type| match number {
        1 => {
            items.push(embedded(s, wire_type, |s| decode_container(s, &mut key))?);
            Ok(())
        }
        _ => s.skip_field(wire_type),
    })?;
    Ok(ListedContainers(items))
}

/// `Container { id = 1; metadata = 3 { name = 1 }; state = 6; labels = 8; ... }`
fn decode_container(s: &mut CodedInputStream, key: &mut String) -> Decoded<ListedContainer> {
    let mut container = ListedContainer::default();
    for_each_field(s, |s, number, wire_type| match number {
        1 => {
            container.id = string(s, wire_type)?;
            Ok(())
        }
        3 => embedded(s, wire_type, |s| {
            for_each_field(s, |s, number, wire_type| match number {
                1 => {
                    container.name = string(s, wire_type)?;
                    Ok(())
                }
                _ => s.skip_field(wire_type),
            })
        }),
        6 => {
            let state = varint(s, wire_type)? as i32;
            container.state =
                protobuf::Enum::from_i32(state).unwrap_or(pb::ContainerState::CONTAINER_UNKNOWN);
            Ok(())
        }
        8 => embedded(s, wire_type, |s| label(s, key, &mut container)),
        _ => s.skip_field(wire_type),
    })?;
    Ok(container)
}

/// One `labels` map entry (`key = 1; value = 2;`): kept when it names the pod.
fn label(
    s: &mut CodedInputStream,
    key: &mut String,
    container: &mut ListedContainer,
) -> Decoded<()> {
    key.clear();
    let mut value = None;
    for_each_field(s, |s, number, wire_type| match number {
        1 => typed(s, wire_type, WireType::LengthDelimited, |s| {
            s.read_string_into(key)
        }),
        2 if key.is_empty() => {
            // The value came before its key (legal, never seen): keep it for now.
            value = Some(string(s, wire_type)?);
            Ok(())
        }
        2 => {
            if [POD_UID_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL].contains(&key.as_str()) {
                value = Some(string(s, wire_type)?);
                Ok(())
            } else {
                s.skip_field(wire_type)
            }
        }
        _ => s.skip_field(wire_type),
    })?;
    let slot = match key.as_str() {
        POD_UID_LABEL => &mut container.pod_uid,
        POD_NAME_LABEL => &mut container.pod_name,
        POD_NAMESPACE_LABEL => &mut container.pod_namespace,
        _ => return Ok(()),
    };
    *slot = Some(value.unwrap_or_default());
    Ok(())
}

#[cfg(test)]
mod tests;
