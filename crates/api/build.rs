//! Embeds the dashboard's assets (`ui/`) into the binary, in debug builds
//! too, so what the tests serve is what ships (docs/dashboard.md).

fn main() {
    memory_serve::load_directory_with_embed("ui", true);
}
