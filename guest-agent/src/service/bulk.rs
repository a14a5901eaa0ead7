//! Server streams whose messages are mostly one `bytes` field (ReadFile's chunks,
//! DownloadDir's zip), framed for gRPC without copying that field.
//!
//! tonic encodes every message into its own buffer, so each 1 MiB chunk a file read
//! produces would be copied once more before it reaches the socket. Here the gRPC
//! prefix and the other fields go in a small frame of their own and the chunk's bytes
//! follow as the next HTTP/2 DATA frame, as they are. Inside a VM under software
//! emulation that copy was a fifth of the agent's CPU time in a download (perf), time
//! the guest's one vCPU then did not spend sending.
//!
//! Only the reply is framed here; the request is decoded by tonic's own `Streaming`,
//! and the handler is the same [`Agent`](atoll_proto::agent::v1::agent_server::Agent)
//! method the generated server would call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use atoll_proto::agent::v1 as pb;
use atoll_proto::limits::MAX_MESSAGE_BYTES;
use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use tonic::Status;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Streaming};
use tonic::metadata::MetadataValue;
use tonic_prost::ProstDecoder;

use super::BoxStream;

/// A message whose bulk is one `bytes` field.
pub(super) trait Bulk: Message + Sized {
    /// Takes the bulk out of the message: its field number and its bytes. `None` when
    /// this message carries none (DownloadDir's closing summary), or when the field is
    /// one protobuf leaves out when empty.
    fn take_bulk(&mut self) -> Option<(u32, Bytes)>;
}

impl Bulk for pb::ReadFileChunk {
    fn take_bulk(&mut self) -> Option<(u32, Bytes)> {
        // A plain proto3 field: empty means absent.
        Some((1, std::mem::take(&mut self.data))).filter(|(_, data)| !data.is_empty())
    }
}

impl Bulk for pb::DownloadDirChunk {
    fn take_bulk(&mut self) -> Option<(u32, Bytes)> {
        use pb::download_dir_chunk::Part;
        match self.part.take() {
            // A `oneof` member is sent even when empty: it says which member is set.
            Some(Part::Data(data)) => Some((1, data)),
            other => {
                self.part = other;
                None
            }
        }
    }
}

/// Bulk up to this size is copied in with the prefix: one frame instead of two, for the
/// small reads most tool calls make.
const COPY_MAX: usize = 16 * 1024;

/// Serves one server-streaming call: decodes the request, runs `handler`, and frames
/// its stream with [`BulkBody`]. An error before the stream is a trailers-only reply,
/// as tonic's server gives.
pub(super) async fn serve<Req, M, F, Fut>(req: http::Request<Body>, handler: F) -> http::Response<Body>
where
    Req: Message + Default + Send + 'static,
    M: Bulk + Send + 'static,
    F: FnOnce(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<BoxStream<M>>, Status>>,
{
    let reply = match decode(req).await {
        Ok(req) => handler(req).await,
        Err(status) => Err(status),
    };
    match reply {
        Ok(reply) => {
            let (metadata, stream, _) = reply.into_parts();
            let mut http = http::Response::new(Body::new(BulkBody::new(stream)));
            *http.headers_mut() = metadata.into_headers();
            // Metadata may not set what gRPC itself says (tonic strips the same names).
            for reserved in ["te", "grpc-message", "grpc-message-type", "grpc-status"] {
                http.headers_mut().remove(reserved);
            }
            http.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
            http
        }
        Err(status) => status.into_http(),
    }
}

/// The one request message of a server-streaming call, with its metadata.
async fn decode<Req: Message + Default + Send + 'static>(
    req: http::Request<Body>,
) -> Result<tonic::Request<Req>, Status> {
    if let Some(encoding) = req.headers().get("grpc-encoding").filter(|e| *e != "identity") {
        let mut status = Status::unimplemented(format!(
            "the agent takes uncompressed requests, not {}",
            String::from_utf8_lossy(encoding.as_bytes())
        ));
        status.metadata_mut().insert("grpc-accept-encoding", MetadataValue::from_static("identity"));
        return Err(status);
    }
    let (mut parts, body) = req.into_parts();
    let decoder = ProstDecoder::<Req>::new(BufferSettings::default());
    let mut messages = Streaming::new_request(decoder, body, None, Some(MAX_MESSAGE_BYTES));
    let message = messages
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the request carried no message"))?;
    // As tonic's server does: read the request to its end, its trailers into the metadata.
    if let Some(trailers) = messages.trailers().await? {
        parts.headers.extend(trailers.into_headers());
    }
    Ok(tonic::Request::from_http(http::Request::from_parts(parts, message)))
}

/// A gRPC reply body: each message as its prefix and other fields, then its bulk; at
/// the end, the trailers with the call's status.
pub(super) struct BulkBody<M> {
    messages: BoxStream<M>,
    /// The bulk of the message whose head went out last.
    bulk: Option<Bytes>,
    done: bool,
}

impl<M> BulkBody<M> {
    pub(super) fn new(messages: BoxStream<M>) -> Self {
        BulkBody { messages, bulk: None, done: false }
    }
}

