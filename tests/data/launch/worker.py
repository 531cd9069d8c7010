"""A worker of `rumor launch ... -- python3 worker.py STEPS [DIE_NODE]`
(tests/python/test_launch.py): gossips one tensor, equal to its node id at
the start, for STEPS steps; node DIE_NODE kills itself at step 30 of its
first incarnation. Prints one RESULT line of JSON."""
import json
import os
import signal
import sys
import time

import numpy as np

import rumor

steps = int(sys.argv[1])
die = int(sys.argv[2]) if len(sys.argv) > 2 else -1
# robust mixing clips each end of an edge to its own radius, which keeps a
# liar out but does not keep the mean: this worker checks exact consensus
peer = rumor.Peer.from_env(seed=1, robust="off")
x = np.full((16, 8), float(peer.node_id), dtype=np.float32)
first_step = None
while peer.step < steps:
    if peer.node_id == die and os.environ["RUMOR_RESTART"] == "0" and \
            peer.step >= 30:
        os.kill(os.getpid(), signal.SIGKILL)
    if not peer.gossip([x]):
        break
    if first_step is None:
        first_step = peer.step
    time.sleep(0.01)  # a step of compute, so a restart finds the others
env = {k: os.environ.get(k) for k in (
    "RUMOR_TOPOLOGY", "RUMOR_NODE_ID", "RUMOR_NODES", "RUMOR_LOCAL_ID",
    "RUMOR_KEY", "RUMOR_METRICS_DIR", "RUMOR_OPTIONS", "RUMOR_RESTART",
    "RUMOR_JOIN")}
print("RESULT " + json.dumps({"id": peer.node_id, "steps": peer.step,
                              "first_step": first_step,
                              "value": float(x.mean()),
                              "spread": float(x.max() - x.min()),
                              "env": env}), flush=True)
peer.close()
