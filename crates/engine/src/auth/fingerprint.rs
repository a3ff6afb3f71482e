//! Credential fingerprints: the only form in which a token, handle or secret
//! may appear in logs.

use sha2::{Digest, Sha256};

use crate::ids::encode_lower_hex;

/// Hex digits in a fingerprint (48 bits of SHA-256).
const FINGERPRINT_HEX: usize = 12;

/// The first 12 lowercase hex digits of SHA-256 over the credential's bytes.
/// Enough to correlate log lines, far too little to recover or guess it.
pub fn fingerprint(credential: impl AsRef<[u8]>) -> String {
    let digest = Sha256::digest(credential.as_ref());
    let mut hex = [0u8; FINGERPRINT_HEX];
    encode_lower_hex(&digest[..FINGERPRINT_HEX / 2], &mut hex);
    hex.iter().map(|b| char::from(*b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_sha256_prefix() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223...
        assert_eq!(fingerprint("abc"), "ba7816bf8f01");
        assert_eq!(fingerprint(b"abc".as_slice()), "ba7816bf8f01");
        assert_eq!(fingerprint(""), "e3b0c44298fc");
    }
}
