//! Identifier newtypes (docs/protocol.md): `TaskId`, `SessionId`, `WorkerId`,
//! `RunId` (one flow run), `ReqId`, and `AttemptId`, one attempt of one task.
//!
//! Every id parses and validates its own form, so a value of one of these types
//! is always well-formed. `T-`, `S-`, `W-` and `R-` ids are a prefix plus exactly 32
//! lowercase hex digits; uppercase is refused so that every id has one spelling
//! and string comparison, hashing and ordering agree with the byte form. Their
//! parse does not check the UUID version bits: ids stay readable across
//! generators, and `TaskId::new` is what guarantees a UUIDv7.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

/// A map keyed by ids the daemon issues itself (task ids, credential
/// digests), hashed with per-process seeded foldhash instead of SipHash:
/// the delegated path looks such keys up about thirty times per task. A key
/// a client chooses (an idempotency key, an agent's name) stays in a std
/// `HashMap`.
pub type IdMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Longest accepted `ReqId`, in characters.
pub const REQ_ID_MAX_CHARS: usize = 128;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} must start with `{prefix}`")]
    MissingPrefix {
        kind: &'static str,
        prefix: &'static str,
    },
    #[error(
        "{kind} must be `{prefix}` followed by 32 lowercase hex digits, found {found} characters after the prefix"
    )]
    WrongLength {
        kind: &'static str,
        prefix: &'static str,
        found: usize,
    },
    #[error("{kind} must be lowercase hex after `{prefix}`, found {found:?} at offset {offset}")]
    NotLowercaseHex {
        kind: &'static str,
        prefix: &'static str,
        offset: usize,
        found: char,
    },
    #[error("request id must not be empty")]
    EmptyReqId,
    #[error("request id is {chars} characters long, at most {REQ_ID_MAX_CHARS} are allowed")]
    ReqIdTooLong { chars: usize },
}

/// Writes `bytes` as lowercase hex into `out`, which must be twice as long.
pub fn encode_lower_hex(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

/// Decodes exactly 32 lowercase hex digits; on failure returns the offending
/// offset and character.
fn decode_lower_hex_16(digits: &str) -> Result<[u8; 16], Option<(usize, char)>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if digits.len() != 32 {
        return Err(None);
    }
    let mut out = [0u8; 16];
    let bytes = digits.as_bytes();
    for (i, slot) in out.iter_mut().enumerate() {
        let (hi, lo) = (bytes[2 * i], bytes[2 * i + 1]);
        match (nibble(hi), nibble(lo)) {
            (Some(h), Some(l)) => *slot = (h << 4) | l,
            (None, _) => return Err(Some((2 * i, char_at(digits, 2 * i)))),
            (_, None) => return Err(Some((2 * i + 1, char_at(digits, 2 * i + 1)))),
        }
    }
    Ok(out)
}

/// The character starting at or containing byte `offset` (for error messages).
fn char_at(s: &str, offset: usize) -> char {
    s.char_indices()
        .take_while(|(i, _)| *i <= offset)
        .last()
        .map_or('\u{fffd}', |(_, c)| c)
}

/// Parses `<prefix><32 lowercase hex>` into its 16 bytes.
fn parse_prefixed(s: &str, kind: &'static str, prefix: &'static str) -> Result<Uuid, IdError> {
    let digits = s
        .strip_prefix(prefix)
        .ok_or(IdError::MissingPrefix { kind, prefix })?;
    if digits.len() != 32 {
        return Err(IdError::WrongLength {
            kind,
            prefix,
            found: digits.chars().count(),
        });
    }
    match decode_lower_hex_16(digits) {
        Ok(bytes) => Ok(Uuid::from_bytes(bytes)),
        Err(Some((offset, found))) => Err(IdError::NotLowercaseHex {
            kind,
            prefix,
            offset: offset + prefix.len(),
            found,
        }),
        Err(None) => Err(IdError::WrongLength {
            kind,
            prefix,
            found: digits.chars().count(),
        }),
    }
}

/// Defines a `<prefix><32 hex>` id over a `Uuid`, with its string conversions.
macro_rules! hex_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            /// The fixed prefix of the string form.
            pub const PREFIX: &'static str = $prefix;

            /// Wraps an existing UUID.
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The UUID behind this id.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }

            /// Parses the string form, refusing anything but the exact prefix
            /// and 32 lowercase hex digits.
            pub fn parse(s: &str) -> Result<Self, IdError> {
                parse_prefixed(s, $kind, $prefix).map(Self)
            }

            /// The string form in a stack buffer.
            fn encode(&self) -> [u8; $prefix.len() + 32] {
                let mut buf = [0u8; $prefix.len() + 32];
                buf[..$prefix.len()].copy_from_slice($prefix.as_bytes());
                encode_lower_hex(self.0.as_bytes(), &mut buf[$prefix.len()..]);
                buf
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let buf = self.encode();
                // The buffer holds only ASCII prefix and hex digits.
                f.write_str(std::str::from_utf8(&buf).map_err(|_| fmt::Error)?)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let buf = self.encode();
                let text = std::str::from_utf8(&buf).map_err(serde::ser::Error::custom)?;
                serializer.serialize_str(text)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct IdVisitor;
                impl Visitor<'_> for IdVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        write!(f, "a {} string (`{}` + 32 lowercase hex)", $kind, $prefix)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::parse(v).map_err(E::custom)
                    }
                }
                deserializer.deserialize_str(IdVisitor)
            }
        }
    };
}

