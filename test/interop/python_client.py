#!/usr/bin/python3
"""grpcio (gRPC C-core) interop client, a third-party client peer of the cocoonbox matrix.

    /usr/bin/python3 python_client.py --server_host=127.0.0.1 --server_port=N --test_case=large_unary
        [--use_tls=true --ca_file=ca.pem --server_host_override=localhost]

Needs only Debian's python3-grpcio and python3-protobuf plus protoc: the
message modules are generated at run time into a temporary directory from the
repo's proto/grpc/testing, and calls go through grpc's generic multi-callables.
Runs one case (or all with --test_case=all); exit 0 on pass, 1 with a one-line
reason on stderr on failure, 2 on bad usage.
"""

import argparse
import importlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))

MIB4 = 4 * 1024 * 1024
CASE_TIMEOUT_S = 30.0
SPECIAL_MESSAGE = "\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \U0001f608\t\n"
ECHO_INITIAL = "x-grpc-test-echo-initial"
ECHO_TRAILING = "x-grpc-test-echo-trailing-bin"
INITIAL_VALUE = "test_initial_metadata_value"
TRAILING_VALUE = b"\xab\xab\xab"

TS = "/grpc.testing.TestService/"
US = "/grpc.testing.UnimplementedService/"


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def load_messages():
    """Generates empty_pb2/messages_pb2 with protoc into a temp dir and imports them."""
    out = tempfile.mkdtemp(prefix="cb-interop-py-")
    try:
        protos = [os.path.join(PROTO_ROOT, "grpc", "testing", f) for f in ("empty.proto", "messages.proto")]
        subprocess.run(["protoc", "-I" + PROTO_ROOT, "--python_out=" + out] + protos, check=True)
        # Import from the generated leaf directory so the generated `grpc/` tree
        # does not shadow the grpc package itself.
        sys.path.insert(0, os.path.join(out, "grpc", "testing"))
        try:
            return importlib.import_module("empty_pb2"), importlib.import_module("messages_pb2")
        finally:
            sys.path.pop(0)
    finally:
        shutil.rmtree(out, ignore_errors=True)


empty_pb2, messages_pb2 = load_messages()
M = messages_pb2


def payload_of(size):
    return M.Payload(type=M.COMPRESSABLE, body=bytes(size))


def check_body(msg, size, what):
    body = msg.payload.body
    check(len(body) == size, "%s: payload body is %d bytes, want %d" % (what, len(body), size))
    check(body.count(0) == size, "%s: payload body is not all zeros" % what)


def check_code(err, code, what, message=None):
    check(isinstance(err, grpc.RpcError), "%s: call succeeded, want %s" % (what, code.name))
    check(err.code() == code, "%s: status %s (%r), want %s" % (what, err.code().name, err.details(), code.name))
    if message is not None:
        check(err.details() == message, "%s: status message %r, want %r" % (what, err.details(), message))


def md_get(md, key):
    return [v for k, v in (md or ()) if k == key]


def check_echoed(initial, trailing, what):
    iv = md_get(initial, ECHO_INITIAL)
    check(iv == [INITIAL_VALUE], "%s: initial metadata %s=%r, want %r" % (what, ECHO_INITIAL, iv, INITIAL_VALUE))
    tv = md_get(trailing, ECHO_TRAILING)
    check(tv == [TRAILING_VALUE], "%s: trailer %s=%r, want %r" % (what, ECHO_TRAILING, tv, TRAILING_VALUE))


ECHO_METADATA = ((ECHO_INITIAL, INITIAL_VALUE), (ECHO_TRAILING, TRAILING_VALUE))


class Requests:
    """A request iterator fed from the test thread, for full-duplex calls."""

    _END = object()

    def __init__(self):
        self._q = queue.Queue()

    def send(self, msg):
        self._q.put(msg)

    def close(self):
        self._q.put(self._END)

    def __iter__(self):
        return self

    def __next__(self):
        item = self._q.get()
        if item is self._END:
            raise StopIteration
        return item


