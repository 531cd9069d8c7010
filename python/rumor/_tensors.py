"""Caller tensors (PyTorch tensors and numpy arrays) as struct
rumor_peer_tensor, by data pointer: nothing is copied here.

Accepted: float32, float64, float16 and bfloat16 (torch only; numpy has
none), C-contiguous, on the CPU or, in a CUDA build of librumor, on a CUDA
device. Everything else raises TypeError or ValueError naming the tensor
and the reason, before any C call.
"""
from . import _lib

try:
    import torch
except ImportError:  # numpy-only use
    torch = None
try:
    import numpy as np
except ImportError:
    np = None

_TORCH_DTYPES = {}
if torch is not None:
    _TORCH_DTYPES = {torch.float32: _lib.DTYPE_F32,
                     torch.float64: _lib.DTYPE_F64,
                     torch.float16: _lib.DTYPE_F16,
                     torch.bfloat16: _lib.DTYPE_BF16}
_NUMPY_DTYPES = {}
if np is not None:
    _NUMPY_DTYPES = {np.dtype(np.float32): _lib.DTYPE_F32,
                     np.dtype(np.float64): _lib.DTYPE_F64,
                     np.dtype(np.float16): _lib.DTYPE_F16}

ACCEPTED = "float32, float64, float16, bfloat16 (torch)"


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x):
    return np is not None and isinstance(x, np.ndarray)


def tensor_list(tensors):
    """A list from model.parameters(), a module, a list or one tensor."""
    if hasattr(tensors, "parameters") and callable(tensors.parameters):
        tensors = tensors.parameters()
    if is_torch(tensors) or is_numpy(tensors):
        return [tensors]
    return list(tensors)


def describe(x, k):
    """(struct rumor_peer_tensor, signature) for tensor k; raises on a
    dtype, layout or device the binding refuses."""
    if is_torch(x):
        dtype = _TORCH_DTYPES.get(x.dtype)
        if dtype is None:
            raise TypeError(f"tensor {k}: dtype {x.dtype} is not supported "
                            f"(accepted: {ACCEPTED})")
        if not x.is_contiguous():
            raise ValueError(f"tensor {k}: not contiguous (call "
                             ".contiguous() and keep that tensor)")
        if x.device.type == "cpu":
            device = _lib.DEVICE_CPU
        elif x.device.type == "cuda":
            if not _lib.cuda_built():
                raise RuntimeError(
                    f"tensor {k} is on {x.device}, but librumor was built "
                    "without CUDA (rebuild with nvcc: make USE_CUDA=yes), "
                    "or move the model to the CPU")
            device = _lib.DEVICE_CUDA
        else:
            raise ValueError(f"tensor {k}: device {x.device} is not "
                             "supported (cpu, cuda)")
        ptr, shape = x.data_ptr(), tuple(x.shape)
    elif is_numpy(x):
        dtype = _NUMPY_DTYPES.get(x.dtype)
        if dtype is None:
            raise TypeError(f"array {k}: dtype {x.dtype} is not supported "
                            "(accepted: float32, float64, float16)")
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError(f"array {k}: not C-contiguous (use "
                             "np.ascontiguousarray and keep that array)")
        if not x.flags["WRITEABLE"]:
            raise ValueError(f"array {k}: read-only; gossip writes into it")
        device = _lib.DEVICE_CPU
        ptr, shape = x.ctypes.data, tuple(x.shape)
    else:
        raise TypeError(f"tensor {k}: a torch.Tensor or numpy.ndarray is "
                        f"needed, not {type(x).__name__}")
    if len(shape) > _lib.MAX_DIMS:
        raise ValueError(f"tensor {k}: {len(shape)} dimensions (at most "
                         f"{_lib.MAX_DIMS})")
    pt = _lib.PeerTensor()
    pt.data = ptr
    pt.dtype = dtype
    pt.device = device
    pt.ndim = len(shape)
    for d, s in enumerate(shape):
        pt.shape[d] = s
    return pt, (ptr, dtype, device, shape)
