//! The dashboard (docs/dashboard.md): its static assets under `/ui`,
//! embedded at build time by memory-serve (ETag, `If-None-Match`, gzip and
//! brotli), each answer with a strict Content-Security-Policy, an unknown
//! path's `404` too.
//!
//! The assets hold no data and no secret: the page signs in with a token it
//! keeps in `sessionStorage` (handed to new tabs of the origin over a
//! `BroadcastChannel`, never written to disk) and calls the API like any
//! client, with `Authorization: Bearer`. The policy allows scripts, styles and
//! connections to this origin only, no inline script or style, no framing,
//! and Trusted Types with no policy, so assigning a string to an HTML sink
//! (`innerHTML`) throws: every worker or prompt string reaches the page as
//! text.

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::response::Redirect;
use axum::routing::{any, get};
use memory_serve::CacheControl;
use tower::ServiceBuilder;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::app::AppState;

/// The policy every dashboard answer carries.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'; require-trusted-types-for 'script'; \
     trusted-types 'none'";

pub(super) fn routes() -> Router<AppState> {
    // Revalidated on every load (the ETag makes that a 304), so a new
    // daemon's page never runs an old module.
    let assets = memory_serve::load!()
        .index_file(Some("/index.html"))
        .html_cache_control(CacheControl::NoCache)
        .cache_control(CacheControl::NoCache)
        .enable_gzip(true)
        .enable_brotli(true)
        .into_router::<AppState>();
    let headers = ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::overriding(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ));
    // The page is `/ui` (the nested index); `/ui/` is where people type it.
    // Any other path under `/ui` is the API's `404 not_found`, answered
    // here so that it too carries the headers (the daemon's own fallback
    // is outside this layer).
    Router::new()
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .nest("/ui", assets)
        .route("/ui/{*rest}", any(super::not_found))
        .layer(headers)
}
