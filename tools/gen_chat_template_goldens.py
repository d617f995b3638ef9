#!/usr/bin/env python3
"""Golden chat-template renderings from Hugging Face ``transformers`` for zaya's Jinja interpreter (src/data/jinja.h).

Usage:
    pip install -r tools/requirements.txt   (transformers, jinja2 >= 3.1.6, tokenizers; torch is not needed)
    python3 tools/gen_chat_template_goldens.py --out tests/golden/chat_templates

The templates in ``tests/golden/chat_templates/templates/*.jinja`` are our own text, one per family style (ChatML
with tools, ChatML with <think>, Llama 3.1, Mistral, Gemma 3, DeepSeek-R1, a SmolLM3 / Phi-4-like layout with
{% generation %} blocks); no model's template is copied. Each is rendered for several conversations through
transformers' own ``render_jinja_template``, so the environment (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, loopcontrols, the AssistantTracker extension, its tojson / raise_exception / strftime_now /
namespace / dict globals) is exactly the one ``apply_chat_template`` uses.

``cases.json`` holds, for each case:
  * ``template``: the name of ``templates/<name>.jinja``;
  * ``context``: every variable the template saw, in the order it saw them (messages, tools, documents,
    add_generation_prompt, then the keyword arguments such as bos_token / eos_token / enable_thinking). The
    context is captured from inside transformers' call, after its preprocessing, so a renderer given this object
    alone must produce ``expected``. Key order matters (``|items``, ``|tojson``), so read it as ordered JSON;
  * ``expected``: the text, or ``error`` (the exception's message) and ``error_type`` when rendering raises;
  * ``generation`` (templates with {% generation %} only): the [begin, end) offsets of each generation block's
    text in ``expected``, in UTF-8 bytes (transformers reports Python character offsets; they are converted).

The preprocessing ``apply_chat_template`` applies before the template sees a message, which the C++ side must
reproduce, and which this script reproduces itself and asserts equal to what transformers passed:
  1. ``_normalize_chat_messages`` (apply_chat_template only): keys whose value is None are dropped from each message
     (top level only), so ``"tool_calls": None`` becomes an absent key (undefined), not none;
  2. ``_plain_template_data``: a copy made of plain JSON types (no visible change for JSON input);
  3. ``_alias_reasoning_fields``: a message with a non-None ``reasoning_content``, ``thinking`` or ``reasoning``
     (first found in that order) gets ``thinking`` (inserted FIRST unless already present) and
     ``reasoning_content`` (appended LAST unless already present) set to that value;
  4. the special tokens (``tokenizer.special_tokens_map``: bos_token, eos_token, unk_token, pad_token, ... those set)
     are passed as variables, overridden by the caller's keyword arguments; ``documents`` is always passed (None
     when not given) and ``tools`` is None when not given.

``token_cases`` applies the ChatML-with-tools template with the toy Qwen2-style tokenizer in
``tests/golden/tokenizer/qwen2/tokenizer.json`` (it has <|endoftext|>, <|im_start|>, <|im_end|> as special added
tokens) through ``PreTrainedTokenizerFast.apply_chat_template(tokenize=True)`` and records the ids.

With ``--templates DIR --out-json FILE`` the script renders every DIR/*.jinja (e.g. real templates collected for a
coverage measurement, which must not be committed) with the generic contexts, in the same format. Everything is
deterministic: the committed templates always get date_string, and strftime_now is pinned to ``strftime_now_at``
(naive local time, recorded in the file) for templates that call it.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import glob
import json
import os
import re
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu
from transformers import PreTrainedTokenizerFast

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------------------------------
# Capture of the exact variables the compiled template is called with.

_CAPTURED: list[dict] = []
_real_compile = ctu._compile_jinja_template


class _CapturingTemplate:
    """Wraps transformers' compiled template and records the keyword arguments of render()/generate()."""

    def __init__(self, template):
        self._template = template
        self.environment = template.environment

    def render(self, *args, **kwargs):
        _CAPTURED.append(copy.deepcopy(kwargs))
        return self._template.render(*args, **kwargs)

    def generate(self, *args, **kwargs):
        _CAPTURED.append(copy.deepcopy(kwargs))
        return self._template.generate(*args, **kwargs)


