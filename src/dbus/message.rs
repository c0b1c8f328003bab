//! D-Bus messages: the header fields, building a message into bytes, and parsing
//! one back in two steps: the header first ([`decode_header`]), so that the
//! connection can judge a message by its sender, path, interface and member, and
//! only then the body ([`Body::decode`]), within a budget of accounted bytes. No I/O.

use std::os::fd::OwnedFd;

use super::marshal::{Decoder, Encoder};
use super::value::{parse_signature, Type, Value};
use super::DbusError;

/// The largest message the spec allows (128 MiB).
pub const MAX_MESSAGE: usize = 128 << 20;

/// The four kinds of message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    MethodCall,
    MethodReturn,
    Error,
    Signal,
}

impl MessageKind {
    fn code(self) -> u8 {
        match self {
            MessageKind::MethodCall => 1,
            MessageKind::MethodReturn => 2,
            MessageKind::Error => 3,
            MessageKind::Signal => 4,
        }
    }
}

/// Header flag: the caller does not want a reply.
pub const FLAG_NO_REPLY_EXPECTED: u8 = 0x1;

/// A message, sent or received. `fds` are the file descriptors the message carries;
/// `Value::UnixFd(i)` in the body refers to `fds[i]`.
#[derive(Debug)]
pub struct Message {
    pub kind: MessageKind,
    pub flags: u8,
    pub serial: u32,
    pub reply_serial: Option<u32>,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    pub body: Vec<Value>,
    pub fds: Vec<Option<OwnedFd>>,
}

impl Message {
    /// A method call to `member` of `interface` on `path` of `destination`.
    pub fn method_call(destination: &str, path: &str, interface: &str, member: &str) -> Self {
        let mut m = Message::empty(MessageKind::MethodCall);
        m.destination = Some(destination.to_owned());
        m.path = Some(path.to_owned());
        m.interface = Some(interface.to_owned());
        m.member = Some(member.to_owned());
        m
    }

    /// A signal `member` of `interface`, emitted from `path`.
    pub fn signal(path: &str, interface: &str, member: &str) -> Self {
        let mut m = Message::empty(MessageKind::Signal);
        m.path = Some(path.to_owned());
        m.interface = Some(interface.to_owned());
        m.member = Some(member.to_owned());
        m
    }

    /// The successful reply to `call`.
    pub fn method_return(call: &Message) -> Self {
        let mut m = Message::empty(MessageKind::MethodReturn);
        m.reply_serial = Some(call.serial);
        m.destination = call.sender.clone();
        m
    }

    /// The error reply `name` to `call`, with a human message.
    pub fn error(call: &Message, name: &str, text: &str) -> Self {
        let mut m = Message::empty(MessageKind::Error);
        m.reply_serial = Some(call.serial);
        m.destination = call.sender.clone();
        m.error_name = Some(name.to_owned());
        m.body.push(Value::str(text));
        m
    }

    fn empty(kind: MessageKind) -> Self {
        Message {
            kind,
            flags: 0,
            serial: 0,
            reply_serial: None,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            destination: None,
            sender: None,
            body: Vec::new(),
            fds: Vec::new(),
        }
    }

    /// Appends an argument.
    pub fn arg(mut self, v: Value) -> Self {
        self.body.push(v);
        self
    }

    /// Attaches a file descriptor, and appends the `h` argument that refers to it.
    pub fn fd_arg(mut self, fd: OwnedFd) -> Self {
        let index = self.fds.len() as u32;
        self.fds.push(Some(fd));
        self.body.push(Value::UnixFd(index));
        self
    }

    /// The body's signature.
    pub fn signature(&self) -> String {
        self.body.iter().map(Value::signature).collect()
    }

    /// Takes the file descriptor an `h` argument refers to (once).
    pub fn take_fd(&mut self, value: &Value) -> Result<OwnedFd, DbusError> {
        let index = value.as_fd_index()?;
        self.fds
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or_else(|| DbusError::Protocol(format!("message has no file descriptor {index}")))
    }

    /// The error's human text (first string argument), for error replies.
    pub fn error_text(&self) -> String {
        match self.body.first() {
            Some(Value::Str(s)) => s.clone(),
            _ => String::new(),
        }
    }

    /// The bytes of this message with `serial`.
    pub fn encode(&self, serial: u32) -> Result<Vec<u8>, DbusError> {
        let mut body = Encoder::default();
        for v in &self.body {
            body.value(v)?;
        }
        let mut fields = Vec::new();
        let mut field = |code: u8, v: Value| {
            fields.push(Value::Struct(vec![Value::Byte(code), Value::variant(v)]));
        };
        if let Some(p) = &self.path {
            field(1, Value::ObjectPath(p.clone()));
        }
        if let Some(i) = &self.interface {
            field(2, Value::str(i.clone()));
        }
        if let Some(m) = &self.member {
            field(3, Value::str(m.clone()));
        }
        if let Some(e) = &self.error_name {
            field(4, Value::str(e.clone()));
        }
        if let Some(r) = self.reply_serial {
            field(5, Value::U32(r));
        }
        if let Some(d) = &self.destination {
            field(6, Value::str(d.clone()));
        }
        if let Some(s) = &self.sender {
            field(7, Value::str(s.clone()));
        }
        let sig = self.signature();
        if !sig.is_empty() {
            field(8, Value::Signature(sig));
        }
        if !self.fds.is_empty() {
            field(9, Value::U32(self.fds.len() as u32));
        }
        let body_len = u32::try_from(body.buf.len())
            .map_err(|_| DbusError::Protocol("body longer than 4 GiB".into()))?;
        let mut out = Encoder::default();
        out.buf
            .extend_from_slice(&[b'l', self.kind.code(), self.flags, 1]);
        out.buf.extend_from_slice(&body_len.to_le_bytes());
        out.buf.extend_from_slice(&serial.to_le_bytes());
        out.value(&Value::array("(yv)", fields))?;
        while out.buf.len() % 8 != 0 {
            out.buf.push(0);
        }
        out.buf.extend_from_slice(&body.buf);
        if out.buf.len() > MAX_MESSAGE {
            return Err(DbusError::Protocol(format!(
                "message of {} bytes",
                out.buf.len()
            )));
        }
        Ok(out.buf)
    }
}

