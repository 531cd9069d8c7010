"""pip install ./python (after `make`, or `make install`, in the source tree).

No compiler runs here: the package is pure Python over ctypes. A build
tree's librumor.so (from $RUMOR_LIB, or ../build/lib/librumor.so next to
this file) is copied into the installed package. Without one the package
uses an installed Rumor's library (`make install`), found at import through
rumor.pc or the loader (rumor/_lib.py).

Nothing is written inside the source tree: setuptools' build and egg-info
folders go to a temporary directory, removed when the build ends.
"""
import atexit
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    for path in (os.environ.get("RUMOR_LIB"),
                 os.path.join(HERE, "..", "build", "lib", "librumor.so")):
        if path and os.path.exists(path):
            return path
    return None


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = _library()
        if lib is None:
            print("rumor: no build tree's librumor.so (RUMOR_LIB, "
                  "../build/lib): the package will load an installed "
                  "librumor.so.0 (make install) at import")
            return
        dest = os.path.join(self.build_lib, "rumor", "librumor.so")
        shutil.copyfile(lib, dest)
        print(f"rumor: bundled {lib}")


class BinaryDistribution(Distribution):
    """The wheel carries librumor.so: tag it for this platform."""

    def has_ext_modules(self):
        return True


_SCRATCH = tempfile.mkdtemp(prefix="rumor-setup-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)

setup(
    name="rumor",
    distclass=BinaryDistribution,
    version="0.1.0",
    description="Decentralized training for PyTorch loops (librumor, ctypes)",
    packages=["rumor"],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildPy},
    options={"build": {"build_base": os.path.join(_SCRATCH, "build")},
             "egg_info": {"egg_base": _SCRATCH}},
    zip_safe=False,
)
