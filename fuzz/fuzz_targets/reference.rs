//! Image references as a Bundle's `spec.image` gives them. Besides "no panic": an accepted
//! reference prints (`whole()`) as a reference that parses back to itself.
#![no_main]

use gantry_image::parse_reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(reference) = parse_reference(text) {
        let whole = reference.whole();
        let again = parse_reference(&whole).unwrap_or_else(|e| {
            panic!("{text:?} was accepted as {whole:?}, which is refused: {e}")
        });
        assert_eq!(again.whole(), whole);
        assert_eq!(again.digest(), reference.digest());
    }
});
