#!/usr/bin/env bash
# `zaya serve` through a real HTTP client (curl): health, models, API key, completions (text and token-id prompts,
# equal to `zaya generate`), chat, server-sent-event streams (same text as the plain response), JSON mode,
# log-probabilities (echo scoring against `zaya forward`'s loss, streamed = plain, chat's form), several prompts per
# request, concurrent requests (batched: the same results as alone), tool calls (held to the tools' schemas, read
# back, streamed = plain, a result sent back; auto's words free; `zaya chat --tools` = the server), 400 mixed requests
# at once with clients leaving mid-stream (tests/cli/serve_stress.py), the Responses API (the chat it means; typed
# stream events; function calls), prefix reuse (a continuation resumes from the
# earlier request's cache and equals `zaya generate`; a chat's next turn), /metrics, bad requests (4xx with an
# OpenAI error body; the server keeps serving), and --batch-invariant (a request alone = beside others, to the bit).
# Usage: test_serve.sh ZAYA_BINARY SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/corpus.sh"
for tool in curl jq; do
    command -v $tool >/dev/null || { echo "FAILED  $tool is not installed (scripts/setup.sh installs it)"; exit 1; }
done

# A tiny random model with a real tokenizer.
make_corpus "$tmp/corpus" 40
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null 2>&1 || { echo "FAILED  prepare"; exit 1; }
"$ZAYA" init --model tiny --out "$tmp/m" >/dev/null || { echo "FAILED  init"; exit 1; }
cp "$tmp/data/tokenizer.model" "$tmp/m/"

# OPENBLAS_NUM_THREADS=2: a thread OpenBLAS starts before main() (SIGTERM at the end must still stop it gracefully).
# --speculative-tokens: every answer below is drafted where it repeats itself (a random model's greedy answers
# loop) or an earlier request (--lookup-history), and must still be what `zaya generate` (no drafts) and each
# request alone give.
OPENBLAS_NUM_THREADS=2 "$ZAYA" serve "$tmp/m" --port 0 --api-key sekret --max-body 100000 --max-batch 8 \
    --speculative-tokens 4 --lookup-history 8 >"$tmp/serve.log" 2>&1 &
server=$!
port=$(server_port "$tmp/serve.log")
if [[ -z $port ]]; then
    fail "server starts and prints its port" "$(cat "$tmp/serve.log")"
    kill $server 2>/dev/null
    finish
    exit 1
fi
pass "server starts on a free port ($port)"
grep -q "prompts fed 256 tokens per step (1024 while no other request decodes)" "$tmp/serve.log" &&
    pass "the banner gives both prompt steps" || fail "the banner gives both prompt steps" "$(head -1 "$tmp/serve.log")"
url="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer sekret")

# post PATH BODY: sets $status and $body.
post() {
    printf '%s' "$2" >"$tmp/request.json"
    body=$(curl -s -o - -w '\n%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
        --data-binary @"$tmp/request.json" "$url$1")
    status=${body##*$'\n'}
    body=${body%$'\n'*}
}
# check NAME CONDITION...: passes if the jq condition holds on $body.
check() {
    local name=$1
    shift
    if echo "$body" | jq -e "$@" >/dev/null 2>&1; then pass "$name"; else fail "$name" "status $status" "body: ${body:0:400}"; fi
}

body=$(curl -s "$url/health")
check "GET /health without a key" '.status == "ok"'
status=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
[[ $status == 401 ]] && pass "GET /v1/models without the key: 401" || fail "GET /v1/models without the key: 401" "status $status"
body=$(curl -s "${auth[@]}" "$url/v1/models")
check "GET /v1/models lists the model" '.object == "list" and .data[0].id == "m"'

# Completions: token ids in, the same ids as `zaya generate` (greedy).
expected=$("$ZAYA" generate "$tmp/m" --tokens 5,17,3,9 --temperature 0 -n 12 --print-ids -q | tail -1)
post /v1/completions '{"prompt": [5,17,3,9], "max_tokens": 12, "temperature": 0}'
got=$(echo "$body" | jq -r '.choices[0].token_ids | map(tostring) | join(",")')
[[ $status == 200 && $got == "$expected" ]] && pass "completions with token ids = zaya generate ($got)" ||
    fail "completions with token ids = zaya generate" "status $status" "server: $got" "generate: $expected"
check "completions usage counts tokens" ".usage.prompt_tokens == 4 and .usage.completion_tokens == (.choices[0].token_ids | length) and .object == \"text_completion\""

post /v1/completions '{"prompt": "The quick brown fox", "max_tokens": 10, "temperature": 0, "model": "m"}'
check "completions with a text prompt" '.choices[0].text | type == "string"'
plain_text=$(echo "$body" | jq -r '.choices[0].text')
fingerprint=$(echo "$body" | jq -r .system_fingerprint)
[[ $fingerprint =~ ^fp_[0-9a-f]{12}$ ]] && grep -q "^system_fingerprint: $fingerprint$" "$tmp/serve.log" &&
    pass "completions carry the system_fingerprint the banner gives ($fingerprint)" ||
    fail "completions carry the banner's system_fingerprint" "response: $fingerprint" "$(grep fingerprint "$tmp/serve.log")"

# The same request streamed: data: lines, [DONE] last, the deltas concatenate to the same text.
stream=$(curl -sN "${auth[@]}" -d '{"prompt": "The quick brown fox", "max_tokens": 10, "temperature": 0, "stream": true}' "$url/v1/completions")
last=$(echo "$stream" | grep '^data: ' | tail -1)
streamed=$(echo "$stream" | grep '^data: {' | sed 's/^data: //' | jq -j '.choices[0].text')
[[ $last == "data: [DONE]" ]] && pass "stream ends with data: [DONE]" || fail "stream ends with data: [DONE]" "$last"
[[ $streamed == "$plain_text" ]] && pass "streamed deltas = the plain response's text" ||
    fail "streamed deltas = the plain response's text" "stream: $streamed" "plain: $plain_text"
finish_reason=$(echo "$stream" | grep '^data: {' | tail -1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')
[[ $finish_reason == length || $finish_reason == stop ]] && pass "last chunk has the finish reason ($finish_reason)" ||
    fail "last chunk has the finish reason" "$finish_reason"
fingerprints=$(echo "$stream" | grep '^data: {' | sed 's/^data: //' | jq -r .system_fingerprint | sort -u)
[[ $fingerprints == "$fingerprint" ]] && pass "every chunk carries the system_fingerprint" ||
    fail "every chunk carries the system_fingerprint" "$fingerprints"

post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 6, "seed": 3}'
check "chat completion" '.object == "chat.completion" and .choices[0].message.role == "assistant" and (.choices[0].message.content | type == "string")'
stream=$(curl -sN "${auth[@]}" -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "stream": true}' "$url/v1/chat/completions")
first=$(echo "$stream" | grep '^data: {' | head -1 | sed 's/^data: //')
body=$first
check "chat stream opens with the assistant role" '.object == "chat.completion.chunk" and .choices[0].delta.role == "assistant"'

# Log-probabilities. Scoring (echo, max_tokens 0): the prompt's mean log-probability is minus the loss
# `zaya forward` computes over the same tokens (the training forward, not the decoder).
ids=5,17,3,9,40,41,42,43,44,45,46,47
want=$("$ZAYA" forward "$tmp/m" --tokens "$ids" --out "$tmp/f.safetensors" | sed -nE 's/^loss ([-+0-9.eE]+)$/\1/p')
post /v1/completions "{\"prompt\": [$ids], \"max_tokens\": 0, \"echo\": true, \"logprobs\": 2}"
got=$(echo "$body" | jq '.choices[0].logprobs.token_logprobs[1:] | -(add / length)')
if [[ $status == 200 && -n $want ]] && python3 -c "import sys; sys.exit(0 if abs($got - $want) < 1e-4 else 1)"; then
    pass "echo + logprobs scores the prompt: -mean = zaya forward's loss ($got vs $want)"
else
    fail "echo + logprobs scores the prompt as zaya forward" "status $status" "got '$got' want '$want'" "${body:0:300}"
fi
check "a scored prompt: a null first entry, the chosen token among the top ones, no completion" \
    '.choices[0].logprobs as $l | ($l.tokens | length) == 12 and $l.token_logprobs[0] == null and
     $l.top_logprobs[0] == null and ([$l.top_logprobs[1:][] | length] | all(. >= 2 and . <= 3)) and
     .choices[0].token_ids == [] and .usage.completion_tokens == 0'
# As lm-evaluation-harness asks (echo, one greedy token): its entry follows the prompt's, and is the top one.
post /v1/completions "{\"prompt\": [[$ids]], \"max_tokens\": 1, \"echo\": true, \"logprobs\": 1, \"temperature\": 0}"
check "echo + one greedy token: 13 entries, the last the most likely" \
    '.choices[0].logprobs as $l | ($l.tokens | length) == 13 and
     $l.token_logprobs[12] == ($l.top_logprobs[12] | [.[]] | max)'
# Text: the tokens spell the echoed prompt and the completion; text offsets advance by each token's characters.
post /v1/completions '{"prompt": "The quick brown fox", "max_tokens": 6, "temperature": 0, "echo": true, "logprobs": 0}'
check "echoed text: the prompt, then the completion the tokens spell" \
    '.choices[0] as $c | ($c.text | startswith("The quick brown fox")) and
     ($c.logprobs.tokens[1:] | join("")) == $c.text and $c.logprobs.tokens[0] == "<s>" and
     ([$c.logprobs.tokens[1:][] | length] | . as $n | [foreach $n[] as $x (0; . + $x)] | .[:-1]) ==
     $c.logprobs.text_offset[2:]'
plain_lp=$(echo "$body" | jq -S -c '.choices[0].logprobs')
stream=$(curl -sN "${auth[@]}" -d '{"prompt": "The quick brown fox", "max_tokens": 6, "temperature": 0, "echo": true,
    "logprobs": 0, "stream": true}' "$url/v1/completions")
streamed_lp=$(echo "$stream" | grep '^data: {' | sed 's/^data: //' |
    jq -S -s -c '[.[].choices[0].logprobs | select(. != null)] | {tokens: map(.tokens) | add, token_logprobs: map(.token_logprobs) | add, top_logprobs: map(.top_logprobs) | add,
     text_offset: map(.text_offset) | add}')
[[ -n $plain_lp && $streamed_lp == "$plain_lp" ]] && pass "streamed log-probabilities = the plain response's" ||
    fail "streamed log-probabilities = the plain response's" "stream: ${streamed_lp:0:300}" "plain: ${plain_lp:0:300}"
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0,
    "logprobs": true, "top_logprobs": 3}'
