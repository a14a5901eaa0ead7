//! The stack's table of guest TCP connections: a SYN held until the egress side
//! decides, then a smoltcp socket whose bytes are pumped to and from the egress side's
//! channels, bounded each way by the socket buffers plus [`CHANNEL_CHUNKS`] chunks.
//!
//! At most one socket listens on an endpoint at a time, so a replayed SYN can only be
//! taken by its own socket: an accept or refuse for an endpoint that already has a
//! listener waiting waits for the next turn of the loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddrV4;

use bytes::{Buf, Bytes};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};
use smoltcp::time::Duration;
use smoltcp::wire::{IpEndpoint, IpListenEndpoint};
use tokio::sync::{mpsc, oneshot};

use super::device::FrameDevice;
use super::guest::{GuestReader, GuestStream, GuestWriter};
use super::{FlowId, NewFlow, StackControl};
use crate::shared::Shared;

/// Receive buffer per connection (guest -> outside); > 64 KiB turns window scaling on.
const TCP_RX_BUF: usize = 128 * 1024;
/// Send buffer per connection (outside -> guest).
const TCP_TX_BUF: usize = 256 * 1024;
/// The largest chunk handed to the egress side at once.
const CHUNK: usize = 64 * 1024;
/// Chunks in flight each way per connection.
pub(crate) const CHANNEL_CHUNKS: usize = 2;
/// How long the guest may stay silent while something waits for it (a half-open
/// connection: SYN-ACK sent, no ACK; data unacknowledged; keep-alive probes unanswered)
/// before the connection is dropped. smoltcp counts it between any two packets from
/// the guest once keep-alive is on, so it must be well above [`KEEP_ALIVE`].
pub(crate) const UNANSWERED_TIMEOUT: Duration = Duration::from_secs(90);
/// How often an idle connection is probed (TCP keep-alive towards the guest), so that
/// a live guest always speaks within [`UNANSWERED_TIMEOUT`].
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// How long a connection may carry no byte either way before it is reset (as NATs do:
/// Google Cloud NAT's default is the same 20 minutes).
pub(crate) const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20 * 60);

type Key = (SocketAddrV4, SocketAddrV4);

enum Flow {
    Held { key: Key, syn: Vec<u8> },
    Open(Open),
}

struct Open {
    key: Key,
    handle: SocketHandle,
    to_egress: Option<mpsc::Sender<Bytes>>,
    from_egress: Option<mpsc::Receiver<Bytes>>,
    pending: Bytes,
    fin_sent: bool,
    /// When a byte last moved either way.
    active: std::time::Instant,
}

pub(crate) struct Flows {
    control: StackControl,
    /// Where the keys of open connections are published (for snapshots).
    shared: std::sync::Arc<Shared>,
    next_id: FlowId,
    by_key: HashMap<Key, FlowId>,
    flows: HashMap<FlowId, Flow>,
    /// Endpoints with a socket made this turn, still to take its SYN.
    listening: HashSet<SocketAddrV4>,
    /// Sockets made this turn (checked after the poll).
    new_sockets: Vec<FlowId>,
    deferred: VecDeque<Deferred>,
}

enum Deferred {
    Accept(FlowId, oneshot::Sender<GuestStream>),
    Refuse(FlowId),
}

impl Flows {
    pub(crate) fn new(control: StackControl, shared: std::sync::Arc<Shared>, next_id: FlowId) -> Flows {
        Flows {
            control,
            shared,
            next_id,
            by_key: HashMap::new(),
            flows: HashMap::new(),
            listening: HashSet::new(),
            new_sockets: Vec::new(),
            deferred: VecDeque::new(),
        }
    }

    pub(crate) fn next_id(&self) -> FlowId {
        self.next_id
    }

    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    pub(crate) fn contains(&self, guest: SocketAddrV4, dst: SocketAddrV4) -> bool {
        self.by_key.contains_key(&(guest, dst))
    }

    /// True while the connection's SYN waits for the egress side's verdict.
    pub(crate) fn is_held(&self, guest: SocketAddrV4, dst: SocketAddrV4) -> bool {
        self.by_key
            .get(&(guest, dst))
            .and_then(|id| self.flows.get(id))
            .is_some_and(|f| matches!(f, Flow::Held { .. }))
    }

