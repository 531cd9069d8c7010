#!/usr/bin/python3
"""The device codecs' speed (issue 31, step 3 of bench/gpu/run.sh): each
codec's encode (rumor_codec_encode_device: the payload assembled on the
GPU and copied once into pinned host memory) and decode-and-add
(rumor_codec_decode_add_device: the payload copied to the GPU once and
added into y) of N float32 values in GPU memory, in GB/s of the values
read (4 N bytes over the median time), against two references measured
in the same run: the device-to-device copy rate (bytes read + written, as
bench/gpu/lowrank_gpu.c quotes it) and PyTorch on the same tensor
(`x.half()` for fp16, `torch.topk(x.abs(), k)` for top-k; device work
alone, its result not copied to the host, which ours includes).

Each encode is checked first against the CPU codec on the same values:
the payloads must be byte-equal (every codec here is exact or draws the
CPU's Philox stream), and a decode_add of it must equal the CPU's decode.

usage: python3 bench/gpu/codec_gpu.py [N] [REPS]   (on the GPU host; N
defaults to 100 M). Prints one line per codec and 'codec_gpu: N failed'.
"""

import ctypes
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import rumor  # noqa: E402
from rumor._lib import lib  # noqa: E402

SPECS = ["fp16", "bf16", "sign", "natural", "qsgd:bits=4", "qsgd:bits=8",
         "terngrad", "randk:ratio=0.01", "topk:ratio=0.01",
         "topk:ratio=0.01|fp16", "threshold:t=0.02", "dgc:ratio=0.01", "fp8", "fp4"]

VP, SZ, U64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
lib.rumor_codec_encode_device.argtypes = [VP, VP, SZ, U64, U64, VP, SZ,
                                          ctypes.POINTER(SZ), VP]
lib.rumor_codec_decode_add_device.argtypes = [VP, VP, SZ, ctypes.c_float,
                                              VP, SZ, VP]
lib.rumor_codec_encode_device.restype = ctypes.c_int
lib.rumor_codec_decode_add_device.restype = ctypes.c_int


def median_seconds(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def copy_gbps(x, reps):
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / median_seconds(lambda: y.copy_(x), reps) / 1e9


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {lib.rumor_strerror(rc).decode()}")


def bench(spec, x, reps):
    """(encode GB/s, decode GB/s, payload bytes, byte-equal to the CPU)"""
    codec = rumor.Codec(spec)
    n = x.numel()
    cap, _ = codec.encoded_size(n)
    out = torch.empty(cap, dtype=torch.uint8, pin_memory=True)
    written = SZ()
    y = torch.zeros_like(x)

    def encode():
        check(lib.rumor_codec_encode_device(
            codec._p, x.data_ptr(), n, 7, 3, out.data_ptr(), cap,
            ctypes.byref(written), None), spec)

    def decode():
        check(lib.rumor_codec_decode_add_device(
            codec._p, out.data_ptr(), written.value, 1.0, y.data_ptr(), n,
            None), spec)

    t_enc = median_seconds(encode, reps)
    payload = bytes(out[:written.value].numpy())
    host = x.cpu()
    same = payload == codec.encode(host, seed=7, counter=3)
    y.zero_()
    decode()
    same = same and torch.equal(y.cpu(), codec.decode(payload, like=host))
    t_dec = median_seconds(decode, reps)
    return 4 * n / t_enc / 1e9, 4 * n / t_dec / 1e9, written.value, same


def torch_gbps(spec, x, reps):
    if spec == "fp16":
        return 4 * x.numel() / median_seconds(x.half, reps) / 1e9
    if spec == "topk:ratio=0.01":
        k = x.numel() // 100
        return 4 * x.numel() / median_seconds(
            lambda: torch.topk(x.abs(), k, sorted=False), reps) / 1e9
    return None


def main():
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=g) * 0.01
    copy = copy_gbps(x, reps)
    print(f"codecs on {torch.cuda.get_device_name(0)}, {n} float32 values; "
          f"device-to-device copy {copy:.1f} GB/s (read + written)")
    print(f"{'codec':22} {'encode GB/s':>11} {'x copy':>7} {'decode GB/s':>11} "
          f"{'payload B':>11} {'torch GB/s':>10} {'x torch':>7}  cpu bytes")
    failed = 0
    for spec in SPECS:
        try:
            enc, dec, size, same = bench(spec, x, reps)
        except RuntimeError as e:
            print(f"{spec:22} FAILED: {e}")
            failed += 1
            continue
        ref = torch_gbps(spec, x, reps)
        vs = f"{ref:10.1f} {enc / ref:6.2f}x" if ref else f"{'-':>10} {'-':>7}"
        print(f"{spec:22} {enc:11.1f} {enc / copy:6.2f}x {dec:11.1f} "
              f"{size:11d} {vs}  {'equal' if same else 'DIFFERENT'}",
              flush=True)
        failed += not same
    print(f"codec_gpu: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
