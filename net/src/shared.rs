//! State shared by every part of one engine: the current policy (swapped whole by
//! `EngineHandle::set_policy`), the built-in ranges, the DNS memory, the audit log, and
//! the guest's connections (open now, and stale ones to reset in a restored guest).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

use crate::dns::memory::NameMemory;
use crate::log::AuditLog;
use crate::policy::{Builtins, Policy};
use crate::stack::FlowKey;

/// One engine's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    policy: RwLock<Arc<Policy>>,
    pub(crate) builtins: Builtins,
    pub(crate) memory: NameMemory,
    pub(crate) log: AuditLog,
    /// The guest's TCP connections the stack carries (or holds the SYN of) now; after
    /// the NIC connection ended, the ones it carried last.
    open_flows: Mutex<BTreeSet<FlowKey>>,
    /// Connections a restored guest may still believe open, reset in it on the next NIC
    /// connection (see `stack::stale`).
    stale_flows: Mutex<BTreeSet<FlowKey>>,
}

impl Shared {
    pub(crate) fn new(policy: Policy, builtins: Builtins, log: AuditLog) -> Shared {
        Shared {
            policy: RwLock::new(Arc::new(policy)),
            builtins,
            memory: NameMemory::default(),
            log,
            open_flows: Mutex::default(),
            stale_flows: Mutex::default(),
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

    /// The policy in force now; a connection decides with the one it read at its start.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}
