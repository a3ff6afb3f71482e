//! The signing keyring (docs/security.md, Keyring): one `current` key that mints, any number of
//! `previous` keys that still verify until retired, and the `keys.json` file.
//!
//! Each key keeps an HMAC-SHA256 state that has already absorbed the key and
//! the fixed message prefix `"swarm-captoken\n" || "swc1." || kid || "."`, so
//! signing or verifying a token only clones that state and feeds the payload.
//!
//! The file is JSON, `{"version":1,"current":{"kid":..,"secret":..},
//! "previous":[..]}`, with each secret as 32 bytes in unpadded base64url. It
//! is written to a temporary file in the same directory (mode 0600 on unix),
//! synced, and renamed over the old one, so readers see the old or the new
//! keyring, never a torn one.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::auth::error::KeyringError;
use crate::auth::token::{BASE64, MAC_DOMAIN, TOKEN_PREFIX};
use crate::auth::wipe_string;
use crate::ids::encode_lower_hex;

/// Size of every key, in bytes (256 bits).
pub const KEY_BYTES: usize = 32;

/// Longest key id, in bytes.
const MAX_KID_BYTES: usize = 16;

/// One HMAC key and its id.
#[derive(Clone)]
pub struct SigningKey {
    kid: String,
    secret: KeyBytes,
    /// Keyed HMAC state that has absorbed the domain, prefix and kid.
    prepared: Hmac<Sha256>,
}

/// Raw key bytes, overwritten when dropped (best effort: the prepared HMAC
/// state derived from them is not).
#[derive(Clone)]
struct KeyBytes([u8; KEY_BYTES]);

impl Drop for KeyBytes {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

/// The keys this daemon signs and verifies with.
#[derive(Clone)]
pub struct Keyring {
    current: SigningKey,
    /// Newest first.
    previous: Vec<SigningKey>,
}

/// Whether `kid` matches `[a-z0-9-]{1,16}`.
pub(crate) fn is_valid_kid(kid: &[u8]) -> bool {
    (1..=MAX_KID_BYTES).contains(&kid.len())
        && kid
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

impl SigningKey {
    /// A key from its id and bytes.
    ///
    /// Errors: `BadKid` unless `kid` matches `[a-z0-9-]{1,16}`.
    pub fn new(kid: &str, secret: [u8; KEY_BYTES]) -> Result<Self, KeyringError> {
        if !is_valid_kid(kid.as_bytes()) {
            return Err(KeyringError::BadKid {
                kid: kid.to_owned(),
            });
        }
        let secret = KeyBytes(secret);
        // HMAC accepts keys of any length, so keying cannot fail.
        let mut prepared =
            <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).map_err(|_| KeyringError::BadKey {
                kid: kid.to_owned(),
            })?;
        prepared.update(MAC_DOMAIN);
        prepared.update(TOKEN_PREFIX.as_bytes());
        prepared.update(b".");
        prepared.update(kid.as_bytes());
        prepared.update(b".");
        Ok(Self {
            kid: kid.to_owned(),
            secret,
            prepared,
        })
    }

    /// A fresh key from the OS RNG.
    pub fn generate(kid: &str) -> Result<Self, KeyringError> {
        let mut secret = [0u8; KEY_BYTES];
        OsRng.fill_bytes(&mut secret);
        let key = Self::new(kid, secret);
        secret.fill(0);
        key
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A key for another use, derived from this one under `label` (HMAC of
    /// the label), so no second secret has to be stored: wait tokens are
    /// keyed with `derive("flow wait tokens")`.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret.0)
            .expect("HMAC takes any key length");
        mac.update(b"swarmd derived key\0");
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The MAC state for one token: it has absorbed everything before the
    /// payload, so the caller feeds only the payload.
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        self.prepared.clone()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl Keyring {
    /// A keyring with `current` minting and `previous` (newest first) verifying.
    ///
    /// Errors: `DuplicateKid` if two keys share an id.
    pub fn new(current: SigningKey, previous: Vec<SigningKey>) -> Result<Self, KeyringError> {
        let ring = Self { current, previous };
        let kids: Vec<&str> = ring.kids().collect();
        for (i, kid) in kids.iter().enumerate() {
            if kids[..i].contains(kid) {
                return Err(KeyringError::DuplicateKid {
                    kid: (*kid).to_owned(),
                });
            }
        }
        Ok(ring)
    }

    /// A keyring with one fresh current key.
    pub fn generate() -> Self {
        Self {
            current: fresh_key(&[]),
            previous: Vec::new(),
        }
    }

    /// The key that mints.
    pub fn current(&self) -> &SigningKey {
        &self.current
    }

    /// The id of the key that mints.
    pub fn current_kid(&self) -> &str {
        &self.current.kid
    }

    /// Ids of the verify-only keys, newest first.
    pub fn previous_kids(&self) -> impl Iterator<Item = &str> {
        self.previous.iter().map(|key| key.kid.as_str())
    }

    /// Every key id: current first, then previous ones.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.current.kid.as_str()).chain(self.previous_kids())
    }

    /// The key with id `kid`, current or previous.
    pub fn get(&self, kid: &[u8]) -> Option<&SigningKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.kid.as_bytes() == kid)
    }

    /// Makes a fresh key (new random id) current; the old current key becomes
    /// the newest previous key. Returns the new id.
    pub fn rotate(&mut self) -> &str {
        let taken: Vec<String> = self.kids().map(str::to_owned).collect();
        let fresh = fresh_key(&taken);
        let old = std::mem::replace(&mut self.current, fresh);
        self.previous.insert(0, old);
        &self.current.kid
    }

    /// Drops a previous key: tokens signed with it stop verifying.
    ///
    /// Errors: `RetireCurrent` for the current key, `UnknownKid` otherwise
    /// when no key has that id.
    pub fn retire(&mut self, kid: &str) -> Result<(), KeyringError> {
        if self.current.kid == kid {
            return Err(KeyringError::RetireCurrent {
                kid: kid.to_owned(),
            });
        }
        let before = self.previous.len();
        self.previous.retain(|key| key.kid != kid);
        if self.previous.len() == before {
            return Err(KeyringError::UnknownKid {
                kid: kid.to_owned(),
            });
        }
        Ok(())
    }

    /// Reads a keys file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, KeyringError> {
        let path = path.as_ref();
        let mut bytes = fs::read(path).map_err(|source| KeyringError::Read {
            path: path.to_owned(),
            source,
        })?;
        let ring = Self::from_json(&bytes, path);
        bytes.fill(0);
        ring
    }

