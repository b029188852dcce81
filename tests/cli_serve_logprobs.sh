#!/usr/bin/env bash
# cli_serve_logprobs.sh - log-probabilities from `moestream serve`: chat
# logprobs/top_logprobs, completions logprobs and echo (prompt scoring),
# Responses top_logprobs with include, streamed and not. The values are
# checked against `moestream logits` (an independent path: the CLI's
# softmax over the same session's logits), greedy tokens against their
# alternatives, streams against the whole replies, and bad values for 400s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
    { echo "FAIL: curl, jq and python3 are needed (scripts/install-deps.sh)"; exit 1; }
tiny_model "$TMP/m.gguf" --seed 5
CT='Content-Type: application/json'
start_server lp -m "$TMP/m.gguf" -c 1024
U=$(url lp)
post() { curl -s -m 300 -H "$CT" "$U$1" -d "$2"; }
status() { curl -s -m 60 -o /dev/null -w '%{http_code}' -H "$CT" "$U$1" -d "$2"; }

PROMPT="The quick brown fox jumps over the lazy dog"
# the CLI's next-token probabilities after each position of the same text
"$BIN" logits -m "$TMP/m.gguf" -t 2 --text "$PROMPT" --full >"$TMP/ref.json" 2>"$TMP/ref.err" ||
    { echo "FAIL: moestream logits"; cat "$TMP/ref.err"; exit 1; }

# ---- completions: echo scores the prompt
R=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":0,\"echo\":true,\"logprobs\":3}")
check "echo, max_tokens 0: the text is the prompt, finish length" \
    '[ "$(jq -r .choices[0].text <<<"$R")" = "$PROMPT" ] && [ "$(jq -r .choices[0].finish_reason <<<"$R")" = length ] && [ "$(jq .usage.completion_tokens <<<"$R")" = 0 ]'
echo "$R" >"$TMP/echo.json"
# token i of the prompt (after the BOS the server adds) against the CLI's
# probability of that id at position i - 1; offsets add up to the text
check "echo: every prompt token's logprob is the CLI's log p (|dp| < 1e-6), offsets and alternatives consistent" \
    'python3 - "$TMP/ref.json" "$TMP/echo.json" <<'"'"'EOF'"'"'
import json, math, sys
ref = json.load(open(sys.argv[1])); rep = json.load(open(sys.argv[2]))
lp = rep["choices"][0]["logprobs"]; ids = ref["tokens"]
assert ids[0] == 0 and len(lp["token_logprobs"]) == len(ids) - 1, (ids, lp["tokens"])
for i in range(1, len(ids)):
    p = ref["positions"][i - 1]["probs"][ids[i]]
    got = lp["token_logprobs"][i - 1]
    assert abs(math.exp(got) - p) < 1e-6 * max(1.0, p * 100), (i, got, p)
    top = lp["top_logprobs"][i - 1]
    best = sorted(ref["positions"][i - 1]["probs"], reverse=True)[:3]
    assert len(top) <= 3 and abs(math.exp(max(top.values())) - best[0]) < 1e-6, (top, best)
    assert all(v <= 0 for v in top.values())
text = rep["choices"][0]["text"]
assert "".join(lp["tokens"]) == text and lp["text_offset"][0] == 0
assert all(b > a for a, b in zip(lp["text_offset"], lp["text_offset"][1:]))
EOF'
# the sampling settings do not change what is reported: the model's distribution
R2=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":0,\"echo\":true,\"logprobs\":3,\"temperature\":1.7,\"top_k\":2,\"min_p\":0.3}")
check "echo: the same values at another temperature, top_k and min_p" \
    '[ "$(jq -c .choices[0].logprobs <<<"$R")" = "$(jq -c .choices[0].logprobs <<<"$R2")" ]'
# the same prompt as token ids (the CLI's, BOS included): the same scores,
# the BOS first with none
IDS=$(jq -c .tokens "$TMP/ref.json")
R3=$(post /v1/completions "{\"prompt\":$IDS,\"max_tokens\":0,\"echo\":true,\"logprobs\":3}")
check "echo of token ids: the BOS unscored, then the string prompt's values" \
    '[ "$(jq -c ".choices[0].logprobs.token_logprobs" <<<"$R3")" = "$(jq -c "[null] + .choices[0].logprobs.token_logprobs" <<<"$R")" ]'
check "token ids: an id outside the vocabulary, an empty array, a non-integer, nested too deep are 400s" \
    '(for v in "[1,100000000]" "[]" "[[1,2.5]]" "[-1]" "[[1,2],[]]" "[[\"a\",\"b\"]]" "[[[1]]]"; do [ "$(status /v1/completions "{\"prompt\":$v}")" = 400 ] || { echo "  ($v)"; exit 1; }; done)'
