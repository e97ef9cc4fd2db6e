# oci-nvidia-hook: build, test, demo and benchmark targets.
# `make test` and `make demo` need root: they build simulated GPU hosts with
# mknod and install their own Debian packages (integration/install-deps).

CARGO  ?= cargo
PREFIX ?= /usr/local
BIN    := target/release/oci-nvidia-hook

.PHONY: build test deps demo bench lint install fuzz

build:
	$(CARGO) build --release --locked

deps:
	integration/install-deps

# Unit tests, then the integration tests on simulated hosts (root only).
test: deps
	$(CARGO) test --locked --features _test_as_root

# A real-flavour simulated 4-GPU host (NVIDIA 535 libraries): its inventory,
# then a runc container started through the hook, and what it sees.
demo: build deps
	integration/demo $(BIN)

bench: build deps
	$(CARGO) bench --locked --bench inprocess
	integration/bench-process $(BIN)
	integration/bench-runc $(BIN)

# Every fuzz target for FUZZ_SECONDS each (CI uses 15).
FUZZ_SECONDS ?= 60
fuzz:
	fuzz/run-all $(FUZZ_SECONDS)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets --features _test_as_root -- -D warnings

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/oci-nvidia-hook
	install -D -m 0644 hooks.d/oci-nvidia-hook.json $(DESTDIR)/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json
