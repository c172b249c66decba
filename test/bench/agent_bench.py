#!/usr/bin/python3
"""scripts/bench agent: the in-box agent's memory and the model loop's own cost per step.

    agent_bench.py --cocoonbox BIN --mint MINT --proto-root DIR --fake-gateway PY
                   [--turns N] [--steps S] [--keep]

Starts the real `cocoonbox agent` (unix socket, a temporary data dir, tools as `nobody` when
run as root) with its model door pointed at test/support/fake_gateway.py on a unix socket (the
FAKE of the paid gateway; it answers at once: no delay is scripted). A Python grpcio client
(Debian's python3-grpcio, like the e2e tests) holds Session.Events open, creates one agent and
runs N turns (default 100) of S model steps each (default 10): S-1 steps answer with one
list_dir tool call, the last with text. It prints one JSON object:

  rss_idle_kib        VmRSS of the agent 1 s after it answered Hello, before any agent exists
  agent_cpu_ms_per_step  the agent's CPU time (user + system) over the N turns / (N * S)
  rss_after_kib       VmRSS after the N turns (and 1 s of quiet)
  hwm_kib             VmHWM (peak RSS) at the end
  turn_ms             median and p90 wall time of a turn: Send called -> the agents event
                      saying the turn is done, seen by the client
  gateway_ms_per_step median over turns of the fake's own time per step: from the moment it
                      accepted the agent's connection to the last byte of the stream
  overhead_ms_per_step median and p90 over turns of (turn wall - the fake's time) / S: what
                      the loop adds per step: building and sending the request, parsing the
                      stream, the transcript writes and events, one list_dir call, and the
                      turn's Send and final event (shared by S steps). An upper bound for the
                      loop alone, since it also holds the list_dir call and the time between
                      the agent's connect() and the fake's accept(). first10/last10: the
                      median over the first and the last 10 turns (each step sends the whole
                      conversation so far, so the cost grows with the transcript).
  tool_ms_per_step    median over turns of the tool calls' own time per step, as the agent
                      measured it (its "agent turn ended" log line, tool_us: from handing the
                      call to the tool set to its result; null for an agent that does not log it)
  overhead_ex_tools_ms_per_step  the same as overhead_ms_per_step with that tool time also
                      taken out: the loop "beyond model and tool time" (issue 6's goal)

Both wires are measured (--wires openai,anthropic), N turns each, on one agent process.
"""

import argparse
import http.client
import importlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import grpc


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def fake_call(sock_path, method, path, body=None):
    conn = UnixHTTPConnection(sock_path)
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    out = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"fake gateway {path}: {resp.status} {out[:200]!r}")
    return json.loads(out)


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def cpu_ms(pid):
    """utime + stime of |pid| in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def tool_us_by_turn(log_path):
    """turn id -> tool_us from the agent's "agent turn ended" log lines (JSON, one a line)."""
    out = {}
    with open(log_path) as f:
        for line in f:
            if '"agent turn ended"' not in line:
                continue
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "tool_us" in j and "turn" in j:
                out[j["turn"]] = int(j["tool_us"])
    return out


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def load_pb(proto_root, out):
    os.makedirs(out)
    protos = [os.path.join(proto_root, "cocoonbox", "agent", "v1", n)
              for n in ("agents.proto", "session.proto")]
    subprocess.run(["protoc", "-I" + proto_root, "--python_out=" + out] + protos, check=True)
    sys.path.insert(0, out)
    agents = importlib.import_module("cocoonbox.agent.v1.agents_pb2")
    session = importlib.import_module("cocoonbox.agent.v1.session_pb2")
    return agents, session


