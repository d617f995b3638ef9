#!/usr/bin/env python3
"""Many mixed requests at a running `zaya serve`, up to 24 in flight, a third of the streams left after their first
bytes (the client closing its connection): chat (n up to 3, log-probabilities), streams, completions of several
prompts with echo, structured outputs, tools (auto and required, streamed or not) and the Responses API. Prints a
JSON summary: how many were answered, how many left, and every request that did not get a 200 (none should).
Usage: serve_stress.py URL API_KEY TOOLS_JSON COUNT"""
import json
import random
import socket
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

url, key, tools_file, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
host, port = urllib.parse.urlparse(url).hostname, urllib.parse.urlparse(url).port
tools = json.load(open(tools_file))
schema = {"type": "object", "required": ["a", "b"],
          "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}}}
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}


def request(i):
    r = random.Random(i)
    kind = r.choice(["chat", "stream", "stream_left", "completions", "schema", "tools", "responses",
                     "responses_left"])
    b = {"max_tokens": r.randint(1, 60), "seed": i, "temperature": r.choice([0, 0.7, 1.0]),
         "messages": [{"role": "user", "content": "hello " * r.randint(1, 80)}]}
    path = "/v1/chat/completions"
    if kind in ("chat", "stream", "stream_left"):
        b["logprobs"] = r.random() < 0.5
        if b["logprobs"]:
            b["top_logprobs"] = r.randint(0, 5)
        if kind == "chat":
            b["n"] = r.randint(1, 3)
        else:
            b["stream"] = True
    elif kind == "completions":
        path = "/v1/completions"
        del b["messages"]
        b.update(prompt=["The os module " * r.randint(1, 30), "x"], echo=r.random() < 0.5, logprobs=2)
    elif kind == "schema":
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    elif kind == "tools":
        b.update(tools=tools, tool_choice=r.choice(["auto", "required"]), stream=r.random() < 0.5)
    else:
        path = "/v1/responses"
        b = {"input": "hi " * r.randint(1, 50), "max_output_tokens": r.randint(16, 60), "store": r.random() < 0.5,
             "stream": kind == "responses_left"}
    return kind, path, b


answered, left, failed = 0, 0, []
lock = threading.Lock()


def send(i):
    global answered, left
    kind, path, b = request(i)
    data = json.dumps(b).encode()
    try:
        if kind.endswith("_left"):
            s = socket.create_connection((host, port), timeout=60)
            head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(data)}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            s.sendall(head.encode() + data)
            s.recv(64)
            s.close()
            with lock:
                left += 1
            return
        with urllib.request.urlopen(urllib.request.Request(url + path, data, headers), timeout=120) as resp:
            resp.read()
        with lock:
            answered += 1
    except urllib.error.HTTPError as e:
        with lock:
            failed.append({"request": i, "kind": kind, "status": e.code,
                           "body": e.read()[:300].decode("utf-8", "replace")})
    except Exception as e:  # noqa: BLE001 - any failure is reported
        with lock:
            failed.append({"request": i, "kind": kind, "error": repr(e)[:300]})


running = []
for i in range(count):
    t = threading.Thread(target=send, args=(i,))
    t.start()
    running.append(t)
    if len(running) >= 24:
        running.pop(0).join()
for t in running:
    t.join()
print(json.dumps({"answered": answered, "left": left, "failed": failed}))
