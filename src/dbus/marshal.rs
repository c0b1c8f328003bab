//! The D-Bus wire format of values: an encoder (always little-endian) and a
//! decoder (either byte order, as the sender chose), with the spec's alignment
//! rules. Offsets are relative to the start of the message, so the body is encoded
//! in a buffer that starts 8-aligned.
//!
//! The decoder reads what a peer sent, so it is bounded twice: containers nest at
//! most [`MAX_DECODE_DEPTH`] deep in all (variants included, so a chain of variants
//! cannot start the count again), which keeps its recursion a few dozen frames deep
//! on any thread that reads the bus; and the values it builds are accounted (a
//! `Value` each, plus the bytes of strings and byte arrays) against a budget, so a
//! message cannot decode into more memory than the caller allows.

use super::value::{parse_signature, Type, Value};
use super::DbusError;

/// Largest array the spec allows (64 MiB).
const MAX_ARRAY_LEN: usize = 64 << 20;

/// Containers (arrays, structs, dict entries, variants) open at once while decoding:
/// the specification's 32 arrays plus 32 structs. Each costs one recursion of
/// `Decoder::value`; `tests.rs` decodes the deepest message on a thread with the
/// stack of the smallest thread that reads a bus.
pub const MAX_DECODE_DEPTH: u8 = 64;

/// What one decoded value is accounted at, besides the bytes it owns.
pub const VALUE_COST: usize = std::mem::size_of::<Value>();

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
            Value::Bytes(bytes) => {
                if bytes.len() > MAX_ARRAY_LEN {
                    return Err(DbusError::Protocol(format!(
                        "array of {} bytes",
                        bytes.len()
                    )));
                }
                self.u32_at(bytes.len() as u32);
                self.buf.extend_from_slice(bytes);
            }
            Value::Array { elem, items } => {
                // Parsed as the array's type: a dict entry is valid only there.
                let elem_type = match single_type(&format!("a{elem}"))? {
                    Type::Array(t) => t,
                    other => {
                        return Err(DbusError::Protocol(format!(
                            "array element signature {elem:?} parsed as {}",
                            other.signature()
                        )))
                    }
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

#[inline(never)]
fn overrun() -> DbusError {
    DbusError::Protocol("array elements overrun its length".into())
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
    /// Containers open around the value being read.
    depth: u8,
    /// Accounted bytes the values may still take.
    budget: usize,
    /// Accounted bytes of the values read so far.
    pub cost: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder whose values may take `budget` accounted bytes in all.
    pub fn new(buf: &'a [u8], pos: usize, big_endian: bool, budget: usize) -> Self {
        Decoder {
            buf,
            pos,
            big_endian,
            depth: 0,
            budget,
            cost: 0,
        }
    }

    fn short() -> DbusError {
        DbusError::Protocol("message shorter than its contents".into())
    }

    /// Accounts `bytes` more, or refuses once the budget is spent.
    fn charge(&mut self, bytes: usize) -> Result<(), DbusError> {
        self.cost = self.cost.saturating_add(bytes);
        if self.cost > self.budget {
            return Err(DbusError::TooLarge {
                what: "decoded message",
                size: self.cost,
                limit: self.budget,
            });
        }
        Ok(())
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
            .get(self.pos..self.pos.saturating_add(len).saturating_add(1))
            .ok_or_else(Self::short)?;
        self.charge(len)?;
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
        self.charge(VALUE_COST)?;
        match t {
            Type::Array(_) | Type::Struct(_) | Type::Variant | Type::DictEntry(..) => {
                self.enter()?;
                let value = self.container(t);
                self.depth -= 1;
                value
            }
            basic => self.basic(basic),
        }
    }

    /// Reads a value of a basic type (no recursion: kept out of the recursive path,
    /// whose frames stay small).
    #[inline(never)]
    fn basic(&mut self, t: &Type) -> Result<Value, DbusError> {
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
            container => {
                return Err(DbusError::Protocol(format!(
                    "{} is not a basic type",
                    container.signature()
                )))
            }
        })
    }

    /// Opens one more container, or refuses past [`MAX_DECODE_DEPTH`].
    #[inline(never)]
    fn enter(&mut self) -> Result<(), DbusError> {
        if self.depth >= MAX_DECODE_DEPTH {
            return Err(DbusError::Protocol(format!(
                "containers nested more than {MAX_DECODE_DEPTH} deep"
            )));
        }
        self.depth += 1;
        Ok(())
    }

    /// Reads a container: each kind in its own small function, since this is the
    /// path that recurses.
    fn container(&mut self, t: &Type) -> Result<Value, DbusError> {
        match t {
            Type::Array(elem) => self.array(elem),
            Type::Struct(fields) => self.fields(fields).map(Value::Struct),
            Type::Variant => self.variant().map(|v| Value::Variant(Box::new(v))),
            Type::DictEntry(k, v) => self.dict_entry(k, v),
            basic => self.basic(basic),
        }
    }

    fn fields(&mut self, fields: &[Type]) -> Result<Vec<Value>, DbusError> {
        self.align(8)?;
        let mut out = Vec::with_capacity(fields.len());
        for f in fields {
            out.push(self.value(f)?);
        }
        Ok(out)
    }

    fn dict_entry(&mut self, k: &Type, v: &Type) -> Result<Value, DbusError> {
        self.align(8)?;
        let key = self.value(k)?;
        let val = self.value(v)?;
        Ok(Value::DictEntry(Box::new(key), Box::new(val)))
    }

    fn variant(&mut self) -> Result<Value, DbusError> {
        let inner = self.variant_type()?;
        self.value(&inner)
    }

    /// The type a variant's signature names (out of the recursive path).
    #[inline(never)]
    fn variant_type(&mut self) -> Result<Type, DbusError> {
        let sig = self.sig()?;
        single_type(&sig)
    }

    fn array(&mut self, elem: &Type) -> Result<Value, DbusError> {
        let end = self.array_end(elem)?;
        if *elem == Type::Byte {
            return self.bytes(end);
        }
        let mut items = Vec::new();
        while self.pos < end {
            items.push(self.value(elem)?);
        }
        if self.pos != end {
            return Err(overrun());
        }
        Ok(Value::Array {
            elem: elem.signature(),
            items,
        })
    }

    /// Reads an array's length and aligns to its first element: where it ends.
    #[inline(never)]
    fn array_end(&mut self, elem: &Type) -> Result<usize, DbusError> {
        let len = self.u32()? as usize;
        if len > MAX_ARRAY_LEN {
            return Err(DbusError::Protocol(format!("array of {len} bytes")));
        }
        self.align(elem.alignment())?;
        let end = self.pos + len;
        if end > self.buf.len() {
            return Err(Self::short());
        }
        Ok(end)
    }

    /// An `ay` up to `end`, as one byte vector.
    #[inline(never)]
    fn bytes(&mut self, end: usize) -> Result<Value, DbusError> {
        self.charge(end - self.pos)?;
        let bytes = self.buf[self.pos..end].to_vec();
        self.pos = end;
        Ok(Value::Bytes(bytes))
    }
}
