//! D-Bus server addresses (`unix:path=/run/dbus/system_bus_socket`,
//! `unix:abstract=/tmp/dbus-x,guid=…`, several separated by `;`): parse them and
//! connect to the first that answers. Only the unix transport, as a local bus has.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

use super::DbusError;

/// One place to connect to.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    Path(String),
    Abstract(Vec<u8>),
}

/// The unix targets of an address, in order; other transports are skipped.
pub fn parse(address: &str) -> Result<Vec<Target>, DbusError> {
    let mut out = Vec::new();
    for entry in address.split(';').filter(|e| !e.is_empty()) {
        let Some(params) = entry.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            let value = unescape(value).ok_or_else(|| DbusError::Address(address.to_owned()))?;
            match key {
                "path" => out.push(Target::Path(
                    String::from_utf8(value).map_err(|_| DbusError::Address(address.to_owned()))?,
                )),
                "abstract" => out.push(Target::Abstract(value)),
                _ => {}
            }
        }
    }
    if out.is_empty() {
        return Err(DbusError::Address(address.to_owned()));
    }
    Ok(out)
}

fn unescape(value: &str) -> Option<Vec<u8>> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Connects to the first target of `address` that accepts.
pub fn connect_address(address: &str) -> Result<UnixStream, DbusError> {
    let mut last = None;
    for target in parse(address)? {
        let result = match &target {
            Target::Path(p) => UnixStream::connect(p),
            Target::Abstract(name) => {
                SocketAddr::from_abstract_name(name).and_then(|a| UnixStream::connect_addr(&a))
            }
        };
        match result {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(DbusError::Connect {
        address: address.to_owned(),
        source: last.unwrap_or_else(|| std::io::Error::other("no unix address")),
    })
}
