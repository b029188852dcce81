#!/usr/bin/env bash
# cli_thread_identity.sh BIN TMPDIR - the logits do not depend on the
# thread count or on how the prompt is fed: `logits --full` at -t 1, 2 and
# 3, one-shot and token by token (--chunk 1, the decode path), fast and
# --quality, on tiny models with Q4_K experts and with ds4's 2-bit mix, are
# byte-identical. The forward pass runs the routed experts three ways
# (whole experts per thread when there are at least two per thread, else
# all of them split by rows in two fused jobs, and one token's experts in
# fused jobs), fuses the projections that share an input, and cuts rows
# into chunks by thread count: every one of those must leave each output
# element the same dot product. A longer prompt (300 tokens: 75 compressed
# rows on the ratio-4 layers, more than the indexer's top-k and than one
# chunk of its rows) checks the decode step's indexer scores, split across
# threads by rows.
. "$(dirname "$0")/lib.sh"

TOK=$(seq -s, 3 2 81) # 40 tokens: a prefill routes to most of the 8 experts
for kind in q4k ds4; do
    M=$TMP/$kind.gguf
    if [ $kind = ds4 ]; then tiny_model "$M" --seed 11 --ds4-mix
    else tiny_model "$M" --seed 12 --experts-type q4_K; fi
    for q in fast quality; do
        qa=""
        [ $q = quality ] && qa=--quality
        ref=$TMP/$kind-$q-ref.json
        "$BIN" logits -m "$M" --tokens "$TOK" --full -t 1 $qa >"$ref" 2>/dev/null ||
            fail "$kind $q: logits -t 1 exit $?"
        check "$kind $q: logits are not empty" "[ -s '$ref' ]"
        for t in 1 2 3; do
            for c in 0 1; do
                ca=""
                [ $c = 1 ] && ca="--chunk 1"
                [ $t = 1 ] && [ $c = 0 ] && continue
                out=$TMP/$kind-$q-t$t-c$c.json
                "$BIN" logits -m "$M" --tokens "$TOK" --full -t $t $qa $ca >"$out" 2>/dev/null ||
                    fail "$kind $q -t $t $ca: exit $?"
                check "$kind $q -t $t ${ca:-one-shot} == -t 1 one-shot" "cmp -s '$ref' '$out'"
            done
        done
    done
done
LONG=$(seq -s, 3 1 302)
M=$TMP/ds4.gguf
"$BIN" logits -m "$M" --tokens "$LONG" --top 3 -t 1 >"$TMP/long-ref.json" 2>/dev/null ||
    fail "long prompt -t 1: exit $?"
for t in 2 3; do
    "$BIN" logits -m "$M" --tokens "$LONG" --top 3 -t $t --chunk 1 >"$TMP/long-$t.json" 2>/dev/null ||
        fail "long prompt -t $t --chunk 1: exit $?"
    check "300 tokens -t $t --chunk 1 == -t 1 one-shot" "cmp -s '$TMP/long-ref.json' '$TMP/long-$t.json'"
done
finish cli_thread_identity
