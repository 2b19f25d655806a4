//! `Bundle.spec.ref`: choosing a repository's tag by version.
//!
//! The range is written as Flux writes it (Masterminds/semver): comparators separated by spaces
//! or commas all hold (`>=1.0.0 <2.0.0`, `>= 1.0, < 2`), `||` separates alternatives, `A - B`
//! is `>=A <=B`, `1.x` and `1.*` are wildcards, `~1.4` is `>=1.4.0 <1.5.0`, `^1.2` is
//! `>=1.2.0 <2.0.0`, and a bare version is that version only (`1.2.3`; `1.2` is any `1.2.x`).
//! A leading `v` is accepted in the range and in tags. The comparators themselves are those of
//! the `semver` crate (Cargo's), which the range is translated to; `!=` is not accepted.
//!
//! A tag counts when it is a semantic version (`1.4.2`, `v1.4.2`, `1.5.0-rc.1`); other tags
//! (`latest`, `main`, `1.4`) are ignored. A pre-release counts only when the alternative names
//! one (`>=1.5.0-0`), and then any pre-release within it counts, as in Flux (`<2.0.0` then
//! admits `2.0.0-rc.1`, which comes before `2.0.0`; `<2.0.0-0` does not). The highest
//! version wins; of two tags of the same version (`1.4.2` and `v1.4.2`), the one without `v`.

use std::cmp::Ordering;

use regex::Regex;
use semver::{Comparator, Op, Prerelease, Version, VersionReq};

/// How many of the highest tags a failure names.
const TAGS_NAMED: usize = 5;

/// A version range with its tag filter, parsed.
#[derive(Debug, Clone)]
pub struct VersionRange {
    text: String,
    alternatives: Vec<Alternative>,
    filter: Option<Regex>,
}

#[derive(Debug, Clone)]
struct Alternative {
    req: VersionReq,
    /// Whether a comparator names a pre-release: only then do pre-releases count.
    prerelease: bool,
}

/// A range or filter that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("spec.ref.semver {range:?} is not a version range: {reason}")]
    Range { range: String, reason: String },
    #[error("spec.ref.semverFilter {filter:?} is not a regular expression: {reason}")]
    Filter { filter: String, reason: String },
}

/// No tag is within the range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no tag of {repository} matches {range}{}; {}", filtered(.filter), seen(.highest, .others))]
pub struct NoMatch {
    pub repository: String,
    pub range: String,
    pub filter: Option<String>,
    /// The tags of the highest versions seen, highest first (at most five).
    pub highest: Vec<String>,
    /// When no tag is a version: some of the tags (at most five).
    pub others: Vec<String>,
}

fn filtered(filter: &Option<String>) -> String {
    filter
        .as_ref()
        .map(|f| format!(" (of the tags matching {f:?})"))
        .unwrap_or_default()
}

fn seen(highest: &[String], others: &[String]) -> String {
    match (highest.is_empty(), others.is_empty()) {
        (false, _) => format!("highest tags seen: {}", highest.join(", ")),
        (true, false) => format!(
            "no tag is a semantic version; tags seen: {}",
            others.join(", ")
        ),
        (true, true) => "the repository has no tags".to_string(),
    }
}

/// The tag chosen, and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub tag: String,
    pub version: Version,
}

impl VersionRange {
    /// Parses `range` (Flux's syntax, see the module) and `filter` (a regular expression).
    pub fn parse(range: &str, filter: Option<&str>) -> Result<Self, RangeError> {
        let refuse = |reason: String| RangeError::Range {
            range: range.to_string(),
            reason,
        };
        if range.trim().is_empty() {
            return Err(refuse("it is empty".into()));
        }
        let alternatives = range
            .split("||")
            .map(|alternative| {
                let translated = translate(alternative).map_err(&refuse)?;
                let req = VersionReq::parse(&translated).map_err(|e| refuse(e.to_string()))?;
                let prerelease = req.comparators.iter().any(|c| !c.pre.is_empty());
                Ok(Alternative { req, prerelease })
            })
            .collect::<Result<Vec<_>, RangeError>>()?;
        let filter = filter
            .map(|f| {
                Regex::new(f).map_err(|e| RangeError::Filter {
                    filter: f.to_string(),
                    reason: e.to_string(),
                })
            })
            .transpose()?;
        Ok(Self {
            text: range.to_string(),
            alternatives,
            filter,
        })
    }

