#!/usr/bin/env bash
# record-oracle-vectors.sh - regenerates tests/data/oracle/: llama.cpp's
# next-token probabilities (and greedy continuations) on the tiny test models,
# the reference side of tests/test_diff_llama.c. See
# tests/data/oracle/README.md for what is recorded and why.
#
# For every model: `moestream mkmodel --preset tiny --seed 1 OPTS`, and for a
# quantized one also its --f32-twin; llama.cpp (node-llama-cpp 3.22.1,
# tests/oracle/record_logits.mjs) on the twin is the exact reference, on the
# quantized file the baseline for the fast-mode KL comparison. The sha256 of
# every mkmodel output goes into manifest.json, so the test can tell when a
# regenerated model no longer matches its vectors.
#
# usage: scripts/record-oracle-vectors.sh BUILD_DIR
# env:   ORACLE_DIR  node-llama-cpp install dir (default ~/.cache/moestream/oracle;
#                    installed there with npm if absent, as scripts/oracle.sh does)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
BIN=$(cd "$BUILD" && pwd)/moestream
[ -x "$BIN" ] || { echo "record: $BIN is not built" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/tests/data/oracle
ORACLE_DIR=${ORACLE_DIR:-$HOME/.cache/moestream/oracle}
NLC_VERSION=3.22.1
export ORACLE_DIR ORACLE_THREADS=${ORACLE_THREADS:-2}

# ---- node-llama-cpp (as scripts/oracle.sh) -----------------------------------
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' ||
    { echo "record: node >= 20 is required" >&2; exit 2; }
installed=$(node -p "try { require('$ORACLE_DIR/node_modules/node-llama-cpp/package.json').version } catch (e) { '' }")
if [ "$installed" != "$NLC_VERSION" ]; then
    echo "record: installing node-llama-cpp@$NLC_VERSION into $ORACLE_DIR (npm)"
    mkdir -p "$ORACLE_DIR"
    [ -f "$ORACLE_DIR/package.json" ] ||
        echo '{"name": "moestream-oracle", "private": true}' >"$ORACLE_DIR/package.json"
    (cd "$ORACLE_DIR" && npm install --no-audit --no-fund --ignore-scripts --save-exact \
        "node-llama-cpp@$NLC_VERSION")
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/moestream-oracle-vectors.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
rm -f "$OUT"/*.bin "$OUT"/greedy-*.json

# ---- prompts -----------------------------------------------------------------
node "$ROOT/tests/oracle/record_prompts.mjs" "$OUT/prompts.json" 512 20260401
prompt() { node -p "require('$OUT/prompts.json').prompts['$1'].join(',')"; }
PROMPTS="p1 p20 p400"
# The 2100-token prompt (F32 model only): llama.cpp evaluates every position;
# the file keeps the first 8 and the last 60 (around the 2048 piece boundary).
P2100_POS="0-7,2040-2099"

# ---- models: name|mkmodel options (after --preset tiny --seed 1) -------------
MODELS="f32|--experts-type f32 --dense-type f32
f16-q8_0|--experts-type q8_0 --dense-type f16
q4_K|--experts-type q4_K --dense-type q8_0
q2_K|--experts-type q2_K --dense-type q8_0
iq2_xxs|--experts-type iq2_xxs --dense-type q8_0
mxfp4|--experts-type mxfp4 --dense-type q8_0
ds4-mix|--ds4-mix
q6_K|--experts-type q6_K --dense-type q8_0
q5_K|--experts-type q5_K --dense-type q8_0
q3_K|--experts-type q3_K --dense-type q8_0
iq4_xs|--experts-type iq4_xs --dense-type iq4_xs --tensor-type output=q6_K
k-mix|--experts-type q4_K --dense-type q5_K --tensor-type ffn_down_exps=q6_K --tensor-type output=q6_K --tensor-type attn_kv=q3_K --tensor-type attn_q_b=q6_K --tensor-type ffn_up_shexp=q3_K"
GREEDY_MODELS="f32 q4_K"  # greedy continuations: the F32 model and one twin
N_GREEDY=32

mk() { # OUT.gguf OPTS... -> prints the sha256
    local f=$1; shift
    "$BIN" mkmodel --preset tiny --seed 1 "$@" --force -o "$f" >/dev/null
    sha256sum "$f" | cut -d' ' -f1
}
rec() { # MODEL.gguf PROMPT OUT.bin [POSITIONS]
    node "$ROOT/tests/oracle/record_logits.mjs" "$1" "$(prompt "$2")" "$3" ${4:+"$4"} >/dev/null
    echo "  $(basename "$3")"
}

: >"$WORK/manifest.tsv"
while IFS='|' read -r name opts; do
    echo "record: $name ($opts)"
    # shellcheck disable=SC2086 # opts is a list of words
    sha=$(mk "$WORK/$name.gguf" $opts)
    if [ "$name" = f32 ]; then
        ref="$WORK/$name.gguf"
        twin_sha=
        for p in $PROMPTS; do rec "$ref" "$p" "$OUT/$name.$p.ref.bin"; done
        rec "$ref" p2100 "$OUT/$name.p2100.ref.bin" "$P2100_POS"
    else
        # shellcheck disable=SC2086
        twin_sha=$(mk "$WORK/$name.twin.gguf" $opts --f32-twin)
        ref="$WORK/$name.twin.gguf"
        for p in $PROMPTS; do
            rec "$ref" "$p" "$OUT/$name.$p.ref.bin"
            rec "$WORK/$name.gguf" "$p" "$OUT/$name.$p.llama.bin"
        done
    fi
    case " $GREEDY_MODELS " in *" $name "*)
        node "$ROOT/tests/oracle/record_greedy.mjs" "$ref" "$(prompt p20)" $N_GREEDY \
            "$OUT/greedy-$name.json" >/dev/null
        echo "  greedy-$name.json" ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$opts" "$sha" "$twin_sha" >>"$WORK/manifest.tsv"
    rm -f "$WORK/$name.gguf" "$WORK/$name.twin.gguf"
done <<<"$MODELS"

# ---- manifest ----------------------------------------------------------------
llama_commit=$(node -p "try { require('$ORACLE_DIR/node_modules/node-llama-cpp/llama/binariesGithubRelease.json').release } catch (e) { 'unknown' }")
node - "$WORK/manifest.tsv" "$OUT" "$NLC_VERSION" "$llama_commit" "$N_GREEDY" "$GREEDY_MODELS" "$P2100_POS" <<'JS'
const fs = require("fs");
const [tsv, out, nlc, llamaRelease, nGreedy, greedyModels, p2100Pos] = process.argv.slice(2);
const models = [];
for (const line of fs.readFileSync(tsv, "utf8").split("\n").filter(Boolean)) {
    const [name, opts, sha, twinSha] = line.split("\t");
    const args = ["--preset", "tiny", "--seed", "1", ...opts.split(" ")];
    const m = { name, mkmodel: args, sha256: sha, vectors: [] };
    if (twinSha) m.twin = { mkmodel: [...args, "--f32-twin"], sha256: twinSha };
    for (const p of ["p1", "p20", "p400", "p2100"]) {
        const ref = `${name}.${p}.ref.bin`;
        if (!fs.existsSync(`${out}/${ref}`)) continue;
        const v = { prompt: p, ref };
        if (twinSha) v.llama_quantized = `${name}.${p}.llama.bin`;
        if (p === "p2100") v.stored_positions = p2100Pos;
        m.vectors.push(v);
    }
    if (greedyModels.split(" ").includes(name))
        m.greedy = { prompt: "p20", n: Number(nGreedy), file: `greedy-${name}.json` };
    models.push(m);
}
const manifest = {
    version: 1,
    reference: { package: `node-llama-cpp@${nlc}`, llama_cpp_release: llamaRelease,
                 settings: "CPU, F32 K/V cache, flash attention off, prompt in one decode call" },
    prompts: "prompts.json",
    format: "MSPR v2 (tests/oracle/record_logits.mjs)",
    models,
};
fs.writeFileSync(`${out}/manifest.json`, JSON.stringify(manifest, null, 1) + "\n");
JS
du -sh "$OUT"
echo "record: done; manifest $OUT/manifest.json"
