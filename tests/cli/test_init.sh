#!/usr/bin/env bash
# Training on from a trained model (`zaya train --init DIR`, train/start_model.h) and evaluating one (`zaya eval`,
# train/evaluate.h). The first step's loss is the loss the loaded model gives that step's batch (`zaya forward`),
# whether DIR is a run's model/, a checkpoint or a bf16 Hugging Face checkpoint; --rope-theta reaches the forward
# pass and the written config; `zaya eval` gives a run's val_loss bit for bit; mismatched tokenizers, vocabularies
# and conflicting flags are refused, naming what does not fit.
#
# Usage: test_init.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"

make_corpus "$tmp/corpus" 200
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null 2>&1
args=(--data "$tmp/data" --eval-every 0 --sample-tokens 0)

# first_batch RUN: the tokens of RUN's first sequence of step 1 (batches.bin: int32 [steps, batch, seq + 1]).
first_batch() { od -An -t d4 -v -N $((33 * 4)) "$tmp/$1/batches.bin" | tr -s ' \n' '\n' | sed '/^$/d' | paste -sd,; }
step1_loss() { python3 -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' \
    "$tmp/$1/metrics.jsonl"; }
forward_loss() { # MODEL_DIR TOKENS
    run forward "$1" --tokens "$2" --out "$tmp/logits.safetensors"
    sed -nE 's/^loss ([-+0-9.eE]+)$/\1/p' <<<"$out"
}
# close NAME A B REL: |A - B| <= REL·|B|.
close() {
    if [[ -n $2 && -n $3 ]] &&
        awk -v a="$2" -v b="$3" -v r="$4" 'BEGIN { d = a - b; d = d < 0 ? -d : d; b = b < 0 ? -b : b; exit !(d <= r * b) }'
    then
        pass "$1 ($2 vs $3)"
    else
        fail "$1" "'$2' vs '$3' (relative tolerance $4)"
    fi
}

expect_ok "a run to start from: tiny, 8 steps, checkpoints every 4" \
    train "${args[@]}" --model tiny --seq 32 --batch 4 --steps 8 --ckpt-every 4 --out "$tmp/a"

# ---- from a run's model/ ----
expect_ok "--init a/model, 2 steps of 1 sequence" train "${args[@]}" --init "$tmp/a/model" --seq 32 --steps 2 \
    --batch 1 --dump-batches --out "$tmp/b"
[[ $out == *"initialised from $tmp/a/model"* ]] && pass "the banner names --init" ||
    fail "the banner names --init" "$out"
tokens=$(first_batch b)
loaded_loss=$(forward_loss "$tmp/a/model" "$tokens")
close "step 1's loss is a/model's forward loss of step 1's batch" "$(step1_loss b)" "$loaded_loss" 1e-5
cmp -s "$tmp/a/model/tokenizer.model" "$tmp/b/model/tokenizer.model" && pass "the new model carries the tokenizer" ||
    fail "the new model carries the tokenizer"
expect_ok "the same 2 steps from random weights" \
    train "${args[@]}" --model tiny --seq 32 --steps 2 --batch 1 --dump-batches --out "$tmp/r"
[[ $(first_batch r) == "$tokens" ]] && pass "random weights: the same first batch" || fail "the same first batch"
awk -v a="$(step1_loss r)" -v b="$loaded_loss" 'BEGIN { exit !(a > b + 0.2) }' &&
    pass "random weights start higher ($(step1_loss r) vs $loaded_loss): --init's weights are used" ||
    fail "random weights start higher" "$(step1_loss r) vs $loaded_loss"

# ---- from a checkpoint: its weights at that step ----
expect_ok "--init a/checkpoints/step_00000008" train "${args[@]}" --init "$tmp/a/checkpoints/step_00000008" \
    --seq 32 --steps 1 --batch 1 --dump-batches --out "$tmp/c"
close "step 1's loss from the step-8 checkpoint is a/model's" "$(step1_loss c)" \
    "$(forward_loss "$tmp/a/model" "$(first_batch c)")" 1e-5

# ---- context extension: --rope-theta and a longer --seq ----
expect_ok "--init a/model --rope-theta 1e6 --seq 64" train "${args[@]}" --init "$tmp/a/model" --rope-theta 1e6 \
    --seq 64 --steps 2 --batch 1 --dump-batches --out "$tmp/x"
theta_ok=0
python3 - "$tmp/x/model/config.json" "$tmp/a/model/config.json" <<'PY' || theta_ok=$?
import json, sys
x, a = (json.load(open(p)) for p in sys.argv[1:])
assert x["rope_parameters"]["hybrid"]["rope_theta"] == 1e6, x["rope_parameters"]
assert x["rope_parameters"]["hybrid_sliding"] == a["rope_parameters"]["hybrid_sliding"], x["rope_parameters"]
assert x["max_position_embeddings"] >= 64
PY
[[ $theta_ok -eq 0 ]] && pass "x/model/config.json: full-attention θ 1e6, sliding θ kept, positions ≥ 64" ||
    fail "x/model/config.json has the new RoPE base"
# a/model with only the RoPE base changed must give x's first loss; a/model itself must not (θ reaches the pass).
mkdir -p "$tmp/a_theta"
cp "$tmp/a/model/model.safetensors" "$tmp/a_theta/"
python3 - "$tmp/a/model/config.json" "$tmp/a_theta/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"]["hybrid"]["rope_theta"] = 1e6
json.dump(c, open(sys.argv[2], "w"))
PY
x_tokens=$(od -An -t d4 -v -N $((65 * 4)) "$tmp/x/batches.bin" | tr -s ' \n' '\n' | sed '/^$/d' | paste -sd,)
close "step 1's loss at θ 1e6 is a/model's forward loss at θ 1e6" "$(step1_loss x)" \
    "$(forward_loss "$tmp/a_theta" "$x_tokens")" 1e-5
