//! Taking one RAM block out of a QEMU 7.2 migration stream: the stream without that
//! block's page records, and a sparse file of the block's length holding its pages at
//! their offsets (all-zero pages as holes), which a restore maps privately as guest RAM
//! (`memory-backend-file,share=off`) so that it copies nothing.
//!
//! The layout, as QEMU 7.2 writes it without `x-ignore-shared` (`migration/savevm.c`,
//! `migration/ram.c`), all numbers big-endian:
//! - `QEVM`, version 3; `QEMU_VM_CONFIGURATION` (0x07): be32 length, machine name,
//!   then vmstate subsections (0x05, u8 length, name, be32 version, fields).
//! - Sections of the live (iterable) state: START (0x01: be32 section id, u8 length,
//!   name, be32 instance, be32 version), PART (0x02) and END (0x03: be32 section id),
//!   each followed by its payload and a footer (0x7e, be32 section id). In atoll's VMs
//!   the only one is `ram`, and all of it comes before the first device section.
//! - The RAM payload is records, each a be64 of offset | flags (the low 12 bits):
//!   MEM_SIZE (the block list: u8 length, name, be64 length, until the total is
//!   reached), ZERO (u8 fill byte), PAGE (4096 bytes), EOS (ends the payload). A
//!   ZERO or PAGE record names its block (u8 length, name) unless it has CONTINUE:
//!   the block of the record before.
//! - From the first device section (FULL, 0x04) on: device state, EOF (0x1a), the
//!   JSON description. Device state has no length and cannot be parsed without
//!   QEMU's device descriptions; it is copied as is, and QEMU checks it on load.
//!
//! Anything else is refused rather than guessed at: a wrong split would restore a VM
//! with memory that is silently not its own.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::migrate::STREAM_MAGIC;

/// Guest page size (x86 `TARGET_PAGE_SIZE`).
const PAGE: usize = 4096;
/// The flag bits of a RAM record's first word.
const FLAGS: u64 = 0xfff;
/// RAM record flags (`RAM_SAVE_FLAG_*`).
const ZERO: u64 = 0x02;
const MEM_SIZE: u64 = 0x04;
const DATA: u64 = 0x08;
const EOS: u64 = 0x10;
const CONTINUE: u64 = 0x20;
/// Stream item types (`QEMU_VM_*`).
const SECTION_START: u8 = 0x01;
const SECTION_PART: u8 = 0x02;
const SECTION_END: u8 = 0x03;
const SECTION_FULL: u8 = 0x04;
const SUBSECTION: u8 = 0x05;
const CONFIGURATION: u8 = 0x07;
const EOF: u8 = 0x1a;
const FOOTER: u8 = 0x7e;
/// The RAM section and the version of its layout described above.
const RAM_SECTION: &[u8] = b"ram";
const RAM_VERSION: u32 = 4;
/// Longest machine name accepted in the configuration (QEMU's are ~20 bytes).
const MAX_NAME: u32 = 256;
/// I/O buffer size of the stream files.
const BUFFER: usize = 1 << 20;

/// What a split wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The block's length, which is the RAM file's length.
    pub block_bytes: u64,
    /// Bytes of non-zero pages written to the RAM file.
    pub data: u64,
    /// Bytes of zero pages left as holes.
    pub zero: u64,
}

