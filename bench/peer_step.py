"""Milliseconds per rumor.Peer step: N processes on loopback (CURVE), one
tensor of FLOATS float32, STEPS timed steps after 5 warm-up steps.
usage: bench/peer_step.py N FLOATS STEPS ALGO. Run it against two builds
(PYTHONPATH=DIR/python RUMOR_LIB=DIR/build/lib/librumor.so) to compare
them: docs/reliability.md, "Elastic rings under the peer API", measured
the cost of the elastic ring this way."""
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def worker(topo, i, floats, steps, algo, q):
    import rumor
    peer = rumor.Peer(topology=topo, node_id=i, key=os.path.join(
        os.path.dirname(topo), "keys", f"node-{i}"), algo=algo, seed=1)
    x = np.full(floats, float(i), dtype=np.float32)
    for _ in range(5):
        peer.gossip([x])
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        peer.gossip([x])
        times.append(time.perf_counter() - t0)
    q.put((i, statistics.median(times)))
    peer.close()


if __name__ == "__main__":
    n, floats, steps, algo = int(sys.argv[1]), int(sys.argv[2]), \
        int(sys.argv[3]), sys.argv[4]
    import rumor.topology
    d = tempfile.mkdtemp()
    topo = rumor.topology.local(f"ring:{n}", d)
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(topo, i, floats, steps, algo, q))
          for i in range(n)]
    for p in ps:
        p.start()
    res = sorted(q.get() for _ in ps)
    for p in ps:
        p.join()
    print(f"{algo} n={n} floats={floats}: median ms/step per node",
          " ".join(f"{1000 * t:.2f}" for _, t in res))
