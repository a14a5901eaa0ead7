//! The test "outside world" itself: from the client namespace, without any sandbox in
//! between, every test host answers (the private and metadata ones included, so that a
//! sandbox failing to reach them proves the policy, not a missing server).

use std::process::Output;

use atoll_tests::netns::{ALLOWED_HOST, METADATA_HOST, PRIVATE_HOST, World};

fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_world_answers_the_client_directly() {
    let world = World::create();
    let getent = ok(world.client.exec("getent").args(["hosts", "rebind.test"]).output().expect("getent"));
    assert!(getent.starts_with(&PRIVATE_HOST.to_string()), "{getent}");
    let cert = world.cert();
    let https = ok(world
        .client
        .exec("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&cert)
        .arg("https://other.test/")
        .output()
        .expect("curl"));
    assert_eq!(https, "hello from 198.51.100.10 host=other.test sni=other.test\n");
    for host in [ALLOWED_HOST, PRIVATE_HOST, METADATA_HOST] {
        let body = ok(world
            .client
            .exec("curl")
            .args(["-sS", "--max-time", "10", &format!("http://{host}/")])
            .output()
            .expect("curl"));
        assert_eq!(body, format!("hello from {host} host={host} sni=-\n"));
    }
    let echo = ok(world
        .client
        .exec("python3")
        .args(["-c", "import socket; s=socket.create_connection(('echo.test', 7)); s.sendall(b'ping'); print(s.recv(4).decode())"])
        .output()
        .expect("python3"));
    assert_eq!(echo, "ping\n");
}
