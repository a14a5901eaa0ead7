//! State shared by every part of one engine: the current policy (swapped whole by
//! `EngineHandle::set_policy`), the built-in ranges, the DNS memory and the audit log.

use std::sync::{Arc, RwLock};

use crate::dns::memory::NameMemory;
use crate::log::AuditLog;
use crate::policy::{Builtins, Policy};

/// One engine's shared state.
#[derive(Debug)]
pub(crate) struct Shared {
    policy: RwLock<Arc<Policy>>,
    pub(crate) builtins: Builtins,
    pub(crate) memory: NameMemory,
    pub(crate) log: AuditLog,
}

impl Shared {
    pub(crate) fn new(policy: Policy, builtins: Builtins, log: AuditLog) -> Shared {
        Shared { policy: RwLock::new(Arc::new(policy)), builtins, memory: NameMemory::default(), log }
    }

    /// The policy in force now; a connection decides with the one it read at its start.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}
