//! The HTTPS client of every AWS client in the process: HTTP/1.1 over rustls on aws-lc
//! (post-quantum key exchange preferred, the platform's roots), through `reqwest`, which the
//! HTTP functions link anyway for the JWKS fetch ([`crate::auth`]); set up at its first call.
//!
//! # Why not the SDK's default client
//!
//! The SDK's default (`default-https-client`: hyper-util's pooled client on hyper-rustls) is
//! built with HTTP/2, and which protocol a connection speaks is decided at run time by ALPN,
//! so every function linked the whole of `h2` for services that speak HTTP/1.1 only
//! (DynamoDB, SQS, STS). That, with a second pooled client beside `reqwest`'s in the HTTP
//! functions, was ~0.9 MB of each arm64 binary. This client is the same stack (hyper 1's
//! HTTP/1 client, rustls 0.23 on aws-lc-rs with `X25519MLKEM768` preferred, the platform's
//! roots, Nagle off, no proxy, connections pooled and kept idle up to 90 s) without HTTP/2.
//!
//! # What the SDK expects of it
//!
//! - The connect and read timeouts of the client's settings ([`HttpConnectorSettings`]),
//!   one `reqwest` client per distinct pair (in practice one per process).
//! - No redirect followed: the SDK sees every answer as it came.
//! - Errors classified as the SDK's own client classifies them, because its retry policy
//!   reads the class: a timeout is [`ConnectorError::timeout`], a failed connect or an I/O
//!   error (a reset, a pooled connection the other side had closed) is
//!   [`ConnectorError::io`], a message cut short is a transient error, and all three are
//!   retried; a request that cannot be built is the caller's ([`ConnectorError::user`]).
//! - No warm-up: the SDK asks each client for a connector when it is built, which would build
//!   a TLS configuration (the CA bundle read, decoded and parsed, ~0.6 ms of a cold start)
//!   before the first event, and many first events need no AWS call at all (`initialize`,
//!   `tools/list`, `server/discover`, a refused token). The connector is built at the first
//!   call instead.
//!
//! What it does not do: poison a connection after a failed attempt (the SDK's client marks
//! it so that the retry opens a new one). An attempt abandoned at its timeout drops its
//! connection with it, and one that failed on an I/O error is not returned to the pool, so
//! the retry does not reuse it either way.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;

/// How long an idle pooled connection is kept (hyper-util's default, which the SDK's client
/// kept too). A pooled connection the other side closed meanwhile (while the function was
/// frozen, say) is dropped when the pool sees it closed, or fails its next use as an I/O
/// error, which the SDK retries.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The HTTPS client every AWS client of the process shares (one pool per timeout setting),
/// connected at its first call.
pub fn client() -> SharedHttpClient {
    SharedHttpClient::new(Http1Client::default())
}

/// A connector setting: the connect and the read timeout.
type Setting = (Option<Duration>, Option<Duration>);

/// [`client`]: a `reqwest` client per connector setting, built when first asked for.
#[derive(Debug, Default, Clone)]
struct Http1Client {
    built: Arc<Mutex<HashMap<Setting, Connector>>>,
}

impl Http1Client {
    /// The connector of `setting`, built at the first call that asks for it. One that could
    /// not be built is not kept: the next call tries again (a CA bundle briefly unreadable
    /// fails the calls of that moment, not every call of the process).
    fn connector(&self, setting: Setting) -> Connector {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ready) = built.get(&setting) {
            return ready.clone();
        }
        let connector = Connector::new(setting.0, setting.1);
        if matches!(connector, Connector::Ready(_)) {
            built.insert(setting, connector.clone());
        }
        connector
    }

    /// How many connectors (so TLS configurations, so pools) are kept.
    #[cfg(test)]
    fn built(&self) -> usize {
        self.built.lock().unwrap().len()
    }
}

impl HttpClient for Http1Client {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(
            self.connector((settings.connect_timeout(), settings.read_timeout())),
        )
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        Some(ConnectorMetadata::new("reqwest", None))
    }
}

/// One `reqwest` client, or why it could not be built (the calls given it fail with that).
#[derive(Debug, Clone)]
enum Connector {
    Ready(reqwest::Client),
    Broken(Arc<str>),
}

impl Connector {
    fn new(connect: Option<Duration>, read: Option<Duration>) -> Self {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(POOL_IDLE);
        if let Some(connect) = connect {
            builder = builder.connect_timeout(connect);
        }
        if let Some(read) = read {
            builder = builder.read_timeout(read);
        }
        match builder.build() {
            Ok(client) => Self::Ready(client),
            Err(e) => {
                let why = format!("the HTTPS client cannot be built: {e}");
                tracing::error!(error = %e, "the HTTPS client of the AWS clients cannot be built");
                Self::Broken(why.into())
            }
        }
    }
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = match self {
            Self::Ready(client) => client.clone(),
            Self::Broken(why) => {
                let why: Box<dyn StdError + Send + Sync> = why.to_string().into();
                return HttpConnectorFuture::ready(Err(ConnectorError::other(why, None)));
            }
        };
        let request = match request
            .try_into_http1x()
            .map_err(|e| ConnectorError::user(e.into()))
            .and_then(|r| {
                reqwest::Request::try_from(r.map(reqwest::Body::wrap))
                    .map_err(|e| ConnectorError::user(e.into()))
            }) {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(e)),
        };
        HttpConnectorFuture::new(async move {
            let response = client.execute(request).await.map_err(classify)?;
            let response = http::Response::<reqwest::Body>::from(response);
            HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                .map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}

/// The class of a failed call, as the SDK's own client would give it (see the module's doc).
fn classify(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        return ConnectorError::timeout(e.into());
    }
    if e.is_builder() {
        return ConnectorError::user(e.into());
    }
    if let Some(h) = source::<hyper::Error>(&e) {
        if h.is_timeout() {
            return ConnectorError::timeout(e.into());
        }
        if h.is_closed() || h.is_canceled() {
            return ConnectorError::io(e.into());
        }
        if h.is_incomplete_message() {
            return ConnectorError::other(e.into(), Some(ErrorKind::TransientError));
        }
    }
    if e.is_connect() || source::<std::io::Error>(&e).is_some() {
        return ConnectorError::io(e.into());
    }
    ConnectorError::other(e.into(), None)
}

