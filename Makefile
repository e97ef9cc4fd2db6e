# oci-nvidia-hook: build, test, demo and benchmark targets.
# `make test` and `make demo` need root: they build simulated GPU hosts with
# mknod and install their own Debian packages (integration/install-deps).

CARGO  ?= cargo
PREFIX ?= /usr/local
# The shipped binary is static (musl, linked by zig: integration/zigbuild):
# no loader runs before it, so no variable of a runtime's can load code into
# it, and it needs no C library at all. Its one dynamically linked part, the
# helper that loads driver code (probe/, embedded in the binary), links
# against glibc $(GLIBC_FLOOR)'s symbol set, so it runs on every glibc from
# that one up; packaging/build refuses to package one that needs a newer one.
GLIBC_FLOOR := 2.17
TARGET      := x86_64-unknown-linux-musl
BIN         := target/$(TARGET)/release/oci-nvidia-hook
PROBE       := target/probe/x86_64-linux-gnu.$(GLIBC_FLOOR)/oci-nvidia-hook-probe
# The arm64 (Grace) binary, cross-built the same way (integration/zigbuild
# adds the Rust target itself): make deb/rpm package both.
AARCH64_TARGET := aarch64-unknown-linux-musl
AARCH64_BIN    := target/$(AARCH64_TARGET)/release/oci-nvidia-hook
AARCH64_PROBE  := target/probe/aarch64-linux-gnu.$(GLIBC_FLOOR)/oci-nvidia-hook-probe
# systemd and udev read both /usr/lib and /usr/local/lib.
UNITDIR      ?= $(PREFIX)/lib/systemd/system
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
UNITS        := packaging/systemd/oci-nvidia-hook-cdi.service packaging/systemd/oci-nvidia-hook-cdi.path
UDEVRULES    := packaging/udev/90-oci-nvidia-hook-cdi.rules

.PHONY: build build-aarch64 test deps demo bench bench-inprocess bench-process bench-runc bench-rss bench-mask bench-phases bench-cdi bench-docker bench-doctor bench-floor bench-targets bench-ldcache bench-trixie bench-hostile-rss lint install install-units fuzz deb rpm package-docs

build:
	CARGO=$(CARGO) PROBE_GLIBC=$(GLIBC_FLOOR) integration/zigbuild --release --locked --target $(TARGET)

build-aarch64:
	CARGO=$(CARGO) PROBE_GLIBC=$(GLIBC_FLOOR) integration/zigbuild --release --locked --target $(AARCH64_TARGET)

deps:
	integration/install-deps

# Unit tests, then the integration tests on simulated hosts (root only);
# tests/bullseye.rs and tests/arm64.rs run the shipped binaries, so they
# are built first.
test: deps build build-aarch64
	$(CARGO) test --locked --features _test_as_root

# A real-flavour simulated 4-GPU host (NVIDIA 535 libraries): its inventory,
# then a runc container started through the hook, and what it sees.
demo: build deps
	integration/demo $(BIN)

# Every benchmark, one after the other; each also runs alone
# (docs/benchmarks.md). All but bench-inprocess and bench-floor need root: they
# build simulated hosts and start runc containers. Run counts: BENCH_RUNS, BENCH_WARMUP,
# BENCH_RSS_RUNS; bench-runc's matrix: BENCH_GPUS, BENCH_CAPS, BENCH_CGROUPS;
# bench-cdi's Podman starts: BENCH_PODMAN_RUNS, BENCH_CDI_CAPS.
bench: bench-inprocess bench-process bench-runc bench-rss bench-mask bench-phases bench-cdi bench-docker bench-doctor bench-floor bench-ldcache bench-targets bench-trixie bench-hostile-rss

# nvidia-cdi-hook update-ldcache against NVIDIA's fork of ldconfig -r ROOT.
bench-ldcache: build
	integration/bench-ldcache $(BIN)

# Criterion: ldcache parse/write, ELF checks, request parsing, plan building.
bench-inprocess:
	$(CARGO) bench --locked --bench inprocess

# Whole `list` and `info` processes (hyperfine) on 1/8/16-GPU and real hosts.
bench-process: build deps
	integration/bench-process $(BIN)

# What the hook adds to a runc container start, against a no-op hook.
bench-runc: build deps
	integration/bench-runc $(BIN)

# Peak RSS of the hook in runc, and of `list` and `info`.
bench-rss: build deps
	integration/bench-rss $(BIN)

# Peak RSS against image inputs built to amplify what the hook reads, under
# and past each bound, through the prestart hook, the runtime wrapper and
# nvidia-cdi-hook.
bench-hostile-rss: build deps
	integration/bench-hostile-rss $(BIN)

# What masking /proc/driver/nvidia costs (a real host's work that runc on a
# simulated host cannot show): the hook run directly, with and without.
bench-mask: build deps
	integration/bench-mask $(BIN)

# What the hook adds to a runc start from its own exec on (perf scheduler
# events): bench-runc's quantity without runc's noisy work before the hook.
bench-phases: build deps
	integration/bench-phases $(BIN)

