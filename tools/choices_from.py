#!/usr/bin/env python3
"""Benchmark files in their published formats → `zaya eval --choices` JSONL ({"context", "choices", "answer"}),
with the prompts lm-evaluation-harness uses for them.

Usage:
    python3 tools/choices_from.py FORMAT IN [IN ...] > items.jsonl

FORMAT and its input:
    hellaswag  hellaswag_val.jsonl (rowanz/hellaswag: ctx_a, ctx_b, activity_label, endings, label)
    arc        ARC-Easy-Dev.jsonl, ARC-Challenge-Test.jsonl, … (allenai ARC-V1: question.stem, question.choices,
               answerKey)
    piqa       valid.jsonl valid-labels.lst (ybisk/piqa: goal, sol1, sol2; one label per line in the second file)
    mmlu       one or more test/*.csv of the MMLU release (question, A, B, C, D, answer letter)

Standard library only; reads the files given, writes to standard output, and names the file and line of any item
it cannot read.
"""

from __future__ import annotations

import csv
import json
import re
import sys


def fail(where: str, why: str) -> None:
    raise SystemExit(f"choices_from: {where}: {why}")


def jsonl(path: str):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield f"{path}:{n}", json.loads(line)
                except json.JSONDecodeError as e:
                    fail(f"{path}:{n}", f"not JSON ({e})")


def hellaswag_text(text: str) -> str:
    # The harness's clean-up of WikiHow artefacts: " [title]" becomes ". ", bracketed tags go, double spaces merge.
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag(paths):
    for where, j in jsonl(paths[0]):
        try:
            ctx = j["ctx_a"] + " " + j["ctx_b"].capitalize()
            yield {"context": hellaswag_text(j["activity_label"] + ": " + ctx),
                   "choices": [" " + hellaswag_text(e) for e in j["endings"]], "answer": int(j["label"])}
        except (KeyError, TypeError, ValueError) as e:
            fail(where, f"not a HellaSwag item ({e!r})")


def arc(paths):
    for path in paths:
        for where, j in jsonl(path):
            try:
                q = j["question"]
                labels = [c["label"] for c in q["choices"]]
                yield {"context": f"Question: {q['stem']}\nAnswer:",
                       "choices": [" " + c["text"] for c in q["choices"]], "answer": labels.index(j["answerKey"])}
            except (KeyError, TypeError, ValueError) as e:
                fail(where, f"not an ARC item ({e!r})")


def piqa(paths):
    if len(paths) != 2:
        fail("piqa", "give the items' JSONL and its labels file")
    with open(paths[1], encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    items = list(jsonl(paths[0]))
    if len(items) != len(labels):
        fail(paths[1], f"{len(labels)} labels for {len(items)} items")
    for (where, j), label in zip(items, labels):
        try:
            yield {"context": f"Question: {j['goal']}\nAnswer:", "choices": [" " + j["sol1"], " " + j["sol2"]],
                   "answer": int(label)}
        except (KeyError, TypeError, ValueError) as e:
            fail(where, f"not a PIQA item ({e!r})")


def mmlu(paths):
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            for n, row in enumerate(csv.reader(f), 1):
                if len(row) != 6 or row[5] not in ("A", "B", "C", "D"):
                    fail(f"{path}:{n}", "not an MMLU row (question, A, B, C, D, answer letter)")
                q, *options, answer = row
                body = "\n".join(f"{l}. {o}" for l, o in zip("ABCD", options))
                yield {"context": f"{q.strip()}\n{body}\nAnswer:", "choices": [" A", " B", " C", " D"],
                       "answer": "ABCD".index(answer)}


FORMATS = {"hellaswag": hellaswag, "arc": arc, "piqa": piqa, "mmlu": mmlu}


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in FORMATS:
        raise SystemExit(__doc__)
    count = 0
    for item in FORMATS[sys.argv[1]](sys.argv[2:]):
        print(json.dumps(item, ensure_ascii=False))
        count += 1
    print(f"choices_from: {count} items", file=sys.stderr)


if __name__ == "__main__":
    main()
