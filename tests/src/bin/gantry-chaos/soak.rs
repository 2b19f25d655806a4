//! The soak: resources of the long-running binaries sampled at intervals while bundles churn,
//! and a verdict on growth.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One reading of one process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    /// Tasks alive in the async runtime, where the process reports them.
    pub tasks: Option<u64>,
}

fn status_field(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads a process's RSS, open file descriptors and threads from /proc.
pub fn read(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        rss_kib: status_field(&status, "VmRSS:"),
        fds,
        threads: status_field(&status, "Threads:"),
        tasks: None,
    })
}

/// The value of an unlabelled metric in a Prometheus text exposition.
pub async fn metric(url: &str, name: &str) -> Option<u64> {
    let body = reqwest::get(url).await.ok()?.text().await.ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// A process to watch: its name, how to find its pid now, and where it reports its tasks.
pub struct Watched {
    pub name: &'static str,
    pub samples: Vec<Sample>,
}

/// Samples every `interval` until `running` clears; `pid_of` gives the current pid of each
/// watched process, `tasks_of` its runtime task count where known.
pub async fn sample_until<P, T, Fut>(
    running: &AtomicBool,
    interval: Duration,
    names: &[&'static str],
    pid_of: P,
    tasks_of: T,
) -> Vec<Watched>
where
    P: Fn(&str) -> Option<u32>,
    T: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = Option<u64>>,
{
    let start = Instant::now();
    let mut watched: Vec<Watched> = names
        .iter()
        .map(|name| Watched {
            name,
            samples: Vec::new(),
        })
        .collect();
    println!(
        "{:>6}  {:<20} {:>9} {:>5} {:>8} {:>6}",
        "time", "process", "RSS MiB", "fds", "threads", "tasks"
    );
    while running.load(Ordering::SeqCst) {
        let seconds = start.elapsed().as_secs();
        for w in &mut watched {
            let Some(mut sample) = pid_of(w.name).and_then(read) else {
                continue;
            };
            sample.tasks = tasks_of(w.name).await;
            println!(
                "{:>5}s  {:<20} {:>9.1} {:>5} {:>8} {:>6}",
                seconds,
                w.name,
                sample.rss_kib as f64 / 1024.0,
                sample.fds,
                sample.threads,
                sample.tasks.map_or("-".to_string(), |t| t.to_string())
            );
            w.samples.push(sample);
        }
        let next = start
            + interval * (start.elapsed().as_secs_f64() / interval.as_secs_f64()).ceil() as u32;
        while running.load(Ordering::SeqCst) && Instant::now() < next {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    watched
}

fn mean(values: impl Iterator<Item = u64>) -> f64 {
    let (sum, n) = values.fold((0u64, 0u64), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum as f64 / n as f64 }
}

/// Growth between the first and the last third of the samples after a warm-up quarter:
/// returns the findings (empty when flat).
pub fn growth(watched: &[Watched]) -> Vec<String> {
    let mut findings = Vec::new();
    for w in watched {
        let settled = &w.samples[w.samples.len() / 4..];
        if settled.len() < 6 {
            findings.push(format!(
                "{}: too few samples ({}) to judge",
                w.name,
                settled.len()
            ));
            continue;
        }
        let third = settled.len() / 3;
        let (first, last) = (&settled[..third], &settled[settled.len() - third..]);
        let rss = (
            mean(first.iter().map(|s| s.rss_kib)),
            mean(last.iter().map(|s| s.rss_kib)),
        );
        // Allocators keep freed memory: growth counts only beyond 20% and 8 MiB.
        if rss.1 > rss.0 * 1.2 + 8192.0 {
            findings.push(format!(
                "{}: RSS grew from {:.1} to {:.1} MiB",
                w.name,
                rss.0 / 1024.0,
                rss.1 / 1024.0
            ));
        }
        let fds = (
            first.iter().map(|s| s.fds).max().unwrap_or(0),
            last.iter().map(|s| s.fds).min().unwrap_or(0),
        );
        if fds.1 > fds.0 + 8 {
            findings.push(format!(
                "{}: open files grew from {} to {}",
                w.name, fds.0, fds.1
            ));
        }
        let tasks: Vec<(u64, u64)> = first
            .iter()
            .zip(last)
            .filter_map(|(a, b)| Some((a.tasks?, b.tasks?)))
            .collect();
        if !tasks.is_empty() {
            let (a, b) = (
                mean(tasks.iter().map(|t| t.0)),
                mean(tasks.iter().map(|t| t.1)),
            );
            if b > a * 1.5 + 20.0 {
                findings.push(format!(
                    "{}: runtime tasks grew from {a:.0} to {b:.0}",
                    w.name
                ));
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(rss: &[u64]) -> Watched {
        Watched {
            name: "p",
            samples: rss
                .iter()
                .map(|&rss_kib| Sample {
                    rss_kib,
                    fds: 10,
                    threads: 4,
                    tasks: Some(30),
                })
                .collect(),
        }
    }

    #[test]
    fn flat_curves_pass_and_growth_is_found() {
        let flat = watched(&[50_000; 16]);
        assert!(growth(&[flat]).is_empty());
        let growing: Vec<u64> = (0..16).map(|i| 40_000 + i * 4_000).collect();
        let findings = growth(&[watched(&growing)]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert!(findings[0].contains("RSS grew"), "{findings:?}");
    }
}
