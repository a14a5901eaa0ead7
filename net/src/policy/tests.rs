//! Unit tests of rule parsing and of the decision order, including attempts to get
//! around it (rebinding, raw IPs with an allowed SNI, mapped IPv6, `0.0.0.0`, `[::1]`).

use std::net::IpAddr;

use super::*;

fn rule(s: &str) -> Rule {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy::from_lists(allow, deny).expect("valid policy")
}

fn strict(allow: &[&str]) -> Policy {
    policy(allow, &["0.0.0.0/0", "::/0"])
}

/// Decides a connection to `ip:port` claiming `claimed`, where `resolved` names resolved
/// to `ip` through the sandbox's DNS.
fn decide(p: &Policy, ip: &str, port: u16, claimed: Option<&str>, resolved: &[&str]) -> Decision {
    let ip: IpAddr = ip.parse().expect("ip");
    let resolved: Vec<String> = resolved.iter().map(|s| s.to_string()).collect();
    let claim = match claimed {
        None => Claim::Unknown,
        Some("") => Claim::NoName,
        Some(name) => Claim::Name(name),
    };
    p.decide(&Request { ip, port, claim, resolved: &resolved }, &Builtins::default())
}

fn verdict(p: &Policy, ip: &str, port: u16, claimed: Option<&str>, resolved: &[&str]) -> (Verdict, String) {
    let d = decide(p, ip, port, claimed, resolved);
    (d.verdict, d.by.rule_text())
}

use Verdict::{Allow, Deny};

