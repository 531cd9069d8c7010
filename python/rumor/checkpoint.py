"""Checkpoints of a training run: the model's and optimizer's PyTorch
state_dicts with the Rumor peer's state (the next step number and the
algorithm's per-edge state, from rumor_peer_state_save) in one file.

    rumor.checkpoint.save("ckpt.pt", peer, model, optimizer, step=t)
    extra = rumor.checkpoint.load("ckpt.pt", peer, model, optimizer)

Restoring needs a peer made with the same options and registered with
the same tensors: load() registers the model's parameters when the peer
has none yet, so call it before the first gossip().
"""
import ctypes

from . import _lib
from ._lib import check, lib

FORMAT = 1


def peer_state(peer):
    """The peer's state as a dict of plain values (bytes inside)."""
    peer._need()
    if peer.in_flight:
        raise RuntimeError(
            f"rumor: node {peer.node_id}: no checkpoint at step {peer.step}: "
            f"a stale exchange is in flight and its correction is in "
            f"neither the model nor a state; save after a step with none "
            f"in flight (localsgd: after the gossip of a step t with "
            f"t % period >= stale) or after flush()")
    buf = _lib.Buf()
    lib.rumor_buf_init(ctypes.byref(buf), 1 << 40)
    try:
        check(lib.rumor_peer_state_save(peer._p, ctypes.byref(buf)), None,
              "peer state")
        blob = ctypes.string_at(buf.data, buf.len)
    finally:
        lib.rumor_buf_free(ctypes.byref(buf))
    return {"format": FORMAT, "node_id": peer.node_id, "state": blob}


def peer_load(peer, state):
    peer._need()
    if state.get("format") != FORMAT:
        raise ValueError(f"rumor checkpoint format {state.get('format')}, "
                         f"this package reads {FORMAT}")
    if state.get("node_id") != peer.node_id:
        raise ValueError(f"checkpoint of node {state.get('node_id')}, "
                         f"this peer is node {peer.node_id}")
    blob = state["state"]
    diag = _lib.Diag()
    check(lib.rumor_peer_state_load(peer._p, blob, len(blob),
                                    ctypes.byref(diag)), diag,
          "peer state")


def save(path, peer, model=None, optimizer=None, **extra):
    """torch.save of {"model", "optimizer", "rumor", **extra}."""
    import torch
    obj = dict(extra)
    if model is not None:
        obj["model"] = model.state_dict()
    if optimizer is not None:
        obj["optimizer"] = optimizer.state_dict()
    obj["rumor"] = peer.state_dict()
    torch.save(obj, path)


def load(path, peer, model=None, optimizer=None):
    """Restores what save wrote; returns the dict (for the extra keys)."""
    import torch
    obj = torch.load(path)
    if model is not None:
        model.load_state_dict(obj["model"])
    if optimizer is not None and "optimizer" in obj:
        optimizer.load_state_dict(obj["optimizer"])
    if peer._p is None:
        if model is None:
            raise RuntimeError("rumor.checkpoint.load: the peer has no "
                               "tensors; pass the model to register")
        peer.register(model.parameters())
    peer.load_state_dict(obj["rumor"])
    return obj
