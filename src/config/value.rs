//! The values of settings: how a setting is written on the command line and in the
//! config file ([`Kind`]), and the Rust types [`super::Flags`] keeps them as
//! ([`SettingValue`]). Pure: no I/O.
//!
//! Every value travels as JSON, the form upstream's kubelet decodes its config file
//! from: a flag's text becomes the JSON its config field would hold
//! ([`Kind::from_flag`]), the config file is checked against the same shape
//! ([`Kind::check`], Go's decoder's refusals), and a [`SettingValue`] decodes the JSON
//! into its Rust type and encodes it back for `/configz`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Number, Value};

use crate::api::node::Taint;

/// Why a value is not a value of its setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("{value} is not {expected}")]
    Type {
        value: String,
        expected: &'static str,
    },
    #[error("strconv.ParseBool: parsing {0:?}: invalid syntax")]
    Bool(String),
    #[error("strconv.ParseInt: parsing {0:?}: invalid syntax")]
    Int(String),
    #[error("{0:?} is not a number")]
    Float(String),
    #[error("invalid duration {text:?}: {why}")]
    Duration { text: String, why: String },
    #[error("malformed pair {item:?}, expect key{sep}value")]
    Pair { item: String, sep: char },
    #[error("invalid value of {name}: {value}, {source}")]
    Gate {
        name: String,
        value: String,
        source: Box<ValueError>,
    },
    #[error("{value} is out of range ({min} to {max})")]
    Range {
        value: i64,
        min: String,
        max: String,
    },
    #[error("{value} must be at least {min}")]
    AtLeast { value: i64, min: i64 },
    #[error("{0} is not a percentage within 0 and 100")]
    Percent(u8),
    #[error("{0:?} must be within 3s and 300s")]
    Interval(Duration),
    #[error("{0:?} is not an IP address")]
    Ip(String),
    /// The owning module's parser refuses it (its words).
    #[error("{0}")]
    Refused(String),
}

impl ValueError {
    /// A refusal by another module's parser.
    pub fn refused(e: impl std::fmt::Display) -> ValueError {
        ValueError::Refused(e.to_string())
    }

    fn wrong_type(json: &Value, expected: &'static str) -> ValueError {
        ValueError::Type {
            value: short(json),
            expected,
        }
    }
}

/// The shape of a setting's value, as upstream's flag type and config field type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Go `bool`; a bare `--flag` is true.
    Bool,
    /// Go integer (`int32`, `int64`).
    Int,
    /// Go `float64`.
    Float,
    /// Go `string`: paths, addresses, names, quantities.
    Str,
    /// `metav1.Duration`: a Go duration string (`1m30s`).
    Duration,
    /// `[]string`; the flag is comma separated and repeats append.
    List,
    /// `map[string]string`; the flag is `key<sep>value,...` and repeats add keys.
    Map(char),
    /// `map[string]bool` (feature gates): `Name=true,...`.
    Gates,
    /// `[]v1.Taint`: `key=value:Effect,...` on the command line.
    Taints,
    /// `map[string][]string` (HTTP headers): `Name:value,...`; a name may repeat and
    /// its values add up, as do repeats of the flag.
    Headers,
    /// A structured field (an object or a list of objects); on the command line (when
    /// it has a flag at all) the text is kept as it is.
    Object,
}

/// What the command-line parser needs to know of a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Takes no value unless given as `--flag=value` (pflag's bool).
    Bool,
    /// Takes one value; a repeat replaces it.
    Value,
    /// Takes one value; repeats accumulate (lists and maps).
    Repeated,
}

impl Kind {
    /// How the flag of this kind is parsed.
    pub fn shape(self) -> Shape {
        match self {
            Kind::Bool => Shape::Bool,
            Kind::List | Kind::Map(_) | Kind::Gates | Kind::Taints | Kind::Headers => {
                Shape::Repeated
            }
            _ => Shape::Value,
        }
    }

