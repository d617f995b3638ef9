#!/usr/bin/env bash
# A model's own chat template (Hugging Face's Jinja chat_template; data/hf_chat_template.h) through the command line:
# `zaya tokenize --chat` renders and tokenizes a chat as transformers' apply_chat_template does (the goldens of
# tests/golden/chat_templates) and shows the tokens fine-tuning learns; `zaya prepare --chat-template` writes chats in
# it and keeps it in the data directory, training and export carry it to the model, `zaya info` names it, and
# `zaya generate --chat` and `zaya serve` (/tokenize) prompt in it; --chat-template-kwargs (and a request's
# chat_template_kwargs) reach the template; --chat-template builtin goes back to ZAYA1's turn format; a template's
# refusal, one that does not parse and a missing file are clear errors.
#
# Usage: test_chat_template.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"
GOLD=$SRC/tests/golden/chat_templates
QWEN=$SRC/tests/golden/tokenizer/qwen2/tokenizer.json # a byte-level tokenizer with <|im_start|> and <|im_end|>

# A model directory's tokenizer files as transformers saves them: tokenizer.json, chat_template.jinja and the
# special tokens in tokenizer_config.json.
M=$tmp/hf
qwen_model_dir "$M" "$GOLD/templates/chatml_tools.jinja"

# The first token golden: its messages, the text transformers rendered and the ids it tokenized that to.
python3 - "$GOLD/cases.json" "$tmp" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["token_cases"][0]
assert c["template"] == "chatml_tools" and c["context"]["add_generation_prompt"], c["name"]
json.dump(c["context"]["messages"], open(sys.argv[2] + "/golden_chat.json", "w"))
open(sys.argv[2] + "/golden_text.txt", "w").write(c["expected"])
open(sys.argv[2] + "/golden_ids.txt", "w").write(",".join(map(str, c["ids"])))
PY
expect_ok "tokenize --chat --render" tokenize "$M" --chat "$tmp/golden_chat.json" --generation-prompt --render
cmp -s "$tmp/stdout" "$tmp/golden_text.txt" && pass "it prints the text apply_chat_template rendered" ||
    fail "it prints the text apply_chat_template rendered" "$out"
expect_ok "tokenize --chat --ids" tokenize "$M" --chat "$tmp/golden_chat.json" --generation-prompt --ids
[[ $out == "$(cat "$tmp/golden_ids.txt")" && $err == *"$M/chat_template.jinja"* ]] &&
    pass "it gives the ids apply_chat_template gave, naming the template" ||
    fail "it gives the ids apply_chat_template gave" "$out" "want $(cat "$tmp/golden_ids.txt")" "$err"

# The tokens fine-tuning learns: each answer and the <|im_end|> closing it.
cat >"$tmp/chat.json" <<'EOF'
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."},
              {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "See you."}]}
EOF
expect_ok "tokenize --chat shows the trained tokens" tokenize "$M" --chat "$tmp/chat.json"
learned=$(awk -F'\t' '$3 == 1 {printf "%s%s", sep, $1; sep=","}' <<<"$out")
ends=$(awk -F'\t' '$3 == 1 && $2 == "\"<|im_end|>\""' <<<"$out" | wc -l)
headers=$(awk -F'\t' '$3 == 1 && $2 ~ /im_start|user|assistant/' <<<"$out" | wc -l)
run tokenize "$M" --decode "$learned"
[[ $out == "Hello there.See you." && $ends -eq 2 && $headers -eq 0 ]] &&
    pass "the answers and their <|im_end|> are flagged, no header" ||
    fail "the answers and their <|im_end|> are flagged, no header" "decoded '$out', $ends ends, $headers headers"
expect_ok "tokenize --chat --chat-template builtin" tokenize "$M" --chat "$tmp/chat.json" --chat-template builtin \
    --ids
[[ $err == *"the built-in chat format"* ]] && pass "builtin is ZAYA1's format" ||
    fail "builtin is ZAYA1's format" "$err"

# A template's other variables (apply_chat_template's keyword arguments): Qwen3-style enable_thinking.
THINK=$GOLD/templates/chatml_think.jinja
python3 - "$GOLD/cases.json" "$tmp" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
c = next(c for c in cases if c["name"] == "chatml_think/single+gen+enable_thinking=false")
json.dump(c["context"]["messages"], open(sys.argv[2] + "/think_chat.json", "w"))
open(sys.argv[2] + "/think_text.txt", "w").write(c["expected"])
PY
expect_ok "tokenize --chat-template-kwargs" tokenize "$M" --chat "$tmp/think_chat.json" --chat-template "$THINK" \
    --chat-template-kwargs '{"enable_thinking": false}' --generation-prompt --render
cmp -s "$tmp/stdout" "$tmp/think_text.txt" && pass "enable_thinking false reaches the template" ||
    fail "enable_thinking false reaches the template" "$out"
expect_error "--chat-template-kwargs may not set the chat's own variables" \
    "--chat-template-kwargs: 'messages' is the chat's own variable" \
    tokenize "$M" --chat "$tmp/think_chat.json" --chat-template-kwargs '{"messages": []}'

# Errors: the template's own refusal, a template that does not parse, a missing file.
cp "$GOLD/templates/mistral.jinja" "$tmp/mistral.jinja"
echo '[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]' >"$tmp/twice.json"
expect_error "a template's raise_exception is the error" "mistral\.jinja: .*alternate" \
    tokenize "$M" --chat "$tmp/twice.json" --chat-template "$tmp/mistral.jinja"
