//! The disk fills during a write: the caller gets ResourceExhausted saying so, the old
//! file is intact, no temp file is left, and the agent keeps serving. Also an upload
//! that fills the disk. Needs root to mount a 1 MiB tmpfs; skipped (with a message)
//! otherwise.

mod hardening_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::write_file_request::Part;
use atoll_tests::Agent;
use hardening_util::shell;
use tonic::Code;

/// A 1 MiB tmpfs, unmounted when dropped (also when the test fails).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_owned()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn write_msgs(path: &Path, data: &[u8]) -> Vec<pb::WriteFileRequest> {
    let header = pb::WriteFileHeader { path: path.display().to_string(), ..Default::default() };
    let mut msgs = vec![pb::WriteFileRequest { part: Some(Part::Header(header)) }];
    msgs.extend(
        data.chunks(64 * 1024).map(|c| pb::WriteFileRequest { part: Some(Part::Data(c.to_vec().into())) }),
    );
    msgs.push(pb::WriteFileRequest { part: Some(Part::End(true)) });
    msgs
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_write_that_fills_the_disk_fails_and_keeps_the_old_file() {
    let agent = Agent::start();
    let Some(disk) = SmallDisk::mount(&agent.dir.path().join("small")) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let target = disk.0.join("data.bin");
    let old = vec![b'o'; 300 * 1024];
    std::fs::write(&target, &old).unwrap();
    let mut client = agent.client().await;

    let status = client
        .write_file(futures::stream::iter(write_msgs(&target, &vec![b'n'; 2 << 20])))
        .await
        .expect_err("2 MiB cannot fit on a 1 MiB disk");
    assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    assert!(status.message().contains("space"), "{}", status.message());
    assert_eq!(std::fs::read(&target).unwrap(), old, "the old file changed");
    assert_eq!(entries(&disk.0), ["data.bin"], "a temp file was left behind");

    // Append is atomic too: a failing append leaves the old content.
    let mut msgs = write_msgs(&target, &vec![b'a'; 900 * 1024]);
    if let Some(Part::Header(h)) = msgs[0].part.as_mut() {
        h.append = true;
    }
    let status = client.write_file(futures::stream::iter(msgs)).await.expect_err("append over the disk");
    assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    assert_eq!(std::fs::read(&target).unwrap(), old);
    assert_eq!(entries(&disk.0), ["data.bin"]);

    // A write that fits still works, and so does everything else.
    client.write_file(futures::stream::iter(write_msgs(&target, b"small"))).await.expect("a small write");
    assert_eq!(std::fs::read(&target).unwrap(), b"small");
    let resp = client.exec(shell("echo alive")).await.unwrap().into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"alive\n"[..]);
}

#[tokio::test]
async fn an_upload_that_fills_the_disk_fails_and_keeps_the_old_files() {
    let agent = Agent::start();
    let Some(disk) = SmallDisk::mount(&agent.dir.path().join("small")) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    std::fs::write(disk.0.join("keep.txt"), b"old").unwrap();
    // A zip with one small file that would replace keep.txt and one too big to fit.
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("keep.txt", opts).unwrap();
    std::io::Write::write_all(&mut zip, b"new").unwrap();
    zip.start_file("huge.bin", opts).unwrap();
    std::io::Write::write_all(&mut zip, &vec![0u8; 3 << 20]).unwrap();
    let zip = zip.finish().unwrap().into_inner();

    let header = pb::UploadDirHeader { path: disk.0.display().to_string(), sync: false };
    let mut msgs = vec![pb::UploadDirRequest { part: Some(pb::upload_dir_request::Part::Header(header)) }];
    msgs.extend(
        zip.chunks(64 * 1024).map(|c| pb::UploadDirRequest {
            part: Some(pb::upload_dir_request::Part::Data(c.to_vec().into())),
        }),
    );
    msgs.push(pb::UploadDirRequest { part: Some(pb::upload_dir_request::Part::End(true)) });
    let status =
        agent.client().await.upload_dir(futures::stream::iter(msgs)).await.expect_err("3 MiB cannot fit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{}", status.message());
    assert!(!disk.0.join("huge.bin").exists(), "a partial file was left");
    let left = entries(&disk.0);
    assert!(left.iter().all(|n| !n.starts_with(".atoll")), "temp files left: {left:?}");
}
