//! The sandbox's DNS server (10.0.2.2:53, UDP and TCP): queries parsed and answered with
//! hickory, resolved with hickory-resolver from the host's resolv.conf. A name the
//! policy refuses outright gets NXDOMAIN (not REFUSED: musl's resolver waits out its
//! timeout on REFUSED). Every A/AAAA answer is remembered ([`memory`]) so a later
//! connection to the address can be tied to the name.
//!
//! - [`memory`]: IP -> names, with TTL, bounded.

pub mod memory;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::ResolverOpts;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError, NoRecords};
use hickory_resolver::proto::op::{Message, MessageType, OpCode, ResponseCode};

use crate::log::{Kind, Record};
use crate::policy::Verdict;
use crate::shared::Shared;

/// The largest UDP answer sent to a client that did not announce a larger one (EDNS).
const PLAIN_UDP_LIMIT: usize = 512;

/// The DNS server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DnsSetupError {
    /// The resolver configuration could not be read.
    #[error("cannot read the DNS configuration {}; the sandbox's DNS forwards to the servers named there", path.display())]
    ResolvConf {
        /// The resolv.conf path.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The resolver configuration is unusable.
    #[error("cannot use the DNS configuration {}: {message}", path.display())]
    Config {
        /// The resolv.conf path.
        path: std::path::PathBuf,
        /// hickory's complaint.
        message: String,
    },
}

/// A resolver using the servers of `resolv_conf` (the host's, or a namespace's).
pub(crate) fn resolver(resolv_conf: &Path) -> Result<TokioResolver, DnsSetupError> {
    let data = std::fs::read(resolv_conf)
        .map_err(|source| DnsSetupError::ResolvConf { path: resolv_conf.to_owned(), source })?;
    let config_error =
        |e: NetError| DnsSetupError::Config { path: resolv_conf.to_owned(), message: e.to_string() };
    let (config, mut opts): (_, ResolverOpts) =
        hickory_resolver::system_conf::parse_resolv_conf(data).map_err(config_error)?;
    // Search domains are the guest's business: queries arrive fully qualified.
    opts.ndots = 0;
    TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
        .with_options(opts)
        .build()
        .map_err(config_error)
}

/// Answers the sandbox's DNS queries.
pub(crate) struct DnsServer {
    resolver: TokioResolver,
    shared: Arc<Shared>,
}

impl DnsServer {
    /// A server answering with `resolver` (see [`resolver`]).
    pub(crate) fn new(resolver: TokioResolver, shared: Arc<Shared>) -> DnsServer {
        DnsServer { resolver, shared }
    }

    /// The answer to one query message; `None` when it is not even a DNS header
    /// (dropped). `max_len` is the transport's limit (UDP) or `None` (TCP).
    pub(crate) async fn answer(&self, query: &[u8], udp: bool) -> Option<Vec<u8>> {
        let start = (SystemTime::now(), Instant::now());
        let request = match Message::from_vec(query) {
            Ok(m) => m,
            Err(_) if query.len() >= 12 => {
                let id = u16::from_be_bytes([query[0], query[1]]);
                return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr).to_vec().ok();
            }
            Err(_) => return None,
        };
        let id = request.metadata.id;
        if request.metadata.message_type != MessageType::Query || request.metadata.op_code != OpCode::Query {
            return Message::error_msg(id, request.metadata.op_code, ResponseCode::NotImp).to_vec().ok();
        }
        let [question] = request.queries.as_slice() else {
            return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr).to_vec().ok();
        };
        let name = question.name().to_ascii();
        let name = name.strip_suffix('.').unwrap_or(&name).to_ascii_lowercase();
        let mut response = Message::response(id, OpCode::Query);
        response.metadata.recursion_desired = request.metadata.recursion_desired;
        response.metadata.recursion_available = true;
        response.add_query(question.clone());

        let policy = self.shared.policy();
        let mut record = if let Some(by) = policy.refuses_name(&name) {
            response.metadata.response_code = ResponseCode::NXDomain;
            Record::new(start.0, Kind::Dns, Verdict::Deny, by.rule_text())
        } else if !self.shared.log.healthy() {
            // The audit log cannot be written: nothing goes out unlogged, queries included.
            response.metadata.response_code = ResponseCode::ServFail;
            Record::new(start.0, Kind::Dns, Verdict::Deny, "audit-log-unwritable".into())
        } else {
            let mut record = Record::new(start.0, Kind::Dns, Verdict::Allow, "default".into());
            match self.resolver.lookup(question.name().clone(), question.query_type()).await {
                Ok(lookup) => {
                    for answer in lookup.answers() {
                        if let Some(ip) = answer.data.ip_addr() {
                            self.shared.memory.remember(ip, &name, Duration::from_secs(answer.ttl.into()));
                            record.ip.get_or_insert(ip);
                        }
                    }
                    response.add_answers(lookup.answers().iter().cloned());
                }
                Err(NetError::Dns(DnsError::NoRecordsFound(NoRecords { response_code, .. }))) => {
                    response.metadata.response_code = response_code;
                    record.error = Some(format!("no records ({response_code})"));
                }
                Err(e) => {
                    response.metadata.response_code = ResponseCode::ServFail;
                    record.error = Some(e.to_string());
                }
            }
            record
        };
        record.name = Some(name);
        record.query_type = Some(question.query_type().to_string());
        record.port = 53;
        record.duration_ms = u64::try_from(start.1.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.shared.log.write(&record);

        let limit = request
            .edns
            .as_ref()
            .map_or(PLAIN_UDP_LIMIT, |e| usize::from(e.max_payload()).max(PLAIN_UDP_LIMIT));
        let bytes = response.to_vec().ok()?;
        if udp && bytes.len() > limit {
            return response.truncate().to_vec().ok();
        }
        Some(bytes)
    }
}
