//! The claims a capability token carries (docs/security.md, Capability tokens): a closed, typed
//! struct.
//!
//! Parsing refuses unknown fields, duplicate fields and wrong types. `task`,
//! `attempt` and `sid` are *required-or-null*: each must be present, with a
//! value or `null`, so that every token spells out what it is bound to and a
//! claim cannot be dropped to widen a token. Minting always writes all nine
//! fields, in declaration order.

use rand::RngCore;
use serde::{Deserialize, Deserializer, Serialize};

use crate::gate::{self, GateError, Role, Verb};
use crate::ids::{SessionId, TaskId, encode_lower_hex};

/// Longest `sub`, in bytes.
pub const MAX_SUB_BYTES: usize = 128;
/// Most verbs one token may carry.
pub const MAX_VERBS: usize = 16;
/// Length of `jti`: 32 lowercase hex digits (128 random bits).
pub const JTI_HEX_LEN: usize = 32;

/// What a token says about its bearer. Fields are public data; `validate`
/// states the invariants, and both minting and verification enforce them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Who: `worker-of-<task>`, `observer`, `senior:<sid>`, ... (1 to 128 bytes).
    pub sub: String,
    pub role: Role,
    /// The verbs this token may use: at most 16, no repeats.
    pub verbs: Vec<Verb>,
    /// The task the token is bound to; `null` for session-level tokens.
    #[serde(deserialize_with = "required_or_null")]
    pub task: Option<TaskId>,
    /// The attempt the token is bound to (the fencing epoch).
    #[serde(deserialize_with = "required_or_null")]
    pub attempt: Option<u32>,
    /// The operator session the token belongs to.
    #[serde(deserialize_with = "required_or_null")]
    pub sid: Option<SessionId>,
    /// Issued at, unix seconds.
    pub iat: u64,
    /// Expires at, unix seconds; never before `iat`.
    pub exp: u64,
    /// Random nonce, 32 lowercase hex digits.
    pub jti: String,
}

/// Why claims are not acceptable.
#[derive(Debug, thiserror::Error)]
pub enum ClaimsError {
    #[error("claims are not the expected JSON object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("sub is {len} bytes, expected 1 to {MAX_SUB_BYTES}")]
    SubLength { len: usize },
    #[error("{count} verbs, at most {MAX_VERBS} are allowed")]
    TooManyVerbs { count: usize },
    #[error("verb `{0}` appears more than once")]
    DuplicateVerb(Verb),
    #[error("jti is not {JTI_HEX_LEN} lowercase hex digits")]
    BadJti,
    #[error("exp ({exp}) is before iat ({iat})")]
    ExpBeforeIat { iat: u64, exp: u64 },
}

impl Claims {
    /// Checks the invariants that serde cannot express.
    pub fn validate(&self) -> Result<(), ClaimsError> {
        if self.sub.is_empty() || self.sub.len() > MAX_SUB_BYTES {
            return Err(ClaimsError::SubLength {
                len: self.sub.len(),
            });
        }
        if self.verbs.len() > MAX_VERBS {
            return Err(ClaimsError::TooManyVerbs {
                count: self.verbs.len(),
            });
        }
        let mut seen = 0u32;
        for verb in &self.verbs {
            let bit = 1u32 << (*verb as u32);
            if seen & bit != 0 {
                return Err(ClaimsError::DuplicateVerb(*verb));
            }
            seen |= bit;
        }
        let jti = self.jti.as_bytes();
        if jti.len() != JTI_HEX_LEN || !jti.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(ClaimsError::BadJti);
        }
        if self.exp < self.iat {
            return Err(ClaimsError::ExpBeforeIat {
                iat: self.iat,
                exp: self.exp,
            });
        }
        Ok(())
    }

    /// `exp - iat`, in seconds.
    pub fn ttl_secs(&self) -> u64 {
        self.exp.saturating_sub(self.iat)
    }

    /// The gate for this token's role and verbs (docs/security.md, Verification, step 6).
    pub fn check_verb(&self, verb: Verb) -> Result<(), GateError> {
        gate::check(self.role, &self.verbs, verb)
    }

    /// A fresh `jti`: 128 random bits as 32 lowercase hex digits. The nonce
    /// only makes tokens distinct, so it comes from the thread-local CSPRNG
    /// (ChaCha, seeded from the OS) rather than a system call per mint.
    pub fn random_jti() -> String {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        let mut hex = [0u8; JTI_HEX_LEN];
        encode_lower_hex(&bytes, &mut hex);
        hex.iter().map(|b| char::from(*b)).collect()
    }
}

