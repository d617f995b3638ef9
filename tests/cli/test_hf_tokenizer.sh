#!/usr/bin/env bash
# A Hugging Face tokenizer.json (what transformers 5 saves instead of tokenizer.model; data/hf_tokenizer.h) through
# the whole command line: `zaya prepare --tokenizer tokenizer.json` gives the same token shards as the same model's
# tokenizer.model and keeps the file under its own name; training copies it into the model directory, where
# `zaya generate` and `zaya serve` (JSON mode, logprobs) find it, as `zaya export` does for a checkpoint; --init
# refuses data prepared with another tokenizer; a byte-level tokenizer.json (Llama 3's kind) prepares, trains and
# generates; `zaya info` names a model's own chat template; `zaya tokenize` gives tokenizers' ids and text; a
# tokenizer.json of a kind zaya cannot read exactly is refused, naming the field.
#
# Usage: test_hf_tokenizer.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"
TOK=$SRC/tests/golden/tokenizer/gemma # a Gemma3-style tokenizer, as tokenizer.model and as tokenizer.json

make_corpus "$tmp/corpus" 120
expect_ok "prepare with a tokenizer.json" prepare --input "$tmp/corpus" --out "$tmp/json" --tokenizer "$TOK/tokenizer.json"
[[ -f $tmp/json/tokenizer.json && ! -e $tmp/json/tokenizer.model ]] &&
    grep -q '"tokenizer": "tokenizer.json"' "$tmp/json/data.json" &&
    pass "the data directory keeps it as tokenizer.json, and data.json says so" ||
    fail "the data directory keeps it as tokenizer.json" "$(ls "$tmp/json")" "$(cat "$tmp/json/data.json")"
expect_ok "prepare with the same model's tokenizer.model" \
    prepare --input "$tmp/corpus" --out "$tmp/model" --tokenizer "$TOK/tokenizer.model"
