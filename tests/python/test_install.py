"""`make install` and `pip install ./python` as a user runs them.

`make check` installs its build into $RUMOR_STAGE (DESTDIR, PREFIX
$RUMOR_PREFIX). A small C program is built against that tree with nothing
but pkg-config, and must give the ring's spectral gap that numpy computes
independently; the Python package is installed into a fresh venv from the
source tree, must leave nothing behind there, and must find an installed
library when no build tree's library is bundled."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
STAGE = os.environ.get("RUMOR_STAGE")
PREFIX = os.environ.get("RUMOR_PREFIX", "/usr/local")
LIBDIR = os.environ.get("RUMOR_LIBDIR", PREFIX + "/lib")
PROGRAM = os.path.join(ROOT, "tests", "data", "install", "installed_api.c")

pytestmark = [
    pytest.mark.skipif(not STAGE, reason="RUMOR_STAGE unset: `make check` "
                       "installs its build there and sets it"),
    pytest.mark.skipif(bool(os.environ.get("RUMOR_SAN")), reason="a "
                       "sanitizer build's library needs its runtime linked "
                       "into every program that loads it"),
]


def _staged(path):
    return os.path.join(os.path.abspath(STAGE), path.lstrip("/"))


def _pkg_config(*args):
    env = dict(os.environ, PKG_CONFIG_PATH=_staged(LIBDIR + "/pkgconfig"))
    out = subprocess.run(["pkg-config", "--define-prefix", *args, "rumor"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def _ring_gap(n):
    """1 - max(|lambda_2|, |lambda_n|) of the ring's Metropolis matrix
    (every weight 1/3), by numpy's eigensolver."""
    w = np.zeros((n, n))
    for i in range(n):
        w[i, i] = w[i, (i + 1) % n] = w[i, (i - 1) % n] = 1 / 3
    lam = np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1]
    return 1 - lam[1]


def _run_program(tmp_path, link, env=None):
    exe = str(tmp_path / "installed_api")
    cflags = _pkg_config("--cflags")
    subprocess.run(["cc", PROGRAM, *cflags, *link, "-o", exe], check=True)
    out = subprocess.run([exe, "ring:8"], env=env, capture_output=True,
                         text=True, check=True)
    version, nodes, gap = out.stdout.split()
    return version, int(nodes), float(gap)


def test_install__shared_library__program_builds_with_pkg_config(tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH=_staged(LIBDIR))
    version, nodes, gap = _run_program(tmp_path, _pkg_config("--libs"), env)
    assert version == "0.1.0"
    assert nodes == 8
    assert gap == pytest.approx(_ring_gap(8), abs=1e-12)


def test_install__static_library__links_with_pkg_config_static(tmp_path):
    libs = _pkg_config("--static", "--libs")
    static = [f for f in libs if f != "-lrumor"]
    link = ["-Wl,-Bstatic", "-lrumor", "-Wl,-Bdynamic", *static]
    _, nodes, gap = _run_program(tmp_path, link)
    assert nodes == 8
    assert gap == pytest.approx(_ring_gap(8), abs=1e-12)


def _tree(folder):
    """Every file under folder, as paths relative to it."""
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, files in os.walk(folder) for f in files)


def test_install__headers_and_soname_links__all_installed():
    lib = _staged(LIBDIR)
    assert os.readlink(os.path.join(lib, "librumor.so")) == "librumor.so.0"
    assert os.path.exists(os.path.join(lib, "librumor.so.0"))
    headers = _tree(os.path.join(ROOT, "include", "rumor"))
    installed = _tree(_staged(PREFIX + "/include/rumor"))
    assert installed == headers
    assert any(os.sep in h for h in headers), "a module header's parts"
    assert os.access(_staged(PREFIX + "/bin/rumor"), os.X_OK)


def _ignored_in(folder):
    out = subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                          "--ignored", "--", folder],
                         capture_output=True, text=True, check=True)
    return sorted(line for line in out.stdout.splitlines()
                  if line.startswith("!!") and "__pycache__" not in line)


@pytest.fixture
def venv(tmp_path):
    path = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv",
                    "--system-site-packages", str(path)], check=True)
    return path


def _pip_install(venv, source, env):
    subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index",
                    "--no-build-isolation", "-q", source], env=env,
                   check=True, cwd=venv)


def _import_rumor(venv, env):
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import rumor, rumor._lib as l; "
                          "print(rumor.version(), l.path)"],
                         env=env, capture_output=True, text=True,
                         check=True, cwd=venv)
    return out.stdout.split()


def test_pip_install__source_tree__nothing_left_behind(venv):
    before = _ignored_in("python")
    env = {k: v for k, v in os.environ.items() if k != "RUMOR_LIB"}
    env["RUMOR_LIB"] = os.path.abspath(os.environ["RUMOR_LIB"])
    _pip_install(venv, os.path.join(ROOT, "python"), env)
    assert _ignored_in("python") == before
    version, path = _import_rumor(venv, {"PATH": os.environ["PATH"]})
    assert version == "0.1.0"
    assert path.startswith(str(venv)), "the build's library is bundled"


def test_pip_install__no_build_tree__finds_installed_library(venv,
                                                             tmp_path):
    source = tmp_path / "python"  # a copy with no ../build/lib beside it
    shutil.copytree(os.path.join(ROOT, "python"), source,
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    _pip_install(venv, str(source), env)
    env["PKG_CONFIG_PATH"] = _staged(LIBDIR + "/pkgconfig")
    env_loader = dict(env, LD_LIBRARY_PATH=_staged(LIBDIR))
    # rumor.pc names the libdir under the prefix, not under the stage, so
    # the loader's search (as after `make install` and ldconfig) finds it.
    version, path = _import_rumor(venv, env_loader)
    assert version == "0.1.0"
    assert path == "librumor.so.0"
    if _loader_finds_installed():
        return  # a Rumor installed on this machine would be found too
    with pytest.raises(subprocess.CalledProcessError) as err:
        _import_rumor(venv, env)
    assert "make install" in err.value.stderr


def _loader_finds_installed():
    try:
        ctypes.CDLL("librumor.so.0")
    except OSError:
        return False
    return True
