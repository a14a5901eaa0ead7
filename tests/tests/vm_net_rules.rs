//! Changing one egress rule at a time, and what `create` says about its ports and
//! folders, through the real `atoll` binary and one booted `minimal` VM:
//!
//! - `atoll net allow|deny|rm` add or remove single rules and keep the others (a rule
//!   allowed leaves the deny list and the other way round); removing a rule the sandbox
//!   does not have fails, names it, and changes nothing;
//! - `atoll net set --allow-out` still replaces the list, and says which rules it dropped;
//! - `atoll create --publish` takes Docker's `HOSTPORT:GUESTPORT` and prints the host port
//!   of each published guest port (stdout keeps only the id);
//! - `--mount` of a host folder that does not exist is refused, saying to create it.

use atoll_tests::vm::{Atoll, BOOT_TIMEOUT, text};
use serde_json::{Value, json};

fn lists(policy: &Value) -> (Value, Value) {
    (policy["allow_out"].clone(), policy["deny_out"].clone())
}

#[test]
fn vm_net_rules_add_and_remove_one_at_a_time_and_create_prints_its_ports() {
    let atoll = Atoll::new();

    // A folder that does not exist: refused before anything boots, saying what to do.
    let missing = atoll.state_dir().join("no-such-project");
    let out = atoll.run(&["create", "--name", "m", "--mount", &format!("{}:/work", missing.display())]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("`{}` does not exist", missing.display()))
            && err.contains(&format!("mkdir -p {}", missing.display())),
        "{err}"
    );
    assert!(atoll.sandbox_dirs().is_empty(), "a refused create left {:?}", atoll.sandbox_dirs());

    // --publish in Docker's order; the host ports are printed on stderr, the id alone on stdout.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let chosen = free.local_addr().unwrap().port();
    drop(free);
    let out = atoll.run(&[
        "create",
        "--name",
        "r",
        "--timeout",
        BOOT_TIMEOUT,
        "--publish",
        "8000",
        "--publish",
        &format!("{chosen}:9000"),
        "--allow-out",
        "pypi.org",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout);
    assert_eq!(id.lines().count(), 1, "stdout is the id alone: {id}");
    let ports = atoll.json(&["port", "ls", "r"]);
    let ports = ports.as_array().unwrap();
    let at = |guest: u64| {
        ports.iter().find(|p| p["guest_port"] == guest).unwrap_or_else(|| panic!("{guest}: {ports:?}"))
    };
    assert_eq!(at(9000)["host_port"], chosen, "HOSTPORT:GUESTPORT: {ports:?}");
    let err = text(&out.stderr);
    for guest in [8000, 9000] {
        let url = at(guest)["url"].as_str().unwrap().to_string();
        assert!(err.contains(&format!("guest port {guest} is published at {url}")), "{err}");
    }

    // Adding keeps what is there.
    let p = atoll.json(&["net", "allow", "r", "github.com", "files.pythonhosted.org"]);
    assert_eq!(lists(&p), (json!(["pypi.org", "github.com", "files.pythonhosted.org"]), json!([])));
    let p = atoll.json(&["net", "deny", "r", "*.example.com,pypi.org"]);
    assert_eq!(
        lists(&p),
        (json!(["github.com", "files.pythonhosted.org"]), json!(["*.example.com", "pypi.org"])),
        "a denied rule leaves the allow list"
    );
    let p = atoll.json(&["net", "rm", "r", "pypi.org", "github.com"]);
    assert_eq!(lists(&p), (json!(["files.pythonhosted.org"]), json!(["*.example.com"])));
    // The rules are what the helper enforces and what `net show` reads back.
    assert_eq!(lists(&atoll.json(&["net", "show", "r"])), lists(&p));

    // Removing a rule it does not have: an error naming it; nothing changes.
    let err = atoll.fails(&["net", "rm", "r", "files.pythonhosted.org", "nosuch.org"]);
    assert!(err.contains("no rule `nosuch.org`"), "{err}");
    assert_eq!(lists(&atoll.json(&["net", "show", "r"])), lists(&p), "a refused rm changed the rules");
    let out = atoll.run(&["net", "allow", "r", "http://x/"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = atoll.run(&["net", "allow", "r"]);
    assert_eq!(out.status.code(), Some(2), "a rule is required: {}", text(&out.stderr));

    // `net set` replaces, and says what it dropped.
    let out = atoll.run(&["net", "set", "r", "--allow-out", "crates.io"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("allow_out replaced; dropped: files.pythonhosted.org"), "{said}");
    assert!(said.contains("allow_out: crates.io") && said.contains("deny_out:  *.example.com"), "{said}");

    atoll.json(&["kill", "r"]);
}
