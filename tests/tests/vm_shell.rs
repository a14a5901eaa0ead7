//! `atoll shell` and `atoll exec -t` on a real terminal (a pty the test drives as a person
//! would), against one booted microVM: the guest sees the window's size and TERM and
//! follows a resize, Ctrl-C and Ctrl-Z reach the guest's programs and not atoll,
//! full-screen programs (busybox vi, top) work, the exit code passes through, signals
//! to atoll end the session, and the terminal's settings are the same afterwards. Bad
//! input: no terminal on stdin, an unknown sandbox, a dead one. The shell is bash where
//! the template has it (`debian`), sh otherwise (`minimal`).

use std::process::Command;
use std::time::Duration;

use atoll_tests::pty::Terminal;
use atoll_tests::vm::{Atoll, text, wait_until};

/// Bound on one screen update travelling through atoll, the VM and back under TCG.
const SCREEN: Duration = Duration::from_secs(60);

fn shell(atoll: &Atoll, name: &str) -> Command {
    let mut cmd = atoll.command(&["shell", name]);
    cmd.env("TERM", "xterm-atoll-test");
    cmd
}

/// Waits until `program` runs in the guest (so that a key typed next reaches it).
fn until_running(atoll: &Atoll, program: &str) {
    wait_until(&format!("{program} to run in the guest"), SCREEN, || {
        atoll.run(&["-s", "dev", "exec", "--", "pidof", program]).status.success()
    });
}

