"""CURVE keypairs (the `rumor keygen` subcommand)."""
import ctypes

from ._lib import check, enc, lib


def keygen(base):
    """Writes BASE.key (mode 0600; an existing file is an error) and
    BASE.pub; returns the Z85 public key."""
    kp = ctypes.c_void_p()
    check(lib.rumor_net_keypair_generate(ctypes.byref(kp)), None, "keygen")
    try:
        check(lib.rumor_net_keypair_save(kp, enc(base)), None,
              f"keygen {base}")
        return lib.rumor_net_keypair_public(kp).decode()
    finally:
        lib.rumor_net_keypair_destroy(ctypes.byref(kp))


def public_key(base):
    """The Z85 public key of BASE.key."""
    kp = ctypes.c_void_p()
    check(lib.rumor_net_keypair_load(enc(base), ctypes.byref(kp)), None,
          f"{base}.key")
    try:
        return lib.rumor_net_keypair_public(kp).decode()
    finally:
        lib.rumor_net_keypair_destroy(ctypes.byref(kp))
