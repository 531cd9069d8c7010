"""Vector codecs of compress/ (research use): the payloads gossip sends.

    c = rumor.Codec("qsgd:bits=4")
    payload = c.encode(x)              # bytes; x: float32 numpy or torch
    y = c.decode(payload, like=x)      # a new array / tensor like x
    c.decode(payload, out=y)           # or into y, zero-copy
"""
import ctypes

from . import _lib, _tensors
from ._lib import check, enc, lib


def _buffer(x, what):
    """(pointer, numel) of a float32 C-contiguous CPU tensor or array."""
    if _tensors.is_torch(x):
        import torch
        if x.dtype != torch.float32 or x.device.type != "cpu" or \
                not x.is_contiguous():
            raise TypeError(f"{what}: a contiguous float32 CPU tensor is "
                            f"needed (got {x.dtype} on {x.device})")
        return x.data_ptr(), x.numel()
    if _tensors.is_numpy(x):
        import numpy as np
        if x.dtype != np.float32 or not x.flags["C_CONTIGUOUS"]:
            raise TypeError(f"{what}: a C-contiguous float32 array is "
                            f"needed (got {x.dtype})")
        return x.ctypes.data, x.size
    raise TypeError(f"{what}: numpy.ndarray or torch.Tensor, not "
                    f"{type(x).__name__}")


class Codec:
    """A codec made from a spec string ("fp16", "qsgd:bits=4",
    "topk:ratio=0.01|fp16", ...; docs/gossip.md lists them)."""

    def __init__(self, spec):
        self._p = ctypes.c_void_p()
        diag = _lib.Diag()
        check(lib.rumor_codec_new(enc(spec), ctypes.byref(self._p),
                                  ctypes.byref(diag)), diag,
              f"codec {spec!r}")

    @property
    def spec(self):
        """The canonical spec, every parameter spelled out."""
        return lib.rumor_codec_spec(self._p).decode()

    def encoded_size(self, n):
        """(bytes, exact) for n elements: exact False means an upper
        bound."""
        size, exact = ctypes.c_size_t(), ctypes.c_bool()
        check(lib.rumor_codec_encoded_size(self._p, n, ctypes.byref(size),
                                           ctypes.byref(exact)))
        return size.value, exact.value

    def encode(self, x, seed=0, counter=0):
        """The payload of x (bytes). Stochastic codecs draw from (seed,
        counter): the same inputs give the same bytes on every machine."""
        ptr, n = _buffer(x, "encode")
        cap, _ = self.encoded_size(n)
        out = ctypes.create_string_buffer(max(cap, 1))
        written = ctypes.c_size_t()
        check(lib.rumor_codec_encode(self._p, ptr, n, seed, counter, out,
                                     cap, ctypes.byref(written), None),
              None, "encode")
        return out.raw[:written.value]

    def decode(self, payload, like=None, out=None):
        """Decodes into out (float32, zero-copy) or a new float32 array
        shaped like `like` (a torch tensor gives a torch tensor)."""
        if out is None:
            if like is None:
                raise ValueError("decode: give like= or out=")
            if _tensors.is_torch(like):
                import torch
                out = torch.empty(like.shape, dtype=torch.float32)
            else:
                import numpy as np
                out = np.empty(like.shape, dtype=np.float32)
        ptr, n = _buffer(out, "decode")
        data = bytes(payload)
        check(lib.rumor_codec_decode(self._p, data, len(data), ptr, n),
              None, "decode")
        return out

    def __del__(self):
        if getattr(self, "_p", None):
            lib.rumor_codec_destroy(ctypes.byref(self._p))
