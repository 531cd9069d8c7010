"""A worker of `rumor launch ... -- python3 torch_worker.py STEPS NODE
[MODE [OVERLAP [DELAY]]]` (tests/python/test_launch.py):
rumor.torch.GossipModel over a small MLP on synthetic data, SGD with
momentum, the exchange the launch line names (allreduce, powersgd). At
step 30 of its first incarnation node NODE (-1: none) kills itself (MODE
kill, the default) or stops itself for 4 s (MODE stop: SIGSTOP, then a
child sends SIGCONT); a restarted incarnation waits DELAY seconds (0)
before it starts. OVERLAP 0 exchanges the gradients at the end of
backward, else in buckets during it. Prints one RESULT line of JSON with
the held-out loss, a hash of the parameters' bytes and the longest step
(seconds, the exchange included)."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import torch

import rumor.torch

steps, die = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "kill"
overlap = len(sys.argv) < 5 or sys.argv[4] != "0"
if os.environ["RUMOR_RESTART"] != "0" and len(sys.argv) > 5:
    time.sleep(float(sys.argv[5]))
torch.manual_seed(0)  # the same initial model on every node
net = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(),
                          torch.nn.Linear(32, 32), torch.nn.Tanh(),
                          torch.nn.Linear(32, 4))
model = rumor.torch.GossipModel(net, overlap=overlap, bucket_cap_mb=0.002,
                                seed=1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.optimizer = opt
model.join()  # a restart: the ring's model and step before its first batch
node = model.peer.node_id
w = torch.randn(20, 4, generator=torch.Generator().manual_seed(7))
first_step = None
longest = 0.0
while model.step < steps:
    began = time.monotonic()
    if node == die and os.environ["RUMOR_RESTART"] == "0" and \
            model.step == 30 and mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if node == die and model.step == 30 and mode == "stop":
        die = -1
        subprocess.Popen(["sh", "-c", f"sleep 4; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
    g = torch.Generator().manual_seed(1000 * node + model.step)
    x = torch.randn(16, 20, generator=g)
    y = (x @ w).argmax(1)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if first_step is None:
        first_step = model.step
    opt.zero_grad()
    loss.backward()
    opt.step()
    longest = max(longest, time.monotonic() - began)
    time.sleep(0.005)  # a step of compute, so a restart finds the others
x = torch.randn(512, 20, generator=torch.Generator().manual_seed(99))
with torch.no_grad():
    test_loss = torch.nn.functional.cross_entropy(net(x), (x @ w).argmax(1))
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
print("RESULT " + json.dumps({
    "id": node, "steps": model.step, "first_step": first_step,
    "loss": float(test_loss), "sum": float(flat.sum()),
    "hash": hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16],
    "longest_step": longest,
    "restart": os.environ.get("RUMOR_RESTART")}), flush=True)
model.close()
