// sdk_test.mjs - the real OpenAI and Anthropic SDKs against `moestream
// serve` (see sdk.sh): chat, completions, responses and messages, streaming
// and not, thinking on and off, usage with cached tokens, errors, concurrent
// requests, an aborted stream, and tool calls (scripted server) in each
// API's shape, sent back with their results.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.MS_NPM_DIR, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const AnthropicMod = require("@anthropic-ai/sdk");
const Anthropic = AnthropicMod.default ?? AnthropicMod.Anthropic ?? AnthropicMod;

let failures = 0, passes = 0;
function check(what, cond, detail) {
  if (cond) { passes++; console.log(`ok: ${what}`); }
  else { failures++; console.log(`FAIL: ${what}${detail ? ": " + JSON.stringify(detail).slice(0, 400) : ""}`); }
}
async function step(what, fn) {
  try { await fn(); } catch (e) { failures++; console.log(`FAIL: ${what}: ${e?.stack ?? e}`); }
}

const plain = process.env.PLAIN_URL, scripted = process.env.SCRIPTED_URL;
const oa = new OpenAI({ baseURL: plain + "/v1", apiKey: "test-key", maxRetries: 0, timeout: 300000 });
const an = new Anthropic({ baseURL: plain, apiKey: "test-key", maxRetries: 0, timeout: 300000 });
const oaT = new OpenAI({ baseURL: scripted + "/v1", apiKey: "test-key", maxRetries: 0, timeout: 300000 });
const anT = new Anthropic({ baseURL: scripted, apiKey: "test-key", maxRetries: 0, timeout: 300000 });

await step("openai models", async () => {
  const list = await oa.models.list();
  check("openai models.list", list.data.some((m) => m.id === "tiny"), list.data);
});

await step("openai chat", async () => {
  const r = await oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 8, seed: 1, ignore_eos: true });
  check("chat: message and usage", typeof r.choices[0].message.content === "string" && r.usage.prompt_tokens > 0 &&
        typeof r.usage.prompt_tokens_details.cached_tokens === "number", r);
  check("chat: thinking on gives reasoning_content", typeof r.choices[0].message.reasoning_content === "string", r.choices[0].message);
  const off = await oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 4, reasoning_effort: "none" });
  check("chat: reasoning_effort none: no reasoning", off.choices[0].message.reasoning_content === undefined, off.choices[0].message);
});

await step("openai chat stream", async () => {
  const s = await oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Stream" }], max_tokens: 8, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  let n = 0, reasoning = "", usage = null, finish = null;
  for await (const c of s) {
    n++;
    if (c.usage) usage = c.usage;
    const d = c.choices[0]?.delta;
    if (d?.reasoning_content) reasoning += d.reasoning_content;
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
  }
  check("chat stream: chunks, finish, usage", n > 2 && finish === "length" && usage?.completion_tokens === 8, { n, finish, usage });
  check("chat stream: reasoning deltas", reasoning.length > 0);
});

await step("openai completions", async () => {
  const r = await oa.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 5, ignore_eos: true });
  check("completions", typeof r.choices[0].text === "string" && r.usage.completion_tokens >= 1, r);
});

await step("openai logprobs", async () => {
  // the SDK's stream helper accumulates each chunk's logprobs.content
  const req = { model: "tiny", messages: [{ role: "user", content: "Logprobs" }], max_tokens: 8, ignore_eos: true,
                temperature: 0, reasoning_effort: "none", logprobs: true, top_logprobs: 3 };
  const r = await oa.chat.completions.create(req);
  const lp = r.choices[0].logprobs?.content ?? [];
  check("chat logprobs: an entry a token, the greedy token first among its 3", lp.length === 8 &&
        lp.every((e) => e.top_logprobs.length === 3 && e.top_logprobs[0].logprob === e.logprob && e.logprob <= 0), lp);
  const fin = await oa.chat.completions.stream(req).finalChatCompletion();
  check("chat logprobs: the SDK's accumulated stream is the reply's",
        JSON.stringify(fin.choices[0].logprobs?.content) === JSON.stringify(lp), fin.choices[0].logprobs);
  const c = await oa.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 0, echo: true, logprobs: 1 });
  check("completions echo: the prompt scored", c.choices[0].text === "Once upon a time" &&
        c.choices[0].logprobs.token_logprobs.length === c.usage.prompt_tokens - 1, c.choices[0]);
});

