"""Shared set-up of the python/rumor tests: the package from the source
tree (python/), the library of the build under test ($RUMOR_LIB, set by
`make check`), and the `rumor` binary ($RUMOR_BIN) for comparisons."""
import os
import pathlib
import sys
import tempfile
import threading

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import rumor  # noqa: E402


@pytest.fixture
def tmp_path():
    """A temporary directory removed after the test (pytest's own keeps
    the last runs' directories, keys included)."""
    with tempfile.TemporaryDirectory(prefix="rumor-pytest-") as d:
        yield pathlib.Path(d)


@pytest.fixture
def local2(tmp_path):
    """A 2-node ring on loopback with CURVE keys: (topology, key bases)."""
    path = rumor.topology.local("ring:2", str(tmp_path))
    keys = [str(tmp_path / "keys" / f"node-{i}") for i in range(2)]
    return path, keys


def run_nodes(fns, timeout=60):
    """Runs fns[i]() in thread i (ctypes releases the GIL in C calls, so
    the nodes of a run gossip with each other inside one process); returns
    their results, re-raising the first exception."""
    results = [None] * len(fns)
    errors = [None] * len(fns)

    def body(i):
        try:
            results[i] = fns[i]()
        except BaseException as e:  # reported below
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,))
               for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a node thread did not finish in time"
    for e in errors:
        if e is not None:
            raise e
    return results