/// Why a stream could not be split.
#[derive(Debug, thiserror::Error)]
pub enum StreamSplitError {
    /// The stream could not be read.
    #[error("could not read the migration stream {}; check that it exists and is readable", path.display())]
    Read {
        /// The stream.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// An output could not be created or written.
    #[error("could not write {}; check free space, and that it does not exist yet", path.display())]
    Write {
        /// The output.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The input is not a migration stream.
    #[error("{} is not a QEMU migration stream (no QEVM version 3 header); save the VM again", path.display())]
    NotAStream {
        /// The input.
        path: PathBuf,
    },
    /// The stream ends in the middle of something.
    #[error("the migration stream ends early, at byte {at}; the save did not finish: save the VM again")]
    Truncated {
        /// Where the unfinished item starts.
        at: u64,
    },
    /// A RAM record of a kind the splitter does not know.
    #[error(
        "the migration stream has a record atoll does not know (flags {flags:#x}) at byte {at}; this QEMU writes a layout atoll cannot split (save without compression, xbzrle, multifd or RDMA)"
    )]
    UnknownRecord {
        /// Its flag bits.
        flags: u64,
        /// Where it starts.
        at: u64,
    },
    /// Something outside the known layout.
    #[error(
        "the migration stream has {what} at byte {at}; this QEMU writes a layout atoll cannot split (atoll knows QEMU 7.2's)"
    )]
    Unsupported {
        /// What was found.
        what: String,
        /// Where.
        at: u64,
    },
    /// The stream contradicts itself.
    #[error("the migration stream is damaged at byte {at}: {what}; save the VM again")]
    Damaged {
        /// What is wrong.
        what: String,
        /// Where.
        at: u64,
    },
    /// The block to take out is not in the stream.
    #[error(
        "the migration stream has no RAM block {block:?} (it has {found}); the VM's RAM must be a memory backend with id={block}"
    )]
    NoBlock {
        /// The block asked for.
        block: String,
        /// The blocks the stream has.
        found: String,
    },
    /// A page past its block's end.
    #[error(
        "the migration stream has a page at offset {offset:#x} of RAM block {block:?}, past its {len} bytes, at byte {at}; the stream is damaged: save the VM again"
    )]
    PastEnd {
        /// The block.
        block: String,
        /// The page's offset in it.
        offset: u64,
        /// The block's length.
        len: u64,
        /// Where the record starts.
        at: u64,
    },
}

/// Splits the QEMU migration stream in `full` into `stream` (the same stream without
/// the page records of RAM block `block`) and `ram` (a new sparse file of that block's
/// length with its pages). Both outputs are created new; on error neither is left.
pub fn split(full: &Path, block: &str, stream: &Path, ram: &Path) -> Result<Split, StreamSplitError> {
    let input = File::open(full).map_err(|source| StreamSplitError::Read { path: full.into(), source })?;
    split_from(input, full, block, stream, ram)
}

/// [`split`] reading an open stream (a pipe QEMU writes into); `full` names it in errors.
pub fn split_from(
    input: File,
    full: &Path,
    block: &str,
    stream: &Path,
    ram: &Path,
) -> Result<Split, StreamSplitError> {
    let mut created = Created(Vec::new());
    let out = created.create(stream)?;
    let ram_file = created.create(ram)?;
    let mut splitter = Splitter {
        input: Input { reader: BufReader::with_capacity(BUFFER, input), at: 0, path: full },
        out: Output { writer: BufWriter::with_capacity(BUFFER, out), path: stream },
        ram: RamFile { file: ram_file, path: ram, len: 0, seen: Vec::new(), data: Vec::new() },
        target: block,
        blocks: Vec::new(),
        target_index: None,
        last_block: None,
        ram_section: None,
        ram_ended: false,
        page: vec![0; PAGE],
    };
    let split = splitter.run()?;
    splitter.out.finish()?;
    splitter.ram.finish()?;
    created.0.clear();
    Ok(split)
}

/// Files created by a split, removed again unless it succeeds.
struct Created(Vec<PathBuf>);

impl Created {
    fn create(&mut self, path: &Path) -> Result<File, StreamSplitError> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| StreamSplitError::Write { path: path.into(), source })?;
        self.0.push(path.into());
        Ok(file)
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A RAM block of the stream's block list.
struct Block {
    name: Name,
    len: u64,
}

struct Splitter<'a> {
    input: Input<'a>,
    out: Output<'a>,
    ram: RamFile<'a>,
    target: &'a str,
    blocks: Vec<Block>,
    target_index: Option<usize>,
    /// The block of the last ZERO or PAGE record read, which a CONTINUE record means.
    last_block: Option<usize>,
    ram_section: Option<u32>,
    ram_ended: bool,
    page: Vec<u8>,
}

