//! `TokenAuthority`: mints and verifies capability tokens with the live
//! keyring, an injected clock and the configured time bounds.
//!
//! The keyring sits behind a std `RwLock` holding an `Arc`: verification only
//! reads, holds the lock for a few microseconds and never across an `.await`;
//! `reload` swaps in a new keyring (after `swarmd keys rotate`) without
//! stopping verification.

use std::sync::{Arc, PoisonError, RwLock};

use crate::auth::claims::Claims;
use crate::auth::error::TokenError;
use crate::auth::keyring::Keyring;
use crate::auth::token::{self, SecretToken};
use crate::clock::Clock;
use crate::gate::{self, Role, Verb, WORKER_LEAF_VERBS};
use crate::ids::{SessionId, TaskId};

/// Largest accepted clock leeway (docs/security.md, Verification, step 5).
pub const MAX_LEEWAY_SECS: u64 = 5;

/// Time bounds for tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthorityConfig {
    /// A token stays valid while `now < exp + leeway_secs`. Values above
    /// `MAX_LEEWAY_SECS` are clamped to it.
    pub leeway_secs: u64,
    /// Longest `exp - iat` that is minted or accepted
    /// (`auth.max_token_ttl_secs`).
    pub max_ttl_secs: u64,
}

impl Default for AuthorityConfig {
    fn default() -> Self {
        Self {
            leeway_secs: MAX_LEEWAY_SECS,
            max_ttl_secs: 86_400,
        }
    }
}

/// A freshly minted token with the claims it carries.
#[derive(Debug, Clone)]
pub struct MintedToken {
    pub token: SecretToken,
    pub claims: Claims,
    /// `claims.exp`: unix seconds after which the token is refused (plus leeway).
    pub expires_secs: u64,
}

/// Mints and verifies `swc1` tokens.
#[derive(Debug)]
pub struct TokenAuthority {
    keyring: RwLock<Arc<Keyring>>,
    clock: Arc<dyn Clock>,
    config: AuthorityConfig,
}

impl TokenAuthority {
    /// An authority over `keyring`, reading time from `clock`.
    pub fn new(keyring: Keyring, clock: Arc<dyn Clock>, config: AuthorityConfig) -> Self {
        Self {
            keyring: RwLock::new(Arc::new(keyring)),
            clock,
            config: AuthorityConfig {
                leeway_secs: config.leeway_secs.min(MAX_LEEWAY_SECS),
                ..config
            },
        }
    }

    /// The effective configuration (leeway already clamped).
    pub fn config(&self) -> AuthorityConfig {
        self.config
    }

