//! Archive entry names: any accepted name stays inside the target directory.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use atoll_agent::archive::upload::entry_path;

fuzz_target!(|data: &[u8]| {
    if let Ok(rel) = entry_path(data) {
        assert!(rel.is_relative(), "{rel:?}");
        assert!(rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
        let target = Path::new("/srv/target");
        assert!(target.join(&rel).starts_with(target), "{rel:?} escapes");
    }
});