    /// Keeps a new SYN aside until the egress side decides.
    pub(crate) fn hold(&mut self, guest: SocketAddrV4, dst: SocketAddrV4, syn: Vec<u8>) -> NewFlow {
        let id = self.next_id;
        self.next_id += 1;
        self.by_key.insert((guest, dst), id);
        self.shared.flow_opened((guest, dst));
        self.flows.insert(id, Flow::Held { key: (guest, dst), syn });
        NewFlow { id, guest, dst }
    }

    pub(crate) fn accept(
        &mut self,
        id: FlowId,
        reply: oneshot::Sender<GuestStream>,
        dev: &mut FrameDevice,
        sockets: &mut SocketSet<'static>,
    ) {
        let Some(Flow::Held { key, .. }) = self.flows.get(&id) else { return };
        if self.listening.contains(&key.1) {
            self.deferred.push_back(Deferred::Accept(id, reply));
            return;
        }
        let Some(Flow::Held { key, syn }) = self.flows.remove(&id) else { return };
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; TCP_RX_BUF]),
            tcp::SocketBuffer::new(vec![0; TCP_TX_BUF]),
        );
        socket.set_nagle_enabled(false);
        socket.set_timeout(Some(UNANSWERED_TIMEOUT));
        socket.set_keep_alive(Some(KEEP_ALIVE));
        let endpoint = IpListenEndpoint { addr: Some((*key.1.ip()).into()), port: key.1.port() };
        if socket.listen(endpoint).is_err() {
            self.unkey(&key);
            dev.inject(syn);
            return;
        }
        let handle = sockets.add(socket);
        dev.inject(syn);
        self.listening.insert(key.1);
        self.new_sockets.push(id);
        let (to_egress, from_guest) = mpsc::channel(CHANNEL_CHUNKS);
        let (to_guest, from_egress) = mpsc::channel(CHANNEL_CHUNKS);
        let stream = GuestStream {
            reader: GuestReader { rx: from_guest, wake: self.control.wake.clone() },
            writer: GuestWriter {
                tx: to_guest,
                wake: self.control.wake.clone(),
                cmd: self.control.cmd.clone(),
                id,
            },
        };
        self.flows.insert(
            id,
            Flow::Open(Open {
                key,
                handle,
                to_egress: Some(to_egress),
                from_egress: Some(from_egress),
                pending: Bytes::new(),
                fin_sent: false,
                active: std::time::Instant::now(),
            }),
        );
        if reply.send(stream).is_err() {
            self.abort(id, sockets);
        }
    }

    pub(crate) fn refuse(&mut self, id: FlowId, dev: &mut FrameDevice) {
        let Some(Flow::Held { key, .. }) = self.flows.get(&id) else { return };
        if self.listening.contains(&key.1) {
            self.deferred.push_back(Deferred::Refuse(id));
            return;
        }
        if let Some(Flow::Held { key, syn }) = self.flows.remove(&id) {
            self.unkey(&key);
            // No socket listens on the endpoint, so smoltcp answers the SYN with RST.
            dev.inject(syn);
        }
    }

    pub(crate) fn abort(&mut self, id: FlowId, sockets: &mut SocketSet<'static>) {
        if let Some(Flow::Open(open)) = self.flows.get_mut(&id) {
            sockets.get_mut::<tcp::Socket>(open.handle).abort();
            open.to_egress = None;
            open.from_egress = None;
        }
    }

    /// Accepts and refusals that waited for their endpoint's listener to be used.
    pub(crate) fn start_deferred(&mut self, dev: &mut FrameDevice, sockets: &mut SocketSet<'static>) {
        for _ in 0..self.deferred.len() {
            match self.deferred.pop_front() {
                Some(Deferred::Accept(id, reply)) => self.accept(id, reply, dev, sockets),
                Some(Deferred::Refuse(id)) => self.refuse(id, dev),
                None => break,
            }
        }
    }

    /// After the poll that replayed this turn's SYNs: each new socket must have taken
    /// its own SYN; one that did not (a SYN smoltcp dropped) is removed, and the guest's
    /// retransmitted SYN starts over.
    pub(crate) fn after_ingress(&mut self, sockets: &mut SocketSet<'static>) {
        self.listening.clear();
        for id in std::mem::take(&mut self.new_sockets) {
            let Some(Flow::Open(open)) = self.flows.get(&id) else { continue };
            let socket = sockets.get_mut::<tcp::Socket>(open.handle);
            let guest = IpEndpoint::new((*open.key.0.ip()).into(), open.key.0.port());
            if socket.remote_endpoint() != Some(guest) {
                tracing::debug!("flow {id}: SYN not taken ({:?}); dropped", socket.state());
                socket.abort();
                let handle = open.handle;
                self.remove(id);
                sockets.remove(handle);
            }
        }
    }

    /// Moves bytes between each socket and its egress channels.
    pub(crate) fn pump(&mut self, sockets: &mut SocketSet<'static>) {
        for flow in self.flows.values_mut() {
            let Flow::Open(open) = flow else { continue };
            let socket = sockets.get_mut::<tcp::Socket>(open.handle);
            let before = (socket.recv_queue(), socket.send_queue(), open.pending.len());
            pump_from_guest(open, socket);
            pump_to_guest(open, socket);
            if (socket.recv_queue(), socket.send_queue(), open.pending.len()) != before {
                open.active = std::time::Instant::now();
            } else if open.active.elapsed() > IDLE_TIMEOUT {
                tracing::debug!("connection {:?} idle for {} s; reset", open.key, IDLE_TIMEOUT.as_secs());
                socket.abort();
                open.to_egress = None;
                open.from_egress = None;
            }
        }
    }

    /// Forgets connections whose socket is closed.
    pub(crate) fn reap(&mut self, sockets: &mut SocketSet<'static>) {
        let done: Vec<(FlowId, SocketHandle)> = self
            .flows
            .iter()
            .filter_map(|(id, flow)| match flow {
                Flow::Open(open) => {
                    let state = sockets.get::<tcp::Socket>(open.handle).state();
                    matches!(state, State::Closed | State::TimeWait).then_some((*id, open.handle))
                }
                Flow::Held { .. } => None,
            })
            .collect();
        for (id, handle) in done {
            self.remove(id);
            sockets.remove(handle);
        }
    }

    fn remove(&mut self, id: FlowId) {
        let key = match self.flows.remove(&id) {
            Some(Flow::Open(open)) => open.key,
            Some(Flow::Held { key, .. }) => key,
            None => return,
        };
        self.unkey(&key);
    }

    fn unkey(&mut self, key: &Key) {
        self.by_key.remove(key);
        self.shared.flow_closed(key);
    }

    /// Whether the stack carries (or holds the SYN of) the connection `key`.
    pub(crate) fn has(&self, key: &Key) -> bool {
        self.by_key.contains_key(key)
    }
}

