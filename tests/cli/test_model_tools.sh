#!/usr/bin/env bash
# Tools and reasoning in a model's own format, through the command line: `zaya tokenize --chat` writes a chat's tools,
# calls and results with the model's chat template as transformers' apply_chat_template does (the goldens of
# tests/golden/chat_templates); `zaya prepare` writes fine-tuning chats with tools so, and a tiny model trained on one
# (reasoning after a generation prompt that opens it, then a call in the template's <tool_call> form) is served with
# its answers read back by default: the call as OpenAI's tool_calls and the reasoning as reasoning_content, in whole
# answers, streams and the Responses API, and by `zaya chat`; tool_choice "required" still holds the answer to zaya's
# own call object; --reasoning-parser none, --tool-call-parser json and bad values.
#
# Usage: test_model_tools.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
GOLD=$SRC/tests/golden/chat_templates

# A model directory's tokenizer files, with the ChatML template that writes calls in <tool_call> (Hermes' form).
M=$tmp/hf
qwen_model_dir "$M" "$GOLD/templates/chatml_tools.jinja"

# A golden chat of tools, calls and results, as a client sends it (arguments as JSON texts), and the text
# transformers rendered for it.
python3 - "$GOLD/cases.json" "$tmp" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    ctx = c["context"]
    calls = [m for m in ctx["messages"] if m.get("tool_calls")]
    if c["template"] != "chatml_tools" or "error" in c or not ctx["tools"] or not calls:
        continue
    if any(isinstance(t["function"]["arguments"], str) for m in calls for t in m["tool_calls"]):
        continue
    for m in calls:
        for t in m["tool_calls"]:
            t["function"]["arguments"] = json.dumps(t["function"]["arguments"])
    json.dump({"messages": ctx["messages"], "tools": ctx["tools"]}, open(sys.argv[2] + "/golden_chat.json", "w"))
    open(sys.argv[2] + "/golden_text.txt", "w").write(c["expected"])
    open(sys.argv[2] + "/golden_gen.txt", "w").write(str(ctx["add_generation_prompt"]))
    break
else:
    sys.exit("no chatml_tools golden with tools and calls")
PY
gen=()
[[ $(cat "$tmp/golden_gen.txt") == True ]] && gen=(--generation-prompt)
expect_ok "tokenize --chat --render of tools, calls and results" tokenize "$M" --chat "$tmp/golden_chat.json" \
    "${gen[@]}" --render
cmp -s "$tmp/stdout" "$tmp/golden_text.txt" && pass "it prints the text apply_chat_template rendered" ||
    fail "it prints the text apply_chat_template rendered" "$out" "want: $(cat "$tmp/golden_text.txt")"

# A thinking model's template: its generation prompt opens the reasoning ("<think>\n", as DeepSeek-R1's does), the
# answer closes it, then calls in Hermes' form.
T=$tmp/think
qwen_model_dir "$T"
cat >"$T/chat_template.jinja" <<'JINJA'
{%- if tools %}<|im_start|>system
Tools:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}<|im_start|>assistant
<think>
{{ message.reasoning_content or '' }}
</think>

{{ message.content }}
{%- for tc in message.tool_calls or [] %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}
JINJA

