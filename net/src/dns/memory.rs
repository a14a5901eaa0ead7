//! What the sandbox's DNS answered: IP -> the names that resolved to it, each until its
//! TTL (at least [`MIN_KEEP`]) runs out. Bounded: at most [`MAX_IPS`] addresses and
//! [`MAX_NAMES_PER_IP`] names per address; the entry closest to expiry goes first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time an answer is remembered, whatever its TTL: clients keep
/// addresses past their TTL (and TTL 0 answers exist).
pub const MIN_KEEP: Duration = Duration::from_secs(300);
/// The longest time an answer is remembered.
pub const MAX_KEEP: Duration = Duration::from_secs(24 * 3600);
/// The most addresses remembered.
pub const MAX_IPS: usize = 4096;
/// The most names remembered for one address.
pub const MAX_NAMES_PER_IP: usize = 16;

/// IP -> names memory, shared by the DNS server and the egress path.
#[derive(Debug, Default)]
pub struct NameMemory {
    map: Mutex<HashMap<IpAddr, Vec<(String, Instant)>>>,
}

impl NameMemory {
    /// Remembers that `name` resolved to `ip` with `ttl`.
    pub fn remember(&self, ip: IpAddr, name: &str, ttl: Duration) {
        self.remember_at(Instant::now(), ip, name, ttl);
    }

    fn remember_at(&self, now: Instant, ip: IpAddr, name: &str, ttl: Duration) {
        let until = now + ttl.clamp(MIN_KEEP, MAX_KEEP);
        let ip = ip.to_canonical();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(&ip) && map.len() >= MAX_IPS {
            map.retain(|_, names| {
                names.retain(|(_, t)| *t > now);
                !names.is_empty()
            });
            if map.len() >= MAX_IPS
                && let Some(oldest) =
                    map.iter().min_by_key(|(_, n)| n.iter().map(|(_, t)| *t).max()).map(|(ip, _)| *ip)
            {
                map.remove(&oldest);
            }
        }
        let names = map.entry(ip).or_default();
        names.retain(|(_, t)| *t > now);
        if let Some(entry) = names.iter_mut().find(|(n, _)| n == name) {
            entry.1 = entry.1.max(until);
        } else {
            if names.len() >= MAX_NAMES_PER_IP
                && let Some(i) = names.iter().enumerate().min_by_key(|(_, (_, t))| *t).map(|(i, _)| i)
            {
                names.swap_remove(i);
            }
            names.push((name.to_owned(), until));
        }
    }

    /// The names that resolved to `ip` and have not expired.
    pub fn names(&self, ip: IpAddr) -> Vec<String> {
        self.names_at(Instant::now(), ip)
    }

    fn names_at(&self, now: Instant, ip: IpAddr) -> Vec<String> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&ip.to_canonical())
            .map(|names| names.iter().filter(|(_, t)| *t > now).map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_expire_after_their_ttl_but_not_before_the_minimum() {
        let m = NameMemory::default();
        let t0 = Instant::now();
        let ip: IpAddr = "203.0.113.10".parse().expect("ip");
        m.remember_at(t0, ip, "allowed.test", Duration::from_secs(0));
        m.remember_at(t0, ip, "other.test", Duration::from_secs(3600));
        assert_eq!(m.names_at(t0, ip), ["allowed.test", "other.test"]);
        assert_eq!(m.names_at(t0, "::ffff:203.0.113.10".parse().expect("ip")).len(), 2, "mapped form");
        assert_eq!(m.names_at(t0 + MIN_KEEP + Duration::from_secs(1), ip), ["other.test"]);
        assert!(m.names_at(t0 + Duration::from_secs(3601), ip).is_empty());
    }

    #[test]
    fn memory_is_bounded() {
        let m = NameMemory::default();
        let t0 = Instant::now();
        let ip: IpAddr = "203.0.113.10".parse().expect("ip");
        for i in 0..100 {
            m.remember_at(t0, ip, &format!("n{i}.test"), Duration::from_secs(600 + i));
        }
        let names = m.names_at(t0, ip);
        assert_eq!(names.len(), MAX_NAMES_PER_IP);
        assert!(names.contains(&"n99.test".to_string()), "the newest stays");
        for i in 0..(u32::try_from(MAX_IPS).unwrap() + 10) {
            m.remember_at(t0, IpAddr::from(i.to_be_bytes()), "x.test", Duration::from_secs(600));
        }
        assert!(m.map.lock().expect("lock").len() <= MAX_IPS);
    }
}
