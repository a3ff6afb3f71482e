//! Finding a cluster's nodes from the daemons a pool is given: each
//! answers `GET /v1/pool/nodes` with every live node's advertised URL. The
//! pool asks at start and again every `PoolOptions::rediscover`, so a node
//! that joins later is claimed from too; a node already known, or past
//! [`MAX_SERVERS`] in all, is not added again. A daemon that cannot say
//! (unreachable now, outside a cluster, older) adds nothing; its claims
//! report what is wrong with it.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Daemon, MAX_SERVERS, PoolOptions, decode};
use crate::ApiClient;
use crate::wire::NodesAnswer;

/// How long a daemon has to say where its cluster's nodes are.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url` is one of `known` (a trailing `/` aside).
fn known(known: &[String], url: &str) -> bool {
    known
        .iter()
        .any(|k| k.trim_end_matches('/') == url.trim_end_matches('/'))
}

/// The nodes the given daemons name that `have` does not hold yet, at
/// most enough to make [`MAX_SERVERS`] in all.
pub(super) async fn new_nodes(options: &PoolOptions, have: &[String]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for url in &options.servers {
        let Ok(client) = ApiClient::new(url, options.token.clone()) else {
            continue;
        };
        let path = "/v1/pool/nodes";
        let answer = client
            .send_json(
                client.get(path).timeout(DISCOVER_TIMEOUT),
                &client.url(path),
            )
            .await
            .and_then(|answer| decode::<NodesAnswer>(url, answer));
        let nodes = match answer {
            Ok(answer) => answer.nodes,
            Err(error) => {
                tracing::debug!(%url, %error, "no cluster nodes learned");
                continue;
            }
        };
        for node in nodes {
            if have.len() + found.len() < MAX_SERVERS
                && !known(have, &node)
                && !known(&found, &node)
            {
                tracing::info!(from = %url, node = %node, "claiming from a node of the cluster too");
                found.push(node);
            }
        }
    }
    found
}

/// Asks the given daemons for new nodes every `options.rediscover` until
/// `stop`, and hands each new one, as a daemon with the next link, to
/// `joined`. `have` holds the URLs claimed from already.
pub(super) async fn follow(
    options: std::sync::Arc<PoolOptions>,
    mut have: Vec<String>,
    joined: mpsc::UnboundedSender<Daemon>,
    stop: CancellationToken,
) {
    let mut every = tokio::time::interval(options.rediscover);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the start has just asked.
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = stop.cancelled() => return,
        }
        if have.len() >= MAX_SERVERS {
            return;
        }
        for url in new_nodes(&options, &have).await {
            let Ok(daemon) = Daemon::new(have.len(), true, &url, &options) else {
                continue;
            };
            have.push(url);
            if joined.send(daemon).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_known_with_or_without_its_trailing_slash() {
        let have = vec!["http://a:1".to_owned(), "http://b:2/".to_owned()];
        assert!(known(&have, "http://a:1/"));
        assert!(known(&have, "http://b:2"));
        assert!(!known(&have, "http://c:3"));
    }
}