await step("openai responses", async () => {
  const r = await oa.responses.create({ model: "tiny", instructions: "Be brief.", input: "Hi", max_output_tokens: 6, ignore_eos: true });
  check("responses: object, output_text, usage", r.object === "response" && typeof r.output_text === "string" && r.usage.output_tokens === 6, r);
  const s = await oa.responses.create({ model: "tiny", input: [{ role: "user", content: [{ type: "input_text", text: "Hi" }] }], max_output_tokens: 5, ignore_eos: true, stream: true, reasoning: { effort: "none" } });
  const types = [];
  for await (const ev of s) types.push(ev.type);
  check("responses stream: created ... output_text.delta ... incomplete",
        types[0] === "response.created" && types.includes("response.output_text.delta") && types.at(-1) === "response.incomplete", types);
});

await step("anthropic messages", async () => {
  const m = await an.messages.create({ model: "tiny", max_tokens: 6, ignore_eos: true, system: "Be brief.", messages: [{ role: "user", content: "Hi" }] });
  check("messages: text block, stop_reason, usage", m.type === "message" && m.stop_reason === "max_tokens" && m.usage.input_tokens > 0, m);
  const t = await an.messages.create({ model: "tiny", max_tokens: 6, ignore_eos: true, thinking: { type: "enabled", budget_tokens: 1024 }, messages: [{ role: "user", content: "Hi" }] });
  check("messages: thinking enabled gives a thinking block", t.content[0]?.type === "thinking", t.content);
  const stream = an.messages.stream({ model: "tiny", max_tokens: 6, ignore_eos: true, messages: [{ role: "user", content: "Stream" }] });
  const events = [];
  stream.on("streamEvent", (e) => events.push(e.type));
  const fin = await stream.finalMessage();
  check("messages stream: finalMessage and event order", fin.usage.output_tokens === 6 && events[0] === "message_start" && events.at(-1) === "message_stop", { events, fin });
  const ct = await an.messages.countTokens({ model: "tiny", messages: [{ role: "user", content: "Hi there" }] });
  check("messages: countTokens", ct.input_tokens > 2, ct);
});

await step("errors", async () => {
  try {
    await oa.chat.completions.create({ model: "tiny", messages: [{ role: "wizard", content: "x" }] });
    check("openai: bad role is a 400", false);
  } catch (e) { check("openai: bad role is a 400 APIError", e.status === 400 && typeof e.message === "string", e.message); }
  try {
    await an.messages.create({ model: "tiny", max_tokens: 5, messages: [{ role: "user", content: [{ type: "video" }] }] });
    check("anthropic: bad block is a 400", false);
  } catch (e) { check("anthropic: bad block is a 400 with an error type", e.status === 400 && e.error?.error?.type === "invalid_request_error", e.error); }
  const bad = new OpenAI({ baseURL: plain + "/v1", apiKey: "wrong", maxRetries: 0 });
  try { await bad.models.list(); check("wrong key is a 401", false); }
  catch (e) { check("wrong key is a 401", e.status === 401); }
});

await step("concurrent", async () => {
  const rs = await Promise.all([0, 1, 2, 3].map((i) =>
    oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: `Request ${i}` }], max_tokens: 6, ignore_eos: true })));
  check("4 concurrent requests all answered in order of the queue", rs.every((r) => r.usage.completion_tokens === 6), rs.map((r) => r.usage));
});

