.PHONY: run test fmt lint conformance tools bench

# The embedded server on 127.0.0.1 (see README for flags).
run:
	cargo run --release -p mcp-tasks -- serve

# The one test command: fmt check, clippy, cargo test, conformance.
test:
	bash scripts/test.sh

fmt:
	cargo fmt --all

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

conformance:
	bash tests/conformance/run.sh

tools:
	bash scripts/install-tools.sh

# Side by side with the Python reference (fastmcp-tasks): tasks/get throughput, drain, memory.
bench:
	bash bench/run.sh