fn pump_from_guest(open: &mut Open, socket: &mut tcp::Socket<'_>) {
    if let Some(tx) = &open.to_egress {
        let mut gave_up = false;
        while socket.can_recv() {
            match tx.try_reserve() {
                Ok(permit) => match socket.recv(|buf| {
                    let n = buf.len().min(CHUNK);
                    (n, Bytes::copy_from_slice(&buf[..n]))
                }) {
                    Ok(chunk) => permit.send(chunk),
                    Err(_) => break,
                },
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => {
                    // The egress side stopped reading: it has given up on the connection.
                    socket.abort();
                    gave_up = true;
                    break;
                }
            }
        }
        if gave_up {
            open.to_egress = None;
            open.from_egress = None;
            return;
        }
        let guest_closed = matches!(
            socket.state(),
            State::CloseWait | State::LastAck | State::Closing | State::TimeWait | State::Closed
        );
        if guest_closed && !socket.can_recv() {
            // Dropping the sender is the EOF the egress side reads.
            open.to_egress = None;
        }
    }
}

fn pump_to_guest(open: &mut Open, socket: &mut tcp::Socket<'_>) {
    loop {
        if open.pending.is_empty() {
            let Some(rx) = open.from_egress.as_mut() else { break };
            match rx.try_recv() {
                Ok(chunk) => open.pending = chunk,
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open.from_egress = None;
                    break;
                }
            }
        }
        if !socket.may_send() {
            break;
        }
        match socket.send_slice(&open.pending) {
            Ok(0) => break,
            Ok(n) => open.pending.advance(n),
            Err(_) => {
                open.pending.clear();
                break;
            }
        }
    }
    if open.from_egress.is_none() && open.pending.is_empty() && !open.fin_sent {
        socket.close();
        open.fin_sent = true;
    }
}
