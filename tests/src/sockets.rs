//! The TCP connections a process holds, read from `/proc`: how many of its sockets are
//! established to a given port. Lets a test see how a client spreads its requests over
//! connections, which no server's log records.

use std::collections::BTreeSet;
use std::fs;

/// How many of `pid`'s sockets are TCP connections established to `remote_port` (IPv4 or IPv6).
pub fn established_to(pid: u32, remote_port: u16) -> std::io::Result<usize> {
    let mut inodes = BTreeSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A descriptor closed between the listing and the read is simply not counted.
        let Ok(target) = fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok())
        {
            inodes.insert(inode);
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = match fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        count += established_in(&text, remote_port, &inodes);
    }
    Ok(count)
}

/// The rows of a `/proc/net/tcp` table in state ESTABLISHED (`01`) to `remote_port` whose
/// socket is one of `inodes`.
fn established_in(table: &str, remote_port: u16, inodes: &BTreeSet<u64>) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                return false;
            };
            let port = remote
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            *state == "01"
                && port == Some(remote_port)
                && inode.parse::<u64>().is_ok_and(|i| inodes.contains(&i))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn counts_this_process_s_connections_to_a_port() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pid = std::process::id();
        assert_eq!(established_to(pid, port).unwrap(), 0);
        let streams: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        // The accepted ends are this process's too, but their remote port is the client's.
        let accepted: Vec<TcpStream> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        assert_eq!(established_to(pid, port).unwrap(), 3);
        drop(streams);
        drop(accepted);
        assert_eq!(established_to(pid, port).unwrap(), 0);
    }

    #[test]
    fn reads_remote_port_state_and_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 0100007F:1A0B 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 20 4 30 10 -1
   1: 0100007F:9C41 0100007F:1A0B 06 00000000:00000000 00:00000000 00000000     0        0 112 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:9C42 0100007F:1A0C 01 00000000:00000000 00:00000000 00000000     0        0 113 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:9C43 0100007F:1A0B 01 00000000:00000000 00:00000000 00000000     0        0 114 1 0000000000000000 20 4 30 10 -1
";
        let inodes: BTreeSet<u64> = [111, 112, 113].into();
        // 111: established to 0x1A0B; 112: TIME_WAIT; 113: another port; 114: another process.
        assert_eq!(established_in(table, 0x1A0B, &inodes), 1);
    }
}