check "echo without logprobs: the prompt, then the completion" \
    '[ "$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":2,\"echo\":true,\"ignore_eos\":true}" | jq -r ".choices[0].text | startswith(\"$PROMPT\")")" = true ]'

# ---- the tokenizer endpoints, and a log-likelihood request as evaluation
# harnesses make it: lm-evaluation-harness's local-completions with its
# remote tokenizer probes /tokenizer_info and /tokenize, encodes context
# and continuation apart, sends them as one batch of token ids with
# max_tokens 1, logprobs 1, echo, and sums token_logprobs[ctxlen:-1]
check "tokenize / detokenize / tokenizer_info: vLLM's and llama.cpp's shapes" \
    'jq -e ".eos_token == \"<｜end▁of▁sentence｜>\" and .vocab_size > 0" <<<"$(curl -s -m 5 $U/tokenizer_info)" >/dev/null &&
     [ "$(post /tokenize "{\"prompt\":\"$PROMPT\"}" | jq -c .tokens)" = "$(jq -c .tokens "$TMP/ref.json")" ] &&
     [ "$(post /tokenize "{\"content\":\"$PROMPT\"}" | jq -c .tokens)" = "$(jq -c .tokens[1:] "$TMP/ref.json")" ] &&
     [ "$(post /detokenize "{\"tokens\":$(jq -c .tokens "$TMP/ref.json")}" | jq -r .prompt)" = "<｜begin▁of▁sentence｜>$PROMPT" ] &&
     [ "$(status /detokenize "{\"tokens\":[1,99999999]}")" = 400 ] && [ "$(status /tokenize "{\"prompt\":[1]}")" = 400 ]'
check "a GET or PUT that carries a body still gets its reply (200, 405)" \
    '[ "$(curl -s -m 10 -o /dev/null -w "%{http_code}" -X GET -d "{\"a\":1}" $U/tokenizer_info)" = 200 ] &&
     [ "$(curl -s -m 10 -o /dev/null -w "%{http_code}" -X PUT -d "{\"a\":1}" $U/tokenize)" = 405 ]'
check "a harness's log-likelihood request: the continuation's summed logprob is the CLI's, greediness its argmax test" \
    'python3 - "$U" "$BIN" "$TMP/m.gguf" <<'"'"'EOF'"'"'
import json, math, subprocess, sys, urllib.request
url, bin_, model = sys.argv[1:4]
def call(path, body=None):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))
assert "eos_token" in call("/tokenizer_info")
enc = lambda s: call("/tokenize", {"prompt": s, "add_special_tokens": False})["tokens"]
ctx, cont = enc("The quick brown fox"), enc(" jumps over the lazy dog")
ids = [0] + ctx + cont  # the harness puts a prefix token (here the BOS) first
out = call("/v1/completions", {"model": "m", "prompt": [ids], "temperature": 0, "max_tokens": 1,
                               "logprobs": 1, "seed": 1234, "echo": True})
ch = out["choices"][0]["logprobs"]
ctxlen = 1 + len(ctx)
got = sum(ch["token_logprobs"][ctxlen:-1])
greedy = all(t == max(top.values()) for t, top in zip(ch["token_logprobs"][ctxlen:-1], ch["top_logprobs"][ctxlen:-1]))
ref = json.loads(subprocess.run([bin_, "logits", "-m", model, "-t", "2", "--tokens", ",".join(map(str, ids)), "--full"],
                                capture_output=True, check=True).stdout)
want = sum(math.log(ref["positions"][i - 1]["probs"][ids[i]]) for i in range(ctxlen, len(ids)))
want_greedy = all(max(ref["positions"][i - 1]["probs"]) == ref["positions"][i - 1]["probs"][ids[i]] for i in range(ctxlen, len(ids)))
assert len(ch["token_logprobs"]) == len(ids) + 1 and ch["token_logprobs"][0] is None, ch["token_logprobs"]
assert abs(got - want) < 1e-4 and greedy == want_greedy, (got, want, greedy, want_greedy)
EOF'

# ---- completions: generated tokens
R=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":4,\"ignore_eos\":true}")
echo "$R" >"$TMP/gen.json"
check "completions: greedy tokens are their top alternative; the first is the CLI's most likely after the prompt" \
    'python3 - "$TMP/ref.json" "$TMP/gen.json" <<'"'"'EOF'"'"'
import json, math, sys
ref = json.load(open(sys.argv[1])); rep = json.load(open(sys.argv[2]))
lp = rep["choices"][0]["logprobs"]
n = rep["usage"]["completion_tokens"]
assert n == 6 and len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
for t, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
    assert 1 <= len(top) <= 4 and abs(max(top.values()) - l) < 1e-12, (t, l, top)
    assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-9
pmax = max(ref["positions"][-1]["probs"])
assert abs(math.exp(lp["token_logprobs"][0]) - pmax) < 1e-6, (lp["token_logprobs"][0], pmax)
assert "".join(lp["tokens"]) == rep["choices"][0]["text"] and lp["text_offset"][0] == 0
EOF'
S=$(post /v1/completions "{\"prompt\":\"$PROMPT\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":4,\"ignore_eos\":true,\"stream\":true,\"echo\":true}")
check "completions stream with echo: the chunks' logprobs are the prompt's then the reply's, offsets running on" \
    '[ "$(grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -c "[.[].choices[0].logprobs | select(. != null) | .token_logprobs[]]")" = "$(jq -c "[.choices[0].logprobs.token_logprobs[]]" "$TMP/echo.json" | sed "s/]\$//"),$(jq -c ".choices[0].logprobs.token_logprobs[]" "$TMP/gen.json" | paste -sd, -)]" ] &&
     grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -e "[.[].choices[0].logprobs | select(. != null) | .text_offset[]] | . == (. | sort) and .[0] == 0" >/dev/null'

# ---- chat
CHAT='{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":10,"temperature":0,"logprobs":true,"top_logprobs":2,"reasoning_effort":"none","ignore_eos":true}'
R=$(post /v1/chat/completions "$CHAT")
check "chat: one entry per content token, each greedy token its top alternative" \
    'jq -e "(.choices[0].logprobs.content | length) == .usage.completion_tokens and all(.choices[0].logprobs.content[]; (.top_logprobs | length) == 2 and .top_logprobs[0].logprob == .logprob and .top_logprobs[0].token == .token and .logprob <= 0 and (.bytes | length) > 0) and .choices[0].logprobs.refusal == null" <<<"$R" >/dev/null'
S=$(post /v1/chat/completions "${CHAT%\}},\"stream\":true}")
check "chat stream: the chunks' entries are the reply's" \
    '[ "$(grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -c "[.[].choices[0].logprobs.content // [] | .[]]")" = "$(jq -c .choices[0].logprobs.content <<<"$R")" ]'
R=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":6,"temperature":0,"logprobs":true}')
check "chat: reasoning tokens have no entries (thinking on, all reasoning here)" \
    'jq -e "(.choices[0].message.content // \"\") == \"\" and .choices[0].message.reasoning_content != null and .choices[0].logprobs.content == []" <<<"$R" >/dev/null'
check "chat without logprobs: null" \
    '[ "$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}" | jq -c .choices[0].logprobs)" = null ]'

# ---- Responses
RESP='{"input":"Tell me a story","max_output_tokens":8,"temperature":0,"reasoning":{"effort":"none"},"include":["reasoning.encrypted_content","message.output_text.logprobs"],"top_logprobs":1,"ignore_eos":true}'
R=$(post /v1/responses "$RESP")
check "responses: output_text logprobs, one alternative each" \
    'jq -e "[.output[] | select(.type == \"message\") | .content[0].logprobs[]] | length > 0 and all(.[]; (.top_logprobs | length) == 1 and .top_logprobs[0].logprob == .logprob)" <<<"$R" >/dev/null'
S=$(post /v1/responses "${RESP%\}},\"stream\":true}")
check "responses stream: the deltas' logprobs are the item's, and output_text.done has them all" \
    'D=$(grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -c "[.[] | select(.type == \"response.output_text.delta\") | .logprobs[]]");
     [ "$D" = "$(jq -c "[.output[] | select(.type == \"message\") | .content[0].logprobs[]]" <<<"$R")" ] &&
     [ "$D" = "$(grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -c "[.[] | select(.type == \"response.output_text.done\") | .logprobs[]]")" ]'
check "responses without include: no logprobs listed" \
    'post /v1/responses "{\"input\":\"Hi\",\"max_output_tokens\":2,\"top_logprobs\":3}" | jq -e "[.output[] | select(.type == \"message\") | .content[0] | has(\"logprobs\")] | all(. == false)" >/dev/null'

# ---- bad values
check "400: top_logprobs without logprobs" '[ "$(status /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"top_logprobs\":2}")" = 400 ]'
check "400: top_logprobs 21" '[ "$(status /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"logprobs\":true,\"top_logprobs\":21}")" = 400 ]'
check "400: logprobs not a boolean (chat)" '[ "$(status /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"logprobs\":1}")" = 400 ]'
check "400: completions logprobs -1, 21, true" \
    'for v in -1 21 true; do [ "$(status /v1/completions "{\"prompt\":\"Hi\",\"logprobs\":$v}")" = 400 ] || exit 1; done'
check "400: max_tokens 0 without echo, saying it goes with echo" \
    'post /v1/completions "{\"prompt\":\"Hi\",\"max_tokens\":0}" | jq -e ".error.message | test(\"echo\")" >/dev/null'
check "echo with max_tokens 0 may fill the whole context (1024 ids), not one more" \
    'python3 -c "import json; print(json.dumps({\"prompt\": [5] * 1024, \"max_tokens\": 0, \"echo\": True}))" >"$TMP/full.json" &&
     [ "$(curl -s -m 60 -H "$CT" "$U/v1/completions" -d @"$TMP/full.json" | jq .usage.prompt_tokens)" = 1024 ] &&
     python3 -c "import json; print(json.dumps({\"prompt\": [5] * 1025, \"max_tokens\": 0, \"echo\": True}))" >"$TMP/over.json" &&
     curl -s -m 60 -H "$CT" "$U/v1/completions" -d @"$TMP/over.json" | jq -e ".error.code == \"context_length_exceeded\" and (.error.message | test(\"1025 tokens > 1024\"))" >/dev/null'
check "400: include not an array of strings" \
    '[ "$(status /v1/responses "{\"input\":\"Hi\",\"include\":\"x\"}")" = 400 ] && [ "$(status /v1/responses "{\"input\":\"Hi\",\"include\":[1]}")" = 400 ]'
check "the server is still up" '[ "$(curl -s -m 5 $U/health | jq -r .status)" = ok ]'

# ---- scripted output: reasoning, content, a tool-call block; only the
# content's tokens have entries, their text is the content, in both shapes
stop_server lp
cat >"$TMP/script.txt" <<'SCRIPT'
Let me think.</think>Checking now.

<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
SCRIPT
MOESTREAM_SERVE_SCRIPT="$TMP/script.txt" start_server lps -m "$TMP/m.gguf" -c 1024
U=$(url lps)
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
SC="{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$TOOLS,\"max_tokens\":1000,\"logprobs\":true,\"top_logprobs\":1}"
R=$(post /v1/chat/completions "$SC")
check "scripted chat: a call, reasoning and content as scripted" \
    'jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.reasoning_content == \"Let me think.\" and .choices[0].message.content == \"Checking now.\"" <<<"$R" >/dev/null'
check "scripted chat: the entries' tokens spell the content, no reasoning or markup" \
    '[ "$(jq -r "[.choices[0].logprobs.content[].token] | join(\"\")" <<<"$R")" = "Checking now." ]'
S=$(post /v1/chat/completions "${SC%\}},\"stream\":true}")
check "scripted chat stream: the same entries" \
    '[ "$(grep "^data: {" <<<"$S" | sed "s/^data: //" | jq -s -c "[.[].choices[0].logprobs.content // [] | .[]]")" = "$(jq -c .choices[0].logprobs.content <<<"$R")" ]'
stop_server lps

# ---- a scoring pass stops when its client goes away (a prefill would go
# on, for the retry to reuse; a score is of use to its client only)
start_server lpc -m "$TMP/m.gguf" -c 20000
U=$(url lpc)
python3 -c 'import json; print(json.dumps({"prompt": [(i * 7919) % 400 + 2 for i in range(19000)], "max_tokens": 0, "echo": True, "logprobs": 5}))' >"$TMP/long.json"
curl -s -m 1 -H "$CT" "$U/v1/completions" -d @"$TMP/long.json" >/dev/null
check "a scoring request whose client left is cancelled" \
    'wait_metric moestream_requests_cancelled_total 1 && grep -q "scoring cancelled (client gone)" "$TMP/lpc.log" && ! grep -q "19000 tokens.*finish length" "$TMP/lpc.log"'
check "the server answers the next request" \
    '[ "$(post /v1/completions "{\"prompt\":\"Hi\",\"max_tokens\":2}" | jq -r .object)" = text_completion ]'
stop_server lpc

# ---- weights holding NaN: scoring and generation end in an error, never
# in probabilities of the finite logits alone
nan_model "$TMP/m.gguf" "$TMP/nan.gguf"
start_server nan -m "$TMP/nan.gguf" -c 256
U=$(url nan)
check "NaN weights: echo scoring is a 500 naming it" \
    '[ "$(status /v1/completions "{\"prompt\":\"Hello there\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1}")" = 500 ]'
check "NaN weights: generation is an error naming the non-finite logit" \
    'post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4}" | jq -e ".error.message | test(\"non-finite logit\")" >/dev/null'
stop_server nan
finish cli_serve_logprobs
