# Shared helpers of the command-line test scripts (sourced): a temp dir, pass/fail counters, and runners that
# capture stdout, stderr and the exit status of one `zaya` invocation. The sourcing script's arguments are
# ZAYA_BINARY SOURCE_DIR.
if [[ $# -ne 2 ]]; then
    echo "usage: $0 ZAYA_BINARY SOURCE_DIR" >&2
    exit 2
fi
ZAYA=$1
SRC=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/zaya_cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

passed=0
failed=0
disabled=0
pass() { passed=$((passed + 1)); echo "ok      $1"; }
fail() {
    failed=$((failed + 1))
    echo "FAILED  $1"
    shift
    for line in "$@"; do echo "        $line"; done
}

# run NAME ARGS...: runs zaya, leaving stdout in $out, stderr in $err and the exit status in $rc.
run() {
    rc=0
    "$ZAYA" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
    out=$(cat "$tmp/stdout")
    err=$(cat "$tmp/stderr")
}

# expect_ok NAME ARGS...: exit status 0.
expect_ok() {
    local name=$1
    shift
    run "$@"
    if [[ $rc -eq 0 ]]; then pass "$name"; else fail "$name" "exit status $rc" "stderr: $err"; fi
}

# error_problems PATTERN: why the last run is not a clean error (empty when it is): exit status != 0 and
# exactly one line on stderr matching the extended regex PATTERN.
error_problems() {
    local pattern=$1 lines
    lines=$(wc -l <"$tmp/stderr")
    problems=()
    [[ $rc -ne 0 ]] || problems+=("exit status 0")
    [[ $lines -eq 1 ]] || problems+=("$lines lines on stderr, expected 1")
    grep -Eq -- "$pattern" "$tmp/stderr" || problems+=("stderr does not match /$pattern/")
}

# expect_error NAME PATTERN ARGS...
expect_error() {
    local name=$1 pattern=$2
    shift 2
    run "$@"
    error_problems "$pattern"
    if [[ ${#problems[@]} -eq 0 ]]; then
        pass "$name"
    else
        fail "$name" "${problems[@]}" "stderr: $err"
    fi
}

# disabled_expect_error REASON NAME PATTERN ARGS...: like expect_error for a known bug; reported but not
# counted as a failure (the shell equivalent of gtest's DISABLED_). Turn into expect_error once fixed.
disabled_expect_error() {
    local reason=$1 name=$2 pattern=$3
    shift 3
    run "$@"
    error_problems "$pattern"
    disabled=$((disabled + 1))
    if [[ ${#problems[@]} -eq 0 ]]; then
        echo "DISABLED $name (now passes: enable it) [$reason]"
    else
        echo "DISABLED $name [$reason]: ${problems[*]}"
    fi
}

# qwen_model_dir DIR [TEMPLATE]: a model directory's tokenizer files as transformers saves them: the golden
# byte-level tokenizer.json (Qwen2's kind, with <|im_start|> and <|im_end|>), the Jinja file TEMPLATE as
# chat_template.jinja (when given) and the special tokens in tokenizer_config.json.
qwen_model_dir() {
    mkdir -p "$1"
    cp "$SRC/tests/golden/tokenizer/qwen2/tokenizer.json" "$1/tokenizer.json"
    [[ -z ${2:-} ]] || cp "$2" "$1/chat_template.jinja"
    echo '{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}' >"$1/tokenizer_config.json"
}

# server_port LOG [TENTHS]: the port `zaya serve --port 0` printed to LOG, waiting up to TENTHS × 0.1 s (default
# 100) for its "listening on" line; empty if it never came.
server_port() {
    local log=$1 tries=${2:-100} p=
    for _ in $(seq 1 "$tries"); do
        p=$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
        [[ -n $p ]] && break
        sleep 0.1
    done
    echo "$p"
}

# start_server LOG ARGS...: `zaya serve ARGS... --port 0` in the background, its output in LOG; sets server (its pid)
# and port (empty if it never said where it listens within 30 s); stop_server ends it.
start_server() {
    local log=$1
    shift
    "$ZAYA" serve "$@" --port 0 >"$log" 2>&1 &
    server=$!
    port=$(server_port "$log" 300)
}
stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}

# max_rel_diff A B: the largest relative difference of every loss and val_loss of two runs' metrics.jsonl (same
# steps, same order); within X LIMIT: whether X ≤ LIMIT (numbers as printed).
max_rel_diff() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b), (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["step"] == y["step"]
    for k in ("loss", "val_loss"):
        if k in x:
            worst = max(worst, abs(x[k] - y[k]) / abs(x[k]))
print(f"{worst:.3e}")
PY
}
within() { python3 -c "import sys; sys.exit(0 if float('$1') <= float('$2') else 1)"; }

# finish: prints the totals; the exit status says whether everything passed.
finish() {
    echo
    [[ $disabled -eq 0 ]] || echo "$disabled disabled (known bugs, not counted)"
    echo "$passed passed, $failed failed"
    [[ $failed -eq 0 ]]
}
