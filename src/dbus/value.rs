//! D-Bus values and type signatures: the dynamic [`Value`] every argument and reply
//! is made of, and the parsed [`Type`] a signature string stands for. Pure data; the
//! wire format lives in `marshal`.
//!
//! A byte array (`ay`) is one [`Value::Bytes`], not a `Value` per byte: decoded, it
//! costs what it weighs on the wire. Signatures nest at most 32 arrays, 32 structs and
//! 32 dict entries deep, as the specification says.

use super::DbusError;

/// One D-Bus value. Containers keep enough type information to be marshalled even
/// when empty (an empty array still has an element signature).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `y`
    Byte(u8),
    /// `b`
    Bool(bool),
    /// `n`
    I16(i16),
    /// `q`
    U16(u16),
    /// `i`
    I32(i32),
    /// `u`
    U32(u32),
    /// `x`
    I64(i64),
    /// `t`
    U64(u64),
    /// `d`
    F64(f64),
    /// `s`
    Str(String),
    /// `o`
    ObjectPath(String),
    /// `g`
    Signature(String),
    /// `h`: an index into the message's file descriptors (see `Message::take_fd`).
    UnixFd(u32),
    /// `a…`: `elem` is the element signature (`{sv}` for a dictionary). A decoded
    /// `ay` is [`Value::Bytes`] instead.
    Array { elem: String, items: Vec<Value> },
    /// `ay`: a byte array, kept as bytes.
    Bytes(Vec<u8>),
    /// `(…)`
    Struct(Vec<Value>),
    /// `v`
    Variant(Box<Value>),
    /// `{kv}`: only as an array element.
    DictEntry(Box<Value>, Box<Value>),
}

impl Value {
    /// A string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    /// A variant holding `v`.
    pub fn variant(v: Value) -> Value {
        Value::Variant(Box::new(v))
    }

    /// An array of elements of signature `elem`.
    pub fn array(elem: &str, items: Vec<Value>) -> Value {
        Value::Array {
            elem: elem.to_owned(),
            items,
        }
    }

    /// An `a(sv)` property list, as systemd's StartTransientUnit and
    /// SetUnitProperties take.
    pub fn properties(props: Vec<(&str, Value)>) -> Value {
        let items = props
            .into_iter()
            .map(|(name, v)| Value::Struct(vec![Value::str(name), Value::variant(v)]))
            .collect();
        Value::array("(sv)", items)
    }

    /// An `a{sv}` dictionary.
    pub fn dict_sv(entries: Vec<(&str, Value)>) -> Value {
        let items = entries
            .into_iter()
            .map(|(k, v)| Value::DictEntry(Box::new(Value::str(k)), Box::new(Value::variant(v))))
            .collect();
        Value::array("{sv}", items)
    }

    /// The signature of this single value.
    pub fn signature(&self) -> String {
        let mut s = String::new();
        self.write_signature(&mut s);
        s
    }

    fn write_signature(&self, out: &mut String) {
        match self {
            Value::Byte(_) => out.push('y'),
            Value::Bool(_) => out.push('b'),
            Value::I16(_) => out.push('n'),
            Value::U16(_) => out.push('q'),
            Value::I32(_) => out.push('i'),
            Value::U32(_) => out.push('u'),
            Value::I64(_) => out.push('x'),
            Value::U64(_) => out.push('t'),
            Value::F64(_) => out.push('d'),
            Value::Str(_) => out.push('s'),
            Value::ObjectPath(_) => out.push('o'),
            Value::Signature(_) => out.push('g'),
            Value::UnixFd(_) => out.push('h'),
            Value::Array { elem, .. } => {
                out.push('a');
                out.push_str(elem);
            }
            Value::Bytes(_) => out.push_str("ay"),
            Value::Struct(fields) => {
                out.push('(');
                for f in fields {
                    f.write_signature(out);
                }
                out.push(')');
            }
            Value::Variant(_) => out.push('v'),
            Value::DictEntry(k, v) => {
                out.push('{');
                k.write_signature(out);
                v.write_signature(out);
                out.push('}');
            }
        }
    }

    /// The string inside `s`, `o` or `g`.
    pub fn as_str(&self) -> Result<&str, DbusError> {
        match self {
            Value::Str(s) | Value::ObjectPath(s) | Value::Signature(s) => Ok(s),
            other => Err(type_error("string", other)),
        }
    }

    /// An unsigned integer of any width (`y`, `q`, `u`, `t`).
    pub fn as_u64(&self) -> Result<u64, DbusError> {
        match self {
            Value::Byte(v) => Ok(u64::from(*v)),
            Value::U16(v) => Ok(u64::from(*v)),
            Value::U32(v) => Ok(u64::from(*v)),
            Value::U64(v) => Ok(*v),
            other => Err(type_error("unsigned integer", other)),
        }
    }

    /// A signed integer of any width (`n`, `i`, `x`).
    pub fn as_i64(&self) -> Result<i64, DbusError> {
        match self {
            Value::I16(v) => Ok(i64::from(*v)),
            Value::I32(v) => Ok(i64::from(*v)),
            Value::I64(v) => Ok(*v),
            other => Err(type_error("signed integer", other)),
        }
    }

