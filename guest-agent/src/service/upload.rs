//! The header-then-data stream of WriteFile and UploadDir, read once for both.

use std::path::PathBuf;

use atoll_proto::agent::v1 as pb;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tonic::{Status, Streaming};

use crate::files::FsError;

/// One message of an upload stream, by what it carries.
pub(super) enum Part<H> {
    Header(H),
    Data(Bytes),
    End,
}

/// A request message of an upload stream: a `oneof part` of header, data and end.
pub(super) trait UploadMessage: Send + 'static {
    /// The header message.
    type Header;
    /// What this message carries; `None` for a message with no part set.
    fn into_part(self) -> Option<Part<Self::Header>>;
    /// The path the header names, for error messages.
    fn header_path(header: &Self::Header) -> &str;
}

/// Implements [`UploadMessage`] for a request whose `oneof part` is the enum
/// `pb::$oneof::Part`.
macro_rules! upload_message {
    ($request:ty, $header:ty, $oneof:ident) => {
        impl UploadMessage for $request {
            type Header = $header;
            fn into_part(self) -> Option<Part<Self::Header>> {
                use pb::$oneof::Part as P;
                Some(match self.part? {
                    P::Header(h) => Part::Header(h),
                    P::Data(d) => Part::Data(d),
                    P::End(_) => Part::End,
                })
            }
            fn header_path(header: &Self::Header) -> &str {
                &header.path
            }
        }
    };
}

upload_message!(pb::WriteFileRequest, pb::WriteFileHeader, write_file_request);
upload_message!(pb::UploadDirRequest, pb::UploadDirHeader, upload_dir_request);

/// Reads an upload's header, and returns it with the data that follows it, up to its
/// explicit `end` message.
///
/// hyper ends the request body of a client that cancelled (`RST_STREAM` with `CANCEL`)
/// just as if the client had ended it cleanly, so "the stream ended" cannot mean
/// "commit". Only the `end` message does: a stream that stops without it yields
/// [`FsError::StreamBroken`], and the write or extraction leaves nothing behind.
pub(super) async fn header_then_data<M: UploadMessage>(
    mut input: Streaming<M>,
) -> Result<(M::Header, impl Stream<Item = Result<Bytes, FsError>> + Send + 'static), Status>
where
    M::Header: Send,
{
    let header = match input.message().await?.and_then(M::into_part) {
        Some(Part::Header(header)) => header,
        _ => return Err(FsError::MissingHeader.into()),
    };
    let path = PathBuf::from(M::header_path(&header));
    let pieces = input.map(|msg| match msg {
        Ok(msg) => Ok(msg.into_part()),
        Err(status) => Err(status.message().to_owned()),
    });
    Ok((header, until_end(pieces, path)))
}

/// The data of `pieces` up to the `end` message; see [`header_then_data`]. An `Err` item
/// is the transport's error message.
fn until_end<S, H>(pieces: S, path: PathBuf) -> impl Stream<Item = Result<Bytes, FsError>> + Send + 'static
where
    S: Stream<Item = Result<Option<Part<H>>, String>> + Send + 'static,
    H: Send + 'static,
{
    futures::stream::unfold((Box::pin(pieces), false), move |(mut pieces, done)| {
        let path = path.clone();
        async move {
            if done {
                return None;
            }
            let item = match pieces.next().await {
                Some(Ok(Some(Part::Data(data)))) => return Some((Ok(data), (pieces, false))),
                // A message with no part set reads as empty data, as protobuf would decode it.
                Some(Ok(None)) => return Some((Ok(Bytes::new()), (pieces, false))),
                Some(Ok(Some(Part::End))) => return None,
                Some(Ok(Some(Part::Header(_)))) => Err(FsError::SecondHeader),
                Some(Err(reason)) => Err(FsError::StreamBroken { path, reason }),
                None => Err(FsError::StreamBroken {
                    path,
                    reason: "the client stopped before sending `end`".to_owned(),
                }),
            };
            Some((item, (pieces, true)))
        }
    })
}