class Client:
    def __init__(self, channel):
        def uu(path, req, resp):
            return channel.unary_unary(path, request_serializer=req.SerializeToString, response_deserializer=resp.FromString)

        def us(path, req, resp):
            return channel.unary_stream(path, request_serializer=req.SerializeToString, response_deserializer=resp.FromString)

        def su(path, req, resp):
            return channel.stream_unary(path, request_serializer=req.SerializeToString, response_deserializer=resp.FromString)

        def ss(path, req, resp):
            return channel.stream_stream(path, request_serializer=req.SerializeToString, response_deserializer=resp.FromString)

        E = empty_pb2.Empty
        self.empty_call = uu(TS + "EmptyCall", E, E)
        self.unary_call = uu(TS + "UnaryCall", M.SimpleRequest, M.SimpleResponse)
        self.streaming_output = us(TS + "StreamingOutputCall", M.StreamingOutputCallRequest, M.StreamingOutputCallResponse)
        self.streaming_input = su(TS + "StreamingInputCall", M.StreamingInputCallRequest, M.StreamingInputCallResponse)
        self.full_duplex = ss(TS + "FullDuplexCall", M.StreamingOutputCallRequest, M.StreamingOutputCallResponse)
        self.unimplemented_method = uu(TS + "UnimplementedCall", E, E)
        self.unimplemented_service = uu(US + "UnimplementedCall", E, E)


def streaming_request(size, payload_size=None, **kw):
    req = M.StreamingOutputCallRequest(response_parameters=[M.ResponseParameters(size=size)], **kw)
    if payload_size is not None:
        req.payload.CopyFrom(payload_of(payload_size))
    return req


def body_for_request_size(target, response_size):
    """Body size that makes a SimpleRequest serialize to exactly `target` bytes."""
    n = target - 64
    size = M.SimpleRequest(response_size=response_size, payload=payload_of(n)).ByteSize()
    n += target - size
    got = M.SimpleRequest(response_size=response_size, payload=payload_of(n)).ByteSize()
    check(got == target, "cannot size a request to %d bytes" % target)
    return n


def case_empty_unary(c):
    resp = c.empty_call(empty_pb2.Empty(), timeout=CASE_TIMEOUT_S)
    check(isinstance(resp, empty_pb2.Empty), "EmptyCall returned %r" % (resp,))


def case_large_unary(c):
    req = M.SimpleRequest(response_type=M.COMPRESSABLE, response_size=314159, payload=payload_of(271828))
    check_body(c.unary_call(req, timeout=CASE_TIMEOUT_S), 314159, "UnaryCall response")


def case_client_streaming(c):
    reqs = (M.StreamingInputCallRequest(payload=payload_of(n)) for n in (27182, 8, 1828, 45904))
    resp = c.streaming_input(reqs, timeout=CASE_TIMEOUT_S)
    check(resp.aggregated_payload_size == 74922, "aggregated_payload_size %d, want 74922" % resp.aggregated_payload_size)


def case_server_streaming(c):
    sizes = (31415, 9, 2653, 58979)
    req = M.StreamingOutputCallRequest(
        response_type=M.COMPRESSABLE, response_parameters=[M.ResponseParameters(size=s) for s in sizes])
    call = c.streaming_output(req, timeout=CASE_TIMEOUT_S)
    msgs = list(call)
    check(call.code() == grpc.StatusCode.OK, "StreamingOutputCall status %s" % call.code().name)
    check(len(msgs) == len(sizes), "got %d responses, want %d" % (len(msgs), len(sizes)))
    for i, (m, s) in enumerate(zip(msgs, sizes)):
        check_body(m, s, "response %d" % i)


def case_ping_pong(c):
    reqs = Requests()
    call = c.full_duplex(reqs, timeout=CASE_TIMEOUT_S)
    try:
        for i, (resp, req) in enumerate(((31415, 27182), (9, 8), (2653, 1828), (58979, 45904))):
            reqs.send(streaming_request(resp, req, response_type=M.COMPRESSABLE))
            m = next(call, None)
            check(m is not None, "stream ended before response %d" % i)
            check_body(m, resp, "response %d" % i)
    finally:
        reqs.close()
    check(next(call, None) is None, "extra response after half-close")
    check(call.code() == grpc.StatusCode.OK, "FullDuplexCall status %s" % call.code().name)


