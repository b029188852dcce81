#!/usr/bin/env bash
# cli_threads.sh BIN TMPDIR - the default thread count follows the CPU
# affinity mask: under `taskset -c 0` the default (-t 0, or no -t) runs one
# thread, a larger -t runs as asked but warns once on stderr naming the
# mask, -t within the mask does not warn, and --pin-threads runs. Skipped
# (exit 0 with a note) when taskset is missing.
. "$(dirname "$0")/lib.sh"

if ! command -v taskset >/dev/null; then
    echo "cli_threads: taskset not found, skipped"
    exit 0
fi
M=$TMP/tiny.gguf
tiny_model "$M" --seed 3
TEXT=$SRC/bench/pride-and-prejudice-ch1-19.txt
b() { taskset -c 0 "$BIN" bench -m "$M" --prompt-file "$TEXT" --fresh --frontiers 8 --gen-tokens 2 "$@"; }

b -t 0 >"$TMP/t0.out" 2>"$TMP/t0.err" || fail "-t 0 exit $?"
check "-t 0 under taskset -c 0 runs 1 thread" "grep -q ', 1 threads,' '$TMP/t0.out'"
check "-t 0 does not warn" "! grep -q 'exceeds' '$TMP/t0.err'"
b >"$TMP/def.out" 2>/dev/null || fail "no -t exit $?"
check "no -t under taskset -c 0 runs 1 thread" "grep -q ', 1 threads,' '$TMP/def.out'"

b -t 3 >"$TMP/t3.out" 2>"$TMP/t3.err" || fail "-t 3 exit $?"
check "-t 3 runs 3 threads" "grep -q ', 3 threads,' '$TMP/t3.out'"
check "-t 3 warns about the affinity mask" \
    "[ \"\$(grep -c 'exceeds the 1 CPUs this process may run on' '$TMP/t3.err')\" = 1 ]"
b -t 1 >/dev/null 2>"$TMP/t1.err" || fail "-t 1 exit $?"
check "-t 1 does not warn" "! grep -q 'exceeds' '$TMP/t1.err'"

b -t 2 --pin-threads >"$TMP/pin.out" 2>"$TMP/pin.err" || fail "--pin-threads exit $?"
check "--pin-threads runs" "grep -q ', 2 threads,' '$TMP/pin.out'"
"$BIN" bench --help 2>&1 | grep -q -- '--pin-threads' || fail "--pin-threads not in --help"

finish cli_threads
