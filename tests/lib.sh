# lib.sh - the common start of the tests/cli_*.sh integration tests, which
# are run as `bash tests/cli_X.sh BIN TMPDIR` and source this file first:
#   . "$(dirname "$0")/lib.sh"
# It sets -u, BIN (the moestream binary) and TMP (a scratch directory, made
# here) from the script's arguments, SRC (the repository root), and gives:
#   fail MSG...              count a failure, print "FAIL: MSG"
#   check WHAT 'COMMAND'     eval COMMAND; print "ok: WHAT" or count a failure
#   tiny_model OUT ARGS...   mkmodel --preset tiny ARGS -o OUT, or stop (exit 1)
#   nan_model IN OUT         a copy of GGUF IN whose last quarter of bytes is 0xff
#                            (NaN weights behind a header that still loads)
#   finish NAME              "NAME: all passed" if nothing failed; exit 0 or 1
set -u
BIN=$1 TMP=$2
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$TMP"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check() { if ! eval "$2"; then fail "$1"; else echo "ok: $1"; fi; }
tiny_model() {
    local out=$1; shift
    "$BIN" mkmodel --preset tiny "$@" --force -o "$out" 2>/dev/null || { echo "FAIL: mkmodel"; exit 1; }
}
nan_model() {
    python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); n = len(b); b[n * 3 // 4:] = b"\xff" * (n - n * 3 // 4); open(sys.argv[2], "wb").write(b)' "$1" "$2"
}
finish() {
    [ $fails -eq 0 ] && echo "$1: all passed"
    exit $((fails > 0))
}
