"""A worker of `rumor launch --algo localsgd ... -- python3
stale_worker.py STEPS` (tests/python/test_stale.py): rumor.torch.GossipModel
over a small MLP on synthetic data, SGD with momentum; the launch line's
options (period, outer_lr, outer_momentum, stale) reach the peer through
the environment. After finish() (which lands the stale exchanges in
flight) prints one RESULT line of JSON with the held-out loss and
accuracy, the parameters and the longest step (seconds)."""
import json
import sys
import time

import torch

import rumor.torch

steps = int(sys.argv[1])
torch.manual_seed(0)  # the same initial model on every node
net = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(),
                          torch.nn.Linear(32, 4))
model = rumor.torch.GossipModel(net, seed=1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
node = model.peer.node_id
w = torch.randn(20, 4, generator=torch.Generator().manual_seed(7))
longest = 0.0
for step in range(steps):
    began = time.monotonic()
    g = torch.Generator().manual_seed(1000 * node + step)
    x = torch.randn(16, 20, generator=g) + 0.3 * node  # shards differ
    y = (x @ w).argmax(1)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    longest = max(longest, time.monotonic() - began)
model.finish()
in_flight = model.peer.in_flight
x = torch.randn(512, 20, generator=torch.Generator().manual_seed(99))
with torch.no_grad():
    out = net(x)
    y = (x @ w).argmax(1)
    test_loss = torch.nn.functional.cross_entropy(out, y)
    accuracy = (out.argmax(1) == y).float().mean()
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
with open(f"result-{node}.json", "w") as f:
    json.dump({"id": node, "steps": model.step, "loss": float(test_loss),
               "accuracy": float(accuracy), "params": flat.tolist(),
               "in_flight": in_flight, "stale": model.peer.stale,
               "longest_step": longest}, f)
model.close()