impl Splitter<'_> {
    fn run(&mut self) -> Result<Split, StreamSplitError> {
        let mut magic = [0; 8];
        if self.input.reader.read_exact(&mut magic).is_err() || magic != STREAM_MAGIC {
            return Err(StreamSplitError::NotAStream { path: self.input.path.into() });
        }
        self.input.at = 8;
        self.out.put(&magic)?;
        let mut first = true;
        loop {
            let at = self.input.at;
            let kind = self.input.u8()?;
            self.out.put(&[kind])?;
            match kind {
                CONFIGURATION if first => self.configuration()?,
                SECTION_START => self.start(at)?,
                SECTION_PART | SECTION_END => self.part(kind == SECTION_END, at)?,
                SECTION_FULL | EOF => {
                    if !self.ram_ended {
                        return Err(unsupported(at, "device state before the end of the RAM section"));
                    }
                    self.copy_rest()?;
                    return Ok(self.ram.counts());
                }
                _ => return Err(unsupported(at, format!("an item of type {kind:#04x}"))),
            }
            first = false;
        }
    }

    /// The machine name and the configuration's subsections.
    fn configuration(&mut self) -> Result<(), StreamSplitError> {
        let at = self.input.at;
        let len = self.copy_be32()?;
        if len > MAX_NAME {
            return Err(damaged(at, format!("a machine name of {len} bytes")));
        }
        let mut name = vec![0; len as usize];
        self.copy_bytes(&mut name)?;
        while self.input.peek()? == Some(SUBSECTION) {
            let at = self.input.at;
            self.copy_u8()?;
            let name = self.copy_name()?;
            self.copy_be32()?;
            match name.bytes() {
                b"configuration/target-page-bits" => {
                    self.copy_be32()?;
                }
                b"configuration/uuid" => self.copy_bytes(&mut [0; 16])?,
                b"configuration/capabilities" => {
                    for _ in 0..self.copy_be32()? {
                        if self.copy_name()?.bytes() == b"x-ignore-shared" {
                            return Err(unsupported(
                                at,
                                "a save made with x-ignore-shared (shared RAM left out): save without it",
                            ));
                        }
                    }
                }
                _ => return Err(unsupported(at, format!("a configuration part {:?}", name.text()))),
            }
        }
        Ok(())
    }

    fn start(&mut self, at: u64) -> Result<(), StreamSplitError> {
        let id = self.copy_be32()?;
        let name = self.copy_name()?;
        self.copy_be32()?;
        let version = self.copy_be32()?;
        if name.bytes() != RAM_SECTION {
            return Err(unsupported(at, format!("live state of {:?} besides RAM", name.text())));
        }
        if version != RAM_VERSION {
            return Err(unsupported(at, format!("RAM state of version {version}, not {RAM_VERSION}")));
        }
        if self.ram_section.is_some() {
            return Err(damaged(at, "a second RAM section"));
        }
        self.ram_section = Some(id);
        self.records(true)?;
        if self.target_index.is_none() {
            return Err(damaged(at, "a RAM section without its block list"));
        }
        self.footer(id)
    }

    fn part(&mut self, end: bool, at: u64) -> Result<(), StreamSplitError> {
        let id = self.copy_be32()?;
        if self.ram_section != Some(id) || self.ram_ended {
            return Err(damaged(at, format!("a part of section {id}, which is not an open RAM section")));
        }
        self.records(false)?;
        self.ram_ended = end;
        self.footer(id)
    }

    fn footer(&mut self, id: u32) -> Result<(), StreamSplitError> {
        let at = self.input.at;
        if self.copy_u8()? != FOOTER || self.copy_be32()? != id {
            return Err(damaged(at, format!("no footer where section {id} should end")));
        }
        Ok(())
    }

    /// The records of one RAM payload, up to its EOS.
    fn records(&mut self, setup: bool) -> Result<(), StreamSplitError> {
        loop {
            let at = self.input.at;
            let word = self.input.be64()?;
            match word & FLAGS {
                EOS => return self.out.put(&word.to_be_bytes()),
                MEM_SIZE if setup && self.blocks.is_empty() => {
                    self.out.put(&word.to_be_bytes())?;
                    self.block_list(word & !FLAGS, at)?;
                }
                MEM_SIZE => return Err(damaged(at, "a second block list")),
                flags if flags & !CONTINUE == ZERO || flags & !CONTINUE == DATA => {
                    self.page_record(word, at)?
                }
                flags => return Err(StreamSplitError::UnknownRecord { flags, at }),
            }
        }
    }

    /// The blocks announced by MEM_SIZE, whose lengths add up to `total`.
    fn block_list(&mut self, total: u64, at: u64) -> Result<(), StreamSplitError> {
        let mut sum = 0u64;
        while sum < total {
            let name = self.copy_name()?;
            let len = self.copy_be64()?;
            if self.blocks.iter().any(|b| b.name == name) {
                return Err(damaged(at, format!("RAM block {:?} listed twice", name.text())));
            }
            sum = sum.saturating_add(len);
            self.blocks.push(Block { name, len });
        }
        if sum != total {
            return Err(damaged(at, format!("RAM blocks of {sum} bytes in all, not the {total} announced")));
        }
        let Some(index) = self.blocks.iter().position(|b| b.name.bytes() == self.target.as_bytes()) else {
            let found = self.blocks.iter().map(|b| format!("{:?}", b.name.text())).collect::<Vec<_>>();
            return Err(StreamSplitError::NoBlock { block: self.target.into(), found: found.join(", ") });
        };
        self.target_index = Some(index);
        self.ram.size(self.blocks[index].len, at)
    }

    /// A ZERO or PAGE record: into the RAM file when it is the target block's, else
    /// into the stream as it was. A kept record's CONTINUE stays right: it means the
    /// block of the record before it, which is its own block, so that record was kept
    /// too.
    fn page_record(&mut self, word: u64, at: u64) -> Result<(), StreamSplitError> {
        let index = if word & CONTINUE != 0 {
            self.last_block.ok_or_else(|| damaged(at, "a page record that continues no block"))?
        } else {
            let name = self.input.name()?;
            let index = self.blocks.iter().position(|b| b.name == name).ok_or_else(|| {
                damaged(at, format!("a page of RAM block {:?}, which the block list lacks", name.text()))
            })?;
            self.last_block = Some(index);
            index
        };
        let block = &self.blocks[index];
        let offset = word & !FLAGS;
        if offset.checked_add(PAGE as u64).is_none_or(|end| end > block.len) {
            return Err(StreamSplitError::PastEnd { block: block.name.text(), offset, len: block.len, at });
        }
        let page = &mut self.page[..];
        let payload = if word & ZERO != 0 {
            self.input.bytes(&mut page[..1])?;
            &page[..1]
        } else {
            self.input.bytes(page)?;
            &page[..]
        };
        if Some(index) == self.target_index {
            return self.ram.store(offset, payload);
        }
        self.out.put(&word.to_be_bytes())?;
        if word & CONTINUE == 0 {
            self.out.put(&block.name.0)?;
        }
        self.out.put(payload)
    }

    /// Device state, EOF and the description: copied as they are.
    fn copy_rest(&mut self) -> Result<(), StreamSplitError> {
        loop {
            let path = self.input.path;
            let chunk = self.input.reader.fill_buf().map_err(|e| read_error(path, e))?;
            if chunk.is_empty() {
                return Ok(());
            }
            let n = chunk.len();
            self.out.writer.write_all(chunk).map_err(|e| self.out.error(e))?;
            self.input.reader.consume(n);
            self.input.at += n as u64;
        }
    }

    fn copy_u8(&mut self) -> Result<u8, StreamSplitError> {
        let v = self.input.u8()?;
        self.out.put(&[v])?;
        Ok(v)
    }

    fn copy_be32(&mut self) -> Result<u32, StreamSplitError> {
        let mut b = [0; 4];
        self.copy_bytes(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn copy_be64(&mut self) -> Result<u64, StreamSplitError> {
        let mut b = [0; 8];
        self.copy_bytes(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn copy_bytes(&mut self, buf: &mut [u8]) -> Result<(), StreamSplitError> {
        self.input.bytes(buf)?;
        self.out.put(buf)
    }

    /// A u8 length and that many bytes.
    fn copy_name(&mut self) -> Result<Name, StreamSplitError> {
        let name = self.input.name()?;
        self.out.put(&name.0)?;
        Ok(name)
    }
}

/// The stream being split, and where in it the reader is.
struct Input<'a> {
    reader: BufReader<File>,
    at: u64,
    path: &'a Path,
}

impl Input<'_> {
    fn bytes(&mut self, buf: &mut [u8]) -> Result<(), StreamSplitError> {
        match self.reader.read_exact(buf) {
            Ok(()) => {
                self.at += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(StreamSplitError::Truncated { at: self.at })
            }
            Err(e) => Err(read_error(self.path, e)),
        }
    }

    fn u8(&mut self) -> Result<u8, StreamSplitError> {
        let mut b = [0];
        self.bytes(&mut b)?;
        Ok(b[0])
    }

    fn be64(&mut self) -> Result<u64, StreamSplitError> {
        let mut b = [0; 8];
        self.bytes(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn name(&mut self) -> Result<Name, StreamSplitError> {
        let len = self.u8()?;
        let mut name = vec![len; 1 + usize::from(len)];
        self.bytes(&mut name[1..])?;
        Ok(Name(name))
    }

    /// The next byte, not consumed; `None` at the end.
    fn peek(&mut self) -> Result<Option<u8>, StreamSplitError> {
        let path = self.path;
        let buf = self.reader.fill_buf().map_err(|e| read_error(path, e))?;
        Ok(buf.first().copied())
    }
}

/// The stream being written.
struct Output<'a> {
    writer: BufWriter<File>,
    path: &'a Path,
}

impl Output<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamSplitError> {
        self.writer.write_all(bytes).map_err(|e| self.error(e))
    }

    fn finish(&mut self) -> Result<(), StreamSplitError> {
        self.writer.flush().map_err(|e| self.error(e))?;
        self.writer.get_ref().sync_data().map_err(|e| self.error(e))
    }

    fn error(&self, source: std::io::Error) -> StreamSplitError {
        StreamSplitError::Write { path: self.path.into(), source }
    }
}

/// The RAM file being written, and which of its pages the stream sent (`seen`) and
/// which of those hold data (one bit per page each).
struct RamFile<'a> {
    file: File,
    path: &'a Path,
    /// The block's length.
    len: u64,
    seen: Vec<u64>,
    data: Vec<u64>,
}