// a counter of /metrics (the server has an API key: send it)
async function metric(name) {
  const t = await (await fetch(plain + "/metrics", { headers: { authorization: "Bearer test-key" } })).text();
  const line = t.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

await step("abort", async () => {
  // The aborted generation must stop far short of its limit: counted in
  // the metrics (tokens generated, cancellations), not timed, so a loaded
  // machine cannot fail it (the time bound is only a hang guard).
  const gen0 = await metric("moestream_completion_tokens_total");
  const can0 = await metric("moestream_requests_cancelled_total");
  const ac = new AbortController();
  const s = await oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "long" }], max_tokens: 1900, stream: true, ignore_eos: true }, { signal: ac.signal });
  let n = 0;
  try { for await (const _ of s) { if (++n === 3) ac.abort(); } } catch (e) { /* aborted */ }
  const t0 = Date.now();
  const r = await oa.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "after" }], max_tokens: 3, ignore_eos: true });
  const gen = (await metric("moestream_completion_tokens_total")) - gen0 - 3;
  const can = (await metric("moestream_requests_cancelled_total")) - can0;
  check("an aborted stream stops the generation (cancelled, far short of its 1900 tokens; the next request runs)",
        // gen >= 2: of the 3 chunks seen, the first carries only the role,
        // and a fast server may stop right after the second token
        r.usage.completion_tokens === 3 && can === 1 && gen >= 2 && gen < 1000 && Date.now() - t0 < 120000,
        { generated: gen, cancelled: can, ms: Date.now() - t0 });
});

// ---- tool calls (scripted outputs alternate: a get_weather call, then an answer)
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } }];

await step("openai tools", async () => {
  const msgs = [{ role: "user", content: "Weather in Paris?" }];
  const r = await oaT.chat.completions.create({ model: "m", messages: msgs, tools });
  const m = r.choices[0].message;
  check("chat tools: tool_calls and finish tool_calls", r.choices[0].finish_reason === "tool_calls" && m.tool_calls?.[0]?.function?.name === "get_weather" &&
        JSON.stringify(JSON.parse(m.tool_calls[0].function.arguments)) === '{"city":"Paris","days":3}' && m.content === "Checking." && m.reasoning_content === "Need the weather.", m);
  const live = r.usage.prompt_tokens + r.usage.completion_tokens;
  msgs.push(m, { role: "tool", tool_call_id: m.tool_calls[0].id, content: "sunny, 21 C" });
  const s = await oaT.chat.completions.create({ model: "m", messages: msgs, tools, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null;
  for await (const c of s) { if (c.usage) usage = c.usage; text += c.choices[0]?.delta?.content ?? ""; }
  check("chat tools: the result turn streams the answer and reuses the live session", text === "Sunny in Paris." && usage.prompt_tokens_details.cached_tokens >= live, { text, usage, live });
});

await step("anthropic tools", async () => {
  const atools = [{ name: "get_weather", description: "Weather for a city", input_schema: tools[0].function.parameters }];
  const msgs = [{ role: "user", content: "Weather in Paris?" }];
  const st = anT.messages.stream({ model: "m", max_tokens: 300, thinking: { type: "enabled", budget_tokens: 200 }, tools: atools, messages: msgs });
  const m = await st.finalMessage();
  const tu = m.content.find((b) => b.type === "tool_use");
  check("messages tools: thinking, text, tool_use with parsed input", m.stop_reason === "tool_use" && m.content[0].type === "thinking" &&
        tu?.name === "get_weather" && tu.input.city === "Paris" && tu.input.days === 3, m.content);
  msgs.push({ role: "assistant", content: m.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "sunny" }] });
  const r = await anT.messages.create({ model: "m", max_tokens: 300, thinking: { type: "enabled", budget_tokens: 200 }, tools: atools, messages: msgs });
  check("messages tools: the result turn is answered from the live session",
        r.content.at(-1).text === "Sunny in Paris." && r.usage.cache_read_input_tokens > m.usage.input_tokens + m.usage.cache_read_input_tokens, r.usage);
});

await step("responses tools", async () => {
  const rtools = [{ type: "function", name: "get_weather", description: "Weather for a city", parameters: tools[0].function.parameters }];
  const r = await oaT.responses.create({ model: "m", input: "Weather in Paris?", tools: rtools });
  const fc = r.output.find((o) => o.type === "function_call");
  check("responses tools: a function_call item", fc?.name === "get_weather" && JSON.parse(fc.arguments).city === "Paris", r.output);
  const r2 = await oaT.responses.create({ model: "m", tools: rtools, input: [
    { role: "user", content: "Weather in Paris?" }, ...r.output.filter((o) => o.type !== "message" || true).map((o) => o),
    { type: "function_call_output", call_id: fc.call_id, output: "sunny" }] });
  check("responses tools: the result turn answers", r2.output_text === "Sunny in Paris." && r2.usage.input_tokens_details.cached_tokens > r.usage.input_tokens, r2.usage);
});

console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
