//! Opaque bearer secrets: worker handles (docs/security.md, Worker handles) and operator/admin
//! session secrets (docs/security.md, Session and admin secrets).
//!
//! Both are random values that the store knows only by SHA-256 digest. A
//! `WorkerHandle` is `wh-` + 32 lowercase hex (128 bits), short enough for an
//! LLM SubAgent to copy intact; a `SessionSecret` is `sws-` + 64 lowercase hex
//! (256 bits). Neither is ever formatted by `Debug`.
//!
//! Digests are compared in constant time with `digests_equal`. Looking a digest
//! up in a map is not constant time, which is fine: the digest is not the
//! secret, and learning part of it gives no way to produce a matching secret.

use std::fmt;

use hmac::digest::CtOutput;
use rand::RngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};

use crate::auth::error::TokenError;
use crate::auth::fingerprint::fingerprint;
use crate::auth::token::TOKEN_PREFIX;
use crate::auth::wipe_string;
use crate::ids::encode_lower_hex;

/// Prefix of every worker handle.
pub const HANDLE_PREFIX: &str = "wh-";

/// Prefix of every session (operator or admin) secret.
pub const SECRET_PREFIX: &str = "sws-";

/// Random bytes in a handle and in a session secret.
const HANDLE_RANDOM_BYTES: usize = 16;
const SECRET_RANDOM_BYTES: usize = 32;

/// A worker's short bearer credential, `wh-` + 32 lowercase hex.
#[derive(Clone)]
pub struct WorkerHandle(String);

/// An operator or admin bearer secret, `sws-` + 64 lowercase hex.
#[derive(Clone)]
pub struct SessionSecret(String);

/// Whether a bearer value should be treated as a worker handle rather than a
/// capability token: it starts with `wh-`. The strict form is then checked by
/// `WorkerHandle::parse`, so a damaged handle is refused as a bad handle.
pub fn looks_like_handle(bearer: &str) -> bool {
    bearer.starts_with(HANDLE_PREFIX)
}

/// Whether a bearer value should be treated as a capability token: it starts
/// with `swc1.`.
pub fn looks_like_token(bearer: &str) -> bool {
    bearer
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(|rest| rest.starts_with('.'))
}

/// Compares two SHA-256 digests in constant time (via `digest::CtOutput`,
/// whose equality is the `subtle` crate's constant-time comparison).
pub fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    CtOutput::<Sha256>::new((*a).into()) == CtOutput::<Sha256>::new((*b).into())
}

impl WorkerHandle {
    /// A fresh handle: 128 bits from the OS RNG.
    pub fn generate() -> Self {
        Self(random_with_prefix::<HANDLE_RANDOM_BYTES>(HANDLE_PREFIX))
    }

    /// Accepts exactly `wh-` + 32 lowercase hex digits.
    ///
    /// Errors: `TokenError::BadHandle`.
    pub fn parse(value: &str) -> Result<Self, TokenError> {
        if is_prefixed_hex(value, HANDLE_PREFIX, 2 * HANDLE_RANDOM_BYTES) {
            Ok(Self(value.to_owned()))
        } else {
            Err(TokenError::BadHandle)
        }
    }

    /// The handle text, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the full handle text: the only form the store keeps.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// The loggable fingerprint.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.0)
    }
}

impl SessionSecret {
    /// A fresh secret: 256 bits from the OS RNG.
    pub fn generate() -> Self {
        Self(random_with_prefix::<SECRET_RANDOM_BYTES>(SECRET_PREFIX))
    }

    /// Accepts exactly `sws-` + 64 lowercase hex digits (surrounding
    /// whitespace is not trimmed here).
    ///
    /// Errors: `TokenError::BadSecret`.
    pub fn parse(value: &str) -> Result<Self, TokenError> {
        if is_prefixed_hex(value, SECRET_PREFIX, 2 * SECRET_RANDOM_BYTES) {
            Ok(Self(value.to_owned()))
        } else {
            Err(TokenError::BadSecret)
        }
    }

    /// The secret text, for the one place that must send or store it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the full secret text: the only form the store keeps.
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// Whether this secret's digest equals `stored`, in constant time.
    pub fn matches(&self, stored: &[u8; 32]) -> bool {
        digests_equal(&self.digest(), stored)
    }

    /// The loggable fingerprint.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.0)
    }
}

impl fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkerHandle(fp={})", self.fingerprint())
    }
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionSecret(fp={})", self.fingerprint())
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        wipe_string(&mut self.0);
    }
}

