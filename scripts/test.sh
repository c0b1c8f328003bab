#!/usr/bin/env bash
# make test's cargo part: every test binary, the slow one beside the others.
#
# Most integration tests wait (on a kubelet's loops, an API server, a container) far
# more than they compute, so each binary runs 6 tests at a time on 2 cores
# (RUST_TEST_THREADS overrides it). real_bootstrap is mostly one wait, a client
# certificate's 4-minute lifetime running out: it runs beside the other binaries, its
# output kept in a file and printed after theirs. Everything is built first, so the
# two cargo runs never wait on each other's build lock.
#
# Where the package checks follow (CI, or PACKAGING=1), their release binary (LTO,
# one codegen unit: minutes of one core) builds beside the tests too, at the lowest
# priority: it takes only the CPU the waiting tests leave, and package.sh finds it
# built. It has its own profile and target folder, so no build lock is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo="${CARGO:-cargo}"
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-6}"
apart=real_bootstrap

"$cargo" test --no-run

# Cargo finds integration tests as tests/<name>.rs and tests/<name>/main.rs.
targets=()
for f in tests/*.rs tests/*/main.rs; do
  name=$(basename "${f%/main.rs}" .rs)
  [ "$name" = "$apart" ] || targets+=(--test "$name")
done

log=$(mktemp "${TMPDIR:-/tmp}/litelet-$apart.XXXXXX")
dist_log=$(mktemp "${TMPDIR:-/tmp}/litelet-dist.XXXXXX")
trap 'rm -f "$log" "$dist_log"' EXIT
"$cargo" test --no-fail-fast --test "$apart" >"$log" 2>&1 &
apart_pid=$!

dist_pid=
case "${CI:-}/${PACKAGING:-}" in
  true/* | 1/* | */1)
    nice -n 19 ./scripts/package.sh static >"$dist_log" 2>&1 &
    dist_pid=$!
    ;;
esac

status=0
"$cargo" test --no-fail-fast --lib --bins "${targets[@]}" || status=$?
"$cargo" test --no-fail-fast --doc || status=$?

# Waits for a job started beside the tests, prints its log under a title and
# marks the run failed if the job failed.
report_beside() {
  local title=$1 pid=$2 job_log=$3 job_status=0
  wait "$pid" || job_status=$?
  echo
  echo "=== $title ==="
  cat "$job_log"
  if [ "$job_status" -ne 0 ]; then
    echo "$title: failed (exit $job_status)" >&2
    status=1
  fi
}
report_beside "tests/$apart.rs (ran beside the binaries above)" "$apart_pid" "$log"
if [ -n "$dist_pid" ]; then
  report_beside "the release binary for the package checks (built beside the tests)" \
    "$dist_pid" "$dist_log"
fi
exit "$status"
