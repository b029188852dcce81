// llama.mjs - llama.cpp (node-llama-cpp 3.22.1) as a precise reference,
// shared by the oracle scripts: where node-llama-cpp is installed, loading it
// on the CPU, and a context with the settings of tests/data/oracle/README.md: F32 K/V
// cache, flash attention off, and batch = ubatch = context, so that a whole
// prompt goes through llama.cpp in one decode call (node-llama-cpp sets
// ubatch equal to batch).
//
// env: ORACLE_DIR (default ~/.cache/moestream/oracle): where node-llama-cpp
//      is installed (scripts/oracle.sh installs it); ORACLE_THREADS (default 1).

import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

export const oracleDir = process.env.ORACLE_DIR || path.join(os.homedir(), ".cache/moestream/oracle");
export const entry = path.join(oracleDir, "node_modules/node-llama-cpp/dist/index.js");

// llama.cpp on the CPU (no build), logging at logLevel ("error", "warn", ...)
// to logger(level, message) when one is given, else to the console.
export async function getCpuLlama(logLevel, logger) {
    const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
    const opts = { gpu: false, build: "never", logLevel: LlamaLogLevel[logLevel] };
    if (logger) opts.logger = logger;
    return getLlama(opts);
}

// A model with every layer on the CPU; extra: more loadModel options.
export function loadCpuModel(llama, modelPath, extra = {}) {
    return llama.loadModel({ modelPath, gpuLayers: 0, ...extra });
}

// A one-sequence context holding nTokens, in one decode call: the smallest
// multiple of 64 (at least 64), as context and batch size.
export function createReferenceContext(model, nTokens) {
    const ctxSize = Math.max(64, Math.ceil(nTokens / 64) * 64);
    return model.createContext({
        contextSize: ctxSize,
        batchSize: ctxSize,
        sequences: 1,
        // One thread unless told otherwise: on a small shared machine, ggml's
        // spinning worker threads make a tiny model 100x slower when the
        // cores are busy, and the result does not depend on it.
        threads: Number(process.env.ORACLE_THREADS || 1),
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
    });
}

// node-llama-cpp may shift a full context silently: null when the sequence
// holds exactly `tokens`, else what it holds instead, in words.
export function heldMismatch(seq, tokens) {
    const held = seq.contextTokens;
    if (held.length === tokens.length && held.every((t, i) => t === tokens[i])) return null;
    return `sequence holds ${held.length} tokens, not the ${tokens.length} fed`;
}

// "1,2,3" -> [1, 2, 3]; null unless every entry is a non-negative integer.
export function parseTokenCsv(csv) {
    const tokens = csv.split(",").map((s) => Number.parseInt(s, 10));
    return tokens.some((t) => !Number.isInteger(t) || t < 0) ? null : tokens;
}
