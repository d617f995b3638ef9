#!/usr/bin/env bash
# Fine-tuning on prompt/completion and chat records (`zaya prepare` loss masks, data/sources.h): the prepared data
# learns only the answers; `zaya eval` scores only them; `zaya train --init` on a chat set teaches a pretrained model
# to answer in ZAYA1's turn format, which `zaya generate --chat` and `zaya serve` then reproduce, stopping at
# <end_of_turn>; with --doc-mask (sequences cut at each EOS) and --pack documents (whole documents packed into rows)
# `zaya eval` gives the run's val_loss, and a packed run resumes bit for bit; under mpirun, 2 ranks × micro-batch 2
# give 1 rank × micro-batch 4's losses although the ranks hold unequal counts of learned targets (the step's loss is
# the mean over the global batch's learned targets), packed or not.
#
# Usage: test_finetune.sh ZAYA_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh" # usage check, $ZAYA and $SRC, temp dir, pass/fail helpers
source "$(dirname "$0")/corpus.sh"

make_corpus "$tmp/corpus" 200
"$ZAYA" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400 >/dev/null 2>&1
expect_ok "a base model to fine-tune: tiny, 12 steps" train --data "$tmp/data" --model tiny --seq 64 --batch 4 \
    --steps 12 --eval-every 0 --sample-tokens 0 --out "$tmp/base"

