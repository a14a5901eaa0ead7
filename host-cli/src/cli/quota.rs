//! The global host-quota flags (`atoll --max-sandboxes N ...`): they override the
//! environment variables and the config file, for this command only (for `atoll mcp`,
//! for every tool call it serves). Their values are read as the config file's are.

use clap::Args;

/// Where the config file is looked for, for --help.
const CONFIG_FILE: &str =
    "$ATOLL_CONFIG, else $XDG_CONFIG_HOME/atoll/config.toml, else ~/.config/atoll/config.toml";

/// Host quotas for this command: each overrides its environment variable and its key
/// in the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct QuotaFlags {
    /// Sandboxes running at once (a whole number). Else $ATOLL_MAX_SANDBOXES, else
    /// `max_sandboxes` in the config file.
    #[arg(long, global = true, hide = true, value_name = "N", value_parser = parse_count)]
    pub max_sandboxes: Option<u64>,
    /// Guest memory of all running sandboxes together, in MiB (a whole number: 16384 is
    /// 16 GiB). Else $ATOLL_MAX_MEMORY_MIB, else `max_memory_mib` in the config file.
    #[arg(long, global = true, hide = true, value_name = "MIB", value_parser = parse_count)]
    pub max_memory_mib: Option<u64>,
    /// vCPUs of all running sandboxes together (a whole number). Else $ATOLL_MAX_VCPUS,
    /// else `max_vcpus` in the config file.
    #[arg(long, global = true, hide = true, value_name = "N", value_parser = parse_count)]
    pub max_vcpus: Option<u64>,
    /// Sandboxes' disks together, each at its full size: a size such as 200G (K, M, G,
    /// T: powers of 1024; plain digits are bytes). Else $ATOLL_MAX_DISK, else `max_disk`
    /// in the config file.
    #[arg(long, global = true, hide = true, value_name = "SIZE", value_parser = parse_size)]
    pub max_disk: Option<u64>,
    /// Snapshots, templates and the image and Dockerfile step caches together, as
    /// stored: a size such as 50G. Else $ATOLL_MAX_SNAPSHOT_DISK, else
    /// `max_snapshot_disk` in the config file.
    #[arg(long, global = true, hide = true, value_name = "SIZE", value_parser = parse_size)]
    pub max_snapshot_disk: Option<u64>,
}

/// What --help says about quotas after the examples (the flags themselves are hidden
/// from every command's option list, where they would drown its own options).
pub(super) fn help(before: &str) -> String {
    format!(
        "{before}\n\nHost quotas (global flags, before or after the subcommand; for `atoll mcp`, every tool \
         call it serves):\n  \
         --max-sandboxes N          sandboxes running at once\n  \
         --max-memory-mib MIB       guest memory of running sandboxes together (16384 is 16 GiB)\n  \
         --max-vcpus N              vCPUs of running sandboxes together\n  \
         --max-disk SIZE            sandboxes' disks together, each at full size (e.g. 200G)\n  \
         --max-snapshot-disk SIZE   snapshots, templates, image and step caches, as stored (e.g. 50G)\n\
         SIZE takes K, M, G, T (powers of 1024; plain digits are bytes). Unset, each is sized from the \
         machine. A config file ({CONFIG_FILE}) sets them under [quotas] (max_sandboxes, max_memory_mib, \
         max_vcpus, max_disk = \"200G\", max_snapshot_disk = \"50G\"); $ATOLL_MAX_SANDBOXES, \
         $ATOLL_MAX_MEMORY_MIB, $ATOLL_MAX_VCPUS, $ATOLL_MAX_DISK and $ATOLL_MAX_SNAPSHOT_DISK override the \
         file; the flags override both. `atoll info` shows each limit and where it was set."
    )
}

fn parse_count(s: &str) -> Result<u64, String> {
    s.trim().parse().map_err(|_| format!("`{s}` is not a whole number; give one such as 8"))
}

fn parse_size(s: &str) -> Result<u64, String> {
    crate::config::parse_size(s)
}