hex_id!(
    /// A task: `T-` + 32 lowercase hex of a UUIDv7, so ids sort by creation time.
    /// Not a secret.
    TaskId,
    "T-",
    "task id"
);

hex_id!(
    /// An operator (MainAI) session: `S-` + 32 lowercase hex of a random UUIDv4.
    SessionId,
    "S-",
    "session id"
);

hex_id!(
    /// One spawned worker: `W-` + 32 lowercase hex of a random UUIDv4.
    WorkerId,
    "W-",
    "worker id"
);

hex_id!(
    /// One run of a flow: `R-` + 32 lowercase hex of a UUIDv7, so ids sort by
    /// creation time. Not a secret.
    RunId,
    "R-",
    "run id"
);

impl TaskId {
    /// A fresh, time-ordered task id (UUIDv7).
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// The smallest id of a task created at unix millisecond `ms` or later
    /// (a UUIDv7 starts with its 48-bit millisecond), so a range of ids is a
    /// range of creation times; `None` past the 48 bits.
    pub fn first_at(ms: u64) -> Option<Self> {
        if ms >> 48 != 0 {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        Some(Self(Uuid::from_bytes(bytes)))
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl RunId {
    /// A fresh, time-ordered run id (UUIDv7).
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionId {
    /// A fresh random session id (UUIDv4 from the OS RNG).
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerId {
    /// A fresh random worker id (UUIDv4 from the OS RNG).
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }
}

impl Default for WorkerId {
    fn default() -> Self {
        Self::new()
    }
}

/// One attempt of one task: attempts are numbered from 1 within their task.
/// Shown as `T-…#n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId {
    pub task: TaskId,
    pub n: u32,
}

impl AttemptId {
    pub fn new(task: TaskId, n: u32) -> AttemptId {
        AttemptId { task, n }
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.task, self.n)
    }
}

/// WebSocket request correlation id: any non-empty string of at most
/// `REQ_ID_MAX_CHARS` characters, chosen by whoever sends the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ReqId(String);

impl ReqId {
    /// Validates and wraps a request id.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        if value.is_empty() {
            return Err(IdError::EmptyReqId);
        }
        // Byte length bounds the character count, so only long strings are counted.
        if value.len() > REQ_ID_MAX_CHARS {
            let chars = value.chars().count();
            if chars > REQ_ID_MAX_CHARS {
                return Err(IdError::ReqIdTooLong { chars });
            }
        }
        Ok(Self(value))
    }

    /// The id as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ReqId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::new(s)
    }
}

