//! The ceiling of `bench/hotpath.sh`: a hyper HTTP/1 server on the same runtime as
//! `mcp-tasks serve` (tokio, multi-thread, one worker per core) that answers every request
//! with fixed bytes — the `tasks/get` answer of the real server, captured by the script —
//! after reading the request body, and does nothing else. What our server does per request
//! on top of this is what the benchmark measures.
//!
//!   cargo run --release -p mcp-tasks --example bare_hyper -- ADDR BODY_FILE

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(file)) = (args.next(), args.next()) else {
        eprintln!("usage: bare_hyper ADDR BODY_FILE");
        std::process::exit(2);
    };
    let body = Bytes::from(std::fs::read(&file).expect("the body file"));
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    eprintln!("bare_hyper on {}", listener.local_addr().unwrap());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let body = body.clone();
                async move {
                    // Read the request like the real server does, then answer.
                    let _ = req.into_body().collect().await;
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(body))
                            .unwrap(),
                    )
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
