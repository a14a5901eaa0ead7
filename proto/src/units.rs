//! Sizes and counts written for people, the same on both sides of the wire: the
//! agent's error messages, the CLI's tables and the MCP tools' texts.

/// Binary units after bytes.
const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// A byte count for people: "1 byte", "512 bytes", "1 MiB", "3.2 MiB". One decimal, left
/// out when it is 0; the unit is the largest the figure is at least 1 of, after rounding.
pub fn human_bytes(n: u64) -> String {
    if n < 1024 {
        return plural(n, "byte", "bytes");
    }
    // Tenths of the unit, computed in integers so that every figure is exact up to the
    // rounding; 128-bit so that the largest u64 still fits after the scaling.
    let mut unit = 0;
    let mut scale: u128 = 1024;
    let tenths = loop {
        let tenths = (u128::from(n) * 10 + scale / 2) / scale;
        if tenths < 10 * 1024 || unit + 1 == UNITS.len() {
            break tenths;
        }
        unit += 1;
        scale *= 1024;
    };
    let (whole, tenth) = (tenths / 10, tenths % 10);
    if tenth == 0 { format!("{whole} {}", UNITS[unit]) } else { format!("{whole}.{tenth} {}", UNITS[unit]) }
}

/// A size and the limit it is over, for "is SIZE, over the LIMIT limit" messages. When
/// rounding would make the two look the same ("1 MiB, over the 1 MiB limit"), both are
/// given in bytes as well.
pub fn size_and_limit(size: u64, limit: u64) -> (String, String) {
    let (s, l) = (human_bytes(size), human_bytes(limit));
    if s != l {
        return (s, l);
    }
    let exact = |n: u64, human: String| if n < 1024 { human } else { format!("{human} ({n} bytes)") };
    (exact(size, s), exact(limit, l))
}

/// `n` with the singular or plural noun: "1 file", "0 files", "3 files".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_a_person_wrote_them() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1), "1 byte");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1024 * 1024), "1 MiB");
        assert_eq!(human_bytes(3_355_443), "3.2 MiB");
        assert_eq!(human_bytes(100 << 20), "100 MiB");
        assert_eq!(human_bytes(5 << 30), "5 GiB");
        // Rounding up to 1024 of a unit moves to the next unit.
        assert_eq!(human_bytes((1 << 20) - 1), "1 MiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }

    #[test]
    fn a_size_over_a_limit_never_reads_as_equal_to_it() {
        let mib = 1 << 20;
        assert_eq!(
            size_and_limit(mib + 1, mib),
            ("1 MiB (1048577 bytes)".to_owned(), "1 MiB (1048576 bytes)".to_owned())
        );
        assert_eq!(size_and_limit(8 * mib + 1, 8 * mib).1, "8 MiB (8388608 bytes)");
        assert_eq!(size_and_limit(3 * mib, mib), ("3 MiB".to_owned(), "1 MiB".to_owned()));
        assert_eq!(size_and_limit(10, 9), ("10 bytes".to_owned(), "9 bytes".to_owned()));
        for (size, limit) in
            [(mib + 1, mib), (1025, 1024), (u64::MAX, u64::MAX - 1), (5 << 30, (5 << 30) - 7)]
        {
            let (s, l) = size_and_limit(size, limit);
            assert_ne!(s, l, "{size} over {limit}");
        }
    }

    #[test]
    fn counts_take_the_right_noun() {
        assert_eq!(plural(0, "file", "files"), "0 files");
        assert_eq!(plural(1, "file", "files"), "1 file");
        assert_eq!(plural(2, "file", "files"), "2 files");
    }
}
