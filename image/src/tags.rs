//! A repository's tags (`GET /v2/<name>/tags/list`), every page: the distribution
//! specification pages the list with `n` and `last`, and names the next page in a `Link`
//! header (`<...>; rel="next"`), which is followed. `oci-client`'s `list_tags` reads one page
//! only, so the list is read here, with the client's TLS, plain-HTTP and credential settings.

use oci_client::Reference;

use super::client::{RegistryClient, chain, parse_reference, registry_failure, short_body};
use super::error::ImageError;

/// At most this many tags are read from a repository.
pub const MAX_TAGS: usize = 10_000;

/// At most this many bytes of tag lists are read from a repository, all pages together.
pub const MAX_TAG_BYTES: u64 = 4 << 20;

/// How a tag list is read.
#[derive(Debug, Clone, Copy)]
pub struct TagListing {
    /// The page size asked for (`n`); `None`: the registry's own.
    pub page_size: Option<u32>,
    /// At most this many tags.
    pub max_tags: usize,
    /// At most this many bytes, all pages together.
    pub max_bytes: u64,
}

impl Default for TagListing {
    fn default() -> Self {
        Self {
            page_size: None,
            max_tags: MAX_TAGS,
            max_bytes: MAX_TAG_BYTES,
        }
    }
}

#[derive(serde::Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl RegistryClient {
    /// The tags of `repository` (`registry/name`, a tag or digest after it is ignored), in the
    /// registry's order, every page.
    pub async fn list_tags(
        &self,
        repository: &str,
        listing: TagListing,
    ) -> Result<Vec<String>, ImageError> {
        let reference = parse_reference(repository)?;
        let authorization = self.authorization(&reference).await?;
        let origin = format!(
            "{}://{}",
            self.scheme(&reference),
            reference.resolve_registry()
        );
        let mut url = format!("{origin}/v2/{}/tags/list", reference.repository());
        if let Some(n) = listing.page_size {
            url.push_str(&format!("?n={n}"));
        }
        let mut tags = Vec::new();
        let mut bytes = 0u64;
        let mut pages = 0usize;
        loop {
            pages += 1;
            let (page, next) = self
                .tag_page(
                    &reference,
                    &url,
                    authorization.as_deref(),
                    &mut bytes,
                    listing,
                )
                .await?;
            let read = page.len();
            tags.extend(page);
            if tags.len() > listing.max_tags {
                return Err(too_many(
                    &reference,
                    format!("more than {} tags", listing.max_tags),
                ));
            }
            let Some(next) = next else {
                return Ok(tags);
            };
            // A page without tags that names a next one, or more pages than tags: a registry
            // going round in circles.
            if read == 0 || pages > listing.max_tags {
                return Err(registry_failure(
                    &reference,
                    format!("the tag list at {url} names a next page but has no tags"),
                ));
            }
            url = next_url(&reference, &origin, &next)?;
        }
    }

    /// One page of the tag list, and the next page's address when the `Link` header names one.
    async fn tag_page(
        &self,
        reference: &Reference,
        url: &str,
        authorization: Option<&str>,
        bytes: &mut u64,
        listing: TagListing,
    ) -> Result<(Vec<String>, Option<String>), ImageError> {
        let mut request = self.http.get(url);
        if let Some(authorization) = authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| registry_failure(reference, chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let body = short_body(response).await;
            let detail = format!("HTTP {status} for {url}: {body}");
            return Err(self.status_error(reference, status, detail));
        }
        let next = response
            .headers()
            .get_all(reqwest::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(next_link);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            registry_failure(reference, format!("reading the tag list: {}", chain(&e)))
        })? {
            *bytes += chunk.len() as u64;
            if *bytes > listing.max_bytes {
                return Err(too_many(
                    reference,
                    format!("tag lists of more than {} bytes", listing.max_bytes),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        let page: TagPage =
            serde_json::from_slice(&body).map_err(|e| ImageError::InvalidManifest {
                reference: reference.whole(),
                reason: format!("its tag list at {url} is not JSON of the expected shape: {e}"),
            })?;
        Ok((page.tags.unwrap_or_default(), next))
    }
}

fn too_many(reference: &Reference, what: String) -> ImageError {
    ImageError::Registry {
        reference: reference.whole(),
        detail: format!("the repository has {what}, more than are read"),
    }
}

/// The target of a `Link` header value's `rel="next"` entry.
fn next_link(value: &str) -> Option<String> {
    value.split(',').find_map(|entry| {
        let (target, params) = entry.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| target.to_string())
    })
}

/// The next page's URL: a path on the same registry, or a URL of the same registry. A link to
/// another host is refused: the request carries the registry's credentials.
fn next_url(reference: &Reference, origin: &str, link: &str) -> Result<String, ImageError> {
    if link.starts_with('/') && !link.starts_with("//") {
        return Ok(format!("{origin}{link}"));
    }
    match link.strip_prefix(origin) {
        Some(rest) if rest.starts_with('/') => Ok(link.to_string()),
        _ => Err(registry_failure(
            reference,
            format!("the tag list's next page {link:?} is not on {origin}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_links_are_read() {
        assert_eq!(
            next_link(r#"</v2/app/tags/list?last=b&n=2>; rel="next""#).as_deref(),
            Some("/v2/app/tags/list?last=b&n=2")
        );
        assert_eq!(
            next_link(r#"<https://r/other>; rel="prev", </v2/a/tags/list?n=1&last=x>; rel=next"#)
                .as_deref(),
            Some("/v2/a/tags/list?n=1&last=x")
        );
        assert_eq!(next_link(r#"</v2/a>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
    }

    #[test]
    fn next_pages_stay_on_the_registry() {
        let reference = parse_reference("127.0.0.1:5000/app").unwrap();
        let origin = "http://127.0.0.1:5000";
        assert_eq!(
            next_url(&reference, origin, "/v2/app/tags/list?last=b").unwrap(),
            "http://127.0.0.1:5000/v2/app/tags/list?last=b"
        );
        assert_eq!(
            next_url(
                &reference,
                origin,
                "http://127.0.0.1:5000/v2/app/tags/list?last=b"
            )
            .unwrap(),
            "http://127.0.0.1:5000/v2/app/tags/list?last=b"
        );
        for elsewhere in [
            "//elsewhere/v2/app/tags/list",
            "http://127.0.0.1:50001/v2/app",
            "https://elsewhere/v2/app/tags/list",
        ] {
            assert!(
                next_url(&reference, origin, elsewhere).is_err(),
                "{elsewhere}"
            );
        }
    }
}