    /// Writes the keys file atomically, readable by its owner only.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), KeyringError> {
        let path = path.as_ref();
        let file = KeyFile {
            version: 1,
            current: KeyEntry::from_key(&self.current),
            previous: self.previous.iter().map(KeyEntry::from_key).collect(),
        };
        let mut json = serde_json::to_vec_pretty(&file).map_err(|source| KeyringError::Parse {
            path: path.to_owned(),
            source,
        })?;
        json.push(b'\n');
        let written = write_atomically(path, &json).map_err(|source| KeyringError::Write {
            path: path.to_owned(),
            source,
        });
        json.fill(0);
        written
    }

    /// Loads the keys file, or creates it with a fresh keyring when it does
    /// not exist. The parent directory must exist.
    pub fn load_or_create(path: impl AsRef<Path>) -> Result<Self, KeyringError> {
        let path = path.as_ref();
        match Self::load(path) {
            Err(KeyringError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                let ring = Self::generate();
                ring.save(path)?;
                Ok(ring)
            }
            other => other,
        }
    }

    fn from_json(bytes: &[u8], path: &Path) -> Result<Self, KeyringError> {
        let file: KeyFile =
            serde_json::from_slice(bytes).map_err(|source| KeyringError::Parse {
                path: path.to_owned(),
                source,
            })?;
        if file.version != 1 {
            return Err(KeyringError::UnsupportedVersion {
                path: path.to_owned(),
                version: file.version,
            });
        }
        let current = file.current.to_key()?;
        let previous = file
            .previous
            .iter()
            .map(KeyEntry::to_key)
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(current, previous)
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current)
            .field("previous", &self.previous)
            .finish()
    }
}

/// A fresh key whose random id `k` + 8 hex digits is not in `taken`.
fn fresh_key(taken: &[String]) -> SigningKey {
    loop {
        let mut bytes = [0u8; 4];
        OsRng.fill_bytes(&mut bytes);
        let mut kid = [b'k'; 9];
        encode_lower_hex(&bytes, &mut kid[1..]);
        let kid: String = kid.iter().map(|b| char::from(*b)).collect();
        if taken.contains(&kid) {
            continue;
        }
        // The id is 9 characters of [a-z0-9], so `generate` cannot refuse it.
        if let Ok(key) = SigningKey::generate(&kid) {
            return key;
        }
    }
}

/// The keys file, as stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    version: u32,
    current: KeyEntry,
    #[serde(default)]
    previous: Vec<KeyEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    kid: String,
    secret: String,
}

impl KeyEntry {
    fn from_key(key: &SigningKey) -> Self {
        Self {
            kid: key.kid.clone(),
            secret: BASE64.encode(key.secret.0),
        }
    }

