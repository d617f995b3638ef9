#!/usr/bin/env python3
"""`zaya serve` driven by the official `openai` Python client (pip install openai).

Usage:
    python3 tools/check_openai_client.py build/zaya MODEL_DIR

Starts `zaya serve MODEL_DIR --port 0 --api-key ...`, then with openai.OpenAI(base_url=.../v1): lists models, runs
a completion and a chat completion (plain and streamed; streamed text must equal the plain text for greedy
decoding), log-probabilities (completions' logprobs with echo, as evaluation harnesses score prompts; chat's
logprobs/top_logprobs; streamed = plain), n choices and several prompts in one request, four concurrent requests
from threads, JSON mode and structured outputs (the client's parse() with a pydantic model), tool calls (strict
function tools from pydantic models, tool_choice auto / required / named / none, streamed, a tool's result sent back),
the Responses API (create, the stream helper, parse with text_format, function tools, a call's output sent back,
previous_response_id, retrieve, delete),
and checks that a bad
request (and a schema keyword zaya cannot enforce) raises openai.BadRequestError and a wrong key
openai.AuthenticationError. Prints one line per check; exits non-zero on the first failure.
"""

from __future__ import annotations

import datetime
import enum
import json
import os
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal, Union

import openai
import pydantic


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    zaya, model_dir = sys.argv[1], sys.argv[2]
    key = "check-key"
    proc = subprocess.Popen([zaya, "serve", model_dir, "--port", "0", "--api-key", key],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        deadline = time.time() + 120
        while port is None and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("zaya serve exited before listening")
            m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key)

        def ok(name: str, cond: bool, detail: str = "") -> None:
            print(("ok      " if cond else "FAILED  ") + name + (f" ({detail})" if detail else ""))
            if not cond:
                raise SystemExit(1)

        models = client.models.list()
        ok("models.list", len(models.data) == 1, models.data[0].id)
        name = models.data[0].id

        c = client.completions.create(model=name, prompt="The quick brown fox", max_tokens=16, temperature=0)
        ok("completions.create", c.choices[0].finish_reason in ("stop", "length") and c.usage.completion_tokens > 0,
           repr(c.choices[0].text[:40]))
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model=name, prompt="The quick brown fox", max_tokens=16, temperature=0, stream=True) if ch.choices)
        ok("completions stream = plain text", streamed == c.choices[0].text)

        messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is Python?"}]
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=16, temperature=0)
        ok("chat.completions.create", r.choices[0].message.role == "assistant", repr(r.choices[0].message.content[:40]))
        streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model=name, messages=messages, max_tokens=16, temperature=0, stream=True) if ch.choices)
        ok("chat stream = plain text", streamed == r.choices[0].message.content)

        # Log-probabilities, read through the client's typed objects.
        lp = client.completions.create(model=name, prompt="The quick brown fox", max_tokens=4, temperature=0,
                                       logprobs=2, echo=True).choices[0]
        ok("completions logprobs + echo: the prompt's tokens too, the first without a log-probability",
           lp.text.startswith("The quick brown fox") and lp.logprobs.token_logprobs[0] is None and
           len(lp.logprobs.tokens) == len(lp.logprobs.token_logprobs) == len(lp.logprobs.text_offset) > 4 and
           all(x <= 0 for x in lp.logprobs.token_logprobs[1:]) and len(lp.logprobs.top_logprobs[-1]) >= 2,
           f"{len(lp.logprobs.tokens)} tokens")
        scored = client.completions.create(model=name, prompt="The quick brown fox", max_tokens=0, logprobs=0,
                                           echo=True).choices[0]
        ok("max_tokens=0 scores the prompt alone", scored.logprobs.token_logprobs ==
           lp.logprobs.token_logprobs[:len(scored.logprobs.token_logprobs)] and scored.text == "The quick brown fox")
        streamed = [t for ch in client.completions.create(model=name, prompt="The quick brown fox", max_tokens=4,
                                                          temperature=0, logprobs=2, echo=True, stream=True)
                    if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.token_logprobs]
        ok("streamed logprobs = plain", streamed == lp.logprobs.token_logprobs)
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=6, temperature=0, logprobs=True,
                                           top_logprobs=3)
        content = r.choices[0].logprobs.content
        ok("chat logprobs: one entry per token, 3 alternatives each, the greedy token the first",
           len(content) > 0 and all(len(e.top_logprobs) == 3 and e.token == e.top_logprobs[0].token for e in content))
        many = client.completions.create(model=name, prompt=["The quick", "Python is"], max_tokens=5,
                                         temperature=0.8, seed=3, n=2)
        alone = client.completions.create(model=name, prompt="Python is", max_tokens=5, temperature=0.8, seed=3)
        ok("2 prompts × n 2: 4 choices in order, the first of each = the prompt alone",
           [c.index for c in many.choices] == [0, 1, 2, 3] and many.choices[2].text == alone.choices[0].text)

        def one(seed: int) -> str:
            return client.completions.create(model=name, prompt=[seed, 7, 8], max_tokens=12, temperature=1.0,
                                             seed=seed).choices[0].text
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(one, range(1, 5)))
        ok("4 concurrent requests = alone", together == [one(s) for s in range(1, 5)])

        # JSON mode, and structured outputs through the client's own schema path (a pydantic model → a strict
        # json_schema → parsed back). The grammar bounds what a value can take (forced keys, an enum, a boolean,
        # whitespace runs of at most 32 bytes), so 400 tokens always reach the end.
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=400, temperature=0,
                                           response_format={"type": "json_object"})
        content = r.choices[0].message.content
        ok("json_object: a JSON object, or a prefix of one cut by max_tokens",
           (r.choices[0].finish_reason == "stop" and isinstance(json.loads(content), dict)) or
           (r.choices[0].finish_reason == "length" and content.lstrip().startswith("{")), repr(content[:200]))

        class Answer(pydantic.BaseModel):
            answer: Literal["yes", "no"]
            sure: bool

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=400, temperature=0,
                                               response_format=Answer)
        ok("json_schema from a pydantic model: parsed back into it",
           isinstance(parsed.choices[0].message.parsed, Answer), repr(parsed.choices[0].message.content))

        class Rating(pydantic.BaseModel):  # bounds: pydantic validates them again as it parses
            stars: int = pydantic.Field(ge=1, le=5)
            word: str = pydantic.Field(min_length=1, max_length=8)

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=400, temperature=0,
                                               response_format=Rating)
        ok("json_schema with ge/le and min/max_length (minimum, maximum, minLength, maxLength): parsed back",
           isinstance(parsed.choices[0].message.parsed, Rating), repr(parsed.choices[0].message.content))

        class Order(pydantic.BaseModel):  # multipleOf: pydantic validates it again as it parses
            boxes: int = pydantic.Field(multiple_of=6, ge=0, le=120)
            price: float = pydantic.Field(multiple_of=0.25, gt=0)

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=400, temperature=0,
                                               response_format=Order)
        ok("json_schema with multiple_of (multipleOf) and bounds: parsed back",
           isinstance(parsed.choices[0].message.parsed, Order), repr(parsed.choices[0].message.content))

        class Color(str, enum.Enum):
            red = "red"
            green = "green"

        class Tally(pydantic.BaseModel):  # keys by rule: propertyNames (enum, $ref to one), patternProperties
            votes: dict[Literal["x", "y"], int]
            seen: dict[Color, bool]
            codes: dict[Annotated[str, pydantic.Field(pattern=r"^[a-z]{2}$")], int]

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=600, temperature=0,
                                               response_format=Tally)
        ok("json_schema with dict[Literal, int], dict[Enum, bool], dict[constr(pattern), int]: parsed back",
           isinstance(parsed.choices[0].message.parsed, Tally), repr(parsed.choices[0].message.content))

        class Event(pydantic.BaseModel):  # formats and a pattern, which pydantic parses back into their types
            day: datetime.date
            at: datetime.datetime
            id: uuid.UUID
            code: str = pydantic.Field(pattern=r"^[A-Z]{3}-\d{2}$")

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=400, temperature=0,
                                               response_format=Event)
        ok("json_schema with date, date-time, uuid and a pattern: parsed back into date, datetime, UUID",
           isinstance(parsed.choices[0].message.parsed, Event), repr(parsed.choices[0].message.content))

        class Cat(pydantic.BaseModel):
            kind: Literal["cat"]
            lives: int = pydantic.Field(ge=0, le=9)

        class Dog(pydantic.BaseModel):
            kind: Literal["dog"]
            good: bool

        class Pets(pydantic.BaseModel):  # unions whose alternatives begin alike: anyOf read side by side, oneOf
            pet: Union[Cat, Dog]
            tagged: Annotated[Union[Cat, Dog], pydantic.Field(discriminator="kind")]
            n: Union[int, float]
            pair: tuple[int, Annotated[str, pydantic.Field(max_length=4)]]  # prefixItems
            when: Union[datetime.date, Annotated[str, pydantic.Field(max_length=8)]]  # (a small model's strings
            # of spaces never end)

        parsed = client.chat.completions.parse(model=name, messages=messages, max_tokens=1500, temperature=0,
                                               response_format=Pets)  # (nested objects: more whitespace runs)
        ok("json_schema with Union[Cat, Dog], a discriminated union (oneOf), int | float, a tuple, date | str: "
           "parsed back",
           isinstance(parsed.choices[0].message.parsed, Pets), repr(parsed.choices[0].message.content))
        # Tool calling (infer/tool_calls.h): strict function tools from pydantic models, the calls parsed back by
        # the client; one call per answer (parallel_tool_calls=False) so that a small model's answer ends.
        class GetWeather(pydantic.BaseModel):
            city: str = pydantic.Field(max_length=12)
            unit: Literal["c", "f"]

        class GetTime(pydantic.BaseModel):
            zone: str = pydantic.Field(pattern=r"^[A-Z]{3}$")

        tools = [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(GetTime)]
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        parsed = client.chat.completions.parse(model=name, messages=ask, max_tokens=300, temperature=0, tools=tools,
                                               tool_choice="required", parallel_tool_calls=False)
        call = (parsed.choices[0].message.tool_calls or [None])[0]
        ok("tools (pydantic_function_tool), tool_choice='required': one call, its arguments parsed back",
           parsed.choices[0].finish_reason == "tool_calls" and call is not None and
           isinstance(call.function.parsed_arguments, (GetWeather, GetTime)) and call.id.startswith("call_"),
           repr(call.function if call else parsed.choices[0].message))
        # tool_choice 'auto' (the default): words, or calls once the answer begins with {"tool_calls":.
        r = client.chat.completions.create(model=name, messages=ask, max_tokens=60, temperature=0, tools=tools)
        m = r.choices[0].message
        ok("tool_choice='auto': words, or calls whose arguments parse",
           (not m.tool_calls and isinstance(m.content, str) and r.choices[0].finish_reason in ("stop", "length")) or
           (m.content is None and all(json.loads(c.function.arguments) is not None for c in m.tool_calls)),
           repr(m.content[:60]) if m.content else repr(m.tool_calls))
        r = client.chat.completions.create(model=name, messages=ask, max_tokens=300, temperature=0, tools=tools,
                                           tool_choice={"type": "function", "function": {"name": "GetTime"}},
                                           parallel_tool_calls=False)
        named = r.choices[0].message.tool_calls
        ok("tool_choice naming a function: a call of that function",
           named is not None and len(named) == 1 and named[0].function.name == "GetTime" and
           GetTime.model_validate_json(named[0].function.arguments) is not None, repr(r.choices[0].message))
        calls: dict[int, dict] = {}
        finish = None
        for chunk in client.chat.completions.create(model=name, messages=ask, max_tokens=300, temperature=0,
                                                    tools=tools, tool_choice="required", parallel_tool_calls=False,
                                                    stream=True):
            finish = chunk.choices[0].finish_reason or finish
            for d in chunk.choices[0].delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                c["id"] += d.id or ""
                c["name"] += d.function.name or "" if d.function else ""
                c["arguments"] += d.function.arguments or "" if d.function else ""
        ok("tool calls streamed = plain", finish == "tool_calls" and len(calls) == 1 and
           (calls[0]["name"], json.loads(calls[0]["arguments"])) ==
           (call.function.name, json.loads(call.function.arguments)), repr(calls))
        follow = ask + [parsed.choices[0].message.model_dump(exclude_none=True, include={"role", "content",
                                                                                          "tool_calls"}),
                        {"role": "tool", "tool_call_id": call.id, "content": "18 C, clear"}]
        for tc in follow[1]["tool_calls"]:  # the client's parsed_arguments is not part of OpenAI's message
            tc["function"].pop("parsed_arguments", None)
        r = client.chat.completions.create(model=name, messages=follow, max_tokens=20, temperature=0, tools=tools,
                                           tool_choice="none")
        ok("the tool's result sent back (role 'tool'), answered in words with tool_choice='none'",
           r.choices[0].finish_reason in ("stop", "length") and isinstance(r.choices[0].message.content, str) and
           not r.choices[0].message.tool_calls, repr(r.choices[0].message.content[:60]))
        # The Responses API (infer/responses_api.h): the chat it means, a typed stream gathered by the client's own
        # helper, text_format parsed back, function tools in Responses' form, a call's output sent back.
        chat = client.chat.completions.create(model=name, messages=messages, max_tokens=20, temperature=0)
        resp = client.responses.create(model=name, instructions="Answer briefly.", input="What is Python?",
                                       max_output_tokens=20, temperature=0)
        ok("responses.create: output_text = the chat's words",
           resp.output_text == chat.choices[0].message.content and resp.status in ("completed", "incomplete") and
           resp.usage.input_tokens == chat.usage.prompt_tokens, repr(resp.output_text[:60]))
        with client.responses.stream(model=name, instructions="Answer briefly.", input="What is Python?",
                                     max_output_tokens=20, temperature=0) as stream:
            events = list(stream)  # (get_final_response() wants response.completed; a cut answer ends incomplete)
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        final = events[-1].response
        ok("responses.stream: the deltas and the final response = the plain one",
           deltas == resp.output_text and final.output_text == resp.output_text and final.status == resp.status and
           events[-1].type == f"response.{resp.status}", repr(deltas[:60]))
        nxt = client.responses.create(model=name, previous_response_id=resp.id, input="And its creator?",
                                      max_output_tokens=20, temperature=0)
        whole = client.responses.create(model=name, input=[  # (instructions are not carried over: none here)
            {"role": "user", "content": "What is Python?"}, {"role": "assistant", "content": resp.output_text},
            {"role": "user", "content": "And its creator?"}], max_output_tokens=20, temperature=0)
        ok("previous_response_id: the stored conversation continued = the conversation sent whole",
           nxt.previous_response_id == resp.id and nxt.output_text == whole.output_text and
           nxt.usage.input_tokens == whole.usage.input_tokens, repr(nxt.output_text[:60]))
        lp_chat = client.chat.completions.create(model=name, messages=messages, max_tokens=20, temperature=0,
                                                 logprobs=True, top_logprobs=2)
        lp = client.responses.create(model=name, instructions="Answer briefly.", input="What is Python?",
                                     max_output_tokens=20, temperature=0, include=["message.output_text.logprobs"],
                                     top_logprobs=2)
        part = lp.output[0].content[0]
        ok("responses include logprobs + top_logprobs: the chat's tokens and log-probabilities, 2 alternatives each",
           [(e.token, e.logprob) for e in part.logprobs] ==
           [(e.token, e.logprob) for e in lp_chat.choices[0].logprobs.content] and
           all(len(e.top_logprobs) == 2 for e in part.logprobs), f"{len(part.logprobs)} tokens")
        long_input = [{"role": "user" if k % 2 == 0 else "assistant", "content": "What is Python? " * 60}
                      for k in range(41)]
        try:
            client.responses.create(model=name, input=long_input, max_output_tokens=5)
            ok("a conversation past the context raises BadRequestError (truncation disabled)", False)
        except openai.BadRequestError:
            ok("a conversation past the context raises BadRequestError (truncation disabled)", True)
        cut = client.responses.create(model=name, input=long_input, max_output_tokens=5, truncation="auto")
        ok("truncation='auto': answered from its latest turns", cut.truncation == "auto" and
           cut.output[0].type == "message", f"{cut.usage.input_tokens} input tokens")
        got = client.responses.retrieve(resp.id)
        ok("responses.retrieve: the stored Response", got.id == resp.id and got.output_text == resp.output_text)
        items = list(client.responses.input_items.list(resp.id, order="asc"))
        ok("responses.input_items.list: its input as a user message item", len(items) == 1 and
           items[0].type == "message" and items[0].role == "user" and items[0].content[0].text == "What is Python?",
           repr(items))
        client.responses.delete(resp.id)
        try:
            client.responses.retrieve(resp.id)
            ok("responses.delete, then retrieve raises NotFoundError", False)
        except openai.NotFoundError:
            ok("responses.delete, then retrieve raises NotFoundError", True)
        parsed_resp = client.responses.parse(model=name, input=messages, text_format=Answer, max_output_tokens=400,
                                             temperature=0)
        ok("responses.parse(text_format=pydantic model): output_parsed",
           isinstance(parsed_resp.output_parsed, Answer), repr(parsed_resp.output_text))
        rtools = [{"type": "function", "name": "GetWeather", "parameters": GetWeather.model_json_schema(),
                   "strict": False}]
        resp = client.responses.create(model=name, input="What is the weather in Paris?", tools=rtools,
                                       tool_choice="required", parallel_tool_calls=False, max_output_tokens=300,
                                       temperature=0)
        fc = resp.output[0]
        ok("responses with a function tool, tool_choice='required': a function_call item, arguments of its schema",
           fc.type == "function_call" and fc.name == "GetWeather" and
           GetWeather.model_validate_json(fc.arguments) is not None, repr(resp.output))
        resp = client.responses.create(model=name, input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
            {"type": "function_call_output", "call_id": fc.call_id, "output": "18 C, clear"}],
            tools=rtools, tool_choice="none", max_output_tokens=20, temperature=0)
        ok("responses: the call and its output sent back, answered in words", isinstance(resp.output_text, str) and
           resp.output[0].type == "message", repr(resp.output_text[:60]))
        try:
            client.chat.completions.create(model=name, messages=messages, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": {"n": {"not": {"type": "integer"}}}}}})
            ok("a schema keyword it cannot enforce raises BadRequestError", False)
        except openai.BadRequestError as e:
            ok("a schema keyword it cannot enforce raises BadRequestError", "'not'" in str(e))
        try:
            client.completions.create(model=name, prompt="x", top_p=5)
            ok("top_p=5 raises BadRequestError", False)
        except openai.BadRequestError as e:
            ok("top_p=5 raises BadRequestError", "top_p" in str(e))
        try:
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong").models.list()
            ok("a wrong key raises AuthenticationError", False)
        except openai.AuthenticationError:
            ok("a wrong key raises AuthenticationError", True)
        print(f"all checks passed (openai {openai.__version__})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
