//! The Runtime API's streamed answers: the prelude, the body chunk by chunk, error trailers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http_body_util::BodyExt as _;
use serde_json::Value;
use tokio::sync::mpsc;

use super::net::now_ms;
use super::runtime::{Output, RuntimeApi, Streamed, accepted};

/// The end of a streamed answer's prelude.
const PRELUDE_DELIMITER: [u8; 8] = [0; 8];
/// The largest prelude taken (a status, headers and cookies: a few hundred bytes).
const MAX_PRELUDE: usize = 64 << 10;

/// A streamed answer: decodes the prelude as its bytes arrive and hands the status and headers
/// to the waiting invocation once the delimiter is in, then forwards each body chunk as it
/// arrives, until the body ends, an error trailer ends it broken, or the invocation's deadline
/// cuts it (Lambda stops the function there; the client sees the body cut off).
pub(super) async fn respond_streamed(api: Arc<RuntimeApi>, id: String, mut body: Body) -> Response {
    api.answered(&id);
    let Some((deadline, tx)) = api.inflight.lock().unwrap().remove(&id) else {
        return (StatusCode::BAD_REQUEST, "unknown or timed-out request id").into_response();
    };
    let name = api.name;
    let timed_out = |late: &str| format!("{name}: Task timed out ({late})");
    if now_ms() > deadline {
        let late = now_ms() - deadline;
        let _ = tx.send(Err(timed_out(&format!(
            "answered {late} ms after the deadline"
        ))));
        return (StatusCode::GONE, "the invocation timed out").into_response();
    }
    let cut = tokio::time::Instant::now() + Duration::from_millis(deadline - now_ms());

    // The prelude: JSON up to the first 8 NUL bytes (JSON text holds no NUL).
    let mut head: Vec<u8> = Vec::new();
    let (prelude, rest) = loop {
        let frame = match tokio::time::timeout_at(cut, body.frame()).await {
            Err(_) => {
                let _ = tx.send(Err(timed_out("no prelude before the deadline")));
                return (StatusCode::GONE, "the invocation timed out").into_response();
            }
            Ok(None) => {
                let _ = tx.send(Err(format!(
                    "{name}: the streamed answer ended before its prelude was complete"
                )));
                return accepted();
            }
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(format!("{name}: the streamed answer broke: {e}")));
                return (StatusCode::BAD_REQUEST, "the response stream broke").into_response();
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                let trailers = frame.into_trailers().unwrap_or_default();
                let why = error_trailer(&trailers).unwrap_or_else(|| "no error type".into());
                eprintln!("{name}: the streamed answer ended in its prelude: {why}");
                let _ = tx.send(Err(format!("{name}: {why}")));
                return accepted();
            }
        };
        let from = head.len().saturating_sub(PRELUDE_DELIMITER.len() - 1);
        head.extend_from_slice(&data);
        if let Some(at) = head[from..]
            .windows(PRELUDE_DELIMITER.len())
            .position(|w| w == PRELUDE_DELIMITER)
            .map(|i| from + i)
        {
            let rest = Bytes::copy_from_slice(&head[at + PRELUDE_DELIMITER.len()..]);
            match parse_prelude(&head[..at]) {
                Ok(p) => break (p, rest),
                Err(e) => {
                    let _ = tx.send(Err(format!("{name}: malformed prelude: {e}")));
                    return (StatusCode::BAD_REQUEST, "malformed prelude").into_response();
                }
            }
        }
        if head.len() > MAX_PRELUDE {
            let _ = tx.send(Err(format!(
                "{name}: no prelude delimiter in the first {MAX_PRELUDE} bytes"
            )));
            return (StatusCode::BAD_REQUEST, "malformed prelude").into_response();
        }
    };
    let (status, headers, cookies) = prelude;
    let (chunks, rx) = mpsc::channel(16);
    // The front may have given up waiting: the body is still read (and dropped) to its end.
    let mut out = tx
        .send(Ok(Output::Streamed(Streamed {
            status,
            headers,
            cookies,
            body: rx,
        })))
        .ok()
        .map(|_| chunks);

    // The body, chunk by chunk. Whether the front reads or not, the function's writes are
    // taken, as Lambda does (a client that went away does not stop the function).
    let mut pending = Some(rest).filter(|r| !r.is_empty());
    loop {
        let data = match pending.take() {
            Some(d) => d,
            None => match tokio::time::timeout_at(cut, body.frame()).await {
                Err(_) => {
                    let why = timed_out("the deadline passed while the answer streamed");
                    eprintln!("{why}: the stream is cut");
                    break_stream(out.take(), why);
                    return (StatusCode::GONE, "the invocation timed out").into_response();
                }
                // The end of the body: dropping the sender ends the stream whole.
                Ok(None) => return accepted(),
                Ok(Some(Err(e))) => {
                    let why = format!("{name}: the streamed answer broke: {e}");
                    eprintln!("{why}");
                    break_stream(out.take(), why);
                    return (StatusCode::BAD_REQUEST, "the response stream broke").into_response();
                }
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(d) => d,
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        if let Some(why) = error_trailer(&trailers) {
                            eprintln!("{name}: the streamed answer ended with an error: {why}");
                            break_stream(out.take(), format!("{name}: {why}"));
                        }
                        continue;
                    }
                },
            },
        };
        // lambda_runtime 1.5 writes a mid-stream error as trailer text into the body.
        if let Some(why) = error_text(&data) {
            eprintln!("{name}: the streamed answer ended with an error: {why}");
            break_stream(out.take(), format!("{name}: {why}"));
            continue;
        }
        let Some(o) = out.take() else { continue };
        match tokio::time::timeout_at(cut, o.send(Ok(data))).await {
            Ok(Ok(())) => out = Some(o),
            // The front went away (the client closed the connection): drop the rest.
            Ok(Err(_)) => {}
            Err(_) => {
                let why = timed_out("the deadline passed while the answer streamed");
                eprintln!("{why}: the stream is cut");
                break_stream(Some(o), why);
                return (StatusCode::GONE, "the invocation timed out").into_response();
            }
        }
    }
}

