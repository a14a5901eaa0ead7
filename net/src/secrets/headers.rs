//! The rewrite itself, on header maps: placeholders to values in a request, values back
//! to placeholders in a response. Bodies, the request line and trailers are not
//! touched (docs/secrets.md says why).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use http::header::HeaderValue;

use super::Bound;

/// What a request's rewrite did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swapped {
    /// Secrets whose placeholder was replaced by the value.
    pub used: Vec<String>,
    /// Secrets whose placeholder was left as it is, and why (another host, no value).
    pub refused: Vec<(String, String)>,
}

/// Replaces, in every header value of a request to `host`, each placeholder of a secret
/// that names `host` by its value, also inside `Authorization: Basic` (base64). With
/// `allowed` false (SNI and Host disagree) nothing is replaced; every placeholder seen
/// is reported in [`Swapped::refused`].
pub fn swap_request(
    headers: &mut HeaderMap,
    bound: &[Bound],
    host: &str,
    allowed: Result<(), String>,
) -> Swapped {
    let mut out = Swapped::default();
    for value in headers.values_mut() {
        let raw = value.as_bytes();
        let basic = basic_payload(raw);
        let text: &[u8] = basic.as_deref().unwrap_or(raw);
        let mut rewritten: Option<Vec<u8>> = None;
        for b in bound {
            let current = rewritten.as_deref().unwrap_or(text);
            if !contains(current, b.placeholder.as_bytes()) {
                continue;
            }
            let why = match (&allowed, &b.value) {
                (Err(why), _) => Some(why.clone()),
                (Ok(()), _) if !b.names_host(host) => {
                    Some(format!("the secret does not name the host {host}"))
                }
                (Ok(()), Err(why)) => Some(format!("no value: {why}")),
                (Ok(()), Ok(_)) => None,
            };
            match (why, &b.value) {
                (None, Ok(v)) => {
                    rewritten = Some(replace_all(current, b.placeholder.as_bytes(), v.as_bytes()));
                    push_once(&mut out.used, &b.name);
                }
                (why, _) => {
                    let why = why.unwrap_or_default();
                    if !out.refused.iter().any(|(n, _)| n == &b.name) {
                        out.refused.push((b.name.clone(), why));
                    }
                }
            }
        }
        let Some(new) = rewritten else { continue };
        let new = match basic {
            Some(_) => format!("Basic {}", STANDARD.encode(&new)).into_bytes(),
            None => new,
        };
        match HeaderValue::from_bytes(&new) {
            Ok(mut v) => {
                v.set_sensitive(true);
                *value = v;
            }
            Err(_) => {
                // A value that cannot stand in a header: the placeholder stays.
                out.used.clear();
                out.refused.push(("(all)".into(), "a value is not valid in an HTTP header".into()));
                return out;
            }
        }
    }
    out
}

/// Replaces every bound secret's value in a response's header values by its placeholder.
pub fn scrub_response(headers: &mut HeaderMap, bound: &[Bound]) {
    for value in headers.values_mut() {
        let mut current: Option<Vec<u8>> = None;
        for b in bound {
            let Ok(secret) = &b.value else { continue };
            if secret.is_empty() {
                continue;
            }
            let text = current.as_deref().unwrap_or(value.as_bytes());
            if contains(text, secret.as_bytes()) {
                current = Some(replace_all(text, secret.as_bytes(), b.placeholder.as_bytes()));
            }
        }
        if let Some(new) = current
            && let Ok(v) = HeaderValue::from_bytes(&new)
        {
            *value = v;
        }
    }
}

fn push_once(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|n| n == name) {
        list.push(name.to_owned());
    }
}

/// The decoded credentials of `Basic <base64>`, if `value` is that.
fn basic_payload(value: &[u8]) -> Option<Vec<u8>> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    STANDARD.decode(rest.trim_ascii()).ok()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gh() -> Bound {
        Bound {
            name: "gh".into(),
            placeholder: "atoll-secret-gh-abc".into(),
            hosts: vec!["api.example.com".into()],
            value: Ok("REALVALUE".into()),
        }
    }

    #[test]
    fn bearer_and_basic_are_swapped_for_the_secrets_host_only() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer atoll-secret-gh-abc"));
        h.insert(
            "x-basic",
            HeaderValue::from_str(&format!("Basic {}", STANDARD.encode("u:atoll-secret-gh-abc"))).unwrap(),
        );
        let done = swap_request(&mut h, &[gh()], "api.example.com", Ok(()));
        assert_eq!(done.used, vec!["gh".to_string()]);
        assert_eq!(h["authorization"], "Bearer REALVALUE");
        assert_eq!(h["x-basic"], format!("Basic {}", STANDARD.encode("u:REALVALUE")).as_str());

        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer atoll-secret-gh-abc"));
        let done = swap_request(&mut h, &[gh()], "other.example.com", Ok(()));
        assert!(done.used.is_empty());
        assert_eq!(done.refused.len(), 1);
        assert_eq!(h["authorization"], "Bearer atoll-secret-gh-abc");

        let done = swap_request(&mut h, &[gh()], "api.example.com", Err("SNI and Host differ".into()));
        assert!(done.used.is_empty());
        assert_eq!(h["authorization"], "Bearer atoll-secret-gh-abc");
    }

    #[test]
    fn a_value_in_a_response_header_goes_back_as_the_placeholder() {
        let mut h = HeaderMap::new();
        h.insert("x-echo", HeaderValue::from_static("token=REALVALUE;"));
        scrub_response(&mut h, &[gh()]);
        assert_eq!(h["x-echo"], "token=atoll-secret-gh-abc;");
    }
}
