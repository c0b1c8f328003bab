//! Object metadata shared by every Kubernetes API object: timestamps
//! (`Time`, `MicroTime`), `ObjectMeta`, `OwnerReference`, list wrappers,
//! watch events and the API server's `Status` error object.
//!
//! This module holds wire types only: it parses and formats JSON shapes and
//! performs no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, PrimitiveDateTime};

/// `skip_serializing_if` helper: true when a value equals its `Default`.
pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// `deserialize_with` helper: treats an explicit JSON `null` like a missing
/// field (Go decodes `null` into an empty slice/map/struct; serde would fail).
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Declares a string-valued API enum that never fails to decode: values this
/// code does not know are kept in `Other(String)` and written back verbatim.
/// `Default` is `Other("")`, the Go zero value.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value not known to this version, kept verbatim.
            Other(String),
        }

        impl $name {
            /// The wire string for this value.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Other(s) => s.as_str(),
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $value => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match s.as_str() {
                    $( $value => Self::$variant, )+
                    _ => Self::Other(s),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::Other(String::new())
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(Self::from(<String as ::serde::Deserialize>::deserialize(d)?))
            }
        }
    };
}
pub(crate) use string_enum;

// ---------------------------------------------------------------------------
// Timestamps
// ---------------------------------------------------------------------------

/// Error for a timestamp that is not valid RFC 3339.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid RFC 3339 timestamp {input:?}: {reason}")]
pub struct TimeParseError {
    input: String,
    reason: &'static str,
}