    /// The type word of help texts, as upstream's `--help` prints it.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::Bool => "",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Str | Kind::Object => "string",
            Kind::Duration => "duration",
            Kind::List => "strings",
            Kind::Map(_) => "mapStringString",
            Kind::Gates => "mapStringBool",
            Kind::Taints => "[]v1.Taint",
            Kind::Headers => "colonSeparatedMultimapStringString",
        }
    }

    /// The JSON of flag text `text`; `before` is what earlier uses of the same flag
    /// made (lists append to it, maps add to it), as pflag's value types do.
    pub fn from_flag(self, text: &str, before: Option<&Value>) -> Result<Value, ValueError> {
        match self {
            Kind::Bool => go_bool(text).map(Value::Bool),
            Kind::Int => go_int(text).map(Value::from),
            Kind::Float => text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| ValueError::Float(text.to_owned())),
            Kind::Duration => go_duration(text).map(|_| Value::String(text.to_owned())),
            Kind::Str | Kind::Object => Ok(Value::String(text.to_owned())),
            Kind::List => {
                let mut list = before
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                list.extend(comma_items(text).map(|s| Value::String(s.to_owned())));
                Ok(Value::Array(list))
            }
            Kind::Map(sep) => {
                let mut map = object(before);
                for item in comma_items(text) {
                    let (k, v) = item.split_once(sep).ok_or_else(|| ValueError::Pair {
                        item: item.to_owned(),
                        sep,
                    })?;
                    map.insert(k.trim().to_owned(), Value::String(v.trim().to_owned()));
                }
                Ok(Value::Object(map))
            }
            Kind::Gates => {
                let mut map = object(before);
                for item in comma_items(text) {
                    let (k, v) = item.split_once('=').ok_or_else(|| ValueError::Pair {
                        item: item.to_owned(),
                        sep: '=',
                    })?;
                    let on = go_bool(v.trim()).map_err(|e| ValueError::Gate {
                        name: k.trim().to_owned(),
                        value: v.trim().to_owned(),
                        source: Box::new(e),
                    })?;
                    map.insert(k.trim().to_owned(), Value::Bool(on));
                }
                Ok(Value::Object(map))
            }
            Kind::Headers => {
                let mut map = object(before);
                for item in comma_items(text) {
                    let (k, v) = item.split_once(':').ok_or_else(|| ValueError::Pair {
                        item: item.to_owned(),
                        sep: ':',
                    })?;
                    let values = map
                        .entry(k.trim().to_owned())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(values) = values {
                        values.push(Value::String(v.trim().to_owned()));
                    }
                }
                Ok(Value::Object(map))
            }
            Kind::Taints => {
                let mut list = before
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let taints =
                    crate::node::config::parse_taints(text).map_err(ValueError::refused)?;
                list.extend(taints.iter().map(taint_json));
                Ok(Value::Array(list))
            }
        }
    }

    /// Whether `value` from the config file has this kind's JSON type (upstream's
    /// decoder refuses the file otherwise). Null is always accepted (absent).
    pub fn check(self, value: &Value) -> Result<(), ValueError> {
        let ok = match (self, value) {
            (_, Value::Null) | (Kind::Object, _) => true,
            (Kind::Bool, Value::Bool(_)) => true,
            (Kind::Int, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Kind::Float, Value::Number(_)) => true,
            (Kind::Str, Value::String(_)) => true,
            (Kind::Duration, Value::String(s)) => return go_duration(s).map(|_| ()),
            (Kind::List, Value::Array(items)) => items.iter().all(Value::is_string),
            (Kind::Map(_), Value::Object(map)) => {
                map.values().all(|v| v.is_string() || v.is_null())
            }
            (Kind::Gates, Value::Object(map)) => map.values().all(Value::is_boolean),
            (Kind::Taints, Value::Array(items)) => items.iter().all(Value::is_object),
            (Kind::Headers, Value::Object(map)) => map
                .values()
                .all(|v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string))),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(ValueError::wrong_type(value, self.json_name()))
        }
    }

    fn json_name(self) -> &'static str {
        match self {
            Kind::Bool => "a boolean",
            Kind::Int => "an integer",
            Kind::Float => "a number",
            Kind::Str => "a string",
            Kind::Duration => "a duration",
            Kind::List => "a list of strings",
            Kind::Map(_) => "a map of strings",
            Kind::Gates => "a map of feature names to booleans",
            Kind::Taints => "a list of taints",
            Kind::Headers => "a map of header names to lists of values",
            Kind::Object => "an object",
        }
    }

    /// Whether two values of this kind mean the same (`0s` and `0`, `1` and `1.0`,
    /// an empty list or map and null).
    pub fn same(self, a: &Value, b: &Value) -> bool {
        let empty = |v: &Value| match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        match (self, a, b) {
            (Kind::Duration, Value::String(x), Value::String(y)) => {
                go_duration(x).ok() == go_duration(y).ok()
            }
            (Kind::Int | Kind::Float, Value::Number(x), Value::Number(y)) => {
                x.as_f64() == y.as_f64()
            }
            _ if empty(a) && empty(b) => true,
            _ => a == b,
        }
    }

    /// Whether a config-file value of this kind is its Go zero value, which upstream's
    /// defaulting reads as "not set" for fields that are not pointers.
    pub fn is_zero(self, value: &Value) -> bool {
        match value {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) if self == Kind::Duration => go_duration(s).ok() == Some(0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
        }
    }
}

