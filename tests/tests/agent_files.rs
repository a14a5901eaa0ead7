//! The agent's file RPCs, driven through the generated client against a real
//! `atoll-agent` on a Unix socket: reads, atomic writes, listings and the small
//! operations, with their limits and error paths.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atoll_proto::agent::v1::agent_client::AgentClient;
use atoll_proto::agent::v1::{self as pb, write_file_request::Part};
use atoll_tests::{Agent, assert_status, noise};
use tonic::transport::Channel;
use tonic::{Code, Status};

type Client = AgentClient<Channel>;

const MIB: usize = 1024 * 1024;

fn s(p: &Path) -> String {
    p.to_str().expect("test paths are UTF-8").to_owned()
}

fn header_msg(header: pb::WriteFileHeader) -> pb::WriteFileRequest {
    pb::WriteFileRequest { part: Some(Part::Header(header)) }
}

fn data_msgs(data: &[u8]) -> Vec<pb::WriteFileRequest> {
    data.chunks(MIB).map(|c| pb::WriteFileRequest { part: Some(Part::Data(c.to_vec().into())) }).collect()
}

async fn write_with(
    client: &mut Client,
    header: pb::WriteFileHeader,
    data: &[u8],
) -> Result<pb::WriteFileResponse, Status> {
    let mut msgs = vec![header_msg(header)];
    msgs.extend(data_msgs(data));
    msgs.push(pb::WriteFileRequest { part: Some(Part::End(true)) });
    client.write_file(futures::stream::iter(msgs)).await.map(|r| r.into_inner())
}

async fn write(client: &mut Client, path: &Path, data: &[u8]) -> Result<pb::WriteFileResponse, Status> {
    write_with(client, pb::WriteFileHeader { path: s(path), ..Default::default() }, data).await
}

/// Reads a whole stream: (data, file_size from the first chunk).
async fn read(client: &mut Client, req: pb::ReadFileRequest) -> Result<(Vec<u8>, u64), Status> {
    let mut stream = client.read_file(req).await?.into_inner();
    let mut data = Vec::new();
    let mut file_size = None;
    while let Some(chunk) = stream.message().await? {
        file_size.get_or_insert(chunk.file_size);
        data.extend_from_slice(&chunk.data);
    }
    Ok((data, file_size.expect("a read stream carries at least one chunk")))
}

async fn read_path(client: &mut Client, path: &Path) -> Result<(Vec<u8>, u64), Status> {
    read(client, pb::ReadFileRequest { path: s(path), ..Default::default() }).await
}

#[track_caller]
#[tokio::test]
async fn a_100_mib_file_round_trips_byte_for_byte() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("big/nested/file.bin");
    let data = noise(100 * MIB, 7);
    let resp = write(&mut c, &path, &data).await.unwrap();
    assert_eq!(resp.bytes_written, data.len() as u64);
    assert_eq!(resp.file_size, data.len() as u64);
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o644, "new files are 0644");

    let (back, size) = read_path(&mut c, &path).await.unwrap();
    assert_eq!(size, data.len() as u64);
    assert!(back == data, "the bytes read back differ from the bytes written");
}

#[tokio::test]
async fn reads_take_slices_and_refuse_offsets_past_the_end() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("slice.bin");
    let data = noise(200_000, 3);
    std::fs::write(&path, &data).unwrap();

    let req = |offset, length| pb::ReadFileRequest { path: s(&path), offset, length, max_bytes: 0 };
    let (got, size) = read(&mut c, req(70_000, 100_000)).await.unwrap();
    assert_eq!(size, 200_000);
    assert_eq!(got, &data[70_000..170_000]);
    let (tail, _) = read(&mut c, req(150_000, 0)).await.unwrap();
    assert_eq!(tail, &data[150_000..]);
    let (past, _) = read(&mut c, req(190_000, 100_000)).await.unwrap();
    assert_eq!(past, &data[190_000..], "a length past the end stops at the end");
    let (empty, size) = read(&mut c, req(200_000, 0)).await.unwrap();
    assert!(empty.is_empty());
    assert_eq!(size, 200_000, "an empty slice still reports the file size");
    assert_status(
        read(&mut c, req(200_001, 0)).await,
        Code::InvalidArgument,
        &["offset 200001", "past the end"],
    );
}

#[tokio::test]
async fn an_empty_file_reads_as_one_empty_chunk() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("empty");
    std::fs::write(&path, b"").unwrap();
    assert_eq!(read_path(&mut c, &path).await.unwrap(), (Vec::new(), 0));
}

