#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 10), one after the other, on the
# stable toolchain: libFuzzer through cargo fuzz without a sanitizer (`-s none`, which needs
# no nightly), optimised, with debug assertions and overflow checks on. Each target starts
# from its committed corpus in fuzz/corpus/<target>; new inputs go to a scratch copy, so a
# short run leaves the committed corpus as it is (pass KEEP=1 to grow it in place). A crash
# fails the script and leaves its input under fuzz/artifacts/<target>/.
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-10}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
cargo fuzz build -s none -O -a
for t in "${targets[@]}"; do
    corpus="corpus/$t"
    if [ -z "${KEEP:-}" ]; then
        work="$(mktemp -d)"
        cp -r "$corpus/." "$work/"
        corpus="$work"
    fi
    echo "== fuzz $t for ${secs}s"
    log="$(mktemp)"
    status=0
    cargo fuzz run -s none -O -a "$t" "$corpus" -- -max_total_time="$secs" -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|^Done|panicked|ERROR|SUMMARY' "$log" || true
    [ "$status" -eq 0 ] || tail -40 "$log" >&2
    rm -f "$log"
    [ -n "${KEEP:-}" ] || rm -rf "$work"
    [ "$status" -eq 0 ] || { echo "fuzz/run.sh: $t FAILED (input in fuzz/artifacts/$t)" >&2; exit 1; }
done
