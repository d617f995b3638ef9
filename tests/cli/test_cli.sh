#!/usr/bin/env bash
# End-to-end tests of the `zaya` command line: help, info, forward (against the tiny_f32 golden), init, and
# error reporting (exit status != 0, exactly one line on stderr naming the problem).
#
# Usage: test_cli.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
GOLDEN=$SRC/tests/golden/tiny_f32

# A JSON field of meta.json, with python3 if there is one, else with sed.
golden_tokens() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"][0])))' "$GOLDEN/meta.json"
    else
        tr -d ' \n\t' <"$GOLDEN/meta.json" | sed -E 's/.*"tokens":\[\[([0-9,]*)\]\].*/\1/'
    fi
}
golden_loss() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["loss"]))' "$GOLDEN/meta.json"
    else
        tr -d ' \n\t' <"$GOLDEN/meta.json" | sed -E 's/.*"loss":([-+0-9.eE]*).*/\1/'
    fi
}

# ---- help ----
expect_ok "zaya --help" --help
[[ $out == *info* && $out == *forward* && $out == *init* && $out == *bench* ]] && pass "--help lists the subcommands" ||
    fail "--help lists the subcommands" "stdout: $out"
expect_ok "zaya --version" --version
for sub in info forward init bench; do
    expect_ok "zaya $sub --help" "$sub" --help
done

# ---- info ----
# Parameter count of tiny_f32 (D 64, 8 q heads / 2 kv heads of 16, 4 experts, I 32, R 32, 3 layers, V 256),
# counted by hand from spec A.7.1 shapes. Per layer: input norm 64, q 128·64, k 32·64, v 2·16·64,
# depthwise conv 160·2 + 160, grouped conv 160·16·2 + 160, temp 2, o 64·128, 4 res-scales ·64 (twice),
# post norm 64, router down 32·64 + 32, router_states_scale 32 (not layer 0), router norm 32, fc1/fc2 32·32 + 32,
# out 5·32, experts 4·64·64 + 4·64·32 (balancing biases are a buffer, not counted).
per_layer=$((64 + 128 * 64 + 32 * 64 + 2 * 16 * 64 + 160 * 2 + 160 + 160 * 16 * 2 + 160 + 2 + 64 * 128 + 4 * 64 + 64 \
    + 32 * 64 + 32 + 32 + 32 + 2 * (32 * 32 + 32) + 5 * 32 + 4 * 64 * 64 + 4 * 64 * 32 + 4 * 64))
tiny_total=$((3 * per_layer - 32 + 2 * 64 + 64 + 256 * 64))
expect_ok "zaya info tiny_f32" info "$GOLDEN"
[[ $out =~ parameters[[:space:]].*\($tiny_total\) ]] && pass "info tiny_f32 prints $tiny_total parameters" ||
    fail "info tiny_f32 prints $tiny_total parameters" "stdout: $out"
[[ $out == *"non-embedding"* && $out == *"active per token"* ]] && pass "info tiny_f32 prints non-embedding and active counts" ||
    fail "info tiny_f32 prints non-embedding and active counts" "stdout: $out"

# ZAYA1-8B (spec A.8): 8,303,355,728 non-embedding + 537,133,056 embedding = 8,840,488,784 total. `info` prints
# the total as an exact integer and the non-embedding count as "8.30B".
expect_ok "zaya info zaya1-8b" info zaya1-8b
[[ $out =~ parameters[[:space:]].*\(8840488784\).*[[:space:]]8\.30B\ non-embedding ]] &&
    pass "info zaya1-8b: 8840488784 total, 8.30B non-embedding" ||
    fail "info zaya1-8b: 8840488784 total, 8.30B non-embedding" "stdout: $out"

# ---- forward against the golden ----
tokens=$(golden_tokens)
want_loss=$(golden_loss)
[[ $tokens =~ ^[0-9]+(,[0-9]+)+$ && -n $want_loss ]] && pass "read tokens and loss from meta.json" ||
    fail "read tokens and loss from meta.json" "tokens '$tokens' loss '$want_loss'"
expect_ok "zaya forward tiny_f32" forward "$GOLDEN" --tokens "$tokens" --out "$tmp/o.safetensors"
got_loss=$(sed -nE 's/^loss ([-+0-9.eE]+)$/\1/p' <<<"$out")
if [[ -n $got_loss ]] && awk -v a="$got_loss" -v b="$want_loss" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }'; then
    pass "forward loss $got_loss matches golden $want_loss"
