# topdeck: `make demo` shows it working on this host; `make test` runs every test.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test deps build lint unit syscalls bench

demo: build
	scripts/demo.sh

test: deps lint unit syscalls

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Integration tests run the workspace's binaries, so build them first.
unit:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace

syscalls:
	scripts/syscalls.sh

bench:
	$(CARGO) bench -p topdeck-bench
