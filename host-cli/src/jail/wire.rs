//! The sockets where QEMU meets its network helper, bound and listening by atoll before
//! either starts, so the two can start at once (`sandbox::machine::bring_up` starts
//! QEMU without waiting for the helper): the console's `vm/wire/tty.sock`, the NIC's
//! `vm/wire/net.sock` (with a network) and `net/stderr.sock`, which atoll connects to
//! and hands QEMU as its stdout and stderr. QEMU's connections wait in their backlog
//! until the helper, which inherits the listening descriptors
//! (`atoll net-helper --tty-fd N --stderr-fd N [--frames-fd N]`), accepts them. A helper
//! that never comes leaves nothing listening: atoll closes its copies once the helper
//! has them, so QEMU then writes into a socket nobody reads and atoll ends both.
//!
//! Each is bound under a temporary name (`<path>.new`,
//! [`crate::sandbox::network::helper::bind_tmp_path`]), made 0600 and, atoll being root,
//! the helper's user's (`atoll-net:atoll`, as when the helper bound them itself), then
//! renamed into place: nobody but its owner can connect in between, and whoever sees
//! the path finds it listening. `jail::start_qemu` hands the console's and the NIC's to
//! QEMU's group (`0660`) as before.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::sandbox::network::config;
use crate::sandbox::network::helper::bind_tmp_path;

/// Why a socket between QEMU and the helper could not be made.
#[derive(Debug, thiserror::Error)]
#[error("could not listen on {} (where QEMU meets its network helper); remove what is there, or `atoll kill` the sandbox and start it again", path.display())]
pub struct WireError {
    /// The socket.
    pub path: std::path::PathBuf,
    /// What failed.
    #[source]
    pub source: std::io::Error,
}

/// The listening sockets of one sandbox, atoll's copies until the helper has inherited
/// them (then dropped).
#[derive(Debug)]
pub struct Listeners {
    /// `vm/wire/tty.sock`, the serial console.
    tty: UnixListener,
    /// `net/stderr.sock`, QEMU's stdout and stderr.
    stderr: UnixListener,
    /// `vm/wire/net.sock`, the NIC's frames, with a network.
    frames: Option<UnixListener>,
}

impl Listeners {
    /// Binds the sockets of the sandbox in `dir` (`vm/wire/` made anew and `net/`
    /// cleared, no helper or QEMU of it running): the NIC's only with `network`; given to
    /// `owner` (uid, gid: the helper's user, atoll being root).
    pub fn bind(dir: &Path, network: bool, owner: Option<(u32, u32)>) -> Result<Listeners, WireError> {
        Ok(Listeners {
            tty: listen(&config::console_socket_path(dir), owner)?,
            stderr: listen(&config::stderr_socket_path(dir), owner)?,
            frames: if network { Some(listen(&config::frames_path(dir), owner)?) } else { None },
        })
    }

    /// The descriptors the helper inherits.
    pub fn raw_fds(&self) -> Vec<RawFd> {
        let mut fds = vec![self.tty.as_raw_fd(), self.stderr.as_raw_fd()];
        fds.extend(self.frames.as_ref().map(AsRawFd::as_raw_fd));
        fds
    }

    /// The helper's arguments naming them.
    pub fn helper_args(&self) -> Vec<String> {
        let mut a = vec![
            "--tty-fd".to_owned(),
            self.tty.as_raw_fd().to_string(),
            "--stderr-fd".to_owned(),
            self.stderr.as_raw_fd().to_string(),
        ];
        if let Some(f) = &self.frames {
            a.extend(["--frames-fd".to_owned(), f.as_raw_fd().to_string()]);
        }
        a
    }
}

/// Binds and listens on `path` as the module says ([`listen_in_place`]), the error
/// naming the socket.
fn listen(path: &Path, owner: Option<(u32, u32)>) -> Result<UnixListener, WireError> {
    listen_in_place(path, owner).map_err(|source| WireError { path: path.to_path_buf(), source })
}

/// Binds and listens on `path` under a temporary name, makes it 0600 (and `owner`'s:
/// uid, gid), then renames it into place, so the path exists only once it listens and
/// only its owner can connect before. What was there (a stale socket, a file: never a
/// directory, which fails the rename) is replaced by the rename, never followed; nothing
/// is left under the temporary name on failure. The network helper binds its own
/// sockets with it too.
pub(crate) fn listen_in_place(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<UnixListener> {
    let tmp = bind_tmp_path(path);
    // `unlink` removes a link itself; a directory fails the bind, which says so.
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    let placed = match owner {
        Some(owner) => super::own_socket(&tmp, owner),
        None => crate::vmm::safe_fs::set_mode(&tmp, 0o600),
    }
    .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    use super::*;

    /// Each socket appears listening, 0600, where the helper used to bind it; what stood
    /// there is replaced (not followed), and no temporary name is left.
    #[test]
    fn sockets_appear_listening_in_place_of_what_was_there() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::create_dir(dir.join("vm")).unwrap();
        crate::vmm::state::renew_wire_dir(dir).unwrap();
        std::fs::create_dir(config::net_dir(dir)).unwrap();
        let outside = dir.join("outside");
        std::fs::write(&outside, b"kept").unwrap();
        std::os::unix::fs::symlink(&outside, config::frames_path(dir)).unwrap();
        std::fs::write(config::stderr_socket_path(dir), b"stale").unwrap();
        let l = Listeners::bind(dir, true, None).unwrap();
        for path in
            [config::console_socket_path(dir), config::frames_path(dir), config::stderr_socket_path(dir)]
        {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(meta.file_type().is_socket(), "{}", path.display());
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", path.display());
            std::os::unix::net::UnixStream::connect(&path).expect("listening before anyone accepts");
            assert!(!bind_tmp_path(&path).exists());
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"kept", "the link was replaced, not followed");
        assert_eq!(l.raw_fds().len(), 3);
        assert_eq!(l.helper_args().len(), 6);
        drop(l);
        let refused = std::os::unix::net::UnixStream::connect(config::console_socket_path(dir));
        assert!(refused.is_err(), "nothing listens once the last copy is closed");

        let none = Listeners::bind(dir, false, None).unwrap();
        assert_eq!(none.raw_fds().len(), 2);
        assert!(!none.helper_args().iter().any(|a| a == "--frames-fd"));
    }

    /// A directory in a socket's place (which the start paths clear first) fails with the
    /// path named, and what to do.
    #[test]
    fn a_directory_in_the_way_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::create_dir(dir.join("vm")).unwrap();
        crate::vmm::state::renew_wire_dir(dir).unwrap();
        std::fs::create_dir(config::net_dir(dir)).unwrap();
        std::fs::create_dir(config::console_socket_path(dir)).unwrap();
        let e = Listeners::bind(dir, false, None).unwrap_err();
        assert!(e.to_string().contains("tty.sock") && e.to_string().contains("remove what is there"), "{e}");
        assert!(!bind_tmp_path(&config::console_socket_path(dir)).exists());
    }
}