    /// The keyring in use now.
    pub fn keyring(&self) -> Arc<Keyring> {
        Arc::clone(&self.keyring.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the keyring: later mints use its current key, and only its
    /// keys verify.
    pub fn reload(&self, keyring: Keyring) {
        *self.keyring.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keyring);
    }

    /// Signs `claims` as given.
    ///
    /// Errors: `BadClaims` for invalid claims, `TtlTooLong` when
    /// `exp - iat` exceeds `max_ttl_secs`, `TooLong` for an oversized token.
    pub fn mint(&self, claims: &Claims) -> Result<SecretToken, TokenError> {
        claims.validate()?;
        if claims.ttl_secs() > self.config.max_ttl_secs {
            return Err(TokenError::TtlTooLong);
        }
        let keyring = self.keyring.read().unwrap_or_else(PoisonError::into_inner);
        token::encode(&keyring, claims)
    }

    /// A worker token for one attempt of `task`: role `worker`, sub
    /// `worker-of-<task>`, the `WORKER_LEAF_VERBS`, valid for `ttl_secs`.
    ///
    /// Errors: `TtlTooLong` when `ttl_secs` exceeds `max_ttl_secs`.
    pub fn mint_worker(
        &self,
        task: TaskId,
        attempt: u32,
        ttl_secs: u64,
    ) -> Result<MintedToken, TokenError> {
        let iat = self.clock.now_secs();
        let claims = Claims {
            sub: format!("worker-of-{task}"),
            role: Role::Worker,
            verbs: WORKER_LEAF_VERBS.to_vec(),
            task: Some(task),
            attempt: Some(attempt),
            sid: None,
            iat,
            exp: iat.saturating_add(ttl_secs),
            jti: Claims::random_jti(),
        };
        self.mint_minted(claims)
    }

    /// A session-level token for `observer` or `senior` carrying every verb the
    /// gate allows that role; sub is the role, or `<role>:<sid>` with a session.
    ///
    /// Errors: `NotMintable` for other roles (admins and operators hold
    /// session secrets, workers get `mint_worker`), `TtlTooLong`.
    pub fn mint_role(
        &self,
        role: Role,
        ttl_secs: u64,
        sid: Option<SessionId>,
    ) -> Result<MintedToken, TokenError> {
        if !matches!(role, Role::Observer | Role::Senior) {
            return Err(TokenError::NotMintable(role));
        }
        let iat = self.clock.now_secs();
        let claims = Claims {
            sub: match sid {
                Some(sid) => format!("{role}:{sid}"),
                None => role.to_string(),
            },
            role,
            verbs: gate::verbs_for(role).collect(),
            task: None,
            attempt: None,
            sid,
            iat,
            exp: iat.saturating_add(ttl_secs),
            jti: Claims::random_jti(),
        };
        self.mint_minted(claims)
    }

    /// A `worker_pool` token bound to `agents` (docs/security.md, Worker pools): it
    /// carries the role's verbs, and its sub is `worker_pool:` and the agent
    /// names joined by `,` (read back by [`pool_agents`]).
    ///
    /// Errors: `Claims` when the names do not fit a sub (empty, a `,` in a
    /// name, too long), `TtlTooLong`.
    pub fn mint_pool(&self, agents: &[String], ttl_secs: u64) -> Result<MintedToken, TokenError> {
        let bad = agents.is_empty()
            || agents
                .iter()
                .any(|a| a.is_empty() || a.contains(',') || a.contains(':'));
        if bad {
            return Err(TokenError::NotMintable(Role::WorkerPool));
        }
        let iat = self.clock.now_secs();
        let claims = Claims {
            sub: format!("{POOL_SUB_PREFIX}{}", agents.join(",")),
            role: Role::WorkerPool,
            verbs: gate::verbs_for(Role::WorkerPool).collect(),
            task: None,
            attempt: None,
            sid: None,
            iat,
            exp: iat.saturating_add(ttl_secs),
            jti: Claims::random_jti(),
        };
        self.mint_minted(claims)
    }

    fn mint_minted(&self, claims: Claims) -> Result<MintedToken, TokenError> {
        let token = self.mint(&claims)?;
        Ok(MintedToken {
            token,
            expires_secs: claims.exp,
            claims,
        })
    }

    /// The unix second from which `claims` no longer verify: their `exp`
    /// plus the leeway.
    pub fn valid_until(&self, claims: &Claims) -> u64 {
        claims.exp.saturating_add(self.config.leeway_secs)
    }

    /// Verification steps 1–5 (docs/security.md) plus the lifetime bound. The claims are returned
    /// for the gate and for binding (step 7), which is the caller's.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        self.verify_bytes(token.as_bytes())
    }

    /// `verify` for a credential that may not be UTF-8 (a raw header value).
    pub fn verify_bytes(&self, token: &[u8]) -> Result<Claims, TokenError> {
        let claims = {
            let keyring = self.keyring.read().unwrap_or_else(PoisonError::into_inner);
            token::decode(token, &keyring)?
        };
        token::check_lifetime(
            &claims,
            self.clock.now_secs(),
            self.config.leeway_secs,
            self.config.max_ttl_secs,
        )?;
        Ok(claims)
    }

    /// `verify`, then the gate (step 6): `verb` must be in the token and
    /// allowed for its role.
    ///
    /// Errors: as `verify`, then `Forbidden`.
    pub fn verify_for(&self, token: &str, verb: Verb) -> Result<Claims, TokenError> {
        let claims = self.verify(token)?;
        claims.check_verb(verb)?;
        Ok(claims)
    }
}

/// How a `worker_pool` token's sub begins; the agent names follow.
pub const POOL_SUB_PREFIX: &str = "worker_pool:";

