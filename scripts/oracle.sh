#!/usr/bin/env bash
# oracle.sh - does llama.cpp accept and run the models `moestream mkmodel`
# writes? For every weight format, as routed-expert type and as dense type,
# and for the tiny and small presets, generate a model and run
# tests/oracle/check_load.mjs on it (llama.cpp through node-llama-cpp 3.22.1,
# CPU, F32 KV cache: see tests/data/oracle/README.md). One line per model,
# then "N passed, N failed"; exit status 1 if any failed.
#
# usage: scripts/oracle.sh path/to/moestream
# env:   ORACLE_DIR      node-llama-cpp install dir (default ~/.cache/moestream/oracle);
#                        installed there with npm if absent (nothing else is downloaded)
#        ORACLE_PRESETS  presets to try (default "tiny small")
#        ORACLE_TYPES    formats to try (default: all twelve below)
#        ORACLE_KEEP=1   keep the generated models and logs (path printed at the end)
#        ORACLE_TIMEOUT  seconds allowed per model check (default 300)
set -u

BIN=${1:-}
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
    echo "usage: $0 path/to/moestream" >&2
    exit 2
fi
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ORACLE_DIR=${ORACLE_DIR:-$HOME/.cache/moestream/oracle}
PRESETS=${ORACLE_PRESETS:-tiny small}
TYPES=${ORACLE_TYPES:-f32 f16 bf16 q8_0 q6_K q5_K q4_K q3_K q2_K iq4_xs iq2_xxs mxfp4}
TIMEOUT=${ORACLE_TIMEOUT:-300}
NLC_VERSION=3.22.1

# ---- node-llama-cpp ----------------------------------------------------------
if ! command -v node >/dev/null || ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
    echo "oracle: node >= 20 is required" >&2
    exit 2
fi
installed=$(node -p "try { require('$ORACLE_DIR/node_modules/node-llama-cpp/package.json').version } catch (e) { '' }" 2>/dev/null)
if [ "$installed" != "$NLC_VERSION" ]; then
    echo "oracle: installing node-llama-cpp@$NLC_VERSION into $ORACLE_DIR (npm)"
    mkdir -p "$ORACLE_DIR" || exit 2
    [ -f "$ORACLE_DIR/package.json" ] ||
        echo '{"name": "moestream-oracle", "private": true}' >"$ORACLE_DIR/package.json"
    # --ignore-scripts: the package's postinstall may fetch or build llama.cpp;
    # the prebuilt CPU binary of @node-llama-cpp/linux-x64 comes with npm.
    (cd "$ORACLE_DIR" && npm install --no-audit --no-fund --ignore-scripts --save-exact \
        "node-llama-cpp@$NLC_VERSION") || { echo "oracle: npm install failed" >&2; exit 2; }
fi
export ORACLE_DIR

# ---- the model matrix --------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/moestream-oracle.XXXXXX") || exit 2
cleanup() { [ "${ORACLE_KEEP:-0}" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

help=$("$BIN" mkmodel --help 2>&1 || true)
# name|mkmodel options, one per line: each format as routed-expert type with
# F32 dense weights, then each as dense type with F32 experts.
matrix() {
    for t in $TYPES; do echo "experts=$t,dense=f32|--experts-type $t --dense-type f32"; done
    for t in $TYPES; do
        [ "$t" = f32 ] && continue
        echo "experts=f32,dense=$t|--experts-type f32 --dense-type $t"
    done
    # Extra variants, when this mkmodel has them.
    case $help in *--ds4-mix*) echo "ds4-mix|--ds4-mix" ;; esac
    case $help in *--f32-twin*) echo "experts=q4_K,dense=q8_0,f32-twin|--experts-type q4_K --dense-type q8_0 --f32-twin" ;; esac
}

pass=0
fail=0
failed_names=()
for preset in $PRESETS; do
    while IFS='|' read -r name opts; do
        label="$preset $name"
        model="$WORK/${preset}_${name//[,=]/_}.gguf"
        log="$WORK/${preset}_${name//[,=]/_}.log"
        # shellcheck disable=SC2086
        if ! "$BIN" mkmodel --preset "$preset" $opts --seed 1 --force -o "$model" >"$log" 2>&1; then
            printf 'FAIL  %-40s mkmodel: %s\n' "$label" "$(tail -n 1 "$log")"
            fail=$((fail + 1))
            failed_names+=("$label")
            continue
        fi
        size=$(du -m "$model" | cut -f1)
        timeout "$TIMEOUT" node "$ROOT/tests/oracle/check_load.mjs" "$model" >>"$log" 2>&1
        rc=$?
        result=$(grep '^RESULT ' "$log" | tail -n 1)
        [ -n "$result" ] || result="RESULT FAIL check exited with status $rc (see log)"
        if [ $rc -eq 0 ] && [ "${result#RESULT PASS}" != "$result" ]; then
            printf 'PASS  %-40s %4s MB  %s\n' "$label" "$size" "${result#RESULT PASS }"
            pass=$((pass + 1))
            if [ "$name" = "experts=f32,dense=f32" ]; then
                grep -E '^  (ids|pieces|texts):' "$log" | sed 's/^/      /'
            fi
        else
            printf 'FAIL  %-40s %4s MB  %s\n' "$label" "$size" "${result#RESULT FAIL }"
            # llama.cpp's own words, verbatim: the part that matters for a fix.
            sed -n '/^llama.cpp log:/,/^RESULT/p' "$log" | grep -v '^RESULT' | head -n 20 | sed 's/^/      /'
            fail=$((fail + 1))
            failed_names+=("$label")
        fi
        [ "${ORACLE_KEEP:-0}" = 1 ] || rm -f "$model"
    done < <(matrix)
done

echo "$pass passed, $fail failed"
[ "${ORACLE_KEEP:-0}" = 1 ] && echo "models and logs kept in $WORK"
[ $fail -eq 0 ]
