"""--metrics-listen: the node's counters for Prometheus, scraped over HTTP
from a Peer and from `rumor node` processes under `rumor launch`."""
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import rumor
from conftest import ROOT, run_nodes
from test_launch import RUMOR_BIN, _free_port_base

LINE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                timeout=10) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4"
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) \w+ ", line), line
            continue
        m = LINE.match(line)
        assert m, f"not exposition format: {line!r}"
        labels = dict(kv.split("=", 1) for kv in m.group(2).split(","))
        key = (m.group(1),) + tuple(sorted((k, v.strip('"'))
                                           for k, v in labels.items()))
        samples[key] = float(m.group(3))
    return samples


def test_peer_metrics_listen__scraped__matches_peer_counters(local2):
    topo, keys = local2
    base = _free_port_base(2)
    got = {}

    def node(i):
        x = np.full(1000, float(i), dtype=np.float32)
        with rumor.Peer(topology=topo, node_id=i, key=keys[i], algo="dpsgd",
                        metrics_listen=f"127.0.0.1:{base + i}") as peer:
            for _ in range(20):
                peer.gossip([x])
            if i == 0:
                got["scrape"] = scrape(base)
                got["stats"] = peer.metrics()
                with pytest.raises(urllib.error.HTTPError) as e:
                    scrape(base, "/other")
                got["other"] = e.value.code
                with socket.create_connection(("127.0.0.1", base)) as s:
                    s.sendall(b"HELLO\r\n\r\n")
                    got["bad"] = s.recv(100)
            peer.gossip([x])  # node 1 waits for node 0's scrapes

    run_nodes([lambda i=i: node(i) for i in range(2)])
    m, stats = got["scrape"], got["stats"]
    assert m[("rumor_step", ("node", "0"))] == 20 == stats["steps"]
    assert m[("rumor_bytes_sent_total", ("node", "0"))] == \
        stats["bytes_sent"]
    assert m[("rumor_gossip_bytes_sent_total", ("node", "0"))] == \
        stats["gossip_bytes_sent"]
    assert m[("rumor_neighbour_state", ("node", "0"), ("peer", "1"),
              ("state", "alive"))] == 1
    assert m[("rumor_neighbour_bytes_sent_total", ("node", "0"),
              ("peer", "1"))] > 20 * 4000  # 20 steps of 1000 floats
    assert m[("rumor_skipped_total", ("node", "0"))] == 0
    # a peer's series: its PCIe counters (host tensors: nothing copied)
    assert m[("rumor_pcie_h2d_bytes_total", ("node", "0"))] == \
        stats["pcie_h2d_bytes"] == 0
    assert m[("rumor_pcie_d2h_bytes_total", ("node", "0"))] == \
        stats["pcie_d2h_bytes"] == 0
    assert got["other"] == 404
    assert got["bad"].startswith(b"HTTP/1.0 400 Bad Request")


def test_metrics_listen__bad_address__error_names_option(local2):
    topo, keys = local2
    with pytest.raises(rumor.RumorError, match="--metrics-listen nope:"):
        rumor.Peer(topology=topo, node_id=0, key=keys[0],
                   metrics_listen="nope").register([np.zeros(4, np.float32)])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(rumor.RumorError, match="Address already in use"):
            rumor.Peer(topology=topo, node_id=0, key=keys[0],
                       metrics_listen=str(port)).register(
                           [np.zeros(4, np.float32)])


def test_launch_metrics_listen__each_node_its_port__steps_grow(tmp_path):
    """rumor launch gives node i the port plus i; two scrapes of a running
    `rumor node` see its step grow."""
    base = _free_port_base(2)
    launch = subprocess.Popen(
        [RUMOR_BIN, "launch", "--nodes", "2", "--metrics-dir",
         str(tmp_path / "run"), "--workload", "lsq", "--steps", "1000000",
         "--metrics-listen", f"127.0.0.1:{base}", "--progress", "off"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        first = {}
        deadline = time.monotonic() + 60
        while len(first) < 2 and time.monotonic() < deadline:
            for i in range(2):
                try:
                    first[i] = scrape(base + i)[("rumor_step",
                                                 ("node", str(i)))]
                except (OSError, KeyError):
                    time.sleep(0.2)
        assert len(first) == 2, "no endpoint came up"
        time.sleep(1.0)
        for i in range(2):
            later = scrape(base + i)[("rumor_step", ("node", str(i)))]
            assert later > first[i]
    finally:
        launch.send_signal(signal.SIGINT)
        out, _ = launch.communicate(timeout=60)
    assert "metrics for Prometheus on http://127.0.0.1:%d/metrics" % \
        (base + 1) in out