old_theta=$(forward_loss "$tmp/a/model" "$x_tokens")
awk -v a="$(step1_loss x)" -v b="$old_theta" 'BEGIN { d = a - b; exit !(d > 1e-4 || d < -1e-4) }' &&
    pass "and differs from the loss at the old θ ($old_theta)" ||
    fail "θ changes the loss" "$(step1_loss x) vs $old_theta"

# ---- stopped and resumed: the same bits as an uninterrupted run (the resumed process takes shape and weights from
# the checkpoint; its config must match what --rope-theta and --seq make of it) ----
ext=(train "${args[@]}" --init "$tmp/a/model" --rope-theta 1e6 --seq 32 --batch 2 --steps 3 --ckpt-every 1)
expect_ok "an --init run stopped after 1 of 3 steps" "${ext[@]}" --stop-after 1 --out "$tmp/s"
mv "$tmp/a/model" "$tmp/a/model.away" # resuming reads the checkpoint, not --init's directory
expect_ok "and resumed, --init's directory gone" "${ext[@]}" --resume --out "$tmp/s"
mv "$tmp/a/model.away" "$tmp/a/model"
expect_ok "the same run uninterrupted" "${ext[@]}" --out "$tmp/u"
cmp -s "$tmp/s/model/model.safetensors" "$tmp/u/model/model.safetensors" &&
    pass "resumed and uninterrupted --init runs end with the same bits" || fail "resumed --init run differs"
expect_error "resuming with another --rope-theta" "^zaya: error: .*model config" \
    train "${args[@]}" --init "$tmp/a/model" --rope-theta 2e6 --seq 32 --batch 2 --steps 3 --from \
    "$tmp/s/checkpoints/step_00000001" --out "$tmp/s2"

# ---- a bf16 Hugging Face checkpoint (the transformers golden; vocabulary 384, no tokenizer of its own) ----
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data384" --vocab-size 384 >/dev/null 2>&1
bf16=$SRC/tests/golden/tiny_bf16
expect_ok "--init tests/golden/tiny_bf16" train --data "$tmp/data384" --batch 1 --seq 32 --eval-every 0 \
    --sample-tokens 0 --init "$bf16" --steps 2 --dump-batches --out "$tmp/h"
close "step 1's loss is the bf16 checkpoint's forward loss" "$(step1_loss h)" \
    "$(forward_loss "$bf16" "$(first_batch h)")" 1e-4
grep -q '"dtype": *"float32"' "$tmp/h/model/config.json" && pass "the trained model is written in fp32" ||
    fail "the trained model is written in fp32" "$(cat "$tmp/h/model/config.json")"

# ---- zaya eval: the loss zaya train reports as val_loss, computed the same way ----
json_field() { python3 -c 'import json,sys; print(repr(json.loads(sys.argv[1])[sys.argv[2]]))' "$1" "$2"; }
final_val() { python3 -c 'import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' \
    "$tmp/$1/metrics.jsonl"; }
# a: --batch 4 (one micro-batch), --eval-batches 8 by default: 8 forward passes of 4 sequences at most.
expect_ok "eval a/model --json" eval "$tmp/a/model" --data "$tmp/data" --seq 32 --batch 4 --batches 8 --json
a_eval=$out
[[ $(json_field "$a_eval" loss) == "$(final_val a)" ]] &&
    pass "eval's loss is a's final val_loss, bit for bit ($(final_val a))" ||
    fail "eval's loss is a's final val_loss" "$a_eval vs $(final_val a)"
expect_ok "eval of a's step-8 checkpoint" eval "$tmp/a/checkpoints/step_00000008" --data "$tmp/data" --seq 32 \
    --batch 4 --batches 8 --json
[[ $(json_field "$out" loss) == "$(final_val a)" ]] && pass "the checkpoint evaluates to the same loss" ||
    fail "the checkpoint evaluates to the same loss" "$out"
