//! The `swc1` token format (docs/security.md, Capability tokens) and verification steps 1–5
//! (docs/security.md, Verification) as pure functions over bytes, a keyring and a time.
//!
//! `swc1.<kid>.<payload>.<tag>`: `payload` is the claims' JSON in unpadded
//! base64url, `tag` is the unpadded base64url of
//! `HMAC-SHA256(key[kid], "swarm-captoken\n" || "swc1." || kid || "." || payload)`.
//! The tag covers the payload text as sent and the JSON is parsed only after
//! the tag verifies. Decoding is strict: padding, characters outside the
//! URL-safe alphabet and non-zero trailing bits are refused, so every byte
//! string has at most one accepted spelling.

use std::fmt;

use base64::DecodeSliceError;
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::Mac;

use crate::auth::claims::Claims;
use crate::auth::error::TokenError;
use crate::auth::fingerprint::fingerprint;
use crate::auth::keyring::{Keyring, is_valid_kid};
use crate::auth::wipe_string;

/// The fixed first field: format version and algorithm (HMAC-SHA256) in one.
pub const TOKEN_PREFIX: &str = "swc1";

/// Longest credential accepted, checked before any decoding.
pub const MAX_TOKEN_BYTES: usize = 2048;

/// Domain separation for the tag.
pub(crate) const MAC_DOMAIN: &[u8] = b"swarm-captoken\n";

/// Unpadded URL-safe base64 with strict decoding: no `=`, no trailing bits.
pub(crate) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_allow_trailing_bits(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// Bytes of an HMAC-SHA256 tag.
const TAG_BYTES: usize = 32;

/// Room for the largest payload a `MAX_TOKEN_BYTES` token can hold
/// (2048 base64 characters decode to 1536 bytes).
const PAYLOAD_BUF_BYTES: usize = MAX_TOKEN_BYTES / 4 * 3;

/// A minted capability token. `Debug` shows only its fingerprint; the text
/// leaves through `expose` or `into_string`, and is overwritten when dropped.
#[derive(Clone)]
pub struct SecretToken(String);

impl SecretToken {
    /// The token text, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The token text, handing over ownership.
    pub fn into_string(mut self) -> String {
        std::mem::take(&mut self.0)
    }

    /// The loggable fingerprint (first 12 hex of SHA-256).
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.0)
    }
}

impl fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretToken(fp={})", self.fingerprint())
    }
}

impl Drop for SecretToken {
    fn drop(&mut self) {
        wipe_string(&mut self.0);
    }
}

/// Signs `claims` with the keyring's current key.
///
/// Errors: `BadClaims` when the claims break an invariant, `TooLong` when the
/// token would exceed `MAX_TOKEN_BYTES`. The lifetime bound is the caller's.
pub fn encode(keyring: &Keyring, claims: &Claims) -> Result<SecretToken, TokenError> {
    claims.validate()?;
    let key = keyring.current();

    let mut json = [0u8; PAYLOAD_BUF_BYTES];
    let remaining = {
        let mut cursor: &mut [u8] = &mut json;
        // The only write error into a slice is running out of room.
        serde_json::to_writer(&mut cursor, claims).map_err(|_| TokenError::TooLong)?;
        cursor.len()
    };
    let json = &json[..PAYLOAD_BUF_BYTES - remaining];

    let payload_chars = json.len().div_ceil(3) * 4;
    let mut token =
        String::with_capacity(TOKEN_PREFIX.len() + key.kid().len() + payload_chars + 46);
    token.push_str(TOKEN_PREFIX);
    token.push('.');
    token.push_str(key.kid());
    token.push('.');
    let payload_start = token.len();
    BASE64.encode_string(json, &mut token);
    let tag = key
        .mac()
        .chain_update(&token.as_bytes()[payload_start..])
        .finalize()
        .into_bytes();
    token.push('.');
    BASE64.encode_string(tag, &mut token);

    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong);
    }
    Ok(SecretToken(token))
}

