"""pip install ./python (after `make` in the source tree).

No compiler runs here: the package is pure Python over ctypes, and
librumor.so, built by `make`, is copied into the installed package (from
$RUMOR_LIB, or ../build/lib/librumor.so next to this file). Without a
library there the package still installs and looks for one at import
($RUMOR_LIB, then next to the package).
"""
import os
import shutil

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
            print("rumor: no librumor.so found (run `make` first, or set "
                  "RUMOR_LIB); installing without it")
            return
        dest = os.path.join(self.build_lib, "rumor", "librumor.so")
        shutil.copyfile(lib, dest)
        print(f"rumor: bundled {lib}")


class BinaryDistribution(Distribution):
    """The wheel carries librumor.so: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(
    name="rumor",
    distclass=BinaryDistribution,
    version="0.1.0",
    description="Decentralized training for PyTorch loops (librumor, ctypes)",
    packages=["rumor"],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildPy},
    zip_safe=False,
)