    /// The range as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `version` is within the range.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|a| a.matches(version))
    }

    /// The tag of the highest version within the range among `tags` of `repository`.
    pub fn choose<'a>(
        &self,
        repository: &str,
        tags: impl IntoIterator<Item = &'a str>,
    ) -> Result<Choice, NoMatch> {
        let mut best: Option<(Version, &str)> = None;
        let mut versions: Vec<(Version, &str)> = Vec::new();
        let mut others = Vec::new();
        for tag in tags {
            let Some(version) = tag_version(tag) else {
                if others.len() < TAGS_NAMED {
                    others.push(tag.to_string());
                }
                continue;
            };
            let wanted =
                self.filter.as_ref().is_none_or(|f| f.is_match(tag)) && self.matches(&version);
            if wanted
                && best
                    .as_ref()
                    .is_none_or(|(v, t)| preferred(&version, tag, v, t) == Ordering::Greater)
            {
                best = Some((version.clone(), tag));
            }
            versions.push((version, tag));
            // Only the highest few are named: the list stays short for repositories of
            // thousands of tags.
            if versions.len() > 4 * TAGS_NAMED {
                keep_highest(&mut versions);
            }
        }
        if let Some((version, tag)) = best {
            return Ok(Choice {
                tag: tag.to_string(),
                version,
            });
        }
        keep_highest(&mut versions);
        Err(NoMatch {
            repository: repository.to_string(),
            range: self.text.clone(),
            filter: self.filter.as_ref().map(|f| f.as_str().to_string()),
            highest: versions.iter().map(|(_, t)| t.to_string()).collect(),
            others: if versions.is_empty() {
                others
            } else {
                Vec::new()
            },
        })
    }
}

/// Keeps the [`TAGS_NAMED`] highest, highest first.
fn keep_highest(versions: &mut Vec<(Version, &str)>) {
    versions.sort_by(|(a, at), (b, bt)| preferred(b, bt, a, at));
    versions.truncate(TAGS_NAMED);
}

/// How `a` (tag `at`) compares with `b` (tag `bt`) as a choice: by version (build metadata
/// aside), then the tag without `v`, then the tags' text.
fn preferred(a: &Version, at: &str, b: &Version, bt: &str) -> Ordering {
    a.cmp_precedence(b)
        .then_with(|| bt.starts_with('v').cmp(&at.starts_with('v')))
        .then_with(|| at.cmp(bt))
}

impl Alternative {
    fn matches(&self, version: &Version) -> bool {
        if version.pre.is_empty() {
            return self.req.matches(version);
        }
        if !self.prerelease {
            return false;
        }
        // The `semver` crate lets a pre-release match only a comparator of the same
        // major.minor.patch; Flux lets any pre-release within the range match once the range
        // names one. A comparator `>=M.m.p-0` for the version's own M.m.p holds for it, and
        // lifts that restriction.
        let mut req = self.req.clone();
        req.comparators.push(Comparator {
            op: Op::GreaterEq,
            major: version.major,
            minor: Some(version.minor),
            patch: Some(version.patch),
            pre: Prerelease::new("0").unwrap_or(Prerelease::EMPTY),
        });
        req.matches(version)
    }
}