def script_for(wire, turns, steps):
    script = []
    for t in range(turns):
        for s in range(steps - 1):
            script.append({"wire": wire, "tool_calls": [
                {"id": f"call_{t}_{s}", "name": "list_dir", "arguments": {"path": "."}}],
                "usage": {"input_tokens": 100, "output_tokens": 10}})
        script.append({"wire": wire, "text": f"done {t}",
                       "usage": {"input_tokens": 100, "output_tokens": 5}})
    return script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cocoonbox", required=True)
    ap.add_argument("--mint", required=True)
    ap.add_argument("--proto-root", required=True)
    ap.add_argument("--fake-gateway", required=True)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--wires", default="openai,anthropic")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="cb-agent-bench-")
    procs = []
    try:
        return run(args, tmp, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp, procs):
    agents_pb, session_pb = load_pb(args.proto_root, os.path.join(tmp, "pb"))
    door = os.path.join(tmp, "model.sock")
    gw = subprocess.Popen([sys.executable, args.fake_gateway, "--unix", door,
                           "--exit-on-stdin-eof"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    procs.append(gw)
    gw.stdout.readline()  # the socket path, once it listens

    ws = os.path.join(tmp, "ws")
    os.makedirs(ws)
    os.chmod(tmp, 0o755)
    os.chmod(ws, 0o777)
    sock = os.path.join(tmp, "agent.sock")
    ident = os.path.join(tmp, "identity")
    seed, key_id, box = "7", "edge-bench", "box-bench"
    with open(ident, "w") as f:
        subprocess.run([args.mint, "identity", seed, key_id, box, "wake-1"], stdout=f,
                       check=True)
    cred = subprocess.run([args.mint, "credential", seed, key_id, box, "wake-1", "+600"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    argv = [args.cocoonbox, "agent", "--socket", sock, "--identity", ident, "--data-dir",
            os.path.join(tmp, "data"), "--workspace", ws, "--model", "bench-model",
            "--model-endpoint", "unix:" + door]
    if os.geteuid() == 0:
        argv += ["--desktop-user", "nobody"]
    log = open(os.path.join(tmp, "agent.log"), "w")
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    procs.append(agent)
    while True:
        line = agent.stdout.readline()
        if not line:
            raise RuntimeError("agent exited during start; see " + log.name)
        if line.startswith("listening on unix:"):
            break

    md = [("x-cocoonbox-credential", cred)]
    channel = grpc.insecure_channel("unix:" + sock)
    hello = channel.unary_unary("/cocoonbox.agent.v1.Session/Hello",
                                request_serializer=session_pb.HelloRequest.SerializeToString,
                                response_deserializer=session_pb.HelloResponse.FromString)
    hello(session_pb.HelloRequest(client="agent_bench"), metadata=md, timeout=10)
    time.sleep(1)
    rss_idle = rss_kib(agent.pid)

    def unary(name, req_cls, resp_cls):
        return channel.unary_unary(f"/cocoonbox.agent.v1.Agents/{name}",
                                   request_serializer=req_cls.SerializeToString,
                                   response_deserializer=resp_cls.FromString)

    create = unary("Create", agents_pb.CreateAgentRequest, agents_pb.Agent)
    send = unary("Send", agents_pb.SendRequest, agents_pb.SendAccepted)
    events = channel.unary_stream("/cocoonbox.agent.v1.Session/Events",
                                  request_serializer=agents_pb.EventsRequest.SerializeToString,
                                  response_deserializer=agents_pb.Event.FromString)

    # Turn ends as the client sees them: turn id -> (monotonic time, state).
    ended = {}
    cond = threading.Condition()

    def follow():
        try:
            for ev in events(agents_pb.EventsRequest(channels=["agents"], no_deltas=True),
                             metadata=md):
                if ev.HasField("agent") and ev.agent.HasField("last_turn"):
                    t = ev.agent.last_turn
                    if t.state not in (agents_pb.TURN_RUNNING,
                                       agents_pb.TURN_STATE_UNSPECIFIED):
                        with cond:
                            ended.setdefault(t.id, (time.monotonic(), t.state, t.error))
                            cond.notify_all()
        except grpc.RpcError:
            pass

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()

    result = {"turns": args.turns, "steps": args.steps, "rss_idle_kib": rss_idle, "wires": {}}
    for wire in args.wires.split(","):
        fake_call(door, "POST", "/_fake/script", script_for(wire, args.turns, args.steps))
        agent_argv_wire = wire  # the agent's wire comes from its flags: restart per wire
        if wire != "openai":
            # One agent process per wire would hide nothing; the flag sets the main model's wire.
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=10)
            agent = subprocess.Popen(argv + ["--model-wire", agent_argv_wire],
                                     stdout=subprocess.PIPE, stderr=log, text=True)
            procs.append(agent)
            while not agent.stdout.readline().startswith("listening on unix:"):
                if agent.poll() is not None:
                    raise RuntimeError("agent exited during restart; see " + log.name)
            channel.close()
            channel = grpc.insecure_channel("unix:" + sock)
            create = unary("Create", agents_pb.CreateAgentRequest, agents_pb.Agent)
            send = unary("Send", agents_pb.SendRequest, agents_pb.SendAccepted)
            events = channel.unary_stream(
                "/cocoonbox.agent.v1.Session/Events",
                request_serializer=agents_pb.EventsRequest.SerializeToString,
                response_deserializer=agents_pb.Event.FromString)
            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
        a = create(agents_pb.CreateAgentRequest(name="bench-" + wire), metadata=md, timeout=10)
        walls, turn_ids = [], []
        cpu0 = cpu_ms(agent.pid)
        for t in range(args.turns):
            t0 = time.monotonic()
            acc = send(agents_pb.SendRequest(agent_id=a.id, prompt=f"turn {t}"), metadata=md,
                       timeout=30)
            with cond:
                if not cond.wait_for(lambda: acc.turn_id in ended, timeout=60):
                    raise RuntimeError(f"turn {t} did not end within 60 s")
                t1, state, error = ended[acc.turn_id]
            if state != agents_pb.TURN_DONE:
                raise RuntimeError(f"turn {t} ended {state}: {error}")
            walls.append((t1 - t0) * 1000)
            turn_ids.append(acc.turn_id)
        cpu1 = cpu_ms(agent.pid)
        reqs = fake_call(door, "GET", "/_fake/requests")["requests"]
        model_reqs = [r for r in reqs if r.get("turn") is not None]
        if len(model_reqs) != args.turns * args.steps:
            raise RuntimeError(f"{len(model_reqs)} model requests, want "
                               f"{args.turns * args.steps}")
        gw_ms, over_ms, tool_ms, over_ex_ms = [], [], [], []
        log.flush()
        tools_us = tool_us_by_turn(log.name)
        for t in range(args.turns):
            rs = model_reqs[t * args.steps:(t + 1) * args.steps]
            g = sum((r["t_done"] - r["t_accept"]) * 1000 for r in rs)
            gw_ms.append(g / args.steps)
            over_ms.append((walls[t] - g) / args.steps)
            if turn_ids[t] in tools_us:
                tl = tools_us[turn_ids[t]] / 1000.0
                tool_ms.append(tl / args.steps)
                over_ex_ms.append((walls[t] - g - tl) / args.steps)
        have_tools = len(tool_ms) == args.turns
        time.sleep(1)
        result["wires"][wire] = {
            "turn_ms": {"median": statistics.median(walls), "p90": percentile(walls, 90)},
            "gateway_ms_per_step": statistics.median(gw_ms),
            "overhead_ms_per_step": {"median": statistics.median(over_ms),
                                     "p90": percentile(over_ms, 90),
                                     "first10_median": statistics.median(over_ms[:10]),
                                     "last10_median": statistics.median(over_ms[-10:])},
            "tool_ms_per_step": statistics.median(tool_ms) if have_tools else None,
            "overhead_ex_tools_ms_per_step": {
                "median": statistics.median(over_ex_ms),
                "p90": percentile(over_ex_ms, 90),
                "first10_median": statistics.median(over_ex_ms[:10]),
                "last10_median": statistics.median(over_ex_ms[-10:])} if have_tools else None,
            "agent_cpu_ms_per_step": (cpu1 - cpu0) / (args.turns * args.steps),
            "rss_after_kib": rss_kib(agent.pid),
            "hwm_kib": rss_kib(agent.pid, "VmHWM"),
        }
    channel.close()
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=10)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
