//! The `atoll cp` location grammar: `:/path` and `NAME:/path` are guest paths, anything
//! else a host path (write `./a:/b` for a host path that looks like one).

use std::path::PathBuf;

/// One side of `atoll cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A path on this machine.
    Host(PathBuf),
    /// A path in a guest: the current target's (`sandbox: None`) or a named sandbox's.
    Guest {
        /// `NAME` of `NAME:/path`.
        sandbox: Option<String>,
        /// The absolute guest path.
        path: String,
    },
}

impl Location {
    /// Reads `:/path`, `NAME:/path` or a host path.
    pub(crate) fn parse(s: &str) -> Location {
        if let Some((name, path)) = s.split_once(':')
            && path.starts_with('/')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !name.starts_with('.')
        {
            let sandbox = (!name.is_empty()).then(|| name.to_string());
            return Location::Guest { sandbox, path: path.to_string() };
        }
        Location::Host(PathBuf::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(
            Location::parse(":/etc/hosts"),
            Location::Guest { sandbox: None, path: "/etc/hosts".into() }
        );
        assert_eq!(
            Location::parse("dev-1:/work"),
            Location::Guest { sandbox: Some("dev-1".into()), path: "/work".into() }
        );
        assert_eq!(Location::parse("./a:/b"), Location::Host("./a:/b".into()));
        assert_eq!(Location::parse("/tmp/x"), Location::Host("/tmp/x".into()));
        assert_eq!(Location::parse("rel:x"), Location::Host("rel:x".into()));
        assert_eq!(Location::parse("a b:/x"), Location::Host("a b:/x".into()));
    }
}
