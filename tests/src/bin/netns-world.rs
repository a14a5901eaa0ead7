//! `netns-world`: the test "outside world" ([`atoll_tests::netns::World`]) for tests that
//! are not in Rust (tests/mcp). Prints one JSON line, `{"client": NETNS, "world": NETNS,
//! "cert": PATH}`, then keeps the world up until its stdin closes, and tears it down.

use std::io::{Read, Write};

fn main() {
    let world = atoll_tests::netns::World::create();
    let info = serde_json::json!({
        "client": world.client.name(),
        "world": world.world.name(),
        "cert": world.cert(),
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{info}").expect("write to stdout");
    out.flush().expect("flush stdout");
    drop(out);
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(world);
}
