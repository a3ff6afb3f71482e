//! Finding a cluster's nodes from the daemons a pool is given: each
//! answers `GET /v1/pool/nodes` with every live node's id and advertised
//! URL. The pool asks at start (again, with backoff, until one answers)
//! and every `PoolOptions::rediscover` after, so a node that joins later
//! is claimed from too; a node already known,
//! or past [`MAX_SERVERS`] in all, is not added again. A daemon that
//! names no node (outside a cluster, or older) is reached as it is; one
//! that does not answer is not claimed from until it does, unless another
//! lists it at its URL.
//!
//! A node is reached at its advertised URL, or through the daemon that
//! named it, its claims and heartbeats naming it in `x-swarmd-node`: with
//! `PoolOptions::through` for every daemon given (then the pool needs no
//! route to any node's own URL), and without it for a daemon given that is
//! a front: one whose URL is none of the nodes' it names (a load balancer,
//! or another name for a node). A claim sent to a front without naming a
//! node would land on whichever node it picks, and the attempt's heartbeats
//! on others, which do not know it.
//! When several daemons given name one node, the others are tried in
//! turn while the one in use cannot be reached.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Daemon, FIRST_BACKOFF, MAX_BACKOFF, MAX_SERVERS, PoolError, PoolOptions, decode};
use swarmd_client::wire::NodesAnswer;
use swarmd_client::{ApiClient, ClientError};

/// How long a daemon has to say where its cluster's nodes are.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the pool reaches one node's queue of attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    /// The URL requests go to.
    pub(super) url: String,
    /// The node they name in `x-swarmd-node`, when `url` is not the
    /// node's own.
    pub(super) node: Option<String>,
    /// Other daemons given that name the same node, tried in turn when
    /// the one in use cannot be reached.
    pub(super) also: Vec<String>,
    /// A node of a cluster (its daemon named nodes): the other nodes take
    /// and forward its attempts' writes (`run::Relays`).
    pub(super) cluster: bool,
}

impl Place {
    /// A daemon reached at `url` as it is, outside a cluster until
    /// `in_cluster` says otherwise.
    pub(super) fn at(url: &str) -> Place {
        Place {
            url: url.to_owned(),
            node: None,
            also: Vec::new(),
            cluster: false,
        }
    }

    /// Node `id`, reached through the daemon at `url`.
    fn named(url: &str, id: &str) -> Place {
        Place {
            url: url.to_owned(),
            node: Some(id.to_owned()),
            also: Vec::new(),
            cluster: true,
        }
    }

    /// The same place, a node of a cluster when `cluster`.
    fn in_cluster(self, cluster: bool) -> Place {
        Place { cluster, ..self }
    }

    /// Every URL the node is reached through, the one in use first.
    pub(super) fn urls(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.url).chain(&self.also)
    }

    /// Whether `self` and `other` reach one queue: the same node named,
    /// or (neither named) the same URL, a trailing `/` aside.
    fn same(&self, other: &Place) -> bool {
        match (&self.node, &other.node) {
            (Some(a), Some(b)) => a == b,
            (None, None) => same_url(&self.url, &other.url),
            _ => false,
        }
    }
}

/// Whether `place` is one of `known`.
fn known(known: &[Place], place: &Place) -> bool {
    known.iter().any(|k| k.same(place))
}

/// Takes `place` into `found` unless `have` holds it: when a daemon given
/// already named its node, as one more URL of that place; otherwise as a
/// new place while `have` and `found` make fewer than [`MAX_SERVERS`].
/// Whether it is a new place.
fn gather(have: &[Place], found: &mut Vec<Place>, place: Place) -> bool {
    if known(have, &place) {
        return false;
    }
    let room = have.len() + found.len() < MAX_SERVERS;
    match found.iter_mut().find(|k| k.same(&place)) {
        Some(known) => {
            if known.node.is_some() && !known.urls().any(|u| same_url(u, &place.url)) {
                known.also.push(place.url);
            }
            false
        }
        None if room => {
            found.push(place);
            true
        }
        None => false,
    }
}