# Chats with varied questions and one answer, "Sure, happy to help.", and prompt/completion pairs.
python3 - "$tmp/sft.jsonl" <<'PY'
import json, sys
names = ["Ada", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo"]
with open(sys.argv[1], "w") as f:
    for i in range(400):
        n = names[i % len(names)]
        if i % 4 == 3:
            f.write(json.dumps({"prompt": f"Document {i}. The quick brown fox", "completion": f" greets {n}."}) + "\n")
        else:
            f.write(json.dumps({"messages": [{"role": "user", "content": f"Hello, I am {n}. Number {i}?"},
                                             {"role": "assistant", "content": "Sure, happy to help."}]}) + "\n")
PY
expect_ok "prepare the fine-tuning records with the base model's tokenizer" \
    prepare --input "$tmp/sft.jsonl" --out "$tmp/sft" --tokenizer "$tmp/base/model/tokenizer.model"
[[ $err == *"400 documents: 0 text, 100 prompt/completion, 300 chat"* &&
    $err =~ [0-9]+\ of\ them\ \([0-9]+%\)\ learned\ \(loss\ masks\ leave\ out\ prompts\) ]] &&
    pass "prepare counts the record kinds and the learned tokens" ||
    fail "prepare counts the record kinds and the learned tokens" "$err"
python3 - "$tmp/sft/data.json" <<'PY' && pass "data.json: version 2, loss_mask, a mask per shard" || fail "data.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["version"] == 2 and j["loss_mask"] is True, j
for s in ("train", "val"):
    assert len(j[s]["masks"]) == len(j[s]["shards"]), j[s]
PY

eval_json() { # MODEL: zaya eval's JSON on the fine-tuning data
    run eval "$1" --data "$tmp/sft" --seq 64 --batch 4 --json --by-position 2
    echo "$out"
}
before=$(eval_json "$tmp/base/model")
python3 - "$before" <<'PY' && pass "eval scores only the answers (fewer targets than positions)" ||
import json, sys
j = json.loads(sys.argv[1])
positions = j["batches"] * j["batch"] * j["seq"]
assert 0 < j["tokens"] < positions / 2, (j["tokens"], positions)
assert sum(r["tokens"] for r in j["by_position"]) == j["tokens"], j
PY
    fail "eval scores only the answers" "$before"

expect_ok "fine-tune the base model on the chats (--init, 60 steps)" train --data "$tmp/sft" --init "$tmp/base/model" \
    --seq 64 --batch 8 --steps 60 --lr 0.01 --eval-every 0 --sample-tokens 0 --out "$tmp/ft"
[[ $out == *"(loss masks: only completions and assistant turns are learned)"* ]] && pass "the banner says so" ||
    fail "the banner mentions the loss masks" "$out"
after=$(eval_json "$tmp/ft/model")
python3 - "$before" "$after" <<'PY' && pass "the answers' loss falls" ||
import json, sys
a, b = (json.loads(x)["loss"] for x in sys.argv[1:3])
print(f"        answers' loss {a:.3f} -> {b:.3f}")
assert b < 0.5 * a, (a, b)
PY
    fail "the answers' loss falls" "$before" "$after"
# Multiple choice (zaya eval --choices): the fine-tuned model prefers the completions it learned (" greets Ada.")
# over the pretraining text's (" jumps over the lazy dog ..."), the base model less so.
python3 - "$tmp/mc.jsonl" <<'PY'
import json, sys
names = ["Ada", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo"]
with open(sys.argv[1], "w") as f:
    for i in range(3, 120, 4):
        f.write(json.dumps({"context": f"Document {i}. The quick brown fox",
                            "choices": [f" jumps over the lazy dog {i} times.", f" greets {names[i % 10]}."],
                            "answer": 1}) + "\n")
PY
accuracy() { # MODEL: acc and acc_norm on the items
    run eval "$1" --choices "$tmp/mc.jsonl" --batch-tokens 128 --json
    python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(j["acc"], j["acc_norm"], j["items"],
        j["choices"])' "$out"
}
read -r acc_base norm_base items choices <<<"$(accuracy "$tmp/base/model")"
read -r acc_ft norm_ft _ _ <<<"$(accuracy "$tmp/ft/model")"
if [[ $items == 30 && $choices == 60 ]] &&
    python3 -c "import sys; sys.exit(0 if $acc_ft >= 0.9 and $acc_ft > $acc_base else 1)"; then
    pass "eval --choices: the fine-tuned model picks the learned completions (acc $acc_base -> $acc_ft, acc_norm \
$norm_base -> $norm_ft)"
else
    fail "eval --choices: the fine-tuned model picks the learned completions" \
        "base '$acc_base' ft '$acc_ft' items '$items' choices '$choices'" "$out"
fi
expect_error "eval: --data and --choices together are refused" "^zaya: error: .*not several" \
    eval "$tmp/ft/model" --choices "$tmp/mc.jsonl" --data "$tmp/sft"
# Benchmarks in their published formats through tools/choices_from.py (synthetic items in each format).
formats=$SRC/tests/cli/choice_formats
{
    python3 "$SRC/tools/choices_from.py" hellaswag "$formats/hellaswag.jsonl" &&
        python3 "$SRC/tools/choices_from.py" arc "$formats/arc.jsonl" &&
        python3 "$SRC/tools/choices_from.py" piqa "$formats/piqa.jsonl" "$formats/piqa-labels.lst" &&
        python3 "$SRC/tools/choices_from.py" mmlu "$formats/mmlu.csv"
} >"$tmp/bench.jsonl" 2>/dev/null
run eval "$tmp/ft/model" --choices "$tmp/bench.jsonl" --json
python3 -c 'import json, sys; j = json.loads(sys.argv[1]); assert (j["items"], j["choices"]) == (7, 23), j' "$out" &&
    pass "tools/choices_from.py: HellaSwag, ARC, PIQA, MMLU files become items for zaya eval (7 items, 23 choices)" ||
    fail "tools/choices_from.py: the four formats become items zaya eval scores" "$out" "$(cat "$tmp/bench.jsonl")"
# Generation (zaya eval --generate --chat): the fine-tuned model answers "Sure, happy to help." to new questions, the
# base model does not; --answer-regex takes a part of the completion; --out keeps each completion.
python3 - "$tmp/gen.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, n in enumerate(["Kim", "Lou", "Max", "Ned", "Oz", "Pat", "Quinn", "Rae"]):
        f.write(json.dumps({"prompt": f"Hello, I am {n}. Number {500 + i}?", "answer": "Sure, happy to help."}) + "\n")
PY
exact() { # MODEL [ARGS...]: exact_match and items
    local model=$1
    shift
    run eval "$model" --generate "$tmp/gen.jsonl" --chat --max-tokens 32 --json "$@"
    [[ $rc == 0 ]] || echo "        eval --generate: exit $rc: $err" >&2
    python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(j["exact_match"], j["items"])' "$out"
}
read -r em_base _ <<<"$(exact "$tmp/base/model")"
read -r em_ft items <<<"$(exact "$tmp/ft/model" --out "$tmp/gen_out.jsonl")"
if [[ $items == 8 ]] && python3 -c "import sys; sys.exit(0 if $em_ft >= 0.75 and $em_ft > $em_base else 1)" &&
    [[ $(wc -l <"$tmp/gen_out.jsonl") == 8 ]] && grep -q '"completion":"Sure, happy to help."' "$tmp/gen_out.jsonl"
then
    pass "eval --generate --chat: the fine-tuned model gives the learned answer (exact match $em_base -> $em_ft)"
else
    fail "eval --generate --chat: the fine-tuned model gives the learned answer" "base '$em_base' ft '$em_ft'" "$out" \
        "$(head -3 "$tmp/gen_out.jsonl" 2>&1)"
fi
# --quantize int8: the same learned answers from int8 weights (a scale per 64 columns), and --out's completions equal.
read -r em_q8 _ <<<"$(exact "$tmp/ft/model" --quantize int8 --out "$tmp/gen_q8.jsonl")"
[[ $em_q8 == "$em_ft" ]] && cmp -s "$tmp/gen_out.jsonl" "$tmp/gen_q8.jsonl" &&
    pass "eval --generate --quantize int8: the fine-tuned model's answers unchanged (exact match $em_q8)" ||
    fail "eval --generate --quantize int8: the same answers" "int8 '$em_q8' vs '$em_ft'" \
        "$(diff "$tmp/gen_out.jsonl" "$tmp/gen_q8.jsonl" 2>&1 | head -4)"
sed -i 's/"Sure, happy to help."/"happy"/' "$tmp/gen.jsonl"
read -r em_part _ <<<"$(exact "$tmp/ft/model" --answer-regex 'Sure, (\w+) to')"
[[ $em_part == "$em_ft" ]] && pass "eval --generate --answer-regex: the group's text is the answer ($em_part)" ||
    fail "eval --generate --answer-regex: the group's text is the answer" "'$em_part' vs '$em_ft'"
printf '{"context": "x", "choices": ["a", "b"], "answer": 2}\n' >"$tmp/bad.jsonl"
expect_error "eval --choices: a bad answer index names the file and line" "^zaya: error: .*bad.jsonl:1: 'answer'" \
    eval "$tmp/ft/model" --choices "$tmp/bad.jsonl"

# The end-of-training sample as a chat (--sample-chat): the user's turn, then the model's answer, which stops at the
# turn's end (a few more steps from the fine-tuned model: the answer is sampled, as the sample always is).
expect_ok "train --sample-chat" train --data "$tmp/sft" --init "$tmp/ft/model" --seq 64 --batch 8 --steps 2 --lr 0.001 \
    --eval-every 0 --eval-batches 1 --sample-chat --sample-prompt "Hello, I am Eve. Number 1234?" --sample-tokens 48 \
    --out "$tmp/ft_sample"
sample=$(sed -n '/^sample (chat, /,$p' <<<"$out")
[[ $(sed -n 2p <<<"$sample") == "user: Hello, I am Eve. Number 1234?" && $(sed -n 3p <<<"$sample") == "model: "?* &&
    $sample != *"<end_of_turn>"* && $sample != *"<start_of_turn>"* ]] &&
    pass "the sample is the user's turn and the model's answer, ended at the turn: $(sed -n 3p <<<"$sample")" ||
    fail "train --sample-chat" "$sample"
run generate "$tmp/ft/model" --chat --prompt "Hello, I am Eve. Number 1234?" --temperature 0 -n 48
[[ $rc -eq 0 && $out == "Sure, happy to help." ]] &&
    pass "generate --chat answers as taught and stops at <end_of_turn>" ||
    fail "generate --chat answers as taught" "exit $rc, output '$out'" "$err"
# zaya chat: turns read from stdin. The first and, after /reset, the third are answered as taught (the model learned
# single turns only); the second resumes from the first turn's cache (its whole prompt at least), and the answers
# are those of the same chat without the cache.
printf '%s\n' "Hello, I am Eve. Number 1234?" "Hello, I am Bob. Number 42?" /reset "Hello, I am Al. Number 7?" \
    >"$tmp/chat_in.txt"
run chat "$tmp/ft/model" --temperature 0 -n 48 --prefix-cache-mb 0 <"$tmp/chat_in.txt"
uncached=$out
run chat "$tmp/ft/model" --temperature 0 -n 48 <"$tmp/chat_in.txt"
mapfile -t turns < <(sed -nE 's/^\[([0-9]+) prompt tokens \(([0-9]+) from the cache\).*/\1 \2/p' <<<"$err")
mapfile -t answers <<<"$out"
if [[ $rc -eq 0 && ${#turns[@]} == 3 && $out == "$uncached" ]] &&
    [[ ${answers[0]} == "Sure, happy to help." && ${answers[2]} == "Sure, happy to help." ]] &&
    read -r p1 c1 <<<"${turns[0]}" && read -r p2 c2 <<<"${turns[1]}" && read -r p3 c3 <<<"${turns[2]}" &&
    ((c1 == 0 && c2 >= p1 && p2 > p1 && p3 < p2 && c3 < p1)); then
    pass "chat: turn 2 resumed $c2 of its $p2 tokens, answers = without the cache; /reset starts over ($p3 tokens)"
else
    fail "chat: turns from stdin, the second from the cache, /reset" "exit $rc" "out: $out" "uncached: $uncached" \
        "err: $err"
fi
run generate "$tmp/ft/model" --chat --prompt "Hello, I am Eve. Number 1234?" --temperature 0 -n 48 --quantize int8
[[ $rc -eq 0 && $out == "Sure, happy to help." && $err == *"MiB (I8, int8 inputs)"* ]] &&
    pass "generate --quantize int8 answers the same, from int8 weights" ||
    fail "generate --quantize int8 answers the same" "exit $rc, output '$out'" "$err"

# The server answers the chat the same way, and stops where the turn ends.
if command -v curl >/dev/null 2>&1; then
    start_server "$tmp/serve.log" "$tmp/ft/model"
    body=$(curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" \
        -d '{"messages": [{"role": "user", "content": "Hello, I am Eve. Number 1234?"}], "temperature": 0,
             "max_tokens": 48}')
    stop_server
    python3 - "$body" <<'PY' && pass "serve: /v1/chat/completions answers as taught, finish_reason stop" ||
import json, sys
c = json.loads(sys.argv[1])["choices"][0]
assert c["message"]["content"] == "Sure, happy to help." and c["finish_reason"] == "stop", c
PY
        fail "serve answers the chat as taught" "$body" "$(cat "$tmp/serve.log")"
else
    echo "skip    curl not installed: the server check"
fi

# --dump-batches on masked data: the flags beside the tokens, for tools/train_reference.py
expect_ok "train --dump-batches on masked data" train --data "$tmp/sft" --init "$tmp/base/model" --seq 64 --batch 4 \
    --steps 2 --eval-every 0 --eval-batches 1 --sample-tokens 0 --dump-batches --out "$tmp/dump"
python3 - "$tmp/dump" <<'PY' && pass "batches_learned.bin: a flag per token of batches.bin, prompts 0" ||
import os, sys
tokens = os.path.getsize(os.path.join(sys.argv[1], "batches.bin")) // 4
flags = open(os.path.join(sys.argv[1], "batches_learned.bin"), "rb").read()
assert tokens == len(flags) == 2 * 4 * 65, (tokens, len(flags))
assert set(flags) == {0, 1}, set(flags)
PY
    fail "batches_learned.bin beside batches.bin"

# ---- document masking: sequences cut at each EOS ----
expect_ok "train --doc-mask" train --data "$tmp/sft" --init "$tmp/base/model" --seq 64 --batch 4 --steps 3 \
    --eval-every 3 --eval-batches 0 --sample-tokens 0 --doc-mask --out "$tmp/dm"
[[ $out == *"document masking: sequences cut at each EOS"* ]] && pass "the banner says so" ||
    fail "the banner mentions document masking" "$out"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["doc_mask"] is True else 1)' \
    "$tmp/dm/train_config.json" && pass "train_config.json records doc_mask" ||
    fail "train_config.json records doc_mask"
val=$(python3 -c 'import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' \
    "$tmp/dm/metrics.jsonl")
for mask in --doc-mask ""; do
    run eval "$tmp/dm/model" --data "$tmp/sft" --seq 64 --batch 4 --json $mask
    got=$(python3 -c 'import json,sys; print(repr(json.loads(sys.argv[1])["loss"]))' "$out")
    if [[ -n $mask ]]; then
        [[ $got == "$val" ]] && pass "eval --doc-mask gives the run's val_loss bit for bit ($got)" ||
            fail "eval --doc-mask gives the run's val_loss" "$got vs $val"
    else
        [[ $got != "$val" ]] && pass "eval without --doc-mask scores another thing ($got)" ||
            fail "eval without --doc-mask differs" "$got"
    fi
done

# zaya info --train --doc-mask plans for up to one sequence per token (seq_start and the conv's padding rows grow)
acts_mib() { # the activations line of zaya info --train
    "$ZAYA" info tiny --train --seq 64 --micro-batch 4 "$@" | sed -nE 's/^  activations +([0-9.]+) MiB.*/\1/p'
}
plain_acts=$(acts_mib)
doc_acts=$(acts_mib --doc-mask)
awk -v a="$doc_acts" -v b="$plain_acts" 'BEGIN { exit !(a > b && b > 0) }' &&
    pass "info --train --doc-mask plans more activation memory ($doc_acts vs $plain_acts MiB)" ||
    fail "info --train --doc-mask plans more activation memory" "'$doc_acts' vs '$plain_acts'"

# ---- whole documents packed into rows (--pack documents), with --doc-mask ----
pk=(--data "$tmp/sft" --init "$tmp/base/model" --seq 128 --batch 4 --warmup 1 --eval-every 2 --eval-batches 0
    --sample-tokens 0 --pack documents --doc-mask)
expect_ok "train --pack documents --doc-mask, 4 steps, checkpoints every 2" train "${pk[@]}" --steps 4 --ckpt-every 2 \
    --out "$tmp/pk"
[[ $out =~ packing:\ ([0-9]+)\ whole\ documents\ into\ ([0-9]+)\ rows\ of\ 129\ tokens ]] &&
    pass "the banner counts the documents and rows (${BASH_REMATCH[1]} into ${BASH_REMATCH[2]})" ||
    fail "the banner counts the packed documents" "$out"
val=$(python3 -c 'import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' \
    "$tmp/pk/metrics.jsonl")
run eval "$tmp/pk/model" --data "$tmp/sft" --seq 128 --batch 4 --json --pack documents --doc-mask
got=$(python3 -c 'import json,sys; print(repr(json.loads(sys.argv[1])["loss"]))' "$out")
[[ $got == "$val" ]] && pass "eval --pack documents --doc-mask gives the run's val_loss bit for bit ($got)" ||
    fail "eval --pack documents gives the run's val_loss" "$got vs $val"
# zaya eval --generate reads a checkpoint too (its tokenizer given): the same completions as the run's final model.
run eval "$tmp/pk/model" --generate "$tmp/gen.jsonl" --max-tokens 8 --out "$tmp/gen_model.jsonl"
run eval "$tmp/pk/checkpoints/step_00000004" --generate "$tmp/gen.jsonl" --max-tokens 8 --out "$tmp/gen_ckpt.jsonl" \
    --tokenizer "$tmp/base/model/tokenizer.model"
[[ $rc == 0 && -s $tmp/gen_ckpt.jsonl ]] && cmp -s "$tmp/gen_model.jsonl" "$tmp/gen_ckpt.jsonl" &&
    pass "eval --generate on a checkpoint = on the run's model (8 completions)" ||
    fail "eval --generate on a checkpoint = on the run's model" "exit $rc: $err" "$(head -2 "$tmp/gen_ckpt.jsonl" 2>&1)"
expect_ok "the same run stopped at step 2 and resumed" train "${pk[@]}" --steps 4 --ckpt-every 2 --stop-after 2 \
    --out "$tmp/pk2"
expect_ok "resume" train "${pk[@]}" --steps 4 --ckpt-every 2 --resume --out "$tmp/pk2"
losses() { # METRICS: each line's loss and val_loss
    python3 -c 'import json,sys
for l in open(sys.argv[1]): print(json.loads(l).get("loss"), json.loads(l).get("val_loss"))' "$1"
}
[[ $(losses "$tmp/pk/metrics.jsonl") == "$(losses "$tmp/pk2/metrics.jsonl")" &&
    $(grep -c '"skipped":false' "$tmp/pk/metrics.jsonl") -eq 4 ]] &&
    pass "resumed packed run: the same losses bit for bit (4 steps, none without a learned target)" ||
    fail "resumed packed run: the same losses" "$(cat "$tmp/pk/metrics.jsonl" "$tmp/pk2/metrics.jsonl")"
run train "${pk[@]/documents/chunks}" --steps 4 --ckpt-every 2 --resume --out "$tmp/pk"
[[ $rc -ne 0 && "$out$err" == *"loader state is for --pack documents, this run uses --pack chunks"* ]] &&
    pass "resuming with the other --pack is refused, naming both" || fail "resuming with the other --pack" "$rc" "$err"

# --by-position with --doc-mask counts positions within documents (the positions the model saw), not row offsets:
# the pretraining corpus's short documents, packed two or three to a row, have few targets past position 31.
second_half() { # the targets counted at positions 32-63
    run eval "$tmp/base/model" --data "$tmp/data" --seq 64 --batch 4 --pack documents --by-position 2 --json "$@"
    python3 -c 'import json,sys; j = json.loads(sys.argv[1]); print(j["by_position"][1]["tokens"], j["tokens"])' "$out"
}
read -r rows_late rows_all <<<"$(second_half)"
read -r docs_late docs_all <<<"$(second_half --doc-mask)"
counts="$docs_late of $docs_all targets past 31; by row offset $rows_late of $rows_all"
awk -v d="$docs_late" -v r="$rows_late" 'BEGIN { exit !(d * 4 < r) }' &&
    pass "--by-position --doc-mask: positions within documents ($counts)" ||
    fail "--by-position --doc-mask counts positions within documents" "$docs_late vs $rows_late"

# ---- data parallel: unequal learned counts per rank ----
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # as they come (chunks), and whole documents packed with --doc-mask: rows of unequal lengths per rank
    for layout in "--seq 64" "--seq 128 --pack documents --doc-mask"; do
        dp=(--data "$tmp/sft" --init "$tmp/base/model" --batch 8 --steps 4 --warmup 1 --eval-every 2
            --sample-tokens 0 --ns-precision fp32 $layout)
        expect_ok "1 rank, micro-batch 4 ($layout)" train "${dp[@]}" --micro-batch 4 --out "$tmp/one"
        rc=0
        mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$ZAYA" train "${dp[@]}" --micro-batch 2 --out "$tmp/two" \
            >"$tmp/two.out" 2>&1 || rc=$?
        [[ $rc -eq 0 ]] && pass "2 ranks, micro-batch 2 ($layout)" ||
            fail "2 ranks, micro-batch 2 ($layout)" "$(tail -5 "$tmp/two.out")"
        python3 - "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" <<'PY' &&
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and [x["step"] for x in a] == [y["step"] for y in b], (a, b)
assert sum("val_loss" in x for x in a) == 2 and not any(x.get("skipped") for x in a), a
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "val_loss") if k in x)
print(f"        max relative difference {worst:.2e}")
assert worst < 1e-5, worst
PY
            pass "2 ranks' losses are 1 rank's ($layout)" || fail "2 ranks' losses are 1 rank's ($layout)"
        rm -rf "$tmp/one" "$tmp/two"
    done
else
    echo "skip    mpirun not installed: the data-parallel checks"
fi

finish