/// Verification steps 1–4 (docs/security.md): size, shape, prefix, kid, strict decoding, tag (in
/// constant time), then the closed, typed claims. Pure: no clock, no I/O.
///
/// Errors, in the order checked: `TooLong`, `Malformed` (not exactly four
/// fields, an empty field, or a kid outside `[a-z0-9-]{1,16}`), `BadPrefix`,
/// `UnknownKid`, `BadEncoding`, `BadSignature`, `BadClaims`.
pub fn decode(token: &[u8], keyring: &Keyring) -> Result<Claims, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong);
    }
    let mut fields = token.split(|b| *b == b'.');
    let (Some(prefix), Some(kid), Some(payload), Some(tag), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(TokenError::Malformed);
    };
    if [prefix, kid, payload, tag]
        .iter()
        .any(|field| field.is_empty())
    {
        return Err(TokenError::Malformed);
    }
    if prefix != TOKEN_PREFIX.as_bytes() {
        return Err(TokenError::BadPrefix);
    }
    if !is_valid_kid(kid) {
        return Err(TokenError::Malformed);
    }
    let key = keyring.get(kid).ok_or(TokenError::UnknownKid)?;

    // A tag that does not fit 48 bytes cannot be 32 bytes long.
    let mut tag_buf = [0u8; TAG_BYTES + 16];
    let tag_len = BASE64
        .decode_slice(tag, &mut tag_buf)
        .map_err(|err| match err {
            DecodeSliceError::DecodeError(_) => TokenError::BadEncoding,
            DecodeSliceError::OutputSliceTooSmall => TokenError::BadSignature,
        })?;
    let mut payload_buf = [0u8; PAYLOAD_BUF_BYTES];
    let payload_len = BASE64
        .decode_slice(payload, &mut payload_buf)
        .map_err(|err| match err {
            DecodeSliceError::DecodeError(_) => TokenError::BadEncoding,
            DecodeSliceError::OutputSliceTooSmall => TokenError::TooLong,
        })?;

    // `verify_slice` compares in constant time and refuses any other length.
    key.mac()
        .chain_update(payload)
        .verify_slice(&tag_buf[..tag_len])
        .map_err(|_| TokenError::BadSignature)?;

    let claims: Claims = serde_json::from_slice(&payload_buf[..payload_len])
        .map_err(|err| TokenError::BadClaims(err.into()))?;
    claims.validate()?;
    Ok(claims)
}

/// Verification step 5 and the lifetime bound: `now < exp + leeway`, then
/// `exp - iat <= max_ttl`.
///
/// Errors: `Expired`, then `TtlTooLong`.
pub fn check_lifetime(
    claims: &Claims,
    now_secs: u64,
    leeway_secs: u64,
    max_ttl_secs: u64,
) -> Result<(), TokenError> {
    if now_secs >= claims.exp.saturating_add(leeway_secs) {
        return Err(TokenError::Expired);
    }
    if claims.ttl_secs() > max_ttl_secs {
        return Err(TokenError::TtlTooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::keyring::SigningKey;
    use crate::gate::{Role, Verb};

    fn ring() -> Keyring {
        Keyring::new(SigningKey::new("t1", [7; 32]).unwrap(), vec![]).unwrap()
    }

    fn claims() -> Claims {
        Claims {
            sub: "observer".into(),
            role: Role::Observer,
            verbs: vec![Verb::ReadTask],
            task: None,
            attempt: None,
            sid: None,
            iat: 100,
            exp: 200,
            jti: "0123456789abcdef0123456789abcdef".into(),
        }
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let ring = ring();
        let token = encode(&ring, &claims()).unwrap();
        assert!(token.expose().starts_with("swc1.t1."));
        assert_eq!(token.expose().split('.').count(), 4);
        assert_eq!(decode(token.expose().as_bytes(), &ring).unwrap(), claims());
        let debug = format!("{token:?}");
        assert!(!debug.contains(token.expose()) && debug.contains(&token.fingerprint()));
    }

    #[test]
    fn encode_refuses_invalid_or_oversized_claims() {
        let mut bad = claims();
        bad.jti = "short".into();
        assert!(matches!(
            encode(&ring(), &bad),
            Err(TokenError::BadClaims(_))
        ));
        // 128 control characters escape to 768 JSON bytes: still fits.
        let mut big = claims();
        big.sub = "\u{1}".repeat(128);
        let token = encode(&ring(), &big).unwrap();
        assert!(token.expose().len() <= MAX_TOKEN_BYTES);
        assert_eq!(decode(token.expose().as_bytes(), &ring()).unwrap(), big);
    }

    #[test]
    fn lifetime_bounds() {
        let c = claims();
        assert!(check_lifetime(&c, 204, 5, 100).is_ok());
        assert!(matches!(
            check_lifetime(&c, 205, 5, 100),
            Err(TokenError::Expired)
        ));
        assert!(matches!(
            check_lifetime(&c, 200, 0, 100),
            Err(TokenError::Expired)
        ));
        assert!(matches!(
            check_lifetime(&c, 150, 5, 99),
            Err(TokenError::TtlTooLong)
        ));
        let mut far = c.clone();
        far.exp = u64::MAX;
        assert!(matches!(
            check_lifetime(&far, u64::MAX - 1, 5, 100),
            Err(TokenError::TtlTooLong)
        ));
    }

    #[test]
    fn base64_engine_is_strict() {
        let mut out = [0u8; 8];
        assert!(BASE64.decode_slice("AAA=", &mut out).is_err());
        assert!(
            BASE64.decode_slice("AB", &mut out).is_err(),
            "trailing bits"
        );
        assert_eq!(BASE64.decode_slice("AA", &mut out).unwrap(), 1);
        assert!(
            BASE64.decode_slice("A+", &mut out).is_err(),
            "standard alphabet"
        );
        assert_eq!(BASE64.decode_slice("_w", &mut out).unwrap(), 1);
    }
}
