#!/usr/bin/env bash
# cli_perplexity.sh - `moestream perplexity` against llama.cpp's
# llama-perplexity (tests/data/oracle/perplexity.json, recorded by
# scripts/record-perplexity-oracle.sh) on the same tiny models and text:
# F32 weights and --quality on quantized ones match llama.cpp's exact run
# (on the F32 twin) to 1e-4; the default fast mode is no farther from it
# than llama.cpp's own quantized run, plus 1%. Also the chunking and scoring
# (BOS first, the second half of each chunk) against per-position
# probabilities from `moestream logits`, and usage errors.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null && command -v python3 >/dev/null ||
    { echo "FAIL: jq and python3 are needed (scripts/install-deps.sh)"; exit 1; }
ORACLE=$SRC/tests/data/oracle/perplexity.json
head -c 20000 "$SRC/bench/pride-and-prejudice-ch1-19.txt" >"$TMP/text.txt"
ARGS=(-c 128 --chunks 4 -t 2 --json)

for name in $(jq -r '.models | keys[]' "$ORACLE"); do
    read -r -a opts <<<"$(jq -r ".models[\"$name\"].mkmodel" "$ORACLE")"
    "$BIN" mkmodel "${opts[@]}" --force -o "$TMP/$name.gguf" >/dev/null 2>&1 || { fail "mkmodel $name"; continue; }
    if [ "$(sha256sum "$TMP/$name.gguf" | cut -d' ' -f1)" != "$(jq -r ".models[\"$name\"].sha256" "$ORACLE")" ]; then
        fail "$name: mkmodel no longer writes the recorded model (rerun scripts/record-perplexity-oracle.sh)"
        continue
    fi
    "$BIN" perplexity -m "$TMP/$name.gguf" -f "$TMP/text.txt" "${ARGS[@]}" >"$TMP/$name.fast.json" 2>"$TMP/$name.err" &&
        "$BIN" perplexity -m "$TMP/$name.gguf" -f "$TMP/text.txt" "${ARGS[@]}" --quality >"$TMP/$name.exact.json" 2>>"$TMP/$name.err" ||
        { fail "$name: perplexity failed: $(tail -1 "$TMP/$name.err")"; continue; }
    REF=$(jq ".models[\"$name\"].ref.ppl" "$ORACLE")
    LLAMA=$(jq ".models[\"$name\"].llama.ppl" "$ORACLE")
    EXACT=$(jq .ppl "$TMP/$name.exact.json")
    FAST=$(jq .ppl "$TMP/$name.fast.json")
    check "$name: --quality PPL $EXACT is llama.cpp's exact $REF (within 1e-4)" \
        "python3 -c 'import sys; sys.exit(abs($EXACT / $REF - 1) > 1e-4)'"
    check "$name: fast PPL $FAST is no farther from $REF than llama.cpp's own $LLAMA, plus 1%" \
        "python3 -c 'import sys; sys.exit(abs($FAST / $REF - 1) > abs($LLAMA / $REF - 1) + 0.01)'"
done

# the scoring itself: chunk c of the text's tokens with its first token
# replaced by the BOS, -log p of tokens 65..127 under the logits after
# positions 64..126, from `moestream logits` on the same ids
M=$TMP/f32.gguf
"$BIN" logits -m "$M" -t 2 --text "$(cat "$TMP/text.txt")" --top 1 2>/dev/null | jq -c .tokens >"$TMP/ids.json"
check "the PPL is the mean over the chunks' second halves of the CLI's -log p" \
    'python3 - "$BIN" "$M" "$TMP/ids.json" "$TMP/f32.exact.json" <<'"'"'EOF'"'"'
import json, math, subprocess, sys
bin_, model, ids, rep = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
n, chunks, nll = 128, 4, []
assert rep["chunks"] == chunks and rep["tokens_scored"] == chunks * (n - n // 2 - 1)
for c in range(chunks):
    toks = ids[c * n:(c + 1) * n]
    toks[0] = ids[0]  # the BOS
    out = json.loads(subprocess.run([bin_, "logits", "-m", model, "-t", "2", "--quality", "--tokens",
                                     ",".join(map(str, toks)), "--full"], capture_output=True, check=True).stdout)
    part = [-math.log(out["positions"][p]["probs"][toks[p + 1]]) for p in range(n // 2, n - 1)]
    assert abs(math.exp(sum(part) / len(part)) / rep["chunk_ppl"][c] - 1) < 1e-5, (c, rep["chunk_ppl"][c])
    nll += part
assert abs(math.exp(sum(nll) / len(nll)) / rep["ppl"] - 1) < 1e-5
EOF'

# usage and input errors: one line, status 2 (usage) or 1 (input)
"$BIN" perplexity -m "$M" >/dev/null 2>"$TMP/e1"; R1=$?
"$BIN" perplexity -m "$M" -f "$TMP/text.txt" -c 2 >/dev/null 2>"$TMP/e2"; R2=$?
"$BIN" perplexity -m "$M" -f "$TMP/text.txt" --chunks 0 >/dev/null 2>"$TMP/e3"; R3=$?
printf 'too short' >"$TMP/short.txt"
"$BIN" perplexity -m "$M" -f "$TMP/short.txt" -c 128 >/dev/null 2>"$TMP/e4"; R4=$?
"$BIN" perplexity -m "$M" -f "$TMP/missing.txt" >/dev/null 2>"$TMP/e5"; R5=$?
check "no -f, -c 2, --chunks 0: usage errors (2) naming the flag" \
    '[ $R1 = 2 ] && grep -q -- "-f FILE is required" "$TMP/e1" && [ $R2 = 2 ] && grep -q -- "-c must be at least 4" "$TMP/e2" && [ $R3 = 2 ] && grep -q -- "--chunks" "$TMP/e3"'
check "a text shorter than a chunk, a missing file: status 1, one line" \
    '[ $R4 = 1 ] && grep -q "holds [0-9]* tokens with the BOS, fewer than one chunk of -c 128" "$TMP/e4" && [ $R5 = 1 ] && [ "$(wc -l <"$TMP/e5")" = 1 ]'
"$BIN" perplexity -m "$M" -f - -c 64 --chunks 1 <"$TMP/text.txt" >"$TMP/stdin.txt" 2>/dev/null
check "text from standard input; the text report ends with the final estimate" \
    'grep -q "^\[1\][0-9.]*,$" "$TMP/stdin.txt" && grep -q "^Final estimate: PPL = [0-9.]* +/- [0-9.]*$" "$TMP/stdin.txt"'
# ---- KL-divergence mode: q8_0 against its F32 twin (exact math on the
# same stored values), on the first 4 chunks of 128
Q=$TMP/q8_0.gguf
"$BIN" mkmodel $(jq -r '.models["q8_0"].mkmodel' "$ORACLE") --f32-twin --force -o "$TMP/twin.gguf" >/dev/null 2>&1
rm -f "$TMP/ref.kld"
"$BIN" perplexity -m "$TMP/twin.gguf" -f "$TMP/text.txt" "${ARGS[@]}" --kl-base "$TMP/ref.kld" >"$TMP/base.json" 2>"$TMP/kb.err"
"$BIN" perplexity -m "$TMP/twin.gguf" -f "$TMP/text.txt" "${ARGS[@]}" --kl "$TMP/ref.kld" >"$TMP/self.json" 2>>"$TMP/kb.err"
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" "${ARGS[@]}" --kl "$TMP/ref.kld" >"$TMP/kl.json" 2>>"$TMP/kb.err"
check "KL: the reference against itself: 0 but for its f16 rounding, the same top token everywhere" \
    'jq -e ".kld.positions == 252 and .kld.mean < 1e-5 and .kld.same_top == 1 and (.kld.ln_ppl_ratio | fabs) < 1e-6" "$TMP/self.json" >/dev/null'
check "KL: q8_0 against its twin: the mean KL, top agreement and ln PPL ratio of the CLI's full distributions" \
    'python3 - "$BIN" "$Q" "$TMP/twin.gguf" "$TMP/ids.json" "$TMP/kl.json" <<'"'"'EOF2'"'"'
import json, math, subprocess, sys
bin_, q, ref, ids, rep = sys.argv[1], sys.argv[2], sys.argv[3], json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))["kld"]
def probs(model, toks):
    out = subprocess.run([bin_, "logits", "-m", model, "-t", "2", "--tokens", ",".join(map(str, toks)), "--full"],
                         capture_output=True, check=True).stdout
    return [p["probs"] for p in json.loads(out)["positions"]]
n, kls, same, lr = 128, [], 0, []
for c in range(4):
    toks = ids[c * n:(c + 1) * n]
    toks[0] = ids[0]
    pq, pr = probs(q, toks), probs(ref, toks)
    for p in range(n // 2, n - 1):
        kls.append(sum(a * math.log(a / b) for a, b in zip(pr[p], pq[p]) if a > 0))
        same += max(range(len(pq[p])), key=pq[p].__getitem__) == max(range(len(pr[p])), key=pr[p].__getitem__)
        lr.append(math.log(pr[p][toks[p + 1]] / pq[p][toks[p + 1]]))
mean = sum(kls) / len(kls)
assert rep["positions"] == len(kls)
assert abs(rep["mean"] - mean) < 0.02 * mean + 2e-6, (rep["mean"], mean)
assert abs(rep["same_top"] * len(kls) - same) <= 1, (rep["same_top"], same)
assert abs(rep["ln_ppl_ratio"] - sum(lr) / len(lr)) < 1e-5, (rep["ln_ppl_ratio"], sum(lr) / len(lr))
EOF2'
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" -c 64 --chunks 2 -t 2 --kl "$TMP/ref.kld" >/dev/null 2>"$TMP/k1"; K1=$?
head -c 30000 "$SRC/bench/pride-and-prejudice-ch1-19.txt" | tail -c 20000 >"$TMP/other.txt"
"$BIN" perplexity -m "$Q" -f "$TMP/other.txt" "${ARGS[@]}" --kl "$TMP/ref.kld" >/dev/null 2>"$TMP/k2"; K2=$?
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" -c 128 --chunks 5 -t 2 --kl "$TMP/ref.kld" >/dev/null 2>"$TMP/k3"; K3=$?
head -c 200000 "$TMP/ref.kld" >"$TMP/cut.kld"
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" "${ARGS[@]}" --kl "$TMP/cut.kld" >/dev/null 2>"$TMP/k4"; K4=$?
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" --kl-base "$TMP/x.kld" --kl "$TMP/ref.kld" >/dev/null 2>"$TMP/k5"; K5=$?
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" --kl-base "$TMP/no/such/dir/x.kld" >/dev/null 2>"$TMP/k6"; K6=$?
check "KL: another -c, another text, more chunks, a cut file: status 1 naming the difference" \
    '[ $K1 = 1 ] && grep -q "ran with -c 128, this run -c 64" "$TMP/k1" && [ $K2 = 1 ] && grep -q "ran on other tokens" "$TMP/k2" &&
     [ $K3 = 1 ] && grep -q "scored 4 chunks, this run 5" "$TMP/k3" && [ $K4 = 1 ] && grep -q "ends early" "$TMP/k4"'
cp "$TMP/text.txt" "$TMP/keep.txt"
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" --chunks 1 --kl-base "$TMP/keep.txt" >/dev/null 2>"$TMP/k7"; K7=$?
cmp -s "$TMP/keep.txt" "$TMP/text.txt"; KEPT=$?
"$BIN" perplexity -m "$Q" -f "$TMP/text.txt" -c 64 --chunks 1 --kl-base "$TMP/keep.txt" --force >/dev/null 2>&1; K8=$?
check "KL: --kl-base refuses an existing file (it is left as it was), replaces it with --force" \
    '[ $K7 = 1 ] && grep -q "already exists; pass --force" "$TMP/k7" && [ $KEPT = 0 ] && [ $K8 = 0 ] && [ "$(head -c 8 "$TMP/keep.txt")" = MSKLD01 ]'
check "KL: both flags a usage error; an unwritable --kl-base refused before any work" \
    '[ $K5 = 2 ] && grep -q "exclude each other" "$TMP/k5" && [ $K6 = 1 ] && grep -q -- "--kl-base" "$TMP/k6" && [ ! -e "$TMP/x.kld" ]'

# weights holding NaN: an error naming it, never a plausible figure from
# the finite logits alone
nan_model "$M" "$TMP/nan.gguf"
"$BIN" perplexity -m "$TMP/nan.gguf" -f "$TMP/text.txt" -c 64 --chunks 1 >/dev/null 2>"$TMP/e6"; R6=$?
check "NaN weights: status 1 and the reason, no PPL" '[ $R6 = 1 ] && grep -q "a logit is NaN or infinite" "$TMP/e6"'
# special-token text is plain text, as llama-perplexity reads it: three BOS
# strings are many tokens, not three BOS tokens
printf '<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>' >"$TMP/sp.txt"
check "special-token strings in the text are plain text" \
    '[ "$("$BIN" perplexity -m "$M" -f "$TMP/sp.txt" -c 4 --json 2>/dev/null | jq .tokens)" -gt 10 ]'
finish cli_perplexity
