//! The client disappears mid-upload or mid-write: nothing is extracted or replaced,
//! no temp file is left, and the agent serves the next client.

mod hardening_util;

use atoll_proto::agent::v1 as pb;
use atoll_proto::agent::v1::{upload_dir_request, write_file_request};
use atoll_tests::Agent;
use futures::SinkExt;
use hardening_util::{eventually, shell};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in files {
        zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut zip, data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn a_client_gone_mid_upload_changes_nothing() {
    let agent = Agent::start();
    let target = agent.dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep.txt"), b"old").unwrap();
    let noise: Vec<u8> =
        (0..4u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0]).collect();
    let zip = zip_of(&[("keep.txt", b"new"), ("big.bin", &noise)]);

    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    let mut client = agent.client().await;
    let call = tokio::spawn(async move { client.upload_dir(rx).await });
    let header = pb::UploadDirHeader { path: target.display().to_string(), sync: false };
    tx.send(pb::UploadDirRequest { part: Some(upload_dir_request::Part::Header(header)) }).await.unwrap();
    for chunk in zip[..zip.len() / 2].chunks(64 * 1024) {
        tx.send(pb::UploadDirRequest { part: Some(upload_dir_request::Part::Data(chunk.to_vec().into())) })
            .await
            .unwrap();
    }
    // The client vanishes: its call is dropped without `end`.
    call.abort();
    drop(tx);
    let _ = call.await;

    // The agent serves the next client, and nothing in the target changed.
    let resp = agent.client().await.exec(shell("echo next")).await.expect("next client").into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"next\n"[..]);
    eventually("no temp file of the upload left in the target", || names(&target) == ["keep.txt"]).await;
    assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"old");
}

#[tokio::test]
async fn a_client_gone_mid_write_keeps_the_old_file() {
    let agent = Agent::start();
    let dir = agent.dir.path().join("w");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("data");
    std::fs::write(&file, b"old content").unwrap();

    let (mut tx, rx) = futures::channel::mpsc::channel(4);
    let mut client = agent.client().await;
    let call = tokio::spawn(async move { client.write_file(rx).await });
    let header = pb::WriteFileHeader { path: file.display().to_string(), ..Default::default() };
    tx.send(pb::WriteFileRequest { part: Some(write_file_request::Part::Header(header)) }).await.unwrap();
    for _ in 0..16 {
        let data = write_file_request::Part::Data(vec![b'n'; 64 * 1024].into());
        tx.send(pb::WriteFileRequest { part: Some(data) }).await.unwrap();
    }
    call.abort();
    drop(tx);
    let _ = call.await;

    let resp = agent.client().await.exec(shell("echo next")).await.expect("next client").into_inner();
    assert_eq!(resp.stdout.unwrap().data, &b"next\n"[..]);
    eventually("the temp file of the write to be removed", || names(&dir) == ["data"]).await;
    assert_eq!(std::fs::read(&file).unwrap(), b"old content");
}