check "chat logprobs: an entry per token, 3 alternatives, bytes" \
    '.choices[0] as $c | ($c.logprobs.content | length) == ($c.token_ids | length) and
     ($c.logprobs.content | all(.top_logprobs | length == 3)) and ($c.logprobs.content[0].bytes | type == "array")'
# Several prompts in one request: a choice each, equal to each prompt sent alone.
post /v1/completions '{"prompt": [[5,17,3], [9,8], [40,41,42,43]], "max_tokens": 7, "temperature": 0.8, "seed": 5}'
many=$(echo "$body" | jq -c '[.choices[] | [.index, .token_ids]]')
alone=$(for p in '[5,17,3]' '[9,8]' '[40,41,42,43]'; do
    curl -s "${auth[@]}" -d "{\"prompt\": $p, \"max_tokens\": 7, \"temperature\": 0.8, \"seed\": 5}" \
        "$url/v1/completions" | jq -c '.choices[0].token_ids'
done | jq -s -c 'to_entries | map([.key, .value])')
[[ $status == 200 && $many == "$alone" ]] && pass "3 prompts in one request = each alone ($many)" ||
    fail "3 prompts in one request = each alone" "status $status" "together: $many" "alone: $alone"

# /tokenize and /detokenize (vLLM's): the ids the completions and chat endpoints feed, and text back.
post /v1/completions '{"prompt": "The quick brown fox", "max_tokens": 1}'
want=$(echo "$body" | jq '.usage.prompt_tokens')
post /tokenize '{"prompt": "The quick brown fox"}'
ids=$(echo "$body" | jq -c '.tokens')
check "/tokenize: the ids a completion's prompt takes ($want), BOS first" \
    ".count == $want and (.tokens | length) == $want and .tokens[0] == 2 and .max_model_len == 1024"
post /tokenize '{"prompt": "The quick brown fox", "add_special_tokens": false}'
check "/tokenize add_special_tokens false: no BOS" ".count == $want - 1 and .tokens == ($ids | .[1:])"
post /detokenize "{\"tokens\": $ids}"
check "/detokenize: the text back" '.prompt == "The quick brown fox"'
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}'
want=$(echo "$body" | jq '.usage.prompt_tokens')
post /tokenize '{"messages": [{"role": "user", "content": "Hello"}]}'
check "/tokenize messages: the chat prompt's ids ($want)" ".count == $want"

# n choices: the j-th sampled with seed + j (the first is the request alone); logit_bias bans a token.
post /v1/completions '{"prompt": [5,17,3], "max_tokens": 7, "temperature": 0.8, "seed": 5, "n": 2}'
n2=$(echo "$body" | jq -c '[.choices[] | .token_ids]')
alone=$(for seed in 5 6; do
    curl -s "${auth[@]}" -d "{\"prompt\": [5,17,3], \"max_tokens\": 7, \"temperature\": 0.8, \"seed\": $seed}" \
        "$url/v1/completions" | jq -c '.choices[0].token_ids'
done | jq -s -c '.')
[[ $status == 200 && $n2 == "$alone" ]] && pass "n 2 = seeds 5 and 6 alone" || fail "n 2 = seeds 5 and 6 alone" "n: $n2" "alone: $alone"
post /v1/completions '{"prompt": [5,17,3,9], "max_tokens": 12, "temperature": 0}'
top=$(echo "$body" | jq '.choices[0].token_ids[0]')
post /v1/completions "{\"prompt\": [5,17,3,9], \"max_tokens\": 12, \"temperature\": 0, \"logit_bias\": {\"$top\": -100}}"
check "logit_bias -100 bans the greedy token ($top)" ".choices[0].token_ids | length == 12 and all(. != $top)"

# Concurrent requests: 8 at once, sampled with different seeds; each equals the same request made alone.
for i in $(seq 1 8); do
    req="{\"prompt\": [$i,7,8], \"max_tokens\": 24, \"temperature\": 1.0, \"seed\": $i}"
    curl -s "${auth[@]}" -d "$req" "$url/v1/completions" | jq -c '.choices[0].token_ids' >"$tmp/par.$i" &
