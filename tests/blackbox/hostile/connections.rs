//! Hostile sockets against the real binary: a client with no credential
//! that opens connections and sends nothing, or trickles a header a byte at
//! a time, or floods the listener with hundreds of idle sockets. The daemon
//! closes idle and slow connections after `server.header_timeout_secs`,
//! refuses connections over its caps at accept with a `503` (counted), keeps
//! its descriptor count bounded, goes on serving other peers, and its
//! watchdog keeps pinging systemd throughout.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram as StdDatagram;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UnixDatagram};

use crate::daemon::Swarmd;
use crate::harness::PATIENCE;

/// The peer cap of the flood test, and how many sockets the flood opens.
const PER_PEER: usize = 24;
const FLOOD: usize = 300;

fn addr(sw: &Swarmd) -> SocketAddr {
    sw.base.trim_start_matches("http://").parse().unwrap()
}

/// Open descriptors of the daemon's process.
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Reads until the peer closes (`Ok` with what it sent) or `wait` passes.
async fn read_to_close(stream: &mut TcpStream, wait: Duration) -> Result<Vec<u8>, Vec<u8>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(seen),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return Err(seen),
        }
    }
}

/// A connection to the daemon from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(to).await
}

/// A metric's value from a scrape (summed over its label sets matching `with`).
fn metric(scrape: &str, name: &str, with: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn idle_and_trickling_connections_are_closed_after_the_header_timeout() {
    let sw = Swarmd::new("")
        .env("SWARMD_SERVER__HEADER_TIMEOUT_SECS", "1")
        .start()
        .await;
    let to = addr(&sw);

    // Silent from the start.
    let mut idle = TcpStream::connect(to).await.unwrap();
    let started = Instant::now();
    let closed = read_to_close(&mut idle, Duration::from_secs(10)).await;
    assert!(
        closed.is_ok(),
        "an idle connection is still open after 10 s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // A header that trickles in one byte every 200 ms never completes.
    let mut slow = TcpStream::connect(to).await.unwrap();
    let started = Instant::now();
    let header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut = false;
    for byte in header {
        if slow.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if started.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    let closed = cut
        || read_to_close(&mut slow, Duration::from_secs(3))
            .await
            .is_ok();
    assert!(closed, "a trickling header kept its connection for 8 s");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    // A keep-alive connection that answered once is closed once idle.
    let mut kept = TcpStream::connect(to).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answered = read_to_close(&mut kept, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(answered.as_ref().unwrap_or_else(|seen| seen)).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        answered.is_ok(),
        "an idle keep-alive connection stayed open"
    );
}

#[tokio::test]
async fn a_socket_flood_is_capped_and_the_daemon_stays_healthy() {
    let sw = Swarmd::new("")
        .env("SWARMD_SERVER__HEADER_TIMEOUT_SECS", "60")
        .env(
            "SWARMD_SERVER__MAX_CONNECTIONS_PER_PEER",
            &PER_PEER.to_string(),
        );
    let notify = sw.dir().join("notify.sock");
    let socket = UnixDatagram::from_std({
        let socket = StdDatagram::bind(&notify).unwrap();
        socket.set_nonblocking(true).unwrap();
        socket
    })
    .unwrap();
    let sw = sw
        .env("NOTIFY_SOCKET", notify.to_str().unwrap())
        .env("WATCHDOG_USEC", "1000000")
        .start()
        .await;
    let to = addr(&sw);
    let pid = sw.pid();
    let before = fds(pid);

    // The flood: idle sockets from 127.0.0.1, none of them sending a byte.
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        flood.push(TcpStream::connect(to).await.unwrap());
    }
    // Those over the cap were told why and closed at once.
    let mut refused = 0;
    for stream in flood.iter_mut().skip(PER_PEER) {
        let closed = read_to_close(stream, Duration::from_secs(5)).await;
        let text =
            String::from_utf8_lossy(&closed.expect("a refused socket stays open")).into_owned();
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("too_many_connections"), "{text}");
        refused += 1;
    }
    assert_eq!(refused, FLOOD - PER_PEER);
    let during = fds(pid);
    assert!(
        during <= before + PER_PEER + 8,
        "the daemon holds {during} descriptors during the flood, {before} before"
    );

    // Another peer is still served, and the watchdog goes on pinging.
    let mut other = connect_from("127.0.0.2", to).await.unwrap();
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut other, PATIENCE).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let mut buf = [0u8; 512];
    let mut pings = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
        if String::from_utf8_lossy(&buf[..n]).contains("WATCHDOG=1") {
            pings += 1;
        }
    }
    assert!(pings >= 3, "{pings} watchdog pings in 3 s under the flood");

    let mut scraper = connect_from("127.0.0.2", to).await.unwrap();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        sw.admin
    );
    scraper.write_all(request.as_bytes()).await.unwrap();
    let scrape = String::from_utf8(read_to_close(&mut scraper, PATIENCE).await.unwrap()).unwrap();
    let counted = metric(&scrape, "swarmd_connections_refused_total", "cap=\"peer\"");
    assert!(counted >= (FLOOD - PER_PEER) as f64, "{counted}");
    drop(flood);
    eprintln!(
        "flood: {FLOOD} sockets, {refused} refused, daemon fds {before} before, {during} during"
    );
}
