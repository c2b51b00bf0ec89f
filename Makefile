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

# The long fault-injection runs (kill -9/restart cycles, crash points, duplicate delivery,
# cancel-vs-complete races); prints `soak: trials=… lost=… doubled=…`. SOAK_* env vars set
# the counts and SOAK_TIMEOUT the bound (see scripts/soak.sh).
.PHONY: soak
soak:
	bash scripts/soak.sh

# The serverless system locally: moto + table/queue + cargo lambda watch + the SQS mapping.
.PHONY: aws-local
aws-local:
	bash scripts/aws-local.sh

# `sam build` of template.yaml (arm64, through cargo lambda); then `sam deploy --guided`.
.PHONY: sam-build
sam-build:
	bash scripts/sam-build.sh
