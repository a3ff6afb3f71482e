//! Capability tokens end to end: the golden vectors in
//! `tests/vectors/captoken_v1.json`, mutation and random-input rejection, key
//! rotation and the keys file.

#[path = "vectors/generate.rs"]
mod generate;

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use swarmd_engine::ErrorCode;
use swarmd_engine::auth::{
    AuthorityConfig, Claims, Keyring, MAX_TOKEN_BYTES, SigningKey, TokenAuthority, TokenError,
    token,
};
use swarmd_engine::clock::ManualClock;
use swarmd_engine::gate::{Role, Verb};
use swarmd_engine::ids::{SessionId, TaskId};

use generate::{NOW_SECS, VectorFile};

fn vector_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/captoken_v1.json")
}

fn load_vectors() -> VectorFile {
    let text = std::fs::read_to_string(vector_path()).expect("vector file is committed");
    serde_json::from_str(&text).expect("vector file parses")
}

fn key_from_hex(kid: &str, hex: &str) -> SigningKey {
    assert_eq!(hex.len(), 64);
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    SigningKey::new(kid, bytes.try_into().unwrap()).unwrap()
}

fn vector_keyring(file: &VectorFile) -> Keyring {
    let previous = file
        .previous
        .iter()
        .map(|key| key_from_hex(&key.kid, &key.secret_hex))
        .collect();
    Keyring::new(
        key_from_hex(&file.current.kid, &file.current.secret_hex),
        previous,
    )
    .unwrap()
}

fn vector_authority(file: &VectorFile) -> TokenAuthority {
    TokenAuthority::new(
        vector_keyring(file),
        Arc::new(ManualClock::at_secs(file.now_secs)),
        AuthorityConfig {
            leeway_secs: file.leeway_secs,
            max_ttl_secs: file.max_ttl_secs,
        },
    )
}

fn check(auth: &TokenAuthority, token: &str, verb: Option<&str>) -> Result<Claims, TokenError> {
    match verb {
        Some(verb) => auth.verify_for(token, verb.parse::<Verb>().unwrap()),
        None => auth.verify(token),
    }
}

#[test]
#[ignore = "writes tests/vectors/captoken_v1.json"]
fn write_vectors() {
    std::fs::write(vector_path(), generate::render(&generate::build())).unwrap();
}

#[test]
fn vector_file_is_current() {
    let committed = std::fs::read_to_string(vector_path()).unwrap();
    assert!(
        committed == generate::render(&generate::build()),
        "captoken_v1.json differs from tests/vectors/generate.rs; regenerate it"
    );
}

#[test]
fn valid_vectors_verify_to_their_claims() {
    let file = load_vectors();
    let auth = vector_authority(&file);
    let ring = vector_keyring(&file);
    assert!(file.valid.len() >= 8);
    for vector in &file.valid {
        let expected: Claims = serde_json::from_value(vector.claims.clone()).unwrap();
        let claims = check(&auth, &vector.token, vector.verb.as_deref())
            .unwrap_or_else(|err| panic!("{}: {err} ({})", vector.name, err.reason()));
        assert_eq!(claims, expected, "{}", vector.name);
        assert_eq!(
            token::decode(vector.token.as_bytes(), &ring).unwrap(),
            expected
        );

        // The tag is exactly the documented HMAC (docs/security.md), recomputed without engine
        // code.
        let fields: Vec<&str> = vector.token.split('.').collect();
        let secret = if fields[1] == file.current.kid {
            generate::current_secret()
        } else {
            generate::previous_secret()
        };
        assert_eq!(
            generate::spec_tag(&secret, fields[0], fields[1], fields[2]),
            fields[3],
            "{}",
            vector.name
        );

        if vector.canonical {
            let minted = auth.mint(&expected).unwrap();
            assert_eq!(minted.expose(), vector.token, "{}", vector.name);
        }
    }
}

