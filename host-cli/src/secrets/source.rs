//! The network helper's view of a sandbox's secrets: its bindings file and the host
//! store, read again on each call so detach, removal and rotation count at once.

use std::path::PathBuf;

use atoll_net::secrets::{Bound, SecretSource};

use super::{binding, store, value};

/// The secrets bound to the sandbox in `dir`.
pub(super) struct SandboxSecrets {
    dir: PathBuf,
}

impl SandboxSecrets {
    pub(super) fn new(dir: PathBuf) -> SandboxSecrets {
        SandboxSecrets { dir }
    }
}

impl SecretSource for SandboxSecrets {
    fn bound(&self, with_values: bool) -> Vec<Bound> {
        // A jailed helper sees neither the store nor the bindings' directory: its runner
        // answers (for this sandbox's bindings only).
        if super::runner::active() {
            return super::runner::bound(with_values);
        }
        binding::load(&self.dir)
            .into_iter()
            .map(|b| match store::load(&b.secret) {
                Ok(file) => Bound {
                    value: if with_values {
                        value::resolve(&file.name, &file.source)
                    } else {
                        Err("not read".into())
                    },
                    name: b.secret,
                    placeholder: b.placeholder,
                    hosts: file.hosts,
                },
                Err(e) => Bound {
                    name: b.secret,
                    placeholder: b.placeholder,
                    hosts: Vec::new(),
                    value: Err(e.to_string()),
                },
            })
            .collect()
    }
}