fn object(before: Option<&Value>) -> Map<String, Value> {
    before
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The non-empty items of a comma-separated flag value.
fn comma_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A value shortened for messages.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(text: &str) -> Result<bool, ValueError> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(ValueError::Bool(text.to_owned())),
    }
}

/// Go's `strconv.ParseInt(text, 0, 64)`: decimal, or `0x`/`0o`/`0b` prefixed.
pub fn go_int(text: &str) -> Result<i64, ValueError> {
    let bad = || ValueError::Int(text.to_owned());
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let digits = digits.replace('_', "");
    let (radix, digits) = match digits.get(..2) {
        Some("0x" | "0X") => (16, &digits[2..]),
        Some("0o" | "0O") => (8, &digits[2..]),
        Some("0b" | "0B") => (2, &digits[2..]),
        // Base 0: a leading zero is octal (`010` is 8).
        _ if digits.len() > 1 && digits.starts_with('0') => (8, &digits[1..]),
        _ => (10, digits.as_str()),
    };
    let n = i64::from_str_radix(digits, radix).map_err(|_| bad())?;
    Ok(if negative { -n } else { n })
}

/// Go's `time.ParseDuration` in nanoseconds (`2m0s`, `1h30m`, `-1s`, `500ms`, `0`).
pub fn go_duration(text: &str) -> Result<i128, ValueError> {
    let bad = |why: &str| ValueError::Duration {
        text: text.to_owned(),
        why: why.to_owned(),
    };
    let (sign, mut rest) = match text.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("missing unit"))?;
        if digits == 0 || &rest[..digits] == "." {
            return Err(bad("expected a number"));
        }
        let number: f64 = rest[..digits].parse().map_err(|_| bad("bad number"))?;
        let unit_len = rest[digits..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - digits);
        let nanos = match &rest[digits..digits + unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        total += number * nanos;
        rest = &rest[digits + unit_len..];
    }
    Ok(sign * total.round() as i128)
}

/// A Go duration that must not be negative, as a [`Duration`].
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let nanos = go_duration(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| ValueError::Duration {
            text: text.to_owned(),
            why: "must not be negative".to_owned(),
        })
}

/// Go's `time.Duration.String()`, which upstream's `metav1.Duration` marshals to
/// (`10s`, `1m0s`, `1h0m0s`, `500ms`, `0s`).
pub fn go_duration_string(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let nanos = d.as_nanos();
    let trim = |x: f64| {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim(nanos as f64 / 1e3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim(nanos as f64 / 1e6));
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let frac = d.subsec_nanos();
    let s = if frac == 0 {
        s.to_string()
    } else {
        let digits = format!("{frac:09}");
        format!("{s}.{}", digits.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// A taint as the config file writes it.
pub fn taint_json(t: &Taint) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// A Rust type a setting is kept as in [`super::Flags`]: decoded from the JSON of
/// the flag or config field, encoded back for `/configz`.
pub trait SettingValue: Sized {
    /// The kind of setting this type usually is (a setting may say otherwise).
    const KIND: Kind;
    /// The value of `json` (never null: null means the setting is absent).
    fn decode(json: &Value) -> Result<Self, ValueError>;
    fn encode(&self) -> Value;
}

impl SettingValue for bool {
    const KIND: Kind = Kind::Bool;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        json.as_bool()
            .ok_or_else(|| ValueError::wrong_type(json, "a boolean"))
    }
    fn encode(&self) -> Value {
        Value::Bool(*self)
    }
}

/// Integers within their type's range.
macro_rules! int_setting {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            const KIND: Kind = Kind::Int;
            fn decode(json: &Value) -> Result<Self, ValueError> {
                let n = json.as_i64().ok_or_else(|| ValueError::wrong_type(json, "an integer"))?;
                <$t>::try_from(n).map_err(|_| ValueError::Range {
                    value: n,
                    min: <$t>::MIN.to_string(),
                    max: <$t>::MAX.to_string(),
                })
            }
            fn encode(&self) -> Value {
                Value::from(*self)
            }
        }
    )*};
}
int_setting!(u8, u16, u32, i32, i64, usize);

impl SettingValue for f32 {
    const KIND: Kind = Kind::Float;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        json.as_f64()
            .filter(|f| f.is_finite())
            .map(|f| f as f32)
            .ok_or_else(|| ValueError::wrong_type(json, "a number"))
    }
    fn encode(&self) -> Value {
        Number::from_f64(f64::from(*self))
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

fn string(json: &Value) -> Result<&str, ValueError> {
    json.as_str()
        .ok_or_else(|| ValueError::wrong_type(json, "a string"))
}

impl SettingValue for String {
    const KIND: Kind = Kind::Str;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        string(json).map(str::to_owned)
    }
    fn encode(&self) -> Value {
        Value::String(self.clone())
    }
}

