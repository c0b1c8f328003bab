//! The D-Bus wire format of values: an encoder (always little-endian) and a
//! decoder (either byte order, as the sender chose), with the spec's alignment
//! rules. Offsets are relative to the start of the message, so the body is encoded
//! in a buffer that starts 8-aligned.

use super::value::{parse_signature, Type, Value};
use super::DbusError;

/// Largest array the spec allows (64 MiB).
const MAX_ARRAY_LEN: usize = 64 << 20;

/// Appends values to a buffer that starts at a message offset of 0 (mod 8).
#[derive(Default)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    fn pad(&mut self, align: usize) {
        while self.buf.len() % align != 0 {
            self.buf.push(0);
        }
    }

    fn u32_at(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<(), DbusError> {
        if s.contains('\0') {
            return Err(DbusError::Protocol(format!("string {s:?} holds a NUL")));
        }
        let len = u32::try_from(s.len())
            .map_err(|_| DbusError::Protocol("string longer than 4 GiB".into()))?;
        self.u32_at(len);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn sig(&mut self, s: &str) -> Result<(), DbusError> {
        let len = u8::try_from(s.len())
            .map_err(|_| DbusError::Protocol(format!("signature {s:?} longer than 255")))?;
        self.buf.push(len);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    /// Appends one value.
    pub fn value(&mut self, v: &Value) -> Result<(), DbusError> {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32_at(u32::from(*b)),
            Value::I16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::I32(n) => {
                self.pad(4);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U32(n) | Value::UnixFd(n) => self.u32_at(*n),
            Value::I64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::F64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::Str(s) | Value::ObjectPath(s) => self.string(s)?,
            Value::Signature(s) => self.sig(s)?,
            Value::Array { elem, items } => {
                // Parsed as the array's type: a dict entry is valid only there.
                let Type::Array(elem_type) = single_type(&format!("a{elem}"))? else {
                    unreachable!("a signature starting with 'a' parses as an array")
                };
                self.u32_at(0);
                let len_at = self.buf.len() - 4;
                // The padding to the first element is not part of the length.
                self.pad(elem_type.alignment());
                let start = self.buf.len();
                for item in items {
                    if item.signature() != *elem {
                        return Err(DbusError::Type {
                            expected: "array element of the array's signature",
                            got: item.signature(),
                        });
                    }
                    self.value(item)?;
                }
                let len = self.buf.len() - start;
                if len > MAX_ARRAY_LEN {
                    return Err(DbusError::Protocol(format!("array of {len} bytes")));
                }
                self.buf[len_at..len_at + 4].copy_from_slice(&(len as u32).to_le_bytes());
            }
            Value::Struct(fields) => {
                self.pad(8);
                for f in fields {
                    self.value(f)?;
                }
            }
            Value::Variant(inner) => {
                self.sig(&inner.signature())?;
                self.value(inner)?;
            }
            Value::DictEntry(k, v) => {
                self.pad(8);
                self.value(k)?;
                self.value(v)?;
            }
        }
        Ok(())
    }
}

fn single_type(sig: &str) -> Result<Type, DbusError> {
    let mut types = parse_signature(sig)?;
    match (types.pop(), types.is_empty()) {
        (Some(t), true) => Ok(t),
        _ => Err(DbusError::Protocol(format!(
            "{sig:?} is not a single complete type"
        ))),
    }
}

/// Reads values from a whole message buffer, starting at `pos`.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pub pos: usize,
    big_endian: bool,
    /// Variants nested inside each other so far (bounded: a peer must not be able to
    /// overflow our stack).
    variant_depth: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], pos: usize, big_endian: bool) -> Self {
        Decoder {
            buf,
            pos,
            big_endian,
            variant_depth: 0,
        }
    }

    fn short() -> DbusError {
        DbusError::Protocol("message shorter than its contents".into())
    }

    pub fn align(&mut self, align: usize) -> Result<(), DbusError> {
        let next = self.pos.next_multiple_of(align);
        if next > self.buf.len() {
            return Err(Self::short());
        }
        self.pos = next;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DbusError> {
        self.align(N)?;
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or_else(Self::short)?;
        self.pos += N;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        if self.big_endian {
            out.reverse();
        }
        Ok(out)
    }

    pub fn u32(&mut self) -> Result<u32, DbusError> {
        Ok(u32::from_le_bytes(self.take::<4>()?))
    }

    fn text(&mut self, len: usize) -> Result<String, DbusError> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + len + 1)
            .ok_or_else(Self::short)?;
        self.pos += len + 1;
        if bytes[len] != 0 {
            return Err(DbusError::Protocol("string without its NUL".into()));
        }
        String::from_utf8(bytes[..len].to_vec())
            .map_err(|_| DbusError::Protocol("string is not UTF-8".into()))
    }

    fn sig(&mut self) -> Result<String, DbusError> {
        let len = *self.buf.get(self.pos).ok_or_else(Self::short)?;
        self.pos += 1;
        self.text(usize::from(len))
    }

    /// Reads one value of type `t`.
    pub fn value(&mut self, t: &Type) -> Result<Value, DbusError> {
        Ok(match t {
            Type::Byte => {
                let b = *self.buf.get(self.pos).ok_or_else(Self::short)?;
                self.pos += 1;
                Value::Byte(b)
            }
            Type::Bool => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                n => return Err(DbusError::Protocol(format!("boolean {n}"))),
            },
            Type::I16 => Value::I16(i16::from_le_bytes(self.take::<2>()?)),
            Type::U16 => Value::U16(u16::from_le_bytes(self.take::<2>()?)),
            Type::I32 => Value::I32(i32::from_le_bytes(self.take::<4>()?)),
            Type::U32 => Value::U32(self.u32()?),
            Type::UnixFd => Value::UnixFd(self.u32()?),
            Type::I64 => Value::I64(i64::from_le_bytes(self.take::<8>()?)),
            Type::U64 => Value::U64(u64::from_le_bytes(self.take::<8>()?)),
            Type::F64 => Value::F64(f64::from_le_bytes(self.take::<8>()?)),
            Type::Str => {
                let len = self.u32()? as usize;
                Value::Str(self.text(len)?)
            }
            Type::ObjectPath => {
                let len = self.u32()? as usize;
                Value::ObjectPath(self.text(len)?)
            }
            Type::Signature => Value::Signature(self.sig()?),
            Type::Array(elem) => {
                let len = self.u32()? as usize;
                if len > MAX_ARRAY_LEN {
                    return Err(DbusError::Protocol(format!("array of {len} bytes")));
                }
                self.align(elem.alignment())?;
                let end = self.pos + len;
                if end > self.buf.len() {
                    return Err(Self::short());
                }
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value(elem)?);
                }
                if self.pos != end {
                    return Err(DbusError::Protocol(
                        "array elements overrun its length".into(),
                    ));
                }
                Value::Array {
                    elem: elem.signature(),
                    items,
                }
            }
            Type::Struct(fields) => {
                self.align(8)?;
                let mut out = Vec::with_capacity(fields.len());
                for f in fields {
                    out.push(self.value(f)?);
                }
                Value::Struct(out)
            }
            Type::Variant => {
                let sig = self.sig()?;
                let inner = single_type(&sig)?;
                if self.variant_depth >= 64 {
                    return Err(DbusError::Protocol("variants nested too deep".into()));
                }
                self.variant_depth += 1;
                let value = self.value(&inner);
                self.variant_depth -= 1;
                Value::Variant(Box::new(value?))
            }
            Type::DictEntry(k, v) => {
                self.align(8)?;
                let key = self.value(k)?;
                let val = self.value(v)?;
                Value::DictEntry(Box::new(key), Box::new(val))
            }
        })
    }
}
