//! Resolving `Command.user` (a name from /etc/passwd or a numeric uid) to credentials.
//!
//! The databases are parsed here rather than through libc's `getpwnam`, which is not
//! safe to call between `fork` and `exec` and behaves differently on musl and glibc.
//! Everything is resolved before the fork; the child only makes raw syscalls.

use std::path::Path;

use super::ExecError;

const PASSWD: &str = "/etc/passwd";
const GROUP: &str = "/etc/group";

/// Who a command runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The login name, when the user is in /etc/passwd.
    pub name: Option<String>,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (the primary group included).
    pub groups: Vec<u32>,
    /// Home directory, when the user is in /etc/passwd.
    pub home: Option<String>,
}

/// Looks `user` up in /etc/passwd (and its groups in /etc/group).
pub fn resolve(user: &str) -> Result<Credentials, ExecError> {
    let passwd = read_db(user, Path::new(PASSWD))?;
    // A missing /etc/group only means no supplementary groups.
    let group = std::fs::read_to_string(GROUP).unwrap_or_default();
    resolve_in(user, &passwd, &group)
}

fn read_db(user: &str, path: &Path) -> Result<String, ExecError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        // Without a passwd file only numeric uids can be resolved.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(ExecError::UserDb { user: user.to_owned(), path: path.to_owned(), source }),
    }
}

/// Resolves `user` against the text of /etc/passwd and /etc/group.
fn resolve_in(user: &str, passwd: &str, group: &str) -> Result<Credentials, ExecError> {
    let numeric: Option<u32> = user.parse().ok();
    let entry = passwd.lines().filter_map(PasswdEntry::parse).find(|e| match numeric {
        Some(uid) => e.uid == uid,
        None => e.name == user,
    });
    match (entry, numeric) {
        (Some(e), _) => {
            let mut groups = vec![e.gid];
            groups.extend(member_groups(group, e.name).filter(|g| *g != e.gid));
            Ok(Credentials {
                name: Some(e.name.to_owned()),
                uid: e.uid,
                gid: e.gid,
                groups,
                home: Some(e.home.to_owned()),
            })
        }
        // A uid with no passwd entry still runs, in the group of the same number.
        (None, Some(uid)) => Ok(Credentials { name: None, uid, gid: uid, groups: vec![uid], home: None }),
        (None, None) => Err(ExecError::UnknownUser(user.to_owned())),
    }
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

impl<'a> PasswdEntry<'a> {
    /// `name:password:uid:gid:gecos:home:shell`; malformed lines are skipped.
    fn parse(line: &'a str) -> Option<Self> {
        let mut f = line.split(':');
        let name = f.next().filter(|n| !n.is_empty() && !n.starts_with('#'))?;
        let _password = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        let _gecos = f.next()?;
        let home = f.next()?;
        Some(PasswdEntry { name, uid, gid, home })
    }
}

/// Gids of the /etc/group lines (`name:password:gid:member,member`) that list `user`.
fn member_groups<'a>(group: &'a str, user: &'a str) -> impl Iterator<Item = u32> + 'a {
    group.lines().filter_map(move |line| {
        let mut f = line.split(':');
        let _name = f.next()?;
        let _password = f.next()?;
        let gid = f.next()?.parse().ok()?;
        f.next()?.split(',').any(|m| m.trim() == user).then_some(gid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n# comment\nbroken line\n\
                          alice:x:1000:1000:Alice:/home/alice:/bin/bash\n";
    const GROUP: &str = "root:x:0:\nwheel:x:10:alice,bob\nalice:x:1000:\ndocker:x:999:bob, alice\n";

    #[test]
    fn resolves_names_uids_and_groups() {
        let alice = resolve_in("alice", PASSWD, GROUP).unwrap();
        assert_eq!((alice.uid, alice.gid, alice.groups), (1000, 1000, vec![1000, 10, 999]));
        assert_eq!(alice.home.as_deref(), Some("/home/alice"));
        let root = resolve_in("0", PASSWD, GROUP).unwrap();
        assert_eq!(root.name.as_deref(), Some("root"));
        let unnamed = resolve_in("4242", PASSWD, GROUP).unwrap();
        assert_eq!((unnamed.name, unnamed.uid, unnamed.gid), (None, 4242, 4242));
    }

    #[test]
    fn unknown_name_is_refused() {
        assert!(
            matches!(resolve_in("mallory", PASSWD, GROUP), Err(ExecError::UnknownUser(u)) if u == "mallory")
        );
    }
}