#[test]
fn invalid_vectors_fail_with_their_reason() {
    let file = load_vectors();
    let auth = vector_authority(&file);
    assert!(file.invalid.len() >= 30);
    for vector in &file.invalid {
        let err = match check(&auth, &vector.token, vector.verb.as_deref()) {
            Ok(claims) => panic!("{} was accepted: {claims:?}", vector.name),
            Err(err) => err,
        };
        assert_eq!(err.reason(), vector.reason, "{}: {err}", vector.name);
        assert_eq!(
            err.public_code().as_str(),
            vector.public_code,
            "{}",
            vector.name
        );
    }
}

#[test]
fn vectors_cover_the_required_cases() {
    let file = load_vectors();
    let names: Vec<&str> = file
        .valid
        .iter()
        .map(|v| v.name.as_str())
        .chain(file.invalid.iter().map(|v| v.name.as_str()))
        .collect();
    for required in [
        "unknown_kid",
        "wrong_prefix",
        "tag_truncated_by_one_char",
        "tag_padded",
        "payload_padded",
        "tag_trailing_bits",
        "payload_trailing_bits",
        "extra_claim",
        "string_exp",
        "expired_exactly_at_exp_plus_leeway",
        "last_second_before_exp_plus_leeway",
        "oversize_2049_bytes",
        "exactly_2048_bytes",
        "worker_asks_spawn_task",
        "three_fields",
        "five_fields",
        "empty_kid",
        "empty_payload",
        "empty_tag",
    ] {
        assert!(names.contains(&required), "missing vector {required}");
    }
    let oversize = file
        .invalid
        .iter()
        .find(|v| v.name == "oversize_2049_bytes")
        .unwrap();
    assert_eq!(oversize.token.len(), MAX_TOKEN_BYTES + 1);
    let max = file
        .valid
        .iter()
        .find(|v| v.name == "exactly_2048_bytes")
        .unwrap();
    assert_eq!(max.token.len(), MAX_TOKEN_BYTES);
}

/// Every token obtained by changing one byte to any other value, dropping a
/// suffix, or inserting one byte must be refused.
fn assert_no_mutation_verifies(auth: &TokenAuthority, token: &str) {
    let original = token.as_bytes();
    assert!(auth.verify_bytes(original).is_ok());
    let mut accepted = Vec::new();
    let mut tried = 0usize;
    let mut buf = original.to_vec();
    for i in 0..original.len() {
        for value in 0..=255u8 {
            if value == original[i] {
                continue;
            }
            buf[i] = value;
            tried += 1;
            if auth.verify_bytes(&buf).is_ok() {
                accepted.push((i, value));
            }
        }
        buf[i] = original[i];
    }
    for len in 0..original.len() {
        tried += 1;
        if auth.verify_bytes(&original[..len]).is_ok() {
            accepted.push((len, 0));
        }
    }
    for i in 0..=original.len() {
        for value in [b'.', b'A', b'=', b' ', b'-'] {
            let mut inserted = original.to_vec();
            inserted.insert(i, value);
            tried += 1;
            if auth.verify_bytes(&inserted).is_ok() {
                accepted.push((i, value));
            }
        }
    }
    assert!(tried > 255 * original.len());
    assert!(accepted.is_empty(), "accepted mutations: {accepted:?}");
}