#[tokio::test]
async fn reads_over_the_cap_say_the_size_and_what_to_do() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("big.txt");
    std::fs::write(&path, noise(3_355_443, 1)).unwrap();

    let capped =
        |offset, length| pb::ReadFileRequest { path: s(&path), offset, length, max_bytes: MIB as u64 };
    assert_status(
        read(&mut c, capped(0, 0)).await,
        Code::ResourceExhausted,
        &["3.2 MiB", "1 MiB read limit", "offset/length"],
    );
    let (slice, _) = read(&mut c, capped(MIB as u64, MIB as u64)).await.unwrap();
    assert_eq!(slice.len(), MIB, "a slice within the cap is read");
}

#[tokio::test]
async fn a_file_one_byte_over_the_cap_is_not_said_to_be_the_caps_size() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("just-over.txt");
    std::fs::write(&path, noise(MIB + 1, 1)).unwrap();

    let req = pb::ReadFileRequest { path: s(&path), offset: 0, length: 0, max_bytes: MIB as u64 };
    let status = read(&mut c, req).await.expect_err("a file over max_bytes is refused");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let message = status.message();
    // Rounded, both are "1 MiB": the message gives the exact sizes that differ.
    assert!(
        message.contains("is 1 MiB (1048577 bytes), over the 1 MiB (1048576 bytes) read limit"),
        "{message}"
    );
}

#[tokio::test]
async fn missing_files_and_directories_are_told_apart() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let missing = agent.dir.path().join("nope");
    let not_found = read_path(&mut c, &missing).await;
    assert_eq!(reason_of(&not_found), Some("not_found"));
    assert_status(not_found, Code::NotFound, &["does not exist"]);
    let dir = read_path(&mut c, agent.dir.path()).await;
    assert_eq!(reason_of(&dir), Some("is_a_directory"));
    assert_status(dir, Code::InvalidArgument, &["is a directory", "list it"]);

    let file = agent.dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let list = c.list_dir(pb::ListDirRequest { path: s(&file), ..Default::default() }).await;
    assert_eq!(reason_of(&list), Some("not_a_directory"));
    assert_status(list, Code::InvalidArgument, &["not a directory", "only a directory can be listed"]);
    let through_file = file.join("child");
    assert_status(read_path(&mut c, &through_file).await, Code::InvalidArgument, &["not a directory"]);
}

#[tokio::test]
async fn relative_and_malformed_paths_are_refused_by_every_call() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let rel = || "root/x".to_owned();
    let words = ["absolute", "/root/x"];
    assert_status(
        read(&mut c, pb::ReadFileRequest { path: rel(), ..Default::default() }).await,
        Code::InvalidArgument,
        &words,
    );
    assert_status(
        write_with(&mut c, pb::WriteFileHeader { path: rel(), ..Default::default() }, b"x").await,
        Code::InvalidArgument,
        &words,
    );
    assert_status(
        c.list_dir(pb::ListDirRequest { path: rel(), ..Default::default() }).await,
        Code::InvalidArgument,
        &words,
    );
    assert_status(c.stat(pb::StatRequest { path: rel() }).await, Code::InvalidArgument, &words);
    assert_status(
        c.remove(pb::RemoveRequest { path: rel(), recursive: true }).await,
        Code::InvalidArgument,
        &words,
    );
    let mv = pb::MoveRequest { from: "/tmp".into(), to: rel(), overwrite: false };
    assert_status(c.r#move(mv).await, Code::InvalidArgument, &words);
    assert_status(
        c.make_dir(pb::MakeDirRequest { path: rel(), ..Default::default() }).await,
        Code::InvalidArgument,
        &words,
    );
    assert_status(
        c.stat(pb::StatRequest { path: String::new() }).await,
        Code::InvalidArgument,
        &["empty", "absolute"],
    );
    assert_status(
        c.stat(pb::StatRequest { path: "/tmp/a\0b".into() }).await,
        Code::InvalidArgument,
        &["NUL"],
    );
}

#[tokio::test]
async fn a_fifo_is_refused_up_front_instead_of_hanging() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let fifo = agent.dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    assert_status(read_path(&mut c, &fifo).await, Code::InvalidArgument, &["FIFO", "not a regular file"]);
    assert_status(
        read_path(&mut c, Path::new("/dev/null")).await,
        Code::InvalidArgument,
        &["character device"],
    );
}

