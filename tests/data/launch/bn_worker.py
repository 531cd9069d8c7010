"""A worker of `rumor launch ... -- python3 bn_worker.py BUFFERS STEPS`
(tests/python/test_launch.py): rumor.torch.GossipModel on a model with
BatchNorm, each node's data shifted by its id, so local running statistics
differ by about the id; prints the final running mean and
num_batches_tracked as one RESULT line of JSON."""
import json
import sys

import torch

import rumor.torch

buffers, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                          torch.nn.Tanh(), torch.nn.Linear(8, 3))
model = rumor.torch.GossipModel(net, buffers=buffers, algo="dpsgd", seed=1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(model.peer.node_id)
while model.step < steps:
    x = torch.randn(16, 6, generator=g) + model.peer.node_id
    y = torch.randint(0, 3, (16,), generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.finish()
bn = net[1]
print("RESULT " + json.dumps({"id": model.peer.node_id,
                              "mean": bn.running_mean.tolist(),
                              "tracked": int(bn.num_batches_tracked)}),
      flush=True)
model.close()