def _capturing_compile(chat_template):
    return _CapturingTemplate(_real_compile(chat_template))


ctu._compile_jinja_template = _capturing_compile

# strftime_now formats datetime.now() (naive local time); a fixed instant keeps the output deterministic. The
# committed templates never reach it (they get date_string), but real ones (Granite, SmolLM3, gpt-oss) do.
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = _FixedDatetime


def _ordered_equal(a, b) -> bool:
    """Equal including the order of dict keys."""
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


def expected_template_messages(messages: list[dict]) -> list[dict]:
    """Our own reproduction of transformers' message preprocessing (see the module docstring)."""
    out = []
    for message in messages:
        message = {k: copy.deepcopy(v) for k, v in message.items() if v is not None}
        reasoning = next(
            (message[k] for k in ("reasoning_content", "thinking", "reasoning") if message.get(k) is not None), None
        )
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def byte_offsets(text: str, spans) -> list[list[int]]:
    return [[len(text[:b].encode("utf-8")), len(text[:e].encode("utf-8"))] for b, e in spans]


def render_case(template_text: str, messages, tools, add_generation_prompt: bool, kwargs: dict, generation: bool):
    """Renders like apply_chat_template(tokenize=False) does; returns the case's context/expected/generation."""
    _CAPTURED.clear()
    conv = ctu._normalize_chat_messages(copy.deepcopy(messages))
    result: dict = {}
    try:
        rendered, indices = ctu.render_jinja_template(
            conversations=[conv],
            tools=copy.deepcopy(tools),
            chat_template=template_text,
            add_generation_prompt=add_generation_prompt,
            return_assistant_tokens_mask=generation,
            **copy.deepcopy(kwargs),
        )
        error = None
    except (jinja2.exceptions.TemplateError, ValueError, TypeError) as e:
        error = e
    if len(_CAPTURED) != 1:
        raise RuntimeError(f"expected one template call, saw {len(_CAPTURED)}")
    context = _CAPTURED[0]
    want = {
        "messages": expected_template_messages(messages),
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        **kwargs,
    }
    if not _ordered_equal(context, want):
        raise AssertionError(f"transformers' preprocessing changed:\n{context}\n!=\n{want}")
    result["context"] = context
    if error is not None:
        result["error"] = str(error)
        result["error_type"] = type(error).__name__
        return result
    text = rendered[0]
    result["expected"] = text
    if generation:
        result["generation"] = byte_offsets(text, indices[0])
    return result


# ---------------------------------------------------------------------------------------------------------------
# Inputs

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Full-text search; returns the top hits.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
                "required": ["query"],
            },
        },
    },
]

