// check_load.mjs - loads one GGUF in llama.cpp (through node-llama-cpp
// 3.22.1) with the settings that make it a precise reference
// (CPU only, KV cache F32, flash attention off, batch = ubatch >= prompt:
// tests/data/oracle/README.md says why), evaluates a short prompt in one decode call
// and checks that the next-token distribution of every position is sane:
// finite logits of length n_vocab, probabilities that sum to ~1, not flat and
// not degenerate (max prob < 0.999). Prints llama.cpp's tokenization of the
// text. This is a smoke test of "does llama.cpp accept and run our file", not
// a numerical comparison.
//
// usage: node tests/oracle/check_load.mjs MODEL.gguf [--text "..."] [--json]
// env:   ORACLE_DIR (default ~/.cache/moestream/oracle): where node-llama-cpp
//        is installed (scripts/oracle.sh installs it); ORACLE_THREADS (default 1).
// exit:  0 pass, 1 check failed, 2 usage, 3 llama.cpp could not load/run it.
// The last line of stdout is always "RESULT PASS ..." or "RESULT FAIL ...".

import fs from "node:fs";

import { createReferenceContext, entry, getCpuLlama, heldMismatch, loadCpuModel } from "./llama.mjs";

const DEFAULT_TEXT =
    "The quick brown fox, 42 times: def f(x):\n    return x * 2  # 今天 🙂";

function parseArgs(argv) {
    const a = { model: null, text: DEFAULT_TEXT, json: false };
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === "--text" && i + 1 < argv.length) a.text = argv[++i];
        else if (argv[i] === "--json") a.json = true;
        else if (!a.model) a.model = argv[i];
        else return null;
    }
    return a.model ? a : null;
}

const args = parseArgs(process.argv.slice(2));
if (!args) {
    console.error('usage: node check_load.mjs MODEL.gguf [--text "..."] [--json]');
    process.exit(2);
}

if (!fs.existsSync(entry)) {
    console.log(`RESULT FAIL node-llama-cpp not found at ${entry} (run scripts/oracle.sh)`);
    process.exit(3);
}

// llama.cpp's own log lines at warning level and above, kept so that a load
// failure can be reported with llama.cpp's words, not node-llama-cpp's.
const logs = [];
const llama = await getCpuLlama("warn", (level, message) => logs.push(`[${level}] ${message.trimEnd()}`));

function fail(code, msg) {
    if (logs.length) console.log("llama.cpp log:\n  " + logs.join("\n  "));
    console.log(`RESULT FAIL ${msg}`);
    process.exit(code);
}

let model, context;
try {
    model = await loadCpuModel(llama, args.model);
} catch (e) {
    fail(3, `load: ${e.message}`);
}

const n_vocab_meta = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? null;
const textTokens = model.tokenize(args.text, false);
const bos = model.tokens.bos;
const tokens = bos != null ? [bos, ...textTokens] : [...textTokens];
console.log(`llama.cpp tokenization (${textTokens.length} tokens, bos ${bos}):`);
console.log("  ids:    " + JSON.stringify(textTokens));
console.log("  pieces: " + JSON.stringify(textTokens.map((t) => model.detokenize([t], false))));
// The stored (byte-level encoded) texts, through node-llama-cpp's internal
// binding, when it has it: comparable with tokenizer.ggml.tokens directly.
if (typeof model._model?.getTokenString === "function")
    console.log("  texts:  " + JSON.stringify(textTokens.map((t) => model._model.getTokenString(t))));
if (model.detokenize(textTokens, false) !== args.text)
    console.log("  note: detokenize(tokenize(text)) != text");

// One decode call for the whole prompt (llama.mjs).
const n = tokens.length;
try {
    context = await createReferenceContext(model, n);
} catch (e) {
    fail(3, `context: ${e.message}`);
}
const seq = context.getSequence();

const input = tokens.map((t) => [t, { generateNext: { logits: true, probabilities: true } }]);
let out;
try {
    out = await seq.controlledEvaluate(input);
} catch (e) {
    fail(3, `evaluate: ${e.message}`);
}

