//! Builds the `captoken_v1.json` golden vectors from the format rules alone (docs/security.md,
//! Capability tokens): raw HMAC-SHA256, hand-written JSON and a plain base64 engine, never the
//! engine's own token code. Deterministic: fixed keys, fixed claims, fixed now.
//!
//! Regenerate with
//! `cargo test -p swarmd-engine --test tokens -- --ignored write_vectors`;
//! `vector_file_is_current` fails when the committed file differs.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub(crate) const NOW_SECS: u64 = 1_700_000_000;
pub(crate) const LEEWAY_SECS: u64 = 5;
pub(crate) const MAX_TTL_SECS: u64 = 86_400;

const CURRENT_KID: &str = "vec-1";
const PREVIOUS_KID: &str = "old";
const TASK: &str = "T-018bcfe568007abc8def0123456789ab";
const SID: &str = "S-4f1c2a9be0d34c7f8a6b5d4e3c2b1a09";
const JTI: &str = "0123456789abcdef0123456789abcdef";
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct VectorFile {
    pub description: String,
    pub now_secs: u64,
    pub leeway_secs: u64,
    pub max_ttl_secs: u64,
    pub current: KeyJson,
    pub previous: Vec<KeyJson>,
    pub valid: Vec<ValidVector>,
    pub invalid: Vec<InvalidVector>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyJson {
    pub kid: String,
    pub secret_hex: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidVector {
    pub name: String,
    pub token: String,
    /// The claims the token must decode to.
    pub claims: serde_json::Value,
    /// A verb the gate must allow for this token.
    pub verb: Option<String>,
    /// Whether minting these claims with the current key yields this token
    /// byte for byte (compact JSON in declaration order, current key).
    pub canonical: bool,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct InvalidVector {
    pub name: String,
    pub token: String,
    /// When present, the token is checked with `verify_for(token, verb)`.
    pub verb: Option<String>,
    pub reason: String,
    pub public_code: String,
}

pub(crate) fn current_secret() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

pub(crate) fn previous_secret() -> [u8; 32] {
    std::array::from_fn(|i| 0xa0 + i as u8)
}

fn wrong_secret() -> [u8; 32] {
    std::array::from_fn(|i| 0x55 ^ i as u8)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tag exactly as docs/security.md (Capability tokens) defines it.
pub(crate) fn spec_tag(secret: &[u8], prefix: &str, kid: &str, payload: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap();
    mac.update(b"swarm-captoken\n");
    mac.update(prefix.as_bytes());
    mac.update(b".");
    mac.update(kid.as_bytes());
    mac.update(b".");
    mac.update(payload.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn b64(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text.as_bytes())
}

/// `swc1.<kid>.<payload>.<tag>` over an already encoded payload.
fn signed_raw(secret: &[u8], kid: &str, payload: &str) -> String {
    format!(
        "swc1.{kid}.{payload}.{}",
        spec_tag(secret, "swc1", kid, payload)
    )
}

fn signed(kid: &str, json: &str) -> String {
    let secret = if kid == PREVIOUS_KID {
        previous_secret()
    } else {
        current_secret()
    };
    signed_raw(&secret, kid, &b64(json))
}

/// Compact claims JSON in declaration order, the form the engine mints.
#[allow(clippy::too_many_arguments)]
fn claims_json(
    sub: &str,
    role: &str,
    verbs: &[&str],
    task: Option<&str>,
    attempt: Option<u32>,
    sid: Option<&str>,
    iat: u64,
    exp: u64,
) -> String {
    let quote = |v: Option<&str>| v.map_or("null".to_owned(), |v| format!("\"{v}\""));
    let verbs: Vec<String> = verbs.iter().map(|v| format!("\"{v}\"")).collect();
    format!(
        r#"{{"sub":"{sub}","role":"{role}","verbs":[{}],"task":{},"attempt":{},"sid":{},"iat":{iat},"exp":{exp},"jti":"{JTI}"}}"#,
        verbs.join(","),
        quote(task),
        attempt.map_or("null".to_owned(), |a| a.to_string()),
        quote(sid),
    )
}

const LEAF: [&str; 4] = ["fetch_prompt", "emit_output", "post_result", "heartbeat"];

fn worker_json() -> String {
    claims_json(
        &format!("worker-of-{TASK}"),
        "worker",
        &LEAF,
        Some(TASK),
        Some(1),
        None,
        NOW_SECS - 100,
        NOW_SECS + 1700,
    )
}

fn observer_json(sub: &str) -> String {
    claims_json(
        sub,
        "observer",
        &["read_task", "read_output", "subscribe"],
        None,
        None,
        None,
        NOW_SECS - 10,
        NOW_SECS + 3600,
    )
}

/// Observer claims whose encoded payload has a length that is not a multiple
/// of four, so its last character carries trailing bits.
fn observer_json_with_trailing_bits() -> String {
    let mut sub = "observer".to_owned();
    loop {
        let json = observer_json(&sub);
        if b64(&json).len() & 3 != 0 {
            return json;
        }
        sub.push('x');
    }
}

/// Sets the lowest (trailing, must-be-zero) bit of the last character.
fn set_trailing_bit(encoded: &str) -> String {
    let (head, last) = encoded.split_at(encoded.len() - 1);
    let index = ALPHABET
        .iter()
        .position(|c| *c == last.as_bytes()[0])
        .unwrap();
    assert_eq!(index & 1, 0, "canonical encodings end with a zero bit");
    format!("{head}{}", char::from(ALPHABET[index | 1]))
}

/// Pads the JSON with spaces before its closing brace until the token signed
/// by `kid` is exactly `target` bytes long.
fn padded_to(kid: &str, json: &str, target: usize) -> String {
    let body = json.strip_suffix('}').unwrap();
    for spaces in 0..2000 {
        let candidate = format!("{body}{}}}", " ".repeat(spaces));
        if signed(kid, &candidate).len() == target {
            return signed(kid, &candidate);
        }
    }
    panic!("no padding gives a {target}-byte token for kid {kid}");
}

fn valid(
    name: &str,
    token: String,
    json: &str,
    verb: Option<&str>,
    canonical: bool,
) -> ValidVector {
    ValidVector {
        name: name.into(),
        token,
        claims: serde_json::from_str(json).unwrap(),
        verb: verb.map(str::to_owned),
        canonical,
    }
}

fn invalid(name: &str, token: String, reason: &str, verb: Option<&str>) -> InvalidVector {
    let public_code = match reason {
        "expired" => "token_expired",
        "forbidden" => "forbidden",
        _ => "unauthorized",
    };
    InvalidVector {
        name: name.into(),
        token,
        verb: verb.map(str::to_owned),
        reason: reason.into(),
        public_code: public_code.into(),
    }
}

pub(crate) fn build() -> VectorFile {
    let worker = worker_json();
    let worker_token = signed(CURRENT_KID, &worker);
    let observer = observer_json("observer");
    let senior = claims_json(
        &format!("senior:{SID}"),
        "senior",
        &["read_task", "read_output", "subscribe", "answer"],
        None,
        None,
        Some(SID),
        NOW_SECS,
        NOW_SECS + 600,
    );
    // exp + leeway == now + 1: the last valid second.
    let last_second = claims_json(
        "observer",
        "observer",
        &["read_task"],
        None,
        None,
        None,
        NOW_SECS - 1805,
        NOW_SECS - 4,
    );
    // exp + leeway == now: expired.
    let expired = claims_json(
        "observer",
        "observer",
        &["read_task"],
        None,
        None,
        None,
        NOW_SECS - 1805,
        NOW_SECS - 5,
    );
    let max_ttl = claims_json(
        "observer",
        "observer",
        &["read_task"],
        None,
        None,
        None,
        NOW_SECS,
        NOW_SECS + MAX_TTL_SECS,
    );
    let over_ttl = claims_json(
        "observer",
        "observer",
        &["read_task"],
        None,
        None,
        None,
        NOW_SECS,
        NOW_SECS + MAX_TTL_SECS + 1,
    );
    let reordered = format!(
        "{{ \"jti\": \"{JTI}\", \"exp\": {}, \"iat\": {}, \"sid\": null, \"attempt\": null,\n  \"task\": null, \"verbs\": [\"read_task\"], \"role\": \"observer\", \"sub\": \"observer\" }}",
        NOW_SECS + 60,
        NOW_SECS
    );
    let odd_verbs = claims_json(
        "observer",
        "observer",
        &["read_task", "fetch_prompt"],
        None,
        None,
        None,
        NOW_SECS,
        NOW_SECS + 60,
    );

    let valid_vectors = vec![
        valid(
            "worker_token",
            worker_token.clone(),
            &worker,
            Some("post_result"),
            true,
        ),
        valid(
            "observer_token_with_nulls",
            signed(CURRENT_KID, &observer),
            &observer,
            Some("read_task"),
            true,
        ),
        valid(
            "senior_token_with_sid",
            signed(CURRENT_KID, &senior),
            &senior,
            Some("answer"),
            true,
        ),
        valid(
            "signed_by_previous_key",
            signed(PREVIOUS_KID, &observer),
            &observer,
            Some("subscribe"),
            false,
        ),
        valid(
            "last_second_before_exp_plus_leeway",
            signed(CURRENT_KID, &last_second),
            &last_second,
            None,
            true,
        ),
        valid(
            "ttl_exactly_max",
            signed(CURRENT_KID, &max_ttl),
            &max_ttl,
            None,
            true,
        ),
        valid(
            "non_canonical_json_is_fine",
            signed(CURRENT_KID, &reordered),
            &reordered,
            Some("read_task"),
            false,
        ),
        valid(
            "exactly_2048_bytes",
            padded_to(PREVIOUS_KID, &observer, 2048),
            &observer,
            None,
            false,
        ),
        valid(
            "verb_outside_role_still_verifies",
            signed(CURRENT_KID, &odd_verbs),
            &odd_verbs,
            Some("read_task"),
            true,
        ),
    ];

    let fields: Vec<&str> = worker_token.split('.').collect();
    let (payload, tag) = (fields[2], fields[3]);
    let trailing_json = observer_json_with_trailing_bits();
    let trailing_payload = set_trailing_bit(&b64(&trailing_json));
    let padded_payload = format!("{}=", b64(&trailing_json));
    let tag_short_one = &tag[..tag.len() - 1];
    let short_one_reason = {
        let mut out = [0u8; 40];
        match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode_slice(tag_short_one, &mut out)
        {
            Ok(_) => "bad_signature",
            Err(_) => "bad_encoding",
        }
    };
    let with_field = |extra: &str| worker.replacen('{', &format!("{{{extra},"), 1);

    let invalid_vectors = vec![
        invalid(
            "unknown_kid",
            signed_raw(&current_secret(), "vec-9", &b64(&worker)),
            "unknown_kid",
            None,
        ),
        invalid(
            "kid_uppercase",
            signed_raw(&current_secret(), "VEC-1", &b64(&worker)),
            "malformed",
            None,
        ),
        invalid(
            "kid_too_long",
            signed_raw(&current_secret(), "abcdefghijklmnopq", &b64(&worker)),
            "malformed",
            None,
        ),
        invalid(
            "wrong_prefix",
            format!(
                "swc2.{CURRENT_KID}.{payload}.{}",
                spec_tag(&current_secret(), "swc2", CURRENT_KID, payload)
            ),
            "bad_prefix",
            None,
        ),
        invalid(
            "uppercase_prefix",
            format!("SWC1.{CURRENT_KID}.{payload}.{tag}"),
            "bad_prefix",
            None,
        ),
        invalid(
            "leading_space",
            format!(" {worker_token}"),
            "bad_prefix",
            None,
        ),
        invalid(
            "trailing_newline",
            format!("{worker_token}\n"),
            "bad_encoding",
            None,
        ),
        invalid(
            "tag_truncated_by_one_char",
            format!("swc1.{CURRENT_KID}.{payload}.{tag_short_one}"),
            short_one_reason,
            None,
        ),
        invalid(
            "tag_truncated_to_30_bytes",
            format!("swc1.{CURRENT_KID}.{payload}.{}", &tag[..40]),
            "bad_signature",
            None,
        ),
        invalid(
            "tag_padded",
            format!("{worker_token}="),
            "bad_encoding",
            None,
        ),
        invalid(
            "tag_trailing_bits",
            format!("swc1.{CURRENT_KID}.{payload}.{}", set_trailing_bit(tag)),
            "bad_encoding",
            None,
        ),
        invalid(
            "payload_padded",
            signed_raw(&current_secret(), CURRENT_KID, &padded_payload),
            "bad_encoding",
            None,
        ),
        invalid(
            "payload_trailing_bits",
            signed_raw(&current_secret(), CURRENT_KID, &trailing_payload),
            "bad_encoding",
            None,
        ),
        invalid(
            "payload_standard_alphabet",
            signed_raw(
                &current_secret(),
                CURRENT_KID,
                &base64::engine::general_purpose::STANDARD_NO_PAD.encode(">>>???"),
            ),
            "bad_encoding",
            None,
        ),
        invalid(
            "signed_with_wrong_key",
            signed_raw(&wrong_secret(), CURRENT_KID, payload),
            "bad_signature",
            None,
        ),
        invalid(
            "signed_by_previous_key_under_current_kid",
            signed_raw(&previous_secret(), CURRENT_KID, payload),
            "bad_signature",
            None,
        ),
        invalid(
            "tag_from_another_token",
            format!("swc1.{CURRENT_KID}.{}.{tag}", b64(&observer)),
            "bad_signature",
            None,
        ),
        invalid(
            "tag_without_domain_separation",
            {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&current_secret()).unwrap();
                mac.update(format!("swc1.{CURRENT_KID}.{payload}").as_bytes());
                format!(
                    "swc1.{CURRENT_KID}.{payload}.{}",
                    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
                )
            },
            "bad_signature",
            None,
        ),
        invalid(
            "extra_claim",
            signed(CURRENT_KID, &with_field(r#""admin":true"#)),
            "bad_claims",
            None,
        ),
        invalid(
            "duplicate_claim",
            signed(CURRENT_KID, &with_field(r#""role":"admin""#)),
            "bad_claims",
            None,
        ),
        invalid(
            "string_exp",
            signed(
                CURRENT_KID,
                &worker.replace(
                    &format!("\"exp\":{}", NOW_SECS + 1700),
                    &format!("\"exp\":\"{}\"", NOW_SECS + 1700),
                ),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "float_iat",
            signed(
                CURRENT_KID,
                &worker.replace(
                    &format!("\"iat\":{}", NOW_SECS - 100),
                    &format!("\"iat\":{}.0", NOW_SECS - 100),
                ),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "missing_task_claim",
            signed(
                CURRENT_KID,
                &worker.replace(&format!("\"task\":\"{TASK}\","), ""),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "negative_attempt",
            signed(
                CURRENT_KID,
                &worker.replace("\"attempt\":1", "\"attempt\":-1"),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "unknown_role",
            signed(
                CURRENT_KID,
                &worker.replace("\"role\":\"worker\"", "\"role\":\"root\""),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "uppercase_task_id",
            signed(CURRENT_KID, &worker.replace(TASK, &TASK.to_uppercase())),
            "bad_claims",
            None,
        ),
        invalid(
            "bad_jti",
            signed(CURRENT_KID, &worker.replace(JTI, "not-hex")),
            "bad_claims",
            None,
        ),
        invalid(
            "sub_129_bytes",
            signed(CURRENT_KID, &observer_json(&"s".repeat(129))),
            "bad_claims",
            None,
        ),
        invalid(
            "exp_before_iat",
            signed(
                CURRENT_KID,
                &claims_json(
                    "observer",
                    "observer",
                    &["read_task"],
                    None,
                    None,
                    None,
                    NOW_SECS + 10,
                    NOW_SECS + 9,
                ),
            ),
            "bad_claims",
            None,
        ),
        invalid(
            "payload_not_json",
            signed(CURRENT_KID, "hello"),
            "bad_claims",
            None,
        ),
        invalid(
            "payload_json_array",
            signed(CURRENT_KID, "[]"),
            "bad_claims",
            None,
        ),
        invalid(
            "expired_exactly_at_exp_plus_leeway",
            signed(CURRENT_KID, &expired),
            "expired",
            None,
        ),
        invalid(
            "ttl_one_over_max",
            signed(CURRENT_KID, &over_ttl),
            "ttl_too_long",
            None,
        ),
        invalid(
            "oversize_2049_bytes",
            padded_to(CURRENT_KID, &observer, 2049),
            "too_long",
            None,
        ),
        invalid("oversize_garbage", "x".repeat(4096), "too_long", None),
        invalid(
            "worker_asks_spawn_task",
            worker_token.clone(),
            "forbidden",
            Some("spawn_task"),
        ),
        invalid(
            "worker_asks_read_task",
            worker_token.clone(),
            "forbidden",
            Some("read_task"),
        ),
        invalid(
            "verb_in_token_but_not_for_role",
            signed(CURRENT_KID, &odd_verbs),
            "forbidden",
            Some("fetch_prompt"),
        ),
        invalid(
            "expired_beats_forbidden",
            signed(CURRENT_KID, &expired),
            "expired",
            Some("fetch_prompt"),
        ),
        invalid(
            "three_fields",
            format!("swc1.{CURRENT_KID}.{payload}"),
            "malformed",
            None,
        ),
        invalid(
            "five_fields",
            format!("{worker_token}.{tag}"),
            "malformed",
            None,
        ),
        invalid("empty_string", String::new(), "malformed", None),
        invalid("only_dots", "...".into(), "malformed", None),
        invalid(
            "empty_prefix",
            format!(".{CURRENT_KID}.{payload}.{tag}"),
            "malformed",
            None,
        ),
        invalid(
            "empty_kid",
            format!("swc1..{payload}.{tag}"),
            "malformed",
            None,
        ),
        invalid(
            "empty_payload",
            format!("swc1.{CURRENT_KID}..{tag}"),
            "malformed",
            None,
        ),
        invalid(
            "empty_tag",
            format!("swc1.{CURRENT_KID}.{payload}."),
            "malformed",
            None,
        ),
        invalid(
            "worker_handle_is_not_a_token",
            "wh-00112233445566778899aabbccddeeff".into(),
            "malformed",
            None,
        ),
    ];

    VectorFile {
        description: "swc1 capability token vectors (docs/security.md, Credentials). Keys are hex; verify at now_secs with \
                      leeway_secs and max_ttl_secs; `verb` means verify_for(token, verb). Generated by \
                      tests/vectors/generate.rs."
            .into(),
        now_secs: NOW_SECS,
        leeway_secs: LEEWAY_SECS,
        max_ttl_secs: MAX_TTL_SECS,
        current: KeyJson {
            kid: CURRENT_KID.into(),
            secret_hex: hex(&current_secret()),
        },
        previous: vec![KeyJson {
            kid: PREVIOUS_KID.into(),
            secret_hex: hex(&previous_secret()),
        }],
        valid: valid_vectors,
        invalid: invalid_vectors,
    }
}

/// The file's text: pretty JSON with a trailing newline.
pub(crate) fn render(file: &VectorFile) -> String {
    let mut text = serde_json::to_string_pretty(file).unwrap();
    text.push('\n');
    text
}
