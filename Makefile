# topdeck: `make demo` shows it working on this host; `make test` runs every test.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test deps build lint unit syscalls fuzz bench

demo: build
	scripts/demo.sh

test: deps lint unit syscalls fuzz

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

# Every parser of untrusted bytes, coverage-guided, 6 s each (fuzz/README.md).
fuzz:
	scripts/fuzz.sh

bench:
	$(CARGO) bench -p topdeck-bench