impl SettingValue for PathBuf {
    const KIND: Kind = Kind::Str;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        string(json).map(PathBuf::from)
    }
    fn encode(&self) -> Value {
        Value::String(self.display().to_string())
    }
}

impl SettingValue for IpAddr {
    const KIND: Kind = Kind::Str;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        let text = string(json)?;
        text.trim()
            .parse()
            .map_err(|_| ValueError::Ip(text.to_owned()))
    }
    fn encode(&self) -> Value {
        Value::String(self.to_string())
    }
}

impl SettingValue for Duration {
    const KIND: Kind = Kind::Duration;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        parse_duration(string(json)?)
    }
    fn encode(&self) -> Value {
        Value::String(go_duration_string(*self))
    }
}

impl SettingValue for Vec<String> {
    const KIND: Kind = Kind::List;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        let items = json
            .as_array()
            .ok_or_else(|| ValueError::wrong_type(json, "a list"))?;
        items.iter().map(|v| string(v).map(str::to_owned)).collect()
    }
    fn encode(&self) -> Value {
        Value::Array(self.iter().cloned().map(Value::String).collect())
    }
}

/// Optional strings and paths: the empty string (Go's zero value) is none.
impl<T: SettingValue> SettingValue for Option<T> {
    const KIND: Kind = T::KIND;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        match json {
            Value::String(s) if s.is_empty() => Ok(None),
            other => T::decode(other).map(Some),
        }
    }
    fn encode(&self) -> Value {
        match self {
            Some(v) => v.encode(),
            None => match T::KIND {
                Kind::Str | Kind::Duration => Value::String(String::new()),
                _ => Value::Null,
            },
        }
    }
}

impl SettingValue for BTreeMap<String, String> {
    const KIND: Kind = Kind::Map('=');
    fn decode(json: &Value) -> Result<Self, ValueError> {
        let map = json
            .as_object()
            .ok_or_else(|| ValueError::wrong_type(json, "a map"))?;
        map.iter()
            .map(|(k, v)| Ok((k.clone(), string(v)?.to_owned())))
            .collect()
    }
    fn encode(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    }
}

impl SettingValue for BTreeMap<String, bool> {
    const KIND: Kind = Kind::Gates;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        let map = json
            .as_object()
            .ok_or_else(|| ValueError::wrong_type(json, "a map"))?;
        map.iter()
            .map(|(k, v)| Ok((k.clone(), bool::decode(v)?)))
            .collect()
    }
    fn encode(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(k, v)| (k.clone(), Value::Bool(*v)))
                .collect(),
        )
    }
}

impl SettingValue for Vec<Taint> {
    const KIND: Kind = Kind::Taints;
    fn decode(json: &Value) -> Result<Self, ValueError> {
        let taints: Vec<Taint> =
            serde_json::from_value(json.clone()).map_err(ValueError::refused)?;
        // Checked as the flag is: names, effects, duplicates.
        let text: Vec<String> = taints
            .iter()
            .map(|t| match &t.value {
                Some(v) => format!("{}={v}:{}", t.key, t.effect),
                None => format!("{}:{}", t.key, t.effect),
            })
            .collect();
        crate::node::config::parse_taints(&text.join(",")).map_err(ValueError::refused)
    }
    fn encode(&self) -> Value {
        Value::Array(self.iter().map(taint_json).collect())
    }
}

/// An enum setting written as one of its names (`FromStr` and `as_str`).
#[macro_export]
#[doc(hidden)]
macro_rules! named_setting {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::config::value::SettingValue for $t {
            const KIND: $crate::config::value::Kind = $crate::config::value::Kind::Str;
            fn decode(json: &serde_json::Value) -> Result<Self, $crate::config::value::ValueError> {
                let text = json.as_str().ok_or_else(|| {
                    $crate::config::value::ValueError::Type {
                        value: $crate::config::value::short(json),
                        expected: "a string",
                    }
                })?;
                text.parse::<$t>().map_err($crate::config::value::ValueError::refused)
            }
            fn encode(&self) -> serde_json::Value {
                serde_json::Value::String(self.as_str().to_owned())
            }
        }
    )*};
}

/// `key<sep>value,...`: a map as its flag's text, for parsers that read the text.
pub fn pairs_text(map: &BTreeMap<String, String>, sep: char) -> String {
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
    items.join(",")
}

#[cfg(test)]
mod tests;
