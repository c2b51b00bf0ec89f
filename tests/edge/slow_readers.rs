//! Clients that send requests and never read the answers (the slow-reader attack): the write
//! timeout frees their slots, the answers queued for one of them are capped and its further
//! requests left unread, and a legitimate client is served meanwhile. The server side of a
//! connection is read from /proc/net/tcp (Linux, like the RSS readings of `tests/edge.rs`).

use std::sync::Arc;

use tokio::net::TcpSocket;

use super::*;

/// `n` pipelined `GET /nope`: a path that needs no token and is answered `404` (~190 bytes),
/// not admitted as any tenant's request, so no per-tenant cap ever turns it away.
fn pipelined_404s(addr: &str, n: usize) -> Vec<u8> {
    format!("GET /nope HTTP/1.1\r\nhost: {addr}\r\n\r\n")
        .repeat(n)
        .into_bytes()
}

/// A `tools/list` whose id is `id_len` characters: its answer echoes the id, so it is at
/// least that long.
fn tools_list_with_id(addr: &str, id_len: usize) -> Vec<u8> {
    let mut body = Client::new("http://x/mcp").body("tools/list", json!({}));
    body["id"] = json!("i".repeat(id_len));
    let body = serde_json::to_vec(&body).unwrap();
    let mut req = head(addr, body.len(), &[]).into_bytes();
    req.extend_from_slice(&body);
    req
}

/// Reads one answer (head and `content-length` body) off `conn`, `chunk` bytes at a time with
/// `pause` after each read of the body; `None` if the connection ends first.
async fn read_answer(conn: &mut TcpStream, chunk: usize, pause: Duration) -> Option<(u16, usize)> {
    let mut buf = vec![0u8; chunk];
    let mut got = Vec::new();
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))?
        .trim()
        .parse()
        .ok()?;
    let mut body = got.len() - end;
    while body < len {
        tokio::time::sleep(pause).await;
        let n = conn.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        body += n;
    }
    Some((status_of(&head)?, body))
}

/// A connection that will read nothing, with small socket buffers (what an attacker picks:
/// the server's answers back up at once, and the attacker's memory is spared).
async fn never_reading(addr: &str) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.set_send_buffer_size(16 * 1024).unwrap();
    sock.connect(addr.parse().unwrap()).await.unwrap()
}

/// Writes `payload` until it is all sent or the server has taken nothing for a second;
/// returns how much was written.
async fn push(conn: &mut TcpStream, payload: &[u8]) -> usize {
    let mut sent = 0;
    while sent < payload.len() {
        let chunk = &payload[sent..payload.len().min(sent + 16 * 1024)];
        match tokio::time::timeout(Duration::from_secs(1), conn.write(chunk)).await {
            Ok(Ok(n)) if n > 0 => sent += n,
            _ => break,
        }
    }
    sent
}