#[tokio::test]
async fn proc_files_with_size_zero_are_read_to_the_end_under_the_cap() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let expected = std::fs::read("/proc/version").unwrap();
    let (got, size) = read_path(&mut c, Path::new("/proc/version")).await.unwrap();
    assert_eq!(size, 0, "/proc files report size 0");
    assert_eq!(got, expected);
    let capped = pb::ReadFileRequest { path: "/proc/version".into(), max_bytes: 5, ..Default::default() };
    assert_status(read(&mut c, capped).await, Code::ResourceExhausted, &["5 bytes read limit"]);
}

#[tokio::test]
async fn writes_create_parents_keep_modes_and_append_atomically() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("a/b/c.txt");

    let no_parents = pb::WriteFileHeader { path: s(&path), no_create_parents: true, ..Default::default() };
    assert_status(
        write_with(&mut c, no_parents, b"x").await,
        Code::NotFound,
        &["parent directory", "create it first"],
    );
    assert!(!agent.dir.path().join("a").exists(), "a refused write creates nothing");
    let plain = agent.dir.path().join("plain");
    std::fs::write(&plain, b"x").unwrap();
    let under_file = pb::WriteFileHeader { path: s(&plain.join("deep/c.txt")), ..Default::default() };
    assert_status(write_with(&mut c, under_file, b"x").await, Code::InvalidArgument, &["not a directory"]);
    assert_eq!(std::fs::read(&plain).unwrap(), b"x", "a refused write leaves the file in its way alone");

    let exec = pb::WriteFileHeader { path: s(&path), mode: 0o750, ..Default::default() };
    write_with(&mut c, exec, b"hello ").await.unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o750);

    let append = pb::WriteFileHeader { path: s(&path), append: true, ..Default::default() };
    let resp = write_with(&mut c, append, b"world").await.unwrap();
    assert_eq!((resp.bytes_written, resp.file_size), (5, 11));
    assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o750, "mode 0 keeps the existing mode");

    write(&mut c, &path, b"replaced").await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"replaced");
    let leftovers: Vec<_> =
        std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![OsStr::new("c.txt").to_owned()], "no temp files are left behind");
}

#[tokio::test]
async fn writes_onto_a_directory_or_without_a_header_are_refused() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    assert_status(write(&mut c, agent.dir.path(), b"x").await, Code::InvalidArgument, &["is a directory"]);

    let no_header = vec![pb::WriteFileRequest { part: Some(Part::Data(b"x".to_vec().into())) }];
    let result = c.write_file(futures::stream::iter(no_header)).await;
    assert_status(result, Code::InvalidArgument, &["header"]);
    let empty = c.write_file(futures::stream::iter(Vec::new())).await;
    assert_status(empty, Code::InvalidArgument, &["header"]);
}

#[tokio::test]
async fn an_interrupted_write_leaves_the_old_file_and_no_temp_file() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let dir = agent.dir.path().join("interrupted");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("keep.txt");
    std::fs::write(&path, b"the old content").unwrap();

    // Send the header and 3 MiB, then never end the stream; drop the call mid-way.
    let mut msgs = vec![header_msg(pb::WriteFileHeader { path: s(&path), ..Default::default() })];
    msgs.extend(data_msgs(&noise(3 * MIB, 9)));
    let stream = futures::StreamExt::chain(futures::stream::iter(msgs), futures::stream::pending());
    let call = tokio::spawn(async move { c.write_file(stream).await });

    let temp_files = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "keep.txt")
            .collect::<Vec<_>>()
    };
    let temp_size = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name() != "keep.txt")
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum::<u64>()
    };
    wait_until("the agent to have received the data", || temp_size() >= 3 * MIB as u64).await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"the old content",
        "nothing is visible before the stream ends"
    );
    call.abort();
    wait_until("the agent to remove its temp file", || temp_files().is_empty()).await;
    let content = std::fs::read(&path).unwrap();
    assert!(content == b"the old content", "the file changed: it now holds {} bytes", content.len());
    assert!(call.await.unwrap_err().is_cancelled());
}

#[tokio::test]
async fn a_write_stream_that_stops_without_end_changes_nothing() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("no-end.txt");
    std::fs::write(&path, b"the old content").unwrap();
    let mut msgs = vec![header_msg(pb::WriteFileHeader { path: s(&path), ..Default::default() })];
    msgs.extend(data_msgs(b"half of the new content"));
    let err = c.write_file(futures::stream::iter(msgs)).await.expect_err("no `end`, no commit");
    assert_eq!(err.code(), Code::Cancelled, "{}", err.message());
    assert!(err.message().contains("nothing was changed"), "{}", err.message());
    assert_eq!(std::fs::read(&path).unwrap(), b"the old content");
    let leftovers: Vec<_> = std::fs::read_dir(agent.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("no-end") && n != "no-end.txt")
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

