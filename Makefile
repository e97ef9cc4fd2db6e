# oci-nvidia-hook: build, test, demo and benchmark targets.
# `make test` and `make demo` need root: they build simulated GPU hosts with
# mknod and install their own Debian packages (integration/install-deps).

CARGO  ?= cargo
PREFIX ?= /usr/local
BIN    := target/release/oci-nvidia-hook
DEMO   := integration/out/demo

.PHONY: build test deps demo bench lint install

build:
	$(CARGO) build --release --locked

deps:
	integration/install-deps

# Unit tests, then the integration tests on simulated hosts (root only).
test: deps
	$(CARGO) test --locked --features _test_as_root

# A real-flavour simulated 4-GPU host (NVIDIA 535 libraries), then its inventory.
demo: build deps
	integration/simhost --flavour real --gpus 4 --out $(DEMO)
	@echo; echo "== oci-nvidia-hook info"; echo
	$(BIN) --config $(DEMO)/config.toml info
	@echo; echo "== oci-nvidia-hook list (--device all --capabilities utility,compute)"; echo
	$(BIN) --config $(DEMO)/config.toml list

bench: build deps
	$(CARGO) bench --locked --bench inprocess
	integration/bench-process $(BIN)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets --features _test_as_root -- -D warnings

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/oci-nvidia-hook
