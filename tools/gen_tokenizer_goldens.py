#!/usr/bin/env python3
"""Golden encodings of Hugging Face ``tokenizers`` for zaya's reader of ``tokenizer.json`` (src/data/hf_tokenizer.h).

Usage:
    pip install -r tools/requirements.txt   (tokenizers, transformers, sentencepiece, protobuf)
    python3 tools/gen_tokenizer_goldens.py --out tests/golden/tokenizer

Trains two small sentencepiece BPE models on the repository's README and docs, one with Gemma3's settings (the
tokenizer real ZAYA1 uses: no dummy prefix, whitespace pieces, byte fallback, <start_of_turn>/<end_of_turn>) and
one with Llama's (a dummy prefix, so a Metaspace pre-tokenizer and a Strip decoder). Each is saved as
``<case>/tokenizer.model`` and, through transformers' own GemmaTokenizer / LlamaTokenizer, as the
``tokenizer.json`` + ``tokenizer_config.json`` that ``save_pretrained`` writes (transformers 5 writes no
tokenizer.model). A third case, ``gemma_added``, is the Gemma one with added tokens that exercise tokenizers'
single_word, lstrip / rstrip and normalized rules (a tokenizer.json only). Four byte-level cases share one BPE
``tokenizers`` trains on the same files: ``gpt2`` (the ByteLevel pre-tokenizer with GPT-2's pattern), ``llama3``
(Llama 3's Split pattern, ignore_merges, its special tokens), ``qwen2`` (NFC, Qwen2's pattern) and
``bytelevel_misc`` (NFKC, a Replace of a regular expression, Digits, inverted and merging Split behaviours,
add_prefix_space, a Replace decoder of a regular expression). ``cases.json`` holds, for each case and text, the ids ``tokenizers`` encodes (no special tokens
added) and what it decodes them to with special tokens skipped, sentencepiece's ids for the same text, and a few
decodes of byte-token sequences that are not whole UTF-8 characters. sentencepiece trains deterministically (one
thread, the files in a fixed order); tokenizers' BPE trainer does not (it breaks ties between equally frequent pairs
in hash order), so the byte-level files may differ between runs: ``cases.json`` always holds what the files written
with it encode to.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from transformers import GemmaTokenizer, LlamaTokenizer

TEXTS = [
    "",
    "Hello world",
    " leading space, two  spaces and trailing ",
    "def train(model):\n    for step in range(1000):\n\tloss = model(x)  # 42\n",
    "Digits 3.14159 and 2026-12-06, numbers like 1234567890.",
    "Unicode: naïve café, 漢字, Ελληνικά, emoji 🙂🚀, and ▁ itself.",
    "<start_of_turn>user\nWhat is CCA?<end_of_turn>\n<start_of_turn>model\n",
    "text<end_of_turn>glued<start_of_turn>",
    "\n\n\n   \t\t  \n",
    "<bos>not a control token in text? <eos> <pad> <unk>",
    "A long paragraph of the kind the docs hold: zaya trains ZAYA1-architecture mixture-of-experts models, "
    "with Muon and AdamW, asynchronous sharded checkpoints and a fault-tolerant supervisor.",
]


ADDED_TEXTS = [
    "zqx and zqxk, _zqx, (zqx), é zqx, zqxé zqx",
    "call  <tool>  now\n<tool>x<tool>",
    "the Muon optimizer and Muon  optimizer",
    # single_word beyond ASCII: letters, marks, digits, letter numbers, joiners, circled letters are word characters;
    # symbols, other numbers and punctuation are not
    "٣zqx zqxⅫ \u0301zqx zqx\u200d Ⓐzqx ªzqx ःzqx, 😀zqx zqx² 。zqx -zqx- zqx🅐 zqx\u00a0",
]


BYTE_TEXTS = [
    "I'LL say it's, we've, they'd, you're and don't: 'quoted' ''",
    "Numbers 1234567 and 3.14159, ٣٤٥ (Arabic-Indic) and ²½",
    "Composed é and decomposed e\u0301, Å and A\u030a, ﬁ ligature, full-width ＡＢＣ",
    "tabs\tand\r\nCRLF, non-breaking\u00a0space, ideographic\u3000space, trailing   ",
    "HelloWorld CamelCase, commas,semicolons;periods.End",
    "<|begin_of_text|>system<|eot_id|>text<|endoftext|><|im_start|>user\nhi<|im_end|>",
]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def record(fast: tokenizers.Tokenizer, texts: list[str], sp) -> dict:
    out = []
    for t in texts:
        ids = fast.encode(t, add_special_tokens=False).ids
        out.append({"text": t, "ids": ids, "decoded": fast.decode(ids, skip_special_tokens=True),
                    "sentencepiece_ids": sp.encode(t) if sp else None})
    vocab = fast.get_vocab(with_added_tokens=True)
    if "<0x41>" in vocab:
        byte_ids = [vocab[f"<0x{b:02X}>"] for b in (0xE6, 0xBC, 0xA2, 0x41)]  # 漢 = E6 BC A2
    else:  # byte-level: each byte is the character GPT-2's map gives it
        byte_ids = [vocab[byte_char(b)] for b in (0xE6, 0xBC, 0xA2, 0x41)]
    decodes = []
    for ids in (byte_ids[:2], byte_ids[:3], [byte_ids[0], byte_ids[3], byte_ids[1]],
                [out[1]["ids"][0], byte_ids[1], out[1]["ids"][-1]]):
        decodes.append({"ids": ids, "decoded": fast.decode(ids, skip_special_tokens=True)})
    return {"vocab_size": max(vocab.values()) + 1, "texts": out, "decodes": decodes}


def byte_char(b: int) -> str:
    """GPT-2's byte → character map (tokenizers' bytes_char)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def byte_level_cases(files: list[str], out_dir: str) -> dict[str, tokenizers.Tokenizer]:
    """One byte-level BPE trained by tokenizers, dressed as GPT-2's, Llama 3's, Qwen2's and a mix of the rest."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers
    base = tokenizers.Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    base.decoder = decoders.ByteLevel()
    base.train(files, trainers.BpeTrainer(vocab_size=700, show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    cases = {
        "gpt2": (None, pre_tokenizers.ByteLevel(add_prefix_space=False), False, ["<|endoftext|>"]),
        "llama3": (None, pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(LLAMA3_PATTERN), "isolated"), no_regex]), True,
            ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]),
        "qwen2": (normalizers.NFC(), pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_PATTERN), "isolated"), no_regex]), False,
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
        "bytelevel_misc": (normalizers.Sequence([
            normalizers.NFKC(), normalizers.Replace(tokenizers.Regex(r" {2,}"), " ")]), pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Split(tokenizers.Regex(r"[,.;]"), "merged_with_previous"),
            pre_tokenizers.Split(tokenizers.Regex(r"[a-z]+"), "merged_with_next", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)]), False, ["<|endoftext|>"]),
    }
    out = {}
    for name, (norm, pre, ignore_merges, special) in cases.items():
        spec = json.loads(base.to_str())
        spec["model"]["ignore_merges"] = ignore_merges
        fast = tokenizers.Tokenizer.from_str(json.dumps(spec))
        fast.normalizer = norm
        fast.pre_tokenizer = pre
        fast.add_special_tokens(special)
        if name == "bytelevel_misc":
            fast.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace(tokenizers.Regex(r"[0-9]+"), "#")])
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        fast.save(os.path.join(out_dir, name, "tokenizer.json"))
        out[name] = fast
    return out


def train_model(prefix: str, files: list[str], llama: bool) -> None:
    common = dict(model_type="bpe", vocab_size=1000, byte_fallback=True, character_coverage=1.0,
                  normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
                  num_threads=1, minloglevel=2, input=",".join(files))
    if llama:
        spm.SentencePieceTrainer.train(model_prefix=prefix, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                       add_dummy_prefix=True, **common)
    else:
        spm.SentencePieceTrainer.train(model_prefix=prefix, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                                       pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
                                       user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
                                       add_dummy_prefix=False, allow_whitespace_only_pieces=True, **common)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    out: dict = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for case, cls, llama in (("gemma", GemmaTokenizer, False), ("llama", LlamaTokenizer, True)):
            d = os.path.join(args.out, case)
            os.makedirs(d, exist_ok=True)
            prefix = os.path.join(tmp, case)
            train_model(prefix, files, llama)
            src = os.path.join(tmp, case + "_src")
            os.makedirs(src)
            shutil.copy(prefix + ".model", os.path.join(src, "tokenizer.model"))
            kw = {"legacy": False} if llama else {}
            hf = cls.from_pretrained(src, **kw)
            hf.save_pretrained(d)
            shutil.copy(prefix + ".model", os.path.join(d, "tokenizer.model"))
            fast = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
            cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
            vocab = fast.get_vocab(with_added_tokens=True)
            out["cases"][case] = record(fast, TEXTS, sp)
            out["cases"][case]["special"] = {k: vocab.get(cfg.get(k + "_token")) if cfg.get(k + "_token") else -1
                                             for k in ("bos", "eos", "pad", "unk")}
        fast = tokenizers.Tokenizer.from_file(os.path.join(args.out, "gemma", "tokenizer.json"))
        fast.add_tokens([tokenizers.AddedToken("zqx", single_word=True, normalized=False),
                         tokenizers.AddedToken("Muon optimizer", normalized=True)])
        fast.add_special_tokens([tokenizers.AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False)])
        os.makedirs(os.path.join(args.out, "gemma_added"), exist_ok=True)
        fast.save(os.path.join(args.out, "gemma_added", "tokenizer.json"))
        out["cases"]["gemma_added"] = record(fast, TEXTS + ADDED_TEXTS, None)
        out["cases"]["gemma_added"]["special"] = out["cases"]["gemma"]["special"]
        for name, fast in byte_level_cases(files, args.out).items():
            out["cases"][name] = record(fast, TEXTS + BYTE_TEXTS, None)
            vocab = fast.get_vocab(with_added_tokens=True)
            out["cases"][name]["special"] = {
                "bos": vocab.get("<|begin_of_text|>", -1),
                "eos": vocab.get("<|end_of_text|>", vocab.get("<|endoftext|>", -1)), "pad": -1, "unk": -1}
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
