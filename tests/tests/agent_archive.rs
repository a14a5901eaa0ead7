//! DownloadDir and UploadDir through a real `atoll-agent`: the zip is read and written
//! here with the `zip` crate, so the archive is checked as any unzip tool would see it.

use std::io::{Cursor, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atoll_proto::agent::v1::agent_client::AgentClient;
use atoll_proto::agent::v1::{self as pb, download_dir_chunk, upload_dir_request};
use atoll_tests::{Agent, assert_status, noise};
use tonic::transport::Channel;
use tonic::{Code, Status};
use zip::write::SimpleFileOptions;

type Client = AgentClient<Channel>;

fn s(p: &Path) -> String {
    p.to_str().expect("test paths are UTF-8").to_owned()
}

/// The archive bytes, how many data messages carried them, and the summary.
struct Download {
    zip: Vec<u8>,
    summary: pb::ArchiveSummary,
}

async fn download(client: &mut Client, path: &Path, max_bytes: u64) -> Result<Download, Status> {
    let req = pb::DownloadDirRequest { path: s(path), max_bytes };
    let mut stream = client.download_dir(req).await?.into_inner();
    let mut zip = Vec::new();
    let mut summary = None;
    while let Some(msg) = stream.message().await? {
        assert!(summary.is_none(), "the summary must be the last message");
        match msg.part.expect("every message has a part") {
            download_dir_chunk::Part::Data(d) => zip.extend_from_slice(&d),
            download_dir_chunk::Part::Summary(s) => summary = Some(s),
        }
    }
    Ok(Download { zip, summary: summary.expect("the stream ends with a summary") })
}

async fn upload(client: &mut Client, path: &Path, zip: &[u8]) -> Result<pb::UploadDirResponse, Status> {
    let mut msgs = vec![pb::UploadDirRequest {
        part: Some(upload_dir_request::Part::Header(pb::UploadDirHeader { path: s(path), sync: false })),
    }];
    msgs.extend(
        zip.chunks(100_000)
            .map(|c| pb::UploadDirRequest { part: Some(upload_dir_request::Part::Data(c.to_vec().into())) }),
    );
    msgs.push(pb::UploadDirRequest { part: Some(upload_dir_request::Part::End(true)) });
    client.upload_dir(futures::stream::iter(msgs)).await.map(|r| r.into_inner())
}

#[track_caller]
/// Every regular file under `root` with its contents, sorted by relative path.
fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let ft = entry.file_type().unwrap();
            if ft.is_dir() {
                stack.push(entry.path());
            } else if ft.is_file() {
                let rel = entry.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/deep/er")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("README"), b"hello\n").unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n".repeat(1000)).unwrap();
    std::fs::write(root.join("src/deep/er/blob.bin"), noise(700_000, 11)).unwrap();
    std::fs::set_permissions(root.join("src/deep/er/blob.bin"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("src/escape")).unwrap();
    let fifo = root.join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
}

#[tokio::test]
async fn a_downloaded_tree_skips_symlinks_and_fifos_and_extracts_to_the_same_files() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("tree");
    make_tree(&root);

    let got = download(&mut c, &root, 0).await.unwrap();
    let sum = &got.summary;
    assert_eq!(
        (sum.files, sum.dirs),
        (3, 4),
        "files README, main.rs, blob.bin; dirs empty, src, src/deep, src/deep/er"
    );
    assert_eq!(sum.file_bytes, 6 + 13_000 + 700_000);
    assert_eq!(sum.archive_bytes, got.zip.len() as u64);
    let skipped: Vec<_> = sum.skipped.iter().map(|e| (e.path.as_str(), e.reason.as_str())).collect();
    assert_eq!(skipped, [("pipe", "FIFO (not a regular file)"), ("src/escape", "symlink to /etc/passwd")]);

    let mut archive = zip::ZipArchive::new(Cursor::new(&got.zip)).expect("a valid zip");
    let mut names: Vec<_> = archive.file_names().map(|n| n.unwrap().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        ["README", "empty/", "src/", "src/deep/", "src/deep/er/", "src/deep/er/blob.bin", "src/main.rs"]
    );
    let mut blob = archive.by_name("src/deep/er/blob.bin").unwrap();
    assert_eq!(blob.unix_mode().map(|m| m & 0o777), Some(0o755));
    let mut data = Vec::new();
    blob.read_to_end(&mut data).unwrap();
    assert!(data == noise(700_000, 11), "blob.bin differs after the zip round trip");
    drop(blob);
    assert_eq!(
        archive.by_name("src/main.rs").unwrap().compression(),
        zip::CompressionMethod::Deflated,
        "files are deflated"
    );

    // Upload the same archive elsewhere: the regular files come back identical.
    let copy = agent.dir.path().join("copy/here");
    let resp = upload(&mut c, &copy, &got.zip).await.unwrap();
    assert_eq!((resp.files, resp.dirs, resp.file_bytes), (3, 4, 6 + 13_000 + 700_000));
    assert!(files_under(&copy) == files_under(&root), "the extracted files differ from the originals");
    assert!(copy.join("empty").is_dir(), "empty directories are kept");
    let mode = std::fs::metadata(copy.join("src/deep/er/blob.bin")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "modes survive the round trip");
}

