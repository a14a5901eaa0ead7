//! The zip's end records, read before the zip crate parses its index: the entry count
//! and the index's size there are what the parse will hold in memory, so they are
//! checked against [`UnpackLimits`] first and a zip that claims too much is refused
//! without being parsed.
//!
//! Only the shape our agent writes (and every common zip tool) passes: the archive ends
//! with its end record and no comment, and the index ends where the end records begin.
//! The parse that follows then starts from that same record and reads at most the index.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{ArchiveError, UnpackLimits};

const EOCD_SIG: u64 = 0x0605_4b50;
const EOCD_LEN: u64 = 22;
const LOCATOR_SIG: u64 = 0x0706_4b50;
const LOCATOR_LEN: u64 = 20;
const EOCD64_SIG: u64 = 0x0606_4b50;
const EOCD64_LEN: u64 = 56;

/// Bytes of index allowed per entry on average (a 46-byte header, the name, extra
/// fields), plus a fixed allowance: paths longer than that on average are not a tree
/// anyone copies, and the parse holds a few times the index in memory.
pub(super) const INDEX_BYTES_PER_ENTRY: u64 = 1024;
const INDEX_SLACK: u64 = 64 << 10;

/// What the end records claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EndRecord {
    /// Entries in the archive.
    pub(super) entries: u64,
    /// Bytes of the index (central directory).
    pub(super) index_bytes: u64,
}

fn read_at(file: &File, at: u64, len: u64) -> Result<Vec<u8>, ArchiveError> {
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(&mut buf, at).map_err(|_| malformed("it is cut short"))?;
    Ok(buf)
}

fn malformed(why: &'static str) -> ArchiveError {
    ArchiveError::Malformed(why.to_owned())
}

fn u16_at(b: &[u8], i: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[i], b[i + 1]]))
}

fn u32_at(b: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Reads the end records of `file` and checks them against `limits`.
pub(super) fn check(file: &File, limits: UnpackLimits) -> Result<EndRecord, ArchiveError> {
    let len = file.metadata().map_err(|_| malformed("it cannot be read"))?.len();
    if len < EOCD_LEN {
        return Err(malformed("it is shorter than a zip's end record"));
    }
    let eocd_at = len - EOCD_LEN;
    let eocd = read_at(file, eocd_at, EOCD_LEN)?;
    if u32_at(&eocd, 0) != EOCD_SIG || u16_at(&eocd, 20) != 0 {
        return Err(malformed("it does not end with a zip end record"));
    }
    let (mut entries, mut index_bytes, mut index_at) =
        (u16_at(&eocd, 10), u32_at(&eocd, 12), u32_at(&eocd, 16));
    let mut records_at = eocd_at;
    // A zip64 locator right before the end record: its record's values count (the
    // larger of both where both are given, so neither claim escapes the check).
    if eocd_at >= LOCATOR_LEN {
        let locator = read_at(file, eocd_at - LOCATOR_LEN, LOCATOR_LEN)?;
        if u32_at(&locator, 0) == LOCATOR_SIG {
            let at = u64_at(&locator, 8);
            if at.checked_add(EOCD64_LEN) != Some(eocd_at - LOCATOR_LEN) {
                return Err(malformed("its zip64 end record is not where its locator says"));
            }
            let eocd64 = read_at(file, at, EOCD64_LEN)?;
            if u32_at(&eocd64, 0) != EOCD64_SIG {
                return Err(malformed("its zip64 end record is missing"));
            }
            // A 32-bit field at its maximum only says "see the zip64 record".
            let wider =
                |narrow: u64, marker: u64, wide: u64| if narrow == marker { wide } else { narrow.max(wide) };
            entries = wider(entries, 0xffff, u64_at(&eocd64, 32));
            index_bytes = wider(index_bytes, 0xffff_ffff, u64_at(&eocd64, 40));
            index_at = u64_at(&eocd64, 48);
            records_at = at;
        }
    }
    if entries > limits.max_entries {
        return Err(ArchiveError::TooManyEntries { count: entries, max: limits.max_entries });
    }
    let max_index = limits.max_entries.saturating_mul(INDEX_BYTES_PER_ENTRY).saturating_add(INDEX_SLACK);
    if index_bytes > max_index {
        return Err(ArchiveError::IndexTooBig { bytes: index_bytes, max: max_index });
    }
    if index_at.checked_add(index_bytes) != Some(records_at) {
        return Err(malformed("its index does not end where its end records begin"));
    }
    Ok(EndRecord { entries, index_bytes })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::write::{SimpleFileOptions, ZipWriter};

    use super::*;

    /// The agent's own format (`ZipWriter::new_stream`, data descriptors) past 65,535
    /// entries, where the zip64 end records take over: counted right, and the parse and
    /// header check that follow accept it.
    #[test]
    fn a_streamed_zip64_archive_passes() {
        let mut zip = ZipWriter::new_stream(Vec::new());
        for i in 0..70_000 {
            zip.start_file(format!("d/{i}"), SimpleFileOptions::default()).unwrap();
            zip.write_all(b"x").unwrap();
        }
        let bytes = zip.finish().unwrap().into_inner();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        let limits = UnpackLimits::default();
        let end = check(&file, limits).unwrap();
        assert_eq!(end.entries, 70_000);
        let err = check(&file, UnpackLimits { max_entries: 69_999, ..limits }).unwrap_err();
        assert!(matches!(err, ArchiveError::TooManyEntries { count: 70_000, max: 69_999 }), "{err}");
        let mut archive = zip::ZipArchive::new(file).unwrap();
        assert_eq!(archive.len(), 70_000);
        archive.validate_header_consistency().unwrap();
    }

    #[test]
    fn an_index_larger_than_the_entry_cap_allows_is_refused_unparsed() {
        let mut zip = ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let long = "n".repeat(4000);
        for i in 0..40 {
            zip.start_file(format!("{long}{i}"), SimpleFileOptions::default()).unwrap();
        }
        let bytes = zip.finish().unwrap().into_inner();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        let limits = UnpackLimits { max_entries: 40, ..UnpackLimits::default() };
        let err = check(&file, limits).unwrap_err();
        assert!(matches!(err, ArchiveError::IndexTooBig { .. }), "{err}");
        assert!(err.to_string().contains("--max-entries"), "{err}");
    }
}