/// Ends a streamed body broken: the error goes after the chunks already queued (however long
/// the front takes to read them), then the sender is dropped.
fn break_stream(out: Option<mpsc::Sender<Result<Bytes, String>>>, why: String) {
    if let Some(out) = out {
        tokio::spawn(async move {
            let _ = out.send(Err(why)).await;
        });
    }
}

/// A streamed answer's prelude (lambda_runtime's `MetadataPrelude`): `statusCode`, `headers`
/// (each value a string, or an array of strings for a header sent more than once: http_serde's
/// `header_map`), `cookies`.
fn parse_prelude(json: &[u8]) -> Result<(StatusCode, HeaderMap, Vec<String>), String> {
    let v: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let status = v["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(u16::try_from(s).ok()?).ok())
        .ok_or("no valid statusCode")?;
    let mut headers = HeaderMap::new();
    for (k, vs) in v["headers"].as_object().into_iter().flatten() {
        let k = HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
        let values = match vs {
            Value::Array(a) => a.iter().collect(),
            one => vec![one],
        };
        for value in values {
            let value = value
                .as_str()
                .and_then(|s| HeaderValue::from_str(s).ok())
                .ok_or_else(|| format!("header {k}: not a header value: {value}"))?;
            headers.append(k.clone(), value);
        }
    }
    let cookies = v["cookies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    Ok((status, headers, cookies))
}

/// `Lambda-Runtime-Function-Error-Type` (and the base64 `…-Error-Body`) of a streamed answer's
/// trailers, as one line for the log.
fn error_trailer(trailers: &HeaderMap) -> Option<String> {
    let kind = trailers.get("lambda-runtime-function-error-type")?;
    let body = trailers
        .get("lambda-runtime-function-error-body")
        .map(|b| decode_error_body(b.as_bytes()))
        .unwrap_or_default();
    Some(format!(
        "{}: {body}",
        String::from_utf8_lossy(kind.as_bytes())
    ))
}

/// The same two fields written as text into the body (`Name: value\r\n` lines), as
/// lambda_runtime 1.5 reports an error of the body stream.
fn error_text(data: &[u8]) -> Option<String> {
    const TYPE: &[u8] = b"lambda-runtime-function-error-type:";
    if data.len() < TYPE.len() || !data[..TYPE.len()].eq_ignore_ascii_case(TYPE) {
        return None;
    }
    let mut trailers = HeaderMap::new();
    for line in String::from_utf8_lossy(data).split("\r\n") {
        if let Some((k, v)) = line.split_once(':')
            && let (Ok(k), Ok(v)) = (
                HeaderName::try_from(k.trim()),
                HeaderValue::from_str(v.trim()),
            )
        {
            trailers.insert(k, v);
        }
    }
    error_trailer(&trailers)
}

fn decode_error_body(b64: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(b64).into_owned())
}