done
wait $(jobs -p | grep -v "^$server$") 2>/dev/null
body=$(curl -s "$url/health")
check "concurrent requests were decoded in one batch" '.max_batch_seen >= 2'
same=0
for i in $(seq 1 8); do
    req="{\"prompt\": [$i,7,8], \"max_tokens\": 24, \"temperature\": 1.0, \"seed\": $i}"
    alone=$(curl -s "${auth[@]}" -d "$req" "$url/v1/completions" | jq -c '.choices[0].token_ids')
    [[ -n $alone && $alone == "$(cat "$tmp/par.$i")" ]] && same=$((same + 1))
done
[[ $same == 8 ]] && pass "8 concurrent requests = the same requests alone" || fail "8 concurrent requests = alone" "$same of 8 equal"

# Prefix reuse: a request that continues an earlier one (its prompt, its answer, more) resumes from the earlier
# one's cache and generates what `zaya generate` (no cache) generates for the whole prompt; so does a chat's next turn.
post /v1/completions '{"prompt": [61,62,63,64,65,66,67,68,69,70], "max_tokens": 8, "temperature": 0}'
check "a new prompt is computed whole" '.usage.prompt_tokens_details.cached_tokens == 0'
first=$(echo "$body" | jq -r '.choices[0].token_ids | map(tostring) | join(",")')
# Its cache holds the prompt and the answer but the answer's last token when it stopped at the length (never fed).
held=$(echo "$body" | jq '10 + (.choices[0].token_ids | length) - (if .choices[0].finish_reason == "length" then 1 else 0 end)')
ids="61,62,63,64,65,66,67,68,69,70,$first,71,72"
post /v1/completions "{\"prompt\": [$ids], \"max_tokens\": 8, \"temperature\": 0}"
check "its continuation resumes the $held tokens it holds" ".usage.prompt_tokens_details.cached_tokens == $held"
got=$(echo "$body" | jq -r '.choices[0].token_ids | map(tostring) | join(",")')
expected=$("$ZAYA" generate "$tmp/m" --tokens "$ids" --temperature 0 -n 8 --print-ids -q | tail -1)
[[ -n $got && $got == "$expected" ]] && pass "the resumed request = zaya generate on the whole prompt ($got)" ||
    fail "the resumed request = zaya generate on the whole prompt" "server: $got" "generate: $expected"
turn='{"role": "system", "content": "You check caches."}, {"role": "user", "content": "Hello there"}'
post /v1/chat/completions "{\"messages\": [$turn], \"max_tokens\": 6, \"temperature\": 0}"
p1=$(echo "$body" | jq '.usage.prompt_tokens')
answer=$(echo "$body" | jq '.choices[0].message.content')
post /v1/chat/completions "{\"messages\": [$turn, {\"role\": \"assistant\", \"content\": $answer},
    {\"role\": \"user\", \"content\": \"And then?\"}], \"max_tokens\": 6, \"temperature\": 0}"
check "a chat's next turn resumes at least the last turn's $p1 prompt tokens" \
    ".usage.prompt_tokens_details.cached_tokens >= $p1 and .usage.prompt_tokens > $p1"
body=$(curl -s "$url/health")
check "/health counts the prefix cache's hits" ".prefix_cache.hits >= 2 and .prefix_cache.tokens_reused >= $held + $p1"

# /metrics (Prometheus' text format): one more request moves the totals by its own usage.
metric() { sed -nE "s/^$1 ([0-9.e+-]+)$/\1/p" <<<"$metrics"; }
metrics=$(curl -s "$url/metrics")
before=("$(metric zaya_prompt_tokens_total)" "$(metric zaya_generation_tokens_total)"
    "$(metric 'zaya_requests_total\{finish_reason="length"\}')" "$(metric zaya_prompt_tokens_cached_total)")
post /v1/completions '{"prompt": [81,82,83,84,85], "max_tokens": 7, "temperature": 0, "stop_token_ids": []}'
used=$(echo "$body" | jq -r '"\(.usage.prompt_tokens) \(.usage.completion_tokens) \(.choices[0].finish_reason)"')
metrics=$(curl -s "$url/metrics")
after=("$(metric zaya_prompt_tokens_total)" "$(metric zaya_generation_tokens_total)"
    "$(metric 'zaya_requests_total\{finish_reason="length"\}')" "$(metric zaya_prompt_tokens_cached_total)")
if [[ $used == "5 7 length" && $metrics == *"# TYPE zaya_requests_total counter"* ]] &&
    ((after[0] - before[0] == 5 && after[1] - before[1] == 7 && after[2] - before[2] == 1)) &&
    ((${after[3]%.*} >= held + p1)) && grep -q '^zaya_prefix_cache_hits_total [1-9]' <<<"$metrics"; then
    pass "/metrics: one request adds its 5 prompt and 7 generated tokens; ${after[3]} tokens resumed so far"
    drafted=$(metric zaya_spec_decode_draft_tokens_total) taken=$(metric zaya_spec_decode_accepted_tokens_total)
    ((drafted > 0 && taken > 0 && taken <= drafted)) && grep -q "speculative decoding: prompt lookup" "$tmp/serve.log" &&
        pass "/metrics: $taken of $drafted drafted tokens taken so far" ||
        fail "/metrics counts the drafts" "drafted: $drafted, taken: $taken" "$(head -3 "$tmp/serve.log")"
else
    fail "/metrics: totals move by a request's usage" "usage: $used" "before: ${before[*]}" "after: ${after[*]}" \
        "$(head -c 600 <<<"$metrics")"
fi

# JSON mode: every answer that stops is a JSON object, one cut by max_tokens a prefix of one (the random model is
# nudged towards closing strings and containers). Greedy, it draws what `zaya generate --json` draws.
bias='{'
for ch in '\"' '}' ']' ','; do
    post /tokenize "{\"prompt\": \"$ch\", \"add_special_tokens\": false}"
    bias+="\"$(echo "$body" | jq -r '.tokens[0]')\": 6,"
done
bias="${bias%,}}"
post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Answer in JSON\"}], \"n\": 6,
    \"seed\": 4, \"max_tokens\": 60, \"response_format\": {\"type\": \"json_object\"}, \"logit_bias\": $bias}"
check "JSON mode (chat): answers that stop parse as objects, the others are cut by max_tokens; most stop" \
    '[.choices[] | if .finish_reason == "stop" then (.message.content | fromjson | type == "object")
      else .finish_reason == "length" end] as $ok | ($ok | all) and
     ([.choices[] | select(.finish_reason == "stop")] | length) >= 3'
post /v1/completions "{\"prompt\": \"The quick brown fox\", \"n\": 4, \"seed\": 9, \"max_tokens\": 60,
    \"response_format\": {\"type\": \"json_object\"}, \"logit_bias\": $bias}"
check "JSON mode (completions): the same" \
    '[.choices[] | if .finish_reason == "stop" then (.text | fromjson | type == "object")
      else .finish_reason == "length" end] | all'
# (At most 32 bytes of whitespace before the object: the random model's favourite token is a space.)
expected=$("$ZAYA" generate "$tmp/m" --tokens 5,17,3,9 --temperature 0 -n 40 --json --print-ids -q | tail -1)
post /v1/completions '{"prompt": [5,17,3,9], "max_tokens": 40, "temperature": 0,
    "response_format": {"type": "json_object"}}'
