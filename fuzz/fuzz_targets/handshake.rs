//! The hybrid-vsock handshake reply parser: never panics, and accepts only `OK <port>`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(port) = atoll::connect::parse_handshake_reply(data) {
        let text = std::str::from_utf8(data).expect("an accepted reply is UTF-8");
        assert!(text.starts_with("OK "), "accepted {text:?}");
        assert!(text.contains(&port.to_string()), "{text:?} gave port {port}");
    }
});
