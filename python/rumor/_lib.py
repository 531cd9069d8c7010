"""Loading librumor.so and declaring the C functions the package calls.

The library is found, in order, at $RUMOR_LIB, next to this file (where
`pip install ./python` copies a build tree's library), in the source tree's
build/lib (this file's ../../build/lib), in the libdir of an installed
Rumor's rumor.pc (`make install`), and by the loader's own search for
librumor.so.0. Every C call that returns a rumor_err goes
through check(), which raises RumorError carrying the C message: the
rumor_diag text when the call filled one, rumor_strerror otherwise.
"""
import ctypes
import os
import subprocess
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double,
                    c_int, c_size_t, c_uint32, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))
MAX_DIMS = 8  # RUMOR_GOSSIP_MAX_DIMS
DIAG_TEXT_BYTES = 256  # RUMOR_DIAG_TEXT_BYTES

# rumor_dtype
DTYPE_F32, DTYPE_F64, DTYPE_F16, DTYPE_BF16 = 0, 1, 2, 3
# rumor_device
DEVICE_CPU, DEVICE_CUDA = 0, 1


class RumorError(Exception):
    """A C call failed. code: the rumor_err value; errname: its symbol
    ("RUMOR_EINVAL"); message: the C library's own text."""

    def __init__(self, code, message, errname=None):
        self.code = code
        self.errname = errname or "RUMOR_E?"
        self.message = message
        super().__init__(f"{message} [{self.errname}]")


RumorError.__module__ = "rumor"  # as users import it


class Diag(Structure):
    _fields_ = [("file", c_char * DIAG_TEXT_BYTES), ("line", c_int),
                ("col", c_int), ("msg", c_char * DIAG_TEXT_BYTES)]


class Tensor(Structure):  # struct rumor_tensor
    _fields_ = [("data", POINTER(ctypes.c_float)), ("ndim", c_size_t),
                ("shape", c_size_t * MAX_DIMS)]


class Model(Structure):  # struct rumor_model
    _fields_ = [("tensors", POINTER(Tensor)), ("count", c_size_t)]


class PeerTensor(Structure):  # struct rumor_peer_tensor
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("device", c_int),
                ("ndim", c_size_t), ("shape", c_size_t * MAX_DIMS)]


class PeerBucket(Structure):  # struct rumor_peer_bucket
    _fields_ = [("first", c_size_t), ("count", c_size_t)]


class PeerStats(Structure):  # struct rumor_peer_stats
    _fields_ = [(n, c_uint64) for n in (
        "steps", "bytes_sent", "bytes_recv", "gossip_bytes_sent",
        "gossip_bytes_recv", "gossip_frames_sent")] + [
        (n, c_double) for n in ("seconds", "seconds_gossip", "seconds_wait",
                                "seconds_copy")] + [
        (n, c_uint64) for n in ("pcie_h2d_bytes", "pcie_d2h_bytes")]


class Eval(Structure):  # struct rumor_eval
    _fields_ = [("loss", c_double), ("accuracy", c_double), ("n", c_size_t)]


class Buf(Structure):  # rumor_buf
    _fields_ = [("data", POINTER(ctypes.c_uint8)), ("len", c_size_t),
                ("alloc", c_size_t), ("cap", c_size_t)]


# rumor_peer_state_fn: appends the caller's state to a rumor_buf
STATE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(Buf))

SONAME = "librumor.so.0"