got=$(echo "$body" | jq -r '.choices[0].token_ids | map(tostring) | join(",")')
if [[ $status == 200 && -n $got && $got == "$expected" ]] &&
    echo "$body" | jq -e '.choices[0].text | test("^[ \\n\\t\\r]{0,32}[{]")' >/dev/null; then
    pass "JSON mode, greedy: the server = zaya generate --json ($(echo "$body" | jq -c '.choices[0].text'))"
else
    fail "JSON mode, greedy: the server = zaya generate --json" "status $status" "server: $got" "generate: $expected" \
        "${body:0:300}"
fi

# Structured output (response_format json_schema): answers that stop are values of the schema, keys in its order
# (whitespace tokens banned too, so that the random model gets there within max_tokens). Greedy, the server draws
# what `zaya generate --json-schema FILE` draws.
terse="${bias%\}}"
for ch in ' ' '\n' '\t' '\r'; do
    post /tokenize "{\"prompt\": \"$ch\", \"add_special_tokens\": false}"
    terse+=",\"$(echo "$body" | jq -r '.tokens[0]')\": -100"
done
terse+="}"
schema='{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
    "n": {"type": "integer", "minimum": -5, "maximum": 20}, "code": {"type": "string", "maxLength": 3}},
    "required": ["answer", "n", "code"], "additionalProperties": false}'
post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Answer in JSON\"}], \"n\": 6,
    \"seed\": 2, \"max_tokens\": 60, \"logit_bias\": $terse,
    \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\", \"schema\": $schema}}}"
check "structured output: answers that stop are {answer: yes|no, n in [-5, 20], code: 3 chars at most}; most stop" \
    '[.choices[] | if .finish_reason == "stop" then (.message.content | fromjson |
      (keys_unsorted == ["answer", "n", "code"]) and (.answer == "yes" or .answer == "no") and
      (.n | type == "number" and floor == . and . >= -5 and . <= 20) and (.code | length <= 3))
      else .finish_reason == "length" end] as $ok | ($ok | all) and
     ([.choices[] | select(.finish_reason == "stop")] | length) >= 3'
# Alternatives that begin alike (anyOf of two objects, read side by side until "kind" tells them apart; a type list
# of integer and number).
pets='{"type": "object", "properties": {"pet": {"anyOf": [
    {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 0,
     "maximum": 9}}, "required": ["kind", "lives"], "additionalProperties": false},
    {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
     "required": ["kind", "good"], "additionalProperties": false}]},
    "n": {"type": ["integer", "number"], "maximum": 50}}, "required": ["pet", "n"], "additionalProperties": false}'
post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"A pet in JSON\"}], \"n\": 6,
    \"seed\": 3, \"max_tokens\": 60, \"logit_bias\": $terse,
    \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", \"schema\": $pets}}}"
check "structured output, anyOf of objects alike: answers that stop are a cat {kind, lives 0-9} or a dog {kind, good}" \
    '[.choices[] | if .finish_reason == "stop" then (.message.content | fromjson |
      (.pet | (keys_unsorted == ["kind", "lives"] and .kind == "cat" and (.lives | floor == . and . >= 0 and . <= 9))
       or (keys_unsorted == ["kind", "good"] and .kind == "dog" and (.good | type == "boolean"))) and
      (.n | type == "number" and . <= 50)) else .finish_reason == "length" end] as $ok | ($ok | all) and
     ([.choices[] | select(.finish_reason == "stop")] | length) >= 3'
# multipleOf (pydantic's conint(multiple_of=7), condecimal(multiple_of=0.25) with bounds).
steps='{"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7},
    "p": {"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 10}}, "required": ["n", "p"],
    "additionalProperties": false}'
post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Numbers in JSON\"}], \"n\": 6,
    \"seed\": 4, \"max_tokens\": 60, \"logit_bias\": $terse,
    \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"s\", \"schema\": $steps}}}"
python3 - "$body" <<'PY' && # exactly, in decimal: the random model writes integers past a double's 53 bits
import json, sys
from decimal import Decimal
stops = 0
for c in json.loads(sys.argv[1])["choices"]:
    if c["finish_reason"] == "length":
        continue
    stops += 1
    v = json.loads(c["message"]["content"], parse_float=Decimal)
    assert list(v) == ["n", "p"] and isinstance(v["n"], int) and v["n"] % 7 == 0, v
    assert 0 <= Decimal(v["p"]) <= 10 and Decimal(v["p"]) * 4 % 1 == 0, v
assert stops >= 3, stops
PY
    pass "structured output, multipleOf: answers that stop have n a multiple of 7, p of 0.25 in [0, 10]; most stop" ||
    fail "structured output, multipleOf: answers that stop have n a multiple of 7, p of 0.25 in [0, 10]" "$body"
printf '%s' "$schema" >"$tmp/schema.json"
expected=$("$ZAYA" generate "$tmp/m" --tokens 5,17,3,9 --temperature 0 -n 40 --json-schema "$tmp/schema.json" \
    --print-ids -q | tail -1)
post /v1/completions "{\"prompt\": [5,17,3,9], \"max_tokens\": 40, \"temperature\": 0,
    \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\", \"schema\": $schema}}}"
got=$(echo "$body" | jq -r '.choices[0].token_ids | map(tostring) | join(",")')
[[ $status == 200 && -n $got && $got == "$expected" ]] &&
    pass "structured output, greedy: the server = zaya generate --json-schema" ||
    fail "structured output, greedy: the server = zaya generate --json-schema" "status $status" "server: $got" \
        "generate: $expected"
printf '{"type": "object", "properties": {"a": {"type": "string", "pattern": "x(?!y)"}}}' >"$tmp/bad_schema.json"
out=$("$ZAYA" generate "$tmp/m" --tokens 5 --json-schema "$tmp/bad_schema.json" 2>&1)
[[ $? != 0 && $out == *"bad_schema.json"*"schema.properties.a: pattern 'x(?!y)': lookaround"* ]] &&
    pass "--json-schema refuses what it cannot enforce, naming the file and the place" ||
    fail "--json-schema refuses what it cannot enforce, naming the file and the place" "$out"

# Bad requests: 4xx with an OpenAI error body.
# Tool calls (infer/tool_calls.h): the answer held to the tools' calls, read back into OpenAI's message; streamed,
# the same call; a tool's result sent back.
tools='[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties":
    {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
    "additionalProperties": false}}}, {"type": "function", "function": {"name": "now"}}]'
ask='[{"role": "user", "content": "Weather in Paris?"}]'
post /v1/chat/completions "{\"messages\": $ask, \"tools\": $tools, \"tool_choice\": \"required\",
    \"parallel_tool_calls\": false, \"n\": 3, \"max_tokens\": 200, \"seed\": 11}"
check "tool_choice required: 3 choices, each one call of a tool, its arguments of the tool's schema" '
    (.choices | length) == 3 and all(.choices[];
        .finish_reason == "tool_calls" and .message.content == null and (.message.tool_calls | length) == 1 and
        (.message.tool_calls[0] | .type == "function" and (.id | startswith("call_")) and
            (.function.arguments | fromjson) as $a |
            if .function.name == "get_weather" then ($a | keys) == ["city", "unit"] and ($a.city | length) <= 8 and
                ($a.unit == "c" or $a.unit == "f")
            else .function.name == "now" and $a == {} end))'
