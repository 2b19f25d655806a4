//! Request paths of the storage server, parsed from the raw request target before any file
//! system call. Besides "no panic": an accepted path is exactly the path its target prints
//! (nothing was decoded or normalised), and names only one bundle directory and file.
#![no_main]

use gantry_api::storage::{BUNDLES_PREFIX, Target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(target) = Target::parse(path) {
        assert_eq!(target.path(), path);
        let rest = &path[BUNDLES_PREFIX.len()..];
        assert!(
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".."),
            "{path:?}"
        );
        assert!(!path.contains('%') && !path.contains('\\'), "{path:?}");
    }
});
