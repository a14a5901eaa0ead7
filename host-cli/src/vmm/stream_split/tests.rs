//! Splits of streams built here in QEMU 7.2's layout; `real_stream` splits one QEMU wrote.

use std::os::unix::fs::MetadataExt;

use super::*;

const ID: u32 = 2;
/// The device state after the RAM section: bytes that would parse as records.
const DEVICES: &[u8] = b"\x00\x00\x00\x07\x05cpu\x7e\x08\x00\x00\x00\x00\x00\x00\x00\x28junk";

/// A stream under construction, in QEMU's layout.
#[derive(Clone)]
struct Stream(Vec<u8>);

impl Stream {
    fn new() -> Self {
        let mut s = Stream(STREAM_MAGIC.to_vec());
        s.u8(CONFIGURATION).be32(10).raw(b"pc-q35-7.2");
        s
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn be32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_be_bytes())
    }
    fn be64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_be_bytes())
    }
    fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    fn name(&mut self, name: &str) -> &mut Self {
        self.u8(u8::try_from(name.len()).unwrap()).raw(name.as_bytes())
    }
    fn start(&mut self, blocks: &[(&str, u64)]) -> &mut Self {
        self.u8(SECTION_START).be32(ID).name("ram").be32(0).be32(RAM_VERSION);
        self.be64(blocks.iter().map(|b| b.1).sum::<u64>() | MEM_SIZE);
        for (name, len) in blocks {
            self.name(name).be64(*len);
        }
        self.eos()
    }
    fn part(&mut self, end: bool) -> &mut Self {
        self.u8(if end { SECTION_END } else { SECTION_PART }).be32(ID)
    }
    /// A record of page `page`, of `block` or (`None`) CONTINUE.
    fn header(&mut self, flag: u64, block: Option<&str>, page: u64) -> &mut Self {
        let offset = page * PAGE as u64;
        match block {
            Some(name) => self.be64(offset | flag).name(name),
            None => self.be64(offset | flag | CONTINUE),
        }
    }
    fn data(&mut self, block: Option<&str>, page: u64, fill: u8) -> &mut Self {
        self.header(DATA, block, page).raw(&[fill; PAGE])
    }
    fn zero(&mut self, block: Option<&str>, page: u64, fill: u8) -> &mut Self {
        self.header(ZERO, block, page).u8(fill)
    }
    fn eos(&mut self) -> &mut Self {
        self.be64(EOS).u8(FOOTER).be32(ID)
    }
    fn devices(&mut self) -> &mut Self {
        self.u8(SECTION_FULL).raw(DEVICES).u8(EOF).u8(0x06).be32(2).raw(b"{}")
    }
}

/// `mem` (16 pages) and `pc.bios` (4 pages), each sent in runs that CONTINUE, the
/// blocks taking turns; and the same stream as it should be without `mem`.
fn streams() -> (Stream, Stream) {
    let blocks = [("mem", 16 * PAGE as u64), ("pc.bios", 4 * PAGE as u64)];
    let mut full = Stream::new();
    let mut kept = Stream::new();
    full.start(&blocks).part(false);
    kept.start(&blocks).part(false);
    full.data(Some("pc.bios"), 0, 0xa0).zero(None, 1, 0);
    kept.data(Some("pc.bios"), 0, 0xa0).zero(None, 1, 0);
    full.data(Some("mem"), 0, 0xb0).zero(None, 1, 0).data(None, 2, 0).data(None, 5, 0xc0);
    full.data(Some("pc.bios"), 2, 0xd0).data(None, 3, 0xe0);
    kept.data(Some("pc.bios"), 2, 0xd0).data(None, 3, 0xe0);
    full.data(Some("mem"), 7, 0xf0).eos();
    kept.eos();
    // Again in the last part: page 5 turned zero.
    full.part(true).zero(Some("mem"), 9, 0x55).data(None, 15, 0x11).zero(None, 5, 0).eos();
    kept.part(true).eos();
    full.devices();
    kept.devices();
    (full, kept)
}

struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Self {
        Dir { dir: tempfile::tempdir().unwrap() }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn split(&self, full: &[u8], block: &str) -> Result<Split, StreamSplitError> {
        std::fs::write(self.path("full"), full).unwrap();
        split(&self.path("full"), block, &self.path("stream"), &self.path("ram.bin"))
    }
    /// Splits `full`, which must fail, and checks that it left nothing behind.
    fn fails(&self, full: &[u8], block: &str) -> StreamSplitError {
        let err = self.split(full, block).unwrap_err();
        assert!(!self.path("stream").exists() && !self.path("ram.bin").exists(), "{err}: outputs left");
        err
    }
}

/// The extents of data in `file` as (first page, pages).
fn data_extents(file: &File) -> Vec<(u64, u64)> {
    use rustix::fs::{SeekFrom, seek};
    let (mut out, mut at, len) = (Vec::new(), 0, file.metadata().unwrap().len());
    while at < len {
        let Ok(start) = seek(file, SeekFrom::Data(at)) else { break };
        let end = seek(file, SeekFrom::Hole(start)).unwrap();
        out.push((start / PAGE as u64, (end - start) / PAGE as u64));
        at = end;
    }
    out
}

#[test]
fn pages_of_the_block_go_to_the_ram_file_and_the_rest_stays_in_the_stream() {
    let (full, kept) = streams();
    let dir = Dir::new();
    let split = dir.split(&full.0, "mem").unwrap();
    let page = PAGE as u64;
    assert_eq!(split, Split { block_bytes: 16 * page, data: 4 * page, zero: 3 * page });
    assert_eq!(std::fs::read(dir.path("stream")).unwrap(), kept.0, "the stream without mem's records");

    let ram = File::open(dir.path("ram.bin")).unwrap();
    let mut want = vec![0u8; 16 * PAGE];
    for (page, fill) in [(0, 0xb0), (7, 0xf0), (9, 0x55), (15, 0x11)] {
        want[page * PAGE..(page + 1) * PAGE].fill(fill);
    }
    assert_eq!(std::fs::read(dir.path("ram.bin")).unwrap(), want);
    assert_eq!(data_extents(&ram), [(0, 1), (7, 1), (9, 1), (15, 1)], "zero pages are holes");
    assert_eq!(ram.metadata().unwrap().blocks() * 512, 4 * page);
}

#[test]
fn the_other_block_can_be_split_out_too() {
    let (full, _) = streams();
    let dir = Dir::new();
    let bios = dir.split(&full.0, "pc.bios").unwrap();
    let page = PAGE as u64;
    assert_eq!(bios, Split { block_bytes: 4 * page, data: 3 * page, zero: page });
    let stream = std::fs::read(dir.path("stream")).unwrap();
    // Every pc.bios record is gone: 3 pages of data and a zero page with their headers.
    let gone = 3 * (8 + PAGE) + (8 + 1) + 2 * (1 + "pc.bios".len());
    assert_eq!(stream.len(), full.0.len() - gone);
    let back = std::fs::read(dir.path("ram.bin")).unwrap();
    assert_eq!((back[0], back[PAGE], back[2 * PAGE], back[3 * PAGE]), (0xa0, 0, 0xd0, 0xe0));
    // What is left splits again, into mem alone.
    std::fs::rename(dir.path("stream"), dir.path("rest")).unwrap();
    std::fs::remove_file(dir.path("ram.bin")).unwrap();
    let again = split(&dir.path("rest"), "mem", &dir.path("stream"), &dir.path("ram.bin")).unwrap();
    assert_eq!(again.data, 4 * page);
}

#[test]
fn a_stream_cut_anywhere_before_the_device_state_is_refused() {
    let (full, _) = streams();
    let devices = full.0.len() - DEVICES.len() - 8 - 1;
    assert_eq!(full.0[devices], SECTION_FULL);
    let dir = Dir::new();
    for cut in (8..=devices).step_by(37).chain([devices]) {
        let err = dir.fails(&full.0[..cut], "mem");
        assert!(matches!(err, StreamSplitError::Truncated { at } if at <= cut as u64), "cut {cut}: {err}");
    }
}

