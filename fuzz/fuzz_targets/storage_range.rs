//! `Range` headers of the storage server's downloads against a content size (the first eight
//! bytes of the input). Besides "no panic": a partial answer lies within the content.
#![no_main]

use gantry_storage::range::{RangeOutcome, parse_range};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (size, header) = data.split_at(8);
    // Sizes up to 1 TiB; small ones are the interesting edge cases.
    let size = u64::from_le_bytes(size.try_into().unwrap()) % (1 << 40);
    let Ok(header) = std::str::from_utf8(header) else {
        return;
    };
    match parse_range(header, size) {
        RangeOutcome::Partial { start, end } => {
            assert!(
                start <= end && end < size,
                "{header:?} size {size}: {start}-{end}"
            )
        }
        RangeOutcome::Full | RangeOutcome::Unsatisfiable => {}
    }
});