else
    fail "forward loss matches golden $want_loss" "stdout: $out"
fi
ntok=$(tr ',' '\n' <<<"$tokens" | wc -l)
if [[ -s $tmp/o.safetensors ]] && head -c 4096 "$tmp/o.safetensors" | grep -aq "\"logits\":{\"dtype\":\"F32\",\"shape\":\[$ntok,256\]"; then
    pass "forward writes F32 logits [$ntok, 256]"
else
    fail "forward writes F32 logits [$ntok, 256]" "$(ls -l "$tmp/o.safetensors" 2>&1)"
fi

# ---- errors ----
out_arg=(--out "$tmp/err.safetensors")
expect_error "forward: non-existent model dir" "^zaya: error: .*$tmp/no/such/model" \
    forward "$tmp/no/such/model" --tokens 1,2 "${out_arg[@]}"
expect_error "forward: token id >= vocab" "^zaya: error: .*256.*vocab_size 256" \
    forward "$GOLDEN" --tokens 1,256 "${out_arg[@]}"
expect_error "forward: empty --tokens" "^zaya: error: --tokens.*empty" \
    forward "$GOLDEN" --tokens "" "${out_arg[@]}"
expect_error "forward: empty entry in --tokens" "^zaya: error: --tokens.*empty" \
    forward "$GOLDEN" --tokens 1,,2 "${out_arg[@]}"
expect_error "forward: non-numeric token" "^zaya: error: --tokens.*'abc'" \
    forward "$GOLDEN" --tokens 1,abc "${out_arg[@]}"
expect_error "forward: negative token" "^zaya: error: --tokens.*'-3'" \
    forward "$GOLDEN" --tokens 1,-3 "${out_arg[@]}"
expect_error "info: non-existent model" "^zaya: error: .*no-such-model" info no-such-model
[[ ! -e $tmp/err.safetensors ]] && pass "failed forwards write no output" || fail "failed forwards write no output"

# Missing --out: one line naming the option.
run forward "$GOLDEN" --tokens 1,2
[[ $rc -ne 0 ]] && head -n 1 "$tmp/stderr" | grep -q -- "--out" && pass "forward: missing --out fails naming --out" ||
    fail "forward: missing --out fails naming --out" "exit status $rc" "stderr: $err"
expect_error "forward: missing --out, one line" "--out" forward "$GOLDEN" --tokens 1,2

# ---- init, then forward on the result ----
expect_ok "zaya init --model tiny" init --model tiny --out "$tmp/m"
[[ -f $tmp/m/config.json && -f $tmp/m/model.safetensors ]] && pass "init writes config.json and model.safetensors" ||
    fail "init writes config.json and model.safetensors" "$(ls -la "$tmp/m" 2>&1)"
expect_ok "zaya forward on the init'd model" forward "$tmp/m" --tokens 1,2,3 --out "$tmp/m_out.safetensors"
[[ $out =~ ^loss\ [0-9]+\.[0-9]+$ && -s $tmp/m_out.safetensors ]] && pass "forward on the init'd model prints a loss" ||
    fail "forward on the init'd model prints a loss" "stdout: $out"
# An untrained model predicts nearly uniformly: its loss is close to ln(vocab_size).
vocab=$(tr -d ' \n\t' <"$tmp/m/config.json" | sed -nE 's/.*"vocab_size":([0-9]+).*/\1/p')
awk -v l="${out#loss }" -v v="${vocab:-0}" 'BEGIN { exit !(v > 1 && l > log(v) - 0.75 && l < log(v) + 0.75) }' &&
    pass "init'd model loss ${out#loss } is near ln(vocab_size $vocab)" ||
    fail "init'd model loss is near ln(vocab_size)" "stdout: $out" "vocab_size: $vocab"
expect_ok "zaya info on the init'd model" info "$tmp/m"

# ---- grads ----
expect_ok "zaya grads on tiny_f32" grads "$GOLDEN" --tokens "$(golden_tokens)" --out "$tmp/grads.safetensors"
[[ $out =~ ^loss\ 7\.45 && -s $tmp/grads.safetensors ]] && pass "grads prints the golden loss and writes the file" ||
    fail "grads prints the golden loss and writes the file" "stdout: $out"
expect_error "grads: single token has no loss" "^zaya: error: .*next-token" grads "$GOLDEN" --tokens 5 --out "$tmp/g1.st"

