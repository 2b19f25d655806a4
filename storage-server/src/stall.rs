//! A connection's write timeout. hyper has a timeout for reading a request head but none for
//! writing: a client that stops reading a download would hold its connection, its open file
//! and a buffer for as long as it keeps the socket open. [`WriteTimeout`] fails a write (or
//! flush) that cannot make progress for the given time, which makes hyper drop the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Wraps a connection; reads pass through, writes fail after `timeout` without progress.
pub struct WriteTimeout<IO> {
    io: IO,
    timeout: Duration,
    /// Armed while a write or flush is waiting for the peer; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<IO> WriteTimeout<IO> {
    pub fn new(io: IO, timeout: Duration) -> Self {
        WriteTimeout {
            io,
            timeout,
            stalled: None,
        }
    }

    /// Turns a pending write into an error once the connection has been stuck for `timeout`.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.stalled = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client read nothing for {} seconds",
                        timeout.as_secs_f64()
                    ),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.pending(cx),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteTimeout<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(result, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_flush(cx);
        this.progress(result, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.io).poll_shutdown(cx);
        this.progress(result, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_fails_the_write() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut conn = WriteTimeout::new(ours, Duration::from_secs(5));
        // Progress while the peer reads.
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            theirs.read_exact(&mut buf).await.unwrap();
            theirs // then stops reading, keeping the pipe open
        });
        conn.write_all(&[1u8; 4096]).await.unwrap();
        let _theirs = reader.await.unwrap();
        let started = tokio::time::Instant::now();
        let err = conn.write_all(&[2u8; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
            "{waited:?}"
        );
    }
}