impl<'de> Deserialize<'de> for ReqId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Self::new(value).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0190f5a2c3d47e8f9a0b1c2d3e4f5a6b";

    #[test]
    fn first_at_bounds_the_ids_of_a_millisecond() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let id = TaskId::new();
        let bound = TaskId::first_at(before).unwrap();
        assert!(bound <= id, "{bound} > {id}");
        assert!(TaskId::first_at(before + 60_000).unwrap() > id);
        assert_eq!(
            TaskId::first_at(0x0190_f5a2_c3d4).unwrap().to_string(),
            "T-0190f5a2c3d400000000000000000000"
        );
        assert_eq!(TaskId::first_at(1 << 48), None);
    }

    #[test]
    fn task_id_round_trips_through_string_and_serde() {
        let id = TaskId::new();
        let text = id.to_string();
        assert!(text.starts_with("T-"));
        assert_eq!(text.len(), 34);
        assert_eq!(text.parse::<TaskId>(), Ok(id));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<TaskId>(&json).unwrap(), id);
        assert_eq!(format!("{id:?}"), text);
    }

    #[test]
    fn task_id_new_is_uuid_v7_and_time_ordered() {
        let a = TaskId::new();
        let b = TaskId::new();
        assert_eq!(a.as_uuid().get_version_num(), 7);
        assert!(a < b, "{a} !< {b}");
        assert!(a.to_string() < b.to_string());
        assert_eq!(TaskId::from_uuid(a.as_uuid()), a);
    }

    #[test]
    fn run_id_is_time_ordered_and_round_trips() {
        let a = RunId::new();
        let b = RunId::new();
        assert_eq!(a.as_uuid().get_version_num(), 7);
        assert!(a < b, "{a} !< {b}");
        let text = a.to_string();
        assert!(text.starts_with("R-"));
        assert_eq!(text.len(), 34);
        assert_eq!(text.parse::<RunId>(), Ok(a));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<RunId>(&json).unwrap(), a);
        assert!(matches!(
            format!("T-{HEX}").parse::<RunId>(),
            Err(IdError::MissingPrefix { kind: "run id", .. })
        ));
        assert!(serde_json::from_str::<RunId>("\"R-ABC\"").is_err());
    }

    #[test]
    fn session_and_worker_ids_are_random_v4() {
        let s = SessionId::new();
        let w = WorkerId::new();
        assert_eq!(s.as_uuid().get_version_num(), 4);
        assert_eq!(w.as_uuid().get_version_num(), 4);
        assert_ne!(SessionId::new(), s);
        assert_eq!(s.to_string().parse::<SessionId>(), Ok(s));
        assert_eq!(w.to_string().parse::<WorkerId>(), Ok(w));
    }

    #[test]
    fn parses_the_exact_form() {
        let id: TaskId = format!("T-{HEX}").parse().unwrap();
        assert_eq!(id.to_string(), format!("T-{HEX}"));
        let sid: SessionId = format!("S-{HEX}").parse().unwrap();
        assert_eq!(sid.as_uuid().simple().to_string(), HEX);
        assert!(format!("W-{HEX}").parse::<WorkerId>().is_ok());
    }

    #[test]
    fn rejects_wrong_prefix() {
        for bad in [
            HEX.to_owned(),
            format!("S-{HEX}"),
            format!("t-{HEX}"),
            format!("T{HEX}"),
        ] {
            assert_eq!(
                bad.parse::<TaskId>(),
                Err(IdError::MissingPrefix {
                    kind: "task id",
                    prefix: "T-"
                }),
                "{bad}"
            );
        }
        assert!(matches!(
            format!("T-{HEX}").parse::<SessionId>(),
            Err(IdError::MissingPrefix { .. })
        ));
    }

    #[test]
    fn rejects_wrong_length() {
        for bad in [
            "T-",
            "T-0",
            &format!("T-{HEX}0"),
            &format!("T-{}", &HEX[1..]),
        ] {
            assert!(
                matches!(bad.parse::<TaskId>(), Err(IdError::WrongLength { .. })),
                "{bad}"
            );
        }
        // A dashed UUID is 36 characters, not 32.
        let dashed = format!("T-{}", Uuid::now_v7().hyphenated());
        assert!(matches!(
            dashed.parse::<TaskId>(),
            Err(IdError::WrongLength { found: 36, .. })
        ));
    }

    #[test]
    fn rejects_uppercase_and_non_hex() {
        let upper = format!("T-{}", HEX.to_uppercase());
        assert!(matches!(
            upper.parse::<TaskId>(),
            Err(IdError::NotLowercaseHex {
                offset: 6,
                found: 'F',
                ..
            })
        ));
        let mut g = HEX.to_owned();
        g.replace_range(31..32, "g");
        assert_eq!(
            format!("W-{g}").parse::<WorkerId>(),
            Err(IdError::NotLowercaseHex {
                kind: "worker id",
                prefix: "W-",
                offset: 33,
                found: 'g'
            })
        );
        // 32 bytes that are not 32 characters: a multi-byte char must not panic.
        let mut multi = HEX[..30].to_owned();
        multi.push('é');
        assert_eq!(multi.len(), 32);
        assert!(matches!(
            format!("S-{multi}").parse::<SessionId>(),
            Err(IdError::NotLowercaseHex { found: 'é', .. })
        ));
    }

    #[test]
    fn serde_rejects_bad_ids_and_non_strings() {
        assert!(serde_json::from_str::<TaskId>("\"T-ABC\"").is_err());
        assert!(serde_json::from_str::<TaskId>("12").is_err());
        assert!(serde_json::from_str::<SessionId>("null").is_err());
        let err = serde_json::from_str::<TaskId>(&format!("\"S-{HEX}\"")).unwrap_err();
        assert!(err.to_string().contains("must start with `T-`"), "{err}");
    }

    #[test]
    fn req_id_bounds() {
        assert_eq!(ReqId::new(""), Err(IdError::EmptyReqId));
        assert!(ReqId::new("x".repeat(128)).is_ok());
        assert_eq!(
            ReqId::new("x".repeat(129)),
            Err(IdError::ReqIdTooLong { chars: 129 })
        );
        // 128 two-byte characters are 256 bytes but still 128 characters.
        assert!(ReqId::new("é".repeat(128)).is_ok());
        let id: ReqId = serde_json::from_str("\"r-1\"").unwrap();
        assert_eq!(id.as_str(), "r-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"r-1\"");
        assert!(serde_json::from_str::<ReqId>("\"\"").is_err());
        assert_eq!("abc".parse::<ReqId>().unwrap().to_string(), "abc");
    }
}
