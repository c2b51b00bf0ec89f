//! The functions' logging: what `lambda_runtime`'s `init_default_subscriber` sets up (Lambda's
//! advanced logging controls, `RUST_LOG`, text or JSON lines on stdout), with a filter that
//! needs no regular expressions.
//!
//! `init_default_subscriber` filters with `tracing-subscriber`'s `EnvFilter`, whose span and
//! field directives bring two regex engines into every function: ~0.25 MB of each arm64 binary
//! (`regex-automata` and `regex-syntax` with their Unicode tables), in functions that never
//! match a pattern otherwise (the mcp function's schema engine has its own). [`Targets`] reads
//! the same `target=level` directives, which is what operators set.
//!
//! # The level
//!
//! - `AWS_LAMBDA_LOG_LEVEL` (set by Lambda's advanced logging controls: `TRACE`, `DEBUG`,
//!   `INFO`, `WARN`, `ERROR`, `FATAL`) is the default level; `FATAL` is `error`, the highest
//!   there is here (`init_default_subscriber` read it as `info`).
//! - Otherwise a bare level among `RUST_LOG`'s directives (`RUST_LOG=debug`), otherwise `info`.
//! - `RUST_LOG`'s `target=level` directives (`mcp_tasks_core=debug,aws_smithy_runtime=warn`)
//!   apply to their targets in either case.
//! - A directive that cannot be read, or that filters on spans or fields (`foo[span]=debug`,
//!   which only `EnvFilter` knows), is left out and named in one warning after start-up: the
//!   rest still applies, as `EnvFilter::from_env_lossy` did.

use std::str::FromStr as _;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs the process's logger (see the module's doc): plain text lines (no colour codes:
/// they end up in CloudWatch, not on a terminal) without a time (Lambda stamps each line) and
/// without the target, or JSON objects when `AWS_LAMBDA_LOG_FORMAT=JSON`. Call it once, first
/// thing on the runtime.
pub fn init_logging() {
    let env = |k: &str| std::env::var(k).ok();
    let (filter, ignored) = log_filter(env);
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time()
        .with_ansi(false)
        .with_writer(std::io::stdout);
    let json = env("AWS_LAMBDA_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if json {
        registry.with(fmt.json()).try_init()
    } else {
        registry.with(fmt).try_init()
    };
    if installed.is_ok() && !ignored.is_empty() {
        tracing::warn!(
            directives = %ignored.join(","),
            "RUST_LOG directives left out (unreadable, or filtering on spans or fields)"
        );
    }
}

/// The filter `env` (a lookup of the environment) asks for, and the `RUST_LOG` directives it
/// leaves out.
fn log_filter(env: impl Fn(&str) -> Option<String>) -> (Targets, Vec<String>) {
    let lambda_level = env("AWS_LAMBDA_LOG_LEVEL").and_then(|l| match l.trim() {
        l if l.eq_ignore_ascii_case("fatal") => Some(LevelFilter::ERROR),
        l => LevelFilter::from_str(l).ok(),
    });
    let mut level = None;
    let mut filter = Targets::new();
    let mut ignored = Vec::new();
    for directive in env("RUST_LOG").iter().flat_map(|v| v.split(',')) {
        let directive = directive.trim();
        if directive.is_empty() {
            continue;
        }
        if let Ok(bare) = LevelFilter::from_str(directive) {
            level = Some(bare);
            continue;
        }
        // Left to `Targets` alone, `foo[{bar}]=debug` would drop its fields and apply to all
        // of `foo`, and `=debug` would name the empty target, a prefix of every target.
        let parsed = (!directive.contains(['[', '{']) && !directive.starts_with('='))
            .then(|| Targets::from_str(directive).ok())
            .flatten();
        match parsed {
            Some(one) => {
                for (target, level) in one.iter() {
                    filter = filter.with_target(target.to_owned(), level);
                }
            }
            None => ignored.push(directive.to_owned()),
        }
    }
    let filter = filter.with_default(lambda_level.or(level).unwrap_or(LevelFilter::INFO));
    (filter, ignored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn filter(vars: &[(&str, &str)]) -> (Targets, Vec<String>) {
        log_filter(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn info_unless_told() {
        let (f, ignored) = filter(&[]);
        assert!(f.would_enable("mcp_tasks_core::engine", &Level::INFO));
        assert!(!f.would_enable("mcp_tasks_core::engine", &Level::DEBUG));
        assert!(ignored.is_empty());
    }

    #[test]
    fn lambdas_level_is_the_default_and_rust_log_targets_still_apply() {
        let (f, _) = filter(&[
            ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
            ("RUST_LOG", "debug,mcp_tasks_core=trace"),
        ]);
        assert!(!f.would_enable("aws_smithy_runtime", &Level::INFO));
        assert!(f.would_enable("aws_smithy_runtime", &Level::WARN));
        assert!(f.would_enable("mcp_tasks_core::worker", &Level::TRACE));
        let (f, _) = filter(&[("AWS_LAMBDA_LOG_LEVEL", "FATAL")]);
        assert!(f.would_enable("x", &Level::ERROR));
        assert!(!f.would_enable("x", &Level::WARN));
    }

    #[test]
    fn rust_log_alone_sets_level_and_targets() {
        let (f, ignored) = filter(&[("RUST_LOG", " warn , mcp_tasks_core::auth=debug ")]);
        assert!(f.would_enable("mcp_tasks_core::auth::jwks", &Level::DEBUG));
        assert!(!f.would_enable("mcp_tasks_core::engine", &Level::INFO));
        assert!(f.would_enable("mcp_tasks_core::engine", &Level::WARN));
        assert!(ignored.is_empty(), "{ignored:?}");
    }

    #[test]
    fn unreadable_and_span_directives_are_left_out_and_named() {
        let (f, ignored) = filter(&[
            ("AWS_LAMBDA_LOG_LEVEL", "loud"),
            (
                "RUST_LOG",
                "hyper=bogus,foo[span{id=1}]=debug,=debug,mcp_tasks_core=debug,,==",
            ),
        ]);
        assert_eq!(
            ignored,
            ["hyper=bogus", "foo[span{id=1}]=debug", "=debug", "=="]
        );
        assert!(f.would_enable("mcp_tasks_core", &Level::DEBUG));
        assert!(
            f.would_enable("hyper", &Level::INFO),
            "an unknown level falls back to info"
        );
        assert!(!f.would_enable("hyper", &Level::DEBUG));
    }
}
