//! Settings that start but are risky: `check-config` prints each as a
//! warning line and `serve` logs each at `warn` when it starts. Nothing here
//! refuses a configuration.
//!
//! - A node on PostgreSQL whose `server.bind` is an unspecified address
//!   (`0.0.0.0`, `::`) with neither `cluster.advertise_url` nor
//!   `server.base_url` registers a loopback URL for its peers, which no
//!   other machine reaches: forwarded requests to it fail.
//! - A `store.password_file` open to its group or to other users (any of
//!   the mode bits 077), as a state directory open to them is.

use std::os::unix::fs::PermissionsExt;

use super::{Config, StoreBackend, local_url};

impl Config {
    /// The risky settings of this configuration, one line each, naming the
    /// key and what to change.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.store.backend != StoreBackend::Postgres {
            return warnings;
        }
        let bind = self.server.bind;
        let advertise = self
            .cluster
            .as_ref()
            .and_then(|cluster| cluster.advertise_url.as_ref());
        if bind.ip().is_unspecified() && advertise.is_none() && self.server.base_url.is_none() {
            warnings.push(format!(
                "`server.bind` = {bind} listens on every address, but neither \
                 `cluster.advertise_url` nor `server.base_url` is set: this node registers {} \
                 for its peers, which no other machine reaches, so requests they forward to \
                 it fail; set `cluster.advertise_url` to an address the peers can reach",
                local_url(bind)
            ));
        }
        if let Some(path) = &self.store.password_file
            && let Ok(metadata) = std::fs::metadata(path)
        {
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                warnings.push(format!(
                    "`store.password_file` {} has mode {mode:04o}: users other than its owner \
                     may read the database password; make it 0600 (chmod 600 {}), or hand it \
                     over as the systemd credential swarmd-pg-password",
                    path.display(),
                    path.display()
                ));
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use std::fs::Permissions;

    use crate::{ClusterConfig, Config, StoreBackend};

    fn on_postgres() -> Config {
        let mut config = Config::default();
        config.store.backend = StoreBackend::Postgres;
        config
    }

    #[test]
    fn a_wildcard_bind_without_an_advertised_url_is_warned_about_on_postgres() {
        let mut config = on_postgres();
        config.server.bind = "0.0.0.0:7841".parse().unwrap();
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("`server.bind` = 0.0.0.0:7841"),
            "{warnings:?}"
        );
        assert!(
            warnings[0].contains("http://127.0.0.1:7841"),
            "{warnings:?}"
        );
        assert!(
            warnings[0].contains("cluster.advertise_url"),
            "{warnings:?}"
        );

        config.server.bind = "[::]:7841".parse().unwrap();
        assert_eq!(config.warnings().len(), 1);

        // An address the peers are given, or a bind that is not a wildcard.
        let mut advertised = config.clone();
        advertised.cluster = Some(ClusterConfig {
            advertise_url: Some("http://node-a.internal:7841".into()),
            ..ClusterConfig::default()
        });
        assert!(advertised.warnings().is_empty());
        let mut based = config.clone();
        based.server.base_url = Some("https://swarm.example".into());
        assert!(based.warnings().is_empty());
        let mut specific = config.clone();
        specific.server.bind = "10.0.0.5:7841".parse().unwrap();
        assert!(specific.warnings().is_empty());
        // Not a node: nothing is registered.
        let mut sqlite = config;
        sqlite.store.backend = StoreBackend::Sqlite;
        assert!(sqlite.warnings().is_empty());
    }

    #[test]
    fn a_password_file_others_may_read_is_warned_about_without_its_contents() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pg-password");
        std::fs::write(&path, "hunter2\n").unwrap();
        let mut config = on_postgres();
        config.store.password_file = Some(path.clone());
        for (mode, warned) in [(0o600, false), (0o400, false), (0o640, true), (0o644, true)] {
            std::fs::set_permissions(&path, Permissions::from_mode(mode)).unwrap();
            let warnings = config.warnings();
            assert_eq!(!warnings.is_empty(), warned, "{mode:o}: {warnings:?}");
            for warning in &warnings {
                assert!(warning.contains(&format!("{mode:04o}")), "{warning}");
                assert!(warning.contains("store.password_file"), "{warning}");
                assert!(!warning.contains("hunter2"), "{warning}");
            }
        }
    }
}
