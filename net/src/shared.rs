//! State shared by every part of one engine: the current policy (swapped whole by
//! `EngineHandle::set_policy`), the built-in ranges (with the host's own addresses,
//! re-read when a decision finds them more than [`HOST_ADDRS_MAX_AGE`] old, so an address
//! the host gains later is denied too), the DNS memory, the audit log, and the guest's
//! connections (open now, and stale ones to reset in a restored guest).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::dns::memory::NameMemory;
use crate::log::AuditLog;
use crate::policy::{Builtins, Policy};
use crate::stack::FlowKey;

/// How old the host's addresses may be when a connection is decided.
pub(crate) const HOST_ADDRS_MAX_AGE: Duration = Duration::from_secs(1);

/// The built-in ranges, and when the host's addresses in them were read (`None`: they
/// were given by the caller and are fixed).
#[derive(Debug)]
struct HostBuiltins {
    current: Arc<Builtins>,
    read_at: Option<Instant>,
}

/// One engine's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    policy: RwLock<Arc<Policy>>,
    builtins: Mutex<HostBuiltins>,
    pub(crate) memory: NameMemory,
    pub(crate) log: AuditLog,
    /// The guest's TCP connections the stack carries (or holds the SYN of) now; after
    /// the NIC connection ended, the ones it carried last.
    open_flows: Mutex<BTreeSet<FlowKey>>,
    /// Connections a restored guest may still believe open, reset in it on the next NIC
    /// connection (see `stack::stale`).
    stale_flows: Mutex<BTreeSet<FlowKey>>,
    /// The secrets swapped at egress, when the sandbox has any way to bind them.
    pub(crate) secrets: Option<crate::secrets::Secrets>,
}

impl Shared {
    /// `refresh`: re-read the host's addresses as they change (they were read from the
    /// host, not given).
    pub(crate) fn new(
        policy: Policy,
        builtins: Builtins,
        refresh: bool,
        log: AuditLog,
        secrets: Option<crate::secrets::Secrets>,
    ) -> Shared {
        Shared {
            policy: RwLock::new(Arc::new(policy)),
            builtins: Mutex::new(HostBuiltins {
                current: Arc::new(builtins),
                read_at: refresh.then(Instant::now),
            }),
            memory: NameMemory::default(),
            log,
            open_flows: Mutex::default(),
            stale_flows: Mutex::default(),
            secrets,
        }
    }

    /// The guest connections open now (or when the NIC connection last ended).
    pub(crate) fn open_flows(&self) -> Vec<FlowKey> {
        self.open_flows.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }

    pub(crate) fn flow_opened(&self, key: FlowKey) {
        self.open_flows.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
    }

    pub(crate) fn flow_closed(&self, key: &FlowKey) {
        self.open_flows.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Adds connections to reset in the guest on the next NIC connection.
    pub(crate) fn add_stale_flows(&self, flows: impl IntoIterator<Item = FlowKey>) {
        self.stale_flows.lock().unwrap_or_else(|e| e.into_inner()).extend(flows);
    }

    /// For a new NIC connection: the stale connections plus those the last one carried
    /// (a new connection is a new QEMU: a restored or brought-back guest); both are
    /// cleared.
    pub(crate) fn take_stale_flows(&self) -> Vec<FlowKey> {
        let mut stale = std::mem::take(&mut *self.stale_flows.lock().unwrap_or_else(|e| e.into_inner()));
        stale.append(&mut self.open_flows.lock().unwrap_or_else(|e| e.into_inner()));
        stale.into_iter().collect()
    }

    /// The built-in ranges with the host's addresses as they are now (at most
    /// [`HOST_ADDRS_MAX_AGE`] old).
    pub(crate) fn builtins(&self) -> Arc<Builtins> {
        let mut b = self.builtins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = b.read_at
            && at.elapsed() > HOST_ADDRS_MAX_AGE
        {
            match crate::hostaddr::host_addrs() {
                Ok(addrs) => b.current = Arc::new(Builtins::with_host_addrs(addrs)),
                Err(e) => tracing::warn!("cannot re-read the host's addresses (keeping the last ones): {e}"),
            }
            b.read_at = Some(Instant::now());
        }
        b.current.clone()
    }

    /// The policy in force now; a connection decides with the one it read at its start.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}