#[tokio::test]
async fn a_refused_download_of_one_file_says_file_not_files() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("one");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("only.bin"), noise(3 * 1024 * 1024 / 2, 4)).unwrap();

    let result = download(&mut c, &root, 256 * 1024).await.map(|d| d.summary);
    assert_status(result, Code::ResourceExhausted, &["the directory holds 1.5 MiB in 1 file"]);
}

#[tokio::test]
async fn a_download_over_max_bytes_fails_saying_the_cap_and_the_size() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("big");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.bin"), noise(2 * 1024 * 1024, 2)).unwrap();
    std::fs::write(root.join("b.bin"), noise(1024 * 1024, 3)).unwrap();

    let result = download(&mut c, &root, 256 * 1024).await.map(|d| d.summary);
    assert_status(result, Code::ResourceExhausted, &["cap of 256 KiB", "3 MiB in 2 files"]);
    let fits = download(&mut c, &root, 8 * 1024 * 1024).await.unwrap();
    assert_eq!(fits.summary.files, 2, "a cap the archive fits under is fine");
}

#[tokio::test]
async fn downloads_of_files_missing_paths_and_relative_paths_are_refused() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let file = agent.dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let r = download(&mut c, &file, 0).await.map(|d| d.summary);
    assert_status(r, Code::InvalidArgument, &["not a directory", "read a single file"]);
    let r = download(&mut c, &agent.dir.path().join("missing"), 0).await.map(|d| d.summary);
    assert_status(r, Code::NotFound, &["does not exist"]);
    let r = c.download_dir(pb::DownloadDirRequest { path: "rel".into(), max_bytes: 0 }).await.map(|_| ());
    assert_status(r, Code::InvalidArgument, &["absolute"]);
}

#[tokio::test]
async fn a_client_that_leaves_mid_download_stops_the_archiver() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("big");
    std::fs::create_dir(&root).unwrap();
    // 64 MiB that deflate cannot shrink (the repeat distance is past its 32 KiB window),
    // far more than the channel and HTTP/2 windows can hold.
    let block = noise(1024 * 1024, 4);
    for i in 0..8 {
        std::fs::write(root.join(format!("{i}.bin")), block.repeat(8)).unwrap();
    }
    let before = atoll_tests::bytes_read(agent.pid());
    {
        let req = pb::DownloadDirRequest { path: s(&root), max_bytes: 0 };
        let mut stream = c.download_dir(req).await.unwrap().into_inner();
        let first = stream.message().await.unwrap().expect("a first chunk");
        assert!(matches!(first.part, Some(download_dir_chunk::Part::Data(_))));
    }
    // Once the archiver notices the client is gone it stops reading files; wait until
    // the agent's read counter settles, then check it never read the whole tree.
    let last = atoll_tests::bytes_read_once_settled(agent.pid()).await;
    let read = last - before;
    assert!(read < 32 * 1024 * 1024, "the agent read {read} bytes of a 64 MiB tree for a client that left");

    let small = agent.dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    std::fs::write(small.join("f"), b"x").unwrap();
    let again = download(&mut c, &small, 0).await.unwrap();
    assert_eq!(again.summary.files, 1, "the agent serves the next download after a client left");
}

