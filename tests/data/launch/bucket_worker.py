"""A worker of `rumor launch ... -- python3 bucket_worker.py OVERLAP STEPS`
(tests/python/test_launch.py): rumor.torch.GossipModel with all-reduce on
a small MLP, each node on its own batches. With OVERLAP "on" the gradients
travel in buckets of 5 kB during backward; "off" averages them at its end.
Writes the number of buckets and the final parameters to result-ID.json
in the working directory (a line of the launcher's output holds at most
4 kB)."""
import json
import sys

import torch

import rumor.torch

overlap, steps = sys.argv[1] == "on", int(sys.argv[2])
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(),
                          torch.nn.Linear(64, 64), torch.nn.Tanh(),
                          torch.nn.Linear(64, 5))
model = rumor.torch.GossipModel(net, algo="allreduce", overlap=overlap,
                                bucket_cap_mb=0.005, seed=1)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
g = torch.Generator().manual_seed(model.peer.node_id)
while model.step < steps:
    x = torch.randn(16, 20, generator=g)
    y = (x[:, :5].argmax(1) + model.peer.node_id) % 5
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.finish()
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
with open(f"result-{model.peer.node_id}.json", "w") as f:
    json.dump({"id": model.peer.node_id, "buckets": model.peer.buckets,
               "params": flat.tolist()}, f)
model.close()