impl Drop for SessionSecret {
    fn drop(&mut self) {
        wipe_string(&mut self.0);
    }
}

/// `prefix` + `N` OS-random bytes as lowercase hex.
fn random_with_prefix<const N: usize>(prefix: &str) -> String {
    let mut bytes = [0u8; N];
    OsRng.fill_bytes(&mut bytes);
    let mut text = String::with_capacity(prefix.len() + 2 * N);
    text.push_str(prefix);
    let mut pair = [0u8; 2];
    for byte in &bytes {
        encode_lower_hex(std::slice::from_ref(byte), &mut pair);
        text.push(char::from(pair[0]));
        text.push(char::from(pair[1]));
    }
    bytes.fill(0);
    text
}

fn is_prefixed_hex(value: &str, prefix: &str, digits: usize) -> bool {
    value.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == digits && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_form_and_parse() {
        let handle = WorkerHandle::generate();
        let text = handle.expose();
        assert_eq!(text.len(), 35);
        assert!(looks_like_handle(text) && !looks_like_token(text));
        assert_eq!(WorkerHandle::parse(text).unwrap().expose(), text);
        assert_ne!(WorkerHandle::generate().expose(), text);
        let upper = format!("wh-{}", text[3..].to_uppercase());
        for bad in [
            "",
            "wh-",
            &text[..34],
            &format!("{text}0"),
            &upper,
            &format!("WH-{}", &text[3..]),
            &format!(" {text}"),
            &format!("wh-{}g", &text[3..34]),
        ] {
            assert!(
                matches!(WorkerHandle::parse(bad), Err(TokenError::BadHandle)),
                "{bad}"
            );
        }
    }

    #[test]
    fn handle_digest_is_sha256_of_full_text() {
        let handle = WorkerHandle::parse("wh-00112233445566778899aabbccddeeff").unwrap();
        let expected: [u8; 32] = Sha256::digest(b"wh-00112233445566778899aabbccddeeff").into();
        assert_eq!(handle.digest(), expected);
    }

    #[test]
    fn debug_is_redacted() {
        let handle = WorkerHandle::generate();
        let secret = SessionSecret::generate();
        let text = format!("{handle:?} {secret:?}");
        assert!(!text.contains(&handle.expose()[3..]), "{text}");
        assert!(!text.contains(&secret.expose()[4..]), "{text}");
        assert!(text.contains(&handle.fingerprint()));
    }

    #[test]
    fn session_secret_form_digest_and_match() {
        let secret = SessionSecret::generate();
        assert_eq!(secret.expose().len(), 4 + 64);
        assert!(!looks_like_handle(secret.expose()) && !looks_like_token(secret.expose()));
        let stored = secret.digest();
        assert!(secret.matches(&stored));
        let parsed = SessionSecret::parse(secret.expose()).unwrap();
        assert!(parsed.matches(&stored));
        assert!(!SessionSecret::generate().matches(&stored));
        assert!(matches!(
            SessionSecret::parse(&secret.expose()[..67]),
            Err(TokenError::BadSecret)
        ));
        assert!(SessionSecret::parse(&secret.expose().to_uppercase()).is_err());
    }

    #[test]
    fn digests_equal_compares_every_byte() {
        let a = [5u8; 32];
        assert!(digests_equal(&a, &a));
        for i in 0..32 {
            let mut b = a;
            b[i] ^= 1;
            assert!(!digests_equal(&a, &b), "byte {i}");
        }
    }

    #[test]
    fn token_detection() {
        assert!(looks_like_token("swc1.k.p.t"));
        assert!(!looks_like_token("swc1"));
        assert!(!looks_like_token("swc2.k.p.t"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Arbitrary strings never panic the parsers, and only the exact
        /// shape (prefix plus lowercase hex of the right length) parses.
        #[test]
        fn arbitrary_strings_parse_only_in_the_exact_shape(text in "(wh-|sws-)?([0-9a-fA-F]{28,68}|\\PC{0,80})") {
            let handle = WorkerHandle::parse(&text);
            let secret = SessionSecret::parse(&text);
            let hex = |body: &str, len: usize| {
                body.len() == len && body.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            };
            proptest::prop_assert_eq!(
                handle.is_ok(),
                text.strip_prefix("wh-").is_some_and(|b| hex(b, 2 * HANDLE_RANDOM_BYTES))
            );
            proptest::prop_assert_eq!(
                secret.is_ok(),
                text.strip_prefix("sws-").is_some_and(|b| hex(b, 2 * SECRET_RANDOM_BYTES))
            );
        }
    }
}