/// The first error of type `E` in `e`'s chain of sources, `e` included.
fn source<'a, E: StdError + 'static>(e: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::byte_stream::ByteStream;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    #[test]
    fn building_clients_sets_up_no_connection() {
        let inner = Http1Client::default();
        let http = SharedHttpClient::new(inner.clone());
        // A DynamoDB and an SQS client, as a function's cold start builds them.
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .http_client(http.clone())
            .build();
        let _ = crate::aws::dynamodb_client(&sdk);
        let _ = crate::aws::sqs_client(&sdk);
        assert_eq!(inner.built(), 0, "no HTTPS client before the first call");
        assert_eq!(
            http.connector_metadata().map(|m| m.name().into_owned()),
            Some("reqwest".to_owned()),
            "the user agent names the client"
        );
    }

    #[test]
    fn one_https_client_per_setting() {
        let http = Http1Client::default();
        let a = (Some(Duration::from_secs(3)), None);
        let b = (Some(Duration::from_secs(3)), Some(Duration::from_secs(5)));
        for setting in [a, a, b, a, b] {
            assert!(matches!(http.connector(setting), Connector::Ready(_)));
        }
        assert_eq!(http.built(), 2);
    }

    /// A one-shot HTTP server on a real port: reads the request of its first connection,
    /// answers `answer` (nothing if `None`), holds the connection `hold` longer, and returns
    /// the request.
    fn serve_once(
        answer: Option<&'static str>,
        hold: Duration,
    ) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "the client closed before its headers were sent");
                seen.extend_from_slice(&buf[..n]);
            }
            if let Some(answer) = answer {
                conn.write_all(answer.as_bytes()).unwrap();
            }
            std::thread::sleep(hold);
            String::from_utf8_lossy(&seen).into_owned()
        });
        (url, handle)
    }

    async fn call(url: &str, setting: Setting) -> Result<HttpResponse, ConnectorError> {
        let request = http::Request::builder()
            .method("POST")
            .uri(url)
            .header("content-type", "application/x-amz-json-1.0")
            .body(SdkBody::from("{\"TableName\":\"t\"}"))
            .unwrap();
        Connector::new(setting.0, setting.1)
            .call(HttpRequest::try_from(request).unwrap())
            .await
    }

    #[tokio::test]
    async fn a_call_goes_out_as_http1_and_its_answer_comes_back_as_it_came() {
        let (url, server) = serve_once(
            Some(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 2\r\n\r\n{}",
            ),
            Duration::ZERO,
        );
        let response = call(&url, (None, None)).await.expect("an answer");
        assert_eq!(
            response.status().as_u16(),
            307,
            "redirects are not followed"
        );
        let body = ByteStream::new(response.into_body())
            .collect()
            .await
            .unwrap();
        assert_eq!(body.into_bytes().as_ref(), b"{}");
        let request = server.join().unwrap().to_ascii_lowercase();
        assert!(request.starts_with("post / http/1.1\r\n"), "{request}");
        assert!(request.contains("content-length: 17\r\n"), "{request}");
    }

    #[tokio::test]
    async fn failures_are_classified_as_the_sdk_retries_them() {
        // Nothing listens: a failed connect is an I/O error (retried).
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", closed.local_addr().unwrap());
        drop(closed);
        let e = call(&url, (None, None)).await.unwrap_err();
        assert!(e.is_io(), "{e:?}");

        // The server reads the request and hangs up without an answer: retried.
        let (url, server) = serve_once(None, Duration::ZERO);
        let e = call(&url, (None, None)).await.unwrap_err();
        server.join().unwrap();
        assert!(
            e.is_io() || e.as_other() == Some(ErrorKind::TransientError),
            "{e:?}"
        );

        // The server takes the request and never answers: past the read timeout, a timeout.
        let (url, server) = serve_once(None, Duration::from_secs(2));
        let e = call(&url, (None, Some(Duration::from_millis(100))))
            .await
            .unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        server.join().unwrap();

        // A URL the client does not take is the caller's error, and nothing is sent.
        let e = call("ftp://127.0.0.1:1/", (None, None)).await.unwrap_err();
        assert!(e.is_user(), "{e:?}");
    }

    #[tokio::test]
    async fn a_client_that_cannot_be_built_fails_each_call_and_says_why() {
        let broken = Connector::Broken("no TLS".into());
        let request = HttpRequest::try_from(
            http::Request::builder()
                .uri("http://127.0.0.1:1/")
                .body(SdkBody::empty())
                .unwrap(),
        )
        .unwrap();
        let e = broken.call(request).await.unwrap_err();
        assert!(e.is_other(), "{e:?}");
        assert!(format!("{e:?}").contains("no TLS"), "{e:?}");
    }
}