/// What `url` answers to `GET /v1/pool/nodes`; a daemon that predates the
/// route (`404`) names no node.
async fn ask(options: &PoolOptions, url: &str) -> Result<NodesAnswer, ClientError> {
    let client = ApiClient::new(url, options.token.clone())?;
    let path = "/v1/pool/nodes";
    let answer = client
        .send_json(
            client.get(path).timeout(DISCOVER_TIMEOUT),
            &client.url(path),
        )
        .await;
    match answer {
        Err(ClientError::Status { status: 404, .. }) => Ok(NodesAnswer::default()),
        answer => decode::<NodesAnswer>(url, answer?),
    }
}

/// Whether the daemon at `url` is a front for the cluster its answer
/// names: it names nodes, and none of them at `url`.
fn fronts(url: &str, answer: &NodesAnswer) -> bool {
    !answer.members.is_empty() && !answer.members.iter().any(|m| same_url(&m.url, url))
}

/// Whether `a` and `b` are one address: the same scheme, host (in any
/// case) and port (written or the scheme's default), and path (a trailing
/// `/` aside). Strings that are not URLs compare as they are.
pub(super) fn same_url(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            a.scheme() == b.scheme()
                && a.host_str() == b.host_str()
                && a.port_or_known_default() == b.port_or_known_default()
                && a.path().trim_end_matches('/') == b.path().trim_end_matches('/')
        }
        _ => a.trim_end_matches('/') == b.trim_end_matches('/'),
    }
}

/// Where the nodes `url`'s answer names are reached. A daemon is reached
/// as it is when it names no node (outside a cluster), or when its nodes
/// are to be named through it but it lists no ids (it predates them).
fn places(options: &PoolOptions, url: &str, answer: NodesAnswer) -> Vec<Place> {
    let named = options.through || fronts(url, &answer);
    let cluster = !answer.nodes.is_empty();
    if named && !answer.members.is_empty() {
        answer
            .members
            .into_iter()
            .map(|member| Place::named(url, &member.id))
            .collect()
    } else if !named && cluster {
        answer
            .nodes
            .iter()
            .map(|node| Place::at(node).in_cluster(true))
            .collect()
    } else {
        vec![Place::at(url).in_cluster(cluster)]
    }
}

/// The nodes that the daemons at `urls` (of those given) name and `have`
/// does not hold yet, at most enough to make [`MAX_SERVERS`] in all, and
/// the daemons that answered. A daemon that refuses the pool's token has
/// answered too: it is not asked again until the next rediscovery.
pub(super) async fn new_nodes<'a>(
    options: &PoolOptions,
    urls: &[&'a String],
    waiting: &[String],
    have: &[Place],
) -> (Vec<Place>, Vec<&'a String>) {
    let mut found: Vec<Place> = Vec::new();
    let mut answered = Vec::new();
    for &url in urls {
        let answer = match ask(options, url).await {
            Ok(answer) => answer,
            Err(
                error @ ClientError::Status {
                    status: 401 | 403, ..
                },
            ) => {
                // Once, when it first answers; at each rediscovery after
                // that, quietly.
                if waiting.contains(url) {
                    tracing::warn!(%url, %error, "a daemon given refuses the pool's token");
                } else {
                    tracing::debug!(%url, %error, "a daemon given refuses the pool's token");
                }
                answered.push(url);
                continue;
            }
            Err(error) => {
                tracing::debug!(%url, %error, "no cluster nodes learned");
                continue;
            }
        };
        answered.push(url);
        take(have, &mut found, url, places(options, url, answer));
    }
    (found, answered)
}

/// Gathers `url`'s `places` into `found` (see [`gather`]), logging each
/// new one.
fn take(have: &[Place], found: &mut Vec<Place>, url: &str, places: Vec<Place>) {
    for place in places {
        if !gather(have, found, place) {
            continue;
        }
        let Some(added) = found.last() else { continue };
        match &added.node {
            Some(node) => {
                tracing::info!(via = %url, %node, "claiming from a node of the cluster through a daemon given");
            }
            None if same_url(&added.url, url) => {
                tracing::info!(%url, "claiming from a daemon given, now that it answered");
            }
            None => {
                tracing::info!(from = %url, node = %added.url, "claiming from a node of the cluster too");
            }
        }
    }
}