# ---- --device ----
expect_error "forward: an unknown device is named" "^zaya: error: .*'tpu'" forward tiny --tokens 1,2 --out "$tmp/fd.st" \
    --device tpu
if ! command -v nvidia-smi >/dev/null 2>&1; then # (on a GPU machine this would just run)
    expect_error "forward --device cuda without a GPU says why" "^zaya: error: --device cuda" forward tiny \
        --tokens 1,2 --out "$tmp/fd.st" --device cuda
    expect_error "bench decode --device cuda without a GPU says why" "^zaya: error: --device cuda" bench decode \
        --model tiny --prompt-tokens 4 --new-tokens 2 --device cuda
fi

# A prompt longer than one step (1024 tokens on the CPU) says how far it got after each step, on stderr; -q not.
long_ids=$(python3 -c "print(','.join(str(1 + i * 7 % 400) for i in range(1500)))")
expect_ok "generate a 1500-token prompt" generate small --tokens "$long_ids" -n 2 --temperature 0
[[ $err == *"[prompt: 1024 of 1500 tokens read, "*" tokens/s]"* && $err != *"[prompt: 1500 of"* ]] &&
    pass "a prompt read in two steps reports the first" || fail "a prompt read in two steps reports the first" "$err"
expect_ok "generate a 1500-token prompt -q" generate small --tokens "$long_ids" -n 2 --temperature 0 -q
[[ $err != *"[prompt:"* ]] && pass "-q keeps the prompt's progress quiet" ||
    fail "-q keeps the prompt's progress quiet" "$err"

# ---- --precision: the rows the CPU decoder's linears take ----
prec_gen=(generate tiny --dtype bf16 --tokens 5,17,3,99,4,8,8,2,100,7,42,42,1,60 -n 4 --temperature 0 --print-ids)
expect_ok "generate a bf16 model" "${prec_gen[@]}"
[[ $err == *"MiB (BF16, bf16 inputs)"* ]] && pass "a bf16 model's linears take bf16 rows by default" ||
    fail "a bf16 model's linears take bf16 rows by default" "stderr: $err"
expect_ok "generate a bf16 model --precision fp32" "${prec_gen[@]}" --precision fp32
[[ $err == *"MiB (BF16, fp32 inputs)"* ]] && pass "--precision fp32 keeps them fp32" ||
    fail "--precision fp32 keeps them fp32" "stderr: $err"
expect_ok "generate an f32 model" generate tiny --dtype f32 --tokens 5,17 -n 2 --temperature 0
[[ $err == *"MiB (F32, fp32 inputs)"* ]] && pass "an f32 model's take fp32 rows by default" ||
    fail "an f32 model's take fp32 rows by default" "stderr: $err"
expect_error "--precision f16 is refused" "^zaya: error: --precision: f16 not in \\{auto,fp32,bf16\\}" \
    "${prec_gen[@]}" --precision f16
expect_error "--precision other than the GPU's rows with --device cuda is refused, naming both" \
    "^zaya: error: --precision fp32 applies to the CPU decoder: the GPU decoder's linears take bf16 rows for BF16" \
    "${prec_gen[@]}" --precision fp32 --device cuda
expect_ok "bench decode --precision bf16 --json" bench decode --model tiny --prompt-tokens 40 --new-tokens 2 \
    --precision bf16 --json
[[ $out == *'"precision":"bf16"'* ]] && pass "bench decode reports the precision" ||
    fail "bench decode reports the precision" "out: $out"
expect_error "bench decode --precision f16 is refused" \
    "^zaya: error: --precision must be auto, fp32 or bf16, got 'f16'" \
    bench decode --model tiny --prompt-tokens 4 --new-tokens 2 --precision f16

