//! Permission modes as both faces take them: octal text (`644`, `0755`, `0o600`) from
//! 1 to 7777.
//!
//! 0 is refused: on the wire a mode of 0 means "the default" (keep the file's mode or
//! 0644 for a write, 0755 for a mkdir), so accepting it would quietly do something other
//! than what was asked.

/// A permission mode that is not octal, or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{got}` is not an octal permission mode like 644 or 0755 (0001 to 7777)")]
pub struct ModeError {
    /// What the caller passed.
    pub got: String,
}

/// Parses an octal permission mode such as `"644"`, `"0755"` or `"0o600"`.
pub fn parse_mode(text: &str) -> Result<u32, ModeError> {
    let digits = text.trim();
    let digits = digits.strip_prefix("0o").unwrap_or(digits);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if (1..=0o7777).contains(&mode) => Ok(mode),
        _ => Err(ModeError { got: text.to_owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_strings() {
        assert_eq!(parse_mode("644").unwrap(), 0o644);
        assert_eq!(parse_mode("0755").unwrap(), 0o755);
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("0o600").unwrap(), 0o600);
        assert!(parse_mode("rw-r--r--").is_err());
        assert!(parse_mode("9").is_err());
        assert!(parse_mode("99").is_err());
        assert!(parse_mode("17777").is_err());
        assert!(parse_mode("0").is_err(), "0 would mean the default on the wire");
    }
}
