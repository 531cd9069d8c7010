"""Topologies: generation, files, checks (the `rumor topo` subcommands).

    t = rumor.topology.generate("ring", 8)          # or from_spec("torus:4x4")
    t.spectral_gap(), t.doubly_stochastic(), t.matrix()
    path = rumor.topology.local("ring:4", "run/")   # endpoints + keys, ready
"""
import ctypes
import os
import socket

from . import _lib
from ._lib import check, enc, lib
from .keys import keygen


class Topology:
    """A parsed or generated topology (C rumor_topology)."""

    def __init__(self, handle):
        self._p = handle

    @classmethod
    def _make(cls, fn, *args):
        p = ctypes.c_void_p()
        diag = _lib.Diag()
        check(fn(*args, ctypes.byref(p), ctypes.byref(diag)), diag)
        return cls(p)

    @property
    def nodes(self):
        return int(lib.rumor_topology_nodes(self._p))

    @property
    def phases(self):
        return int(lib.rumor_topology_phases(self._p))

    def edges(self, phase=0):
        return int(lib.rumor_topology_edges(self._p, phase))

    def neighbors(self, node, phase=0):
        """[(j, w_ij)] in ascending j."""
        count = ctypes.c_size_t()
        w = ctypes.POINTER(ctypes.c_double)()
        ids = lib.rumor_topology_neighbors(self._p, phase, node,
                                           ctypes.byref(count),
                                           ctypes.byref(w))
        return [(int(ids[k]), float(w[k])) for k in range(count.value)]

    def self_weight(self, node, phase=0):
        return float(lib.rumor_topology_self_weight(self._p, phase, node))

    def matrix(self, phase=0):
        """The mixing matrix W of a phase (numpy, n x n)."""
        import numpy as np
        n = self.nodes
        w = np.zeros((n, n), dtype=np.float64)
        lib.rumor_topology_matrix(self._p, phase,
                                  w.ctypes.data_as(ctypes.POINTER(
                                      ctypes.c_double)))
        return w

    def doubly_stochastic(self):
        return bool(lib.rumor_topology_doubly_stochastic(self._p))

    def spectral_gap(self):
        gap = ctypes.c_double()
        check(lib.rumor_topology_spectral_gap(self._p, ctypes.byref(gap)))
        return gap.value

    def endpoint(self, node):
        e = lib.rumor_topology_endpoint(self._p, node)
        return e.decode() if e else None

    def key(self, node):
        k = lib.rumor_topology_key(self._p, node)
        return k.decode() if k else None

    def set_node(self, node, endpoint=None, key=None):
        diag = _lib.Diag()
        check(lib.rumor_topology_set_node(
            self._p, node, enc(endpoint) if endpoint else None,
            enc(key) if key else None, ctypes.byref(diag)), diag)

    def _format(self, fn):
        buf = _lib.Buf()
        lib.rumor_buf_init(ctypes.byref(buf), 1 << 30)
        try:
            check(fn(self._p, ctypes.byref(buf)))
            return ctypes.string_at(buf.data, buf.len).decode()
        finally:
            lib.rumor_buf_free(ctypes.byref(buf))

    def text(self):
        """The topology file text (re-parsable)."""
        return self._format(lib.rumor_topology_format)

    def dot(self):
        """A Graphviz graph."""
        return self._format(lib.rumor_topology_format_dot)

    def save(self, path):
        with open(path, "w") as f:
            f.write(self.text())

    def __del__(self):
        if getattr(self, "_p", None):
            lib.rumor_topology_destroy(ctypes.byref(self._p))


def generate(kind, *args, seed=1):
    """generate("ring", 8), generate("torus", 4, 4), ... (kinds of `rumor
    topo gen`: ring torus complete star hypercube random-regular
    watts-strogatz exponential one-peer-exp)."""
    argv = (ctypes.c_char_p * max(len(args), 1))(*[enc(a) for a in args])
    return Topology._make(lib.rumor_topology_generate, enc(kind), argv,
                          len(args), seed)


def from_spec(spec, seed=1):
    """"ring:8", "torus:4x4", or a topology file path."""
    return Topology._make(lib.rumor_topology_from_spec, enc(spec), seed)


def load(path):
    return from_spec(path)


def parse(text, name="<string>"):
    data = enc(text)
    return Topology._make(lib.rumor_topology_parse, data, len(data),
                          enc(name))


def _bound_port():
    """A socket the kernel bound to a free port on 127.0.0.1: kept open
    until every node has its port, so that no two nodes get the same one
    (a port released at once can be handed out again by the next bind)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


def local(spec, directory, seed=1, insecure=False):
    """A topology for one machine, as `rumor topo gen --local`: endpoints
    on 127.0.0.1 at distinct free ports and (unless insecure) a CURVE
    keypair per node in DIRECTORY/keys/node-N.{key,pub}, with the public
    keys in the file DIRECTORY/topology.topo, whose path is returned.
    Node i's key base is DIRECTORY/keys/node-i."""
    t = from_spec(spec, seed) if not isinstance(spec, Topology) else spec
    os.makedirs(os.path.join(directory, "keys"), exist_ok=True)
    held = []
    try:
        for i in range(t.nodes):
            key = None
            if not insecure:
                base = os.path.join(directory, "keys", f"node-{i}")
                for ext in (".key", ".pub"):
                    if os.path.exists(base + ext):
                        os.unlink(base + ext)
                key = keygen(base)
            held.append(_bound_port())
            port = held[-1].getsockname()[1]
            t.set_node(i, f"tcp://127.0.0.1:{port}", key)
    finally:
        for s in held:
            s.close()
    path = os.path.join(directory, "topology.topo")
    t.save(path)
    return path