/// With `spec.ref`: which version is installed and which comes, in words
/// (`1.4.2 installed, 1.5.0 waiting for approval`), for `kubectl bundle status` and the review
/// page. The installed tag is the one history recorded for `installedImage`; the coming one is
/// `resolvedTag` while `resolvedImage` differs from `installedImage`. `None` without `spec.ref`.
pub fn version_line(bundle: &gantry_api::Bundle) -> Option<String> {
    use gantry_api::BundlePhase;
    let range = bundle.spec.r#ref.as_ref()?;
    let status = bundle.status.clone().unwrap_or_default();
    let installed = status.installed_image.as_deref().map(|image| {
        status
            .history
            .iter()
            .find(|e| e.image == image)
            .and_then(|e| e.tag.clone())
            .unwrap_or_else(|| image.to_string())
    });
    let coming = status
        .resolved_tag
        .as_deref()
        .filter(|_| status.resolved_image != status.installed_image);
    let state = match status.phase {
        Some(BundlePhase::AwaitingApproval) => "waiting for approval",
        Some(BundlePhase::Denied) => "denied",
        Some(BundlePhase::Failing | BundlePhase::UpdateFailing) => "failing",
        _ => "being installed",
    };
    let words = match (installed, coming) {
        (Some(installed), Some(coming)) => format!("{installed} installed, {coming} {state}"),
        (Some(installed), None) => format!("{installed} installed"),
        (None, Some(coming)) => format!("none installed, {coming} {state}"),
        (None, None) => "none installed".to_string(),
    };
    Some(format!("{words} (spec.ref.semver {})", range.semver))
}

/// The version a tag names: a semantic version, with or without a leading `v`.
pub fn tag_version(tag: &str) -> Option<Version> {
    let bare = tag.strip_prefix('v').unwrap_or(tag);
    Version::parse(bare).ok()
}

/// One alternative of a range in Flux's syntax, in the `semver` crate's.
fn translate(alternative: &str) -> Result<String, String> {
    if let Some((low, high)) = hyphen_range(alternative) {
        return Ok(format!(
            ">={}, <={}",
            strip_v(low.trim()),
            strip_v(high.trim())
        ));
    }
    let mut comparators: Vec<String> = Vec::new();
    let mut pending_op: Option<&str> = None;
    for token in alternative
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
    {
        if token.starts_with("!=") {
            return Err("`!=` is not supported".into());
        }
        let op_len = token
            .find(|c: char| !matches!(c, '=' | '>' | '<' | '~' | '^'))
            .unwrap_or(token.len());
        let (op, version) = token.split_at(op_len);
        let op = match (pending_op.take(), op) {
            (Some(_), op) if !op.is_empty() => {
                return Err(format!("two operators before {token:?}"));
            }
            (Some(pending), _) => pending,
            (None, op) => op,
        };
        if version.is_empty() {
            pending_op = Some(op);
            continue;
        }
        let version = strip_v(version);
        let op = match op {
            // A bare version is that version only (Flux), not Cargo's caret.
            "" if is_wildcard(version) => "",
            "" => "=",
            // Masterminds' `~>` and `=>` are not spelt so in Cargo.
            "==" => "=",
            "~>" | "~=" => "~",
            "=>" => ">=",
            "=<" => "<=",
            op => op,
        };
        comparators.push(format!("{op}{version}"));
    }
    if let Some(op) = pending_op {
        return Err(format!("{op:?} is followed by no version"));
    }
    if comparators.is_empty() {
        return Err("an alternative is empty".into());
    }
    Ok(comparators.join(", "))
}

/// `A - B` (spaces around the hyphen), as its two ends.
fn hyphen_range(alternative: &str) -> Option<(&str, &str)> {
    let (low, high) = alternative.split_once(" - ")?;
    (!low.trim().is_empty() && !high.trim().is_empty()).then_some((low, high))
}

fn strip_v(version: &str) -> &str {
    version
        .strip_prefix('v')
        .or_else(|| version.strip_prefix('V'))
        .unwrap_or(version)
}

