//! The signing keyring and the admin token in PostgreSQL: nodes starting
//! together on an empty database end with one of each, every node loads
//! the same, a rotation is seen by every node that loads after it.

use std::sync::Arc;

use swarmd_engine::auth::{AuthorityConfig, TokenAuthority};
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::Role;
use swarmd_postgres::PgSecrets;
use swarmd_postgres::testing::fresh_database;

fn authority(keyring: swarmd_engine::auth::Keyring) -> TokenAuthority {
    TokenAuthority::new(keyring, Arc::new(SystemClock), AuthorityConfig::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_together_create_one_keyring_and_one_admin_token() {
    let database = fresh_database().await;
    let starts = (0..6).map(|_| {
        let opts = database.options();
        tokio::spawn(async move {
            let mut secrets = PgSecrets::connect(&opts).await.unwrap();
            let keyring = secrets.keyring().await.unwrap();
            let digest = secrets.admin_digest().await.unwrap();
            (keyring, digest)
        })
    });
    let mut nodes = Vec::new();
    for start in starts {
        nodes.push(start.await.unwrap());
    }
    let (first_ring, first_digest) = &nodes[0];
    for (ring, digest) in &nodes {
        assert_eq!(ring.current_kid(), first_ring.current_kid());
        assert_eq!(ring.kids().count(), 1);
        assert_eq!(digest, first_digest);
    }
    // The keys are the same bytes: a token one node mints, another verifies.
    let minted = authority(nodes[1].0.clone())
        .mint_role(Role::Observer, 60, None)
        .unwrap();
    authority(nodes[5].0.clone())
        .verify(minted.token.expose())
        .unwrap();
    // The admin token printed matches the digest every node verifies with.
    let mut cli = PgSecrets::connect(&database.options()).await.unwrap();
    let secret = cli.admin_secret().await.unwrap();
    assert_eq!(secret.digest(), *first_digest);
    assert_eq!(cli.admin_secret().await.unwrap().expose(), secret.expose());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_old_keys_verifying_and_concurrent_rotations_all_land() {
    let database = fresh_database().await;
    let mut node = PgSecrets::connect(&database.options()).await.unwrap();
    let before = node.keyring().await.unwrap();
    let old_token = authority(before.clone())
        .mint_role(Role::Observer, 60, None)
        .unwrap();

    let rotations = (0..4).map(|_| {
        let opts = database.options();
        tokio::spawn(async move {
            PgSecrets::connect(&opts)
                .await
                .unwrap()
                .rotate()
                .await
                .unwrap()
        })
    });
    let mut kids = Vec::new();
    for rotation in rotations {
        kids.push(rotation.await.unwrap());
    }
    let after = node.keyring().await.unwrap();
    assert_eq!(after.kids().count(), 5, "{after:?}");
    assert!(kids.contains(&after.current_kid().to_owned()));
    assert_eq!(
        after.previous_kids().last(),
        Some(before.current_kid()),
        "the first key is the oldest"
    );
    let rotated = authority(after);
    rotated.verify(old_token.token.expose()).unwrap();
    let new_token = rotated.mint_role(Role::Observer, 60, None).unwrap();
    assert!(
        authority(before).verify(new_token.token.expose()).is_err(),
        "a node that has not reloaded does not know the new key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_an_empty_database_creates_its_first_key() {
    let database = fresh_database().await;
    let mut secrets = PgSecrets::connect(&database.options()).await.unwrap();
    let kid = secrets.rotate().await.unwrap();
    let keyring = secrets.keyring().await.unwrap();
    assert_eq!(keyring.current_kid(), kid);
    assert_eq!(keyring.kids().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_admin_token_is_refused_without_echoing_it() {
    let database = fresh_database().await;
    let mut secrets = PgSecrets::connect(&database.options()).await.unwrap();
    let digest = secrets.admin_digest().await.unwrap();
    let db = swarmd_postgres::PgDb::open(database.options())
        .await
        .unwrap();
    db.execute_sql("UPDATE admin_token SET secret = 'hunter2'")
        .await;
    let error = secrets.admin_secret().await.unwrap_err().to_string();
    assert!(!error.contains("hunter2"), "{error}");
    // Nodes read only the digest, which is unchanged.
    assert_eq!(secrets.admin_digest().await.unwrap(), digest);
    db.close().await;
}
