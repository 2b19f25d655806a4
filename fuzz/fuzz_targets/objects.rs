//! One manifest file (YAML, or JSON when the first byte is odd) through both readers: the
//! validation that a pull runs (`summarize_file`, a bounded-memory walk) and the full parse
//! used for applying (`parse_file`). Besides "no panic": a file that validates parses, into
//! the same objects in the same order.
#![no_main]

use gantry_image::EffectiveLimits;
use gantry_image::objects::{parse_file, summarize_file};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((first, content)) = data.split_first() else {
        return;
    };
    let file = if first & 1 == 0 { "a.yaml" } else { "a.json" };
    let limits = EffectiveLimits {
        max_file_bytes: 256 << 10,
        max_objects: 512,
        ..EffectiveLimits::default()
    };
    let summary = summarize_file(file, content, &limits);
    let parsed = parse_file(file, content, &limits);
    if let Ok(summary) = summary {
        let parsed = parsed.unwrap_or_else(|e| panic!("validated, but does not parse: {e}"));
        assert_eq!(summary.len(), parsed.len(), "object counts differ");
        for (s, p) in summary.iter().zip(&parsed) {
            assert_eq!((s.document, s.item), (p.document, p.item));
            assert_eq!(p.object["kind"].as_str(), Some(s.kind.as_str()));
            assert_eq!(p.object["metadata"]["name"].as_str(), Some(s.name.as_str()));
        }
    }
});