# Fine-tuning data: a chat whose answer reasons, then calls a tool; the learned tokens are the answer.
TOOLS='[{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]'
mkdir -p "$tmp/corpus"
python3 - "$tmp/corpus/chats.jsonl" "$TOOLS" <<'PY'
import json, sys
chat = {"messages": [{"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
                      "tool_calls": [{"id": "c1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}],
        "tools": json.loads(sys.argv[2])}
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        f.write(json.dumps(chat) + "\n")
PY
head -1 "$tmp/corpus/chats.jsonl" >"$tmp/one_chat.json"
expect_ok "tokenize --chat of the fine-tuning chat" tokenize "$T" --chat "$tmp/one_chat.json" --render
[[ $out == *'"name": "get_weather"'*'<think>
Look it up.
</think>

<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call><|im_end|>'* && $out != *'You can call tools'* ]] &&
    pass "the template describes the tools and writes the reasoning and the call" ||
    fail "the template writes the tools" "$out"
run tokenize "$T" --chat "$tmp/one_chat.json"
ids=$(awk -F'\t' '$3 == 1 {print $1}' "$tmp/stdout" | paste -sd,)
last=$(awk -F'\t' '$3 == 1 {p = $2} END {print p}' "$tmp/stdout")
run tokenize "$T" --decode "$ids"
[[ $out == 'Look it up.
</think>

<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>' && $last == '"<|im_end|>"' ]] && pass "fine-tuning learns the answer after the generation prompt" ||
    fail "the learned tokens" "$out" "last: $last"
expect_ok "prepare the chats" prepare --input "$tmp/corpus" --out "$tmp/data" --tokenizer "$T" --val-percent 20
expect_ok "train a tiny model on them (120 steps)" train --data "$tmp/data" --model tiny --seq 512 --batch 2 \
    --steps 120 --out "$tmp/run" --eval-every 0
[[ -f $tmp/run/model/chat_template.jinja ]] && pass "the trained model keeps the template" ||
    fail "the trained model keeps the template" "$(ls "$tmp/run/model")"
expect_ok "info names how its chat answers are read" info "$tmp/run/model"
[[ $out == *"chat answers     tool calls: hermes, reasoning: <think>…</think>"* ]] &&
    pass "info: tool calls and reasoning in the template's forms" || fail "info: chat answers" "$out"

# zaya chat reads the answer as the server does: the turn saved (/save) carries the reasoning as reasoning_content
# and the call read from the words after it, which the template writes back as the model wrote them.
printf '%s\n' "$TOOLS" >"$tmp/tools.json"
printf '%s\n' "Weather in Paris?" "/save $tmp/saved.jsonl" >"$tmp/chat_in.txt"
run chat "$tmp/run/model" --tools "$tmp/tools.json" --temperature 0 -n 80 --quiet <"$tmp/chat_in.txt"
python3 - "$tmp/saved.jsonl" <<'PY' && pass "chat: the turn's reasoning as reasoning_content, its call as tool_calls" ||
import json, sys
m = json.loads(open(sys.argv[1]).readline())["messages"][-1]
assert m["reasoning_content"] == "Look it up." and m["content"] is None, m
assert [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in m["tool_calls"]] == \
    [("get_weather", {"city": "Paris"})], m
PY
    fail "chat reads the reasoning and the call" "exit $rc" "$out" "$err" "$(cat "$tmp/saved.jsonl" 2>&1)"
[[ $err == *'[tool call call_1_0: get_weather({"city":"Paris"})]'* ]] && pass "chat prints the call on stderr" ||
    fail "chat prints the call" "$err"
run chat "$tmp/run/model" --tools "$tmp/tools.json" --temperature 0 -n 80 --quiet --reasoning-parser none \
    <"$tmp/chat_in.txt"
python3 - "$tmp/saved.jsonl" <<'PY' && pass "chat --reasoning-parser none: the reasoning left in the words" ||
import json, sys
m = json.loads(open(sys.argv[1]).readlines()[1])["messages"][-1]
assert m["content"] == "Look it up.\n</think>" and "reasoning_content" not in m, m
PY
    fail "chat --reasoning-parser none" "$(cat "$tmp/saved.jsonl" 2>&1)"

if ! command -v curl >/dev/null 2>&1; then
    echo "skip    curl not installed: the served answers"
    finish
    exit $?
fi

ask='{"messages": [{"role": "user", "content": "Weather in Paris?"}], "temperature": 0, "max_tokens": 80,
      "tools": '$TOOLS
start_server "$tmp/serve.log" "$tmp/run/model"
whole=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -d "$ask}" 2>&1 || true)
stream=$(curl -sN "http://127.0.0.1:$port/v1/chat/completions" -d "$ask, \"stream\": true}" 2>&1 || true)
responses=$(curl -s "http://127.0.0.1:$port/v1/responses" -d '{"input": "Weather in Paris?", "temperature": 0,
    "max_output_tokens": 80, "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]}' 2>&1 ||
    true)
required=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -d "$ask, \"tool_choice\": \"required\"}" 2>&1 ||
    true)
stop_server
grep -q "chat answers: tool calls: hermes, reasoning: <think>…</think>" "$tmp/serve.log" &&
    pass "serve names the tool format and the reasoning markers" ||
    fail "serve names the formats" "$(head -3 "$tmp/serve.log")"
python3 - "$whole" <<'PY' && pass "the answer's call as tool_calls, its reasoning as reasoning_content" ||
import json, sys
c = json.loads(sys.argv[1])["choices"][0]
m = c["message"]
assert c["finish_reason"] == "tool_calls", c
assert m["reasoning_content"] == m["reasoning"] == "Look it up.", m  # (vLLM's older and newer names)
assert m["content"] is None, m
assert [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in m["tool_calls"]] == \
    [("get_weather", {"city": "Paris"})], m
PY
    fail "the answer read back" "$whole" "$(cat "$tmp/serve.log")"
python3 - "$stream" <<'PY' && pass "streamed: the reasoning, then the call and its arguments as deltas" ||
import json, sys
chunks = [json.loads(l[6:]) for l in sys.argv[1].splitlines() if l.startswith("data: {")]
deltas = [c["choices"][0]["delta"] for c in chunks]
assert "".join(d.get("reasoning_content", "") for d in deltas) == "Look it up.", deltas
assert all(d.get("reasoning") == d.get("reasoning_content") for d in deltas), deltas
assert "".join(d.get("content") or "" for d in deltas) == "", deltas
calls = [t for d in deltas for t in d.get("tool_calls", [])]
# One call: begun with its name (Hermes' head written), its arguments' text growing over the deltas after it.
assert {t["index"] for t in calls} == {0} and calls[0]["function"]["name"] == "get_weather", calls
assert all("name" not in t["function"] for t in calls[1:]) and len(calls) > 1, calls
assert json.loads("".join(t["function"]["arguments"] for t in calls)) == {"city": "Paris"}, calls
assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", chunks[-1]
PY
    fail "the stream read back" "$stream"
python3 - "$responses" <<'PY' && pass "Responses: a reasoning item, then the function_call" ||
import json, sys
out = json.loads(sys.argv[1])["output"]
assert [o["type"] for o in out] == ["reasoning", "function_call"], out
assert out[0]["content"][0]["text"] == "Look it up.", out
assert out[1]["name"] == "get_weather" and json.loads(out[1]["arguments"]) == {"city": "Paris"}, out
PY
    fail "Responses read back" "$responses"
python3 - "$required" <<'PY' && pass "tool_choice required: the reasoning first, then held to zaya's call object" ||
import json, sys
c = json.loads(sys.argv[1])["choices"][0]
assert c["message"]["reasoning_content"] == "Look it up.", c
# (The model never learnt that form: its arguments may run to max_tokens; the call is the one tool's, held so.)
assert c["message"]["tool_calls"][0]["function"]["name"] == "get_weather", c
assert c["message"]["tool_calls"][0]["function"]["arguments"].startswith('{"city":"'), c
PY
    fail "tool_choice required" "$required"

# --reasoning-parser none: the reasoning stays in the words before the call; --tool-call-parser json: the server
# says it describes the tools and reads calls in zaya's own object.
start_server "$tmp/serve.log" "$tmp/run/model" --reasoning-parser none
plain=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -d "$ask}" 2>&1 || true)
stop_server
python3 - "$plain" <<'PY' && pass "--reasoning-parser none: the reasoning left in the answer's words" ||
import json, sys
m = json.loads(sys.argv[1])["choices"][0]["message"]
assert m["content"] == "Look it up.\n</think>", m
assert m["tool_calls"][0]["function"]["name"] == "get_weather" and "reasoning_content" not in m, m
PY
    fail "--reasoning-parser none" "$plain"
start_server "$tmp/serve.log" "$tmp/run/model" --tool-call-parser json
stop_server
grep -q "chat answers: tool calls: zaya's JSON object, reasoning: <think>…</think>" "$tmp/serve.log" &&
    pass "--tool-call-parser json: zaya's own object" ||
    fail "--tool-call-parser json" "$(head -3 "$tmp/serve.log")"
expect_error "--tool-call-parser of another name: an error naming it" "--tool-call-parser: 'xml' is not one of" \
    serve "$tmp/run/model" --tool-call-parser xml --port 0
expect_error "--tool-call-parser hermes without a template of the model's own" "no chat template of its own" \
    serve "$tmp/run/model" --chat-template builtin --tool-call-parser hermes --port 0

finish
