//! Tests of the state directory: layout, modes, secret sources, rotation.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use swarmd_engine::auth::SessionSecret;

use swarmd_config::Config;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn config_at(state_dir: &Path) -> Config {
    let mut config = Config::default();
    config.store.state_dir = state_dir.to_owned();
    config
}

#[tokio::test]
async fn prepare_creates_private_dirs_and_secret_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("nested/state");
    let config = config_at(&root);
    let prepared = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();

    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join(BLOBS_DIR)), 0o700);
    assert_eq!(mode(&root.join(KEYS_FILE)), 0o600);
    assert_eq!(mode(&root.join(ADMIN_TOKEN_FILE)), 0o600);
    assert_eq!(
        prepared.keys_source,
        SecretSource::StateDir(root.join(KEYS_FILE))
    );
    assert_eq!(prepared.dir.database(), root.join(DATABASE_FILE));

    let token = std::fs::read_to_string(root.join(ADMIN_TOKEN_FILE)).unwrap();
    let secret = SessionSecret::parse(token.trim()).unwrap();
    assert!(prepared.admin_token.matches(&secret));
    assert!(!format!("{prepared:?}").contains(secret.expose()));
}

#[tokio::test]
async fn second_start_reuses_keys_and_admin_token() {
    let tmp = tempfile::tempdir().unwrap();
    let config = config_at(tmp.path());
    let first = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    let second = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    assert_eq!(first.keyring.current_kid(), second.keyring.current_kid());
    assert_eq!(first.admin_token, second.admin_token);
}

