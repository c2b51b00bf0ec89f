.PHONY: run test fmt lint conformance tools

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