plain_call=$(echo "$body" | jq -c '.choices[0].message.tool_calls[0].function')
stream=$(curl -sN "${auth[@]}" -d "{\"messages\": $ask, \"tools\": $tools, \"tool_choice\": \"required\",
    \"parallel_tool_calls\": false, \"max_tokens\": 200, \"seed\": 11, \"stream\": true}" "$url/v1/chat/completions")
streamed_call=$(echo "$stream" | grep '^data: {' | sed 's/^data: //' |
    jq -sc '[.[].choices[0].delta.tool_calls // [] | .[]] | {name: (map(.function.name // "") | add),
            arguments: (map(.function.arguments // "") | add)}')
finish=$(echo "$stream" | grep '^data: {' | tail -1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')
[[ -n $plain_call && $(jq -S . <<<"$streamed_call") == "$(jq -S '{name, arguments}' <<<"$plain_call")" &&
    $finish == tool_calls ]] &&
    pass "the call streamed = the plain response's first (finish_reason tool_calls)" ||
    fail "the call streamed = the plain response's first" "stream: $streamed_call ($finish)" "plain: $plain_call"
# tool_choice auto (the default with tools) is lazy: an answer that does not begin with {"tool_calls": is words,
# written freely — the random model's words are the completion of the same prompt ids; streamed, the same words.
auto_req="\"messages\": $ask, \"tools\": $tools, \"max_tokens\": 24, \"temperature\": 1.0, \"seed\": 7"
post /v1/chat/completions "{$auto_req}"
check "tool_choice auto: the random model answers in words" '.choices[0].message.tool_calls == null and
    (.choices[0].message.content | type) == "string" and (.choices[0].finish_reason | . == "stop" or . == "length")'
auto_words=$(echo "$body" | jq -c '.choices[0].message.content')
post /tokenize "{\"messages\": $ask, \"tools\": $tools}"
post /v1/completions "{\"prompt\": $(echo "$body" | jq -c .tokens), \"max_tokens\": 24, \"temperature\": 1.0,
    \"seed\": 7}"
completed=$(echo "$body" | jq -c '.choices[0].text')
[[ $status == 200 && $completed == "$auto_words" ]] &&
    pass "auto's words = the completion of the same prompt ids, unconstrained" ||
    fail "auto's words = the completion of the same prompt ids" "chat: $auto_words" "completion: $completed"
streamed_words=$(curl -sN "${auth[@]}" -d "{$auto_req, \"stream\": true}" "$url/v1/chat/completions" |
    grep '^data: {' | sed 's/^data: //' | jq -sc '[.[].choices[0].delta.content // ""] | add')
[[ $streamed_words == "$auto_words" ]] && pass "auto's words streamed = plain" ||
    fail "auto's words streamed = plain" "stream: $streamed_words" "plain: $auto_words"
post /v1/chat/completions "{\"messages\": $ask, \"tools\": $tools,
    \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"now\"}}, \"max_tokens\": 50, \"seed\": 2}"
check "tool_choice naming a function: calls of it alone" \
    '.choices[0].finish_reason == "tool_calls" and all(.choices[0].message.tool_calls[]; .function.name == "now")'
followup=$(jq -c --argjson call "$(echo "$body" | jq -c '.choices[0].message')" \
    '. + [$call, {"role": "tool", "tool_call_id": $call.tool_calls[0].id, "content": "12:00"}]' <<<"$ask")
post /tokenize "{\"messages\": $followup, \"tools\": $tools}"
ids=$(echo "$body" | jq -c .tokens)
post /detokenize "{\"tokens\": $ids}"
check "a tool's result sent back: the prompt holds the call as the model wrote it and the result" \
    '.prompt | contains("{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}") and contains("returned:\n12:00")'
post /v1/chat/completions "{\"messages\": $followup, \"tools\": $tools, \"tool_choice\": \"none\", \"max_tokens\": 5}"
check "then tool_choice none: words" '.choices[0].message.tool_calls == null and (.choices[0].message.content | type) == "string"'

# zaya chat --tools: the server's chat with tools, turn for turn. Greedy, a call is made, /result answers it, and the
# next call is the server's answer to the conversation with that result: the same calls from prompts of as many
# tokens (the result's turn, which names the call's id, included).
printf '%s' "$tools" >"$tmp/tools.json"
printf 'Weather in Paris?\n/result 12:00\n/save %s\n' "$tmp/saved.jsonl" |
    "$ZAYA" chat "$tmp/m" --tools "$tmp/tools.json" --tool-choice required --parallel-tool-calls false \
        --temperature 0 -n 200 >"$tmp/chat_tools.out" 2>"$tmp/chat_tools.err"
chat_calls=$(grep '^\[tool call ' "$tmp/chat_tools.err" | sed 's/^\[tool call call_[0-9]*_[0-9]*: //; s/\]$//')
chat_calls+=$'\n'$(grep -o '^\[[0-9]* prompt tokens' "$tmp/chat_tools.err" | tr -dc '0-9\n' | paste -sd,)
greedy_tools="\"tools\": $tools, \"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"max_tokens\": 200,
    \"temperature\": 0"
post /v1/chat/completions "{\"messages\": $ask, $greedy_tools}"
first=$(echo "$body" | jq -c '.choices[0].message')
served_calls=$(echo "$first" | jq -r '.tool_calls[0].function | "\(.name)(\(.arguments))"')
prompt_tokens=$(echo "$body" | jq .usage.prompt_tokens)
chat_id=$(grep -o -m1 '^\[tool call call_[0-9]*_[0-9]*' "$tmp/chat_tools.err" | sed 's/^\[tool call //')
followup=$(jq -c --argjson call "$first" --arg id "$chat_id" \
    '. + [$call | .tool_calls[0].id = $id, {"role": "tool", "tool_call_id": $id, "content": "12:00"}]' <<<"$ask")
post /v1/chat/completions "{\"messages\": $followup, $greedy_tools}"
served_calls+=$'\n'$(echo "$body" | jq -r '.choices[0].message.tool_calls[0].function | "\(.name)(\(.arguments))"')
served_calls+=$'\n'"$prompt_tokens,$(echo "$body" | jq .usage.prompt_tokens)"
[[ $(grep -c . <<<"$chat_calls") == 3 && $chat_calls == "$served_calls" ]] &&
    pass "zaya chat --tools: a call, its /result, the next call = the server's, greedy" ||
    fail "zaya chat --tools = the server's chat with tools" "chat: $chat_calls" "server: $served_calls" \
        "$(cat "$tmp/chat_tools.err")"
# /save appended the conversation as a chat record with its tools, which zaya prepare takes as fine-tuning data.
jq -e --argjson tools "$tools" '(.messages | length) == 4 and .messages[0].content == "Weather in Paris?" and
    .messages[2] == {"role": "tool", "tool_call_id": .messages[1].tool_calls[0].id, "content": "12:00"} and
    .messages[3].tool_calls[0].id != null and .tools == $tools and .tool_choice == "required" and
    .parallel_tool_calls == false' "$tmp/saved.jsonl" >/dev/null &&
    prepared=$("$ZAYA" prepare --input "$tmp/saved.jsonl" --tokenizer "$tmp/m/tokenizer.model" --out "$tmp/saved_data" \
        2>&1) && [[ $prepared == *"train      1 docs"* ]] &&
    pass "zaya chat /save: the conversation and its tools as a chat record zaya prepare takes" ||
    fail "zaya chat /save: a chat record zaya prepare takes" "$(cat "$tmp/saved.jsonl")" "${prepared:-}"
out=$(printf 'hi\n/result 1\n' | "$ZAYA" chat "$tmp/m" --tools "$tmp/tools.json" --tool-choice none -n 3 2>&1)
[[ $? == 0 && $out == *"no tool call awaits a result"* ]] &&
    pass "zaya chat: /result with no call awaiting says so" || fail "zaya chat: /result with no call awaiting" "$out"
printf '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]' \
    >"$tmp/bad_tools.json"
out=$("$ZAYA" chat "$tmp/m" --tools "$tmp/bad_tools.json" </dev/null 2>&1)
[[ $? != 0 && $out == *"bad_tools.json"*"tools[0].function.parameters"*"'not'"* ]] &&
    pass "zaya chat --tools refuses a schema it cannot hold, naming the file and the place" ||
    fail "zaya chat --tools refuses a bad schema, naming the file and the place" "$out"
out=$("$ZAYA" chat "$tmp/m" --tool-choice required </dev/null 2>&1)
[[ $? != 0 && $out == *"--tool-choice and --parallel-tool-calls need --tools"* ]] && pass "zaya chat: --tool-choice without --tools is refused" ||
    fail "zaya chat: --tool-choice without --tools is refused" "$out"

# Load: 400 mixed requests, up to 24 at once, a third of the streams left by their clients after the first bytes
# (tests/cli/serve_stress.py). Every other one is answered with a 200, none stays active (the server cancels what it
# can no longer send), and a sampled request made before is answered the same after.
probe='{"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 40, "temperature": 0.8, "seed": 5,
    "logprobs": true, "top_logprobs": 2}'
post /v1/chat/completions "$probe"
before=$(echo "$body" | jq -c '.choices[0]')
summary=$(python3 "$(dirname "$0")/serve_stress.py" "$url" sekret "$tmp/tools.json" 400)
active=
for _ in $(seq 50); do
    active=$(curl -s "${auth[@]}" "$url/metrics" | grep '^zaya_requests_active ' | cut -d' ' -f2)
    [[ $active == 0 ]] && break
    sleep 0.1
done
post /v1/chat/completions "$probe"
[[ $(echo "$summary" | jq '.failed | length') == 0 && $(echo "$summary" | jq '.answered + .left') == 400 &&
    $(echo "$summary" | jq '.left') -gt 0 && $active == 0 && $(echo "$body" | jq -c '.choices[0]') == "$before" ]] &&
    pass "400 mixed requests, 24 at once, some left mid-stream: all answered, none left active, the same after" ||
    fail "400 mixed requests under load" "$summary" "active: $active" "before: $before" "after: $body"

# The Responses API (/v1/responses, infer/responses_api.h): the chat it means, answered as a Response object; its
# typed stream adds up to the same; function calls as items; a call and its output sent back as input items.
post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content":
    "Hello"}], "max_tokens": 12, "temperature": 1.0, "seed": 4}'
