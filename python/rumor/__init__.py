"""rumor: decentralized training for PyTorch loops, on librumor (ctypes).

Keep your model, data loader and optimizer; after optimizer.step() call
peer.gossip(model.parameters()) and Rumor averages the parameters with the
neighbours of a topology, compressed (PowerGossip, CHOCO, ...), over
CURVE-encrypted links. See docs/python.md.
"""
from ._lib import RumorError, cuda_built, version
from ._lib import path as library_path
from .codec import Codec
from .keys import keygen, public_key
from .peer import Options, Peer, Workload, launch_env
from . import checkpoint, topology

__all__ = ["Peer", "Workload", "Options", "Codec", "RumorError", "keygen",
           "public_key", "topology", "checkpoint", "cuda_built", "version",
           "library_path"]
__version__ = version()