/// The agents a `worker_pool` token's sub binds it to; empty for any other sub.
pub fn pool_agents(sub: &str) -> Vec<String> {
    sub.strip_prefix(POOL_SUB_PREFIX)
        .map(|names| {
            names
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::error_code::ErrorCode;

    fn authority(clock: Arc<ManualClock>) -> TokenAuthority {
        TokenAuthority::new(Keyring::generate(), clock, AuthorityConfig::default())
    }

    #[test]
    fn a_pool_token_names_its_agents_and_carries_only_the_pool_verbs() {
        let auth = authority(Arc::new(ManualClock::at_secs(5_000)));
        let agents = vec!["builder".to_owned(), "tester".to_owned()];
        let minted = auth.mint_pool(&agents, 600).unwrap();
        let claims = auth.verify(minted.token.expose()).unwrap();
        assert_eq!(claims.role, Role::WorkerPool);
        assert_eq!(pool_agents(&claims.sub), agents);
        assert_eq!(
            claims.verbs,
            gate::verbs_for(Role::WorkerPool).collect::<Vec<_>>()
        );
        assert!(pool_agents("observer").is_empty());
        for bad in [vec![], vec![String::new()], vec!["a,b".to_owned()]] {
            assert!(auth.mint_pool(&bad, 600).is_err(), "{bad:?}");
        }
        assert!(auth.mint_role(Role::WorkerPool, 600, None).is_err());
    }

    #[test]
    fn worker_token_verifies_and_is_gated() {
        let clock = Arc::new(ManualClock::at_secs(1_000_000));
        let auth = authority(clock.clone());
        let task = TaskId::new();
        let minted = auth.mint_worker(task, 3, 1800).unwrap();
        assert_eq!(minted.expires_secs, 1_001_800);
        assert_eq!(minted.claims.sub, format!("worker-of-{task}"));
        let claims = auth
            .verify_for(minted.token.expose(), Verb::PostResult)
            .unwrap();
        assert_eq!(claims, minted.claims);
        assert_eq!((claims.task, claims.attempt), (Some(task), Some(3)));
        let err = auth
            .verify_for(minted.token.expose(), Verb::SpawnTask)
            .unwrap_err();
        assert_eq!(
            (err.public_code(), err.reason()),
            (ErrorCode::Forbidden, "forbidden")
        );
    }

    #[test]
    fn expiry_follows_the_clock_with_leeway() {
        let clock = Arc::new(ManualClock::at_secs(1_000));
        let auth = authority(clock.clone());
        let minted = auth.mint_worker(TaskId::new(), 1, 60).unwrap();
        clock.set_ms((1_060 + MAX_LEEWAY_SECS - 1) * 1000 + 999);
        assert!(auth.verify(minted.token.expose()).is_ok());
        clock.advance_ms(1);
        let err = auth.verify(minted.token.expose()).unwrap_err();
        assert_eq!(
            (err.public_code(), err.reason()),
            (ErrorCode::TokenExpired, "expired")
        );
    }

    #[test]
    fn ttl_bound_applies_to_mint_and_verify() {
        let clock = Arc::new(ManualClock::at_secs(1_000));
        let long = TokenAuthority::new(
            Keyring::generate(),
            clock.clone(),
            AuthorityConfig {
                leeway_secs: 60,
                max_ttl_secs: 1_000,
            },
        );
        assert_eq!(long.config().leeway_secs, MAX_LEEWAY_SECS);
        assert!(matches!(
            long.mint_worker(TaskId::new(), 1, 1_001),
            Err(TokenError::TtlTooLong)
        ));
        let minted = long.mint_worker(TaskId::new(), 1, 1_000).unwrap();
        // The same keys under a tighter bound refuse the token.
        let strict = TokenAuthority::new(
            (*long.keyring()).clone(),
            clock,
            AuthorityConfig {
                leeway_secs: 0,
                max_ttl_secs: 999,
            },
        );
        assert!(matches!(
            strict.verify(minted.token.expose()),
            Err(TokenError::TtlTooLong)
        ));
    }

    #[test]
    fn role_tokens() {
        let auth = authority(Arc::new(ManualClock::at_secs(5_000)));
        let sid = SessionId::new();
        let senior = auth.mint_role(Role::Senior, 600, Some(sid)).unwrap();
        assert_eq!(senior.claims.sub, format!("senior:{sid}"));
        assert_eq!(
            senior.claims.verbs,
            [
                Verb::ReadTask,
                Verb::ReadOutput,
                Verb::Subscribe,
                Verb::Answer
            ]
        );
        assert!(auth.verify_for(senior.token.expose(), Verb::Answer).is_ok());
        let observer = auth.mint_role(Role::Observer, 600, None).unwrap();
        assert_eq!(observer.claims.sub, "observer");
        assert!(
            auth.verify_for(observer.token.expose(), Verb::Answer)
                .is_err()
        );
        for role in [Role::Admin, Role::Operator, Role::Worker] {
            assert!(matches!(
                auth.mint_role(role, 600, None),
                Err(TokenError::NotMintable(_))
            ));
        }
    }
}
