//! Hostile clients: tenants (see mod.rs).