#[test]
fn rules_parse_and_print_back_normalised() {
    for (input, shown) in [
        ("pypi.org", "pypi.org"),
        ("PyPI.Org.", "pypi.org"),
        ("*.githubusercontent.com", "*.githubusercontent.com"),
        ("*.Example.COM.", "*.example.com"),
        ("pypi.org:443", "pypi.org:443"),
        ("203.0.113.7", "203.0.113.7"),
        ("203.0.113.7:22", "203.0.113.7:22"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.0.0.0/8:5432", "10.0.0.0/8:5432"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("::/0", "::/0"),
        ("fc00::/7", "fc00::/7"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]:22", "[2001:db8::1]:22"),
        ("[2001:db8::/32]:443", "[2001:db8::/32]:443"),
        ("[::1]", "::1"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ("localhost", "localhost"),
        ("_acme.example.com", "_acme.example.com"),
        (" pypi.org ", "pypi.org"),
    ] {
        let r = rule(input);
        assert_eq!(r.to_string(), shown, "{input}");
        assert_eq!(rule(&r.to_string()), r, "{input} round-trips");
    }
}

#[test]
fn bad_rules_are_refused_with_the_rule_and_the_forms() {
    for (input, why) in [
        ("http://x/", "looks like a URL"),
        ("https://pypi.org", "looks like a URL"),
        ("user@host", "looks like a URL"),
        ("10.0.0.0/33", "out of range"),
        ("::/129", "out of range"),
        ("10.0.0.1/8", "did you mean `10.0.0.0/8`"),
        ("10.0.0.0/x", "out of range"),
        ("pypi.org/24", "not an IP address"),
        ("*.", "names no domain"),
        ("*", "`*` may only be"),
        ("a.*.com", "`*` may only be"),
        ("*.*.com", "`*` may only be"),
        ("*foo.com", "`*` may only be"),
        ("pypi.org:0", "out of range"),
        ("pypi.org:70000", "out of range"),
        ("pypi.org:-1", "not a number"),
        ("pypi.org:", "missing"),
        (":443", "missing"),
        ("", "empty"),
        ("   ", "empty"),
        ("a..b", "empty label"),
        (".example.com", "empty label"),
        ("exa mple.com", "spaces"),
        ("ex!ample.com", "character other than"),
        ("-bad.com", "starts or ends with `-`"),
        ("10.0.0.256", "all numbers"),
        ("1.2.3", "all numbers"),
        ("[203.0.113.7]:80", "only for IPv6"),
        ("[::1", "closing"),
        ("[::1]x", "only `:PORT`"),
        ("2001:db8::zz", "not an IPv6 address"),
        ("bücher.de", "punycode"),
    ] {
        let err = input.parse::<Rule>().expect_err(input);
        let msg = err.to_string();
        assert!(msg.contains(why), "{input:?}: {msg}");
        assert!(msg.contains(&format!("`{input}`")), "names the rule: {msg}");
        assert!(msg.contains("optionally followed by :PORT"), "lists the forms: {msg}");
    }
    let long = format!("{}.com", "a".repeat(64));
    assert!(long.parse::<Rule>().is_err());
}

#[test]
fn comma_lists_and_serde() {
    let p = Policy::from_lists(&["pypi.org,files.pythonhosted.org"], &["0.0.0.0/0", "::/0"]).expect("ok");
    assert_eq!(p.allow_out.len(), 2);
    let json = serde_json::to_string(&p).expect("json");
    assert_eq!(
        json,
        r#"{"allow_out":["pypi.org","files.pythonhosted.org"],"deny_out":["0.0.0.0/0","::/0"]}"#
    );
    assert_eq!(serde_json::from_str::<Policy>(&json).expect("back"), p);
    assert_eq!(serde_json::from_str::<Policy>("{}").expect("empty"), Policy::default());
    let bad = serde_json::from_str::<Policy>(r#"{"allow_out":["10.0.0.0/33"]}"#).expect_err("bad rule");
    assert!(bad.to_string().contains("10.0.0.0/33"), "{bad}");
    assert!(serde_json::from_str::<Policy>(r#"{"allow":["x.com"]}"#).is_err(), "unknown field");
    let trailing = Policy::from_lists(&["pypi.org,"], &[] as &[&str]).expect_err("empty item");
    assert!(trailing.to_string().contains("empty"), "{trailing}");
}

#[test]
fn default_allows_public_and_denies_private_ranges() {
    let p = Policy::default();
    assert_eq!(
        verdict(&p, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test"]),
        (Allow, "default".into())
    );
    assert_eq!(verdict(&p, "2001:db8::10", 80, None, &[]), (Allow, "default".into()));
    for ip in [
        "10.1.2.3",
        "10.0.2.2",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",
        "169.254.169.254",
        "127.0.0.1",
        "127.1.2.3",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "::10.0.0.1",
        "64:ff9b::a00:1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "ff02::1",
    ] {
        let (v, by) = verdict(&p, ip, 80, None, &[]);
        assert_eq!((v, by.as_str()), (Deny, "private-range"), "{ip}");
    }
    // Just outside the private ranges.
    for ip in ["172.32.0.1", "100.128.0.1", "11.0.0.1", "192.169.0.1", "fe00::1"] {
        assert_eq!(verdict(&p, ip, 80, None, &[]).0, Allow, "{ip}");
    }
}

#[test]
fn the_host_own_addresses_are_denied() {
    let p = Policy::default();
    let b = Builtins::with_host_addrs(["198.51.100.2".parse().expect("ip")]);
    let req =
        |ip: &str| Request { ip: ip.parse().expect("ip"), port: 22, claim: Claim::Unknown, resolved: &[] };
    let d = p.decide(&req("198.51.100.2"), &b);
    assert_eq!(d.verdict, Deny);
    assert!(matches!(&d.by, DecidedBy::Builtin(r) if r.what == "host"), "{:?}", d.by);
    assert_eq!(p.decide(&req("::ffff:198.51.100.2"), &b).verdict, Deny, "mapped form of the host");
    assert_eq!(p.decide(&req("198.51.100.3"), &b).verdict, Allow);
}

#[test]
fn rebinding_a_name_to_a_private_address_stays_denied() {
    // Default policy, and even with the name explicitly allowed.
    for p in [Policy::default(), policy(&["rebind.test", "*.test"], &[]), strict(&["rebind.test"])] {
        let (v, _) = verdict(&p, "10.0.0.5", 443, Some("rebind.test"), &["rebind.test"]);
        assert_eq!(v, Deny, "{p:?}");
        assert_eq!(verdict(&p, "169.254.169.254", 80, Some("rebind.test"), &["rebind.test"]).0, Deny);
        assert_eq!(verdict(&p, "127.0.0.1", 80, None, &["rebind.test"]).0, Deny);
    }
    // A broad IP allow does not open private ranges either.
    let p = policy(&["0.0.0.0/0", "::/0"], &[]);
    assert_eq!(verdict(&p, "10.0.0.5", 80, None, &[]), (Deny, "private-range".into()));
    assert_eq!(verdict(&p, "::1", 80, None, &[]).0, Deny);
}

#[test]
fn an_ip_rule_inside_a_private_range_opens_it() {
    let p = policy(&["10.1.0.0/16", "127.0.0.1:8080", "169.254.169.254"], &[]);
    assert_eq!(verdict(&p, "10.1.2.3", 5432, None, &[]), (Allow, "10.1.0.0/16".into()));
    assert_eq!(verdict(&p, "10.2.0.1", 5432, None, &[]), (Deny, "private-range".into()));
    assert_eq!(verdict(&p, "127.0.0.1", 8080, None, &[]), (Allow, "127.0.0.1:8080".into()));
    assert_eq!(verdict(&p, "127.0.0.1", 8081, None, &[]).0, Deny, "other port");
    assert_eq!(verdict(&p, "::ffff:127.0.0.1", 8080, None, &[]).0, Allow, "mapped is the same host");
    assert_eq!(verdict(&p, "169.254.169.254", 80, None, &[]).0, Allow);
    // And a more specific deny inside it still wins.
    let p = policy(&["10.0.0.0/8"], &["10.9.9.9"]);
    assert_eq!(verdict(&p, "10.9.9.9", 80, None, &[]), (Deny, "10.9.9.9".into()));
    assert_eq!(verdict(&p, "10.9.9.8", 80, None, &[]), (Allow, "10.0.0.0/8".into()));
}

#[test]
fn strict_allowlist_allows_only_listed_names_that_resolved_to_the_ip() {
    let p = strict(&["allowed.test", "*.pythonhosted.org"]);
    let ok = |ip, claimed, resolved: &[&str]| verdict(&p, ip, 443, claimed, resolved).0;
    assert_eq!(
        verdict(&p, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test"]),
        (Allow, "allowed.test".into())
    );
    assert_eq!(ok("203.0.113.10", Some("ALLOWED.TEST."), &["allowed.test"]), Allow, "case and trailing dot");
    assert_eq!(ok("203.0.113.10", Some("allowed.test"), &["Allowed.Test."]), Allow);
    assert_eq!(ok("198.51.100.9", Some("files.pythonhosted.org"), &["files.pythonhosted.org"]), Allow);
    assert_eq!(
        ok("198.51.100.9", Some("pythonhosted.org"), &["pythonhosted.org"]),
        Deny,
        "pattern is below the suffix"
    );
    assert_eq!(ok("198.51.100.9", Some("evilpythonhosted.org"), &["evilpythonhosted.org"]), Deny);
    assert_eq!(
        verdict(&p, "203.0.113.20", 443, Some("denied.test"), &["denied.test"]),
        (Deny, "0.0.0.0/0".into())
    );
    // Raw IP: no SNI and nothing resolved to it.
    assert_eq!(ok("203.0.113.10", None, &[]), Deny);
    // Raw IP claiming an allowed SNI that never resolved to this address.
    assert_eq!(ok("203.0.113.99", Some("allowed.test"), &[]), Deny);
    assert_eq!(ok("203.0.113.99", Some("allowed.test"), &["other.test"]), Deny);
    // IPv6 destinations are held by ::/0 as well.
    assert_eq!(ok("2001:db8::10", Some("other.test"), &["other.test"]), Deny);
    assert_eq!(ok("2001:db8::10", Some("allowed.test"), &["allowed.test"]), Allow);
    // Nothing parseable claimed (ssh, raw TCP, a delayed or padded ClientHello, garbage):
    // fail closed, by IP rules only; the allowed name sharing the IP does not count.
    assert_eq!(ok("203.0.113.10", None, &["allowed.test"]), Deny);
    assert_eq!(ok("203.0.113.10", None, &["other.test"]), Deny);
    assert_eq!(verdict(&p, "203.0.113.10", 443, None, &["allowed.test"]), (Deny, "0.0.0.0/0".into()));
    // An IP rule still opens it.
    let with_ip = strict(&["allowed.test", "203.0.113.10:22"]);
    assert_eq!(verdict(&with_ip, "203.0.113.10", 22, None, &["allowed.test"]).0, Allow);
    // Under a denylist, a denied name sharing the address denies the unclaimed connection.
    let deny = policy(&[], &["denied.test"]);
    assert_eq!(
        verdict(&deny, "203.0.113.10", 443, None, &["allowed.test", "denied.test"]),
        (Deny, "denied.test".into())
    );
    assert_eq!(verdict(&deny, "203.0.113.10", 443, None, &["allowed.test"]), (Allow, "default".into()));
    assert_eq!(
        verdict(&deny, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test", "denied.test"]).0,
        Allow
    );
    // TLS without SNI, or an IP literal as Host: the client connected by IP, so the
    // names that resolved to the IP do not count.
    assert_eq!(ok("203.0.113.10", Some(""), &["allowed.test"]), Deny);
    assert_eq!(ok("203.0.113.10", Some("203.0.113.10"), &[]), Deny);
    assert_eq!(ok("203.0.113.10", Some("203.0.113.10"), &["allowed.test"]), Deny);
    assert_eq!(ok("203.0.113.10", Some("[2001:db8::1]"), &["allowed.test"]), Deny);
    // A claimed name that is denied while an allowed one shares the IP: the claim counts.
    assert_eq!(ok("203.0.113.10", Some("denied.test"), &["allowed.test", "denied.test"]), Deny);
}

#[test]
fn most_specific_rule_wins_and_ties_go_to_allow() {
    let p = policy(&["*.example.com"], &["evil.example.com"]);
    assert_eq!(verdict(&p, "203.0.113.1", 443, Some("evil.example.com"), &["evil.example.com"]).0, Deny);
    assert_eq!(verdict(&p, "203.0.113.1", 443, Some("good.example.com"), &["good.example.com"]).0, Allow);
    let p = policy(&["good.example.com"], &["*.example.com"]);
    assert_eq!(verdict(&p, "203.0.113.1", 443, Some("good.example.com"), &["good.example.com"]).0, Allow);
    assert_eq!(
        verdict(&p, "203.0.113.1", 443, Some("x.example.com"), &["x.example.com"]),
        (Deny, "*.example.com".into())
    );
    // Longer pattern suffix beats shorter.
    let p = policy(&["*.a.example.com"], &["*.example.com"]);
    assert_eq!(verdict(&p, "203.0.113.1", 443, Some("x.a.example.com"), &["x.a.example.com"]).0, Allow);
    // A domain beats an IP rule either way round.
    let p = policy(&[], &["allowed.test"]);
    assert_eq!(verdict(&p, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test"]).0, Deny);
    let p = policy(&["allowed.test"], &["203.0.113.10"]);
    assert_eq!(verdict(&p, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test"]).0, Allow);
    // Longer prefix beats shorter; a port beats none; ties go to allow.
    let p = policy(&["203.0.113.0/24"], &["203.0.113.128/25"]);
    assert_eq!(verdict(&p, "203.0.113.200", 80, None, &[]).0, Deny);
    assert_eq!(verdict(&p, "203.0.113.100", 80, None, &[]).0, Allow);
    let p = policy(&["203.0.113.10:443"], &["203.0.113.10"]);
    assert_eq!(verdict(&p, "203.0.113.10", 443, None, &[]).0, Allow);
    assert_eq!(verdict(&p, "203.0.113.10", 80, None, &[]).0, Deny);
    let p = policy(&["203.0.113.10"], &["203.0.113.10"]);
    assert_eq!(verdict(&p, "203.0.113.10", 80, None, &[]).0, Allow, "tie goes to allow");
    // Ports on domain rules.
    let p = strict(&["allowed.test:443"]);
    assert_eq!(verdict(&p, "203.0.113.10", 443, Some("allowed.test"), &["allowed.test"]).0, Allow);
    assert_eq!(verdict(&p, "203.0.113.10", 80, Some("allowed.test"), &["allowed.test"]).0, Deny);
    // A deny-only IP rule on an otherwise default policy.
    let p = policy(&[], &["198.51.100.0/24:587"]);
    assert_eq!(verdict(&p, "198.51.100.1", 587, None, &[]), (Deny, "198.51.100.0/24:587".into()));
    assert_eq!(verdict(&p, "198.51.100.1", 465, None, &[]), (Allow, "default".into()));
}

#[test]
fn port_25_is_denied_unless_an_allow_rule_names_it() {
    let p = Policy::default();
    assert_eq!(verdict(&p, "198.51.100.1", 25, None, &[]), (Deny, "port-25-blocked".into()));
    let p = policy(&["mail.test", "198.51.100.0/24"], &[]);
    assert_eq!(
        verdict(&p, "198.51.100.1", 25, Some("mail.test"), &["mail.test"]).0,
        Deny,
        "portless rules do not open it"
    );
    assert_eq!(verdict(&p, "198.51.100.1", 25, None, &[]).0, Deny);
    let p = policy(&["mail.test:25", "198.51.100.7:25"], &[]);
    assert_eq!(
        verdict(&p, "198.51.100.1", 25, Some("mail.test"), &["mail.test"]),
        (Allow, "mail.test:25".into())
    );
    assert_eq!(verdict(&p, "198.51.100.7", 25, None, &[]), (Allow, "198.51.100.7:25".into()));
    assert_eq!(verdict(&p, "198.51.100.8", 25, None, &[]).0, Deny);
    assert_eq!(verdict(&p, "198.51.100.8", 587, None, &[]).0, Allow, "other mail ports stay open");
}

#[test]
fn dns_refusal_follows_domain_rules_and_strict_allowlists() {
    let p = Policy::default();
    assert!(p.refuses_name("anything.test").is_none());
    let p = policy(&[], &["denied.test", "*.ads.example"]);
    assert!(p.refuses_name("DENIED.test.").is_some());
    assert!(p.refuses_name("x.ads.example").is_some());
    assert!(p.refuses_name("allowed.test").is_none());
    let p = strict(&["allowed.test", "*.pythonhosted.org"]);
    assert!(p.refuses_name("allowed.test").is_none());
    assert!(p.refuses_name("files.pythonhosted.org").is_none());
    assert!(p.refuses_name("other.test").is_some());
    // Only one family denied, or an IP allow present: names still resolve.
    assert!(policy(&[], &["0.0.0.0/0"]).refuses_name("other.test").is_none());
    let p = policy(&["198.51.100.7"], &["0.0.0.0/0", "::/0"]);
    assert!(p.refuses_name("other.test").is_none());
    // A portful deny does not refuse the name (other ports may be allowed).
    assert!(policy(&[], &["denied.test:25"]).refuses_name("denied.test").is_none());
}

#[test]
fn decide_before_peek_only_when_no_claim_could_change_the_verdict() {
    let req = |ip: &'static str, resolved: &'static [String]| Request {
        ip: ip.parse().expect("ip"),
        port: 443,
        claim: Claim::Unknown,
        resolved,
    };
    let b = Builtins::default();
    let names: &'static [String] = Box::leak(vec!["allowed.test".to_string()].into_boxed_slice());
    // Default policy: public is allowed whatever the claim, private denied whatever it.
    let p = Policy::default();
    assert_eq!(p.decide_before_peek(&req("203.0.113.10", &[]), &b).map(|d| d.verdict), Some(Allow));
    assert_eq!(p.decide_before_peek(&req("203.0.113.10", names), &b).map(|d| d.verdict), Some(Allow));
    assert_eq!(p.decide_before_peek(&req("10.0.0.5", names), &b).map(|d| d.verdict), Some(Deny));
    // Allowlist: a raw IP nothing resolved to is refused at once...
    let p = strict(&["allowed.test"]);
    assert_eq!(p.decide_before_peek(&req("203.0.113.10", &[]), &b).map(|d| d.verdict), Some(Deny));
    // ...but once allowed.test resolved to it, the claim decides.
    assert_eq!(p.decide_before_peek(&req("203.0.113.10", names), &b), None);
    // Denied by IP whatever the name.
    let p = policy(&["allowed.test"], &["203.0.113.0/24"]);
    assert_eq!(p.decide_before_peek(&req("203.0.113.10", &[]), &b).map(|d| d.verdict), Some(Deny));
}
