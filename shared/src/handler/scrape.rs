//! The operator's metrics: the Prometheus text of [`crate::metrics::global`], served only on
//! the local server's metrics listener (`--metrics-listen`, loopback by default; see
//! [`crate::local`]), never on the endpoint tenants reach with their tokens — the opt-in
//! `tenant_*` series name tenants.

use http::{HeaderMap, Method};

use super::hosts::check_host;
use super::{Reply, ReplyBody};
use crate::protocol::McpError;

/// The path the metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// The answer of the metrics listener: `GET /metrics` is the scrape; another path is `404`,
/// another method `405`. `Host` and `Origin` must name one of `allowed_hosts` (any, when it is
/// empty), as on the endpoint: a web page the operator visits cannot read a loopback listener
/// through a rebound DNS name.
pub fn metrics_reply(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    allowed_hosts: &[String],
) -> Reply {
    if path != METRICS_PATH {
        return Reply::error(
            None,
            &McpError::invalid_request("Nothing at this path").with_status(404),
        );
    }
    if let Err(e) = check_host(allowed_hosts, headers) {
        return Reply::error(None, &e);
    }
    if method != Method::GET {
        let mut r = Reply::empty(405);
        r.headers.push(("allow", "GET".into()));
        return r;
    }
    Reply {
        status: 200,
        headers: vec![("cache-control", "no-store".into())],
        body: ReplyBody::Text(
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::global().prometheus().into_bytes(),
        ),
    }
}
