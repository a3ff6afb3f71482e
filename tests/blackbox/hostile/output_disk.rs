//! Hostile clients: output_disk (see mod.rs).
