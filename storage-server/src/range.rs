//! `Range` header parsing (RFC 9110, section 14), single byte ranges only.

/// How to answer a request given its `Range` header and the size of the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Serve the whole content (no header, an unknown unit, invalid syntax or
    /// several ranges: RFC 9110 lets a server ignore the header in these cases).
    Full,
    /// Serve bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416: the range lies entirely past the end of the content.
    Unsatisfiable,
}

/// Parses a decimal number; a number too large for `u64` saturates, since it
/// is past the end of any file anyway.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

pub fn parse_range(header: &str, size: u64) -> RangeOutcome {
    let Some((unit, spec)) = header.split_once('=') else {
        return RangeOutcome::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeOutcome::Full;
    }
    let spec = spec.trim();
    if spec.contains(',') {
        return RangeOutcome::Full;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return RangeOutcome::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // Suffix range: the last N bytes.
        let Some(n) = number(last) else {
            return RangeOutcome::Full;
        };
        if n == 0 || size == 0 {
            return RangeOutcome::Unsatisfiable;
        }
        return RangeOutcome::Partial {
            start: size.saturating_sub(n),
            end: size - 1,
        };
    }
    let Some(start) = number(first) else {
        return RangeOutcome::Full;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match number(last) {
            Some(end) if end >= start => end,
            _ => return RangeOutcome::Full,
        }
    };
    if start >= size {
        return RangeOutcome::Unsatisfiable;
    }
    RangeOutcome::Partial {
        start,
        end: end.min(size - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::RangeOutcome::*;
    use super::*;

    #[test]
    fn ranges() {
        let cases: &[(&str, u64, RangeOutcome)] = &[
            ("bytes=0-0", 10, Partial { start: 0, end: 0 }),
            ("bytes=0-9", 10, Partial { start: 0, end: 9 }),
            ("bytes=2-5", 10, Partial { start: 2, end: 5 }),
            ("bytes=5-100", 10, Partial { start: 5, end: 9 }),
            ("bytes=5-", 10, Partial { start: 5, end: 9 }),
            ("bytes=-3", 10, Partial { start: 7, end: 9 }),
            ("bytes=-30", 10, Partial { start: 0, end: 9 }),
            ("Bytes = 1-2", 10, Partial { start: 1, end: 2 }),
            (
                "bytes=3-99999999999999999999999",
                10,
                Partial { start: 3, end: 9 },
            ),
            ("bytes=10-", 10, Unsatisfiable),
            ("bytes=10-20", 10, Unsatisfiable),
            ("bytes=99999999999999999999999-", 10, Unsatisfiable),
            ("bytes=-0", 10, Unsatisfiable),
            ("bytes=-5", 0, Unsatisfiable),
            ("bytes=0-", 0, Unsatisfiable),
            ("bytes=5-2", 10, Full),
            ("bytes=0-1,3-4", 10, Full),
            ("items=0-1", 10, Full),
            ("bytes=a-b", 10, Full),
            ("bytes=-", 10, Full),
            ("bytes=+1-2", 10, Full),
            ("bytes=1", 10, Full),
            ("", 10, Full),
        ];
        for (header, size, want) in cases {
            assert_eq!(parse_range(header, *size), *want, "{header:?} size {size}");
        }
    }
}