#[tokio::test]
async fn loose_secret_files_in_the_state_dir_are_tightened() {
    let tmp = tempfile::tempdir().unwrap();
    let config = config_at(tmp.path());
    PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    let token = tmp.path().join(ADMIN_TOKEN_FILE);
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let others = ["mcp-sessions.json", "swarmd.lock", "node_id"].map(|f| tmp.path().join(f));
    for file in &others {
        std::fs::write(file, "{}").unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    assert_eq!(mode(&token), 0o600);
    for file in &others {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
}

#[tokio::test]
async fn credentials_win_and_are_never_written() {
    let tmp = tempfile::tempdir().unwrap();
    let credentials = tmp.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    let keys = credentials.join(KEYS_CREDENTIAL);
    Keyring::generate().save(&keys).unwrap();
    let secret = SessionSecret::generate();
    let token = credentials.join(ADMIN_TOKEN_CREDENTIAL);
    std::fs::write(&token, format!("{}\n", secret.expose())).unwrap();
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o500)).unwrap();

    let mut config = config_at(&tmp.path().join("state"));
    config.auth.keys_file = Some(tmp.path().join("ignored-keys.json"));
    let env = Environment::from_pairs([("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap())]);
    let prepared = PreparedState::prepare(&config, &env).await.unwrap();
    assert_eq!(prepared.keys_source, SecretSource::Credential(keys.clone()));
    assert!(prepared.admin_token.matches(&secret));
    assert!(!tmp.path().join("ignored-keys.json").exists());
    assert!(!tmp.path().join("state").join(KEYS_FILE).exists());

    let error = rotate_keys(&prepared.keys_source).unwrap_err();
    assert!(matches!(error, StateError::ReadOnlyCredential { .. }));
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[tokio::test]
async fn missing_credential_falls_back_to_configured_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config_at(&tmp.path().join("state"));
    let keys = tmp.path().join("keys.json");
    let token = tmp.path().join("admin.token");
    config.auth.keys_file = Some(keys.clone());
    config.auth.admin_token_file = Some(token.clone());
    let env = Environment::from_pairs([(
        "CREDENTIALS_DIRECTORY",
        tmp.path().join("none").to_str().unwrap(),
    )]);
    let prepared = PreparedState::prepare(&config, &env).await.unwrap();
    assert_eq!(prepared.keys_source, SecretSource::ConfigFile(keys.clone()));
    assert_eq!(mode(&keys), 0o600);
    assert_eq!(mode(&token), 0o600);
}

#[test]
fn malformed_admin_token_is_refused_without_echoing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join(ADMIN_TOKEN_FILE);
    std::fs::write(&token, "hunter2\n").unwrap();
    let error = load_or_create_admin_secret(&SecretSource::StateDir(token)).unwrap_err();
    assert!(matches!(error, StateError::BadAdminToken { .. }));
    assert!(!error.to_string().contains("hunter2"));
}

#[test]
fn rotate_adds_a_current_key_and_keeps_the_old_one() {
    let tmp = tempfile::tempdir().unwrap();
    let source = SecretSource::StateDir(tmp.path().join("state").join(KEYS_FILE));
    let first = rotate_keys(&source).unwrap();
    assert_eq!(mode(source.path().unwrap()), 0o600);
    let second = rotate_keys(&source).unwrap();
    assert_ne!(first, second);
    let keyring = Keyring::load(source.path().unwrap()).unwrap();
    assert_eq!(keyring.current_kid(), second);
    assert_eq!(
        keyring.previous_kids().collect::<Vec<_>>(),
        [first.as_str()]
    );
    assert_eq!(mode(source.path().unwrap()), 0o600);
}

#[test]
fn on_postgres_the_database_holds_the_secrets_unless_a_file_or_credential_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config_at(&tmp.path().join("state"));
    config.store.backend = swarmd_config::StoreBackend::Postgres;
    let none = Environment::default();
    assert_eq!(
        SecretSource::for_keys(&config, &none),
        SecretSource::Database
    );
    assert_eq!(
        SecretSource::for_admin_token(&config, &none),
        SecretSource::Database
    );
    assert_eq!(
        SecretSource::Database.to_string(),
        "the PostgreSQL database"
    );

    // An explicit file wins over the database, for that secret only.
    let keys = tmp.path().join("keys.json");
    config.auth.keys_file = Some(keys.clone());
    assert_eq!(
        SecretSource::for_keys(&config, &none),
        SecretSource::ConfigFile(keys)
    );
    assert_eq!(
        SecretSource::for_admin_token(&config, &none),
        SecretSource::Database
    );

    // A systemd credential wins over both.
    let credentials = tmp.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join(ADMIN_TOKEN_CREDENTIAL), "x").unwrap();
    let env = Environment::from_pairs([("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap())]);
    assert_eq!(
        SecretSource::for_admin_token(&config, &env),
        SecretSource::Credential(credentials.join(ADMIN_TOKEN_CREDENTIAL))
    );
}

#[test]
fn file_operations_refuse_the_database_source() {
    assert!(matches!(
        load_keyring(&SecretSource::Database),
        Err(StateError::InDatabase)
    ));
    assert!(matches!(
        rotate_keys(&SecretSource::Database),
        Err(StateError::InDatabase)
    ));
    assert!(matches!(
        load_or_create_admin_secret(&SecretSource::Database),
        Err(StateError::InDatabase)
    ));
}

/// A postgres configuration whose database cannot be reached (nothing
/// listens on port 1), with a password in its URL, plus `extra` TOML.
fn unreachable_postgres(dir: &Path, extra: &str) -> Config {
    let file = dir.join("swarmd.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://swarmd:hunter2@127.0.0.1:1/swarmd\"\n\
             state_dir = \"{}\"\n{extra}",
            dir.join("state").display()
        ),
    )
    .unwrap();
    Config::load(
        &swarmd_config::ConfigPath::Explicit(file),
        &Environment::default(),
        &swarmd_config::Overrides::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn on_postgres_explicit_files_are_used_without_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let config = unreachable_postgres(
        tmp.path(),
        &format!(
            "[auth]\nkeys_file = \"{}\"\nadmin_token_file = \"{}\"\n",
            tmp.path().join("keys.json").display(),
            tmp.path().join("admin.token").display()
        ),
    );
    let prepared = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap();
    assert_eq!(
        prepared.keys_source,
        SecretSource::ConfigFile(tmp.path().join("keys.json"))
    );
    assert_eq!(mode(&tmp.path().join("admin.token")), 0o600);
}

#[tokio::test]
async fn on_postgres_an_unreachable_database_stops_the_start_without_its_password() {
    let tmp = tempfile::tempdir().unwrap();
    let config = unreachable_postgres(tmp.path(), "");
    let error = PreparedState::prepare(&config, &Environment::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error, StateError::DatabaseUnreachable { .. }),
        "{error}"
    );
    let shown = error.to_string();
    assert!(
        shown.contains("postgres://swarmd:<redacted>@127.0.0.1:1/swarmd"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}