/// The whole length of the message whose first 16 bytes are `head`.
pub fn message_len(head: &[u8; 16]) -> Result<usize, DbusError> {
    let len = header_len(head)? + fixed_word(head, 4)?;
    if len > MAX_MESSAGE {
        return Err(DbusError::Protocol(format!("message of {len} bytes")));
    }
    Ok(len)
}

/// The length of the header (fixed part, fields and padding) of the message whose
/// first 16 bytes are `head`: where its body starts.
pub fn header_len(head: &[u8; 16]) -> Result<usize, DbusError> {
    Ok((16 + fixed_word(head, 12)?).next_multiple_of(8))
}

/// The u32 at `at` of the fixed header, in the message's byte order.
fn fixed_word(head: &[u8; 16], at: usize) -> Result<usize, DbusError> {
    let mut b = [head[at], head[at + 1], head[at + 2], head[at + 3]];
    if endianness(head[0])? {
        b.reverse();
    }
    Ok(u32::from_le_bytes(b) as usize)
}

fn endianness(b: u8) -> Result<bool, DbusError> {
    match b {
        b'l' => Ok(false),
        b'B' => Ok(true),
        other => Err(DbusError::Protocol(format!("byte order mark {other:#x}"))),
    }
}

/// The body of a message whose header has been read: where it lies, its signature
/// and how many file descriptors the message announces.
#[derive(Debug)]
pub struct Body {
    pub signature: String,
    pub unix_fds: usize,
    big_endian: bool,
    start: usize,
    len: usize,
}

impl Body {
    /// Decodes the body from the message's bytes: the values, and what they are
    /// accounted at (refused past `budget`).
    pub fn decode(&self, buf: &[u8], budget: usize) -> Result<(Vec<Value>, usize), DbusError> {
        let end = self.start + self.len;
        if end > buf.len() {
            return Err(DbusError::Protocol("message shorter than its body".into()));
        }
        let mut body = Decoder::new(&buf[..end], self.start, self.big_endian, budget);
        let mut values = Vec::new();
        for t in parse_signature(&self.signature)? {
            values.push(body.value(&t)?);
        }
        if body.pos != end {
            return Err(DbusError::Protocol("body longer than its signature".into()));
        }
        Ok((values, body.cost))
    }
}

/// Parses a message's header: the message without its body, and where the body is.
/// `buf` holds at least the header; the header's values may take `budget` accounted
/// bytes.
pub fn decode_header(buf: &[u8], budget: usize) -> Result<(Message, Body), DbusError> {
    if buf.len() < 16 {
        return Err(DbusError::Protocol(
            "message shorter than its header".into(),
        ));
    }
    let big_endian = endianness(buf[0])?;
    let kind = match buf[1] {
        1 => MessageKind::MethodCall,
        2 => MessageKind::MethodReturn,
        3 => MessageKind::Error,
        4 => MessageKind::Signal,
        other => return Err(DbusError::Protocol(format!("message type {other}"))),
    };
    let mut m = Message::empty(kind);
    m.flags = buf[2];
    let mut d = Decoder::new(buf, 4, big_endian, budget);
    let body_len = d.u32()? as usize;
    m.serial = d.u32()?;
    let fields = d.value(&Type::Array(Box::new(Type::Struct(vec![
        Type::Byte,
        Type::Variant,
    ]))))?;
    let mut body = Body {
        signature: String::new(),
        unix_fds: 0,
        big_endian,
        start: 0,
        len: body_len,
    };
    for f in fields.as_array()? {
        let [code, v] = f.as_struct()? else {
            return Err(DbusError::Protocol("header field is not (yv)".into()));
        };
        let v = v.unvariant();
        match code {
            Value::Byte(1) => m.path = Some(v.as_str()?.to_owned()),
            Value::Byte(2) => m.interface = Some(v.as_str()?.to_owned()),
            Value::Byte(3) => m.member = Some(v.as_str()?.to_owned()),
            Value::Byte(4) => m.error_name = Some(v.as_str()?.to_owned()),
            Value::Byte(5) => m.reply_serial = Some(v.as_u64()? as u32),
            Value::Byte(6) => m.destination = Some(v.as_str()?.to_owned()),
            Value::Byte(7) => m.sender = Some(v.as_str()?.to_owned()),
            Value::Byte(8) => body.signature = v.as_str()?.to_owned(),
            Value::Byte(9) => body.unix_fds = v.as_u64()? as usize,
            _ => {} // unknown fields must be ignored
        }
    }
    // The header ends 8-aligned; the padding may be all the buffer lacks.
    body.start = d.pos.next_multiple_of(8);
    Ok((m, body))
}

/// Parses one whole message, and says how many file descriptors it announces. Its
/// values may take `budget` accounted bytes.
#[cfg(test)]
pub fn decode(buf: &[u8], budget: usize) -> Result<(Message, usize), DbusError> {
    let (mut m, body) = decode_header(buf, budget)?;
    let (values, _) = body.decode(buf, budget)?;
    m.body = values;
    Ok((m, body.unix_fds))
}