chat_text=$(echo "$body" | jq -c '.choices[0].message.content')
chat_usage=$(echo "$body" | jq -c '[.usage.prompt_tokens, .usage.completion_tokens]')
resp_req='"instructions": "Be brief.", "input": "Hello", "max_output_tokens": 12, "temperature": 1.0, "seed": 4'
post /v1/responses "{$resp_req}"
check "/v1/responses: the chat's words as a Response's message" "
    .object == \"response\" and (.id | startswith(\"resp_\")) and .output[0].type == \"message\" and
    .output[0].content[0].text == $chat_text and [.usage.input_tokens, .usage.output_tokens] == $chat_usage and
    (if .status == \"incomplete\" then .incomplete_details.reason == \"max_output_tokens\" else .status ==
        \"completed\" end)"
plain_response=$(echo "$body" | jq -c '{output: [.output[] | del(.id)], status, usage}') # (ids are per response)
events=$(curl -sN "${auth[@]}" -d "{$resp_req, \"stream\": true}" "$url/v1/responses")
streamed=$(echo "$events" | grep '^data: ' | sed 's/^data: //' | jq -sc '{text: ([.[] |
    select(.type == "response.output_text.delta") | .delta] | add), last: (.[-1] | {output: [.response.output[] | del(.id)],
    status: .response.status, usage: .response.usage}), order: ([.[].sequence_number] == ([.[].sequence_number] |
    sort)), named: ([.[].type] | length)}')
types=$(echo "$events" | grep -c '^event: response\.')
[[ $(jq -c .last <<<"$streamed") == "$plain_response" && $(jq -c .text <<<"$streamed") == "$chat_text" &&
    $(jq .order <<<"$streamed") == true && $types == $(jq .named <<<"$streamed") ]] &&
    pass "/v1/responses streamed: typed events ($types) whose deltas and final Response = the plain one" ||
    fail "/v1/responses streamed = plain" "stream: $streamed" "plain: $plain_response ($chat_text)"
rtools='[{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city":
    {"type": "string", "maxLength": 8}}, "required": ["city"], "additionalProperties": false}}]'
post /v1/responses "{\"input\": \"Weather in Paris?\", \"tools\": $rtools, \"tool_choice\": \"required\",
    \"max_output_tokens\": 100, \"seed\": 3}"
check "/v1/responses tool_choice required: function_call items, arguments of the tool's schema" '
    .status == "completed" and (.output | length) >= 1 and all(.output[]; .type == "function_call" and
        .name == "get_weather" and (.call_id | startswith("call_")) and
        ((.arguments | fromjson) | keys == ["city"] and (.city | length) <= 8))'
call=$(echo "$body" | jq -c '.output[0] | {type, call_id, name, arguments}')
post /v1/responses "{\"input\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, $call,
    {\"type\": \"function_call_output\", \"call_id\": $(jq .call_id <<<"$call"), \"output\": \"18 C\"}],
    \"tools\": $rtools, \"tool_choice\": \"none\", \"max_output_tokens\": 5}"
check "/v1/responses: the call and its output sent back as input items, answered in words" \
    '.output[0].type == "message" and (.output[0].content[0].text | type) == "string"'
# include "message.output_text.logprobs" with top_logprobs: the chat endpoint's entries for the same answer, streamed
# in the text deltas that add up to them.
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 1.0,
    "seed": 4, "logprobs": true, "top_logprobs": 2}'
chat_lp=$(echo "$body" | jq -c '.choices[0].logprobs.content')
lp_req='"input": "Hello", "max_output_tokens": 6, "temperature": 1.0, "seed": 4, "top_logprobs": 2,
    "include": ["message.output_text.logprobs"]'
post /v1/responses "{$lp_req}"
resp_lp=$(echo "$body" | jq -c '.output[0].content[0].logprobs')
events=$(curl -sN "${auth[@]}" -d "{$lp_req, \"stream\": true}" "$url/v1/responses")
streamed_lp=$(echo "$events" | grep '^data: ' | sed 's/^data: //' | jq -sc '[.[] |
    select(.type == "response.output_text.delta") | .logprobs[]]')