/// Deserializes an `Option` that must be present; `null` is `None`. With a
/// `deserialize_with`, serde reports a missing field instead of defaulting it.
fn required_or_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Claims {
        Claims {
            sub: "worker-of-T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b".into(),
            role: Role::Worker,
            verbs: gate::WORKER_LEAF_VERBS.to_vec(),
            task: Some("T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b".parse().unwrap()),
            attempt: Some(1),
            sid: None,
            iat: 1_700_000_000,
            exp: 1_700_001_800,
            jti: "00112233445566778899aabbccddeeff".into(),
        }
    }

    #[test]
    fn serializes_every_field_in_order() {
        let json = serde_json::to_string(&sample()).unwrap();
        assert_eq!(
            json,
            r#"{"sub":"worker-of-T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b","role":"worker","verbs":["fetch_prompt","emit_output","post_result","heartbeat"],"task":"T-0190f5a2c3d47e8f9a0b1c2d3e4f5a6b","attempt":1,"sid":null,"iat":1700000000,"exp":1700001800,"jti":"00112233445566778899aabbccddeeff"}"#
        );
        let back: Claims = serde_json::from_str(&json).unwrap();
        assert_eq!(back, sample());
    }

    #[test]
    fn nullable_claims_must_be_present() {
        let full = serde_json::to_value(sample()).unwrap();
        for field in ["task", "attempt", "sid"] {
            let mut value = full.clone();
            value.as_object_mut().unwrap().remove(field);
            let err = serde_json::from_value::<Claims>(value).unwrap_err();
            assert!(err.to_string().contains("missing field"), "{field}: {err}");
        }
        let mut value = full.clone();
        value["task"] = serde_json::Value::Null;
        value["attempt"] = serde_json::Value::Null;
        let claims: Claims = serde_json::from_value(value).unwrap();
        assert_eq!(
            (claims.task, claims.attempt, claims.sid),
            (None, None, None)
        );
    }

    #[test]
    fn rejects_unknown_duplicate_and_mistyped_fields() {
        let json = serde_json::to_string(&sample()).unwrap();
        let extra = json.replacen('{', r#"{"admin":true,"#, 1);
        assert!(serde_json::from_str::<Claims>(&extra).is_err());
        let duplicate = json.replacen('{', r#"{"role":"admin","#, 1);
        assert!(serde_json::from_str::<Claims>(&duplicate).is_err());
        for (from, to) in [
            ("\"exp\":1700001800", "\"exp\":\"1700001800\""),
            ("\"exp\":1700001800", "\"exp\":1700001800.0"),
            ("\"exp\":1700001800", "\"exp\":-1"),
            ("\"attempt\":1", "\"attempt\":4294967296"),
            ("\"role\":\"worker\"", "\"role\":\"root\""),
            ("\"verbs\":[", "\"verbs\":[\"sudo\","),
        ] {
            let bad = json.replace(from, to);
            assert_ne!(bad, json);
            assert!(serde_json::from_str::<Claims>(&bad).is_err(), "{to}");
        }
    }

    #[test]
    fn validate_enforces_bounds() {
        assert!(sample().validate().is_ok());
        let mut c = sample();
        c.sub = "x".repeat(MAX_SUB_BYTES);
        assert!(c.validate().is_ok());
        c.sub.push('x');
        assert!(matches!(
            c.validate(),
            Err(ClaimsError::SubLength { len: 129 })
        ));
        c.sub.clear();
        assert!(matches!(
            c.validate(),
            Err(ClaimsError::SubLength { len: 0 })
        ));

        let mut c = sample();
        c.verbs = vec![Verb::ReadTask; MAX_VERBS + 1];
        assert!(matches!(
            c.validate(),
            Err(ClaimsError::TooManyVerbs { count: 17 })
        ));
        c.verbs = vec![Verb::ReadTask, Verb::Answer, Verb::ReadTask];
        assert!(matches!(
            c.validate(),
            Err(ClaimsError::DuplicateVerb(Verb::ReadTask))
        ));

        for jti in [
            "",
            "00112233445566778899AABBCCDDEEFF",
            "00112233445566778899aabbccddeef",
            "g0112233445566778899aabbccddeeff",
        ] {
            let mut c = sample();
            c.jti = jti.into();
            assert!(matches!(c.validate(), Err(ClaimsError::BadJti)), "{jti}");
        }

        let mut c = sample();
        c.exp = c.iat - 1;
        assert!(matches!(
            c.validate(),
            Err(ClaimsError::ExpBeforeIat { .. })
        ));
    }

    #[test]
    fn random_jti_is_valid_and_fresh() {
        let a = Claims::random_jti();
        let mut c = sample();
        c.jti = a.clone();
        assert!(c.validate().is_ok());
        assert_ne!(Claims::random_jti(), a);
    }
}
