//! Durations as Gantry reads and writes them, in the API and in every flag: Go's grammar
//! (`time.ParseDuration`, what Kubernetes and the CRD schema use), a sequence of decimal numbers
//! each with an optional fraction and a unit (`1h30m`, `2.5s`, `250ms`), `0` alone for zero.
//! Unlike Go, a sign is refused: no Gantry duration can be negative.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const UNITS: &str = "ns, us, µs, ms, s, m, h";

/// A [`Duration`] that reads and prints as a Go duration. `Display` prints the shortest form
/// that reads back: `1h30m`, `1m30s`, `1.5s`, `250ms`, `0s`; a precision keeps that many
/// decimals of a second (`{:.0}` prints whole seconds, as elapsed times are reported).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub Duration);

/// What is wrong with a duration's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationProblem {
    Empty,
    Signed,
    MissingNumber,
    MissingUnit,
    UnknownUnit,
    TooLarge,
    Zero,
}

/// A text that is not a Go duration (or, for [`parse_nonzero`], a zero one).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {}", problem_text(*.problem))]
pub struct DurationError {
    pub text: String,
    pub problem: DurationProblem,
}

fn problem_text(problem: DurationProblem) -> String {
    let what = match problem {
        DurationProblem::Zero => return "it must be more than zero".to_string(),
        DurationProblem::TooLarge => return "it is too large".to_string(),
        DurationProblem::Empty => "it is empty",
        DurationProblem::Signed => "a duration has no sign",
        DurationProblem::MissingNumber => "a unit without a number",
        DurationProblem::MissingUnit => "a number without a unit",
        DurationProblem::UnknownUnit => "an unknown unit",
    };
    format!("{what}; write numbers each followed by a unit among {UNITS} (e.g. 1h30m, 2.5s, 250ms)")
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, DurationError> {
        let fail = |problem| DurationError {
            text: text.to_string(),
            problem,
        };
        match text {
            "" => return Err(fail(DurationProblem::Empty)),
            "0" => return Ok(Self(Duration::ZERO)),
            _ if text.starts_with(['+', '-']) => return Err(fail(DurationProblem::Signed)),
            _ => {}
        }
        let mut nanos = 0u128;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (whole, after) = rest.split_at(digits(rest));
            let (fraction, after) = match after.strip_prefix('.') {
                Some(after) => after.split_at(digits(after)),
                None => ("", after),
            };
            if whole.is_empty() && fraction.is_empty() {
                return Err(fail(DurationProblem::MissingNumber));
            }
            let unit_len = after
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_len);
            if unit.is_empty() {
                return Err(fail(DurationProblem::MissingUnit));
            }
            let scale = unit_nanos(unit).ok_or_else(|| fail(DurationProblem::UnknownUnit))?;
            let too_large = || fail(DurationProblem::TooLarge);
            let whole: u128 = match whole {
                "" => 0,
                digits => digits.parse().map_err(|_| too_large())?,
            };
            // Digits past a nanosecond of the largest unit change nothing: Go drops them too.
            let fraction = &fraction[..fraction.len().min(13)];
            let fraction_nanos = match fraction {
                "" => 0,
                digits => {
                    digits.parse::<u128>().unwrap_or(0) * scale / 10u128.pow(digits.len() as u32)
                }
            };
            nanos = whole
                .checked_mul(scale)
                .and_then(|n| n.checked_add(fraction_nanos))
                .and_then(|n| n.checked_add(nanos))
                .ok_or_else(too_large)?;
            rest = after;
        }
        let seconds =
            u64::try_from(nanos / 1_000_000_000).map_err(|_| fail(DurationProblem::TooLarge))?;
        Ok(Self(Duration::new(seconds, (nanos % 1_000_000_000) as u32)))
    }
}

/// `value` with `digits` decimals, trailing zeros (and a bare point) dropped.
fn decimal(out: &mut fmt::Formatter<'_>, value: u64, fraction: u64, digits: usize) -> fmt::Result {
    write!(out, "{value}")?;
    if fraction > 0 {
        let text = format!("{fraction:0digits$}");
        write!(out, ".{}", text.trim_end_matches('0'))?;
    }
    Ok(())
}

