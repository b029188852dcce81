#!/usr/bin/env bash
# fuzz.sh - run a libFuzzer binary on a copy of the seed corpus.
#
# Usage: scripts/fuzz.sh FUZZER_BINARY SECONDS
# (FUZZ_CORPUS: the seed folder, relative to the repository; FUZZ_DICT: a
# libFuzzer dictionary there, optional; FUZZ_SEED and FUZZ_RUNS: a fixed
# random seed and a number of inputs, which make a run repeatable - CI's
# smoke runs use them, so that a finding there is found again by the same
# command, and a red CI is never a matter of luck)
#
# The seeds in tests/fuzz/corpus/ are copied into a temporary work directory
# (outside the source tree, so the grown corpus never lands in git); libFuzzer
# runs for SECONDS with inputs up to 64 KiB and a 2 GiB RSS limit. Prints the
# final statistics (number of executions). Exits non-zero on a finding, and
# then keeps the work directory and names the crashing input.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 FUZZER_BINARY SECONDS" >&2
    exit 2
fi
bin=$(realpath "$1")
secs=$2
root=$(cd "$(dirname "$0")/.." && pwd)
seeds=${FUZZ_CORPUS:+$root/$FUZZ_CORPUS}
seeds=${seeds:-$root/tests/fuzz/corpus}

work=$(mktemp -d "${TMPDIR:-/tmp}/ms-fuzz.XXXXXX")
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
log=$work/fuzz.log

echo "fuzz: $bin for ${secs}s, work dir $work"
set +e
"$bin" "$work/corpus" \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 ${FUZZ_DICT:+-dict="$root/$FUZZ_DICT"} \
    ${FUZZ_SEED:+-seed="$FUZZ_SEED"} ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$log" 2>&1
rc=$?
set -e

grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb):' "$log" || true
grep -E '^Done [0-9]+ runs' "$log" || true
if [ $rc -ne 0 ] || ls "$work/artifacts/" | grep -q .; then
    echo "fuzz: FINDING (exit $rc); log and inputs kept in $work" >&2
    # the harness's own message, the sanitizer's report and the stack: the
    # log's tail past libFuzzer's progress lines
    grep -vE '^(#[0-9]+|INFO:|MS:|stat::)' "$log" | tail -n 60 >&2
    for f in "$work"/artifacts/*; do
        [ -f "$f" ] || continue
        echo "fuzz: input $(basename "$f") ($(stat -c %s "$f") bytes), base64:" >&2
        head -c 4096 "$f" | base64 >&2
    done
    exit 1
fi
echo "fuzz: no finding; corpus grew to $(ls "$work/corpus" | wc -l) inputs"
rm -rf "$work"
