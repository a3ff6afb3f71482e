//! Which `Host` and `Origin` values the daemon answers to (docs/security.md,
//! Browsers and DNS rebinding), resolved once from the configuration.
//!
//! A `Host` is accepted when it is an IP literal (a literal cannot be
//! rebound), `localhost` or a name under `.localhost` (browsers resolve
//! those to loopback themselves), or the host of `server.base_url`,
//! `cluster.advertise_url` or an entry of `server.allowed_hosts`.
//!
//! An `Origin` is accepted when it is the daemon's own origin as the request
//! names it (its scheme-less `host:port` equals the request's `Host`, which
//! passed the check above), the origin of `server.base_url`, or an entry of
//! `server.allowed_origins`. `null` and anything unparsable are refused.

use std::collections::HashSet;
use std::net::IpAddr;
use std::str::FromStr;

use http::uri::Authority;

use super::Config;

/// An origin as browsers send it: scheme, lower-case host, port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

/// Parses `scheme://host[:port]` (no path, query or credentials); `None`
/// for `null` and for anything else.
pub fn parse_origin(text: &str) -> Option<Origin> {
    let url = url::Url::parse(text).ok()?;
    let plain = url.path() == "/" || url.path().is_empty();
    if !matches!(url.scheme(), "http" | "https")
        || !plain
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return None;
    }
    Some(Origin {
        scheme: url.scheme().to_owned(),
        host: url.host_str()?.to_ascii_lowercase(),
        port: url.port_or_known_default()?,
    })
}

/// The host of a URL of the configuration, lower-cased.
fn url_host(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    Some(url.host_str()?.to_ascii_lowercase())
}

/// Whether `host` (from a `Host` header or an origin, brackets allowed) is
/// an IP literal.
fn is_ip_literal(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    IpAddr::from_str(bare).is_ok()
}

/// Whether `host` is `localhost` or under `.localhost`.
fn is_localhost(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

/// The hosts and origins of one configuration.
#[derive(Debug, Clone, Default)]
pub struct HostRules {
    /// Host names beyond literals and `localhost`, lower-cased.
    names: HashSet<String>,
    /// Origins beyond the daemon's own.
    origins: HashSet<Origin>,
}

impl HostRules {
    /// The rules of `config`.
    pub fn new(config: &Config) -> HostRules {
        let mut names: HashSet<String> = config
            .server
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let mut origins: HashSet<Origin> = config
            .server
            .allowed_origins
            .iter()
            .filter_map(|o| parse_origin(o))
            .collect();
        let advertise = config
            .cluster
            .as_ref()
            .and_then(|c| c.advertise_url.as_ref());
        for url in config.server.base_url.iter().chain(advertise) {
            names.extend(url_host(url));
        }
        if let Some(own) = config.server.base_url.as_deref().and_then(base_origin) {
            origins.insert(own);
        }
        HostRules { names, origins }
    }

    /// Whether a request naming `host` (a `Host` header's value) is answered.
    pub fn host_allowed(&self, host: &str) -> bool {
        // A `Host` carries no user information (RFC 9110, 7.2).
        if host.contains('@') {
            return false;
        }
        let Ok(authority) = Authority::from_str(host) else {
            return false;
        };
        let name = authority.host().to_ascii_lowercase();
        is_ip_literal(&name) || is_localhost(&name) || self.names.contains(&name)
    }

    /// Whether a browser page of `origin` may call a daemon it reaches as
    /// `host` (the request's `Host`, already allowed; `None` when absent).
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(parsed) = parse_origin(origin) else {
            return false;
        };
        if self.origins.contains(&parsed) {
            return true;
        }
        let Some(Ok(authority)) = host.map(Authority::from_str) else {
            return false;
        };
        let default_port = if parsed.scheme == "https" { 443 } else { 80 };
        authority.host().eq_ignore_ascii_case(&parsed.host)
            && authority.port_u16().unwrap_or(default_port) == parsed.port
    }
}

/// The origin of a base URL, which may carry a path.
fn base_origin(text: &str) -> Option<Origin> {
    let url = url::Url::parse(text).ok()?;
    parse_origin(&url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(extra: &str) -> HostRules {
        let config: Config = toml::from_str(extra).unwrap();
        HostRules::new(&config)
    }

    #[test]
    fn literals_and_localhost_are_hosts_a_rebinding_cannot_take() {
        let rules = rules("");
        for host in [
            "127.0.0.1:7700",
            "127.0.0.1",
            "[::1]:7700",
            "10.1.2.3:80",
            "localhost:7700",
            "LOCALHOST",
            "app.localhost:7700",
        ] {
            assert!(rules.host_allowed(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7700",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "",
            "a b",
            "user@127.0.0.1",
        ] {
            assert!(!rules.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn configured_names_are_hosts_too() {
        let rules = rules(
            "[server]\nbase_url = \"https://swarm.example.com/api\"\nallowed_hosts = [\"Proxy.Internal\"]\n\
             [cluster]\nadvertise_url = \"http://node-b:7700\"\n",
        );
        for host in [
            "swarm.example.com",
            "proxy.internal:8080",
            "node-b:7700",
            "SWARM.example.com:443",
        ] {
            assert!(rules.host_allowed(host), "{host}");
        }
        assert!(!rules.host_allowed("other.example.com"));
    }

    #[test]
    fn only_the_daemons_own_origin_and_listed_ones_pass() {
        let rules = rules(
            "[server]\nbase_url = \"https://swarm.example.com\"\nallowed_origins = [\"http://localhost:3000\"]\n",
        );
        let host = Some("127.0.0.1:7700");
        assert!(rules.origin_allowed("http://127.0.0.1:7700", host));
        assert!(rules.origin_allowed("https://swarm.example.com", host));
        assert!(rules.origin_allowed("http://localhost:3000", host));
        assert!(rules.origin_allowed("http://localhost", Some("localhost:80")));
        for origin in [
            "https://evil.example",
            "http://127.0.0.1:7701",
            "null",
            "",
            "http://127.0.0.1:7700/path",
            "file://",
        ] {
            assert!(!rules.origin_allowed(origin, host), "{origin}");
        }
        assert!(!rules.origin_allowed("http://127.0.0.1:7700", None));
    }

    #[test]
    fn origins_parse_strictly() {
        assert!(parse_origin("http://a.example:8080").is_some());
        assert_eq!(parse_origin("https://A.example").unwrap().port, 443);
        for bad in [
            "null",
            "ftp://a",
            "http://u:p@a",
            "http://a/?q",
            "a.example",
        ] {
            assert!(parse_origin(bad).is_none(), "{bad}");
        }
    }
}