impl TimeParseError {
    /// Short description of what was wrong with the input.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

const NANOS_PER_SEC: i64 = 1_000_000_000;
const MICROS_PER_SEC: i64 = 1_000_000;

/// `secs` since the Unix epoch as a UTC date and time (the `time` crate does the
/// calendar); instants beyond its range (years -9999..=9999) are clamped to its ends.
pub(crate) fn utc_from_unix(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(secs).unwrap_or(if secs < 0 {
        PrimitiveDateTime::MIN.assume_utc()
    } else {
        PrimitiveDateTime::MAX.assume_utc()
    })
}

/// Parses an RFC 3339 time with up to nanosecond precision (as CRI log lines carry)
/// into nanoseconds since the Unix epoch.
pub fn parse_rfc3339_nanos(input: &str) -> Result<i128, TimeParseError> {
    parse_rfc3339(input).map(|(secs, nanos)| i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` into seconds since the
/// Unix epoch plus nanoseconds (fraction digits past the ninth are ignored), with the
/// `time` crate's RFC 3339 reader. Two things it takes are refused first, as Go's
/// RFC 3339 layout refuses them: a date/time separator other than `T` and the leap
/// second `:60`.
fn parse_rfc3339(input: &str) -> Result<(i64, u32), TimeParseError> {
    let err = |reason| TimeParseError {
        input: input.to_owned(),
        reason,
    };
    if input
        .as_bytes()
        .get(10)
        .is_some_and(|c| !matches!(c, b'T' | b't'))
    {
        return Err(err("expected 'T' between date and time"));
    }
    if input.get(17..19) == Some("60") {
        return Err(err("time of day out of range"));
    }
    let t = OffsetDateTime::parse(input, &Rfc3339).map_err(|e| err(parse_failure(&e)))?;
    Ok((t.unix_timestamp(), t.nanosecond()))
}

/// What was wrong, from the `time` crate's error.
fn parse_failure(e: &time::error::Parse) -> &'static str {
    use time::error::{Parse, ParseFromDescription, TryFromParsed};
    let field = match e {
        Parse::ParseFromDescription(ParseFromDescription::InvalidComponent(name)) => *name,
        Parse::TryFromParsed(TryFromParsed::ComponentRange(range)) => range.name(),
        _ => return "unexpected or trailing characters",
    };
    match field {
        "year" | "month" | "day" => "date out of range or not digits",
        "offset hour" | "offset minute" | "offset second" => {
            "bad time zone (Z or ±hh:mm, within 23:59)"
        }
        _ => "time of day out of range or not digits",
    }
}

/// Writes `secs` as `YYYY-MM-DDTHH:MM:SS`, then `.ffffff` when `micros` is given, then `Z`.
fn write_rfc3339(f: &mut fmt::Formatter<'_>, secs: i64, micros: Option<i64>) -> fmt::Result {
    let t = utc_from_unix(secs);
    write!(
        f,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )?;
    if let Some(us) = micros {
        write!(f, ".{us:06}")?;
    }
    f.write_str("Z")
}

/// The wire format only has four-digit years; refuse to write anything else.
fn check_year<E: serde::ser::Error>(secs: i64) -> Result<(), E> {
    match OffsetDateTime::from_unix_timestamp(secs).map(|t| t.year()) {
        Ok(year) if (0..=9999).contains(&year) => Ok(()),
        Ok(year) => Err(E::custom(format!("year {year} outside 0000..=9999"))),
        Err(_) => Err(E::custom(format!(
            "{secs} seconds since the epoch is outside years 0000..=9999"
        ))),
    }
}

/// Seconds and sub-second nanoseconds of a `SystemTime` relative to the epoch
/// (the seconds are floored, so nanoseconds are always non-negative).
fn split_system_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let secs = -(d.as_secs() as i64);
            match d.subsec_nanos() {
                0 => (secs, 0),
                n => (secs - 1, 1_000_000_000 - n),
            }
        }
    }
}

fn system_time_from(secs: i64, nanos: u32) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}

/// A UTC instant with whole-second precision, as `metav1.Time` is carried on
/// the wire (`2024-01-02T03:04:05Z`). Sub-second input is truncated, so a
/// value read back from the API compares equal to the one written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    secs: i64,
}

impl Time {
    /// The current time, truncated to seconds.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// Converts a `SystemTime`, truncating towards the past to whole seconds.
    pub fn from_system_time(t: SystemTime) -> Self {
        Self {
            secs: split_system_time(t).0,
        }
    }

    pub fn to_system_time(&self) -> SystemTime {
        system_time_from(self.secs, 0)
    }

    pub fn from_unix_seconds(secs: i64) -> Self {
        Self { secs }
    }

    pub fn unix_seconds(&self) -> i64 {
        self.secs
    }

    /// Parses RFC 3339 (`Z` or `±hh:mm` offset, optional fraction, which is dropped).
    pub fn parse(s: &str) -> Result<Self, TimeParseError> {
        parse_rfc3339(s).map(|(secs, _)| Self { secs })
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_rfc3339(f, self.secs, None)
    }
}

impl FromStr for Time {
    type Err = TimeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<SystemTime> for Time {
    fn from(t: SystemTime) -> Self {
        Self::from_system_time(t)
    }
}

impl From<MicroTime> for Time {
    fn from(t: MicroTime) -> Self {
        Self {
            secs: t.micros.div_euclid(MICROS_PER_SEC),
        }
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        check_year(self.secs)?;
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TimeVisitor(Time::parse))
    }
}

/// A UTC instant with microsecond precision (`metav1.MicroTime`), written
/// as `2024-01-02T03:04:05.123456Z`. Used by Lease and event timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MicroTime {
    micros: i64,
}

impl MicroTime {
    /// The current time, truncated to microseconds.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// Converts a `SystemTime`, truncating towards the past to whole microseconds.
    pub fn from_system_time(t: SystemTime) -> Self {
        let (secs, nanos) = split_system_time(t);
        Self {
            micros: secs * MICROS_PER_SEC + i64::from(nanos / 1000),
        }
    }

    pub fn to_system_time(&self) -> SystemTime {
        let secs = self.micros.div_euclid(MICROS_PER_SEC);
        let us = self.micros.rem_euclid(MICROS_PER_SEC);
        // `us` < 10^6, so the nanosecond value fits in u32.
        system_time_from(secs, (us * 1000) as u32)
    }

    pub fn from_unix_micros(micros: i64) -> Self {
        Self { micros }
    }

    pub fn unix_micros(&self) -> i64 {
        self.micros
    }

    /// Parses RFC 3339; fractional digits beyond microseconds are dropped.
    pub fn parse(s: &str) -> Result<Self, TimeParseError> {
        parse_rfc3339(s).map(|(secs, nanos)| Self {
            micros: secs * MICROS_PER_SEC + i64::from(nanos) / (NANOS_PER_SEC / MICROS_PER_SEC),
        })
    }
}

impl fmt::Display for MicroTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.micros.div_euclid(MICROS_PER_SEC);
        write_rfc3339(f, secs, Some(self.micros.rem_euclid(MICROS_PER_SEC)))
    }
}

impl FromStr for MicroTime {
    type Err = TimeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<SystemTime> for MicroTime {
    fn from(t: SystemTime) -> Self {
        Self::from_system_time(t)
    }
}

impl From<Time> for MicroTime {
    fn from(t: Time) -> Self {
        Self {
            micros: t.secs * MICROS_PER_SEC,
        }
    }
}

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        check_year(self.micros.div_euclid(MICROS_PER_SEC))?;
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MicroTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TimeVisitor(MicroTime::parse))
    }
}

struct TimeVisitor<F>(F);

impl<T, F: FnOnce(&str) -> Result<T, TimeParseError>> de::Visitor<'_> for TimeVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }
}

// ---------------------------------------------------------------------------
// Object metadata
// ---------------------------------------------------------------------------

/// Metadata every persisted object carries (`metav1.ObjectMeta`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Opaque version for optimistic concurrency; echo it back on update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Set by the API server when graceful deletion has been requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub annotations: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub finalizers: Vec<String>,
    /// Fields not modelled here (selfLink, ...), kept verbatim. `managedFields` is
    /// dropped on decoding: nothing here reads it, an update without it (the Lease
    /// PUT) keeps the server's entries, and its field trees were the largest part of
    /// every pod copy held per pod.
    #[serde(flatten, deserialize_with = "without_managed_fields")]
    pub extra: Map<String, Value>,
}

/// `deserialize_with` for [`ObjectMeta::extra`]: the unmodelled keys minus
/// `managedFields`.
fn without_managed_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    let mut extra = Map::deserialize(d)?;
    extra.remove("managedFields");
    Ok(extra)
}

impl ObjectMeta {
    /// Is this a later version of the object than `other`? resourceVersions are opaque
    /// by API convention, so only two that parse as numbers (etcd revisions, what
    /// kube-apiserver gives) are compared; anything else is not later.
    pub fn is_later_than(&self, other: &ObjectMeta) -> bool {
        let rv = |m: &ObjectMeta| m.resource_version.as_deref()?.parse::<u64>().ok();
        matches!((rv(self), rv(other)), (Some(a), Some(b)) if a > b)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

/// Points at an object that owns this one (garbage collection, controllers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Metadata of a list response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Token for fetching the next page of a chunked list.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
}

/// A list response (`PodList`, `NodeList`, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "T: Deserialize<'de>"))]
pub struct List<T> {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ListMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<T>,
}

string_enum! {
    /// The `type` of a watch event.
    pub enum WatchEventType {
        Added = "ADDED",
        Modified = "MODIFIED",
        Deleted = "DELETED",
        /// Only carries a new resourceVersion in the object's metadata.
        Bookmark = "BOOKMARK",
        /// The object is a [`Status`] describing the failure.
        Error = "ERROR",
    }
}

/// One line of a watch stream. The object is left undecoded because its
/// kind depends on the event type (a [`Status`] for `ERROR`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchEvent {
    #[serde(rename = "type")]
    pub type_: WatchEventType,
    pub object: Value,
}

impl WatchEvent {
    /// Decodes the carried object as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.object)
    }
}

/// Well-known `Status.reason` values.
pub const STATUS_REASON_NOT_FOUND: &str = "NotFound";
pub const STATUS_REASON_ALREADY_EXISTS: &str = "AlreadyExists";
pub const STATUS_REASON_CONFLICT: &str = "Conflict";
pub const STATUS_REASON_EXPIRED: &str = "Expired";
pub const STATUS_REASON_GONE: &str = "Gone";
pub const STATUS_REASON_FORBIDDEN: &str = "Forbidden";
pub const STATUS_REASON_UNAUTHORIZED: &str = "Unauthorized";
pub const STATUS_REASON_INVALID: &str = "Invalid";
pub const STATUS_REASON_TOO_MANY_REQUESTS: &str = "TooManyRequests";

/// The API server's result object for failures (and some successes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub metadata: ListMeta,
    /// "Success" or "Failure".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Machine-readable cause, see the `STATUS_REASON_*` constants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// HTTP status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

impl Status {
    fn has_reason(&self, reason: &str) -> bool {
        self.reason.as_deref() == Some(reason)
    }

    pub fn is_not_found(&self) -> bool {
        self.has_reason(STATUS_REASON_NOT_FOUND) || self.code == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.has_reason(STATUS_REASON_CONFLICT) || self.code == Some(409)
    }

    pub fn is_already_exists(&self) -> bool {
        self.has_reason(STATUS_REASON_ALREADY_EXISTS)
    }

    /// The watch/list resourceVersion is too old (HTTP 410).
    pub fn is_gone(&self) -> bool {
        self.has_reason(STATUS_REASON_EXPIRED)
            || self.has_reason(STATUS_REASON_GONE)
            || self.code == Some(410)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(code) = self.code {
            write!(f, "{code} ")?;
        }
        f.write_str(self.reason.as_deref().unwrap_or("Unknown"))?;
        if let Some(msg) = self.message.as_deref().filter(|m| !m.is_empty()) {
            write!(f, ": {msg}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Status {}

/// Extra data attached to a [`Status`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatusDetails {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_default")]
    pub causes: Vec<StatusCause>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

/// One reason a request failed (e.g. a field validation error).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatusCause {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

string_enum! {
    /// Status of a pod or node condition.
    pub enum ConditionStatus {
        True = "True",
        False = "False",
        Unknown = "Unknown",
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            Self::True
        } else {
            Self::False
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_two_numeric_resource_versions_order_objects() {
        let meta = |rv: Option<&str>| ObjectMeta {
            resource_version: rv.map(str::to_owned),
            ..Default::default()
        };
        for (a, b, later) in [
            (Some("12"), Some("9"), true),
            (Some("9"), Some("12"), false),
            (Some("9"), Some("9"), false),
            (Some("abc"), Some("9"), false),
            (Some("12"), None, false),
            (None, Some("9"), false),
        ] {
            assert_eq!(meta(a).is_later_than(&meta(b)), later, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn time_parse_table() {
        let ok = [
            ("1970-01-01T00:00:00Z", 0),
            ("2024-01-02T03:04:05Z", 1_704_164_645),
            ("2024-01-02t03:04:05z", 1_704_164_645),
            ("2024-01-02T03:04:05.999999999Z", 1_704_164_645),
            ("2024-01-02T03:04:05.1234567891234Z", 1_704_164_645),
            ("2024-01-02T04:04:05+01:00", 1_704_164_645),
            ("2024-01-01T22:34:05-04:30", 1_704_164_645),
            ("2024-02-29T00:00:00Z", 1_709_164_800),
            ("1969-12-31T23:59:59Z", -1),
            ("2000-03-01T00:00:00Z", 951_868_800),
        ];
        for (s, want) in ok {
            assert_eq!(Time::parse(s).map(|t| t.unix_seconds()), Ok(want), "{s}");
        }
        let bad = [
            "",
            "2024-01-02",
            "2024-01-02 03:04:05Z",
            "2024-01-02T03:04:05",
            "2024-01-02T03:04:05+0100",
            "2024-01-02T03:04:05.Z",
            "2024-13-02T03:04:05Z",
            "2023-02-29T03:04:05Z",
            "2024-01-02T24:00:00Z",
            "2024-01-02T03:04:60Z",
            "2024-01-02T03:04:05Zjunk",
            "2024-01-02T03:04:05+24:00",
            // Leap seconds (the `time` crate would take the last one of a month).
            "2016-12-31T23:59:60Z",
            "2024-06-30T23:59:60+00:00",
            "２024-01-02T03:04:05Z",
            "abcd-01-02T03:04:05Z",
        ];
        for s in bad {
            let e = Time::parse(s).expect_err(s);
            assert!(e.to_string().contains("invalid RFC 3339 timestamp"), "{e}");
        }
    }

    #[test]
    fn time_format_and_serde() {
        let t = Time::parse("2024-01-02T04:04:05.5+01:00").unwrap();
        assert_eq!(t.to_string(), "2024-01-02T03:04:05Z");
        assert_eq!(
            Time::from_unix_seconds(-1).to_string(),
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2024-01-02T03:04:05Z\""
        );
        let back: Time = serde_json::from_str("\"2024-01-02T03:04:05Z\"").unwrap();
        assert_eq!(back, t);
        let err = serde_json::from_str::<Time>("\"yesterday\"").unwrap_err();
        assert!(err.to_string().contains("invalid RFC 3339"), "{err}");
        assert!(serde_json::from_str::<Time>("12").is_err());
        assert!(serde_json::to_string(&Time::from_unix_seconds(300_000_000_000)).is_err());
        assert!(Time::from_unix_seconds(1) < Time::from_unix_seconds(2));
    }

    #[test]
    fn time_system_time_conversions() {
        let st = UNIX_EPOCH + Duration::new(1_700_000_000, 900_000_000);
        assert_eq!(Time::from_system_time(st).unix_seconds(), 1_700_000_000);
        assert_eq!(
            Time::from_unix_seconds(1_700_000_000).to_system_time(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        let before = UNIX_EPOCH - Duration::from_millis(1500);
        assert_eq!(Time::from_system_time(before).unix_seconds(), -2);
        let mt = MicroTime::from_system_time(before);
        assert_eq!(mt.unix_micros(), -1_500_000);
        assert_eq!(mt.to_system_time(), before);
        let now = Time::now();
        assert!(now.unix_seconds() > 1_600_000_000);
    }

    #[test]
    fn micro_time() {
        let t = MicroTime::parse("2024-01-02T03:04:05.1234567Z").unwrap();
        assert_eq!(t.to_string(), "2024-01-02T03:04:05.123456Z");
        assert_eq!(
            MicroTime::parse("2024-01-02T03:04:05Z")
                .unwrap()
                .to_string(),
            "2024-01-02T03:04:05.000000Z"
        );
        assert_eq!(
            MicroTime::from_unix_micros(-1).to_string(),
            "1969-12-31T23:59:59.999999Z"
        );
        assert_eq!(Time::from(t).to_string(), "2024-01-02T03:04:05Z");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<MicroTime>(&json).unwrap(), t);
        assert!(MicroTime::parse("2024-01-02T03:04:05.123456").is_err());
    }

    #[test]
    fn calendar_edges_format_and_parse_back() {
        for (text, secs) in [
            ("0000-01-01T00:00:00Z", -62_167_219_200),
            ("1969-12-31T23:59:59Z", -1),
            ("1970-01-01T00:00:00Z", 0),
            ("2000-02-29T12:00:00Z", 951_825_600),
            ("2100-03-01T00:00:00Z", 4_107_542_400),
            ("9999-12-31T23:59:59Z", 253_402_300_799),
        ] {
            assert_eq!(Time::from_unix_seconds(secs).to_string(), text);
            assert_eq!(
                Time::parse(text).map(|t| t.unix_seconds()),
                Ok(secs),
                "{text}"
            );
        }
    }

    #[test]
    fn object_meta_round_trip_keeps_unknown_but_drops_managed_fields() {
        let json = serde_json::json!({
            "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2024-01-02T03:04:05Z",
            "labels": {"app": "x"}, "annotations": null,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "rs", "uid": "u0", "controller": true}],
            "managedFields": [{"manager": "kubectl"}], "selfLink": "/x"
        });
        let mut m: ObjectMeta = serde_json::from_value(json).unwrap();
        assert_eq!(m.label("app"), Some("x"));
        assert!(m.annotations.is_empty());
        assert_eq!(m.owner_references[0].controller, Some(true));
        m.labels.insert("b".into(), "y".into());
        let out = serde_json::to_value(&m).unwrap();
        assert_eq!(out["selfLink"], "/x");
        assert_eq!(out["labels"]["b"], "y");
        assert!(out.get("annotations").is_none());
        assert_eq!(serde_json::to_string(&ObjectMeta::default()).unwrap(), "{}");
        assert!(!m.extra.contains_key("managedFields"));
        assert!(out.get("managedFields").is_none());
    }

    #[test]
    fn watch_event_and_status() {
        let line = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},
            "status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}"#;
        let ev: WatchEvent = serde_json::from_str(line).unwrap();
        assert_eq!(ev.type_, WatchEventType::Error);
        let st: Status = ev.decode().unwrap();
        assert!(st.is_gone());
        assert!(!st.is_not_found());
        assert_eq!(
            st.to_string(),
            "410 Expired: too old resource version: 1 (2)"
        );
        let odd: WatchEvent = serde_json::from_str(r#"{"type":"SOMETHING","object":{}}"#).unwrap();
        assert_eq!(odd.type_, WatchEventType::Other("SOMETHING".into()));
        assert_eq!(serde_json::to_value(&odd).unwrap()["type"], "SOMETHING");
    }

    #[test]
    fn list_decodes() {
        let l: List<ObjectMeta> = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"7","continue":"abc"},"items":null}"#,
        )
        .unwrap();
        assert_eq!(l.metadata.continue_.as_deref(), Some("abc"));
        assert!(l.items.is_empty());
    }
}