# ---- --speculative-tokens: drafts by prompt lookup give the same ids, and the statistics say how many were taken ----
spec_gen=(generate tiny --dtype f32 --tokens 5,17,3,5,17,3,5,17 -n 40 --print-ids)
for mode in "--temperature 0" "--temperature 0.9 --seed 3"; do
    expect_ok "generate $mode" "${spec_gen[@]}" $mode -q
    plain_ids=$out
    expect_ok "generate $mode --speculative-tokens 5" "${spec_gen[@]}" $mode --speculative-tokens 5
    # (a random model's greedy answer loops, and its loop is drafted; its sampled one seldom repeats two tokens)
    [[ $out == "$plain_ids" ]] && { [[ $mode != "--temperature 0" ]] ||
        [[ $err =~ \(drafts:\ [1-9][0-9]*\ of\ [0-9]+\ tokens\ taken ]]; } &&
        pass "generate $mode: the same ids with drafts" ||
        fail "generate $mode: the same ids with drafts" "plain: $plain_ids" "drafts: $out" "stderr: $err"
done
expect_error "a shortest lookup longer than the longest is refused, naming both" \
    "^zaya: error: prompt lookup's longest n-gram \(2\) is shorter than its shortest \(3\)" \
    "${spec_gen[@]}" --speculative-tokens 2 --prompt-lookup-min 3 --prompt-lookup-max 2
expect_ok "bench decode --speculative-tokens 3 --json" bench decode --model tiny --prompt-tokens 20 --new-tokens 3 \
    --speculative-tokens 3 --json
[[ $out =~ \"speculative_step_s\":[0-9.e-]+[,}] && $out == *'"speculative_tokens":3'* ]] &&
    pass "bench decode times a speculative step" || fail "bench decode times a speculative step" "out: $out"

# ---- --batch-invariant: per-row paths (generate as alone; bench decode reports it; refused where it cannot hold) ----
bi_gen=(generate tiny --dtype bf16 --tokens 5,17,3,5,17,3,5,17 -n 12 --temperature 0.9 --seed 3 --print-ids -q)
run "${bi_gen[@]}" --batch-invariant
if [[ $rc != 0 && $err == *"needs the AVX-512 kernels"* ]]; then
    pass "--batch-invariant refused by this AVX2 build, naming why"
else
    [[ $rc == 0 && $(echo "$out" | tail -1) =~ ^[0-9]+(,[0-9]+){11}$ ]] && pass "generate --batch-invariant" ||
        fail "generate --batch-invariant" "exit $rc" "out: $out" "stderr: $err"
    expect_ok "bench decode --batch-invariant --json" bench decode --model tiny --prompt-tokens 40 --new-tokens 2 \
        --batch-invariant --json
    [[ $out == *'"batch_invariant":true'* ]] && pass "bench decode reports batch invariance" ||
        fail "bench decode reports batch invariance" "out: $out"
fi
expect_error "--batch-invariant with --device cuda is refused" \
    "^zaya: error: batch-invariant decoding runs on the CPU" "${bi_gen[@]}" --batch-invariant --device cuda
expect_error "eval --batch-invariant without --generate is refused" \
    "^zaya: error: eval: --batch-invariant applies to --generate" eval tiny --data nowhere --batch-invariant

# ---- prepare + train on a small corpus ----
mkdir -p "$tmp/corpus"
for i in $(seq 1 40); do
    printf 'Document %d. The quick brown fox jumps over the lazy dog %d times.\nPython is a programming language.\n' \
        "$i" "$i" >"$tmp/corpus/doc$i.txt"
done
expect_ok "zaya prepare a small corpus" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400
[[ -f $tmp/data/data.json && -f $tmp/data/tokenizer.model ]] && pass "prepare writes data.json and tokenizer.model" ||
    fail "prepare writes data.json and tokenizer.model" "$(ls -la "$tmp/data" 2>&1)"
expect_error "prepare: missing input" "^zaya: error: .*no-such-dir" prepare --input "$tmp/no-such-dir" --out "$tmp/d2"
expect_ok "zaya train tiny for 4 steps" train --data "$tmp/data" --out "$tmp/run" --model tiny --steps 4 --batch 4 \
    --micro-batch 2 --seq 16 --warmup 1 --eval-every 2 --eval-batches 1 --sample-tokens 5
[[ $(grep -c '"loss"' "$tmp/run/metrics.jsonl") -eq 4 && $(grep -c '"val_loss"' "$tmp/run/metrics.jsonl") -eq 2 ]] &&
    pass "train writes 4 step and 2 validation records to metrics.jsonl" ||
    fail "train writes 4 step and 2 validation records to metrics.jsonl" "$(cat "$tmp/run/metrics.jsonl" 2>&1)"
[[ -f $tmp/run/model/config.json && -f $tmp/run/model/model.safetensors && -f $tmp/run/model/tokenizer.model ]] &&
    pass "train writes the model in HF layout with its tokenizer" ||
    fail "train writes the model in HF layout with its tokenizer" "$(ls -la "$tmp/run/model" 2>&1)"
expect_ok "zaya forward loads the trained model" forward "$tmp/run/model" --tokens 2,10,11 --out "$tmp/tr.safetensors"
# ---- checkpoints: 4 steps stopped after 2, then --resume, gives the same losses as 4 steps straight ----
train_args=(--data "$tmp/data" --model tiny --batch 4 --micro-batch 2 --seq 16 --warmup 1 --eval-every 0
    --sample-tokens 0 --ckpt-every 2)
expect_ok "train 4 steps straight" train "${train_args[@]}" --out "$tmp/straight" --steps 4
expect_ok "train 4 steps, stopping after 2" train "${train_args[@]}" --out "$tmp/resumed" --steps 4 --stop-after 2
[[ -f $tmp/resumed/checkpoints/latest && -f $tmp/resumed/checkpoints/step_00000002/manifest.json ]] &&
    pass "checkpoint step_00000002 and the latest pointer exist" || fail "checkpoint files" "$(ls -R "$tmp/resumed")"
expect_ok "train --resume to step 4" train "${train_args[@]}" --out "$tmp/resumed" --steps 4 --resume
step_losses() { grep -o '[{,]"loss":[^,}]*' "$1/metrics.jsonl" | tr '\n' ' '; }
[[ -n $(step_losses "$tmp/straight") && $(step_losses "$tmp/straight") == "$(step_losses "$tmp/resumed")" ]] &&
    pass "resumed run has bit-identical per-step losses" ||
    fail "resumed run has bit-identical per-step losses" "straight: $(step_losses "$tmp/straight")" \
        "resumed: $(step_losses "$tmp/resumed")"
cmp -s "$tmp/straight/model/model.safetensors" "$tmp/resumed/model/model.safetensors" &&
    pass "resumed run exports a byte-identical model" || fail "resumed run exports a byte-identical model"
expect_error "train --resume without checkpoints" "^zaya: error: --resume: no checkpoint" train "${train_args[@]}" \
    --out "$tmp/fresh" --steps 2 --resume

expect_error "train: micro-batch must divide batch" "^zaya: error: .*micro_batch" train --data "$tmp/data" \
    --out "$tmp/run2" --model tiny --steps 2 --batch 4 --micro-batch 3 --seq 16
expect_error "train: missing data dir" "^zaya: error: .*no-such-data" train --data "$tmp/no-such-data" \
    --out "$tmp/run3" --model tiny --steps 2
expect_ok "train with bf16 matmuls and fp32 Newton-Schulz" train --data "$tmp/data" --out "$tmp/run_bf16" --model tiny \
    --steps 2 --batch 2 --seq 16 --sample-tokens 0 --precision bf16 --ns-precision fp32
grep -q '"precision": "bf16"' "$tmp/run_bf16/train_config.json" && grep -q '"ns_precision": "fp32"' "$tmp/run_bf16/train_config.json" &&
    pass "train_config.json records both precisions" || fail "train_config.json records both precisions"
expect_error "train: unknown matmul precision" "^zaya: error: .*precision .*'fp16'" train --data "$tmp/data" \
    --out "$tmp/run7" --model tiny --steps 2 --batch 2 --seq 16 --precision fp16
expect_error "train: unknown Newton-Schulz precision" "^zaya: error: .*precision .*'fp8'" train --data "$tmp/data" \
    --out "$tmp/run6" --model tiny --steps 2 --batch 2 --seq 16 --ns-precision fp8
ZAYA_COMM=bogus expect_error "train: unknown ZAYA_COMM" "^zaya: error: ZAYA_COMM must be .*'bogus'" train \
    --data "$tmp/data" --out "$tmp/run4" --model tiny --steps 2 --batch 2 --seq 16
# Without a GPU (or without NCCL in the build) NCCL is refused with the reason; with one, a 1-rank run trains.
ZAYA_COMM=nccl run train --data "$tmp/data" --out "$tmp/run5" --model tiny --steps 2 --batch 2 --seq 16
if [[ $rc -eq 0 ]]; then
    pass "train with ZAYA_COMM=nccl (a GPU is present)"
else
    error_problems "^zaya: error: ZAYA_COMM=nccl[:,] (no usable CUDA device|no CUDA device|.*built without)"
    [[ ${#problems[@]} -eq 0 ]] && pass "train: ZAYA_COMM=nccl without a GPU says why" ||
        fail "train: ZAYA_COMM=nccl without a GPU says why" "${problems[@]}" "stderr: $err"
fi

finish
