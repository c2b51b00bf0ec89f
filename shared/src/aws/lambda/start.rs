//! What a function's process does before anything else: the one setting that must precede
//! every thread, and the runtime its main future runs on ([`block_on`]).
//!
//! # Why one CA bundle
//!
//! The AWS clients' HTTPS client (`aws/https.rs`, reqwest's `rustls-platform-verifier`,
//! which on Linux asks `rustls-native-certs`) trusts the platform's roots: unless
//! `SSL_CERT_FILE` or `SSL_CERT_DIR` says where they are, it reads the distribution's bundle
//! file *and then every file of every certificate directory it knows* (`/etc/ssl/certs`,
//! `/etc/pki/tls/certs`, …), parsing each root again. It does so once per process, at the
//! first AWS call (`aws/https.rs`), on a runtime thread: hence the variable is set here,
//! before any thread exists. The bundle already holds every root the directories hold (the
//! distribution generates both from one source), so reading the bundle alone trusts the same
//! roots for a fraction of the work. Measured with `tests/cold_start.rs` on a Debian
//! host, together with `aws::sdk_config`'s environment credentials: the SDK's part of init
//! 3.9 → 1.4 ms, the `mcp` function's init 3.0× → 2.0× a minimal `lambda_http` function's.
//! A root added by hand to a directory without regenerating the bundle would not be trusted;
//! on Lambda nobody does that, and an environment that sets either variable is left as it is.

use std::path::Path;

/// The bundle files, in the order `openssl-probe` (which `rustls-native-certs` asks) tries
/// them on Linux: the first that exists is the file the default would read anyway.
const BUNDLES: [&str; 3] = [
    // Debian, Ubuntu.
    "/etc/ssl/certs/ca-certificates.crt",
    // Amazon Linux 2023 (Lambda's `provided.al2023`), Fedora, RHEL.
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Points the platform trust at the distribution's one CA bundle (`SSL_CERT_FILE`) when the
/// environment names neither a file nor a directory and one of [`BUNDLES`] exists; otherwise
/// changes nothing. See the module's doc for why. Returns the bundle chosen.
///
/// # Safety
/// It sets an environment variable, which must not race with any other thread reading or
/// writing the environment: call it first thing in `main`, before any thread is started (so
/// before the Tokio runtime is built).
pub unsafe fn prefer_one_cert_bundle() -> Option<&'static str> {
    let bundle = choose_bundle(
        |k| std::env::var_os(k).is_some(),
        |p| Path::new(p).is_file(),
    )?;
    // SAFETY: the caller guarantees no other thread exists yet.
    unsafe { std::env::set_var("SSL_CERT_FILE", bundle) };
    Some(bundle)
}

/// Runs a function's main future to its end on the multi-threaded Tokio runtime
/// `#[tokio::main]` would build, with the future on the heap. A future is as large as its
/// largest state, whether started or not (the mcp function's was 10 KB, 8.7 KB of it the SDK
/// loader's, now boxed in [`crate::aws::sdk_config`]), and `#[tokio::main]` moves it by value
/// on its way into the runtime: with both boxes, the `memcpy`s of the mcp function's init went
/// from ~45 k instructions to ~16 k. Boxed here, only a pointer moves.
pub fn block_on<F: std::future::Future>(main: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the Tokio runtime")
        .block_on(Box::pin(main))
}

/// The bundle to name, given what the environment sets and which files exist.
fn choose_bundle(
    is_set: impl Fn(&str) -> bool,
    exists: impl Fn(&str) -> bool,
) -> Option<&'static str> {
    if is_set("SSL_CERT_FILE") || is_set("SSL_CERT_DIR") {
        return None;
    }
    BUNDLES.into_iter().find(|b| exists(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_existing_bundle_is_named_unless_the_environment_says_otherwise() {
        let none = |_: &str| false;
        let al2023 = |p: &str| p.starts_with("/etc/pki/");
        assert_eq!(
            choose_bundle(none, al2023),
            Some("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")
        );
        assert_eq!(
            choose_bundle(none, |_| true),
            Some("/etc/ssl/certs/ca-certificates.crt")
        );
        // No bundle: nothing set, the default search stays.
        assert_eq!(choose_bundle(none, none), None);
        // The operator's own setting wins, whichever it is.
        assert_eq!(choose_bundle(|k| k == "SSL_CERT_FILE", |_| true), None);
        assert_eq!(choose_bundle(|k| k == "SSL_CERT_DIR", |_| true), None);
    }

    /// The claim the choice rests on, checked on this host: the bundle alone holds every root
    /// the default search (bundle and directories) finds.
    #[test]
    fn the_bundle_alone_holds_every_root_the_default_search_finds() {
        if ["SSL_CERT_FILE", "SSL_CERT_DIR"]
            .iter()
            .any(|k| std::env::var_os(k).is_some())
        {
            eprintln!("SKIPPED: SSL_CERT_FILE or SSL_CERT_DIR is set, so no default search here");
            return;
        }
        let Some(bundle) = choose_bundle(|_| false, |p| Path::new(p).is_file()) else {
            eprintln!("SKIPPED: none of {BUNDLES:?} exists on this host");
            return;
        };
        let default = rustls_native_certs::load_native_certs();
        let alone = rustls_native_certs::load_certs_from_paths(Some(Path::new(bundle)), None);
        assert!(alone.errors.is_empty(), "{bundle}: {:?}", alone.errors);
        assert!(!alone.certs.is_empty(), "{bundle} holds no certificate");
        let alone: std::collections::HashSet<_> = alone.certs.into_iter().collect();
        let missing = default.certs.iter().filter(|c| !alone.contains(*c)).count();
        assert_eq!(
            missing,
            0,
            "{missing} of the {} roots the default search finds are not in {bundle}",
            default.certs.len()
        );
    }
}
