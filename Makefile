# litelet: the two commands are `make demo` (the main job) and `make test`.
# Builds reuse CARGO_TARGET_DIR when set (CI keeps one under ~/.cache).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all deps build release test lint lint-if-available fmt clean demo \
	static deb rpm package-check package-check-if-enabled bench conformance \
	conformance-quick-if-enabled vm vm-if-enabled

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	$(CARGO) build

release: deps
	$(CARGO) build --release

# The main job: a private containerd, litelet standalone with a static pod (init +
# sidecar + main), a manifest edit, and a clean shutdown. Needs root.
demo: deps
	./scripts/demo.sh

# Unit and integration tests (scripts/test.sh: 6 tests at a time per binary, the
# certificate-rotation binary beside the others); the real-containerd tests run as
# root and are mandatory when CI=true (they skip loudly otherwise). The package checks
# (package-check: static binary, deb, rpm; about 15-25 more minutes cold, a few
# warm) are mandatory too when CI=true or CI=1, and run when PACKAGING=1; otherwise
# they are skipped with a message.
test: deps lint-if-available
	CARGO="$(CARGO)" ./scripts/test.sh
	@$(MAKE) --no-print-directory conformance-quick-if-enabled
	@$(MAKE) --no-print-directory package-check-if-enabled
	@$(MAKE) --no-print-directory vm-if-enabled

# CI runs the quick node-conformance subset (admission, volumes, pod lifecycle: 144
# specs, about 3 minutes) on every run; the full suite is `make conformance`.
conformance-quick-if-enabled:
	@if [ "$$CI" = true ] || [ "$$CI" = 1 ] || [ "$$CONFORMANCE" = 1 ]; then \
		LITELET_CONFORMANCE_QUICK=1 ./scripts/conformance.sh; \
	else echo; \
		echo "*** SKIPPED make test: the quick node-conformance subset not run;"; \
		echo "*** set CONFORMANCE=1 (or CI=true, where it is mandatory) to run it ***"; \
		echo; fi

package-check-if-enabled:
	@if [ "$$CI" = true ] || [ "$$CI" = 1 ] || [ "$$PACKAGING" = 1 ]; then \
		$(MAKE) --no-print-directory package-check; \
	else echo; \
		echo "*** SKIPPED make test: package checks (static binary, deb, rpm) not run;"; \
		echo "*** set PACKAGING=1 (or CI=true, where they are mandatory) to run them ***"; \
		echo; fi

# The VM tier after the packages: litelet's .deb on a Debian VM with systemd and
# cgroup v2 (tests/vm_node.rs), mandatory in CI, run with VM=1 otherwise.
vm-if-enabled:
	@if [ "$$CI" = true ] || [ "$$CI" = 1 ] || [ "$$VM" = 1 ]; then \
		LITELET_DEB=$$(ls "$$(./scripts/package.sh target-dir)"/packages/litelet_*_amd64.deb | head -n 1) \
			./scripts/vm-tier.sh; \
	else echo; \
		echo "*** SKIPPED make test: the VM tier (systemd, cgroup v2, the .deb) not run;"; \
		echo "*** set VM=1 (or CI=true, where it is mandatory) to run it ***"; \
		echo; fi

# Benchmarks: the release binary against the fake CRI and API server (and
# a private containerd as root); prints a table, writes bench-results.json. About 10
# minutes, plus the first release build. `make bench ONLY="resize scale"` runs some.
# EVENTS=1: the private containerd is 1.7, which streams container events
# (scripts/containerd-with-events.sh), instead of Debian 12's 1.6.
bench: deps
	@assets="$${KUBEBUILDER_ASSETS:-}"; \
	if [ -z "$$assets" ] && [ -f ../shared/k8s-assets/unpack.sh ]; then \
		assets=$$(bash ../shared/k8s-assets/unpack.sh "$$HOME/.cache/k8s-assets" | tail -n 1); fi; \
	if [ "$(EVENTS)" = 1 ]; then PATH="$$(./scripts/containerd-with-events.sh):$$PATH"; fi; \
	KUBEBUILDER_ASSETS="$$assets" PATH="$$PATH" $(CARGO) bench --bench litelet -- $(ONLY)

# Upstream's node-conformance suite (the [NodeConformance] specs of the v1.36 e2e
# suite) against litelet on a real control plane; about 17 minutes, needs root.
# Fails on any failed spec not in tests/node-conformance/environmental-failures.txt.
conformance: deps
	./scripts/conformance.sh

# The VM tier alone: builds the .deb, boots a Debian VM (systemd, cgroup v2,
# containerd) under QEMU and joins it with kubeadm; needs root, about 15 minutes.
vm: deps
	./scripts/vm-tier.sh

# A static x86_64 binary (glibc static-pie, stripped) in
# $(CARGO_TARGET_DIR)/x86_64-unknown-linux-gnu/dist/litelet; file and ldd checked.
static: deps
	./scripts/package.sh static

# Packages in $(CARGO_TARGET_DIR)/packages, from the static binary.
deb: static
	./scripts/package.sh deb

rpm: static
	./scripts/package.sh rpm

# lintian, dpkg -i into a temp root and litelet --version from it, rpm -qpl,
# systemd-analyze verify, the static binary running a pod (one kubelet_e2e test).
package-check: deb rpm
	./scripts/package.sh check

# rustfmt and clippy are rustup components a bare toolchain may lack: lint when present.
lint-if-available:
	@if $(CARGO) fmt --version >/dev/null 2>&1 && $(CARGO) clippy --version >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory lint; \
	else echo "make test: rustfmt/clippy not installed, lint skipped"; fi

# The doc check (broken intra-doc links, links to private items) takes seconds warm.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --lib

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
