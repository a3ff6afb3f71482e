//! Hostile clients: git_planting (see mod.rs).