#[test]
fn vm_shell_on_a_real_terminal() {
    let atoll = Atoll::new();
    let created = atoll.create_with("dev", &["--net", "none"]);
    let mut term = Terminal::open(30, 100);
    let settings = term.settings();

    term.run(shell(&atoll, "dev"));
    // `minimal` has no bash: its busybox sh, as a login shell.
    term.expect("built-in shell (ash)", SCREEN);
    // Markers are computed by the guest, so the echo of the typed line never matches.
    term.type_keys("stty size; echo TERM=$TERM; echo M-$((6*7))\r");
    term.expect("30 100\r\n", SCREEN);
    term.expect("TERM=xterm-atoll-test\r\n", SCREEN);
    term.expect("M-42", SCREEN);

    // A resize reaches the guest (SIGWINCH in atoll, a resize message, the guest's pty).
    term.resize(40, 120);
    let mut resized = false;
    for _ in 0..20 {
        term.type_keys("stty size\r");
        if term.shows("40 120\r\n", Duration::from_secs(3)) {
            resized = true;
            break;
        }
    }
    assert!(resized, "the guest never saw the new size:\n{}", term.screen_text());

    // Ctrl-C stops the foreground program, not the shell or atoll.
    term.type_keys("sleep 1000\r");
    until_running(&atoll, "sleep");
    term.type_keys("\x03");
    term.type_keys("echo st=$?\r");
    term.expect("st=130", SCREEN);
    // Ctrl-Z stops it; job control works because the pty is the controlling terminal.
    term.type_keys("sleep 1000\r");
    until_running(&atoll, "sleep");
    term.type_keys("\x1a");
    term.expect("Stopped", SCREEN);
    term.type_keys("kill -9 %1; echo K-$((1+1))\r");
    term.expect("K-2", SCREEN);

    // Full-screen programs: vi edits a file (command mode only: `x` then `:wq`), top draws.
    term.type_keys("printf 'ab%s\\n' cdef > /tmp/v; vi /tmp/v\r");
    term.expect("abcdef", SCREEN);
    // vi drew its status line on the window's last row: it knows the size.
    term.expect("\x1b[40;1H", SCREEN);
    term.type_keys("x:wq\r");
    term.expect("1L, 6C", SCREEN);
    term.type_keys("cat /tmp/v; echo V-$((2*2))\r");
    term.expect("bcdef\r\n", SCREEN);
    term.expect("V-4", SCREEN);
    term.type_keys("top\r");
    term.expect("PPID USER", SCREEN);
    term.type_keys("q");
    term.type_keys("echo T-$((3+3))\r");
    term.expect("T-6", SCREEN);

    // The shell's exit code is atoll's; the terminal is as it was.
    term.type_keys("exit 7\r");
    assert_eq!(term.wait(SCREEN).code(), Some(7), "{}", term.screen_text());
    assert_eq!(term.settings(), settings, "atoll shell left the terminal changed");

    // `atoll exec -t`: any command on a terminal; a signal's exit code passes through.
    let mut cmd = atoll.command(&["-s", "dev", "exec", "-t", "--", "sh", "-c", "tty; kill -TERM $$"]);
    cmd.env("TERM", "xterm-atoll-test");
    term.run(cmd);
    term.expect("/dev/pts/", SCREEN);
    assert_eq!(term.wait(SCREEN).code(), Some(128 + 15), "{}", term.screen_text());
    assert_eq!(term.settings(), settings, "atoll exec -t left the terminal changed");

    // SIGTERM or SIGHUP to atoll ends the session, and the terminal is put back.
    for (signal, code) in [("-TERM", 143), ("-HUP", 129)] {
        term.run(shell(&atoll, "dev"));
        term.type_keys("echo up-$((5+5))\r");
        term.expect("up-10", SCREEN);
        let kill = Command::new("kill").args([signal, &term.pid().to_string()]).status().expect("kill");
        assert!(kill.success());
        assert_eq!(term.wait(SCREEN).code(), Some(code), "{}", term.screen_text());
        assert_eq!(term.settings(), settings, "atoll {signal} left the terminal changed");
    }

    // Bad input. No terminal on stdin: refused, a usage error.
    for args in [&["shell", "dev"][..], &["-s", "dev", "exec", "-t", "--", "true"]] {
        let out = atoll.run(args);
        assert_eq!(out.status.code(), Some(2), "atoll {args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("needs a terminal on stdin"), "{err}");
        // Each command names only flags it has: `atoll shell` has no -t to drop.
        assert_eq!(err.contains("drop -t"), args[0] != "shell", "{err}");
    }
    // An unknown sandbox.
    term.run(shell(&atoll, "nosuch"));
    assert_eq!(term.wait(SCREEN).code(), Some(1), "{}", term.screen_text());
    term.expect("no sandbox named `nosuch`", SCREEN);
    assert_eq!(term.settings(), settings);
    // A dead one (its QEMU killed).
    let qemu = created["qemu_pid"].as_u64().expect("qemu_pid").to_string();
    assert!(Command::new("kill").args(["-KILL", &qemu]).status().expect("kill").success());
    wait_until("QEMU to go", SCREEN, || !std::path::Path::new(&format!("/proc/{qemu}")).exists());
    term.run(shell(&atoll, "dev"));
    assert_eq!(term.wait(SCREEN).code(), Some(1), "{}", term.screen_text());
    term.expect("`dev` is dead", SCREEN);
    assert_eq!(term.settings(), settings);
    atoll.json(&["kill", "dev"]);
}

#[test]
fn vm_shell_is_bash_where_the_template_has_it() {
    if !atoll_tests::debian_or_skip() {
        return;
    }
    let atoll = Atoll::new();
    atoll.create_with("deb", &["--template", "debian", "--net", "none"]);
    let mut term = Terminal::open(24, 80);
    let settings = term.settings();
    term.run(shell(&atoll, "deb"));
    term.type_keys("echo B-${BASH_VERSION%%.*}-$((2+1)); stty size\r");
    term.expect("B-5-3", SCREEN);
    term.expect("24 80\r\n", SCREEN);
    term.type_keys("exit 3\r");
    assert_eq!(term.wait(SCREEN).code(), Some(3), "{}", term.screen_text());
    assert_eq!(term.settings(), settings);
    atoll.json(&["kill", "deb"]);
}