#[test]
fn every_byte_mutation_is_rejected() {
    let file = load_vectors();
    let auth = vector_authority(&file);
    for name in ["worker_token", "senior_token_with_sid"] {
        let vector = file.valid.iter().find(|v| v.name == name).unwrap();
        assert_no_mutation_verifies(&auth, &vector.token);
    }
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys with the vector kids but other secrets: a forger who knows the ids.
fn wrong_keyring() -> Keyring {
    Keyring::new(SigningKey::new("vec-1", [0x42; 32]).unwrap(), vec![]).unwrap()
}

fn arb_claims() -> impl Strategy<Value = Claims> {
    (
        "[ -~]{1,128}",
        0..Role::ALL.len(),
        any::<u16>(),
        proptest::option::of(any::<[u8; 16]>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<[u8; 16]>()),
        (NOW_SECS - 1000)..(NOW_SECS + 1000),
        0..=generate::MAX_TTL_SECS,
        any::<[u8; 16]>(),
    )
        .prop_map(
            |(sub, role, verb_bits, task, attempt, sid, iat, ttl, jti)| Claims {
                sub,
                role: Role::ALL[role],
                verbs: Verb::ALL
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| verb_bits & (1 << i) != 0)
                    .map(|(_, verb)| verb)
                    .collect(),
                task: task.map(|b| TaskId::from_uuid(uuid::Uuid::from_bytes(b))),
                attempt,
                sid: sid.map(|b| SessionId::from_uuid(uuid::Uuid::from_bytes(b))),
                iat,
                exp: iat + ttl,
                jti: jti.iter().map(|b| format!("{b:02x}")).collect(),
            },
        )
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn random_bytes_are_rejected(input in proptest::collection::vec(any::<u8>(), 0..2200)) {
        let auth = vector_authority(load_vectors_cached());
        prop_assert!(auth.verify_bytes(&input).is_err());
    }

    #[test]
    fn random_strings_are_rejected(input in "\\PC{0,300}") {
        let auth = vector_authority(load_vectors_cached());
        prop_assert!(auth.verify(&input).is_err());
    }

    #[test]
    fn random_fields_with_valid_prefix_and_kid_are_rejected(
        kid in prop_oneof![Just("vec-1"), Just("old")],
        payload in "[A-Za-z0-9_-]{1,500}",
        tag in prop_oneof!["[A-Za-z0-9_-]{43}", "[A-Za-z0-9_-]{1,60}"],
    ) {
        let auth = vector_authority(load_vectors_cached());
        let forged = format!("swc1.{kid}.{payload}.{tag}");
        prop_assert!(auth.verify(&forged).is_err());
    }

    #[test]
    fn claims_signed_with_a_wrong_key_are_rejected(claims in arb_claims(), verb in 0..Verb::ALL.len()) {
        let file = load_vectors_cached();
        let ring = vector_keyring(file);
        let auth = vector_authority(file);
        // The claims themselves decode: only the key makes the difference.
        let genuine = token::encode(&ring, &claims).unwrap();
        prop_assert_eq!(token::decode(genuine.expose().as_bytes(), &ring).unwrap(), claims.clone());

        let forged = token::encode(&wrong_keyring(), &claims).unwrap();
        let err = token::decode(forged.expose().as_bytes(), &ring).unwrap_err();
        prop_assert_eq!(err.reason(), "bad_signature");
        prop_assert!(auth.verify(forged.expose()).is_err());
        prop_assert!(auth.verify_for(forged.expose(), Verb::ALL[verb]).is_err());
    }

    #[test]
    fn random_payloads_signed_with_a_wrong_key_are_rejected(payload in proptest::collection::vec(any::<u8>(), 1..1400)) {
        use base64::Engine as _;
        let auth = vector_authority(load_vectors_cached());
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&payload);
        let tag = generate::spec_tag(&[0x42; 32], "swc1", "vec-1", &encoded);
        let forged = format!("swc1.vec-1.{encoded}.{tag}");
        prop_assert!(auth.verify(&forged).is_err());
    }
}

/// The vector file, parsed once per test binary.
fn load_vectors_cached() -> &'static VectorFile {
    static FILE: std::sync::OnceLock<VectorFile> = std::sync::OnceLock::new();
    FILE.get_or_init(load_vectors)
}

