//! Image references (`[registry[:port]/]repository[:tag][@digest]`), parsed by hand with the
//! grammar of the distribution project's reference package: the regex `oci-client` uses
//! costs more to compile than a small pull takes.

use oci_client::Reference;

use super::error::ImageError;

const DOCKER_HUB: &str = "docker.io";
const MAX_REPOSITORY: usize = 255;

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` separated by dots, then an optional `:port`.
fn valid_domain(domain: &str) -> bool {
    let (host, port) = match domain.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|c| c.is_ascii_digit()))
    {
        return false;
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && is_alnum(b[0])
                && is_alnum(b[b.len() - 1])
                && b.iter().all(|c| is_alnum(*c) || *c == b'-')
        })
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(component: &str) -> bool {
    let b = component.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || separator.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
fn valid_tag(tag: &str) -> bool {
    let b = tag.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (is_alnum(b[0]) || b[0] == b'_')
        && b.iter()
            .all(|c| is_alnum(*c) || matches!(c, b'_' | b'.' | b'-'))
}

fn valid_digest(digest: &str) -> Result<(), &'static str> {
    let (algorithm, hex) = digest
        .split_once(':')
        .ok_or("digest must be algorithm:hex")?;
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err("unsupported digest algorithm"),
    };
    if hex.len() != length
        || !hex
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return Err("digest has the wrong length or is not lower-case hex");
    }
    Ok(())
}

/// Parses an image reference; a reference without tag or digest gets the tag `latest`, and
/// Docker Hub names are normalised (`nginx` is `docker.io/library/nginx`).
pub fn parse_reference(reference: &str) -> Result<Reference, ImageError> {
    let invalid = |reason: &str| ImageError::InvalidReference {
        reference: reference.to_string(),
        reason: reason.to_string(),
    };
    let text = reference.trim();
    if text.is_empty() {
        return Err(invalid("empty reference"));
    }
    let (name_and_tag, digest) = match text.split_once('@') {
        Some((rest, digest)) => {
            valid_digest(digest).map_err(invalid)?;
            (rest, Some(digest.to_string()))
        }
        None => (text, None),
    };
    // A tag is after the last ':' that follows the last '/' (a ':' before it is a port).
    let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
        Some(i) => {
            let tag = &name_and_tag[last_slash + i + 1..];
            if !valid_tag(tag) {
                return Err(invalid("invalid tag"));
            }
            (&name_and_tag[..last_slash + i], Some(tag.to_string()))
        }
        None => (name_and_tag, None),
    };
    let (mut registry, mut repository) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first != first.to_lowercase() =>
        {
            if !valid_domain(first) {
                return Err(invalid("invalid registry host"));
            }
            (first.to_string(), rest.to_string())
        }
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    if registry == "index.docker.io" {
        registry = DOCKER_HUB.to_string();
    }
    if registry == DOCKER_HUB && !repository.contains('/') {
        repository = format!("library/{repository}");
    }
    if !repository.split('/').all(valid_path_component) {
        return Err(invalid(
            "repository must be lower-case letters, digits and separators",
        ));
    }
    if repository.len() > MAX_REPOSITORY {
        return Err(invalid("repository name is too long"));
    }
    Ok(match (tag, digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag, digest)
        }
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest),
        (tag, None) => {
            Reference::with_tag(registry, repository, tag.unwrap_or_else(|| "latest".into()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(reference: &str) -> (String, String, Option<String>, Option<String>) {
        let r = parse_reference(reference).unwrap();
        (
            r.registry().to_string(),
            r.repository().to_string(),
            r.tag().map(str::to_string),
            r.digest().map(str::to_string),
        )
    }

    #[test]
    fn agrees_with_the_regex_parser() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        for reference in [
            "nginx".to_string(),
            "nginx:1.25".to_string(),
            "library/nginx".to_string(),
            "docker.io/nginx".to_string(),
            "index.docker.io/team/app:v1".to_string(),
            "localhost/app".to_string(),
            "localhost:5000/app:v1".to_string(),
            "127.0.0.1:5000/team/app:v1.2-rc_3".to_string(),
            "registry.example.com/a/b/c".to_string(),
            "Registry.Example.com/a".to_string(),
            "example.com/a__b/c-d/e.f/g---h".to_string(),
            format!("127.0.0.1:5000/app@{digest}"),
            format!("127.0.0.1:5000/app:v1@{digest}"),
            format!("nginx@{digest}"),
        ] {
            let expected: Reference = reference.parse().unwrap();
            let ours = parse_reference(&reference).unwrap();
            assert_eq!(ours.registry(), expected.registry(), "{reference}");
            assert_eq!(ours.repository(), expected.repository(), "{reference}");
            assert_eq!(ours.tag(), expected.tag(), "{reference}");
            assert_eq!(ours.digest(), expected.digest(), "{reference}");
            assert_eq!(ours.whole(), expected.whole(), "{reference}");
        }
    }

    #[test]
    fn defaults() {
        assert_eq!(
            parts("nginx"),
            (
                "docker.io".into(),
                "library/nginx".into(),
                Some("latest".into()),
                None
            )
        );
        assert_eq!(
            parts("127.0.0.1:5000/app"),
            (
                "127.0.0.1:5000".into(),
                "app".into(),
                Some("latest".into()),
                None
            )
        );
    }

    #[test]
    fn invalid_references_are_refused_like_the_regex_parser_does() {
        let short = "sha256:abc";
        for reference in [
            "",
            "upper/Case",
            "example.com/UPPER",
            "app:",
            "app:-tag",
            "example.com/a//b",
            "example.com/-a",
            "example.com/a-",
            "example.com/a..b",
            "example.com/a___b",
            "example.com:port/a",
            "app@sha256:XYZ",
            &format!("app@{short}"),
            &format!("app@md5:{}", "a".repeat(32)),
        ] {
            assert!(parse_reference(reference).is_err(), "{reference:?}");
            assert!(
                reference.parse::<Reference>().is_err(),
                "regex accepts {reference:?}"
            );
        }
        assert!(parse_reference(&format!("example.com/{}", "a".repeat(300))).is_err());
        // Stricter than the regex, which reads this host as a path component.
        assert!(parse_reference("exa_mple.com/a").is_err());
    }
}
