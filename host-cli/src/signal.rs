//! Signal names and numbers, as `atoll job kill --signal` and the MCP tools take them.

/// Parses a signal name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.trim().parse::<i32>() {
        return if (1..=64).contains(&n) { Ok(n) } else { Err(format!("signal {n} is out of range 1..64")) };
    }
    let upper = s.trim().to_ascii_uppercase();
    let name = upper.trim_start_matches("SIG");
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        _ => {
            return Err(format!(
                "`{s}` is not a signal; use TERM, INT, HUP, KILL, USR1, USR2, CONT, STOP or a number"
            ));
        }
    };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse(" sigint "), Ok(libc::SIGINT));
        assert_eq!(parse("9"), Ok(9));
        assert!(parse("65").is_err());
        assert!(parse("NOPE").unwrap_err().contains("TERM, INT"));
    }
}