printf '{%% for m in messages %%}\n{{ m.content }\n{%% endfor %%}' >"$tmp/broken.jinja"
expect_error "a template that does not parse names its line" "broken\.jinja:2:" \
    tokenize "$M" --chat "$tmp/chat.json" --chat-template "$tmp/broken.jinja"
expect_error "a missing --chat-template file" "--chat-template $tmp/nosuch\.jinja: no such file" \
    tokenize "$M" --chat "$tmp/chat.json" --chat-template "$tmp/nosuch.jinja"

# Fine-tuning data in the model's format: prepare writes the chats with it and keeps it for the trained model.
make_corpus "$tmp/corpus" 40
for i in $(seq 1 40); do
    printf '{"messages": [{"role": "user", "content": "Question %d?"}, ' "$i"
    printf '{"role": "assistant", "content": "Answer %d."}]}\n' "$i"
done >"$tmp/corpus/chats.jsonl"
expect_ok "prepare chats with --chat-template" prepare --input "$tmp/corpus" --out "$tmp/data" --tokenizer "$QWEN" \
    --chat-template "$GOLD/templates/chatml_tools.jinja"
cmp -s "$tmp/data/chat_template.jinja" "$GOLD/templates/chatml_tools.jinja" &&
    pass "the data directory keeps the template" || fail "the data directory keeps the template" "$(ls "$tmp/data")"
expect_ok "train on it (2 steps)" train --data "$tmp/data" --model tiny --seq 32 --batch 4 --steps 2 \
    --eval-every 0 --sample-tokens 0 --ckpt-every 2 --out "$tmp/run"
cmp -s "$tmp/run/model/chat_template.jinja" "$GOLD/templates/chatml_tools.jinja" &&
    pass "the trained model keeps it" || fail "the trained model keeps it" "$(ls "$tmp/run/model")"
expect_ok "info names it" info "$tmp/run/model"
[[ $out == *"chat format      $tmp/run/model/chat_template.jinja (the model's own, Jinja)"* ]] &&
    pass "info says the model's own template writes its chats" || fail "info names the template" "$out"
expect_ok "generate --chat" generate "$tmp/run/model" --chat --prompt "Question 3?" --max-tokens 4 --temperature 0
expect_ok "export" export "$tmp/run" --out "$tmp/exported"
[[ -f $tmp/exported/chat_template.jinja && $out == *"+ chat_template.jinja"* ]] &&
    pass "export copies the template" || fail "export copies the template" "$out" "$(ls "$tmp/exported")"
expect_ok "prepare again with --chat-template builtin" prepare --input "$tmp/corpus" --out "$tmp/data" \
    --tokenizer "$QWEN" --chat-template builtin
[[ ! -e $tmp/data/chat_template.jinja && ! -e $tmp/data/tokenizer_config.json ]] &&
    pass "the earlier template is gone" || fail "the earlier template is gone" "$(ls "$tmp/data")"

# The server's /tokenize writes a chat as zaya tokenize --chat does.
if command -v curl >/dev/null 2>&1; then
    start_server "$tmp/serve.log" "$tmp/run/model"
    body=$(curl -s "http://127.0.0.1:$port/tokenize" \
        -d "{\"messages\": $(cat "$tmp/golden_chat.json"), \"add_special_tokens\": false}" 2>&1 || true)
    stop_server
    python3 - "$body" "$(cat "$tmp/golden_ids.txt")" <<'PY' && pass "serve /tokenize: the template's ids" ||
import json, sys
assert json.loads(sys.argv[1])["tokens"] == [int(x) for x in sys.argv[2].split(",")], sys.argv[1]
PY
        fail "serve /tokenize: the template's ids" "$body" "$(cat "$tmp/serve.log")"
    # The server's --chat-template-kwargs for every request, a request's chat_template_kwargs over them.
    for thinking in true false; do
        run tokenize "$M" --chat "$tmp/think_chat.json" --chat-template "$THINK" \
            --chat-template-kwargs "{\"enable_thinking\": $thinking}" --generation-prompt --ids
        echo "$out" >"$tmp/think_$thinking.txt"
    done
    start_server "$tmp/serve.log" "$tmp/run/model" --chat-template "$THINK" \
        --chat-template-kwargs '{"enable_thinking": false}'
    msgs=$(cat "$tmp/think_chat.json")
    plain=$(curl -s "http://127.0.0.1:$port/tokenize" -d "{\"messages\": $msgs}" 2>&1 || true)
    over=$(curl -s "http://127.0.0.1:$port/tokenize" \
        -d "{\"messages\": $msgs, \"chat_template_kwargs\": {\"enable_thinking\": true}}" 2>&1 || true)
    refused=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" \
        -d "{\"messages\": $msgs, \"chat_template_kwargs\": [1]}" 2>&1 || true)
    stop_server
    python3 - "$plain" "$over" "$refused" "$(cat "$tmp/think_false.txt")" "$(cat "$tmp/think_true.txt")" <<'PY' &&
import json, sys
ids = lambda s: [int(x) for x in s.split(",")]
assert json.loads(sys.argv[1])["tokens"] == ids(sys.argv[4]), sys.argv[1]
assert json.loads(sys.argv[2])["tokens"] == ids(sys.argv[5]), sys.argv[2]
assert ids(sys.argv[4]) != ids(sys.argv[5])
e = json.loads(sys.argv[3])["error"]
assert e["param"] == "chat_template_kwargs" and "JSON object" in e["message"], e
PY
        pass "serve: --chat-template-kwargs for every request, a request's own over them, a bad one a 400" ||
        fail "serve: chat_template_kwargs" "$plain" "$over" "$refused"
else
    echo "skip    curl not installed: serve /tokenize"
fi

finish
