#!/usr/bin/python3
"""A tiny grpcio client of cocoonbox.agent.v1.Session.Hello, for agent_e2e.sh.

    /usr/bin/python3 hello_client.py (--proto_root=DIR | --pb_dir=DIR) --socket=PATH
        [--credential=TEXT]

Needs only Debian's python3-grpcio and python3-protobuf plus protoc: session_pb2 is generated
at run time from --proto_root into a temporary directory (or taken from --pb_dir, where
`protoc --python_out` already put it), and the call goes through grpc's generic unary
multi-callable. Prints the response as one JSON object on stdout (box_public_key in hex) and
exits 0; on an RPC error prints {"code": NAME, "details": TEXT} and exits 1; 2 on bad usage.
"""

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import grpc


def load_session_pb2(proto_root):
    out = tempfile.mkdtemp(prefix="cb-agent-py-")
    try:
        protos = [os.path.join(proto_root, "cocoonbox", "agent", "v1", name)
                  for name in ("agents.proto", "session.proto")]
        subprocess.run(["protoc", "-I" + proto_root, "--python_out=" + out] + protos, check=True)
        return import_session_pb2(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def import_session_pb2(pb_dir):
    # As a package: session_pb2 imports cocoonbox.agent.v1.agents_pb2.
    sys.path.insert(0, pb_dir)
    try:
        return importlib.import_module("cocoonbox.agent.v1.session_pb2")
    finally:
        sys.path.pop(0)


def main():
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--proto_root")
    source.add_argument("--pb_dir")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--credential", default=None)
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()

    pb = import_session_pb2(args.pb_dir) if args.pb_dir else load_session_pb2(args.proto_root)
    metadata = []
    if args.credential is not None:
        metadata.append(("x-cocoonbox-credential", args.credential))
    with grpc.insecure_channel("unix:" + args.socket) as channel:
        hello = channel.unary_unary(
            "/cocoonbox.agent.v1.Session/Hello",
            request_serializer=pb.HelloRequest.SerializeToString,
            response_deserializer=pb.HelloResponse.FromString,
        )
        try:
            resp = hello(pb.HelloRequest(client="agent_e2e/python"), metadata=metadata,
                         timeout=args.timeout)
        except grpc.RpcError as err:
            print(json.dumps({"code": err.code().name, "details": err.details()}))
            return 1
    print(json.dumps({
        "box_public_key": resp.box_public_key.hex(),
        "agent_version": resp.agent_version,
        "capabilities": list(resp.capabilities),
        "box_id": resp.box_id,
        "wake_id": resp.wake_id,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