SYS = {"role": "system", "content": "You are a terse assistant. Answer in one sentence."}


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS: dict[str, list[dict]] = {
    "single": [{"role": "user", "content": "Hello! Who are you?"}],
    "system_single": [SYS, {"role": "user", "content": "What is 2+2?"}],
    "multi": [
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "7 is prime."},
        {"role": "user", "content": "And an even one?"},
    ],
    "system_multi": [
        SYS,
        {"role": "user", "content": "  Spaces around me  \n"},
        {"role": "assistant", "content": "Trimmed, I hope.\n"},
        {"role": "user", "content": "Line one\nLine two"},
        {"role": "assistant", "content": "Two lines."},
    ],
    "unicode": [
        {"role": "user", "content": "Ça va? 日本語のテキスト 🙂🚀 naïve café"},
        {"role": "assistant", "content": "Très bien — ありがとう 👍"},
        {"role": "user", "content": "Ελληνικά ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢?"},
    ],
    "jinja_text": [
        {"role": "user", "content": "Print {{ x }} and {% if y %}z{% endif %} and {# c #} literally: '\"\\n"},
        {"role": "assistant", "content": "{{ x }} {%- raw %} stays as text"},
        {"role": "user", "content": "{{ messages }}"},
    ],
    "empty": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "?"},
    ],
    "tool_call_dict": [
        SYS,
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp_c": 18, "sky": "clear"}'},
        {"role": "assistant", "content": "It is 18 °C and clear in Paris."},
    ],
    "tool_call_str": [
        {"role": "user", "content": "Weather in Oslo and news about it?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                _call("c1", "get_weather", '{"city": "Oslo"}'),
                _call("c2", "search", '{"query": "Oslo news", "limit": 2}'),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "-3 C, snow"},
        {"role": "tool", "tool_call_id": "c2", "name": "search", "content": "1. Ski jump opens\n2. Fjord ferry late"},
        {"role": "assistant", "content": "Snowy, -3 °C; the ski jump opened."},
        {"role": "user", "content": "Thanks!"},
    ],
    # One tool call per assistant message, as Llama 3.1 templates require.
    "tool_call_single": [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "tool_calls": [_call("r1", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "r1", "content": "22 C"},
        {"role": "assistant", "content": "22 °C in Rome."},
    ],
    # Mistral-style tool call ids: exactly 9 alphanumerics.
    "tool_call_id9": [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "tool_calls": [_call("a1b2c3d4e", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "22 C"},
        {"role": "assistant", "content": "22 °C in Rome."},
        {"role": "user", "content": "Thanks"},
    ],
    "ipython": [
        {"role": "system", "content": "  Use tools when needed.  "},
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "tool_calls": [_call("r1", "get_weather", {"city": "Rome"})]},
        {"role": "ipython", "content": {"temp_c": 22, "sky": ["sun", "cloud"]}},
        {"role": "assistant", "content": "22 °C."},
    ],
    "think_in_content": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "<think>\n91 = 7 * 13.\n</think>\n\nNo, 91 = 7 × 13."},
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "content": "<think>\nNo divisor up to 9.\n</think>\n\nYes."},
    ],
    "think_fields": [
        SYS,
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "No.", "reasoning_content": "91 = 7 * 13."},
        {"role": "user", "content": "Is 97 prime?"},
        # The older field name: transformers copies it to reasoning_content (and thinking).
        {"role": "assistant", "content": "Yes.", "reasoning": "No divisor up to 9."},
    ],
    "think_tools": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "<think>\nI should call the tool.\n</think>\n\n",
            "tool_calls": [_call("c1", "get_weather", {"city": "Oslo"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "-3 C"},
        {"role": "assistant", "content": "It is -3 °C.", "reasoning_content": "The tool said -3."},
    ],
    "none_fields": [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Hello.", "tool_calls": None},
        {"role": "user", "content": "Bye"},
    ],
    "parts": [
        {"role": "system", "content": [{"type": "text", "text": "Describe images briefly."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Colour?"}, {"type": "text", "text": "And size?"}]},
    ],
    "two_systems": [
        SYS,
        {"role": "system", "content": "Always cite sources."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    # Errors.
    "bad_alternation": [
        {"role": "user", "content": "One"},
        {"role": "user", "content": "Two"},
    ],
    "assistant_first": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "Hi"},
    ],
    "no_user": [SYS, {"role": "assistant", "content": "Nobody asked."}],
    "tool_role": [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}],
    "odd_role": [{"role": "user", "content": "Hi"}, {"role": "umpire", "content": "Out!"}],
    "two_tool_calls": [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "tool_calls": [_call("a", "get_weather", {"city": "Oslo"}), _call("b", "get_weather", {"city": "Rome"})],
        },
    ],
    "system_only": [SYS],
    "assistant_no_content": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}],
}

DATE = {"date_string": "26 Jul 2024"}

