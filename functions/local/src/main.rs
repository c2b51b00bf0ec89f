//! `mcp-tasks serve`: the whole system in one process on 127.0.0.1.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use mcp_tasks_core::local::{self, LocalOptions, ToolSet};

#[derive(Parser)]
#[command(
    name = "mcp-tasks",
    version,
    about = "A durable MCP task server (MCP 2026-07-28, SEP-2663 tasks)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the MCP endpoint, the task endpoints and the worker in one process.
    Serve {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        /// Where tasks are stored (they survive restarts).
        #[arg(long, default_value = ".mcp-tasks")]
        data_dir: PathBuf,
        /// Serve the official conformance suite's fixture tools instead of the built-in ones.
        #[arg(long, value_enum)]
        fixtures: Option<Fixtures>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Fixtures {
    Conformance,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve {
        listen,
        data_dir,
        fixtures,
    } = Cli::parse().command;
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "refusing to listen on {listen}: without authentication the server binds to loopback only"
        );
    }
    let mut opts = LocalOptions::new(listen, data_dir);
    if fixtures.is_some() {
        opts.tools = ToolSet::Conformance;
    }
    let server = local::start(opts).await?;
    let url = server.url();
    println!("mcp-tasks listening on {url}");
    println!("Add it to Claude Code with:\n  claude mcp add --transport http mcp-tasks {url}");
    server.run_until(stop_signal()).await;
    Ok(())
}

/// Ctrl-C, or SIGTERM (what service managers and container runtimes send).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
