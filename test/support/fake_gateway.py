#!/usr/bin/env python3
"""A FAKE of the paid model gateway, for tests only.

The model gateway is an external paid service (it forwards to OpenAI, Anthropic and others and
bills per token), so tests cannot call it; this is the one place the project allows a fake. It
speaks both native wires the way the real upstreams do, byte for byte where it matters:

  POST .../v1/chat/completions   OpenAI chat completions: JSON, or SSE "data:" chunks with
                                 choices[].delta.content / delta.tool_calls[] fragments,
                                 finish_reason, the usage chunk (stream_options.include_usage)
                                 and "data: [DONE]"; errors as {"error":{"message","type",...}}.
  POST .../v1/messages           Anthropic messages: JSON, or SSE events message_start,
                                 content_block_start/delta/stop (text_delta, input_json_delta),
                                 ping, message_delta, message_stop; errors as
                                 {"type":"error","error":{"type","message"}} and "event: error".
  GET  .../v1/models             the model list, OpenAI's shape, or Anthropic's when the request
                                 has anthropic-version (key checked, recorded, no turn used).

Streams go out with "transfer-encoding: chunked", one chunk per event, as the real APIs do.

Like the real services it refuses malformed requests with a 400 in the wire's error format
(Anthropic: the anthropic-version header, max_tokens, roles, tool_result blocks answering the
previous tool_use blocks, image blocks; OpenAI: tool messages answering each tool_call_id,
stream_options without stream, image_url parts), and with a required key set it answers 401
when the wire's key field (authorization: Bearer / x-api-key) is missing or wrong. Those
refusals do not use up a scripted turn.

Usage
  python3 fake_gateway.py [--script FILE] [--key KEY] [--unix PATH] [--exit-on-stdin-eof]
                         [--verbose]
Listens on 127.0.0.1, port 0, and prints the port as the first line of stdout (with --unix:
on that unix socket, like the api's model door, and prints the path). With
--exit-on-stdin-eof it exits when its stdin closes (so it dies with the test that started it).

Control endpoints (plain JSON):
  POST /_fake/script    body: a list of turns, or {"turns": [...], "key": "K" | null}.
                        Replaces the script and forgets the requests recorded so far.
  GET  /_fake/requests  {"requests": [...], "remaining": n}; each request:
                        {"index", "method", "path", "wire", "headers" (names lower case),
                         "body" (parsed JSON, or null), "raw_body" (when not JSON),
                         "body_bytes", "body_sha256": the body's length and SHA-256 (hex),
                         so a test can check the bytes sent, not just their JSON,
                         "turn" (the scripted turn it got, or null), "status" (answered),
                         "outcome": "answered" | "refused" | "cut" | "held",
                         "client_closed": true once the client closed a held stream,
                         "t_accept", "t_done": time.monotonic() when the connection was
                         accepted (for a later request on a kept-alive connection: when its
                         request line arrived) and when a stream's last event was sent
                         (else null), "conn": the connection's number (1, 2, ... in
                         accept order), "conn_closed": true once the fake closed it}
  GET  /_fake/health    {"ok": true}

A turn (every field optional) answers the next model request:
  "wire":          "openai" | "anthropic"   the wire this turn expects (else a 500 says so)
  "status":        HTTP status; not 200 -> an error body in the wire's format
  "error":         {"type": ..., "message": ...} for that error body
  "headers":       extra response headers, e.g. {"retry-after": "1"}
  "stream":        true/false; default: what the request asked for
  "text":          the assistant's text (streamed in "chunks" if given, else in pieces)
  "chunks":        the text as explicit stream pieces
  "tool_calls":    [{"id", "name", "arguments": object or JSON text}]
  "stop_reason":   the wire's own word; default end_turn/stop or tool_use/tool_calls
  "usage":         {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
  "model":         the model named in the answer; default: the request's
  "delay":         seconds to wait before answering
  "event_delay":   seconds to wait between stream events
  "stream_error":  {"type", "message", "after": n}: an error event after n events (200 stream)
  "cut_after":     n: close the connection after n events, without ending the body
  "hold_after":    n: after n events, send nothing more and wait (up to 30 s) until the
                   client closes; the request then shows "client_closed": true
  "close_after":   true: answer, then close the connection without announcing it (as a
                   server whose keep-alive idle time ran out)
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.turns = []
        self.next_turn = 0
        self.requests = []
        self.key = None


STATE = State()
VERBOSE = False
# When each connection was accepted (time.monotonic(), by id of the socket), for the
# "t_accept" of the request it carries: benchmarks subtract the fake's own time.
ACCEPTED = {}
ACCEPTED_LOCK = threading.Lock()


def note_accepted(conn):
    with ACCEPTED_LOCK:
        ACCEPTED[id(conn)] = time.monotonic()


# Connections numbered from 1 in accept order (a request's "conn"), by id of the socket.
CONN_OF = {}
CONN_COUNT = [0]


def dumps(obj):
    # Raw UTF-8, as the real services send it (not \uXXXX escapes).
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def log(*args):
    if VERBOSE:
        print("fake_gateway:", *args, file=sys.stderr, flush=True)


# ---- request validation, as strict as the real services on what the client must get right --

ANTHROPIC_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def validate_anthropic(headers, body):
    if "anthropic-version" not in headers:
        return "anthropic-version: header is required"
    if not isinstance(body, dict):
        return "body: expected a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list) or any(
            not isinstance(b, dict) or b.get("type") != "text" for b in system
        ):
            return "system: Input should be a valid string or a list of text blocks"
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or not tool.get("name"):
            return f"tools.{i}.name: Field required"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{i}.input_schema: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return "messages: first message must use the \"user\" role"
    pending = []  # tool_use ids the next user message must answer
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = m.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            return f"messages.{i}.content: Input should be a valid list"
        if not blocks:
            return f"messages.{i}: all messages must have non-empty content"
        answered = []
        uses = []
        for j, b in enumerate(blocks):
            t = b.get("type")
            where = f"messages.{i}.content.{j}"
            if t == "text":
                if not b.get("text") and "cache_control" not in b:
                    return f"{where}.text: text content blocks must be non-empty"
            elif t == "image":
                err = check_anthropic_image(b, where)
                if err:
                    return err
            elif t == "tool_use":
                if role != "assistant":
                    return f"{where}: tool_use blocks are only allowed in assistant messages"
                if not isinstance(b.get("input"), dict):
                    return f"{where}.input: Input should be a valid dictionary"
                uses.append(b.get("id"))
            elif t == "tool_result":
                if role != "user":
                    return f"{where}: tool_result blocks are only allowed in user messages"
                if b.get("tool_use_id") not in pending:
                    return (f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{b.get('tool_use_id')}. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message.")
                if any(x.get("type") != "tool_result" for x in blocks[:j]):
                    return f"{where}: tool_result blocks must come first in the message"
                answered.append(b.get("tool_use_id"))
                inner = b.get("content")
                if isinstance(inner, list):
                    for k, c in enumerate(inner):
                        if c.get("type") == "image":
                            err = check_anthropic_image(c, f"{where}.content.{k}")
                            if err:
                                return err
                        elif c.get("type") != "text":
                            return f"{where}.content.{k}: expected text or image"
            else:
                return f"{where}.type: unknown content block type {t!r}"
        if role == "user" and pending:
            missing = [u for u in pending if u not in answered]
            if missing:
                return ("messages.{}: `tool_use` ids were found without `tool_result` blocks "
                        "immediately after: {}".format(i - 1, ", ".join(missing)))
        pending = uses if role == "assistant" else []
    return None


def check_anthropic_image(b, where):
    src = b.get("source")
    if not isinstance(src, dict) or src.get("type") != "base64":
        return f"{where}.source: expected a base64 source"
    if src.get("media_type") not in ANTHROPIC_IMAGE_TYPES:
        return f"{where}.source.media_type: Input should be one of image/jpeg, image/png, ..."
    if not src.get("data"):
        return f"{where}.source.data: Field required"
    return None


def validate_openai(headers, body):
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if "stream_options" in body and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    pending = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', " \
                   "'user', 'tool' and 'developer'."
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                return ("Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.")
            pending.remove(m.get("tool_call_id"))
            if not isinstance(m.get("content"), (str, list)):
                return f"messages[{i}].content: expected a string"
            continue
        if pending:
            return ("An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    "have response messages: " + ", ".join(pending))
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                t = part.get("type")
                if t == "image_url":
                    if role != "user":
                        return f"messages[{i}].content[{j}]: image_url is only allowed for user"
                    url = (part.get("image_url") or {}).get("url", "")
                    if not (url.startswith("data:image/") or url.startswith("http")):
                        return f"Invalid image URL: messages[{i}].content[{j}].image_url.url"
                elif t != "text":
                    return f"messages[{i}].content[{j}].type: invalid type {t!r}"
        elif content is None:
            if role != "assistant" or not m.get("tool_calls"):
                return f"messages[{i}].content: expected a string"
        elif not isinstance(content, str):
            return f"messages[{i}].content: expected a string or an array"
        if role == "assistant":
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if tc.get("type") != "function" or not tc.get("id") or not fn.get("name"):
                    return f"messages[{i}].tool_calls: each needs id, type function and a name"
                if not isinstance(fn.get("arguments"), str):
                    return f"messages[{i}].tool_calls: arguments must be a string"
                pending.append(tc["id"])
    if pending:
        return ("An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                "response messages: " + ", ".join(pending))
    for i, tool in enumerate(body.get("tools") or []):
        if tool.get("type") != "function" or not (tool.get("function") or {}).get("name"):
            return f"tools[{i}]: expected a function with a name"
    return None


# ---- answers --------------------------------------------------------------------------------

ERROR_TYPES_ANTHROPIC = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 529: "overloaded_error",
}
ERROR_TYPES_OPENAI = {
    400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
    404: "invalid_request_error", 429: "requests", 500: "server_error", 503: "server_error",
}


def error_body(wire, status, error):
    error = error or {}
    if wire == "anthropic":
        return {"type": "error", "error": {
            "type": error.get("type") or ERROR_TYPES_ANTHROPIC.get(status, "api_error"),
            "message": error.get("message") or f"fake gateway error {status}"}}
    return {"error": {
        "message": error.get("message") or f"fake gateway error {status}",
        "type": error.get("type") or ERROR_TYPES_OPENAI.get(status, "server_error"),
        "param": None, "code": error.get("code")}}


def arguments_text(tc):
    a = tc.get("arguments", {})
    return a if isinstance(a, str) else dumps(a)


def pieces(text, size):
    return [text[i:i + size] for i in range(0, len(text), size)] or []


def full_text(turn):
    return turn["text"] if "text" in turn else "".join(turn.get("chunks", []))


def text_chunks(turn):
    if "chunks" in turn:
        return list(turn["chunks"])
    return pieces(turn.get("text", ""), 5)


def usage_of(turn):
    u = {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0,
         "cache_write_tokens": 0}
    u.update(turn.get("usage") or {})
    return u


def openai_stop(turn):
    return turn.get("stop_reason") or ("tool_calls" if turn.get("tool_calls") else "stop")


def anthropic_stop(turn):
    return turn.get("stop_reason") or ("tool_use" if turn.get("tool_calls") else "end_turn")


def openai_usage(u):
    return {"prompt_tokens": u["input_tokens"], "completion_tokens": u["output_tokens"],
            "total_tokens": u["input_tokens"] + u["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cache_read_tokens"],
                                      "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}


def anthropic_usage(u):
    # Anthropic counts the uncached input apart from cache reads and writes.
    return {"input_tokens": u["input_tokens"] - u["cache_read_tokens"] - u["cache_write_tokens"],
            "cache_creation_input_tokens": u["cache_write_tokens"],
            "cache_read_input_tokens": u["cache_read_tokens"],
            "output_tokens": u["output_tokens"]}


def openai_json(turn, model):
    message = {"role": "assistant", "content": full_text(turn) or None, "refusal": None}
    if turn.get("tool_calls"):
        message["tool_calls"] = [
            {"id": tc["id"], "type": "function",
             "function": {"name": tc["name"], "arguments": arguments_text(tc)}}
            for tc in turn["tool_calls"]]
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion",
            "created": int(time.time()), "model": model, "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": openai_stop(turn)}],
            "usage": openai_usage(usage_of(turn))}


def anthropic_json(turn, model):
    content = []
    if full_text(turn):
        content.append({"type": "text", "text": full_text(turn)})
    for tc in turn.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": tc["id"], "name": tc["name"],
                        "input": json.loads(arguments_text(tc))})
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": anthropic_stop(turn),
            "stop_sequence": None, "usage": anthropic_usage(usage_of(turn))}


def openai_events(turn, model, include_usage):
    """The SSE events (as bytes) of a streamed chat completion."""
    base = {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model, "system_fingerprint": "fp_fake"}

    def chunk(delta, finish=None):
        c = dict(base)
        c["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if include_usage:
            c["usage"] = None
        return c

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    for piece in text_chunks(turn):
        out.append(chunk({"content": piece}))
    for i, tc in enumerate(turn.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                          "function": {"name": tc["name"], "arguments": ""}}]}))
        for frag in pieces(arguments_text(tc), 8):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
    out.append(chunk({}, openai_stop(turn)))
    if include_usage:
        u = dict(base)
        u["choices"] = []
        u["usage"] = openai_usage(usage_of(turn))
        out.append(u)
    events = [b"data: " + dumps(c).encode() + b"\n\n" for c in out]
    events.append(b"data: [DONE]\n\n")
    return events


def sse(name, data):
    return b"event: " + name.encode() + b"\ndata: " + dumps(data).encode() + b"\n\n"


def anthropic_events(turn, model):
    u = usage_of(turn)
    start_usage = anthropic_usage(u)
    start_usage["output_tokens"] = 1
    out = [sse("message_start", {"type": "message_start", "message": {
        "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": start_usage}})]
    index = 0
    chunks = text_chunks(turn)
    if chunks:
        out.append(sse("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}}))
        out.append(sse("ping", {"type": "ping"}))
        for piece in chunks:
            out.append(sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "text_delta",
                                                             "text": piece}}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for tc in turn.get("tool_calls") or []:
        out.append(sse("content_block_start", {
            "type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": tc["id"], "name": tc["name"],
                              "input": {}}}))
        for frag in [""] + pieces(arguments_text(tc), 8):
            out.append(sse("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": frag}}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    out.append(sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": anthropic_stop(turn),
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": u["output_tokens"]}}))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return out


def stream_error_event(wire, error):
    if wire == "anthropic":
        return sse("error", error_body("anthropic", 0, {
            "type": error.get("type") or "overloaded_error",
            "message": error.get("message") or "Overloaded"}))
    return b"data: " + dumps(error_body("openai", 500, error)).encode() + b"\n\n"


# ---- the server -----------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    def setup(self):
        with ACCEPTED_LOCK:
            self.t_accept = ACCEPTED.pop(id(self.request), None)
        self.served = False
        with ACCEPTED_LOCK:
            CONN_COUNT[0] += 1
            self.conn_no = CONN_COUNT[0]
            CONN_OF[id(self.request)] = self.conn_no
        super().setup()

    def parse_request(self):
        # A later request on a kept-alive connection: its "t_accept" is when its request line
        # arrived (there was no accept for it).
        if self.served or self.t_accept is None:
            self.t_accept = time.monotonic()
        self.served = True
        return super().parse_request()

    protocol_version = "HTTP/1.1"
    server_version = "fake-gateway/1"

    def log_message(self, fmt, *args):
        log(fmt % args)

    def read_body(self):
        length = self.headers.get("content-length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def send_json(self, status, obj, extra=None):
        data = dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:16])
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/_fake/requests":
            with STATE.lock:
                self.send_json(200, {"requests": STATE.requests,
                                     "remaining": len(STATE.turns) - STATE.next_turn})
        elif path == "/_fake/health":
            self.send_json(200, {"ok": True})
        elif path.endswith("/v1/models"):
            self.models_request(path)
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def models_request(self, path):
        # GET /v1/models on either wire (Anthropic when anthropic-version is sent), with the
        # same key check as the model routes; recorded, and it uses no scripted turn.
        headers = {k.lower(): v for k, v in self.headers.items()}
        wire = "anthropic" if "anthropic-version" in headers else "openai"
        record = {"method": self.command, "path": path, "wire": wire, "headers": headers,
                  "body": None, "raw_body": None, "turn": None, "status": 200,
                  "outcome": "answered", "client_closed": False}
        with STATE.lock:
            record["index"] = len(STATE.requests)
            STATE.requests.append(record)
            key = STATE.key
        if key is not None:
            if wire == "anthropic":
                ok = headers.get("x-api-key") == key
            else:
                ok = headers.get("authorization") == "Bearer " + key
            if not ok:
                record["status"], record["outcome"] = 401, "refused"
                self.send_json(401, error_body(wire, 401, {"type": "authentication_error",
                                                           "message": "invalid key"}))
                return
        if wire == "anthropic":
            self.send_json(200, {"data": [{"type": "model", "id": "fake-claude",
                                           "display_name": "Fake Claude"}],
                                 "has_more": False, "first_id": "fake-claude",
                                 "last_id": "fake-claude"})
        else:
            self.send_json(200, {"object": "list", "data": [{"id": "fake-gpt", "object": "model",
                                                             "owned_by": "fake"}]})

    def do_POST(self):
        path = self.path.split("?")[0]
        body_bytes = self.read_body()
        if path == "/_fake/script":
            script = json.loads(body_bytes or b"[]")
            if isinstance(script, list):
                script = {"turns": script}
            with STATE.lock:
                STATE.turns = script.get("turns", [])
                STATE.next_turn = 0
                STATE.requests = []
                STATE.key = script.get("key")
            self.send_json(200, {"ok": True, "turns": len(STATE.turns)})
            return
        if path.endswith("/v1/chat/completions"):
            wire = "openai"
        elif path.endswith("/v1/messages"):
            wire = "anthropic"
        else:
            self.send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        self.model_request(wire, path, body_bytes)

    def model_request(self, wire, path, body_bytes):
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = json.loads(body_bytes)
            raw = None
        except ValueError:
            body, raw = None, body_bytes.decode("utf-8", "replace")
        record = {"method": self.command, "path": path, "wire": wire, "headers": headers,
                  "body": body, "raw_body": raw, "turn": None, "status": None,
                  "outcome": None, "client_closed": False, "t_accept": self.t_accept,
                  "t_done": None, "conn": self.conn_no, "conn_closed": False,
                  "body_bytes": len(body_bytes),
                  "body_sha256": hashlib.sha256(body_bytes).hexdigest()}
        with STATE.lock:
            record["index"] = len(STATE.requests)
            STATE.requests.append(record)
            key = STATE.key

        def refuse(status, message, error_type=None):
            record["status"], record["outcome"] = status, "refused"
            self.send_json(status, error_body(wire, status, {"type": error_type,
                                                             "message": message}))

        if key is not None:
            if wire == "anthropic":
                ok = headers.get("x-api-key") == key
            else:
                ok = headers.get("authorization") == "Bearer " + key
            if not ok:
                refuse(401, "invalid x-api-key" if wire == "anthropic" else
                       "Incorrect API key provided.",
                       "authentication_error" if wire == "anthropic" else
                       "invalid_request_error")
                return
        problem = validate_anthropic(headers, body) if wire == "anthropic" else \
            validate_openai(headers, body)
        if problem:
            refuse(400, problem)
            return
        with STATE.lock:
            if STATE.next_turn >= len(STATE.turns):
                turn = None
            else:
                turn = STATE.turns[STATE.next_turn]
                record["turn"] = STATE.next_turn
                STATE.next_turn += 1
        if turn is None:
            refuse(500, "fake gateway: the script has no turn left for this request", "api_error")
            return
        if turn.get("wire") and turn["wire"] != wire:
            refuse(500, f"fake gateway: the script expected a {turn['wire']} request, got {wire}",
                   "api_error")
            return
        if turn.get("delay"):
            time.sleep(turn["delay"])
        if turn.get("close_after"):
            # Answer, then close the connection unannounced (no "connection: close"), as a
            # server does with a kept-alive connection when its idle time runs out.
            self.close_connection = True
        status = turn.get("status", 200)
        model = turn.get("model") or body.get("model")
        record["status"] = status
        if status != 200:
            record["outcome"] = "answered"
            self.send_json(status, error_body(wire, status, turn.get("error")),
                           turn.get("headers"))
            return
        stream = turn.get("stream", bool(body.get("stream")))
        if not stream:
            record["outcome"] = "answered"
            answer = anthropic_json(turn, model) if wire == "anthropic" else \
                openai_json(turn, model)
            self.send_json(200, answer, turn.get("headers"))
            return
        if wire == "anthropic":
            events = anthropic_events(turn, model)
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = openai_events(turn, model, include_usage)
        self.stream(wire, turn, events, record)

    def stream(self, wire, turn, events, record):
        err = turn.get("stream_error")
        if err is not None:
            after = err.get("after", 2)
            events = events[:after] + [stream_error_event(wire, err)]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:16])
        for k, v in (turn.get("headers") or {}).items():
            self.send_header(k, v)
        self.end_headers()
        cut = turn.get("cut_after")
        hold = turn.get("hold_after")
        try:
            for n, event in enumerate(events):
                if cut is not None and n == cut:
                    record["outcome"] = "cut"
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if hold is not None and n == hold:
                    record["outcome"] = "held"
                    self.wfile.flush()
                    record["client_closed"] = self.wait_for_close()
                    self.close_connection = True
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                record["t_done"] = time.monotonic()
                if turn.get("event_delay"):
                    time.sleep(turn["event_delay"])
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            record["outcome"] = "answered"
        except (BrokenPipeError, ConnectionResetError):
            record["outcome"] = "client_gone"
            record["client_closed"] = True
            self.close_connection = True

    def wait_for_close(self):
        """Blocks until the client closes its end (True) or 30 s pass (False)."""
        self.connection.settimeout(30)
        try:
            while True:
                if not self.connection.recv(4096):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self):
        conn, addr = super().get_request()
        note_accepted(conn)
        return conn, addr

    def shutdown_request(self, request):
        n = None
        with ACCEPTED_LOCK:
            n = CONN_OF.pop(id(request), None)
        super().shutdown_request(request)
        if n is not None:
            with STATE.lock:
                for r in STATE.requests:
                    if r.get("conn") == n:
                        r["conn_closed"] = True

    def handle_error(self, request, client_address):
        # A client that leaves mid-exchange (a cancelled call, a client that closes right after
        # the terminal event) is normal here; anything else is a bug worth a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class UnixServer(Server):
    address_family = socket.AF_UNIX

    def server_bind(self):
        if os.path.exists(self.server_address):
            os.unlink(self.server_address)
        socket.socket.bind(self.socket, self.server_address)
        self.server_name, self.server_port = "localhost", 0

    def get_request(self):
        conn, _ = self.socket.accept()
        note_accepted(conn)
        return conn, ("unix", 0)


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description="Fake of the paid model gateway (tests only).")
    ap.add_argument("--script", help="a JSON file with the turns (as POST /_fake/script takes)")
    ap.add_argument("--key", help="the key requests must carry (else 401)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--unix", help="listen on this unix socket path instead (like the model door)")
    ap.add_argument("--exit-on-stdin-eof", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.verbose
    if args.script:
        with open(args.script) as f:
            script = json.load(f)
        STATE.turns = script if isinstance(script, list) else script.get("turns", [])
        if isinstance(script, dict):
            STATE.key = script.get("key")
    if args.key:
        STATE.key = args.key
    if args.unix:
        server = UnixServer(args.unix, Handler)
        print(args.unix, flush=True)
    else:
        server = Server(("127.0.0.1", args.port), Handler)
        print(server.server_address[1], flush=True)
    if args.exit_on_stdin_eof:
        def watch():
            while sys.stdin.buffer.read(4096):
                pass
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