fn zip_with(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[tokio::test]
async fn uploads_with_escaping_entries_are_refused_and_extract_nothing() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let base = agent.dir.path().join("base");
    std::fs::create_dir(&base).unwrap();
    let target = base.join("target");

    let dotdot = zip_with(&[("good.txt", b"fine"), ("../evil", b"bad")]);
    assert_status(
        upload(&mut c, &target, &dotdot).await,
        Code::InvalidArgument,
        &["\"../evil\"", "nothing was extracted"],
    );
    let sneaky = zip_with(&[("good.txt", b"fine"), ("a/../../evil", b"bad")]);
    assert_status(upload(&mut c, &target, &sneaky).await, Code::InvalidArgument, &["a/../../evil", ".."]);
    let absolute = zip_with(&[("good.txt", b"fine"), ("/tmp/atoll-evil", b"bad")]);
    assert_status(
        upload(&mut c, &target, &absolute).await,
        Code::InvalidArgument,
        &["/tmp/atoll-evil", "absolute"],
    );

    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    w.start_file("good.txt", SimpleFileOptions::default()).unwrap();
    w.write_all(b"fine").unwrap();
    w.add_symlink("link", "/etc", SimpleFileOptions::default()).unwrap();
    let symlink = w.finish().unwrap().into_inner();
    assert_status(upload(&mut c, &target, &symlink).await, Code::InvalidArgument, &["\"link\"", "symlink"]);

    assert!(!target.exists(), "a refused upload does not even create the target");
    assert!(!base.join("evil").exists() && !agent.dir.path().join("evil").exists());
    assert!(!Path::new("/tmp/atoll-evil").exists());
}

#[tokio::test]
async fn uploads_may_not_write_through_existing_symlinks_or_replace_directories() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let target = agent.dir.path().join("t");
    let outside = agent.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(target.join("dir")).unwrap();
    std::os::unix::fs::symlink(&outside, target.join("link")).unwrap();

    let through = zip_with(&[("ok", b"1"), ("link/planted", b"x")]);
    assert_status(
        upload(&mut c, &target, &through).await,
        Code::InvalidArgument,
        &["link/planted", "symlink"],
    );
    assert!(!outside.join("planted").exists() && !target.join("ok").exists());
    let over_dir = zip_with(&[("dir", b"x")]);
    assert_status(upload(&mut c, &target, &over_dir).await, Code::InvalidArgument, &["\"dir\"", "directory"]);
    let nameless = zip_with(&[(".", b"x")]);
    assert_status(upload(&mut c, &target, &nameless).await, Code::InvalidArgument, &["\".\"", "file name"]);
    let inner = zip_with(&[("f", b"x"), ("f/g", b"y")]);
    assert_status(upload(&mut c, &target, &inner).await, Code::InvalidArgument, &["f/g", "as a file"]);
}

#[tokio::test]
async fn uploads_replace_files_atomically_and_refuse_garbage_and_missing_headers() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let target = agent.dir.path().join("t");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep.txt"), b"old").unwrap();
    std::fs::write(target.join("untouched"), b"same").unwrap();

    let resp =
        upload(&mut c, &target, &zip_with(&[("keep.txt", b"new"), ("n/e/w.txt", b"w")])).await.unwrap();
    assert_eq!((resp.files, resp.dirs, resp.file_bytes), (2, 0, 4));
    assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"new");
    assert_eq!(std::fs::read(target.join("n/e/w.txt")).unwrap(), b"w");
    assert_eq!(std::fs::read(target.join("untouched")).unwrap(), b"same");
    let names: Vec<_> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "no temp files are left behind: {names:?}");

    assert_status(
        upload(&mut c, &target, b"this is not a zip").await,
        Code::InvalidArgument,
        &["not a readable zip"],
    );
    let no_header =
        vec![pb::UploadDirRequest { part: Some(upload_dir_request::Part::Data(b"PK".to_vec().into())) }];
    assert_status(c.upload_dir(futures::stream::iter(no_header)).await, Code::InvalidArgument, &["header"]);
    assert_status(upload(&mut c, Path::new("rel/dir"), b"").await, Code::InvalidArgument, &["absolute"]);
    let file = target.join("keep.txt");
    let onto_file = zip_with(&[("x", b"x")]);
    assert_status(upload(&mut c, &file, &onto_file).await, Code::InvalidArgument, &["not a directory"]);
}
