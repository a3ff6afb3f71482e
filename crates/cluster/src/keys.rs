//! Follows the signing keyring in the database, so a `swarmd keys rotate`
//! reaches every running node: each looks at the keyring's stamp every
//! `POLL` and, when it changed, reads the keyring again and mints with its
//! new current key from then on (docs/security.md, Several nodes).
//!
//! Runs only when the keyring's source is the database; a keyring from a
//! systemd credential or `auth.keys_file` changes at a restart.

use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_postgres::PgDb;
use tokio_util::sync::CancellationToken;

/// How often the keyring's stamp is read: a rotated key verifies on every
/// node within this.
pub(crate) const POLL: Duration = Duration::from_secs(2);

/// Runs until `stop`.
pub(crate) async fn run(engine: Engine, db: PgDb, stop: CancellationToken) {
    // Unknown at first: the keyring may have changed since it was read at
    // start, so the first look reads it again.
    let mut seen = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        let stamp = match db.keyring_stamp().await {
            Ok(stamp) => stamp,
            Err(error) => {
                tracing::warn!(%error, "cannot read the signing keyring's stamp");
                continue;
            }
        };
        if seen == Some(stamp) {
            continue;
        }
        match db.stored_keyring().await {
            Ok(Some(keyring)) => {
                let kids = |ring: &swarmd_engine::auth::Keyring| {
                    ring.kids().map(str::to_owned).collect::<Vec<_>>()
                };
                if kids(&keyring) != kids(&engine.tokens().keyring()) {
                    tracing::info!(
                        kid = keyring.current_kid(),
                        keys = keyring.kids().count(),
                        "signing keyring changed in the database; reloaded"
                    );
                }
                engine.tokens().reload(keyring);
                seen = Some(stamp);
            }
            Ok(None) => tracing::warn!("the database holds no signing key; keeping the keyring"),
            Err(error) => tracing::warn!(%error, "cannot read the signing keyring"),
        }
    }
}