impl<M: Bulk> http_body::Body for BulkBody<M> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if let Some(bulk) = this.bulk.take() {
            return Poll::Ready(Some(Ok(Frame::data(bulk))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        let status = match ready!(this.messages.as_mut().poll_next(cx)) {
            Some(Ok(message)) => match frame(message) {
                Ok((head, bulk)) => {
                    this.bulk = bulk;
                    return Poll::Ready(Some(Ok(Frame::data(head))));
                }
                Err(status) => status,
            },
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        this.done = true;
        Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.bulk.is_none()
    }
}

/// The gRPC message `message` as a prefixed head and, unless it is small, its bulk
/// apart. The bulk field goes last: protobuf fields may come in any order. A message
/// over the agreed size is refused as tonic would (OUT_OF_RANGE); the agent's chunks
/// stay far below it.
fn frame<M: Bulk>(mut message: M) -> Result<(Bytes, Option<Bytes>), Status> {
    let bulk = message.take_bulk();
    let rest = message.encoded_len();
    let (key, bulk_len) = match &bulk {
        Some((field, bytes)) => (key_len(*field) + encoded_len_varint(bytes.len() as u64), bytes.len()),
        None => (0, 0),
    };
    let inline = bulk_len <= COPY_MAX;
    let len = rest + key + bulk_len;
    if len > MAX_MESSAGE_BYTES {
        return Err(Status::out_of_range(format!(
            "a reply message of {len} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
        )));
    }
    let len = u32::try_from(len).expect("MAX_MESSAGE_BYTES fits a gRPC length prefix");
    let mut head = BytesMut::with_capacity(5 + rest + key + if inline { bulk_len } else { 0 });
    head.put_u8(0); // not compressed
    head.put_u32(len);
    message.encode(&mut head).expect("a BytesMut grows as needed");
    let Some((field, bytes)) = bulk else {
        return Ok((head.freeze(), None));
    };
    encode_key(field, WireType::LengthDelimited, &mut head);
    encode_varint(bytes.len() as u64, &mut head);
    if inline {
        head.extend_from_slice(&bytes);
        return Ok((head.freeze(), None));
    }
    Ok((head.freeze(), Some(bytes)))
}

/// The trailers that end a reply with `status`.
fn trailers(status: &Status) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // Only metadata that is not a valid header gets here (tonic percent-encodes the
        // message): the code alone still tells the client what happened.
        map.clear();
        map.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joins a framed message back into its gRPC message bytes, checking the prefix.
    fn unframe(head: Bytes, bulk: Option<Bytes>) -> Vec<u8> {
        let mut all = head.to_vec();
        all.extend_from_slice(&bulk.unwrap_or_default());
        assert_eq!(all[0], 0, "uncompressed");
        let len = u32::from_be_bytes(all[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, all.len() - 5, "the prefix gives the message's length");
        all.split_off(5)
    }

    fn read_chunk(len: usize, file_size: u64) -> pb::ReadFileChunk {
        let data: Vec<u8> = (0..len).map(|i| u8::try_from(i * 7 % 251).expect("under 251")).collect();
        pb::ReadFileChunk { data: data.into(), file_size }
    }

    #[test]
    fn a_large_chunk_goes_out_uncopied_and_decodes_as_sent() {
        let sent = read_chunk(1024 * 1024, 5_000_000);
        let data = sent.data.clone();
        let (head, bulk) = frame(sent.clone()).unwrap();
        let bulk = bulk.expect("a 1 MiB chunk travels apart");
        assert_eq!(bulk.as_ptr(), data.as_ptr(), "the chunk's own bytes, not a copy");
        assert!(head.len() < 32);
        let got = pb::ReadFileChunk::decode(&unframe(head, Some(bulk))[..]).unwrap();
        assert_eq!(got, sent);
    }

    #[test]
    fn small_and_empty_chunks_go_out_in_one_frame() {
        for (len, size) in [(0, 0), (0, 42), (1, 0), (COPY_MAX, 9), (100, 100)] {
            let sent = read_chunk(len, size);
            let (head, bulk) = frame(sent.clone()).unwrap();
            assert!(bulk.is_none(), "{len} bytes are copied in");
            let got = pb::ReadFileChunk::decode(&unframe(head, None)[..]).unwrap();
            assert_eq!(got, sent, "{len} bytes, size {size}");
        }
    }

    #[test]
    fn zip_data_and_the_closing_summary_decode_as_sent() {
        use pb::download_dir_chunk::Part;
        let data = Bytes::from(vec![7u8; 200_000]);
        let sent = pb::DownloadDirChunk { part: Some(Part::Data(data)) };
        let (head, bulk) = frame(sent.clone()).unwrap();
        assert!(bulk.is_some());
        assert_eq!(pb::DownloadDirChunk::decode(&unframe(head, bulk)[..]).unwrap(), sent);

        let sent = pb::DownloadDirChunk { part: Some(Part::Data(Bytes::new())) };
        let (head, bulk) = frame(sent.clone()).unwrap();
        assert!(bulk.is_none());
        assert_eq!(
            pb::DownloadDirChunk::decode(&unframe(head, None)[..]).unwrap(),
            sent,
            "empty data stays data"
        );

        let summary = pb::ArchiveSummary { files: 3, ..Default::default() };
        let sent = pb::DownloadDirChunk { part: Some(Part::Summary(summary)) };
        let (head, bulk) = frame(sent.clone()).unwrap();
        assert!(bulk.is_none());
        assert_eq!(pb::DownloadDirChunk::decode(&unframe(head, None)[..]).unwrap(), sent);
    }

    #[test]
    fn a_message_over_the_limit_ends_the_reply_with_out_of_range() {
        let too_big = read_chunk(MAX_MESSAGE_BYTES, 0);
        let err = frame(too_big).unwrap_err();
        assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
        assert!(frame(read_chunk(MAX_MESSAGE_BYTES - 8, 0)).is_ok());
    }

    #[test]
    fn trailers_carry_the_status() {
        let ok = trailers(&Status::ok(""));
        assert_eq!(ok.get("grpc-status").unwrap(), "0");
        let err = trailers(&Status::not_found("no such file: /tmp/x"));
        assert_eq!(err.get("grpc-status").unwrap(), "5");
        assert_eq!(Status::from_header_map(&err).unwrap().message(), "no such file: /tmp/x");
    }
}