fields_ok=0
python3 - "$a_eval" <<'PY' || fields_ok=$?
import json, math, sys
j = json.loads(sys.argv[1])
assert abs(j["perplexity"] - math.exp(j["loss"])) < 1e-9 * j["perplexity"], j
assert j["tokens"] > 0 and 0 < j["batches"] <= 8, j
PY
[[ $fields_ok -eq 0 ]] && pass "perplexity = exp(loss); tokens and batches reported" ||
    fail "eval's JSON fields" "$a_eval"
expect_ok "eval --by-position 4" eval "$tmp/a/model" --data "$tmp/data" --seq 32 --batch 4 --batches 8 \
    --by-position 4 --json
ranges_ok=0
python3 - "$out" "$a_eval" <<'PY' || ranges_ok=$?
import json, sys
j, whole = (json.loads(a) for a in sys.argv[1:3])
r = j["by_position"]
assert [(x["from"], x["to"]) for x in r] == [(0, 7), (8, 15), (16, 23), (24, 31)], r
assert j["loss"] == whole["loss"], (j["loss"], whole["loss"])
mean = sum(x["loss"] for x in r) / 4
assert abs(mean - j["loss"]) <= 1e-9 * j["loss"], (mean, j["loss"])
assert len({round(x["loss"], 6) for x in r}) == 4, r  # positions differ: not one number spread over the ranges
PY
[[ $ranges_ok -eq 0 ]] && pass "--by-position: 4 ranges of 8 positions whose losses average to the loss" ||
    fail "--by-position ranges" "$out"
expect_error "eval --by-position beyond --seq" "^zaya: error: eval: --by-position must be in \[0, --seq 32\]" \
    eval "$tmp/a/model" --data "$tmp/data" --seq 32 --by-position 33
expect_ok "eval --rope-theta 1e6" eval "$tmp/a/model" --data "$tmp/data" --seq 64 --batch 2 --rope-theta 1e6 --json
theta_eval=$(json_field "$out" loss)
expect_ok "eval of a copy with θ 1e6 in its config" eval "$tmp/a_theta" --data "$tmp/data" --seq 64 --batch 2 --json
[[ $theta_eval == "$(json_field "$out" loss)" ]] && pass "--rope-theta gives the loss of the model with that base" ||
    fail "--rope-theta gives the loss of the model with that base" "$theta_eval vs $out"
expect_ok "eval --precision bf16" eval "$tmp/a/model" --data "$tmp/data" --seq 32 --batch 4 --batches 8 --precision bf16
close "bf16 matmuls evaluate within 1e-2 of fp32" "$(sed -nE 's/^loss ([0-9.]+) .*/\1/p' <<<"$out")" \
    "$(json_field "$a_eval" loss)" 1e-2
expect_error "eval with data of another tokenizer" \
    "^zaya: error: eval $tmp/a/model: its tokenizer.model differs from the one the data was prepared with" \
    eval "$tmp/a/model" --data "$tmp/data384"
expect_error "eval of a run directory says what to give instead" \
    "^zaya: error: eval: '$tmp/a' is a run directory: give its trained model \($tmp/a/model\) or one of its" \
    eval "$tmp/a" --data "$tmp/data"
expect_error "eval of a missing model" "^zaya: error: eval: '$tmp/nope' is not a directory" \
    eval "$tmp/nope" --data "$tmp/data"
expect_error "eval --seq 1" "^zaya: error: eval: --seq must be at least 2, got 1" \
    eval "$tmp/a/model" --data "$tmp/data" --seq 1

# ---- errors: one line naming what does not fit, nothing written ----
expect_error "--init of a missing directory" "^zaya: error: --init: '$tmp/nope' is not a directory" \
    train "${args[@]}" --init "$tmp/nope" --steps 1 --out "$tmp/e1"
expect_error "--init and --model together" "^zaya: error: .*--init.*--model|^zaya: error: .*--model.*--init" \
    train "${args[@]}" --init "$tmp/a/model" --model tiny --steps 1 --out "$tmp/e2"
echo '{"model": "tiny"}' >"$tmp/model.json"
expect_error "--init with a config file's model" "^zaya: error: train: 'model' and 'init' both name the model" \
    train "${args[@]}" --config "$tmp/model.json" --init "$tmp/a/model" --steps 1 --out "$tmp/e3"
expect_error "a vocabulary smaller than the data's tokenizer" \
    "^zaya: error: --init $bf16: the data's tokenizer has 400 tokens but the model's vocabulary is 384" \
    train "${args[@]}" --init "$bf16" --steps 1 --out "$tmp/e4"
expect_error "a model trained with another tokenizer" \
    "^zaya: error: --init $tmp/a/model: its tokenizer.model differs from the one the data was prepared with" \
    train --data "$tmp/data384" --batch 1 --seq 32 --init "$tmp/a/model" --steps 1 --out "$tmp/e5"
expect_error "a negative --rope-theta" "^zaya: error: train: rope_theta must be positive" \
    train "${args[@]}" --init "$tmp/a/model" --rope-theta -1 --steps 1 --out "$tmp/e6"
for e in e1 e2 e3 e4 e5 e6; do [[ ! -e $tmp/$e/model ]] || fail "$e wrote a model"; done

finish