fn is_wildcard(version: &str) -> bool {
    version
        .split('.')
        .any(|part| matches!(part, "x" | "X" | "*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAGS: &[&str] = &["1.0.0", "1.4.2", "2.0.0", "1.5.0-rc.1", "latest"];

    fn choose(range: &str, tags: &[&str]) -> Result<String, String> {
        VersionRange::parse(range, None)
            .map_err(|e| e.to_string())?
            .choose("registry.example/app", tags.iter().copied())
            .map(|c| c.tag)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_highest_version_in_range_wins() {
        assert_eq!(choose(">=1.0.0 <2.0.0", TAGS).unwrap(), "1.4.2");
        assert_eq!(choose(">=1.0.0, <2.0.0", TAGS).unwrap(), "1.4.2");
        assert_eq!(choose(">= 1.0.0 < 2.0.0", TAGS).unwrap(), "1.4.2");
        assert_eq!(choose("*", TAGS).unwrap(), "2.0.0");
        assert_eq!(choose(">=1.0.0", TAGS).unwrap(), "2.0.0");
    }

    #[test]
    fn flux_forms_are_accepted() {
        let tags = [
            "1.2.0", "1.2.9", "1.3.1", "1.4.0", "1.4.7", "1.5.0", "2.1.0", "0.9.0",
        ];
        assert_eq!(choose("1.x", &tags).unwrap(), "1.5.0");
        assert_eq!(choose("1.*", &tags).unwrap(), "1.5.0");
        assert_eq!(choose("1.4.x", &tags).unwrap(), "1.4.7");
        assert_eq!(choose("~1.4", &tags).unwrap(), "1.4.7");
        assert_eq!(choose("~1.4.0", &tags).unwrap(), "1.4.7");
        assert_eq!(choose("^1.2", &tags).unwrap(), "1.5.0");
        assert_eq!(choose("^0.9", &tags).unwrap(), "0.9.0");
        // A bare version is that version only, not Cargo's `^1.2.0`.
        assert_eq!(choose("1.2.0", &tags).unwrap(), "1.2.0");
        assert_eq!(choose("v1.3.1", &tags).unwrap(), "1.3.1");
        assert_eq!(choose("1.2", &tags).unwrap(), "1.2.9");
        assert_eq!(choose("1.2.0 - 1.4.0", &tags).unwrap(), "1.4.0");
        assert_eq!(choose("~1.2 || ^2", &tags).unwrap(), "2.1.0");
        assert_eq!(choose("<1.0.0 || 1.3.x", &tags).unwrap(), "1.3.1");
        assert_eq!(choose("=> 1.4.0, =< 1.4.7", &tags).unwrap(), "1.4.7");
    }

    #[test]
    fn pre_releases_count_only_when_the_range_names_one() {
        let tags = ["1.4.2", "1.5.0-rc.1", "1.5.0-rc.2", "2.0.0-beta.1"];
        assert_eq!(choose(">=1.0.0 <2.0.0", &tags).unwrap(), "1.4.2");
        assert_eq!(choose("^1", &tags).unwrap(), "1.4.2");
        // 2.0.0's pre-releases come before 2.0.0: `<2.0.0-0` leaves them out.
        assert_eq!(choose(">=1.0.0-0 <2.0.0", &tags).unwrap(), "2.0.0-beta.1");
        assert_eq!(choose(">=1.0.0-0 <2.0.0-0", &tags).unwrap(), "1.5.0-rc.2");
        assert_eq!(
            choose(">=1.5.0-rc.1 <2.0.0-0", &tags).unwrap(),
            "1.5.0-rc.2"
        );
        // A release beats its own pre-releases.
        assert_eq!(
            choose(">=1.0.0-0", &["1.5.0-rc.1", "1.5.0"]).unwrap(),
            "1.5.0"
        );
    }

    #[test]
    fn tags_with_v_count_and_lose_ties_to_tags_without() {
        assert_eq!(
            choose("^1", &["v1.2.0", "v1.10.0", "1.9.9"]).unwrap(),
            "v1.10.0"
        );
        assert_eq!(choose("^1", &["v1.2.0", "1.2.0"]).unwrap(), "1.2.0");
        assert_eq!(choose("^1", &["1.2.0", "v1.2.0"]).unwrap(), "1.2.0");
    }

    #[test]
    fn tags_that_are_not_versions_are_ignored() {
        let tags = [
            "latest", "main", "1.4", "1.4.2-", "sha-abc", "01.2.3", "1.3.0",
        ];
        assert_eq!(choose("*", &tags).unwrap(), "1.3.0");
    }

    #[test]
    fn no_match_names_the_range_and_the_highest_tags() {
        assert_eq!(
            choose(">=3.0.0", TAGS).unwrap_err(),
            "no tag of registry.example/app matches >=3.0.0; highest tags seen: 2.0.0, 1.5.0-rc.1, 1.4.2, 1.0.0"
        );
        let many: Vec<String> = (0..100).map(|i| format!("1.{i}.0")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            choose("^2", &many).unwrap_err(),
            "no tag of registry.example/app matches ^2; highest tags seen: 1.99.0, 1.98.0, 1.97.0, 1.96.0, 1.95.0"
        );
        assert_eq!(
            choose("^1", &["latest", "main"]).unwrap_err(),
            "no tag of registry.example/app matches ^1; no tag is a semantic version; tags seen: latest, main"
        );
        assert_eq!(
            choose("^1", &[]).unwrap_err(),
            "no tag of registry.example/app matches ^1; the repository has no tags"
        );
    }

    #[test]
    fn the_filter_is_applied_first() {
        let range = VersionRange::parse("*", Some(r"^1\.4\.")).unwrap();
        let tags = ["1.4.2", "1.4.3", "1.5.0"];
        assert_eq!(range.choose("r", tags).unwrap().tag, "1.4.3");
        let range = VersionRange::parse("*", Some("^3")).unwrap();
        assert_eq!(
            range.choose("r", tags).unwrap_err().to_string(),
            "no tag of r matches * (of the tags matching \"^3\"); highest tags seen: 1.5.0, 1.4.3, 1.4.2"
        );
    }

    #[test]
    fn the_version_line_says_what_is_installed_and_what_waits() {
        use gantry_api::{Bundle, BundlePhase, BundleStatus, HistoryApproval, HistoryEntry};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let pinned = |c: char| format!("r/app@sha256:{}", c.to_string().repeat(64));
        let entry = |c: char, tag: &str| HistoryEntry {
            image: pinned(c),
            digest: format!("sha256:{}", c.to_string().repeat(64)),
            tag: Some(tag.into()),
            installed_at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            approval: HistoryApproval::Manual,
            approved_at: None,
            approval_reason: None,
            approved_by: None,
        };
        let mut bundle = Bundle::new("app", Default::default());
        bundle.spec.image = "r/app".into();
        assert_eq!(version_line(&bundle), None);
        bundle.spec.r#ref = Some(gantry_api::VersionRef {
            semver: "^1".into(),
            semver_filter: None,
        });
        assert_eq!(
            version_line(&bundle).unwrap(),
            "none installed (spec.ref.semver ^1)"
        );
        bundle.status = Some(BundleStatus {
            phase: Some(BundlePhase::AwaitingApproval),
            resolved_image: Some(pinned('b')),
            resolved_tag: Some("1.5.0".into()),
            installed_image: Some(pinned('a')),
            history: vec![entry('a', "1.4.2")],
            ..Default::default()
        });
        assert_eq!(
            version_line(&bundle).unwrap(),
            "1.4.2 installed, 1.5.0 waiting for approval (spec.ref.semver ^1)"
        );
        let status = bundle.status.as_mut().unwrap();
        status.phase = Some(BundlePhase::Installed);
        status.installed_image = Some(pinned('b'));
        status.history.insert(0, entry('b', "1.5.0"));
        assert_eq!(
            version_line(&bundle).unwrap(),
            "1.5.0 installed (spec.ref.semver ^1)"
        );
    }

    #[test]
    fn invalid_ranges_and_filters_name_the_field() {
        for range in ["", "  ", ">=", "foo", ">=1.0.0 !=1.2.0", "||", ">= >= 1"] {
            let error = VersionRange::parse(range, None).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("spec.ref.semver {range:?} is not a version range")),
                "{range:?}: {error}"
            );
        }
        let error = VersionRange::parse("*", Some("(")).unwrap_err().to_string();
        assert!(
            error.starts_with("spec.ref.semverFilter \"(\" is not a regular expression"),
            "{error}"
        );
    }
}
