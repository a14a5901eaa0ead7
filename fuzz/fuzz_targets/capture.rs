//! Head + tail truncation of command output: whatever the chunking, the result stays
//! within the limit, counts every byte, is exact when nothing was cut, and keeps the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use atoll_agent::exec::capture::Capture;

fuzz_target!(|data: &[u8]| {
    let [l0, l1, cut, rest @ ..] = data else { return };
    let limit = usize::from(u16::from_le_bytes([*l0, *l1]) % 512) + 1;
    let mut capture = Capture::new(limit);
    let step = usize::from(*cut) + 1;
    for chunk in rest.chunks(step) {
        capture.push(chunk);
    }
    let out = capture.finish();
    assert_eq!(out.total_bytes, rest.len() as u64);
    assert_eq!(out.truncated, rest.len() > limit);
    assert!(out.data.len() <= limit, "{} bytes kept under a limit of {limit}", out.data.len());
    if out.truncated {
        assert_eq!(out.data.last(), rest.last(), "the end of the output was lost");
    } else {
        assert_eq!(out.data, rest);
    }
});
