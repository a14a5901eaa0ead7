//! [`Terminal`]: a real pseudo-terminal that programs run on one after another, as a
//! person at a terminal runs them: the pty is the controlling terminal of each
//! program's new session; the test types bytes into it, reads what it shows, resizes
//! it, and reads its settings (`stty -g`) between programs.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

/// A pty and the program running on it, if any (killed when dropped).
pub struct Terminal {
    master: File,
    slave: OwnedFd,
    child: Option<Child>,
    screen: Arc<Mutex<Vec<u8>>>,
    /// How much of `screen` [`Terminal::expect`] has consumed.
    seen: usize,
}

/// A new pty of `rows` by `cols`: (master, slave).
fn open(rows: u16, cols: u16) -> (File, OwnedFd) {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags).expect("openpt");
    rustix::pty::grantpt(&master).expect("grantpt");
    rustix::pty::unlockpt(&master).expect("unlockpt");
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags).expect("open the pty's slave");
    let size = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&master, size).expect("set the pty's size");
    (File::from(master), slave)
}

impl Terminal {
    /// A new `rows` x `cols` terminal with nothing running on it.
    pub fn open(rows: u16, cols: u16) -> Terminal {
        let (master, slave) = open(rows, cols);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("dup the pty's master");
        let sink = screen.clone();
        // Reads until the test ends (the test holds the slave, so no EOF comes).
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal { master, slave, child: None, screen, seen: 0 }
    }

    /// Runs `cmd` on the terminal (its stdin, stdout and stderr), in a new session whose
    /// controlling terminal this is.
    pub fn run(&mut self, mut cmd: Command) {
        assert!(self.child.is_none(), "a program is still running on the terminal");
        let fd = |s: &OwnedFd| Stdio::from(s.try_clone().expect("dup the pty's slave"));
        cmd.stdin(fd(&self.slave)).stdout(fd(&self.slave)).stderr(fd(&self.slave));
        // SAFETY: setsid and the ioctl are async-signal-safe and touch only the child.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(std::os::fd::BorrowedFd::borrow_raw(0))?;
                Ok(())
            });
        }
        self.child = Some(cmd.spawn().expect("spawn the program on the pty"));
    }

    /// The running program's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a program runs on the terminal").id()
    }

    /// Types `keys`.
    pub fn type_keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).expect("type into the pty");
    }

    /// Waits until the terminal shows `needle` after what earlier calls consumed, and
    /// consumes up to its end; fails after `limit` (a bound on an event, not a timing
    /// check), showing the screen.
    pub fn expect(&mut self, needle: &str, limit: Duration) {
        assert!(
            self.shows(needle, limit),
            "the terminal did not show {needle:?} within {limit:?}; it shows:\n{}",
            self.screen_text()
        );
    }

    /// [`Terminal::expect`] that says whether `needle` came instead of failing.
    pub fn shows(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            {
                let screen = self.screen.lock().unwrap();
                let rest = &screen[self.seen..];
                if let Some(at) = rest.windows(needle.len()).position(|w| w == needle.as_bytes()) {
                    self.seen += at + needle.len();
                    return true;
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the terminal has shown, as text.
    pub fn screen_text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Resizes the window; the kernel sends SIGWINCH to the foreground program.
    pub fn resize(&self, rows: u16, cols: u16) {
        let size = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&self.master, size).expect("resize the pty");
    }

    /// The terminal's settings as `stty -g` prints them.
    pub fn settings(&self) -> String {
        let stdin = self.slave.try_clone().expect("dup the pty's slave");
        let out = Command::new("stty").arg("-g").stdin(stdin).output().expect("run stty -g");
        assert!(out.status.success(), "stty -g failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits for the program to exit, up to `limit`; kills it and fails if it does not.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().expect("a program runs on the terminal");
        loop {
            if let Some(status) = child.try_wait().expect("wait for the program") {
                self.child = None;
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!(
                    "the program did not exit within {limit:?}; the terminal shows:\n{}",
                    self.screen_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
