"""Datasets through the binding: IDX files written here with Python's own
gzip and struct modules (a writer independent of the C reader) load as
Fashion-MNIST or MNIST, .gz or plain; the t10k files are the held-out set;
a missing directory raises an error that says what to install."""
import gzip
import os
import struct

import pytest

import rumor

PACKAGE = "/usr/share/datasets/fashion-mnist"


def _idx(directory, prefix, n, compress):
    """Writes PREFIX-images-idx3-ubyte and -labels-idx1-ubyte (4 x 4
    images) of n samples; returns their paths."""
    images = struct.pack(">IIII", 0x803, n, 4, 4) + bytes(
        (i * 7 + j) % 256 for i in range(n) for j in range(16))
    labels = struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
    paths = []
    for kind, data in (("images-idx3", images), ("labels-idx1", labels)):
        path = os.path.join(directory, f"{prefix}-{kind}-ubyte")
        if compress:
            path += ".gz"
            data = gzip.compress(data)
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    return paths


def _sizes(topo, dataset):
    w = rumor.Workload(topology=topo, node_id=0, dataset=dataset)
    try:
        return w.sizes
    finally:
        w.close()


def test_fashion_mnist_dir__t10k_files__are_the_held_out_set(tmp_path):
    topo = rumor.topology.local("ring:2", str(tmp_path / "run"))
    data = tmp_path / "fmnist"
    data.mkdir()
    _idx(str(data), "train", 40, compress=True)
    _idx(str(data), "t10k", 10, compress=False)
    assert _sizes(topo, f"fashion-mnist:{data}") == (20, 10)
    # without the t10k files, test_fraction (0.2) of the training files
    for name in os.listdir(data):
        if name.startswith("t10k"):
            os.unlink(data / name)
    assert _sizes(topo, f"fashion-mnist:{data}") == (16, 8)


def test_mnist_pair__gz_and_plain__same_training(tmp_path):
    topo = rumor.topology.local("ring:2", str(tmp_path / "run"))
    gz = _idx(str(tmp_path), "train", 30, compress=True)
    plain = _idx(str(tmp_path), "train", 30, compress=False)
    losses = []
    for images, labels in (gz, plain):
        w = rumor.Workload(topology=topo, node_id=1,
                           dataset=f"mnist:{images},{labels}")
        losses.append(w.grad(0))
        w.close()
    assert losses[0] == losses[1]


def test_fashion_mnist__missing_dir__says_what_to_install(tmp_path):
    topo = rumor.topology.local("ring:2", str(tmp_path / "run"))
    with pytest.raises(rumor.RumorError,
                       match="install the Debian package "
                             "dataset-fashion-mnist or pass "
                             "fashion-mnist:DIR"):
        rumor.Workload(topology=topo, node_id=0,
                       dataset=f"fashion-mnist:{tmp_path}/none")


@pytest.mark.skipif(
    not os.path.exists(os.path.join(PACKAGE, "t10k-labels-idx1-ubyte.gz")),
    reason="Debian package dataset-fashion-mnist not installed")
def test_fashion_mnist__debian_package__official_split(tmp_path):
    topo = rumor.topology.local("ring:2", str(tmp_path / "run"))
    assert _sizes(topo, "fashion-mnist") == (30000, 10000)
