//! Where the operator's metrics are served: a listener of their own (`--metrics-listen`),
//! loopback by default, never the endpoint tenants reach with their tokens. The opt-in
//! `tenant_*` series name tenants and show what each does, which no tenant's token may read;
//! a scraper on the host (or behind a tunnel the operator sets up) needs no token at all.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::TcpListener;

use super::StartError;

/// `--metrics-listen` when not given: loopback, the port Prometheus exporters conventionally
/// use.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);

/// Where the metrics listener listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// Nowhere: no metrics are served.
    Off,
    /// Here, or the server does not start (an address the operator chose).
    At(SocketAddr),
    /// Here when the address is free, else no metrics and a warning: the default, so that a
    /// second server on one machine (or a test suite) still starts.
    IfFree(SocketAddr),
}

impl MetricsListen {
    /// From the value of `--metrics-listen`: absent is [`DEFAULT_METRICS_LISTEN`] if free,
    /// `off` is off, anything else must be an `IP:PORT` address.
    pub fn from_flag(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None => Ok(Self::IfFree(DEFAULT_METRICS_LISTEN)),
            Some(v) if v.eq_ignore_ascii_case("off") => Ok(Self::Off),
            Some(v) => v
                .parse()
                .map(Self::At)
                .map_err(|_| "--metrics-listen takes IP:PORT (e.g. 127.0.0.1:9464) or off".into()),
        }
    }
}

/// The bound metrics listener, if any, and the host names its requests may name (the
/// loopback names on loopback, where they guard against DNS rebinding; any elsewhere).
pub(super) async fn bind(
    listen: MetricsListen,
    loopback_hosts: &[String],
) -> Result<Option<(TcpListener, Vec<String>)>, StartError> {
    let (addr, required) = match listen {
        MetricsListen::Off => return Ok(None),
        MetricsListen::At(a) => (a, true),
        MetricsListen::IfFree(a) => (a, false),
    };
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(source) if required => return Err(StartError::MetricsListen { addr, source }),
        Err(e) => {
            tracing::warn!(
                %addr, error = %e,
                "metrics not served: give --metrics-listen another address (or off)"
            );
            return Ok(None);
        }
    };
    let hosts = if addr.ip().is_loopback() {
        loopback_hosts.to_vec()
    } else {
        tracing::warn!(
            %addr,
            "metrics served off loopback: whoever reaches this address reads them (tenant \
             names too, with --metrics-tenants)"
        );
        Vec::new()
    };
    Ok(Some((listener, hosts)))
}
