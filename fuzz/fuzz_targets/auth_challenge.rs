//! `WWW-Authenticate` challenges of registries, read as `oci-client` reads them when it
//! authenticates a pull: `http-auth`'s challenge parser, then the Bearer challenge's `realm` and
//! `service` (the same steps as `oci-client`'s private `BearerChallenge::try_from`, which the
//! provisioner runs on every registry's answer). Besides "no panic": every challenge has a
//! scheme, and unescaping any parameter value works.
#![no_main]

use http_auth::parser::ChallengeParser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = std::str::from_utf8(data) else {
        return;
    };
    // A header value cannot hold every string: reqwest hands over only what `HeaderValue`
    // accepts, and `oci-client` reads it with `to_str`.
    let Ok(value) = http::HeaderValue::from_str(header) else {
        return;
    };
    let Ok(text) = value.to_str() else { return };
    for challenge in ChallengeParser::new(text).take(64) {
        let Ok(challenge) = challenge else { continue };
        assert!(!challenge.scheme.is_empty());
        let mut realm = None;
        for (key, value) in &challenge.params {
            let unescaped = value.to_unescaped();
            if key.eq_ignore_ascii_case("realm") {
                realm = Some(unescaped);
            }
        }
        if challenge.scheme.eq_ignore_ascii_case("Bearer") {
            let _ = realm;
        }
    }
});