    /// A boolean.
    pub fn as_bool(&self) -> Result<bool, DbusError> {
        match self {
            Value::Bool(b) => Ok(*b),
            other => Err(type_error("boolean", other)),
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Result<&[Value], DbusError> {
        match self {
            Value::Array { items, .. } => Ok(items),
            other => Err(type_error("array", other)),
        }
    }

    /// The bytes of an `ay`.
    pub fn as_bytes(&self) -> Result<&[u8], DbusError> {
        match self {
            Value::Bytes(bytes) => Ok(bytes),
            other => Err(type_error("byte array", other)),
        }
    }

    /// The fields of a struct.
    pub fn as_struct(&self) -> Result<&[Value], DbusError> {
        match self {
            Value::Struct(fields) => Ok(fields),
            other => Err(type_error("struct", other)),
        }
    }

    /// The value inside a variant (any other value is returned as it is).
    pub fn unvariant(&self) -> &Value {
        match self {
            Value::Variant(inner) => inner.unvariant(),
            other => other,
        }
    }

    /// The fd index of an `h`.
    pub fn as_fd_index(&self) -> Result<u32, DbusError> {
        match self {
            Value::UnixFd(i) => Ok(*i),
            other => Err(type_error("unix fd", other)),
        }
    }
}

fn type_error(expected: &'static str, got: &Value) -> DbusError {
    DbusError::Type {
        expected,
        got: got.signature(),
    }
}

/// A parsed single complete type.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    Byte,
    Bool,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F64,
    Str,
    ObjectPath,
    Signature,
    UnixFd,
    Array(Box<Type>),
    Struct(Vec<Type>),
    Variant,
    DictEntry(Box<Type>, Box<Type>),
}

impl Type {
    /// The wire alignment of values of this type.
    pub fn alignment(&self) -> usize {
        match self {
            Type::Byte | Type::Signature | Type::Variant => 1,
            Type::I16 | Type::U16 => 2,
            Type::Bool | Type::I32 | Type::U32 | Type::Str | Type::ObjectPath => 4,
            Type::UnixFd | Type::Array(_) => 4,
            Type::I64 | Type::U64 | Type::F64 | Type::Struct(_) | Type::DictEntry(..) => 8,
        }
    }

    /// The signature text of this type.
    pub fn signature(&self) -> String {
        match self {
            Type::Byte => "y".into(),
            Type::Bool => "b".into(),
            Type::I16 => "n".into(),
            Type::U16 => "q".into(),
            Type::I32 => "i".into(),
            Type::U32 => "u".into(),
            Type::I64 => "x".into(),
            Type::U64 => "t".into(),
            Type::F64 => "d".into(),
            Type::Str => "s".into(),
            Type::ObjectPath => "o".into(),
            Type::Signature => "g".into(),
            Type::UnixFd => "h".into(),
            Type::Array(e) => format!("a{}", e.signature()),
            Type::Struct(fields) => {
                let inner: String = fields.iter().map(Type::signature).collect();
                format!("({inner})")
            }
            Type::Variant => "v".into(),
            Type::DictEntry(k, v) => format!("{{{}{}}}", k.signature(), v.signature()),
        }
    }
}

/// Parses a signature into its complete types (a message body's signature may hold
/// several).
pub fn parse_signature(sig: &str) -> Result<Vec<Type>, DbusError> {
    let bytes = sig.as_bytes();
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        out.push(parse_one(sig, bytes, &mut at, Nesting::default())?);
    }
    Ok(out)
}

/// The specification's nesting limit for each kind of container in a signature.
pub const MAX_NESTING: u8 = 32;

/// How deep each kind of container is at a point of a signature.
#[derive(Clone, Copy, Default)]
struct Nesting {
    arrays: u8,
    structs: u8,
    dict_entries: u8,
}

fn parse_one(sig: &str, bytes: &[u8], at: &mut usize, depth: Nesting) -> Result<Type, DbusError> {
    let bad = || DbusError::Protocol(format!("bad signature {sig:?}"));
    let deeper = |count: u8| {
        if count >= MAX_NESTING {
            Err(DbusError::Protocol(format!(
                "signature {sig:?} nests too deep"
            )))
        } else {
            Ok(count + 1)
        }
    };
    let c = *bytes.get(*at).ok_or_else(bad)?;
    *at += 1;
    Ok(match c {
        b'y' => Type::Byte,
        b'b' => Type::Bool,
        b'n' => Type::I16,
        b'q' => Type::U16,
        b'i' => Type::I32,
        b'u' => Type::U32,
        b'x' => Type::I64,
        b't' => Type::U64,
        b'd' => Type::F64,
        b's' => Type::Str,
        b'o' => Type::ObjectPath,
        b'g' => Type::Signature,
        b'h' => Type::UnixFd,
        b'v' => Type::Variant,
        b'a' => {
            let depth = Nesting {
                arrays: deeper(depth.arrays)?,
                ..depth
            };
            if bytes.get(*at) == Some(&b'{') {
                *at += 1;
                let depth = Nesting {
                    dict_entries: deeper(depth.dict_entries)?,
                    ..depth
                };
                let k = parse_one(sig, bytes, at, depth)?;
                let v = parse_one(sig, bytes, at, depth)?;
                if bytes.get(*at) != Some(&b'}') {
                    return Err(bad());
                }
                *at += 1;
                Type::Array(Box::new(Type::DictEntry(Box::new(k), Box::new(v))))
            } else {
                Type::Array(Box::new(parse_one(sig, bytes, at, depth)?))
            }
        }
        b'(' => {
            let depth = Nesting {
                structs: deeper(depth.structs)?,
                ..depth
            };
            let mut fields = Vec::new();
            while bytes.get(*at) != Some(&b')') {
                if *at >= bytes.len() {
                    return Err(bad());
                }
                fields.push(parse_one(sig, bytes, at, depth)?);
            }
            *at += 1;
            if fields.is_empty() {
                return Err(bad());
            }
            Type::Struct(fields)
        }
        _ => return Err(bad()),
    })
}