#[test]
fn rotation_keeps_old_tokens_until_the_old_key_is_retired() {
    let clock = Arc::new(ManualClock::at_secs(NOW_SECS));
    let auth = TokenAuthority::new(Keyring::generate(), clock, AuthorityConfig::default());
    let old_kid = auth.keyring().current_kid().to_owned();
    let task = TaskId::new();
    let old = auth.mint_worker(task, 1, 600).unwrap();
    assert!(old.token.expose().starts_with(&format!("swc1.{old_kid}.")));

    let mut ring = (*auth.keyring()).clone();
    let new_kid = ring.rotate().to_owned();
    assert_ne!(new_kid, old_kid);
    auth.reload(ring.clone());

    assert_eq!(auth.verify(old.token.expose()).unwrap(), old.claims);
    let new = auth.mint_worker(task, 2, 600).unwrap();
    assert!(new.token.expose().starts_with(&format!("swc1.{new_kid}.")));
    assert_eq!(auth.verify(new.token.expose()).unwrap(), new.claims);

    ring.retire(&old_kid).unwrap();
    auth.reload(ring);
    let err = auth.verify(old.token.expose()).unwrap_err();
    assert_eq!(
        (err.reason(), err.public_code()),
        ("unknown_kid", ErrorCode::Unauthorized)
    );
    assert!(auth.verify(new.token.expose()).is_ok());

    // A keyring that never held these keys refuses both.
    let stranger = TokenAuthority::new(
        Keyring::generate(),
        Arc::new(ManualClock::at_secs(NOW_SECS)),
        AuthorityConfig::default(),
    );
    assert!(stranger.verify(new.token.expose()).is_err());
}

#[cfg(unix)]
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keys_file_round_trips_with_owner_only_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.json");
    let clock = Arc::new(ManualClock::at_secs(NOW_SECS));

    let first = Keyring::generate();
    let auth = TokenAuthority::new(first.clone(), clock.clone(), AuthorityConfig::default());
    let before_rotation = auth.mint_role(Role::Observer, 600, None).unwrap();
    let mut ring = first;
    ring.rotate();
    ring.save(&path).unwrap();
    #[cfg(unix)]
    assert_eq!(mode_of(&path), 0o600);

    let loaded = Keyring::load(&path).unwrap();
    assert_eq!(
        loaded.kids().collect::<Vec<_>>(),
        ring.kids().collect::<Vec<_>>()
    );
    let from_file = TokenAuthority::new(loaded, clock.clone(), AuthorityConfig::default());
    // The previous key survived the file: old tokens still verify.
    assert!(from_file.verify(before_rotation.token.expose()).is_ok());
    // The current key survived too: both sides accept each other's tokens.
    let original = TokenAuthority::new(ring.clone(), clock.clone(), AuthorityConfig::default());
    let minted = from_file.mint_role(Role::Senior, 60, None).unwrap();
    assert!(original.verify(minted.token.expose()).is_ok());

    // Saving over a loosened file restores 0600 and leaves no temporary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        ring.save(&path).unwrap();
        assert_eq!(mode_of(&path), 0o600);
    }
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1);

    // The file holds the key bytes; Debug of what was loaded does not.
    let text = std::fs::read_to_string(&path).unwrap();
    let debug = format!("{:?}", Keyring::load(&path).unwrap());
    let secret = text
        .split("\"secret\": \"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(secret.len(), 43);
    assert!(!debug.contains(secret), "{debug}");
}

#[test]
fn load_or_create_creates_once_then_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("keys.json");
    assert!(Keyring::load_or_create(&path).is_err(), "parent must exist");
    std::fs::create_dir(dir.path().join("state")).unwrap();

    let created = Keyring::load_or_create(&path).unwrap();
    #[cfg(unix)]
    assert_eq!(mode_of(&path), 0o600);
    let again = Keyring::load_or_create(&path).unwrap();
    assert_eq!(again.current_kid(), created.current_kid());

    let clock = Arc::new(ManualClock::at_secs(NOW_SECS));
    let a = TokenAuthority::new(created, clock.clone(), AuthorityConfig::default());
    let b = TokenAuthority::new(again, clock, AuthorityConfig::default());
    let minted = a.mint_worker(TaskId::new(), 1, 60).unwrap();
    assert!(b.verify(minted.token.expose()).is_ok());
}
