//! The address grammar: any string either fails to parse or parses to an address whose
//! display form parses back to the same address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use atoll_proto::Address;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(addr) = text.parse::<Address>() {
        let shown = addr.to_string();
        let again: Address =
            shown.parse().unwrap_or_else(|e| panic!("{shown:?} (from {text:?}) does not parse: {e}"));
        assert_eq!(addr, again, "{text:?} -> {shown:?}");
    }
});
