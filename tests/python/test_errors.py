"""Errors a user can act on (issue 18, section 4): peers whose models
differ are refused at the handshake, on both sides, with the first
differing tensor named; the step number of a failed step is the same in
the exception and in the C log; the byte counters keep their documented
relation after every step."""
import os
import subprocess
import sys

import pytest
import torch

import rumor
from conftest import ROOT, run_nodes

# One peer per process: builds its model (node 1 has one tensor more, a
# float64 one), starts its transport (register), says "ready", waits for
# "go", then gossips once and prints how it ended and after how long.
PEER = r"""
import sys, time
import torch
import rumor
topo, node, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
algo = sys.argv[4] if len(sys.argv) > 4 else "dpsgd"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                            torch.nn.Linear(3, 2))
tensors = [p.data for p in model.parameters()]
if node == 1:
    tensors.append(torch.zeros(5, 2, dtype=torch.float64))
peer = rumor.Peer(topology=topo, node_id=node, key=key, algo=algo)
peer.register(tensors)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
try:
    peer.gossip()
    print("gossiped", flush=True)
except rumor.RumorError as e:
    print(f"error {time.monotonic() - t0:.3f} {e.errname} {e}", flush=True)
peer.close()
"""


def _spawn(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + \
        env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-c", PEER, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_handshake__one_extra_tensor__both_refuse_naming_it(local2):
    topo, keys = local2
    procs = [_spawn([topo, str(i), keys[i]]) for i in range(2)]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line == "ready\n", p.stderr.read()
        # both transports are up: the refusal needs no more time than a
        # HELLO and its REFUSE, far from the 30 s connect time-out
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (out, err) in enumerate(outs):
        words = out.split(maxsplit=3)
        assert words[0] == "error", (out, err)
        seconds, errname, text = float(words[1]), words[2], words[3]
        assert errname == "RUMOR_EPROTO", text
        assert seconds < 5.0, text
        # the same words on both nodes: index, shape and dtype of the
        # tensor node 1 has and node 0 lacks
        assert ("models differ at tensor 4: node 0 has none (4 tensors), "
                "node 1 has float64 [5, 2]") in text, text
        assert f"cannot gossip with node {1 - i}" in text, text
        print(f"node {i}: refused after {seconds:.3f} s: {text}")


@pytest.mark.parametrize("algo", ["dpsgd", "allreduce"])
@pytest.mark.parametrize("first", [0, 1])
def test_handshake__one_node_already_stepping__both_refuse(local2, first,
                                                           algo):
    """One node is already in its first step, waiting, when the other one
    starts: the refusal comes during that step (the HELLO goes one way
    only), and the other node may be gone before it is missed, which
    without a check after the first step looked like a dead neighbour that
    a dpsgd step skips ("gossiped" under load)."""
    topo, keys = local2
    procs = [_spawn([topo, str(first), keys[first], algo])]
    try:
        assert procs[0].stdout.readline() == "ready\n", procs[0].stderr.read()
        procs[0].stdin.write("go\n")
        procs[0].stdin.flush()
        other = 1 - first
        procs.append(_spawn([topo, str(other), keys[other], algo]))
        assert procs[1].stdout.readline() == "ready\n", procs[1].stderr.read()
        procs[1].stdin.write("go\n")
        procs[1].stdin.flush()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for out, err in outs:
        assert out.startswith("error "), (out, err)
        assert "RUMOR_EPROTO" in out and "models differ at tensor 4" in out
        # at once, not at the first step's 30 s connect deadline
        assert float(out.split()[1]) < 10.0, out


def test_step_numbers__failed_step__same_in_exception_and_c_log(local2,
                                                                 capfd):
    """Node 1 leaves after one step: node 0's second step fails (a ring of
    two cannot re-form without one), and the exception and the C log both
    call it step 2 (steps count from 1)."""
    topo, keys = local2
    opts = dict(algo="allreduce", deadline_ms=800, connect_timeout_ms=20000)

    def stays():
        with rumor.Peer(topology=topo, node_id=0, key=keys[0],
                        **opts) as peer:
            w = [torch.zeros(3)]
            peer.gossip(w)
            with pytest.raises(rumor.RumorError) as e:
                peer.gossip(w)
            return str(e.value)

    def leaves():
        with rumor.Peer(topology=topo, node_id=1, key=keys[1],
                        **opts) as peer:
            peer.gossip([torch.ones(3)])

    message, _ = run_nodes([stays, leaves])
    log = capfd.readouterr().err
    assert "step 2: timed out" in message, message
    # (both nodes share one process, so the log prefix is the last set)
    assert "] elastic: step 2: node 1 missed the deadline" in log, log
    assert "1 of the ring's 2 members finished the run" in log, log
    assert "step 1:" not in message
    assert "] elastic: step 1:" not in log


def test_counters__every_step__transport_covers_the_gossip(local2):
    """bytes_sent (transport, headers in) counts a message when the
    transport takes it, so after every step it holds the gossip bytes
    plus control frames: never less, and the difference is whole HELLOs
    and heartbeats."""
    topo, keys = local2
    steps = 20

    def node(i):
        rows = []
        with rumor.Peer(topology=topo, node_id=i, key=keys[i],
                        algo="allreduce") as peer:
            w = [torch.full((3000,), float(i))]
            for _ in range(steps):
                peer.gossip(w)
                rows.append(peer.metrics())
        return rows

    for rows in run_nodes([lambda: node(0), lambda: node(1)]):
        assert len(rows) == steps
        for m in rows:
            extra = m["bytes_sent"] - m["gossip_bytes_sent"]
            assert m["gossip_bytes_sent"] > 0
            assert extra >= 0, m
        # allreduce on 2 nodes: one message of 1500 floats per round, two
        # rounds per step, one 64-byte header each
        assert rows[-1]["gossip_bytes_sent"] == steps * 2 * (64 + 6000)