def case_empty_stream(c):
    call = c.full_duplex(iter(()), timeout=CASE_TIMEOUT_S)
    msgs = list(call)
    check(not msgs, "got %d responses, want 0" % len(msgs))
    check(call.code() == grpc.StatusCode.OK, "FullDuplexCall status %s" % call.code().name)


def case_cancel_after_begin(c):
    reqs = Requests()  # never sends anything
    fut = c.streaming_input.future(reqs, timeout=CASE_TIMEOUT_S)
    try:
        fut.cancel()
        check(fut.cancelled(), "StreamingInputCall was not cancelled")
        check(fut.code() == grpc.StatusCode.CANCELLED, "StreamingInputCall status %s, want CANCELLED" % fut.code().name)
    finally:
        reqs.close()


def case_cancel_after_first_response(c):
    reqs = Requests()
    call = c.full_duplex(reqs, timeout=CASE_TIMEOUT_S)
    try:
        reqs.send(streaming_request(31415, 27182))
        m = next(call, None)
        check(m is not None, "stream ended before the first response")
        check_body(m, 31415, "first response")
        call.cancel()
        try:
            next(call)
            raise Failure("a response arrived after cancel")
        except grpc.RpcError as e:
            check_code(e, grpc.StatusCode.CANCELLED, "FullDuplexCall")
    finally:
        reqs.close()


def case_timeout_on_sleeping_server(c):
    reqs = Requests()
    # The server would sleep 1 s before answering; the deadline is 1 ms.
    reqs.send(M.StreamingOutputCallRequest(
        payload=payload_of(27182), response_parameters=[M.ResponseParameters(size=31415, interval_us=1000000)]))
    call = c.full_duplex(reqs, timeout=0.001)
    try:
        list(call)
        raise Failure("FullDuplexCall finished OK, want DEADLINE_EXCEEDED")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.DEADLINE_EXCEEDED, "FullDuplexCall")
    finally:
        reqs.close()


def case_status_code_and_message(c):
    message = "test status message"
    status = M.EchoStatus(code=2, message=message)
    try:
        c.unary_call(M.SimpleRequest(response_status=status), timeout=CASE_TIMEOUT_S)
        raise Failure("UnaryCall succeeded, want UNKNOWN")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.UNKNOWN, "UnaryCall", message)
    call = c.full_duplex(iter([M.StreamingOutputCallRequest(response_status=status)]), timeout=CASE_TIMEOUT_S)
    try:
        list(call)
        raise Failure("FullDuplexCall succeeded, want UNKNOWN")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.UNKNOWN, "FullDuplexCall", message)


def case_special_status_message(c):
    try:
        c.unary_call(M.SimpleRequest(response_status=M.EchoStatus(code=2, message=SPECIAL_MESSAGE)), timeout=CASE_TIMEOUT_S)
        raise Failure("UnaryCall succeeded, want UNKNOWN")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.UNKNOWN, "UnaryCall", SPECIAL_MESSAGE)


def case_custom_metadata(c):
    req = M.SimpleRequest(response_size=314159, payload=payload_of(271828))
    resp, call = c.unary_call.with_call(req, metadata=ECHO_METADATA, timeout=CASE_TIMEOUT_S)
    check_body(resp, 314159, "UnaryCall response")
    check_echoed(call.initial_metadata(), call.trailing_metadata(), "UnaryCall")

    call = c.full_duplex(iter([streaming_request(314159, 271828)]), metadata=ECHO_METADATA, timeout=CASE_TIMEOUT_S)
    msgs = list(call)
    check(call.code() == grpc.StatusCode.OK, "FullDuplexCall status %s" % call.code().name)
    check(len(msgs) == 1, "FullDuplexCall: got %d responses, want 1" % len(msgs))
    check_body(msgs[0], 314159, "FullDuplexCall response")
    check_echoed(call.initial_metadata(), call.trailing_metadata(), "FullDuplexCall")


