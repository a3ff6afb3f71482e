//! Wait tokens: a token that answers one wait of one run and nothing else,
//! HMAC-SHA256 of the run and wait under a key the daemon holds, so the
//! run's owner can be shown it again at any time while the store keeps only
//! its digest.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What every wait token starts with.
pub const PREFIX: &str = "swt1.";

/// The token of wait `key` of run `run`.
pub fn wait_token(secret: &[u8; 32], run: &str, key: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"swarmd wait token\0");
    mac.update(run.as_bytes());
    mac.update(b"\0");
    mac.update(key.as_bytes());
    format!("{PREFIX}{}", hex(&mac.finalize().into_bytes()))
}

/// Hex SHA-256 of a token, as the journal keeps it.
pub fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Whether `token` is the token of wait `key` of run `run`, compared in
/// constant time.
pub fn verify(secret: &[u8; 32], run: &str, key: &str, token: &str) -> bool {
    let Some(hex_part) = token.strip_prefix(PREFIX) else {
        return false;
    };
    let Some(bytes) = unhex(hex_part) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"swarmd wait token\0");
    mac.update(run.as_bytes());
    mac.update(b"\0");
    mac.update(key.as_bytes());
    mac.verify_slice(&bytes).is_ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_answers_its_own_wait_only() {
        let secret = [7u8; 32];
        let token = wait_token(&secret, "R-1", "/body/children/2");
        assert!(verify(&secret, "R-1", "/body/children/2", &token));
        assert!(!verify(&secret, "R-1", "/body/children/3", &token));
        assert!(!verify(&secret, "R-2", "/body/children/2", &token));
        assert!(!verify(&[8u8; 32], "R-1", "/body/children/2", &token));
        assert!(!verify(&secret, "R-1", "/body/children/2", "swt1.zz"));
        assert_eq!(digest(&token).len(), 64);
    }
}
