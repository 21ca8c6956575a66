# topdeck: `make demo` shows it working on this host; `make test` runs every test.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test deps deps-demo build install lint unit python c java go syscalls fuzz conformance languages deploy bench

PREFIX ?= /usr/local

demo: build
	scripts/demo.sh

# Every test, one target after another, then the time each took. Without
# incremental compilation: a first build (CI's, a clean clone's) only pays
# for its caches.
test:
	@CARGO_INCREMENTAL=0 MAKE="$(MAKE)" scripts/timed.sh deps lint unit python c java go syscalls fuzz conformance languages deploy

# What the tests need (everything); deps-demo only what the demo builds and shows.
deps:
	@scripts/deps.sh

deps-demo:
	@scripts/deps.sh demo

# What the demo runs and `install` installs, and nothing else (the bench
# crate's anchors, the tests' helpers): the first command's build is the
# longest part of it. scripts/build.sh overlaps its first steps (packages,
# crates, the Go example's build cache), which mostly wait on the network.
build:
	@CARGO="$(CARGO)" scripts/build.sh

# The binary, its manual page and shell completions (DESTDIR for packaging).
# topdeck-lab, the interference lab, is built beside it and not installed.
install: build
	install -D -m 0755 target/release/topdeck $(DESTDIR)$(PREFIX)/bin/topdeck
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	target/release/topdeck man --dir $(DESTDIR)$(PREFIX)/share/man/man1
	target/release/topdeck completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/topdeck
	target/release/topdeck completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_topdeck
	target/release/topdeck completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/topdeck.fish

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Integration tests run the workspace's binaries, so build them first.
unit:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace

# The Python binding (bindings/python): pytest in a cached venv, read by the Rust CLI.
python:
	scripts/python-test.sh

# libtopdeck for C: its tests under ASan+UBSan, the header check, the C
# example read by `topdeck`, the conformance drivers, install (bindings/c/README.md).
c:
	$(MAKE) -C bindings/c test

# The Java binding (bindings/java): built with javac and jar, tests on JDK 22+ and 17, read by the Rust CLI.
java:
	bindings/java/test.sh

# The Go module (bindings/go): pure Go, vetted, tested under -race, its
# example read by `topdeck` (bindings/go/README.md).
go:
	scripts/go-test.sh

# Rust, C, Python, Java and Go services side by side in ls, top and serve.
# It builds what it runs (nothing, after unit and c) rather than depending
# on those targets, which would run their tests again under scripts/timed.sh.
languages:
	$(CARGO) build --workspace --bins
	$(MAKE) -C bindings/c all
	tests/languages.py

syscalls:
	scripts/syscalls.sh

# Every parser of untrusted bytes, coverage-guided, 6 s each (fuzz/README.md).
fuzz:
	scripts/fuzz.sh

# Every implementation's writer against every reader, the hostile corpus
# and the reference vector (conformance/README.md); then the runner's own
# test: a vector with one flipped word must fail it.
conformance:
	CARGO=$(CARGO) python3 conformance/run.py
	python3 conformance/run.py --no-build --self-test

# deploy/: Prometheus rules (checked and unit-tested by promtool), scrape
# configs, systemd units, the Kubernetes manifest (docs/DEPLOY.md).
deploy:
	scripts/deploy-check.sh

bench:
	$(CARGO) bench -p topdeck-bench