def _installed_libdir():
    """The libdir of an installed Rumor (`make install`), from its rumor.pc;
    None when pkg-config or the .pc file is absent."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "rumor"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _candidates():
    env = os.environ.get("RUMOR_LIB")
    if env:
        yield env
    yield os.path.join(_HERE, "librumor.so")
    yield os.path.normpath(os.path.join(_HERE, "..", "..", "build", "lib",
                                        "librumor.so"))
    libdir = _installed_libdir()
    if libdir:
        yield os.path.join(libdir, SONAME)


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path), path
        tried.append(path)
    try:  # the loader's own search: LD_LIBRARY_PATH, ld.so.cache, /usr/lib
        return ctypes.CDLL(SONAME), SONAME
    except OSError:
        tried.append(SONAME + " (loader search path)")
    raise ImportError(
        "rumor: librumor.so not found (looked at: " + ", ".join(tried) +
        "). Build it with `make` in the Rumor source tree, install it with "
        "`make install`, or set RUMOR_LIB=/path/to/librumor.so")


lib, path = _load()

# (name, restype, argtypes); restype int = rumor_err
_P = c_void_p
_PP = POINTER(c_void_p)
_DIAG = POINTER(Diag)
_PROTOS = [
    ("rumor_strerror", c_char_p, [c_int]),
    ("rumor_errname", c_char_p, [c_int]),
    ("rumor_diag_format", None, [_DIAG, c_char_p, c_size_t]),
    ("rumor_version", c_char_p, []),
    ("rumor_cuda_built", c_bool, []),
    ("rumor_cuda_device_count", c_int, [POINTER(c_char_p)]),
    ("rumor_log_set_level", None, [c_int]),
    # options
    ("rumor_node_config_new", c_int, [_PP]),
    ("rumor_node_config_destroy", None, [_PP]),
    ("rumor_node_config_opts", _P, [_P]),
    ("rumor_node_config_set", c_int, [_P, c_char_p, c_char_p, _DIAG]),
    ("rumor_node_config_check", c_int, [_P, _DIAG]),
    ("rumor_node_config_load", c_int, [_P, c_char_p, _DIAG]),
    ("rumor_node_opts_gradient_exchange", c_bool, [_P]),
    ("rumor_node_opts_known", c_bool, [c_char_p]),
    # peer
    ("rumor_peer_new", c_int, [_P, POINTER(PeerTensor), c_size_t, _PP,
                               _DIAG]),
    ("rumor_peer_destroy", None, [_PP]),
    ("rumor_peer_gossip", c_int, [_P, _DIAG]),
    ("rumor_peer_buckets_set", c_int, [_P, POINTER(PeerBucket), c_size_t,
                                       _DIAG]),
    ("rumor_peer_buckets", c_size_t, [_P]),
    ("rumor_peer_gossip_bucket", c_int, [_P, c_size_t, _DIAG]),
    ("rumor_peer_step_ahead", c_int, [_P, _DIAG]),
    ("rumor_peer_looks_ahead", c_bool, [_P]),
    ("rumor_peer_stop", None, [_P]),
    ("rumor_peer_stopped", c_bool, [_P]),
    ("rumor_peer_average", c_int, [_P, _DIAG]),
    ("rumor_peer_report", c_int, [_P, c_double, c_double, c_double]),
    ("rumor_peer_stats", None, [_P, POINTER(PeerStats)]),
    ("rumor_peer_set_stream", c_int, [_P, c_void_p, _DIAG]),
    ("rumor_peer_nodes", c_uint32, [_P]),
    ("rumor_peer_state_source", None, [_P, STATE_FN, c_void_p]),
    ("rumor_peer_joined", c_bool, [_P, POINTER(POINTER(ctypes.c_uint8)),
                                   POINTER(c_size_t)]),
    ("rumor_peer_join", c_int, [_P, _DIAG]),
    ("rumor_peer_flush", c_int, [_P, _DIAG]),
    ("rumor_peer_in_flight", c_bool, [_P]),
    ("rumor_peer_stale", c_uint32, [_P]),
    ("rumor_buf_append", c_int, [POINTER(Buf), c_void_p, c_size_t]),
    # workloads
    ("rumor_node_workload_new", c_int, [_P, _PP, _DIAG]),
    ("rumor_workload_destroy", None, [_PP]),
    ("rumor_workload_model", POINTER(Model), [_P]),
    ("rumor_workload_grad", c_int, [_P, c_uint64, POINTER(Model),
                                    POINTER(c_double)]),
    ("rumor_workload_eval", c_int, [_P, POINTER(Model), c_int,
                                    POINTER(Eval)]),
    ("rumor_workload_train_size", c_size_t, [_P]),
    ("rumor_workload_test_size", c_size_t, [_P]),
    ("rumor_model_clone", c_int, [POINTER(Model), POINTER(POINTER(Model))]),
    ("rumor_model_free", None, [POINTER(POINTER(Model))]),
    # topology
    ("rumor_topology_generate", c_int, [c_char_p, POINTER(c_char_p),
                                        c_size_t, c_uint64, _PP, _DIAG]),
    ("rumor_topology_from_spec", c_int, [c_char_p, c_uint64, _PP, _DIAG]),
    ("rumor_topology_parse", c_int, [c_char_p, c_size_t, c_char_p, _PP,
                                     _DIAG]),
    ("rumor_topology_destroy", None, [_PP]),
    ("rumor_topology_nodes", c_size_t, [_P]),
    ("rumor_topology_phases", c_size_t, [_P]),
    ("rumor_topology_edges", c_size_t, [_P, c_size_t]),
    ("rumor_topology_neighbors", POINTER(c_uint32),
     [_P, c_size_t, c_size_t, POINTER(c_size_t),
      POINTER(POINTER(c_double))]),
    ("rumor_topology_self_weight", c_double, [_P, c_size_t, c_size_t]),
    ("rumor_topology_endpoint", c_char_p, [_P, c_size_t]),
    ("rumor_topology_key", c_char_p, [_P, c_size_t]),
    ("rumor_topology_set_node", c_int, [_P, c_size_t, c_char_p, c_char_p,
                                        _DIAG]),
    ("rumor_topology_matrix", None, [_P, c_size_t, POINTER(c_double)]),
    ("rumor_topology_doubly_stochastic", c_bool, [_P]),
    ("rumor_topology_spectral_gap", c_int, [_P, POINTER(c_double)]),
    ("rumor_topology_format", c_int, [_P, POINTER(Buf)]),
    ("rumor_topology_format_dot", c_int, [_P, POINTER(Buf)]),
    ("rumor_buf_init", None, [POINTER(Buf), c_size_t]),
    ("rumor_buf_free", None, [POINTER(Buf)]),
    # keys
    ("rumor_net_keypair_generate", c_int, [_PP]),
    ("rumor_net_keypair_load", c_int, [c_char_p, _PP]),
    ("rumor_net_keypair_save", c_int, [_P, c_char_p]),
    ("rumor_net_keypair_public", c_char_p, [_P]),
    ("rumor_net_keypair_destroy", None, [_PP]),
    # codecs
    ("rumor_codec_new", c_int, [c_char_p, _PP, _DIAG]),
    ("rumor_codec_destroy", None, [_PP]),
    ("rumor_codec_spec", c_char_p, [_P]),
    ("rumor_codec_encoded_size", c_int, [_P, c_size_t, POINTER(c_size_t),
                                         POINTER(c_bool)]),
    ("rumor_codec_encode", c_int, [_P, c_void_p, c_size_t, c_uint64,
                                   c_uint64, c_void_p, c_size_t,
                                   POINTER(c_size_t), c_void_p]),
    ("rumor_codec_decode", c_int, [_P, c_void_p, c_size_t, c_void_p,
                                   c_size_t]),
]

for _name, _res, _args in _PROTOS:
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def has(name):
    """True when the loaded library exports name (optional features)."""
    return hasattr(lib, name)


def enc(text):
    return str(text).encode()


def check(rc, diag=None, what=None):
    """Raises RumorError for a failed call: the diag's text when the call
    filled it, else rumor_strerror(rc); what, when given, is prefixed."""
    if rc == 0:
        return
    msg = ""
    if diag is not None and diag.msg[:1] != b"":
        out = ctypes.create_string_buffer(2 * DIAG_TEXT_BYTES + 16)
        lib.rumor_diag_format(ctypes.byref(diag), out, len(out))
        msg = out.value.decode(errors="replace")
    if not msg:
        msg = lib.rumor_strerror(rc).decode()
    if what:
        msg = f"{what}: {msg}"
    raise RumorError(rc, msg, lib.rumor_errname(rc).decode())


def cuda_built():
    return bool(lib.rumor_cuda_built())


def version():
    return lib.rumor_version().decode()
