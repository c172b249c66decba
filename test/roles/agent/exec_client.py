#!/usr/bin/python3
"""A tiny grpcio client of cocoonbox.agent.v1.Session.Exec, for agent_e2e.sh.

    /usr/bin/python3 exec_client.py --pb_dir=DIR --socket=PATH --credential=TEXT
        --command=LINE [--stdin_file=PATH] [--cwd=DIR]

Runs LINE through the user's shell, sends the file (if any) as stdin in 64 KiB frames, then
stdin_close, and prints one JSON object: {"pid", "user", "cwd", "stdout_sha256", "stdout_len",
"stderr", "exit_code" | "exit_signal", "credited"}. Exits 0; on an RPC error prints
{"code": NAME, "details": TEXT} and exits 1.
"""

import argparse
import hashlib
import importlib
import json
import os
import sys

import grpc


def import_session_pb2(pb_dir):
    # As a package: session_pb2 imports cocoonbox.agent.v1.agents_pb2.
    sys.path.insert(0, pb_dir)
    try:
        return importlib.import_module("cocoonbox.agent.v1.session_pb2")
    finally:
        sys.path.pop(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pb_dir", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--credential", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--stdin_file", default=None)
    parser.add_argument("--cwd", default="")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    pb = import_session_pb2(args.pb_dir)

    def requests():
        yield pb.ExecRequest(start=pb.ExecStart(command=args.command, cwd=args.cwd))
        if args.stdin_file:
            with open(args.stdin_file, "rb") as f:
                while True:
                    chunk = f.read(64 * 1024)
                    if not chunk:
                        break
                    yield pb.ExecRequest(stdin_data=chunk)
        yield pb.ExecRequest(stdin_close=pb.StdinClose())

    out = hashlib.sha256()
    result = {"stdout_len": 0, "stderr": "", "credited": 0}
    with grpc.insecure_channel("unix:" + args.socket) as channel:
        exec_call = channel.stream_stream(
            "/cocoonbox.agent.v1.Session/Exec",
            request_serializer=pb.ExecRequest.SerializeToString,
            response_deserializer=pb.ExecResponse.FromString,
        )
        try:
            for resp in exec_call(requests(), metadata=[("x-cocoonbox-credential", args.credential)],
                                  timeout=args.timeout):
                kind = resp.WhichOneof("frame")
                if kind == "started":
                    result.update(pid=resp.started.pid, user=resp.started.user,
                                  cwd=resp.started.cwd)
                elif kind == "stdout_data":
                    out.update(resp.stdout_data)
                    result["stdout_len"] += len(resp.stdout_data)
                elif kind == "stderr_data":
                    result["stderr"] += resp.stderr_data.decode("utf-8", "replace")
                elif kind == "stdin_credit":
                    result["credited"] += resp.stdin_credit.bytes
                elif kind == "exit":
                    if resp.exit.WhichOneof("status") == "code":
                        result["exit_code"] = resp.exit.code
                    else:
                        result["exit_signal"] = resp.exit.signal_name
        except grpc.RpcError as err:
            print(json.dumps({"code": err.code().name, "details": err.details()}))
            return 1
    result["stdout_sha256"] = out.hexdigest()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