#[test]
fn bad_streams_are_refused_with_what_is_wrong() {
    let dir = Dir::new();
    let blocks = [("mem", 4 * PAGE as u64)];
    let ram = |mid: &mut dyn FnMut(&mut Stream)| {
        let mut s = Stream::new();
        s.start(&blocks).part(true);
        mid(&mut s);
        s.eos().devices();
        s.0
    };

    let err = dir.fails(
        &ram(&mut |s| {
            s.header(0x40, Some("mem"), 0);
        }),
        "mem",
    );
    assert!(matches!(err, StreamSplitError::UnknownRecord { flags: 0x40, .. }), "{err}");
    assert!(err.to_string().contains("flags 0x40"), "{err}");

    let err = dir.fails(
        &ram(&mut |s| {
            s.data(Some("mem"), 4, 1);
        }),
        "mem",
    );
    assert!(matches!(err, StreamSplitError::PastEnd { offset: 0x4000, len: 0x4000, .. }), "{err}");

    let err = dir.fails(
        &ram(&mut |s| {
            s.data(None, 0, 1);
        }),
        "mem",
    );
    assert!(matches!(err, StreamSplitError::Damaged { .. }), "CONTINUE first: {err}");

    let err = dir.fails(
        &ram(&mut |s| {
            s.data(Some("rom"), 0, 1);
        }),
        "mem",
    );
    assert!(err.to_string().contains("\"rom\", which the block list lacks"), "{err}");

    let err = dir.fails(&ram(&mut |_| ()), "pc.ram");
    assert!(matches!(&err, StreamSplitError::NoBlock { found, .. } if found == "\"mem\""), "{err}");

    let mut bad = ram(&mut |_| ());
    bad[3] = b'X';
    assert!(matches!(dir.fails(&bad, "mem"), StreamSplitError::NotAStream { .. }));

    // A save made with x-ignore-shared has a different block list.
    let mut caps = Stream::new();
    caps.u8(SUBSECTION).name("configuration/capabilities").be32(1).be32(1).name("x-ignore-shared");
    caps.start(&blocks).part(true).eos().devices();
    let err = dir.fails(&caps.0, "mem");
    assert!(err.to_string().contains("x-ignore-shared"), "{err}");

    // Device state before the RAM section ended.
    let mut early = Stream::new();
    early.start(&blocks).devices();
    assert!(matches!(dir.fails(&early.0, "mem"), StreamSplitError::Unsupported { .. }));

    // Existing outputs are neither overwritten nor removed.
    let good = ram(&mut |_| ());
    std::fs::write(dir.path("ram.bin"), b"mine").unwrap();
    let err = dir.split(&good, "mem").unwrap_err();
    assert!(matches!(err, StreamSplitError::Write { .. }), "{err}");
    assert!(!dir.path("stream").exists());
    assert_eq!(std::fs::read(dir.path("ram.bin")).unwrap(), b"mine");
}

/// Splits a stream QEMU wrote: `ATOLL_SPLIT_FULL` (the stream), `ATOLL_SPLIT_BLOCK`
/// (default `mem`), into `ATOLL_SPLIT_OUT`/stream and `ATOLL_SPLIT_OUT`/ram.bin.
#[test]
#[ignore = "needs a stream saved by QEMU: spike/stream-split/run.sh makes one and runs this"]
fn real_stream() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("set {name}"));
    let out = PathBuf::from(var("ATOLL_SPLIT_OUT"));
    let block = std::env::var("ATOLL_SPLIT_BLOCK").unwrap_or_else(|_| "mem".into());
    let started = std::time::Instant::now();
    let split = split(Path::new(&var("ATOLL_SPLIT_FULL")), &block, &out.join("stream"), &out.join("ram.bin"));
    eprintln!("{split:?} in {:?}", started.elapsed());
    split.unwrap();
}
