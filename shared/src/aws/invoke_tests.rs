use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::aws::testing::{answering, sdk_at};

const LIMITS: CallLimits = CallLimits {
    timeout: Duration::from_secs(10),
    max_answer_bytes: 256 * 1024,
    trace: None,
};

/// An Invoke endpoint answering 200 with `head_extra` headers and a body of `size` bytes,
/// written 64 KiB at a time until the client stops reading; returns its URL and how many body
/// bytes it got written before the connection broke (sent when its one connection ends).
async fn flooding(
    size: usize,
    head_extra: &'static str,
) -> (String, tokio::sync::oneshot::Receiver<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The request (head and its small JSON body).
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") || !seen.ends_with(b"}") {
            let n = socket.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{head_extra}connection: close\r\n\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0;
        while sent < size {
            match tokio::time::timeout(Duration::from_secs(5), socket.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        let _ = tx.send(sent);
    });
    (url, rx)
}

/// A 64 MiB answer to a step whose bound is 256 KiB is cut off while it arrives: the step
/// fails `TooLarge`, and the endpoint finds the connection dropped long before it sent it all
/// (the SDK's client read it whole first).
#[tokio::test]
async fn a_huge_answer_is_cut_off_while_it_arrives() {
    const HUGE: usize = 64 << 20;
    let (url, sent) = flooding(HUGE, "").await;
    let invoker = SdkInvoker::new(sdk_at(&url).await);
    let got = invoker.invoke("report", b"{}".to_vec(), LIMITS).await;
    assert_eq!(got, Err(TargetError::TooLarge(256 * 1024)));
    let sent = tokio::time::timeout(Duration::from_secs(30), sent)
        .await
        .expect("the endpoint still writing")
        .unwrap();
    println!("the endpoint wrote {sent} of {HUGE} bytes");
    assert!(sent < HUGE / 4, "{sent} of {HUGE} bytes were taken");

    // One that announces its length is refused before its body is read.
    let (url, sent) = flooding(HUGE, "content-length: 67108864\r\n").await;
    let invoker = SdkInvoker::new(sdk_at(&url).await);
    let got = invoker.invoke("report", b"{}".to_vec(), LIMITS).await;
    assert_eq!(got, Err(TargetError::TooLarge(256 * 1024)));
    assert!(sent.await.unwrap() < HUGE / 4);
}

#[tokio::test]
async fn an_invoke_is_a_signed_request_response_call_carrying_the_trace() {
    let (url, seen) = answering(200, r#"{"done":{"content":[]}}"#).await;
    let invoker = SdkInvoker::new(sdk_at(&url).await);
    let function = "arn:aws:lambda:us-east-1:123456789012:function:report:prod";
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let got = crate::aws::within_trace(
        Some(trace),
        invoker.invoke(function, br#"{"a":1}"#.to_vec(), LIMITS),
    )
    .await;
    assert_eq!(got.unwrap(), br#"{"done":{"content":[]}}"#);
    let request = seen.lock().unwrap()[0].clone();
    let lower = request.to_ascii_lowercase();
    assert!(
        lower.starts_with(
            "post /2015-03-31/functions/arn%3aaws%3alambda%3aus-east-1%3a123456789012%3afunction%3areport%3aprod/invocations http/1.1\r\n"
        ),
        "{request}"
    );
    assert!(
        lower.contains("x-amz-invocation-type: requestresponse"),
        "{request}"
    );
    assert!(
        lower.contains("authorization: aws4-hmac-sha256 credential=test/")
            && lower.contains("/us-east-1/lambda/aws4_request"),
        "{request}"
    );
    assert!(
        request.contains(&format!("x-amzn-trace-id: {trace}")),
        "{request}"
    );
    assert!(request.ends_with(r#"{"a":1}"#), "{request}");
}

/// Each refusal of the Invoke API as the step protocol reads it; no answer's text is kept.
#[tokio::test]
async fn refusals_are_classified_and_say_nothing_the_answer_held() {
    let cases: [(u16, &'static str, TargetError); 6] = [
        (
            429,
            r#"{"__type":"TooManyRequestsException","message":"Rate exceeded"}"#,
            TargetError::Throttled,
        ),
        (
            404,
            r#"{"__type":"ResourceNotFoundException","message":"Function not found: x"}"#,
            TargetError::InvokeRefused("no such function"),
        ),
        (
            413,
            r#"{"Type":"User","message":"Request must be smaller"}"#,
            TargetError::InvokeRefused("request too large"),
        ),
        (
            403,
            r#"{"Message":"User is not authorized"}"#,
            TargetError::InvokeRefused("access denied"),
        ),
        (
            502,
            r#"{"__type":"ServiceException"}"#,
            TargetError::Unreachable,
        ),
        (
            400,
            r#"{"__type":"InvalidParameterValueException"}"#,
            TargetError::InvokeRefused("refused"),
        ),
    ];
    for (status, body, want) in cases {
        let (url, _) = answering(status, body).await;
        let invoker = SdkInvoker::new(sdk_at(&url).await);
        let got = invoker.invoke("f", b"{}".to_vec(), LIMITS).await;
        assert_eq!(got, Err(want), "{status} {body}");
    }
}

/// A function's own error (`X-Amz-Function-Error`) and a call past its timeout.
#[tokio::test]
async fn a_function_error_and_a_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let kept = Arc::new(Mutex::new(Vec::new()));
    let held = kept.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut socket, _)) = listener.accept().await {
            n += 1;
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            if n == 1 {
                let body = r#"{"errorMessage":"boom"}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nx-amz-function-error: Unhandled\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            }
            // The second is never answered.
            held.lock().unwrap().push(socket);
        }
    });
    let invoker = SdkInvoker::new(sdk_at(&url).await);
    let got = invoker.invoke("f", b"{}".to_vec(), LIMITS).await;
    assert_eq!(got, Err(TargetError::FunctionError));
    let short = CallLimits {
        timeout: Duration::from_millis(300),
        ..LIMITS
    };
    let got = invoker.invoke("f", b"{}".to_vec(), short).await;
    assert_eq!(got, Err(TargetError::Timeout));
}
