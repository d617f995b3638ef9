# make_corpus DIR N: N small synthetic documents in DIR (sourced by the fault tests and the soak script).
make_corpus() {
    mkdir -p "$1"
    for i in $(seq 1 "$2"); do
        printf 'Document %d. The quick brown fox jumps over the lazy dog %d times.\nPython is a language number %d.\n' \
            "$i" "$i" $((i * 7)) >"$1/doc$i.txt"
    done
}
