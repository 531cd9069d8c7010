"""Defaults that train (issue 18, section 2), from Python: a peer whose
model stops being finite gets an error that says training diverged and
names the options that control it, with the gamma in use (the C side:
tests/integration/test_defaults_train.c)."""
import re

import pytest
import torch

import rumor
from conftest import run_nodes


def test_choco__model_turns_infinite__error_names_gamma_and_codec(local2):
    topo, keys = local2
    opts = dict(algo="choco", deadline_ms=800, connect_timeout_ms=20000)

    def diverges():
        with rumor.Peer(topology=topo, node_id=0, key=keys[0],
                        **opts) as peer:
            w = [torch.zeros(64)]
            peer.gossip(w)
            w[0][3] = float("inf")
            with pytest.raises(rumor.RumorError) as e:
                peer.gossip(w)
            return str(e.value)

    def neighbour():
        with rumor.Peer(topology=topo, node_id=1, key=keys[1],
                        **opts) as peer:
            w = [torch.ones(64)]
            peer.gossip(w)
            # choco skips a neighbour that sends nothing: not an error here
            assert peer.gossip(w)

    message, _ = run_nodes([diverges, neighbour])
    assert "step 2: the model is no longer finite: training diverged" \
        in message, message
    assert re.search(r"--gamma [0-9.]+ \(auto\)", message), message
    assert "--codec qsgd:bits=4" in message, message
    assert "the learning rate" in message, message
