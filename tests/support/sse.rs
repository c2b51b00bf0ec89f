//! An SSE answer read as it arrives (`Events`), each message checked against the official
//! schema, and the server's timestamps as epoch milliseconds (`parse_ms`), to measure how
//! long a change took to reach a subscriber.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{Client, schema};

/// One item of an SSE answer, with when it arrived.
#[derive(Debug)]
pub enum Item {
    /// A comment line (`: keep-alive`).
    Comment,
    /// A JSON-RPC message, and the wall-clock time it arrived (epoch ms).
    Message(Value, Instant, u64),
}

/// An SSE answer read as it arrives.
pub struct Events {
    resp: reqwest::Response,
    buf: String,
    method: String,
}

impl Events {
    /// POSTs `method` and returns the answer's status, content type, and its events.
    pub async fn open(client: &Client, method: &str, params: Value) -> (u16, String, Events) {
        Self::open_body(client, client.body(method, params)).await
    }

    /// POSTs `body` (a whole request, `_meta` and all) with the client's headers (its bearer
    /// token, if any) and returns the answer's status, content type, and its events.
    pub async fn open_body(client: &Client, body: Value) -> (u16, String, Events) {
        let method = body["method"].as_str().unwrap_or_default().to_owned();
        let mut rb = reqwest::Client::new()
            .post(&client.url)
            .body(serde_json::to_vec(&body).unwrap());
        for (k, v) in Client::headers(&body).iter().chain(&client.extra_headers) {
            rb = rb.header(k, v);
        }
        let resp = rb.send().await.expect("the request is answered");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let events = Events {
            resp,
            buf: String::new(),
            method,
        };
        (status, ct, events)
    }

    /// The next item, or `None` at the end of the answer.
    pub async fn next(&mut self, within: Duration) -> Option<Item> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let at = Instant::now();
                if block.starts_with(':') {
                    return Some(Item::Comment);
                }
                let data: String = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect::<Vec<_>>()
                    .join("\n");
                let msg: Value = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {block:?}"));
                schema::check_message(Some(&self.method), &msg, 200);
                return Some(Item::Message(msg, at, epoch_ms()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.resp.chunk()).await {
                Err(_) => panic!(
                    "nothing more arrived within {within:?}; so far: {:?}",
                    self.buf
                ),
                Ok(Ok(Some(bytes))) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) => {
                    assert!(
                        self.buf.trim().is_empty(),
                        "a partial event: {:?}",
                        self.buf
                    );
                    return None;
                }
                Ok(Err(e)) => panic!("the stream broke: {e}"),
            }
        }
    }

    /// The next JSON-RPC message (skipping comments).
    pub async fn message(&mut self, within: Duration) -> Option<(Value, u64)> {
        loop {
            match self.next(within).await? {
                Item::Comment => continue,
                Item::Message(m, _, wall) => return Some((m, wall)),
            }
        }
    }
}

pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (what the server writes) as epoch milliseconds.
pub fn parse_ms(iso: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| iso[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (hh, mm, ss, ms) = (n(11..13), n(14..16), n(17..19), n(20..23));
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (((days * 24 + hh) * 60 + mm) * 60 + ss) as u64 * 1000 + ms as u64
}
