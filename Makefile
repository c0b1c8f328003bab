# litelet: the two commands are `make demo` (the main job) and `make test`.
# Builds reuse CARGO_TARGET_DIR when set (CI keeps one under ~/.cache).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all deps build release test lint lint-if-available fmt clean demo

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

# Unit and integration tests; the real-containerd tests run as root and are
# mandatory when CI=true (they skip loudly otherwise).
test: deps lint-if-available
	$(CARGO) test --no-fail-fast

# rustfmt and clippy are rustup components a bare toolchain may lack: lint when present.
lint-if-available:
	@if $(CARGO) fmt --version >/dev/null 2>&1 && $(CARGO) clippy --version >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory lint; \
	else echo "make test: rustfmt/clippy not installed, lint skipped"; fi

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