/// Polls a condition the agent must reach; the bound only keeps a broken agent from
/// hanging the suite.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn permission_denied_is_reported_even_to_root() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    // Neither /proc nor /sys lets anyone, root included, create files in it.
    assert_status(write(&mut c, Path::new("/proc/version"), b"x").await, Code::PermissionDenied, &["/proc"]);
    assert_status(
        write(&mut c, Path::new("/sys/atoll-test-file"), b"x").await,
        Code::PermissionDenied,
        &["/sys"],
    );
    let mkdir = pb::MakeDirRequest { path: "/sys/kernel/atoll-test-dir".into(), ..Default::default() };
    assert_status(c.make_dir(mkdir).await, Code::PermissionDenied, &["permission denied"]);
}

fn names(resp: &pb::ListDirResponse) -> Vec<&str> {
    resp.entries.iter().map(|e| e.path.as_str()).collect()
}

#[tokio::test]
async fn listings_describe_entries_sorted_and_capped() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("tree");
    std::fs::create_dir_all(root.join("d/e/f")).unwrap();
    std::fs::write(root.join("b.txt"), b"12345").unwrap();
    std::fs::set_permissions(root.join("b.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(root.join("d/e/f/deep.txt"), b"x").unwrap();
    std::fs::write(root.join("d-sibling"), b"").unwrap();
    std::os::unix::fs::symlink("b.txt", root.join("link")).unwrap();
    std::os::unix::fs::symlink("..", root.join("d/loop")).unwrap();
    let odd = OsStr::from_bytes(b"bad-\xff-name");
    std::fs::write(root.join(odd), b"").unwrap();

    let list = |recursive, max_depth, max_entries| pb::ListDirRequest {
        path: s(&root),
        recursive,
        max_depth,
        max_entries,
        names_only: false,
    };
    let flat = c.list_dir(list(false, 0, 0)).await.unwrap().into_inner();
    assert_eq!(names(&flat), ["b.txt", "bad-\u{fffd}-name", "d", "d-sibling", "link"]);
    assert!(!flat.truncated);
    let b = &flat.entries[0];
    assert_eq!((b.r#type(), b.size, b.mode), (pb::FileType::File, 5, 0o640));
    assert!(b.mtime_unix_ms > 1_500_000_000_000, "mtime is in Unix milliseconds");
    assert!(b.raw_path.is_empty());
    assert_eq!(flat.entries[1].raw_path, &b"bad-\xff-name"[..], "non-UTF-8 names carry their raw bytes");
    assert_eq!(flat.entries[2].r#type(), pb::FileType::Dir);
    let link = &flat.entries[4];
    assert_eq!((link.r#type(), link.symlink_target.as_str()), (pb::FileType::Symlink, "b.txt"));

    let deep = c.list_dir(list(true, 0, 0)).await.unwrap().into_inner();
    assert_eq!(
        names(&deep),
        ["b.txt", "bad-\u{fffd}-name", "d", "d/e", "d/e/f", "d/e/f/deep.txt", "d/loop", "d-sibling", "link"],
        "recursive listings do not follow symlinks (d/loop points back up) and keep a directory's contents after it"
    );
    let two = c.list_dir(list(true, 2, 0)).await.unwrap().into_inner();
    assert_eq!(names(&two), ["b.txt", "bad-\u{fffd}-name", "d", "d/e", "d/loop", "d-sibling", "link"]);
    let capped = c.list_dir(list(true, 0, 3)).await.unwrap().into_inner();
    assert_eq!(names(&capped), ["b.txt", "bad-\u{fffd}-name", "d"]);
    assert!(capped.truncated);
    let exact = c.list_dir(list(false, 0, 5)).await.unwrap().into_inner();
    assert!(!exact.truncated, "a cap equal to the count does not truncate");

    // names_only: the same paths and types, in the same order, and no stat fields.
    for (recursive, max_depth, max_entries) in [(false, 0, 0), (true, 0, 0), (true, 2, 0), (true, 0, 3)] {
        let full = c.list_dir(list(recursive, max_depth, max_entries)).await.unwrap().into_inner();
        let req = pb::ListDirRequest { names_only: true, ..list(recursive, max_depth, max_entries) };
        let short = c.list_dir(req).await.unwrap().into_inner();
        let typed = |r: &pb::ListDirResponse| -> Vec<(String, i32, Vec<u8>)> {
            r.entries.iter().map(|e| (e.path.clone(), e.r#type, e.raw_path.to_vec())).collect()
        };
        assert_eq!(typed(&short), typed(&full));
        assert_eq!(short.truncated, full.truncated);
        assert!(
            short
                .entries
                .iter()
                .all(|e| e.size == 0 && e.mode == 0 && e.mtime_unix_ms == 0 && e.symlink_target.is_empty()),
            "names_only leaves the stat fields empty"
        );
    }

    let missing = pb::ListDirRequest { path: s(&root.join("missing")), ..Default::default() };
    assert_status(c.list_dir(missing).await, Code::NotFound, &["does not exist"]);
    let missing =
        pb::ListDirRequest { path: s(&root.join("missing")), names_only: true, ..Default::default() };
    assert_status(c.list_dir(missing).await, Code::NotFound, &["does not exist"]);
}

#[tokio::test]
async fn the_default_entry_cap_is_ten_thousand() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let root = agent.dir.path().join("many");
    std::fs::create_dir(&root).unwrap();
    for i in 0..10_001 {
        std::fs::write(root.join(format!("f{i:05}")), b"").unwrap();
    }
    let resp =
        c.list_dir(pb::ListDirRequest { path: s(&root), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(resp.entries.len(), 10_000);
    assert!(resp.truncated);
    assert_eq!(resp.entries.last().unwrap().path, "f09999");
}

#[tokio::test]
async fn stat_describes_without_following_symlinks() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let file = agent.dir.path().join("f.txt");
    std::fs::write(&file, b"abc").unwrap();
    let link = agent.dir.path().join("l");
    std::os::unix::fs::symlink(&file, &link).unwrap();

    let st = c.stat(pb::StatRequest { path: s(&file) }).await.unwrap().into_inner();
    assert_eq!((st.path.as_str(), st.r#type(), st.size), (s(&file).as_str(), pb::FileType::File, 3));
    let sl = c.stat(pb::StatRequest { path: s(&link) }).await.unwrap().into_inner();
    assert_eq!((sl.r#type(), sl.symlink_target), (pb::FileType::Symlink, s(&file)));
    let missing = c.stat(pb::StatRequest { path: s(&agent.dir.path().join("none")) }).await;
    assert_status(missing, Code::NotFound, &["does not exist"]);
}

#[tokio::test]
async fn remove_needs_recursive_for_directories_and_never_takes_root() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let dir = agent.dir.path().join("rm");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/f"), b"x").unwrap();
    std::fs::write(dir.join("g"), b"x").unwrap();
    let rm = |path: &Path, recursive| pb::RemoveRequest { path: s(path), recursive };

    c.remove(rm(&dir.join("g"), false)).await.unwrap();
    assert!(!dir.join("g").exists());
    assert_status(
        c.remove(rm(&dir, false)).await,
        Code::FailedPrecondition,
        &["is a directory", "recursive"],
    );
    assert!(dir.join("sub/f").exists(), "a refused remove removes nothing");
    c.remove(rm(&dir, true)).await.unwrap();
    assert!(!dir.exists());
    assert_status(c.remove(rm(&dir, true)).await, Code::NotFound, &["does not exist"]);
    assert_status(c.remove(rm(Path::new("/"), true)).await, Code::InvalidArgument, &["root directory"]);
    assert_status(c.remove(rm(Path::new("/tmp/.."), true)).await, Code::InvalidArgument, &["root directory"]);
}

#[tokio::test]
async fn move_renames_refuses_to_clobber_and_checks_the_destination() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let d = agent.dir.path();
    std::fs::write(d.join("a"), b"A").unwrap();
    std::fs::write(d.join("b"), b"B").unwrap();
    std::fs::create_dir(d.join("dir")).unwrap();
    let mv = |from: &str, to: &str, overwrite| pb::MoveRequest {
        from: s(&d.join(from)),
        to: s(&d.join(to)),
        overwrite,
    };

    assert_status(
        c.r#move(mv("a", "b", false)).await,
        Code::AlreadyExists,
        &["already exists", "nothing was moved"],
    );
    assert_eq!(std::fs::read(d.join("b")).unwrap(), b"B");
    c.r#move(mv("a", "b", true)).await.unwrap();
    assert_eq!(std::fs::read(d.join("b")).unwrap(), b"A");
    assert!(!d.join("a").exists());
    c.r#move(mv("b", "dir/c", false)).await.unwrap();
    assert_eq!(std::fs::read(d.join("dir/c")).unwrap(), b"A");

    assert_status(c.r#move(mv("missing", "x", false)).await, Code::NotFound, &["does not exist"]);
    assert_status(
        c.r#move(mv("dir/c", "no/such/x", false)).await,
        Code::NotFound,
        &["parent directory", "create it first"],
    );
    assert_status(c.r#move(mv("dir", "dir/inner", false)).await, Code::InvalidArgument, &["into itself"]);
}

#[tokio::test]
async fn move_across_file_systems_copies_then_removes() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let shm = Path::new("/dev/shm");
    let other_fs = std::fs::metadata(shm).map(|m| m.dev()).ok();
    if other_fs.is_none() || other_fs == std::fs::metadata(agent.dir.path()).map(|m| m.dev()).ok() {
        eprintln!("skipped: /dev/shm is missing or on the same file system as the temp dir");
        return;
    }
    let src = agent.dir.path().join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/f.bin"), noise(300_000, 5)).unwrap();
    std::fs::set_permissions(src.join("sub/f.bin"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("sub/f.bin", src.join("link")).unwrap();
    let dest_root = tempfile::tempdir_in(shm).unwrap();
    let dest: PathBuf = dest_root.path().join("moved");

    c.r#move(pb::MoveRequest { from: s(&src), to: s(&dest), overwrite: false }).await.unwrap();
    assert!(!src.exists(), "the source is gone after the move");
    assert_eq!(std::fs::read(dest.join("sub/f.bin")).unwrap(), noise(300_000, 5));
    assert_eq!(std::fs::metadata(dest.join("sub/f.bin")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(std::fs::read_link(dest.join("link")).unwrap(), Path::new("sub/f.bin"));
    let leftovers: Vec<_> =
        std::fs::read_dir(dest_root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![OsStr::new("moved").to_owned()], "no staging directory is left behind");
}

#[tokio::test]
async fn make_dir_with_and_without_parents() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let deep = agent.dir.path().join("x/y/z");
    let mk = |path: &Path, parents, mode| pb::MakeDirRequest { path: s(path), parents, mode };

    assert_status(c.make_dir(mk(&deep, false, 0)).await, Code::NotFound, &["parent directory", "parents"]);
    c.make_dir(mk(&deep, true, 0o700)).await.unwrap();
    assert_eq!(std::fs::metadata(&deep).unwrap().mode() & 0o7777, 0o700);
    c.make_dir(mk(&deep, true, 0)).await.expect("an existing directory is fine with parents");
    assert_status(c.make_dir(mk(&deep, false, 0)).await, Code::AlreadyExists, &["already exists", "parents"]);

    let fresh = agent.dir.path().join("x/fresh");
    c.make_dir(mk(&fresh, false, 0)).await.unwrap();
    assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o7777, 0o755, "directories default to 0755");
    let file = agent.dir.path().join("x/file");
    std::fs::write(&file, b"").unwrap();
    assert_status(c.make_dir(mk(&file, true, 0)).await, Code::AlreadyExists, &["not a directory"]);
}

#[tokio::test]
async fn a_client_that_leaves_mid_read_stops_the_reader() {
    let agent = Agent::start();
    let mut c = agent.client().await;
    let path = agent.dir.path().join("huge.bin");
    std::fs::write(&path, noise(MIB, 8).repeat(64)).unwrap();
    let before = atoll_tests::bytes_read(agent.pid());
    {
        let mut stream = c
            .read_file(pb::ReadFileRequest { path: s(&path), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let first = stream.message().await.unwrap().expect("a first chunk");
        assert_eq!(first.file_size, 64 * MIB as u64);
    }
    // Wait until the agent's read counter settles, then check it stopped early.
    let last = atoll_tests::bytes_read_once_settled(agent.pid()).await;
    let consumed = last - before;
    assert!(
        consumed < 32 * MIB as u64,
        "the agent read {consumed} bytes of a 64 MiB file for a client that left"
    );
    let (small, _) =
        read(&mut c, pb::ReadFileRequest { path: s(&path), length: 10, ..Default::default() }).await.unwrap();
    assert_eq!(small.len(), 10, "the agent serves the next read");
}

/// The machine-readable reason (`atoll-reason`) the agent attached to a refusal.
fn reason_of<T>(result: &Result<T, tonic::Status>) -> Option<&str> {
    result.as_ref().err()?.metadata().get(atoll_proto::reason::REASON_KEY)?.to_str().ok()
}
