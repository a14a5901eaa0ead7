//! [`UsageError`], the error every subcommand may return when its command line parsed
//! but makes no sense; `app` gives it exit code 2.

/// A command line that parsed but makes no sense (e.g. `sbx cp a b` with two host paths).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
