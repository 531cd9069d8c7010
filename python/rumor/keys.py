"""Node identities (the `rumor keygen` subcommand): an Ed25519 signing key
from which the node's CURVE keypair is derived; the public key is listed as
"ed25519:" + Z85."""
import ctypes

from ._lib import check, enc, lib


def keygen(base):
    """Writes BASE.key (mode 0600; an existing file is an error) and
    BASE.pub; returns the listed public key (ed25519:Z85)."""
    kp = ctypes.c_void_p()
    check(lib.rumor_net_keypair_generate(ctypes.byref(kp)), None, "keygen")
    try:
        check(lib.rumor_net_keypair_save(kp, enc(base)), None,
              f"keygen {base}")
        return lib.rumor_net_keypair_public(kp).decode()
    finally:
        lib.rumor_net_keypair_destroy(ctypes.byref(kp))


def public_key(base):
    """The listed public key (ed25519:Z85) of BASE.key."""
    kp = ctypes.c_void_p()
    check(lib.rumor_net_keypair_load(enc(base), ctypes.byref(kp)), None,
          f"{base}.key")
    try:
        return lib.rumor_net_keypair_public(kp).decode()
    finally:
        lib.rumor_net_keypair_destroy(ctypes.byref(kp))
