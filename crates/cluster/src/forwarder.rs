//! Where a request about another node's task, run or queue goes, and the
//! client that takes it there (docs/decisions.md, Cluster; `route`
//! decides from the request alone, `Forwarder::route` asks the database).
//! The API surface relays the bytes (`swarmd-api`'s `cluster::forward`).

use std::time::Duration;

use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use swarmd_engine::Engine;
use swarmd_postgres::{NodeId, OwnerKey, PgCluster, TaskOwner};

use crate::route::{self, Route, Subject};

/// Marks a request one node forwarded to another: its value is the
/// forwarding node's id.
pub const FORWARDED_BY: &str = "x-swarmd-forwarded-by";
/// Names, on a relayed answer, the node that served it.
pub const FORWARDED_TO: &str = "x-swarmd-forwarded-to";

/// How long a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a node needs to forward: the database that names owners, its own
/// id and one pooled HTTP client for its peers.
#[derive(Debug, Clone)]
pub struct Forwarder {
    db: PgCluster,
    node: NodeId,
    client: reqwest::Client,
}

impl Forwarder {
    /// Every live node of the cluster, this one included, and where peers
    /// reach it.
    pub async fn alive_nodes(
        &self,
    ) -> Result<Vec<(NodeId, String)>, swarmd_output_store::StoreError> {
        self.db.alive_nodes().await
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// A forwarder of node `node`, reading owners from `db`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(db: PgCluster, node: NodeId) -> Result<Forwarder, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // A peer is another swarmd: never a proxy's business.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Forwarder { db, node, client })
    }

    /// Where a request about `subject` is served (`route::decide`); a
    /// task this node holds is served here without asking the database.
    pub async fn route(
        &self,
        engine: &Engine,
        runner: &swarmd_flow_run::Runner,
        subject: &Subject,
        forwarded: bool,
    ) -> Route {
        if let Subject::Run(id) = subject
            && runner.is_open(*id)
        {
            return Route::Local;
        }
        if let Subject::Node(id) = subject {
            if *id == self.node {
                return Route::Local;
            }
            return match self.db.live_owner(OwnerKey::Node(*id)).await {
                Ok(None) => Route::NoSuchNode,
                Ok(Some(node)) if !node.alive => {
                    Route::Unavailable("the node x-swarmd-node names is not alive now; retry")
                }
                Ok(owner) => route::decide(owner, self.node, forwarded),
                Err(error) => {
                    tracing::warn!(%error, "cannot read where the named node is");
                    Route::Unavailable("cannot read where the named node is; retry")
                }
            };
        }
        let Some(key) = route::remote_key(engine, subject) else {
            return Route::Local;
        };
        match self.db.live_owner(key).await {
            Ok(None) => {
                if let OwnerKey::Handle(digest) = key {
                    self.learn_handle(engine, digest).await;
                }
                Route::Local
            }
            Ok(owner) => route::decide(owner, self.node, forwarded),
            Err(error) => {
                tracing::warn!(%error, "cannot read which node holds the task");
                Route::Unavailable("cannot read which node holds the task; retry")
            }
        }
    }

    /// Reads the handle of a task no node holds any more (finished, often
    /// by another node) into the engine, so its worker gets the answer it
    /// would get from the node that held the task (`410 task_terminal`, or
    /// its result's replay) instead of `401`.
    async fn learn_handle(&self, engine: &Engine, digest: [u8; 32]) {
        match self
            .db
            .handle_record(digest, engine.clock().now_secs())
            .await
        {
            Ok(Some(record)) => engine.learn_retired_handle(digest, record),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cannot read a worker handle from the database"),
        }
    }

    /// A request to a peer, marked as forwarded by this node.
    pub fn to_peer(
        &self,
        method: Method,
        owner: &TaskOwner,
        path_and_query: &str,
        mut headers: HeaderMap,
        timeout: Duration,
    ) -> reqwest::RequestBuilder {
        let url = format!(
            "{}{path_and_query}",
            owner.advertise_url.trim_end_matches('/')
        );
        if let Some(value) = headers.get_mut(header::AUTHORIZATION) {
            value.set_sensitive(true);
        }
        if let Ok(me) = HeaderValue::from_str(&self.node.to_string()) {
            headers.insert(HeaderName::from_static(FORWARDED_BY), me);
        }
        self.client
            .request(method, url)
            .headers(headers)
            .timeout(timeout)
    }
}