impl fmt::Display for GoDuration {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (seconds, mut nanos) = (self.0.as_secs(), u64::from(self.0.subsec_nanos()));
        if let Some(digits) = out.precision() {
            nanos -= nanos % 10u64.pow(9 - digits.min(9) as u32);
        }
        if seconds == 0 && nanos > 0 {
            return match nanos {
                1_000_000.. => {
                    decimal(out, nanos / 1_000_000, nanos % 1_000_000, 6).and(out.write_str("ms"))
                }
                1_000.. => decimal(out, nanos / 1_000, nanos % 1_000, 3).and(out.write_str("µs")),
                _ => write!(out, "{nanos}ns"),
            };
        }
        let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
        if h > 0 {
            write!(out, "{h}h")?;
        }
        if m > 0 {
            write!(out, "{m}m")?;
        }
        if s > 0 || nanos > 0 || seconds == 0 {
            decimal(out, s, nanos, 9)?;
            out.write_str("s")?;
        }
        Ok(())
    }
}

impl From<Duration> for GoDuration {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl From<GoDuration> for Duration {
    fn from(duration: GoDuration) -> Self {
        duration.0
    }
}

/// A Go duration, for clap: `#[arg(value_parser = gantry_rules::duration::parse)]`.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    text.parse::<GoDuration>().map(Duration::from)
}

/// A Go duration of more than zero, for the flags where zero would mean "never" or "at once".
pub fn parse_nonzero(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        Duration::ZERO => Err(DurationError {
            text: text.to_string(),
            problem: DurationProblem::Zero,
        }),
        duration => Ok(duration),
    }
}

/// kubectl's rule for `--request-timeout`, and only for it: a Go duration, or a bare number of
/// seconds (`30`).
pub fn parse_or_seconds(text: &str) -> Result<Duration, DurationError> {
    match text.parse::<u64>() {
        Ok(seconds) => Ok(Duration::from_secs(seconds)),
        Err(_) => parse(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> DurationProblem {
        text.parse::<GoDuration>().unwrap_err().problem
    }

    #[test]
    fn go_durations_parse() {
        for (text, expected) in [
            ("90s", Duration::from_secs(90)),
            ("1h30m", Duration::from_secs(5400)),
            ("2.5s", Duration::from_millis(2500)),
            ("250ms", Duration::from_millis(250)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("1m30s", Duration::from_secs(90)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("1.5h", Duration::from_secs(5400)),
            ("3us", Duration::from_micros(3)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            ("1h1ms", Duration::from_millis(3_600_001)),
            ("0.1234567890123s", Duration::from_nanos(123_456_789)),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn what_is_not_a_go_duration_is_refused_saying_why() {
        for (text, expected) in [
            ("", DurationProblem::Empty),
            ("5", DurationProblem::MissingUnit),
            ("30 ", DurationProblem::UnknownUnit),
            ("s", DurationProblem::MissingNumber),
            ("5d", DurationProblem::UnknownUnit),
            ("1.2.3s", DurationProblem::MissingUnit),
            ("-1s", DurationProblem::Signed),
            ("+1s", DurationProblem::Signed),
            ("1h30", DurationProblem::MissingUnit),
            ("99999999999999999999h", DurationProblem::TooLarge),
        ] {
            assert_eq!(problem(text), expected, "{text:?}");
        }
        let error = "5".parse::<GoDuration>().unwrap_err().to_string();
        assert_eq!(
            error,
            "invalid duration \"5\": a number without a unit; write numbers each followed by a unit among ns, us, µs, ms, s, m, h (e.g. 1h30m, 2.5s, 250ms)"
        );
    }

    #[test]
    fn durations_print_in_the_shortest_form_that_reads_back() {
        for (duration, expected) in [
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(3601), "1h1s"),
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_millis(90_100), "1m30.1s"),
            (Duration::new(7200, 1), "2h0.000000001s"),
        ] {
            let text = GoDuration(duration).to_string();
            assert_eq!(text, expected);
            assert_eq!(parse(&text), Ok(duration), "{text} reads back");
        }
        let elapsed = GoDuration(Duration::from_millis(65_750));
        assert_eq!(
            format!("{elapsed:.0} {elapsed:.1} {elapsed:.3}"),
            "1m5s 1m5.7s 1m5.75s"
        );
        assert_eq!(
            format!("{:.0}", GoDuration(Duration::from_millis(400))),
            "0s"
        );
    }

    #[test]
    fn flags_refuse_zero_where_asked_and_kubectl_takes_bare_seconds() {
        assert_eq!(parse_nonzero("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(
            parse_nonzero("0s").unwrap_err().to_string(),
            "invalid duration \"0s\": it must be more than zero"
        );
        assert_eq!(parse_or_seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_or_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(parse_or_seconds("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_or_seconds("soon").is_err());
        assert!(parse_or_seconds("5x").is_err());
        assert_eq!(
            parse("5").unwrap_err().problem,
            DurationProblem::MissingUnit
        );
    }
}