def case_unimplemented_method(c):
    try:
        c.unimplemented_method(empty_pb2.Empty(), timeout=CASE_TIMEOUT_S)
        raise Failure("TestService/UnimplementedCall succeeded")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.UNIMPLEMENTED, "TestService/UnimplementedCall")


def case_unimplemented_service(c):
    try:
        c.unimplemented_service(empty_pb2.Empty(), timeout=CASE_TIMEOUT_S)
        raise Failure("UnimplementedService/UnimplementedCall succeeded")
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.UNIMPLEMENTED, "UnimplementedService/UnimplementedCall")


def case_max_message_under(c):
    target = MIB4 - 64
    resp_size = target - 10  # SimpleResponse{payload{body}} adds 10 bytes at this size
    n = body_for_request_size(target, resp_size)
    try:
        resp = c.unary_call(M.SimpleRequest(response_size=resp_size, payload=payload_of(n)), timeout=CASE_TIMEOUT_S)
    except grpc.RpcError as e:
        raise Failure("UnaryCall of a %d-byte request failed: %s %r" % (target, e.code().name, e.details()))
    check_body(resp, resp_size, "UnaryCall response")


def case_max_message_over(c):
    target = MIB4 + 64
    n = body_for_request_size(target, 0)
    try:
        c.unary_call(M.SimpleRequest(payload=payload_of(n)), timeout=CASE_TIMEOUT_S)
        raise Failure("UnaryCall of a %d-byte request succeeded" % target)
    except grpc.RpcError as e:
        check_code(e, grpc.StatusCode.RESOURCE_EXHAUSTED, "UnaryCall of a %d-byte request" % target)


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def parse_bool(s):
    if s in ("true", "1"):
        return True
    if s in ("false", "0", ""):
        return False
    raise argparse.ArgumentTypeError("want true or false, got %r" % s)


def main():
    ap = argparse.ArgumentParser(description="grpcio interop client")
    ap.add_argument("--server_host", default="127.0.0.1")
    ap.add_argument("--server_port", type=int, required=True)
    ap.add_argument("--test_case", default="large_unary")
    ap.add_argument("--use_tls", type=parse_bool, default=False)
    ap.add_argument("--ca_file", default="")
    ap.add_argument("--server_host_override", default="")
    ap.add_argument("--use_test_ca", type=parse_bool, default=False)  # accepted for compatibility
    args = ap.parse_args()

    names = list(CASES) if args.test_case == "all" else [args.test_case]
    for n in names:
        if n not in CASES:
            print("python_client: unknown test case %s" % n, file=sys.stderr)
            return 2

    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    host = "[%s]" % args.server_host if ":" in args.server_host else args.server_host
    target = "%s:%d" % (host, args.server_port)
    if args.use_tls:
        if not args.ca_file:
            print("python_client: --use_tls=true needs --ca_file", file=sys.stderr)
            return 2
        with open(args.ca_file, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        if args.server_host_override:
            options.append(("grpc.ssl_target_name_override", args.server_host_override))
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)

    failed = 0
    with channel:
        client = Client(channel)
        for name in names:
            try:
                run_with_timeout(CASES[name], client)
                if len(names) > 1:
                    print("PASS %s" % name, flush=True)
            except Failure as e:
                failed += 1
                print("%s: FAIL: %s" % (name, " ".join(str(e).split())), file=sys.stderr, flush=True)
            except grpc.RpcError as e:
                failed += 1
                print("%s: FAIL: unexpected status %s %r" % (name, e.code().name, e.details()), file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - any crash is a failed case
                failed += 1
                print("%s: FAIL: %s: %s" % (name, type(e).__name__, " ".join(str(e).split())), file=sys.stderr, flush=True)
    return 1 if failed else 0


def run_with_timeout(fn, client):
    """Runs one case on a worker thread so a hung call fails the case instead of the run."""
    result = {}

    def work():
        try:
            fn(client)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            result["err"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(CASE_TIMEOUT_S + 5)
    if t.is_alive():
        raise Failure("timed out after %.0f s" % (CASE_TIMEOUT_S + 5))
    if "err" in result:
        raise result["err"]


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a timed-out case may leave a grpc thread behind.
    os._exit(code)