# template name -> special tokens, whether it has {% generation %}, and its cases:
# (conversation, with tools, add_generation_prompt, extra keyword arguments).
TEMPLATES = {
    "chatml_tools": {
        "tokens": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        "cases": [
            ("single", False, True, {}),
            ("system_single", False, False, {}),
            ("multi", False, True, {}),
            ("single", True, True, {}),
            ("system_single", True, True, {}),
            ("tool_call_dict", True, False, {}),
            ("tool_call_str", True, True, {}),
            ("unicode", False, True, {}),
            ("jinja_text", False, False, {}),
            ("empty", False, True, {}),
            ("none_fields", False, True, {}),
            ("two_systems", False, False, {}),
            ("odd_role", False, False, {}),
            ("system_only", False, True, {}),
        ],
    },
    "chatml_think": {
        "tokens": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        "cases": [
            ("single", False, True, {}),
            ("single", False, True, {"enable_thinking": False}),
            ("single", False, True, {"enable_thinking": True}),
            ("think_in_content", False, False, {}),
            ("think_in_content", False, True, {"enable_thinking": False}),
            ("think_fields", False, True, {}),
            ("think_tools", False, False, {}),
            ("tool_call_str", False, True, {}),
            ("unicode", False, True, {}),
            ("jinja_text", False, True, {}),
            ("empty", False, False, {}),
            ("no_user", False, False, {}),
        ],
    },
    "llama3": {
        "tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "cases": [
            ("single", False, True, DATE),
            ("system_multi", False, False, DATE),
            ("single", True, True, DATE),
            ("tool_call_single", True, True, DATE),
            ("tool_call_single", True, False, {**DATE, "tools_in_user_message": False}),
            ("ipython", True, True, DATE),
            ("unicode", False, True, DATE),
            ("jinja_text", False, False, DATE),
            ("empty", False, True, {"date_string": ""}),
            ("system_only", True, False, DATE),
            ("two_tool_calls", True, False, DATE),
        ],
    },
    "mistral": {
        "tokens": {"bos_token": "<s>", "eos_token": "</s>"},
        "cases": [
            ("single", False, False, {}),
            ("system_single", False, False, {}),
            ("multi", False, False, {}),
            ("system_multi", False, False, {}),
            ("unicode", False, False, {}),
            ("jinja_text", False, False, {}),
            ("empty", False, False, {}),
            ("bad_alternation", False, False, {}),
            ("assistant_first", False, False, {}),
            ("tool_role", False, False, {}),
        ],
    },
    "gemma3": {
        "tokens": {"bos_token": "<bos>", "eos_token": "<eos>"},
        "cases": [
            ("single", False, True, {}),
            ("system_single", False, True, {}),
            ("system_multi", False, False, {}),
            ("parts", False, True, {}),
            ("unicode", False, True, {}),
            ("jinja_text", False, True, {}),
            ("empty", False, False, {}),
            ("bad_alternation", False, True, {}),
        ],
    },
    "deepseek_r1": {
        "tokens": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
        "cases": [
            ("single", False, True, {}),
            ("two_systems", False, True, {}),
            ("think_in_content", False, True, {}),
            ("tool_call_dict", True, False, {}),
            ("tool_call_str", True, True, {}),
            ("unicode", False, False, {}),
            ("jinja_text", False, True, {}),
            ("empty", False, True, {}),
            ("ipython", False, True, {}),
            # The content key is dropped (None), so '+' on an undefined raises.
            ("assistant_no_content", False, False, {}),
        ],
    },
    "smol_generation": {
        "tokens": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        "generation": True,
        "cases": [
            ("single", False, True, {}),
            ("system_multi", False, False, {}),
            ("two_systems", False, True, {"enable_thinking": False}),
            ("multi", True, True, {}),
            ("tool_call_str", True, False, {}),
            ("tool_call_dict", False, False, {"max_turns": 3}),
            ("parts", False, True, {}),
            ("unicode", False, False, {}),
            ("jinja_text", False, False, {}),
            ("empty", False, True, {}),
            ("odd_role", False, False, {}),
        ],
    },
}

# Generic contexts for --templates (real templates): the usual shapes, tools in OpenAI format.
GENERIC_CASES = [
    ("single", False, True, {}),
    ("system_single", False, True, {}),
    ("multi", False, False, {}),
    ("system_multi", False, True, {}),
    ("unicode", False, True, {}),
    ("jinja_text", False, True, {}),
    ("empty", False, False, {}),
    ("single", True, True, {}),
    ("tool_call_single", True, True, {}),
    ("tool_call_dict", True, False, {}),
    ("tool_call_str", True, True, {}),
    ("tool_call_id9", True, True, {}),
    ("think_in_content", False, True, {}),
    ("think_fields", False, True, {}),
    ("single", False, True, {"enable_thinking": False}),
    ("parts", False, True, {}),
    ("bad_alternation", False, True, {}),
]