final_lp=$(echo "$events" | grep '^data: ' | sed 's/^data: //' | jq -sc '.[-1].response.output[0].content[0].logprobs')
# The same tokens and bytes; the numbers within 1e-5: the later requests are drafted from the first's answer
# (--lookup-history), and this fp32 model's linears (oneDNN's SGEMM) sum a draft's rows in another order than one
# row's (bit for bit only with bf16 or int8 weights: docs/inference.md).
same_lp() {
    jq -en --argjson a "$1" --argjson b "$2" 'def near(x; y): ((x - y) | fabs) <= 1e-5;
        ($a | length) == ($b | length) and all(range($a | length) as $i | [$a[$i], $b[$i]];
            .[0].token == .[1].token and .[0].bytes == .[1].bytes and near(.[0].logprob; .[1].logprob) and
            (.[0].top_logprobs | length) == (.[1].top_logprobs | length) and
            all(range(.[0].top_logprobs | length) as $k | [.[0].top_logprobs[$k], .[1].top_logprobs[$k]];
                .[0].token == .[1].token and near(.[0].logprob; .[1].logprob)))' >/dev/null
}
[[ $(jq length <<<"$chat_lp") -ge 1 ]] && same_lp "$chat_lp" "$resp_lp" && same_lp "$chat_lp" "$streamed_lp" &&
    same_lp "$chat_lp" "$final_lp" &&
    pass "/v1/responses include logprobs: the chat's entries ($(jq length <<<"$chat_lp") tokens), streamed in its deltas" ||
    fail "/v1/responses logprobs = the chat's" "chat: ${chat_lp:0:300}" "responses: ${resp_lp:0:300}" \
        "streamed: ${streamed_lp:0:300}"
# truncation "auto": a conversation longer than the context drops its oldest turns; "disabled" (the default) refuses.
ctx=$(curl -s "${auth[@]}" -d '{"prompt": "x"}' "$url/tokenize" | jq .max_model_len)
long_input=$(jq -nc --argjson n $((ctx / 20 + 2)) '[range($n) | {role: (if . % 2 == 0 then "user" else "assistant"
    end), content: ([range(20)] | map("the quick fox") | join(" "))}] + [{role: "user", content: "Last?"}]')
post /v1/responses "{\"input\": $long_input, \"max_output_tokens\": 4}"
refused_long=$status
post /v1/responses "{\"input\": $long_input, \"max_output_tokens\": 4, \"truncation\": \"auto\"}"
[[ $refused_long == 400 && $status == 200 ]] && echo "$body" | jq -e --argjson ctx "$ctx" \
    '.truncation == "auto" and .usage.input_tokens < $ctx and .usage.input_tokens > $ctx - 250 and
        .output[0].type == "message"' >/dev/null &&
    pass "truncation auto: a conversation past the context ($ctx tokens) answered from its latest turns, as many as fit ($(jq .usage.input_tokens <<<"$body") tokens)" ||
    fail "truncation auto" "disabled: $refused_long" "auto: $status ${body:0:300}"
# Stored responses: previous_response_id continues the stored conversation (= sending it whole; its input_items list
# the conversation); GET returns the Response; DELETE forgets it; "store": false keeps nothing.
turn='"max_output_tokens": 8, "temperature": 1.0, "seed": 6'
post /v1/responses "{\"input\": \"Hello\", $turn}"
first=$body
first_id=$(echo "$first" | jq -r .id)
first_words=$(echo "$first" | jq -c '.output[0].content[0].text')
post /v1/responses "{\"previous_response_id\": \"$first_id\", \"input\": \"And then?\", $turn}"
continued=$(echo "$body" | jq -c '[.output[0].content[0].text, .usage.input_tokens, .previous_response_id]')
continued_id=$(echo "$body" | jq -r .id)
post /v1/responses "{\"input\": [{\"role\": \"user\", \"content\": \"Hello\"}, {\"role\": \"assistant\",
    \"content\": $first_words}, {\"role\": \"user\", \"content\": \"And then?\"}], $turn}"
whole=$(echo "$body" | jq -c --arg id "$first_id" '[.output[0].content[0].text, .usage.input_tokens, $id]')
[[ $status == 200 && $continued == "$whole" ]] &&
    pass "previous_response_id: the stored conversation continued = sent whole ($continued)" ||
    fail "previous_response_id = the conversation sent whole" "continued: $continued" "whole: $whole"
http_method() { status=$(curl -s -o "$tmp/got.json" -w '%{http_code}' "${auth[@]}" -X "$1" "$url$2"); body=$(cat "$tmp/got.json"); }
http_method GET "/v1/responses/$first_id"
[[ $status == 200 && $(jq -S -c . <<<"$body") == "$(jq -S -c . <<<"$first")" ]] &&
    pass "GET /v1/responses/{id}: the Response as answered" || fail "GET /v1/responses/{id}" "status $status" "$body"
http_method GET "/v1/responses/$first_id/input_items?order=asc&limit=5"
check "GET /v1/responses/{id}/input_items: its input as items" \
    '.object == "list" and .has_more == false and .data[0].type == "message" and .data[0].role == "user" and
        .data[0].content[0].text == "Hello" and .first_id == .data[0].id'
http_method GET "/v1/responses/$continued_id/input_items?order=asc"
check "input_items of a continuation: the first input, the first answer, then its own" --argjson first "$first" '
    (.data | length) == 3 and .data[0].id == "msg_\($first.id | ltrimstr("resp_"))_in0" and
        .data[0].content[0].text == "Hello" and .data[1] == $first.output[0] and
        .data[2].content[0].text == "And then?"'
http_method GET "/v1/responses/$first_id/input_items?limit=0"
[[ $status == 400 && $(jq -r .error.param <<<"$body") == limit ]] && pass "input_items limit=0: 400 naming limit" ||
    fail "input_items limit=0: 400 naming limit" "status $status" "$body"
http_method DELETE "/v1/responses/$first_id"
check "DELETE /v1/responses/{id}" '.deleted == true and .object == "response.deleted"'
http_method GET "/v1/responses/$first_id"
deleted_get=$status
post /v1/responses "{\"previous_response_id\": \"$first_id\", \"input\": \"x\"}"
[[ $deleted_get == 404 && $status == 404 ]] && pass "a deleted response: GET and previous_response_id 404" ||
    fail "a deleted response is gone" "GET $deleted_get, previous_response_id $status"
post /v1/responses "{\"input\": \"Hello\", \"store\": false, $turn}"
http_method GET "/v1/responses/$(echo "$body" | jq -r .id)"
[[ $status == 404 ]] && pass "\"store\": false keeps nothing" || fail "\"store\": false keeps nothing" "GET: $status"