/// The server side of the connection from `client_port` to `server_port`: the bytes of
/// answers in its send queue (sent and unacknowledged, or not sent yet) and the bytes of
/// requests it has not read. `None` once the connection is gone.
fn server_queues(server_port: u16, client_port: u16) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if port(f[1])? != server_port || port(f[2])? != client_port {
            return None;
        }
        let (tx, rx) = f[4].split_once(':')?;
        Some((
            u64::from_str_radix(tx, 16).ok()?,
            u64::from_str_radix(rx, 16).ok()?,
        ))
    })
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// The sockets the server process holds (its listeners and every accepted connection).
fn sockets_held(s: &Server) -> usize {
    let dir = format!("/proc/{}/fd", s.pid());
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Raises this process's soft limit on open files to at least `want` (the spawned server
/// inherits it): each connection is a descriptor here and one in the server.
fn raise_open_files(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the kernel to fill and then read back.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur >= want {
        return;
    }
    assert!(
        lim.rlim_max >= want,
        "this test needs {want} open files; the hard limit is {} (raise it: ulimit -Hn)",
        lim.rlim_max
    );
    lim.rlim_cur = want;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// A client that pipelines requests and never reads: the server stops reading its requests
/// once the answers back up, lets the kernel hold at most 64 KiB (plus one segment) of them,
/// and resets the connection once no answer byte has been taken for the write timeout.
#[tokio::test]
async fn a_client_that_never_reads_is_cut_off_and_little_is_queued_for_it() {
    let (s, _d) = start(&["--write-timeout-secs".into(), "2".into()]);
    let a = addr(&s);
    let mut conn = never_reading(&a).await;
    let client_port = conn.local_addr().unwrap().port();
    // ~300 KB of requests whose answers (~1.5 MB) no buffer on the way holds.
    let payload = pipelined_404s(&a, 8000);
    let started = Instant::now();
    let pushed = push(&mut conn, &payload).await;
    let (queued, unread) =
        server_queues(port_of(&a), client_port).expect("the connection is still there");
    println!(
        "never-reading client: {pushed} of {} request bytes taken; server side: {queued} \
         answer bytes queued, {unread} request bytes unread",
        payload.len()
    );
    assert!(
        unread > 0,
        "the server read every request of a client that reads nothing"
    );
    assert!(
        queued <= 192 * 1024,
        "{queued} bytes of answers queued for a client that reads nothing"
    );
    while server_queues(port_of(&a), client_port).is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the connection of a client that reads nothing is still open after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "  reset {:?} after the requests were sent",
        started.elapsed()
    );
    // The server is fine.
    s.client().call("tools/list", json!({})).await;
}

/// The whole connection cap (the default, 1024) held by clients that pipeline requests for as
/// long as the server reads them and never read an answer, each reconnecting as soon as the
/// server drops it: a legitimate client waiting in the backlog is served once the write
/// timeout (10 s) has reset one of them (the kernel hands out queued connections in order),
/// instead of never.
#[tokio::test]
async fn a_legitimate_client_is_served_while_the_cap_of_connections_never_read() {
    const ATTACKERS: usize = 1024;
    raise_open_files(4 * ATTACKERS as u64);
    let (s, _d) = start(&[]);
    let a = addr(&s);
    let idle = sockets_held(&s);
    let requests = Arc::new(pipelined_404s(&a, 400));
    let mut attack = Vec::with_capacity(ATTACKERS);
    for _ in 0..ATTACKERS {
        let (a, requests) = (a.clone(), requests.clone());
        attack.push(tokio::spawn(async move {
            loop {
                // Requests for as long as the server reads them, never an answer read; a
                // new connection as soon as the server drops this one.
                let mut conn = never_reading(&a).await;
                while conn.write_all(&requests).await.is_ok() {}
            }
        }));
    }
    let started = Instant::now();
    while sockets_held(&s) - idle < ATTACKERS {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server accepted only {} of {ATTACKERS} connections",
            sockets_held(&s) - idle
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{ATTACKERS} never-reading connections held after {:?}",
        started.elapsed()
    );
    let asked = Instant::now();
    let mut conn = TcpStream::connect(&a).await.unwrap();
    conn.write_all(&tools_list(&a)).await.unwrap();
    let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(40)).await;
    let waited = asked.elapsed();
    let held = sockets_held(&s) - idle;
    println!(
        "a legitimate client, with the cap held by clients that never read: {:?} after \
         {waited:?} ({held} connections held then)",
        status_of(&answer)
    );
    assert_eq!(
        status_of(&answer),
        Some(200),
        "after {waited:?}: {answer:?}"
    );
    for task in attack {
        task.abort();
    }
}

/// A client reading a long answer slowly but steadily keeps its connection: the idle timeout
/// counts from the last byte written, not from when the answer was ready (all of it in the
/// server's hands long before the client has read it), so the client reads the whole answer
/// and its next request on the same connection is served.
#[tokio::test]
async fn a_slow_steady_reader_keeps_its_connection_past_the_idle_timeout() {
    let (s, _d) = start(&["--header-read-timeout-secs".into(), "1".into()]);
    let a = addr(&s);
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    let mut conn = sock.connect(a.parse().unwrap()).await.unwrap();
    // A ~1 MB answer read at about 300 KB/s: ~3 s, three times the idle timeout.
    conn.write_all(&tools_list_with_id(&a, 1_000_000))
        .await
        .unwrap();
    let started = Instant::now();
    let first = read_answer(&mut conn, 16 * 1024, Duration::from_millis(50)).await;
    let took = started.elapsed();
    println!("a ~1 MB answer read slowly: {first:?} in {took:?}");
    let (status, len) = first.expect("the whole answer");
    assert_eq!(status, 200);
    assert!(len > 1_000_000, "{len}");
    assert!(
        took > Duration::from_secs(2),
        "read too fast to test anything: {took:?}"
    );
    // The same connection, asked again at once.
    conn.write_all(&tools_list_with_id(&a, 10)).await.unwrap();
    let second = read_answer(&mut conn, 16 * 1024, Duration::ZERO).await;
    assert_eq!(
        second.map(|(status, _)| status),
        Some(200),
        "the connection was closed while its answer was still being read"
    );
}