# The same tokens after the shards' 64-byte headers, which differ in the vocabulary size only: transformers added
# <mask> at id 1000 to the tokenizer.json (the sentencepiece model has 1000 pieces).
same=1
for f in "$tmp"/json/*.bin; do
    cmp -s <(tail -c +65 "$f") <(tail -c +65 "$tmp/model/$(basename "$f")") || same=0
done
[[ $same -eq 1 && -n $(ls "$tmp"/json/*.bin) ]] && pass "both give the same tokens" ||
    fail "both give the same tokens" "$(ls -l "$tmp"/json "$tmp"/model)"

expect_ok "train on the tokenizer.json data (3 steps, a sample at the end)" train --data "$tmp/json" --model tiny \
    --seq 32 --batch 4 --steps 3 --eval-every 0 --sample-tokens 8 --ckpt-every 3 --out "$tmp/run"
[[ -f $tmp/run/model/tokenizer.json && ! -e $tmp/run/model/tokenizer.model ]] &&
    pass "the model directory gets the tokenizer.json" || fail "the model directory gets the tokenizer.json" \
    "$(ls "$tmp/run/model")"
expect_ok "generate finds the model directory's tokenizer.json" generate "$tmp/run/model" \
    --prompt "The quick brown fox" --max-tokens 4 --temperature 0
[[ -n $out ]] && pass "generate prints text" || fail "generate prints text" "stdout empty" "stderr: $err"
# A model directory's tokenizer_config.json names its chat template (test_chat_template.sh has the rest).
M=$tmp/run/model
printf '{"chat_template": [{"name": "default", "template": "{{ messages[0].content }}"}]}' >"$M/tokenizer_config.json"
expect_ok "generate --chat with a chat template in tokenizer_config.json" generate "$M" --chat --prompt hi \
    --max-tokens 1
expect_ok "info on the model directory" info "$M"
[[ $out == *"tokenizer        tokenizer.json (SentencePiece-style BPE), 1001 tokens, bos 2, eos 1"* &&
    $out == *"chat format      $M/tokenizer_config.json (the model's own, Jinja)"* ]] &&
    pass "info names its tokenizer and its own chat template" ||
    fail "info names its tokenizer and its own chat template" "$out"
rm "$M/tokenizer_config.json"

expect_ok "export a checkpoint" export "$tmp/run" --out "$tmp/exported"
[[ -f $tmp/exported/tokenizer.json && $out == *"+ tokenizer.json"* ]] &&
    pass "export copies the run's tokenizer.json" || fail "export copies the run's tokenizer.json" "$out"

# The server: JSON mode reads every token's bytes from the tokenizer.json; logprobs spell the content back.
json_mode_check() { # MODEL_DIR WHAT
    local name="serve: JSON mode and logprobs over $2"
    if ! command -v curl >/dev/null 2>&1; then
        echo "skip    curl not installed: $name"
        return
    fi
    start_server "$tmp/serve.log" "$1"
    body=$(curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" \
        -d '{"messages": [{"role": "user", "content": "A JSON object, please."}], "temperature": 0,
             "max_tokens": 24, "response_format": {"type": "json_object"}, "logprobs": true}')
    stop_server
    python3 - "$body" <<'PY' && pass "$name" || fail "$name" "$body" "$(cat "$tmp/serve.log")"
import json, sys
c = json.loads(sys.argv[1])["choices"][0]
text = c["message"]["content"]
spelled = b"".join(bytes(t["bytes"]) for t in c["logprobs"]["content"])
assert spelled == text.encode() and text.lstrip(" \t\n\r")[:1] in ("", "{"), (text, spelled)
if c["finish_reason"] == "stop":
    assert isinstance(json.loads(text), dict), text
PY
}
json_mode_check "$tmp/run/model" "the tokenizer.json's pieces"

expect_error "--init refuses data prepared with another tokenizer file" \
    "its tokenizer\.json differs from the one the data was prepared with" \
    train --data "$tmp/model" --init "$tmp/run/model" --seq 32 --batch 4 --steps 1 --out "$tmp/run2"
expect_ok "prepare the tokenizer.json's directory again with the tokenizer.model" \
    prepare --input "$tmp/corpus" --out "$tmp/json" --tokenizer "$TOK/tokenizer.model"
[[ -f $tmp/json/tokenizer.model && ! -e $tmp/json/tokenizer.json ]] &&
    pass "the earlier tokenizer.json is gone" || fail "the earlier tokenizer.json is gone" "$(ls "$tmp/json")"

# A byte-level tokenizer.json (Llama 3's kind: a Split regex, ByteLevel, its own special tokens) all the way through.
BYTE=$SRC/tests/golden/tokenizer/llama3
expect_ok "prepare with a byte-level tokenizer.json, given its directory" \
    prepare --input "$tmp/corpus" --out "$tmp/bytes" --tokenizer "$BYTE"
cmp -s "$tmp/bytes/tokenizer.json" "$BYTE/tokenizer.json" && pass "the data directory keeps that directory's file" ||
    fail "the data directory keeps that directory's file" "$(ls -l "$tmp/bytes")"
grep -q '"bos_id": 700' "$tmp/bytes/data.json" && grep -q '"eos_id": 701' "$tmp/bytes/data.json" &&
    pass "its <|begin_of_text|> and <|end_of_text|> are the data's bos and eos" ||
    fail "its <|begin_of_text|> and <|end_of_text|> are the data's bos and eos" "$(cat "$tmp/bytes/data.json")"
expect_ok "train on it (2 steps)" train --data "$tmp/bytes" --model tiny --seq 32 --batch 4 --steps 2 \
    --eval-every 0 --sample-tokens 0 --out "$tmp/run_bytes"
expect_ok "generate with it" generate "$tmp/run_bytes/model" --prompt "The quick brown fox" --max-tokens 4 \
    --temperature 0
[[ -n $out && $err == *"4 generated"* ]] && pass "generate prints the 4 tokens' text" ||
    fail "generate prints the 4 tokens' text" "stdout: $out" "stderr: $err"
json_mode_check "$tmp/run_bytes/model" "a byte-level tokenizer's pieces"
expect_ok "info on it" info "$tmp/run_bytes/model"
[[ $out == *"tokenizer        tokenizer.json (byte-level BPE), 703 tokens, bos 700, eos 701"* ]] &&
    pass "info says it is byte-level" || fail "info says it is byte-level" "$out"

# `zaya tokenize` gives tokenizers' ids for a golden text (Qwen2-style: NFC, a Split regex, byte-level) and decodes
# them back to its text.
python3 - "$SRC/tests/golden/tokenizer/cases.json" "$tmp" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["cases"]["qwen2"]["texts"][5]  # Unicode, emoji
open(sys.argv[2] + "/text.txt", "w", encoding="utf-8").write(t["text"])
open(sys.argv[2] + "/ids.txt", "w").write(",".join(map(str, t["ids"])))
open(sys.argv[2] + "/decoded.txt", "w", encoding="utf-8").write(t["decoded"])
PY
QWEN=$SRC/tests/golden/tokenizer/qwen2
expect_ok "tokenize a file's text with a directory's tokenizer.json" tokenize "$QWEN" --file "$tmp/text.txt" --ids
[[ $out == "$(cat "$tmp/ids.txt")" && $err == *"tokens for"* ]] && pass "tokenize --ids gives tokenizers' ids" ||
    fail "tokenize --ids gives tokenizers' ids" "got:  $out" "want: $(cat "$tmp/ids.txt")"
expect_ok "tokenize --decode" tokenize "$QWEN/tokenizer.json" --decode "$(cat "$tmp/ids.txt")"
[[ $out == "$(cat "$tmp/decoded.txt")" ]] && pass "tokenize --decode gives tokenizers' text" ||
    fail "tokenize --decode gives tokenizers' text" "got:  $out" "want: $(cat "$tmp/decoded.txt")"
expect_ok "tokenize standard input, a token a line" tokenize "$TOK/tokenizer.model" --bos <<<"Hello"
[[ $(head -1 <<<"$out") == "$(printf '2\t"<bos>"')" ]] && pass "tokenize --bos starts with <bos> and its piece" ||
    fail "tokenize --bos starts with <bos> and its piece" "$out"
expect_error "tokenize: a directory without a tokenizer" "no tokenizer\.model or tokenizer\.json" \
    tokenize "$tmp/corpus" --text x
expect_error "tokenize --decode: an id past the vocabulary" "id 5000 is past the vocabulary \(1000 tokens\)" \
    tokenize "$TOK/tokenizer.model" --decode 1,5000
expect_error "tokenize --decode: a bad id names --decode" "--decode: 'x' is not a non-negative token id" \
    tokenize "$TOK/tokenizer.model" --decode 1,x

python3 - "$TOK/tokenizer.json" "$tmp/wordpiece.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["model"]["type"] = "WordPiece"
json.dump(j, open(sys.argv[2], "w"))
PY
expect_error "a WordPiece tokenizer.json is refused before the inputs are read, naming the file and field" \
    "wordpiece\.json: model\.type 'WordPiece' is not supported" \
    prepare --input "$tmp/corpus" --out "$tmp/bad" --tokenizer "$tmp/wordpiece.json"

finish