expect_status() {
    local name=$1 want=$2 path=$3 data=$4 param=${5:-}
    post "$path" "$data"
    if [[ $status == "$want" ]] && echo "$body" | jq -e '.error.message | type == "string"' >/dev/null 2>&1 &&
        { [[ -z $param ]] || [[ $(echo "$body" | jq -r '.error.param') == "$param" ]]; }; then
        pass "$name: $want"
    else
        fail "$name: $want" "status $status" "body: ${body:0:300}"
    fi
}
expect_status "bad JSON" 400 /v1/completions '{"prompt": [1,2'
expect_status "temperature of the wrong type" 400 /v1/completions '{"prompt": [1], "temperature": "hot"}' temperature
expect_status "top_p out of range" 400 /v1/completions '{"prompt": [1], "top_p": 5}' top_p
expect_status "max_tokens negative" 400 /v1/completions '{"prompt": [1], "max_tokens": -1}' max_tokens
expect_status "token id outside the vocabulary" 400 /v1/completions '{"prompt": [1, 99999]}' prompt
expect_status "messages missing" 400 /v1/chat/completions '{"prompt": "x"}' messages
expect_status "unknown role" 400 /v1/chat/completions '{"messages": [{"role": "robot", "content": "x"}]}' 'messages[0].role'
# (A number as a part's type threw nlohmann's type_error out of the parser: found by fuzz_openai_request.)
expect_status "content part with a number as its type" 400 /v1/chat/completions \
    '{"messages": [{"role": "user", "content": [{"type": 4.0, "text": "hi"}]}]}' 'messages[0].content'
long=$(seq -s, 1 1030 | sed 's/[0-9][0-9]*/5/g')
expect_status "prompt over the context length (1024)" 400 /v1/completions "{\"prompt\": [$long]}" prompt
big=$(head -c 150000 /dev/zero | tr '\0' 'a')
expect_status "body over --max-body" 413 /v1/completions "{\"prompt\": \"$big\"}"
expect_status "unknown route" 404 /v1/nothing '{}'
expect_status "logprobs over 20" 400 /v1/completions '{"prompt": [1], "logprobs": 21}' logprobs
expect_status "top_logprobs without logprobs (chat)" 400 /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}' top_logprobs
expect_status "logit_bias out of the vocabulary" 400 /v1/completions '{"prompt": [1], "logit_bias": {"99999": 1}}' \
    logit_bias
expect_status "/detokenize an id outside the vocabulary" 400 /detokenize '{"tokens": [1, 99999]}' tokens
expect_status "/tokenize without a prompt" 400 /tokenize '{"text": "x"}' prompt
expect_status "response_format json_schema without a schema" 400 /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}' response_format
expect_status "a json_schema with a keyword it cannot enforce" 400 /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema":
      {"name": "a", "schema": {"type": "object", "properties": {"n": {"not": {"type": "integer"}}}}}}}' \
    response_format
[[ $(echo "$body" | jq -r .error.message) == *"schema.properties.n: 'not' is not supported"* ]] &&
    pass "its message names the keyword and the place" || fail "its message names the keyword and the place" "$body"
deep=$(printf '%*s' 30000 '' | tr ' ' '[')$(printf '%*s' 30000 '' | tr ' ' ']')
expect_status "a body nested 30000 levels deep (nlohmann copies recursively)" 400 /v1/completions \
    "{\"prompt\": [1], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": $deep}}}"
expect_status "response_format not an object" 400 /v1/completions '{"prompt": [1], "response_format": "json"}' \
    response_format
expect_status "tools empty" 400 /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "tools": []}' tools
expect_status "a tool's name with a space" 400 /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "get weather"}}]}' 'tools[0].function.name'
expect_status "tools on /v1/completions" 400 /v1/completions     '{"prompt": "x", "tools": [{"type": "function", "function": {"name": "a"}}]}' tools
expect_status "/v1/responses an unknown previous_response_id" 404 /v1/responses '{"input": "x",
    "previous_response_id": "resp_nope"}' previous_response_id
expect_status "/v1/responses a hosted tool" 400 /v1/responses '{"input": "x", "tools": [{"type": "web_search"}]}' \
    'tools[0].type'
expect_status "several prompts streamed" 400 /v1/completions '{"prompt": ["a", "b"], "stream": true}' prompt
body=$(curl -s "$url/health")
check "still serving after the bad requests" '.status == "ok"'

kill -TERM $server
for _ in $(seq 1 50); do kill -0 $server 2>/dev/null || break; sleep 0.1; done
if kill -0 $server 2>/dev/null; then
    fail "SIGTERM stops the server within 5 s"
    kill -9 $server
else
    wait $server
    rc=$?
    [[ $rc == 0 ]] && pass "SIGTERM stops the server (exit 0)" || fail "SIGTERM stops the server" "exit $rc"
fi

# --batch-invariant: a request's answer and log-probabilities (its prompt's too) are the same bits alone — its
# 300-token prompt read in one step, decoded a row a step — as the first of 4 choices (4 sequences read and decoded
# together, 1024 prompt tokens a step) and as `zaya generate --batch-invariant` gives; with drafts.
OPENBLAS_NUM_THREADS=2 "$ZAYA" serve "$tmp/m" --port 0 --max-batch 8 --speculative-tokens 4 --batch-invariant \
    >"$tmp/serve_bi.log" 2>&1 &
server=$!
port=$(server_port "$tmp/serve_bi.log")
if [[ -z $port ]] && grep -q "AVX-512" "$tmp/serve_bi.log"; then
    pass "--batch-invariant refused by this AVX2 build, naming why (skipped: $(head -c 100 "$tmp/serve_bi.log"))"
elif [[ -z $port ]]; then
    fail "a --batch-invariant server starts" "$(cat "$tmp/serve_bi.log")"
else
    grep -q "^batch-invariant: " "$tmp/serve_bi.log" && pass "the banner says batch-invariant" ||
        fail "the banner says batch-invariant" "$(cat "$tmp/serve_bi.log")"
    url="http://127.0.0.1:$port"
    auth=()
    ids=$(seq 1 300 | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 7) % 97 + 3}')
    req="\"prompt\": [$ids], \"max_tokens\": 40, \"temperature\": 1.0, \"seed\": 11, \"logprobs\": 3, \"echo\": true"
    post /v1/completions "{$req}"
    alone=$(echo "$body" | jq -c '.choices[0] | {text, token_ids, logprobs}')
    bi_fingerprint=$(echo "$body" | jq -r .system_fingerprint)
    [[ $bi_fingerprint =~ ^fp_[0-9a-f]{12}$ && $bi_fingerprint != "$fingerprint" ]] &&
        pass "batch invariance gives another system_fingerprint ($bi_fingerprint)" ||
        fail "batch invariance gives another system_fingerprint" "$bi_fingerprint vs $fingerprint"
    post /v1/completions "{$req, \"n\": 4}"
    first=$(echo "$body" | jq -c '.choices[0] | {text, token_ids, logprobs}')
    [[ $status == 200 && $alone == "$first" && $(echo "$alone" | jq '.token_ids | length') == 40 ]] &&
        pass "batch-invariant: a request alone = the first of 4 choices decoded together, to the bit" ||
        fail "batch-invariant: alone = the first of 4 choices" "status $status" "alone: ${alone:0:300}" \
            "first: ${first:0:300}"
    body=$(curl -s "$url/health")
    check "the 4 choices were decoded in one batch" '.max_batch_seen >= 4'
    generated=$("$ZAYA" generate "$tmp/m" --tokens "$ids" --temperature 1.0 --top-k 0 --seed 11 -n 40 \
        --speculative-tokens 4 --batch-invariant --print-ids -q | tail -1)
    [[ $generated == "$(echo "$alone" | jq -r '.token_ids | map(tostring) | join(",")')" ]] &&
        pass "batch-invariant: zaya generate gives the server's tokens" ||
        fail "batch-invariant: zaya generate = the server" "generate: $generated" \
            "server: $(echo "$alone" | jq -c .token_ids)"
    kill -TERM $server
    wait $server
fi
finish
