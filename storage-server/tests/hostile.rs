//! The storage server binary under hostile clients, over real HTTP: request heads, uploads and
//! downloads trickled or stalled (slowloris) are cut off and give back their connection, file
//! and memory; many concurrent uploads of one bundle leave exactly one complete tarball; a full
//! volume (a small tmpfs mounted by the test) is a clear `507` that keeps what was stored.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use http::{Method, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Open file descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Records the highest resident memory of a process until dropped.
struct PeakRss {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl PeakRss {
    fn watch(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        PeakRss { peak, stop }
    }

    fn kib(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits until the server holds no more descriptors than `baseline` (every hostile connection
/// and the files it had open are gone).
async fn wait_released(server: &Server, baseline: usize, within: Duration) {
    let pid = server.pid();
    gantry_tests::wait_until(
        &format!("gantry-storage to close the hostile connections (baseline {baseline} fds)"),
        within,
        || async move { (fds(pid) <= baseline).then_some(()) },
    )
    .await;
}

/// Reads everything until the peer closes (or resets) the connection.
async fn read_to_close(reader: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status code and body of a raw HTTP/1.1 answer.
fn parse_answer(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

/// Sends `head` and then `body`, `chunk` bytes every `pause` (stopping after `stop_after`
/// bytes if given, and holding the connection open), while reading the answer; returns the
/// answer and when the server closed the connection.
async fn trickle(
    addr: std::net::SocketAddr,
    head: String,
    body: Vec<u8>,
    chunk: usize,
    pause: Duration,
    stop_after: Option<usize>,
) -> (Option<(u16, String)>, Duration) {
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.expect("connecting");
    let (mut reader, mut writer) = stream.into_split();
    let send = async move {
        if writer.write_all(head.as_bytes()).await.is_err() {
            return std::future::pending().await;
        }
        let end = stop_after.unwrap_or(body.len()).min(body.len());
        for piece in body[..end].chunks(chunk.max(1)) {
            tokio::time::sleep(pause).await;
            if writer.write_all(piece).await.is_err() {
                break;
            }
        }
        // Keep the connection open without sending more: the server must end it.
        std::future::pending::<()>().await;
        drop(writer);
    };
    let answer = tokio::select! {
        answer = read_to_close(&mut reader) => answer,
        () = send => unreachable!(),
    };
    (parse_answer(&answer), started.elapsed())
}

#[tokio::test]
async fn request_heads_sent_slowly_or_never_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--header-read-timeout", "2s"]);
    server.wait_ready().await;
    let baseline = fds(server.pid());
    let rss_before = rss_kib(server.pid());
    let peak = PeakRss::watch(server.pid());

    let mut clients = Vec::new();
    for i in 0..60 {
        // A request line, then header lines one byte every 100 ms, never the blank line; or
        // a connection that never sends anything.
        let head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_string();
        let headers = "X-Slow: 1\r\n".repeat(1000).into_bytes();
        let stop = (i % 3 == 0).then_some(0);
        let head = if stop.is_some() { String::new() } else { head };
        clients.push(tokio::spawn(trickle(
            server.addr,
            head,
            headers,
            1,
            Duration::from_millis(100),
            stop,
        )));
    }
    // Meanwhile the server answers everyone else at once.
    let healthz = server.get("/healthz").await;
    assert_eq!(healthz.status, StatusCode::OK);

    for client in clients {
        let (answer, took) = tokio::time::timeout(Duration::from_secs(30), client)
            .await
            .expect("a slow request head was never cut off")
            .unwrap();
        assert!(
            answer.as_ref().is_none_or(|(status, _)| *status != 200),
            "a request with an unfinished head was answered: {answer:?}"
        );
        assert!(
            took < Duration::from_secs(8),
            "cut off after {took:?}, the timeout is 2 s"
        );
    }
    wait_released(&server, baseline, Duration::from_secs(10)).await;
    let grown = peak.kib().saturating_sub(rss_before);
    assert!(grown < 32 * 1024, "memory grew by {grown} KiB");
}

#[tokio::test]
async fn trickling_and_stalled_uploads_are_cut_off_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--idle-timeout", "2s", "--min-transfer-rate", "65536"],
    );
    server.wait_ready().await;
    let stored = content(100_000, 1);
    let stored_path = tarball_path("demo", &stored);
    assert_eq!(
        server.put(&stored_path, &stored).await.status,
        StatusCode::CREATED
    );
    let baseline = fds(server.pid());
    let rss_before = rss_kib(server.pid());
    let peak = PeakRss::watch(server.pid());

    let mut trickling = Vec::new();
    let mut stalled = Vec::new();
    for i in 0..40u8 {
        let data = content(200_000, 10 + i);
        let head = format!(
            "PUT {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
            tarball_path("demo", &data),
            data.len()
        );
        if i % 2 == 0 {
            // 20 bytes a second, never idle for long: only the minimum rate catches it.
            trickling.push(tokio::spawn(trickle(
                server.addr,
                head,
                data,
                1,
                Duration::from_millis(50),
                None,
            )));
        } else {
            // A quick start, then nothing.
            stalled.push(tokio::spawn(trickle(
                server.addr,
                head,
                data,
                50_000,
                Duration::ZERO,
                Some(100_000),
            )));
        }
    }
    // Another upload into the same bundle goes through meanwhile.
    let other = content(300_000, 2);
    let other_path = tarball_path("demo", &other);
    assert_eq!(
        server.put(&other_path, &other).await.status,
        StatusCode::CREATED
    );

    for (clients, says) in [
        (trickling, "bytes a second"),
        (stalled, "no data for 2 seconds"),
    ] {
        for client in clients {
            let (answer, took) = tokio::time::timeout(Duration::from_secs(30), client)
                .await
                .expect("a slow upload was never cut off")
                .unwrap();
            let (status, body) = answer.expect("an answer before the connection closed");
            assert_eq!(status, 408, "{body}");
            assert!(body.contains(says), "{body}");
            assert!(took < Duration::from_secs(10), "cut off after {took:?}");
        }
    }
    wait_released(&server, baseline, Duration::from_secs(10)).await;
    let grown = peak.kib().saturating_sub(rss_before);
    assert!(grown < 48 * 1024, "memory grew by {grown} KiB");

    // Nothing of the cut-off uploads is left or listed; what was stored is still served.
    let mut expected = vec![
        "demo".to_string(),
        format!("demo/{}.tar.gz", sha256_hex(&stored)),
        format!("demo/{}.tar.gz", sha256_hex(&other)),
    ];
    expected.sort();
    assert_eq!(tree(dir.path()), expected);
    let get = server.get(&stored_path).await;
    assert!(get.status == StatusCode::OK && get.body[..] == stored[..]);
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(2.0)
    );
}

/// A GET of `path` from a client whose receive buffer is small, reading `chunk` bytes every
/// `pause` (or nothing after its first read when `pause` is `None`) until `drain` is set, then
/// as fast as it can; the bytes received before the server closed the connection.
async fn slow_download(
    addr: std::net::SocketAddr,
    path: String,
    chunk: usize,
    pause: Option<Duration>,
    drain: Arc<AtomicBool>,
) -> usize {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.expect("connecting");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut total = 0;
    let mut buf = vec![0u8; chunk];
    loop {
        if !drain.load(Ordering::Relaxed) {
            match pause {
                Some(pause) => tokio::time::sleep(pause).await,
                None if total > 0 => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                None => {}
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

#[tokio::test]
async fn downloads_left_unread_or_read_slowly_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    // A 12 MiB tarball must go within 2 s + 12 MiB / 4 MiB/s = 5 s.
    let server = Server::start(
        dir.path(),
        &["--idle-timeout", "2s", "--min-transfer-rate", "4194304"],
    );
    server.wait_ready().await;
    let data = content(12 << 20, 3);
    let path = tarball_path("demo", &data);
    let (tx, body) = channel_body();
    let sender = {
        let data = data.clone();
        tokio::spawn(async move {
            for chunk in data.chunks(1 << 20) {
                tx.send(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
            }
        })
    };
    let put = server.request(Method::PUT, &path, &[], body).await;
    sender.await.unwrap();
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.text());
    let baseline = fds(server.pid());
    let rss_before = rss_kib(server.pid());
    let peak = PeakRss::watch(server.pid());

    let drain = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..16 {
        // Half stop reading after their first bytes; half read 4 KiB every 10 ms (400 KB/s).
        let pause = (i % 2 == 1).then_some(Duration::from_millis(10));
        clients.push(tokio::spawn(slow_download(
            server.addr,
            path.clone(),
            4096,
            pause,
            drain.clone(),
        )));
    }
    // Every download holds a connection and the open tarball until the server cuts it off.
    let pid = server.pid();
    gantry_tests::wait_until(
        "the downloads to start",
        Duration::from_secs(10),
        || async { (fds(pid) >= baseline + 16).then_some(()) },
    )
    .await;
    wait_released(&server, baseline, Duration::from_secs(30)).await;
    let released = started.elapsed();
    assert!(
        released < Duration::from_secs(15),
        "released after {released:?}"
    );
    // Now read what the kernel still holds: no client got the whole tarball.
    drain.store(true, Ordering::Relaxed);
    for client in clients {
        let received = tokio::time::timeout(Duration::from_secs(60), client)
            .await
            .expect("a cut-off download never ended")
            .unwrap();
        assert!(
            received < data.len(),
            "a cut-off download received all {received} bytes"
        );
    }
    let grown = peak.kib().saturating_sub(rss_before);
    assert!(grown < 48 * 1024, "memory grew by {grown} KiB");

    // A client that reads at full speed gets it all.
    let get = server.get(&path).await;
    assert!(get.status == StatusCode::OK && get.body[..] == data[..]);
}

/// Sends a PUT with raw bytes, `chunk` at a time, while reading the answer: the answer, if
/// the server sent one. Dropping the connection after `abort_after` bytes sends no more.
async fn raw_put(
    addr: std::net::SocketAddr,
    path: &str,
    body: &[u8],
    chunk: usize,
    abort_after: Option<usize>,
) -> Option<(u16, String)> {
    let stream = TcpStream::connect(addr).await.expect("connecting");
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let body = body.to_vec();
    let send = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let end = abort_after.unwrap_or(body.len());
        for piece in body[..end].chunks(chunk) {
            writer.write_all(piece).await?;
            tokio::task::yield_now().await;
        }
        Ok::<_, std::io::Error>(writer)
    });
    if abort_after.is_some() {
        // Half a body, then the client goes away.
        drop(send.await);
        return None;
    }
    let answer = read_to_close(&mut reader).await;
    drop(send.await);
    parse_answer(&answer)
}

#[tokio::test]
async fn concurrent_uploads_of_one_bundle_leave_one_complete_tarball() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.wait_ready().await;
    let data = content((1 << 20) + 7, 9);
    let path = tarball_path("demo", &data);
    let others: Vec<Vec<u8>> = (0..6u8)
        .map(|i| content(200_000 + i as usize, 40 + i))
        .collect();

    #[derive(Debug, PartialEq)]
    enum Kind {
        Honest,
        Corrupt,
        Aborted,
        Other,
    }
    let mut uploads = Vec::new();
    for i in 0..36usize {
        let (kind, body, target, chunk) = match i % 6 {
            0 | 1 => (Kind::Honest, data.clone(), path.clone(), 1 + i * 997),
            2 => {
                // The same length with one byte changed: its sha256 is not the name's.
                let mut bad = data.clone();
                bad[i * 1000] ^= 0x55;
                (Kind::Corrupt, bad, path.clone(), 65_536)
            }
            3 => (Kind::Aborted, data.clone(), path.clone(), 4096),
            _ => {
                // Each of the other tarballs twice (i % 6 is 4 or 5, i / 6 is 0..6).
                let other = others[i / 6].clone();
                let target = tarball_path("demo", &other);
                (Kind::Other, other, target, 8192)
            }
        };
        let addr = server.addr;
        uploads.push(tokio::spawn(async move {
            let abort = (kind == Kind::Aborted).then_some(body.len() / 2);
            let answer = raw_put(addr, &target, &body, chunk, abort).await;
            (kind, answer)
        }));
    }
    let mut created = 0;
    for upload in uploads {
        let (kind, answer) = tokio::time::timeout(Duration::from_secs(60), upload)
            .await
            .expect("an upload never finished")
            .unwrap();
        match kind {
            Kind::Honest => {
                let (status, body) = answer.expect("an answer");
                assert!(status == 201 || status == 200, "{status} {body}");
                created += usize::from(status == 201);
            }
            Kind::Corrupt => {
                let (status, body) = answer.expect("an answer");
                assert_eq!(status, 400, "{body}");
                assert!(body.contains("sha256"), "{body}");
            }
            Kind::Aborted => assert!(answer.is_none()),
            Kind::Other => {
                let (status, body) = answer.expect("an answer");
                assert!(status == 201 || status == 200, "{status} {body}");
            }
        }
    }
    assert_eq!(
        created, 1,
        "exactly one upload of the same digest creates it"
    );

    // Once the server has noticed the aborted uploads, only complete tarballs are left.
    let mut expected: Vec<String> = std::iter::once(&data)
        .chain(others.iter())
        .map(|d| format!("demo/{}.tar.gz", sha256_hex(d)))
        .chain(std::iter::once("demo".to_string()))
        .collect();
    expected.sort();
    expected.dedup();
    let root = dir.path().to_owned();
    gantry_tests::wait_until(
        "the temporary files of aborted uploads to go",
        Duration::from_secs(10),
        || {
            let (root, expected) = (root.clone(), expected.clone());
            async move { (tree(&root) == expected).then_some(()) }
        },
    )
    .await;
    assert_eq!(tree(dir.path()), expected);
    for stored in std::iter::once(&data).chain(others.iter()) {
        let get = server.get(&tarball_path("demo", stored)).await;
        assert_eq!(get.status, StatusCode::OK);
        assert!(
            get.body[..] == stored[..],
            "stored content differs from every upload"
        );
    }
    assert_eq!(
        server.metric("gantry_storage_stored_tarballs").await,
        Some(1.0 + others.len() as f64)
    );
}

/// A tmpfs of `size` mounted for the test (the server's volume), unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("volume");
        std::fs::create_dir(&path).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&path)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a {size} tmpfs at {} failed ({status}): this test needs root",
            path.display()
        );
        Tmpfs { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_full_volume_is_a_507_that_keeps_what_was_stored() {
    let volume = Tmpfs::mount("4m");
    let server = Server::start(&volume.path, &[]);
    server.wait_ready().await;
    let rss_before = rss_kib(server.pid());
    let peak = PeakRss::watch(server.pid());

    let kept = content(1 << 20, 1);
    let kept_path = tarball_path("demo", &kept);
    assert_eq!(
        server.put(&kept_path, &kept).await.status,
        StatusCode::CREATED
    );
    let free = free_bytes(&volume.path);

    // Larger than what is left: the upload fails when the volume fills.
    let big = content(5 << 20, 2);
    let (status, body) = raw_put(server.addr, &tarball_path("demo", &big), &big, 65_536, None)
        .await
        .expect("an answer");
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("storage volume is full"), "{body}");
    server.wait_for_log("storage volume full").await;

    // Nothing partial is left or served, the space is given back, the stored tarball is intact.
    let expected = vec![
        "demo".to_string(),
        format!("demo/{}.tar.gz", sha256_hex(&kept)),
    ];
    assert_eq!(tree(&volume.path), expected);
    assert_eq!(free_bytes(&volume.path), free);
    let missing = server.get(&tarball_path("demo", &big)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let get = server.get(&kept_path).await;
    assert!(get.status == StatusCode::OK && get.body[..] == kept[..]);

    // A volume filled by something else: even a small upload gets 507, and works once there is
    // room again.
    let filler = volume.path.join("filler");
    let fill = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!fill.success(), "dd stops when the volume is full");
    let small = content(64 * 1024 + 1, 3);
    let small_path = tarball_path("other", &small);
    let (status, body) = raw_put(server.addr, &small_path, &small, 8192, None)
        .await
        .expect("an answer");
    assert_eq!(status, 507, "{body}");
    std::fs::remove_file(&filler).unwrap();
    let (status, body) = raw_put(server.addr, &small_path, &small, 8192, None)
        .await
        .expect("an answer");
    assert_eq!(status, 201, "{body}");
    let get = server.get(&small_path).await;
    assert!(get.status == StatusCode::OK && get.body[..] == small[..]);

    let grown = peak.kib().saturating_sub(rss_before);
    assert!(grown < 32 * 1024, "memory grew by {grown} KiB");
    drop(server);
}
