// llama_bench.mjs - the llama.cpp side of bench/compare: loads one GGUF in
// llama.cpp (node-llama-cpp 3.22.1, CPU) and, for each prompt size N, from
// an empty sequence: prefills the first N tokens of the benchmark text in one
// batch (batch = ubatch >= N, so one decode call), then decodes G tokens
// greedily one at a time. Load time is measured but kept out of both figures
// (llama.cpp's model load reads the whole file in every mode, so it would
// dominate short runs).
//
// The tokens are those `moestream bench` walks: BOS (when the model has one)
// then the text's tokens, the text repeated when short.
//
// usage: node bench/llama_bench.mjs --model M.gguf [--threads T]
//          [--prompts 128,512,2048] [--gen 64] [--mode mmap|nommap|directio]
//          [--text FILE]
// env:   ORACLE_DIR (default ~/.cache/moestream/oracle)
// out:   one JSON object per prompt size on stdout:
//        {"engine":"llama.cpp","mode","threads","prompt_tokens","prefill_seconds",
//         "decode_tokens","decode_seconds","load_seconds","peak_rss_bytes"}
// exit:  0 ok, 2 usage, 3 llama.cpp could not load or run the model.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const a = {
    model: null, threads: 1, prompts: [128, 512, 2048], gen: 64, mode: "mmap",
    text: path.join(here, "pride-and-prejudice-ch1-19.txt"),
};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const k = argv[i], v = argv[i + 1];
    if (v === undefined) usage(`${k} needs a value`);
    i++;
    if (k === "--model") a.model = v;
    else if (k === "--threads") a.threads = posInt(v, k);
    else if (k === "--prompts") a.prompts = v.split(",").map((s) => posInt(s, k));
    else if (k === "--gen") a.gen = posInt(v, k, 0);
    else if (k === "--mode") a.mode = v;
    else if (k === "--text") a.text = v;
    else usage(`unknown option ${k}`);
}
if (!a.model) usage("--model is required");
if (!["mmap", "nommap", "directio"].includes(a.mode)) usage("--mode must be mmap, nommap or directio");

function usage(msg) {
    console.error(`llama_bench: ${msg}\nusage: node llama_bench.mjs --model M.gguf [--threads T] ` +
        "[--prompts 128,512,2048] [--gen 64] [--mode mmap|nommap|directio] [--text FILE]");
    process.exit(2);
}
function posInt(s, k, lo = 1) {
    const n = Number(s);
    if (!Number.isInteger(n) || n < lo) usage(`${k} must be an integer >= ${lo}`);
    return n;
}

const oracleDir = process.env.ORACLE_DIR || path.join(os.homedir(), ".cache/moestream/oracle");
const entry = path.join(oracleDir, "node_modules/node-llama-cpp/dist/index.js");
if (!fs.existsSync(entry)) {
    console.error(`llama_bench: node-llama-cpp not found at ${entry} (run scripts/oracle.sh)`);
    process.exit(3);
}
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

function die(msg) {
    console.error(`llama_bench: ${msg}`);
    process.exit(3);
}

const maxN = Math.max(...a.prompts);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const t0 = performance.now();
let model, context;
try {
    model = await llama.loadModel({
        modelPath: a.model, gpuLayers: 0,
        useMmap: a.mode === "mmap", useDirectIo: a.mode === "directio",
    });
    context = await model.createContext({
        contextSize: Math.ceil((maxN + a.gen + 1) / 256) * 256,
        batchSize: maxN,
        sequences: 1,
        threads: { ideal: a.threads, min: a.threads },
    });
} catch (e) {
    die(`load (${a.mode}): ${e.message}`);
}
const loadSeconds = (performance.now() - t0) / 1000;

// BOS + the text's tokens, repeated until maxN are there.
const text = fs.readFileSync(a.text, "utf8");
const body = model.tokenize(text.slice(0, Math.max(4096, maxN * 16)), false);
if (!body.length) die("the benchmark text has no tokens");
const tokens = model.tokens.bos != null ? [model.tokens.bos] : [];
while (tokens.length < maxN) tokens.push(...body);

const seq = context.getSequence();
const greedy = { token: true, options: { temperature: 0 } };
for (const n of a.prompts) {
    await seq.clearHistory();
    const prompt = tokens.slice(0, n);
    let t = performance.now();
    let out = await seq.controlledEvaluate(
        prompt.map((tok, i) => (i === n - 1 ? [tok, { generateNext: greedy }] : tok)));
    const prefillSeconds = (performance.now() - t) / 1000;
    let next = out[out.length - 1]?.next?.token;
    if (next == null) die("no token after the prompt");
    t = performance.now();
    for (let k = 0; k < a.gen; k++) {
        out = await seq.controlledEvaluate([[next, { generateNext: greedy }]]);
        next = out[0]?.next?.token;
        if (next == null) die("no token in decode");
    }
    const decodeSeconds = (performance.now() - t) / 1000;
    if (seq.contextTokens.length !== n + a.gen)
        die(`sequence holds ${seq.contextTokens.length} tokens, not ${n + a.gen}`);
    console.log(JSON.stringify({
        engine: "llama.cpp", mode: a.mode, threads: a.threads, prompt_tokens: n,
        prefill_seconds: prefillSeconds, decode_tokens: a.gen, decode_seconds: decodeSeconds,
        load_seconds: loadSeconds, peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
    }));
}
await context.dispose();
await model.dispose();