def case_name(conv: str, tools: bool, agp: bool, kwargs: dict) -> str:
    name = conv + ("+tools" if tools else "") + ("+gen" if agp else "")
    for k, v in kwargs.items():
        if k != "date_string" or v != DATE["date_string"]:
            name += f"+{k}={json.dumps(v, ensure_ascii=False)}"
    return name


def render_template_cases(name: str, text: str, tokens: dict, cases, generation: bool) -> list[dict]:
    out = []
    for conv, with_tools, agp, kwargs in cases:
        result = render_case(
            text, CONVERSATIONS[conv], TOOLS if with_tools else None, agp, {**tokens, **kwargs}, generation
        )
        out.append({"name": f"{name}/{case_name(conv, with_tools, agp, kwargs)}", "template": name, **result})
    return out


TOKEN_CONVERSATIONS = [("single", False, True), ("tool_call_str", True, True), ("unicode", False, False)]


def token_cases(template_text: str) -> list[dict]:
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(REPO, "tests/golden/tokenizer/qwen2/tokenizer.json"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    out = []
    for conv, with_tools, agp in TOKEN_CONVERSATIONS:
        tools = TOOLS if with_tools else None
        _CAPTURED.clear()
        text = tokenizer.apply_chat_template(
            CONVERSATIONS[conv], tools=tools, chat_template=template_text, tokenize=False, add_generation_prompt=agp
        )
        context = _CAPTURED[0]
        ids = tokenizer.apply_chat_template(
            CONVERSATIONS[conv],
            tools=tools,
            chat_template=template_text,
            tokenize=True,
            return_dict=False,
            add_generation_prompt=agp,
        )
        ids = list(ids)
        assert ids == tokenizer.encode(text, add_special_tokens=False)
        out.append(
            {
                "name": f"tokens/chatml_tools/{case_name(conv, with_tools, agp, {})}",
                "template": "chatml_tools",
                "tokenizer": "tokenizer/qwen2/tokenizer.json",
                "context": context,
                "expected": text,
                "ids": ids,
            }
        )
    return out


def dump(obj, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests/golden/chat_templates"))
    ap.add_argument("--templates", help="render every DIR/*.jinja with the generic contexts instead")
    ap.add_argument("--tokens", help="with --templates: JSON {template name: {bos_token:..., eos_token:...}}")
    ap.add_argument("--out-json", help="with --templates: the file to write")
    args = ap.parse_args()

    meta = {
        "generator": "tools/gen_chat_template_goldens.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "strftime_now_at": NOW.isoformat(),
    }
    if args.templates:
        tokens = json.load(open(args.tokens, encoding="utf-8")) if args.tokens else {}
        cases = []
        for path in sorted(glob.glob(os.path.join(args.templates, "*.jinja"))):
            name = os.path.basename(path)[: -len(".jinja")]
            text = open(path, encoding="utf-8").read()
            has_generation = re.search(r"\{\%-?\s*generation\s*-?\%\}", text) is not None
            try:
                cases += render_template_cases(
                    name, text, tokens.get(name, {"bos_token": "<s>", "eos_token": "</s>"}), GENERIC_CASES,
                    has_generation
                )
            except jinja2.exceptions.TemplateSyntaxError as e:
                print(f"{name}: syntax error: {e}", file=sys.stderr)
        dump({**meta, "cases": cases}, args.out_json)
        print(f"{len(cases)} cases -> {args.out_json}")
        return

    cases = []
    for name, spec in TEMPLATES.items():
        text = open(os.path.join(args.out, "templates", name + ".jinja"), encoding="utf-8").read()
        cases += render_template_cases(name, text, spec["tokens"], spec["cases"], spec.get("generation", False))
    tools_text = open(os.path.join(args.out, "templates", "chatml_tools.jinja"), encoding="utf-8").read()
    out = {**meta, "cases": cases, "token_cases": token_cases(tools_text)}
    path = os.path.join(args.out, "cases.json")
    dump(out, path)
    errors = sum("error" in c for c in cases)
    print(f"{len(cases)} cases ({errors} errors), {len(out['token_cases'])} token cases -> {path}")


if __name__ == "__main__":
    main()
