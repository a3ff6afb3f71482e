//! Errors of the auth module: `TokenError` for anything a presented or minted
//! credential can get wrong, `KeyringError` for key ids and the keys file.

use std::io;
use std::path::PathBuf;

use crate::auth::claims::ClaimsError;
use crate::error_code::ErrorCode;
use crate::gate::{GateError, Role};

/// Why a credential was refused or could not be minted.
///
/// Variants are the precise, internal reasons (see `reason`); clients only ever
/// see `public_code`. Verification (docs/security.md, Verification) fails with the first failing
/// step, in this order: `TooLong`, `Malformed`, `BadPrefix`, `UnknownKid`,
/// `BadEncoding`, `BadSignature`, `BadClaims`, `Expired`, `TtlTooLong`,
/// `Forbidden`.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("credential is longer than {} bytes", crate::auth::MAX_TOKEN_BYTES)]
    TooLong,
    #[error("token is not four non-empty dot-separated fields with a valid key id")]
    Malformed,
    #[error("token does not start with `swc1`")]
    BadPrefix,
    #[error("token key id is not in the keyring")]
    UnknownKid,
    #[error("token field is not strict unpadded base64url")]
    BadEncoding,
    #[error("token tag does not verify")]
    BadSignature,
    #[error("token claims are invalid")]
    BadClaims(#[from] ClaimsError),
    #[error("token has expired")]
    Expired,
    #[error("token lifetime (exp - iat) exceeds the maximum")]
    TtlTooLong,
    #[error("the gate refuses this request")]
    Forbidden(#[from] GateError),
    #[error("worker handle is not `wh-` + 32 lowercase hex")]
    BadHandle,
    #[error("worker handle is not known")]
    UnknownHandle,
    #[error("session secret is not `sws-` + 64 lowercase hex")]
    BadSecret,
    #[error("role `{0}` cannot be minted as a capability token")]
    NotMintable(Role),
}

impl TokenError {
    /// The only thing a client learns: `token_expired` for an expired token,
    /// `forbidden` for a gate refusal, `unauthorized` for everything else.
    pub fn public_code(&self) -> ErrorCode {
        match self {
            TokenError::Expired => ErrorCode::TokenExpired,
            TokenError::Forbidden(_) => ErrorCode::Forbidden,
            _ => ErrorCode::Unauthorized,
        }
    }

    /// The precise reason, stable and low-cardinality: for metrics labels and
    /// server-side logs (next to the credential's fingerprint), never for
    /// clients.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::TooLong => "too_long",
            TokenError::Malformed => "malformed",
            TokenError::BadPrefix => "bad_prefix",
            TokenError::UnknownKid => "unknown_kid",
            TokenError::BadEncoding => "bad_encoding",
            TokenError::BadSignature => "bad_signature",
            TokenError::BadClaims(_) => "bad_claims",
            TokenError::Expired => "expired",
            TokenError::TtlTooLong => "ttl_too_long",
            TokenError::Forbidden(_) => "forbidden",
            TokenError::BadHandle => "bad_handle",
            TokenError::UnknownHandle => "unknown_handle",
            TokenError::BadSecret => "bad_secret",
            TokenError::NotMintable(_) => "not_mintable",
        }
    }
}

/// A key id, key or keys file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("invalid key id {kid:?}: expected 1 to 16 characters of [a-z0-9-]")]
    BadKid { kid: String },
    #[error("key id {kid:?} appears more than once in the keyring")]
    DuplicateKid { kid: String },
    #[error("key id {kid:?} is not in the keyring")]
    UnknownKid { kid: String },
    #[error("key id {kid:?} is the current key and cannot be retired")]
    RetireCurrent { kid: String },
    #[error("key {kid:?} is not 32 bytes in strict unpadded base64url")]
    BadKey { kid: String },
    #[error("keys file {} has unsupported version {version} (expected 1)", path.display())]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("keys file {} is not valid: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot read keys file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write keys file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