impl RamFile<'_> {
    fn size(&mut self, len: u64, at: u64) -> Result<(), StreamSplitError> {
        let words = usize::try_from(len.div_ceil(PAGE as u64 * 64)).map_err(|_| {
            damaged(at, format!("a RAM block of {len} bytes, more than this machine can address"))
        })?;
        self.seen = vec![0; words];
        self.data = vec![0; words];
        self.len = len;
        self.file.set_len(len).map_err(|e| self.error(e))
    }

    /// One page at `offset`: `payload` is the page, or the fill byte of a ZERO record.
    /// A page sent again replaces the first; one that turned zero becomes a hole.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the page is in the block, whose page count fit a usize in size()"
    )]
    fn store(&mut self, offset: u64, payload: &[u8]) -> Result<(), StreamSplitError> {
        let page = (offset / PAGE as u64) as usize;
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        let filled;
        let bytes = match payload {
            [fill] => {
                filled = [*fill; PAGE];
                &filled[..]
            }
            page => page,
        };
        if bytes.iter().all(|&b| b == 0) {
            if self.data[word] & bit != 0 {
                use rustix::fs::FallocateFlags;
                let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                rustix::fs::fallocate(&self.file, flags, offset, PAGE as u64)
                    .map_err(|e| self.error(e.into()))?;
                self.data[word] &= !bit;
            }
        } else {
            self.file.write_all_at(bytes, offset).map_err(|e| self.error(e))?;
            self.data[word] |= bit;
        }
        self.seen[word] |= bit;
        Ok(())
    }

    fn counts(&self) -> Split {
        let ones = |bits: &[u64]| bits.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
        let (seen, data) = (ones(&self.seen), ones(&self.data));
        Split { block_bytes: self.len, data: data * PAGE as u64, zero: (seen - data) * PAGE as u64 }
    }

    fn finish(&self) -> Result<(), StreamSplitError> {
        self.file.sync_data().map_err(|e| self.error(e))
    }

    fn error(&self, source: std::io::Error) -> StreamSplitError {
        StreamSplitError::Write { path: self.path.into(), source }
    }
}

fn read_error(path: &Path, source: std::io::Error) -> StreamSplitError {
    StreamSplitError::Read { path: path.into(), source }
}

fn unsupported(at: u64, what: impl Into<String>) -> StreamSplitError {
    StreamSplitError::Unsupported { what: what.into(), at }
}

fn damaged(at: u64, what: impl Into<String>) -> StreamSplitError {
    StreamSplitError::Damaged { what: what.into(), at }
}

/// A name as the stream has it: a length byte, then that many bytes.
#[derive(PartialEq, Eq)]
struct Name(Vec<u8>);

impl Name {
    fn bytes(&self) -> &[u8] {
        &self.0[1..]
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }
}

#[cfg(test)]
mod tests;