# `cdi generate` as a whole process (8 GPUs, against 5 ms), and a Podman
# start with CDI against the hooks.d hook and no GPU, interleaved.
bench-cdi: build deps
	integration/bench-cdi $(BIN)

# docker run with --gpus (the hook as nvidia-container-runtime-hook) and
# with --runtime nvidia (runtime mode), against plain runc, through real
# dockerd and containerd started for the run: BENCH_RUNS, BENCH_BLOCK.
bench-docker: build deps
	integration/bench-docker $(BIN)

# Docker 26 (--gpus all, --device nvidia.com/gpu=all, no GPU) and containerd
# 1.7's CRI (CDIDevices or none) from the trixie root, Docker 28 and containerd
# 2.1's CRI from the sid root: BENCH_RUNS, BENCH_BLOCK.
bench-trixie: deps
	integration/bench-trixie

# Whole `doctor` processes (no --run): the 50 ms target on an 8-GPU host.
bench-doctor: build deps
	integration/bench-doctor $(BIN)

# What any process start costs here, below the hook's own work: an empty
# static process, /bin/true, one more bare exec, the binary's --version, and
# the CPUID instructions (trapped by the hypervisor) in glibc's start-up;
# then the shipped binary's start against a plain `cargo build --release`'s.
bench-floor: build
	$(CARGO) build --release --locked
	integration/bench-floor $(BIN) target/release/oci-nvidia-hook

# Issue 26's two ratios in one run, the binary installed as the packages install it: the
# hook alone in runc at 8 GPUs against NVIDIA's hook + cli (ANCHORS.md's
# figure), and a pass-through wrapper call against runc's own.
bench-targets: build deps
	integration/bench-targets $(BIN)

# Every fuzz target for FUZZ_SECONDS each (CI uses 15).
FUZZ_SECONDS ?= 60
fuzz:
	fuzz/run-all $(FUZZ_SECONDS)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets --features _test_as_root -- -D warnings

# The binary, its hooks.d file, and the links under NVIDIA's names that
# Docker's --gpus (nvidia-container-runtime-hook, looked up on dockerd's
# PATH: restart dockerd afterwards), ctr run --gpus (nvidia-container-cli)
# and hosts set up for NVIDIA's runtime (nvidia-container-runtime) call, and
# nvidia-ctk, which NVIDIA's setup instructions run, and nvidia-cdi-hook,
# which the hooks of CDI specs made by NVIDIA's tools call.
# Do not install over NVIDIA's toolkit: the links would replace its tools,
# and the nvidia-cdi-refresh unit links its refresh units.
COMPAT_NAMES := nvidia-container-runtime-hook nvidia-container-cli nvidia-container-runtime nvidia-ctk nvidia-cdi-hook

# The binary is static: no loader reads LD_PRELOAD and its relatives from
# the environment a runtime hands a hook (the image's, at createContainer),
# so it needs no set-ID bit. See docs/design.md, "A start no image can hijack".
install: build install-units
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/oci-nvidia-hook
	install -D -m 0644 hooks.d/oci-nvidia-hook.json $(DESTDIR)/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json
	for name in $(COMPAT_NAMES); do ln -sf oci-nvidia-hook $(DESTDIR)$(PREFIX)/bin/$$name; done
	for unit in service path; do ln -sf oci-nvidia-hook-cdi.$$unit $(DESTDIR)$(UNITDIR)/nvidia-cdi-refresh.$$unit; done

# The CDI refresh units and udev rule (docs/cdi.md), their binary path
# rewritten from the packages' /usr/bin to $(PREFIX)/bin. Installs files
# only: enabling them is the administrator's (systemctl enable).
install-units:
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(UDEVRULESDIR)
	for f in $(UNITS); do \
	  sed 's|/usr/bin/oci-nvidia-hook|$(PREFIX)/bin/oci-nvidia-hook|g' $$f >$(DESTDIR)$(UNITDIR)/$${f##*/} && \
	  chmod 0644 $(DESTDIR)$(UNITDIR)/$${f##*/} || exit 1; \
	done
	install -m 0644 $(UDEVRULES) $(DESTDIR)$(UDEVRULESDIR)/

# Packages (docs/install.md): oci-nvidia-hook and oci-nvidia-hook-compat,
# staged by packaging/build from packaging/files, into $(PKGOUT). The man
# pages and completions come from the clap definition through an example
# program (clap_mangen and clap_complete are dev-dependencies, never in the
# hook). deb needs dpkg-dev, rpm needs Debian's rpm (integration/install-deps).
PKGDOCS := target/package-docs
PKGOUT  ?= target/packages

package-docs:
	rm -rf $(PKGDOCS)
	$(CARGO) run --locked --quiet --example package-docs -- $(PKGDOCS) >/dev/null

# Each runs packaging/build once per binary: amd64/x86_64, then arm64/aarch64.
deb rpm: build build-aarch64 package-docs
	for pair in $(BIN):$(PROBE) $(AARCH64_BIN):$(AARCH64_PROBE); do \
	  packaging/build --binary $${pair%%:*} --probe $${pair#*:} --glibc-floor $(GLIBC_FLOOR) --docs $(PKGDOCS) --out $(PKGOUT) $@ || exit 1; \
	done
