#!/usr/bin/python3
"""A plain grpcio client of cocoonbox's control plane and edge, for end-to-end tests.

Uses only Debian's python3-grpcio and python3-protobuf: message modules are generated with
protoc into a temp dir; methods are called through the channel's generic calls, so this proves
the contract is plain gRPC. The token comes from the COCOONBOX_TOKEN environment variable of
this test process (never argv).

  boxes_client.py --port N ensure [--name main] [--wait]
  boxes_client.py --port N get|hibernate|delete [--name main]
  boxes_client.py --port N list
  boxes_client.py --port N hello [--name main]      (Session.Hello through the edge)
  boxes_client.py --port N watch-op OPERATION_ID [--offset KEY]
                                                     (prints phases until DONE/FAILED)
  boxes_client.py --port N recreate [--name main] [--preserve-data]
  boxes_client.py --port N watch                     (Boxes.Watch: one JSON list per line, flushed,
                                                      until the stream ends or the process is killed)
Prints one JSON object per result on stdout; exits 1 with "CODE: message" on a gRPC error.
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

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")


def load():
    out = tempfile.mkdtemp(prefix="cb-e2e-pb-")
    try:
        subprocess.run(["protoc", "-I" + ROOT, "--python_out=" + out,
                        "cocoonbox/control/v1/boxes.proto", "cocoonbox/agent/v1/agents.proto",
                        "cocoonbox/agent/v1/session.proto"],
                       check=True)
        sys.path.insert(0, out)
        return (importlib.import_module("cocoonbox.control.v1.boxes_pb2"),
                importlib.import_module("cocoonbox.agent.v1.session_pb2"))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("command")
    p.add_argument("arg", nargs="?")
    p.add_argument("--name", default="")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--offset", default="", help="watch-op: resume after this offset_key")
    p.add_argument("--preserve-data", action="store_true")
    a = p.parse_args()
    boxes, session = load()
    token = os.environ.get("COCOONBOX_TOKEN", "")
    md = [("authorization", "Bearer " + token)] if token else []
    ch = grpc.insecure_channel("127.0.0.1:%d" % a.port)

    def unary(path, req, resp_type, extra=()):
        call = ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=resp_type.FromString)
        return call(req, metadata=md + list(extra), timeout=60)

    def box_json(b):
        return {"id": b.id, "name": b.name, "state": boxes.State.Name(b.state),
                "detail": b.detail, "isolated": b.isolated, "attached": b.attached_clients,
                "operation": b.operation_id}

    svc = "/cocoonbox.control.v1.Boxes/"
    try:
        if a.command == "ensure":
            b = unary(svc + "Ensure", boxes.EnsureRequest(name=a.name, wait=a.wait), boxes.Box)
            print(json.dumps(box_json(b)))
        elif a.command == "get":
            print(json.dumps(box_json(unary(svc + "Get", boxes.BoxRef(box=a.name), boxes.Box))))
        elif a.command == "list":
            r = unary(svc + "List", boxes.ListBoxesRequest(), boxes.ListBoxesResponse)
            print(json.dumps([box_json(b) for b in r.boxes]))
        elif a.command in ("hibernate", "delete"):
            method = "Hibernate" if a.command == "hibernate" else "Delete"
            op = unary(svc + method, boxes.BoxRef(box=a.name), boxes.Operation)
            print(json.dumps({"operation": op.id, "kind": op.kind}))
        elif a.command == "watch-op":
            call = ch.unary_stream(svc + "WatchOperation",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=boxes.OperationEvent.FromString)
            req = boxes.WatchOperationRequest(operation_id=a.arg, offset_key=a.offset)
            for ev in call(req, metadata=md,
                           timeout=60):
                print(json.dumps({"phase": boxes.Phase.Name(ev.phase), "detail": ev.detail,
                                  "offset_key": ev.offset_key}), flush=True)
        elif a.command == "recreate":
            op = unary(svc + "Recreate",
                       boxes.RecreateRequest(box=a.name, preserve_data=a.preserve_data),
                       boxes.Operation)
            print(json.dumps({"operation": op.id, "kind": op.kind}))
        elif a.command == "watch":
            call = ch.unary_stream(svc + "Watch",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=boxes.ListBoxesResponse.FromString)
            for r in call(boxes.WatchBoxesRequest(), metadata=md):
                print(json.dumps([box_json(b) for b in r.boxes]), flush=True)
        elif a.command == "hello":
            extra = [("x-cocoonbox-box", a.name)] if a.name else []
            r = unary("/cocoonbox.agent.v1.Session/Hello", session.HelloRequest(client="e2e"),
                      session.HelloResponse, extra)
            print(json.dumps({"box_id": r.box_id, "wake_id": r.wake_id,
                              "key_len": len(r.box_public_key), "version": r.agent_version,
                              "public_key": r.box_public_key.hex()}))
        else:
            print("unknown command " + a.command, file=sys.stderr)
            return 2
    except grpc.RpcError as e:
        print("%s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
