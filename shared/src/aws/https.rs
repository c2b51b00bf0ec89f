//! The HTTPS client of every AWS client in the process: the SDK's own default, shared, and
//! set up at its first call instead of at each client's construction.
//!
//! The SDK warms its client up whenever a service client is built, by building a connector
//! and throwing it away: a TLS configuration with the trusted roots (the CA bundle read,
//! decoded and parsed) and the crypto library's start-up. That was ~0.6 ms of the mcp
//! function's cold start (0.7 ms for the first client, 0.16 ms for the second, against 0.15
//! and 0.10 ms without it) before it could take its first event, and many first events need
//! no AWS call at all (`initialize`, `tools/list`, `server/discover`, a refused token). A call
//! that needs AWS sets the connector up once, at the first call, as it always did for each
//! new connector setting. Which client, TLS stack, proxy settings and roots are used does
//! not change: this wrapper only leaves out the warm-up.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::runtime_components::{
    RuntimeComponents, RuntimeComponentsBuilder,
};
use aws_smithy_runtime_api::client::runtime_plugin::RuntimePlugin;
use aws_smithy_types::config_bag::ConfigBag;

/// The SDK's default HTTPS client (the one each service client would build for itself, with
/// the same behaviour version), connected at its first call.
pub fn connect_at_first_call() -> SharedHttpClient {
    let plugin = aws_smithy_runtime::client::defaults::default_http_client_plugin_v2(
        BehaviorVersion::latest(),
    )
    .expect("the SDK's default HTTPS client is built in (feature default-https-client)");
    let client = plugin
        .runtime_components(&RuntimeComponentsBuilder::new("connect_at_first_call"))
        .http_client()
        .expect("the default HTTPS client plugin sets an HTTP client");
    SharedHttpClient::new(FirstCall(client))
}

/// [`connect_at_first_call`]'s wrapper: everything but the warm-up is the inner client's.
#[derive(Debug)]
struct FirstCall<C>(C);

impl<C: HttpClient> HttpClient for FirstCall<C> {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        // The inner client builds (and caches) a connector for these settings on the first
        // call that asks for it: that is where the roots are loaded now.
        self.0.http_connector(settings, components)
    }

    /// Nothing. The SDK calls this as each service client is built; the inner client's
    /// version builds a connector, throws it away and returns `Ok` whatever happened (a
    /// warm-up, not a check): the cost this wrapper defers. (`validate_final_config` is the
    /// trait's no-op, as the inner client's is.)
    fn validate_base_client_config(
        &self,
        _: &RuntimeComponentsBuilder,
        _: &ConfigBag,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.0.connector_metadata()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An inner client that counts the warm-ups it is asked for.
    #[derive(Debug, Default)]
    struct Counting(Arc<AtomicUsize>);

    impl HttpClient for Counting {
        fn http_connector(
            &self,
            _: &HttpConnectorSettings,
            _: &RuntimeComponents,
        ) -> SharedHttpConnector {
            unreachable!("building a client makes no call")
        }

        fn validate_base_client_config(
            &self,
            _: &RuntimeComponentsBuilder,
            _: &ConfigBag,
        ) -> Result<(), BoxError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }

        fn connector_metadata(&self) -> Option<ConnectorMetadata> {
            Some(ConnectorMetadata::new("counting", None))
        }
    }

    /// Builds a DynamoDB and an SQS client on `http`, as a function's cold start does.
    fn build_clients(http: SharedHttpClient) {
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .http_client(http)
            .build();
        let _ = crate::aws::dynamodb_client(&sdk);
        let _ = crate::aws::sqs_client(&sdk);
    }

    #[test]
    fn building_clients_sets_up_no_connection() {
        // The control: the SDK warms the bare client up once per client built.
        let warm_ups = Arc::new(AtomicUsize::new(0));
        build_clients(SharedHttpClient::new(Counting(warm_ups.clone())));
        assert_eq!(warm_ups.load(Ordering::SeqCst), 2);

        let warm_ups = Arc::new(AtomicUsize::new(0));
        let http = SharedHttpClient::new(FirstCall(Counting(warm_ups.clone())));
        build_clients(http.clone());
        assert_eq!(warm_ups.load(Ordering::SeqCst), 0);
        assert_eq!(
            http.connector_metadata().map(|m| m.name().into_owned()),
            Some("counting".to_owned()),
            "the user agent still names the real client"
        );
    }

    #[test]
    fn the_wrapped_client_is_the_sdks_hyper_client() {
        let http = connect_at_first_call();
        let meta = http
            .connector_metadata()
            .expect("the SDK's client names itself");
        assert_eq!(meta.name(), "hyper");
    }
}