/// Whether `place` is a daemon given, reached as it is: its refusal ends
/// the pool, where a learned node's leaves it out.
pub(super) fn is_given(options: &PoolOptions, place: &Place) -> bool {
    place.node.is_none() && options.servers.iter().any(|url| same_url(url, &place.url))
}

/// Where the pool claims at start, and the daemons given that have not
/// answered yet (`follow` asks them again). The pool asks the daemons
/// given, again with backoff until one answers (claiming through a load
/// balancer without naming the node would reach whichever node it picks);
/// a refused token ends it. Then each daemon given that answered is
/// claimed from at its URL, and the nodes it names at theirs; but each
/// node a front names (see [`fronts`]) is claimed from through the front,
/// never the front as it is. With `through`, each node a daemon given
/// names is claimed from through that daemon. Either way a daemon that
/// names none (outside a cluster) is claimed from at its URL, and one that
/// has not answered yet is not claimed from until it has (`follow`),
/// unless another lists it at its URL.
pub(super) async fn first_places(
    options: &PoolOptions,
    stop: &CancellationToken,
) -> Result<(Vec<Place>, Vec<String>), PoolError> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut answers = Vec::new();
        for url in &options.servers {
            match ask(options, url).await {
                Ok(answer) => answers.push((url, Some(answer))),
                Err(
                    error @ ClientError::Status {
                        status: 401 | 403, ..
                    },
                ) => {
                    return Err(PoolError::Refused(error));
                }
                Err(error) => {
                    tracing::warn!(%url, %error, retry_in_ms = backoff.as_millis(), "cannot learn the cluster's nodes");
                    answers.push((url, None));
                }
            }
        }
        if answers.iter().any(|(_, answer)| answer.is_some()) {
            let waiting: Vec<String> = answers
                .iter()
                .filter(|(_, answer)| answer.is_none())
                .map(|(url, _)| (*url).clone())
                .collect();
            let places = arrange(options, answers);
            // One listed at its URL by another is claimed from already.
            let waiting = waiting
                .into_iter()
                .filter(|url| !places.iter().any(|p| p.same(&Place::at(url))))
                .collect();
            return Ok((places, waiting));
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => return Ok((Vec::new(), Vec::new())),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The places of `first_places` from each daemon given and its answer,
/// if it gave one: the daemons given claimed from as they are first, then
/// the nodes learned (`is_given` tells them apart).
fn arrange(options: &PoolOptions, answers: Vec<(&String, Option<NodesAnswer>)>) -> Vec<Place> {
    let mut given: Vec<Place> = Vec::new();
    if !options.through {
        given = answers
            .iter()
            .filter_map(|(url, answer)| answer.as_ref().map(|a| (url, a)))
            .filter(|(url, answer)| !fronts(url, answer))
            .map(|(url, answer)| Place::at(url).in_cluster(!answer.nodes.is_empty()))
            .collect();
    }
    let mut found: Vec<Place> = Vec::new();
    for (url, answer) in answers {
        if let Some(answer) = answer {
            take(&given, &mut found, url, places(options, url, answer));
        }
    }
    given.extend(found);
    given
}

/// Asks the given daemons for new nodes every `options.rediscover`, and
/// those of them that have never answered (`waiting`) in between with
/// backoff, until `stop`; hands each new place, as a daemon with the next
/// link, to `joined`. `have` holds where the pool claims already.
pub(super) async fn follow(
    options: std::sync::Arc<PoolOptions>,
    mut have: Vec<Place>,
    mut waiting: Vec<String>,
    joined: mpsc::UnboundedSender<Daemon>,
    stop: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut every = tokio::time::Instant::now() + options.rediscover;
    loop {
        let wake = if waiting.is_empty() {
            every
        } else {
            every.min(tokio::time::Instant::now() + backoff)
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = stop.cancelled() => return,
        }
        if have.len() >= MAX_SERVERS {
            return;
        }
        let urls: Vec<&String> = if tokio::time::Instant::now() >= every {
            every = tokio::time::Instant::now() + options.rediscover;
            options.servers.iter().collect()
        } else {
            backoff = (backoff * 2).min(MAX_BACKOFF);
            waiting.iter().collect()
        };
        let (found, answered) = new_nodes(&options, &urls, &waiting, &have).await;
        let answered: Vec<String> = answered.into_iter().cloned().collect();
        waiting.retain(|url| !answered.contains(url));
        for place in found {
            let given = is_given(&options, &place);
            let Ok(daemon) = Daemon::new(have.len(), !given, &place, &options) else {
                continue;
            };
            have.push(place);
            if joined.send(daemon).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_client::wire::NodeMember;

    /// A cluster of node n1 at `a` and node n2 at `http://b:2`.
    fn two_nodes(a: &str) -> NodesAnswer {
        let member = |id: &str, url: &str| NodeMember {
            id: id.to_owned(),
            url: url.to_owned(),
        };
        NodesAnswer {
            nodes: vec![a.to_owned(), "http://b:2".to_owned()],
            members: vec![member("n1", a), member("n2", "http://b:2")],
        }
    }

    /// Each place as its URL and the node it names.
    fn seen(places: &[Place]) -> Vec<(&str, Option<&str>)> {
        places
            .iter()
            .map(|p| (p.url.as_str(), p.node.as_deref()))
            .collect()
    }

    #[test]
    fn a_url_is_known_with_or_without_its_trailing_slash() {
        let have = vec![Place::at("http://a:1"), Place::at("http://b:2/")];
        assert!(known(&have, &Place::at("http://a:1/")));
        assert!(known(&have, &Place::at("http://b:2")));
        assert!(!known(&have, &Place::at("http://c:3")));
    }

    #[test]
    fn through_a_daemon_a_node_is_known_by_its_id() {
        let via = Place::named;
        let have = vec![via("http://lb:1", "n1")];
        // The same node named through another daemon is the same queue.
        assert!(known(&have, &via("http://a:1", "n1")));
        assert!(!known(&have, &via("http://lb:1", "n2")));
        // A daemon reached as it is never stands for a named node.
        assert!(!known(&have, &Place::at("http://lb:1")));
    }

    fn options(through: bool) -> PoolOptions {
        PoolOptions {
            servers: vec!["http://lb:1".to_owned()],
            token: swarmd_client::Bearer::new("swc1.x"),
            agent: "remote".to_owned(),
            concurrency: 1,
            pool_id: "p".to_owned(),
            command: super::super::run::Command {
                program: "true".to_owned(),
                args: Vec::new(),
                env: Vec::new(),
                cwd: None,
                kill_grace: Duration::from_secs(1),
                supervisor: None,
                worktree: None,
            },
            drain: Duration::from_secs(1),
            rediscover: Duration::from_secs(30),
            through,
        }
    }

    #[test]
    fn a_node_is_reached_at_its_url_or_named_through_the_daemon_that_listed_it() {
        assert_eq!(
            places(&options(false), "http://a:1", two_nodes("http://a:1")),
            vec![
                Place::at("http://a:1").in_cluster(true),
                Place::at("http://b:2").in_cluster(true)
            ]
        );
        let through = places(&options(true), "http://lb:1", two_nodes("http://a:1"));
        assert_eq!(
            seen(&through),
            [("http://lb:1", Some("n1")), ("http://lb:1", Some("n2"))]
        );
    }

    #[test]
    fn a_daemon_given_whose_url_no_node_has_is_a_front_reached_by_name() {
        let answer = two_nodes;
        // A node given is no front, however its URL is spelled; a
        // balancer is.
        assert!(!fronts("http://a:1", &answer("http://a:1/")));
        assert!(!fronts("HTTP://A:1", &answer("http://a:1")));
        assert!(!fronts(
            "https://a.example",
            &answer("https://a.example:443/")
        ));
        assert!(fronts("http://a:2", &answer("http://a:1")));
        assert!(fronts("http://lb:1", &answer("http://a:1")));
        // A daemon outside a cluster (or older) names no node: no front.
        assert!(!fronts("http://lb:1", &NodesAnswer::default()));
        // Without the flag, a front's nodes are named through it.
        let named = places(&options(false), "http://lb:1", answer("http://a:1"));
        assert_eq!(
            seen(&named),
            [("http://lb:1", Some("n1")), ("http://lb:1", Some("n2"))]
        );
    }

    #[test]
    fn at_start_a_daemon_given_is_claimed_from_as_its_answer_says() {
        let (a, lb, c, down) = (
            "http://a:1".to_owned(),
            "http://lb:1".to_owned(),
            "http://c:3".to_owned(),
            "http://down:4".to_owned(),
        );
        let answers = vec![
            (&a, Some(two_nodes("http://a:1"))),
            (&lb, Some(two_nodes("http://a:1"))),
            (&c, Some(NodesAnswer::default())),
            (&down, None),
        ];
        let mut given_four = options(false);
        given_four.servers = vec![a.clone(), lb.clone(), c.clone(), down.clone()];
        let places = arrange(&given_four, answers);
        // Node A and the daemon outside a cluster are given; B is learned
        // at its URL, and both nodes through the balancer by name; the
        // balancer is never claimed from as it is, nor the daemon that
        // did not answer.
        let given = places.iter().filter(|p| is_given(&given_four, p)).count();
        assert_eq!(given, 2);
        assert_eq!(
            seen(&places),
            [
                ("http://a:1", None),
                ("http://c:3", None),
                ("http://b:2", None),
                ("http://lb:1", Some("n1")),
                ("http://lb:1", Some("n2")),
            ]
        );
        // Every place but the daemon outside a cluster is a node of one,
        // whose attempts' writes the other nodes relay.
        let clustered: Vec<bool> = places.iter().map(|p| p.cluster).collect();
        assert_eq!(clustered, [true, false, true, true, true]);
    }

    #[test]
    fn a_daemon_that_cannot_be_named_through_is_reached_as_it_is() {
        // Nodes listed without ids (a daemon that predates them).
        let unnamed = || NodesAnswer {
            nodes: vec!["http://a:1".to_owned(), "http://b:2".to_owned()],
            members: Vec::new(),
        };
        assert_eq!(
            places(&options(true), "http://lb:1", unnamed()),
            vec![Place::at("http://lb:1").in_cluster(true)]
        );
        assert_eq!(
            places(&options(false), "http://a:1", unnamed()),
            vec![
                Place::at("http://a:1").in_cluster(true),
                Place::at("http://b:2").in_cluster(true)
            ]
        );
        // A daemon given is one reached as it is, a trailing `/` aside;
        // a node named through it is learned.
        let options = options(false);
        assert!(is_given(&options, &Place::at("http://lb:1/")));
        assert!(!is_given(&options, &Place::named("http://lb:1", "n1")));
        assert!(!is_given(&options, &Place::at("http://a:1")));
    }

    #[test]
    fn a_node_named_by_two_daemons_given_is_reached_through_either() {
        let via = Place::named;
        let mut found = Vec::new();
        gather(&[], &mut found, via("http://a:1", "n1"));
        gather(&[], &mut found, via("http://a:1", "n2"));
        gather(&[], &mut found, via("http://b:2", "n1"));
        gather(&[], &mut found, via("http://b:2", "n2"));
        gather(&[], &mut found, via("http://b:2", "n2"));
        assert_eq!(found.len(), 2);
        for place in &found {
            assert_eq!(
                place.urls().collect::<Vec<_>>(),
                ["http://a:1", "http://b:2"]
            );
        }
        // A daemon outside a cluster is its own place, with no others.
        let mut plain = vec![Place::at("http://c:3")];
        gather(&[], &mut plain, Place::at("http://c:3/"));
        assert!(plain[0].also.is_empty());
    }
}