    fn to_key(&self) -> Result<SigningKey, KeyringError> {
        let mut secret = [0u8; KEY_BYTES];
        let bad_key = || KeyringError::BadKey {
            kid: self.kid.clone(),
        };
        match BASE64.decode_slice(self.secret.as_bytes(), &mut secret) {
            Ok(KEY_BYTES) => {}
            _ => return Err(bad_key()),
        }
        let key = SigningKey::new(&self.kid, secret);
        secret.fill(0);
        key
    }
}

impl Drop for KeyEntry {
    fn drop(&mut self) {
        wipe_string(&mut self.secret);
    }
}

/// Writes `bytes` to a fresh temporary file next to `path` (mode 0600 on
/// unix), syncs it, renames it over `path` and syncs the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "keys file path has no file name",
        )
    })?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut nonce = [0u8; 4];
    OsRng.fill_bytes(&mut nonce);
    let mut suffix = [0u8; 8];
    encode_lower_hex(&nonce, &mut suffix);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp-");
    tmp_name.push(String::from_utf8_lossy(&suffix).as_ref());
    let tmp = dir.join(tmp_name);

    let result = write_new_private(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir(&dir)
}

fn write_new_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // The umask can only narrow the creation mode; set it exactly anyway.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes a rename in `dir` durable (unix); a no-op elsewhere.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_key_bytes() {
        let secret = [0xabu8; KEY_BYTES];
        let ring = Keyring::new(SigningKey::new("k1", secret).unwrap(), vec![]).unwrap();
        let text = format!("{ring:?} {:?}", ring.current());
        assert!(text.contains("k1") && text.contains("<redacted>"), "{text}");
        let encoded = BASE64.encode(secret);
        for needle in ["ab, ab", "171", "abab", encoded.as_str(), "0xab"] {
            assert!(!text.contains(needle), "{needle} in {text}");
        }
    }

    #[test]
    fn kid_form_is_enforced() {
        for good in ["a", "k-2024-01", "0123456789abcdef"] {
            assert!(SigningKey::new(good, [1; KEY_BYTES]).is_ok(), "{good}");
        }
        for bad in ["", "K1", "k_1", "k.1", "0123456789abcdefg", "ké"] {
            assert!(
                matches!(
                    SigningKey::new(bad, [1; KEY_BYTES]),
                    Err(KeyringError::BadKid { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn rotate_and_retire() {
        let mut ring = Keyring::generate();
        let first = ring.current_kid().to_owned();
        assert!(is_valid_kid(first.as_bytes()));
        let second = ring.rotate().to_owned();
        assert_ne!(first, second);
        assert_eq!(ring.current_kid(), second);
        assert_eq!(ring.previous_kids().collect::<Vec<_>>(), [first.as_str()]);
        assert!(ring.get(first.as_bytes()).is_some());
        assert!(matches!(
            ring.retire(&second),
            Err(KeyringError::RetireCurrent { .. })
        ));
        assert!(matches!(
            ring.retire("nope"),
            Err(KeyringError::UnknownKid { .. })
        ));
        ring.retire(&first).unwrap();
        assert!(ring.get(first.as_bytes()).is_none());
        assert_eq!(ring.kids().count(), 1);
    }

    #[test]
    fn duplicate_kids_are_refused() {
        let a = SigningKey::new("same", [1; KEY_BYTES]).unwrap();
        let b = SigningKey::new("same", [2; KEY_BYTES]).unwrap();
        assert!(matches!(
            Keyring::new(a, vec![b]),
            Err(KeyringError::DuplicateKid { .. })
        ));
    }

    #[test]
    fn bad_files_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let cases = [
            ("not json", "parse"),
            (
                r#"{"version":2,"current":{"kid":"a","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#,
                "version",
            ),
            (
                r#"{"version":1,"current":{"kid":"a","secret":"AAAA"}}"#,
                "key",
            ),
            (
                r#"{"version":1,"current":{"kid":"a","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}"#,
                "key",
            ),
            (
                r#"{"version":1,"current":{"kid":"A","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#,
                "kid",
            ),
            (
                r#"{"version":1,"current":{"kid":"a","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},"extra":1}"#,
                "parse",
            ),
        ];
        for (content, expected) in cases {
            fs::write(&path, content).unwrap();
            let err = Keyring::load(&path).unwrap_err();
            let kind = match err {
                KeyringError::Parse { .. } => "parse",
                KeyringError::UnsupportedVersion { .. } => "version",
                KeyringError::BadKey { .. } => "key",
                KeyringError::BadKid { .. } => "kid",
                other => panic!("unexpected {other}"),
            };
            assert_eq!(kind, expected, "{content}");
        }
        let missing = Keyring::load(dir.path().join("absent.json")).unwrap_err();
        assert!(matches!(missing, KeyringError::Read { .. }));
    }
}
