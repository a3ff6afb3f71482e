//! Credentials: capability tokens, their keyring, worker handles and session
//! secrets (docs/security.md).
//!
//! A capability token (`swc1.<kid>.<payload>.<tag>`) is verified from its own
//! bytes plus the keyring: `token::decode` runs verification steps 1–4 as a pure
//! function, and `TokenAuthority` adds the clock (step 5), the TTL bound and the
//! gate (step 6). Step 7, binding to a task and its current attempt, belongs to
//! the engine, which reads the returned `Claims`.
//!
//! Nothing here ever formats a secret: keys, tokens, handles and session
//! secrets are redacted in `Debug`, and the only thing to log about a
//! credential is its `fingerprint`. Every failure carries a precise `reason`
//! for logs and metrics, while `public_code` collapses it to what a client may
//! learn (`unauthorized`, `token_expired` or `forbidden`).

mod authority;
mod claims;
mod error;
mod fingerprint;
mod handle;
mod keyring;
pub mod token;

pub use authority::{
    AuthorityConfig, MAX_LEEWAY_SECS, MintedToken, POOL_SUB_PREFIX, TokenAuthority, pool_agents,
};
pub use claims::{Claims, ClaimsError, JTI_HEX_LEN, MAX_SUB_BYTES, MAX_VERBS};
pub use error::{KeyringError, TokenError};
pub use fingerprint::fingerprint;
pub use handle::{
    HANDLE_PREFIX, SECRET_PREFIX, SessionSecret, WorkerHandle, digests_equal, looks_like_handle,
    looks_like_token,
};
pub use keyring::{KEY_BYTES, Keyring, SigningKey};
pub use token::{MAX_TOKEN_BYTES, SecretToken, TOKEN_PREFIX};

/// Overwrites a string's bytes before its memory is freed (best effort: copies
/// made earlier, by the allocator or by callers, are out of reach).
pub(crate) fn wipe_string(value: &mut String) {
    let mut bytes = std::mem::take(value).into_bytes();
    bytes.fill(0);
    std::hint::black_box(&bytes);
}
