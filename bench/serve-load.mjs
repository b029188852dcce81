// serve-load.mjs - loopback load test of `moestream serve` (node >= 18, no
// packages): N concurrent streaming chat clients, some of which disconnect
// (alternately while queued, 50 ms after sending, and during their own
// prefill: clients start 100 ms apart and the queue is FIFO, so a client's
// prefill starts when the client before it has its answer; it leaves 20 ms
// after that), bounded in count and time. Reports per client the time to
// first token (first reasoning/content delta), tokens/s, the longest
// silence between SSE lines (keepalives count), and checks that the answers
// started in arrival order (FIFO). Then times a prefix-reuse turn against a
// fresh prompt of the same length, and that turn again after the fresh
// prompt replaced it (from disk with --kv-disk-dir). Exits 1 when a served
// client did not complete, the order was not FIFO, or a stream was silent
// for more than 5 s.
//   node bench/serve-load.mjs URL [clients=16] [disconnect=4] [max_tokens=32] [prompt_words=200]
const [url, nClients = "16", nDisc = "4", maxTok = "32", words = "200"] = process.argv.slice(2);
if (!url) { console.error("usage: node bench/serve-load.mjs URL [clients] [disconnect] [max_tokens] [prompt_words]"); process.exit(2); }
const N = +nClients, D = +nDisc, MAXT = +maxTok, W = +words;
const text = (seed, n) => Array.from({ length: n }, (_, i) => ["sea", "sky", "stone", "river", "tree", "cloud"][(seed * 7 + i * 13) % 6]).join(" ");
const now = () => performance.now() / 1000;

// abortAfter: seconds after sending, or a promise after which (+20 ms) to leave
async function stream(body, abortAfter) {
  const ac = new AbortController();
  const t0 = now();
  let first = null, last = t0, maxGap = 0, tokens = 0, done = false, usage = null, aborted = false;
  const leave = () => { if (first === null) { aborted = true; ac.abort(); } };
  if (typeof abortAfter === "number") setTimeout(leave, abortAfter * 1000);
  else if (abortAfter) abortAfter.then(() => setTimeout(leave, 20));
  try {
    const r = await fetch(url + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }), signal: ac.signal });
    const dec = new TextDecoder();
    let buf = "";
    for await (const chunk of r.body) {
      const t = now();
      maxGap = Math.max(maxGap, t - last);
      last = t;
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!ev.startsWith("data: ")) continue;
        if (ev === "data: [DONE]") { done = true; continue; }
        const o = JSON.parse(ev.slice(6));
        if (o.usage) usage = o.usage;
        const d = o.choices?.[0]?.delta;
        if (d && (d.content || d.reasoning_content)) { tokens++; if (first === null) first = t; }
      }
    }
  } catch (e) { if (!aborted) throw e; }
  return { t0, ttft: first === null ? null : first - t0, first, end: now(), tokens, maxGap, done, usage, aborted };
}

const t0 = now();
const clients = [];
let nd = 0;
for (let i = 0; i < N; i++) {
  const disc = i % Math.max(1, Math.floor(N / Math.max(D, 1))) === 1 && nd < D;
  // alternate: leave while queued, then during the own prefill (the previous served client's answer is done)
  const mode = disc ? (nd++ % 2 === 0 ? "queued" : "prefill") : null;
  const prev = clients.filter((c) => !c.disc).at(-1);
  const after = mode === "queued" ? 0.05 : mode === "prefill" ? prev.p : null;
  clients.push({ i, disc, mode, p: stream({ messages: [{ role: "user", content: `Client ${i}: ` + text(i, W) }], max_tokens: MAXT, ignore_eos: true, reasoning_effort: "none" }, after) });
  await new Promise((r) => setTimeout(r, 100)); // arrival order (the server parses a request before queueing it)
}
const res = [];
for (const c of clients) res.push({ ...(await c.p), i: c.i, disc: c.disc });
const wall = now() - t0;
const served = res.filter((r) => !r.disc);
const fifo = served.every((r, k) => k === 0 || r.first >= served[k - 1].first);
const maxGap = Math.max(...served.map((r) => r.maxGap));
const tps = served.map((r) => r.tokens / (r.end - r.first)).sort((a, b) => a - b);
const ttfts = served.map((r) => r.ttft).sort((a, b) => a - b);
const med = (a) => a[Math.floor(a.length / 2)];

// prefix reuse: a second turn extending the first, against a fresh prompt of the same length
const base = [{ role: "user", content: "Turn one: " + text(99, W) }];
const t1 = await stream({ messages: base, max_tokens: 8, reasoning_effort: "none", seed: 1 });
const ans = await fetch(url + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ messages: base, max_tokens: 8, reasoning_effort: "none", seed: 1 }) }).then((r) => r.json());
const turn2 = [...base, { role: "assistant", content: ans.choices[0].message.content }, { role: "user", content: "Turn two: " + text(5, 20) }];
const reuse = await stream({ messages: turn2, max_tokens: 8, reasoning_effort: "none" });
const fresh = await stream({ messages: [{ role: "user", content: "Other: " + text(42, W + 40) }], max_tokens: 8, reasoning_effort: "none" });
// the second turn again after the fresh prompt replaced it: with --kv-disk-dir it comes back from disk
const back = await stream({ messages: turn2, max_tokens: 8, reasoning_effort: "none" });
const out = {
  clients: N, disconnecting: D, disconnect_modes: clients.filter((c) => c.disc).map((c) => c.mode),
  left: res.filter((r) => r.disc && r.aborted).length,
  disconnects: clients.filter((c) => c.disc).map((c) => { const r = res.find((x) => x.i === c.i); return { i: c.i, mode: c.mode, left: r.aborted, ttft: r.ttft, s: +(r.end - r.t0).toFixed(3) }; }), max_tokens: MAXT, prompt_words: W, wall_s: +wall.toFixed(3),
  served: served.length, all_done: served.every((r) => r.done && r.usage?.completion_tokens === MAXT),
  fifo, max_sse_gap_s: +maxGap.toFixed(3),
  ttft_s: { min: +ttfts[0].toFixed(3), median: +med(ttfts).toFixed(3), max: +ttfts.at(-1).toFixed(3) },
  tokens_per_s_per_client: { min: +tps[0].toFixed(1), median: +med(tps).toFixed(1), max: +tps.at(-1).toFixed(1) },
  prefix_reuse: { ttft_reuse_s: +reuse.ttft.toFixed(3), cached: reuse.usage?.prompt_tokens_details?.cached_tokens, prompt: reuse.usage?.prompt_tokens,
                  ttft_fresh_s: +fresh.ttft.toFixed(3), fresh_prompt: fresh.usage?.prompt_tokens, first_turn_ttft_s: +t1.ttft.toFixed(3),
                  ttft_back_s: +back.ttft.toFixed(3), back_cached: back.usage?.prompt_tokens_details?.cached_tokens, back_prompt: back.usage?.prompt_tokens },
};
console.log(JSON.stringify(out, null, 1));
const ok = out.all_done && fifo && maxGap <= 5;
console.log(ok ? "load: ok" : "load: FAILED");
process.exit(ok ? 0 : 1);
