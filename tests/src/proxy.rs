//! A TCP proxy on loopback that a test can cut and restore: a process behind it is partitioned
//! from what it reaches through it (its open connections drop, new ones are refused).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

pub struct CuttableProxy {
    address: SocketAddr,
    open: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: JoinHandle<()>,
}

impl CuttableProxy {
    /// Forwards connections to 127.0.0.1:PORT from a new loopback port.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let open = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = {
            let open = open.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(target).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    let mut connections = connections.lock().unwrap();
                    connections.retain(|c| !c.is_finished());
                    connections.push(task.abort_handle());
                }
            })
        };
        Ok(Self {
            address,
            open,
            connections,
            accept,
        })
    }

    /// Where to connect instead of the target.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