const mismatch = heldMismatch(seq, tokens);
if (mismatch) fail(1, mismatch);

const problems = [];
const stats = { n_vocab: null, sumMin: Infinity, sumMax: -Infinity, pmaxMax: 0, pmaxMin: 1,
    entropyMean: 0, softmaxDiffMax: 0, logitRangeMin: Infinity, argmax: [] };
for (let p = 0; p < n; p++) {
    const next = out[p]?.next;
    if (!next?.logits || !next?.probabilities) {
        problems.push(`position ${p}: no logits/probabilities returned`);
        continue;
    }
    const V = next.logits.size;
    if (stats.n_vocab === null) stats.n_vocab = V;
    if (V !== stats.n_vocab || (n_vocab_meta !== null && V !== n_vocab_meta))
        problems.push(`position ${p}: ${V} logits, vocabulary has ${n_vocab_meta}`);
    // Our own softmax in double precision, from the raw logits.
    const logit = new Float64Array(V);
    let finite = true, lmax = -Infinity, lmin = Infinity, amax = -1;
    for (const [tok, v] of next.logits) {
        if (tok < 0 || tok >= V || !Number.isFinite(v)) { finite = false; break; }
        logit[tok] = v;
        if (v > lmax) { lmax = v; amax = tok; }
        if (v < lmin) lmin = v;
    }
    if (!finite) { problems.push(`position ${p}: non-finite logit or bad token id`); continue; }
    let z = 0;
    for (let i = 0; i < V; i++) z += Math.exp(logit[i] - lmax);
    let sum = 0, pmax = 0, diff = 0, ent = 0;
    for (const [tok, q] of next.probabilities) {
        if (!Number.isFinite(q) || q < 0) { finite = false; break; }
        sum += q;
        if (q > pmax) pmax = q;
        const ref = Math.exp(logit[tok] - lmax) / z;
        diff = Math.max(diff, Math.abs(ref - q));
        if (ref > 0) ent -= ref * Math.log(ref);
    }
    if (!finite) { problems.push(`position ${p}: non-finite or negative probability`); continue; }
    if (Math.abs(sum - 1) > 1e-3) problems.push(`position ${p}: probabilities sum to ${sum}`);
    if (pmax >= 0.999) problems.push(`position ${p}: degenerate, max prob ${pmax}`);
    if (lmax - lmin < 1e-6) problems.push(`position ${p}: flat logits (range ${lmax - lmin})`);
    stats.sumMin = Math.min(stats.sumMin, sum);
    stats.sumMax = Math.max(stats.sumMax, sum);
    stats.pmaxMax = Math.max(stats.pmaxMax, pmax);
    stats.pmaxMin = Math.min(stats.pmaxMin, pmax);
    stats.entropyMean += ent / n;
    stats.softmaxDiffMax = Math.max(stats.softmaxDiffMax, diff);
    stats.logitRangeMin = Math.min(stats.logitRangeMin, lmax - lmin);
    stats.argmax.push(amax);
}

const f = (x, d = 6) => (Number.isFinite(x) ? x.toFixed(d) : String(x));
const summary = `n_vocab=${stats.n_vocab} n_tokens=${n} psum=[${f(stats.sumMin)},${f(stats.sumMax)}]` +
    ` pmax=[${f(stats.pmaxMin, 4)},${f(stats.pmaxMax, 4)}] entropy=${f(stats.entropyMean, 3)}` +
    `/ln(V)=${f(Math.log(stats.n_vocab || 1), 3)} softmax_vs_probs=${stats.softmaxDiffMax.toExponential(1)}` +
    ` argmax_last=${stats.argmax[stats.argmax.length - 1]}`;
if (args.json) console.log(JSON.stringify({ model: args.model, tokens: textTokens, ...stats, problems }));
if (logs.length) console.log("llama.cpp warnings:\n  " + logs.join("\n  "));
await context.dispose();
await model.dispose();
if (problems.length) {
    console.log("problems:\n  " + problems.slice(0, 10).join("\n  "));
    console.log(`RESULT FAIL ${problems.length} problem(s); ${summary}`);
    process.exit(1);
}
console.log(`RESULT PASS ${summary}`);
