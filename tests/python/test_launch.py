"""`rumor launch ... -- python3 script.py`: one Python worker per node,
its identity in the environment (rumor.Peer.from_env), a killed worker
restarted with RUMOR_JOIN=1 (real processes, real sockets)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import rumor
from conftest import ROOT

RUMOR_BIN = os.path.abspath(os.environ.get(
    "RUMOR_BIN", os.path.join(ROOT, "build", "bin", "rumor")))
WORKER = os.path.join(ROOT, "tests", "data", "launch", "worker.py")


def launch(tmp_path, args, worker_args, path=None, timeout=120,
           worker=WORKER):
    if not os.access(RUMOR_BIN, os.X_OK):
        pytest.fail(f"no rumor binary at {RUMOR_BIN} (set RUMOR_BIN)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] +
        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    if env.get("RUMOR_LIB"):  # the workers run in tmp_path
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    run = tmp_path / "run"
    cmd = [RUMOR_BIN, "launch", "--metrics-dir", str(run)] + args + \
        ["--", sys.executable, worker] + worker_args
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=timeout)
    results = {}
    for line in p.stdout.splitlines():
        if "] RESULT " in line:
            r = json.loads(line.split("] RESULT ", 1)[1])
            results[r["id"]] = r
    return p, results, run


def test_launch_workers__identity_in_env__average_reached(tmp_path):
    p, results, run = launch(tmp_path, ["--nodes", "3", "--algo", "dpsgd"],
                             ["200"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(results) == [0, 1, 2]
    for i, r in results.items():
        env = r["env"]
        assert env["RUMOR_NODE_ID"] == str(i)
        assert env["RUMOR_NODES"] == "3"
        assert env["RUMOR_LOCAL_ID"] == str(i)  # all on this host
        assert env["RUMOR_TOPOLOGY"] == str(run.resolve() / "ring.topo")
        assert env["RUMOR_METRICS_DIR"] == str(run.resolve())
        assert env["RUMOR_KEY"] == str(run.resolve() / "keys" / f"node-{i}")
        assert os.path.exists(env["RUMOR_KEY"] + ".key")
        assert env["RUMOR_OPTIONS"] == "algo=dpsgd\n"
        assert (env["RUMOR_RESTART"], env["RUMOR_JOIN"]) == ("0", "0")
        assert r["steps"] == 200
        # a ring of 3 is complete: D-PSGD reaches the mean of 0, 1, 2
        assert r["value"] == pytest.approx(1.0, abs=1e-5)
        # the worker's output is stored as a node's
        assert "RESULT" in (run / f"node-{i}.log").read_text()


def test_launch_workers__kill9__restarted_with_join(tmp_path):
    p, results, _ = launch(tmp_path, ["--nodes", "4"], ["600", "2"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "node 2 killed by signal 9: restarting it with --join" in p.stdout
    assert "node 2 restarted with RUMOR_JOIN=1" in p.stdout
    assert sorted(results) == [0, 1, 2, 3]
    again = results[2]
    assert (again["env"]["RUMOR_RESTART"], again["env"]["RUMOR_JOIN"]) == \
        ("1", "1")
    assert again["first_step"] > 30  # joined at its neighbours' step
    values = [r["value"] for r in results.values()]
    for r in results.values():
        assert r["steps"] == 600
        assert r["spread"] < 1e-4
    # PowerGossip (the Peer's default) reached consensus after the join
    assert max(values) - min(values) < 1e-3, values


TORCH_WORKER = os.path.join(ROOT, "tests", "data", "launch",
                            "torch_worker.py")


def _torch_launch(tmp_path, algo, worker_args, steps=2000):
    """rumor.torch workers of a 4-node ring (a deadline of 2 s); node 2
    fails at step 30 as worker_args say (tests/data/launch/torch_worker.py)."""
    pytest.importorskip("torch")
    return launch(tmp_path, ["--nodes", "4", "--algo", algo,
                             "--deadline-ms", "2000"],
                  [str(steps), "2"] + worker_args, worker=TORCH_WORKER,
                  timeout=300)


def _same_model(p, results, steps):
    """Every worker ran every step and ends with the same parameters (the
    joiner's too); the survivors' longest step (the view change in it)
    stays within two deadlines."""
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(results) == [0, 1, 2, 3], p.stdout
    assert all(r["steps"] == steps for r in results.values())
    hashes = {r["hash"] for r in results.values()}
    assert len(hashes) == 1, results
    longest = max(results[i]["longest_step"] for i in (0, 1, 3))
    print(f"survivors' longest step {longest:.2f} s (deadline 2 s)")
    assert longest < 4.0, results


@pytest.mark.parametrize("algo", ["allreduce", "powersgd"])
def test_torch_workers__kill9_mid_run__restarted_into_the_ring(tmp_path,
                                                               algo):
    """The ring re-forms around a killed rumor.torch worker (gradient
    buckets during backward) and takes its restart back in: the joiner
    loads a member's model and optimizer state, and every worker ends with
    the same parameters, bit for bit."""
    p, results, _ = _torch_launch(tmp_path, algo, ["kill"])
    _same_model(p, results, 2000)
    assert "node 2 killed by signal 9: restarting it with --join" in p.stdout
    assert "took a member's model and optimizer state" in p.stdout, p.stdout
    assert results[2]["restart"] == "1" and results[2]["first_step"] >= 30
    # the loss of an undisturbed run of the same length
    (tmp_path / "u").mkdir()
    q, undisturbed, _ = launch(tmp_path / "u", ["--nodes", "4", "--algo",
                                                algo], ["2000", "-1"],
                               worker=TORCH_WORKER, timeout=300)
    _same_model(q, undisturbed, 2000)
    base = undisturbed[0]["loss"]
    print(f"{algo}: held-out loss undisturbed {base:.4f}, with the kill and "
          f"the rejoin {results[0]['loss']:.4f}; the joiner entered at step "
          f"{results[2]['first_step'] + 1}")
    assert results[0]["loss"] < base * 1.25 + 0.02, (results[0], base)
    if algo == "allreduce":
        # the step in flight was run again from the same inputs, and the
        # joiner computed its gradient of that step from the ring's model
        # on its batch of that step: nothing differs from the undisturbed
        # run (PowerSGD's joiner starts its error memory at zero)
        assert results[0]["hash"] == undisturbed[0]["hash"]


def test_torch_workers__restart_after_the_deadline__left_out_then_back(
        tmp_path):
    """A restart slower than the deadline: the survivors go on as a ring
    of three, then take the restarted worker back (exchange at the end of
    backward, powersgd)."""
    p, results, _ = _torch_launch(tmp_path, "powersgd", ["kill", "0", "4"])
    _same_model(p, results, 2000)
    assert "3 members (0 1 3)" in p.stdout, p.stdout
    assert "4 members (0 1 2+ 3)" in p.stdout, p.stdout
    assert results[2]["first_step"] > 31


def test_torch_workers__stalled_past_the_deadline__removed_and_readmitted(
        tmp_path):
    """SIGSTOP for 4 s (a 2 s deadline): the ring goes on without the
    stalled worker; when it wakes it asks to join again, and the step it
    wakes in gives it the ring's model and optimizer state."""
    p, results, _ = _torch_launch(tmp_path, "allreduce", ["stop"])
    _same_model(p, results, 2000)
    assert "3 members (0 1 3)" in p.stdout, p.stdout
    assert "removed from the ring at epoch 1: asking to join again" in \
        p.stdout
    assert results[2]["restart"] == "0"  # the same process throughout


def test_launch_workers__localsgd_kill9__joiner_takes_the_model(tmp_path):
    """rumor.Peer (numpy) with local SGD, whose tensors are the model: the
    restarted worker takes a member's model and ends at the consensus."""
    p, results, _ = launch(tmp_path, ["--nodes", "4", "--algo", "localsgd",
                                      "--deadline-ms", "2000"],
                           ["600", "2"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "node 2 restarted with RUMOR_JOIN=1" in p.stdout
    values = [r["value"] for r in results.values()]
    assert sorted(results) == [0, 1, 2, 3]
    assert max(values) - min(values) < 1e-6, values
    assert values[0] == pytest.approx(1.5, abs=1e-5)  # the mean of 0..3


def test_launch_workers__allreduce_joiner_without_state__says_what_to_do(
        tmp_path):
    """A plain rumor.Peer of a gradient exchange that never loads the
    ring's model (no save_state, no joined_state) would train another
    model: its next step refuses, saying what to do."""
    p, results, _ = launch(tmp_path, ["--nodes", "4", "--algo", "allreduce",
                                      "--deadline-ms", "2000", "--restart",
                                      "1"], ["600", "2"])
    assert p.returncode != 0
    assert "its tensors are gradients: load the ring's model first" in \
        p.stdout, p.stdout
    assert "peer.joined_state()" in p.stdout


def test_fashion_mnist_example__under_launch__trains(tmp_path):
    """The README's command, shortened: rumor.torch.GossipModel in real
    processes, its background exchange, default options."""
    if not os.access(RUMOR_BIN, os.X_OK):
        pytest.fail(f"no rumor binary at {RUMOR_BIN} (set RUMOR_BIN)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    p = subprocess.run(
        [RUMOR_BIN, "launch", "--nodes", "2", "--", sys.executable,
         os.path.join(ROOT, "examples", "fashion_mnist_cnn.py"), "--steps",
         "40", "--test-images", "1000"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    accs = [float(line.split("held-out accuracy ")[1].split()[0])
            for line in p.stdout.splitlines() if "held-out accuracy" in line]
    assert len(accs) == 2
    assert all(a > 0.5 for a in accs), accs  # 10 classes: chance is 0.1
    assert "after 40 steps" in p.stdout


def _write_cifar(path, n, rng):
    """n records of CIFAR-10's binary format; the label sets the colour of
    the image, so a few steps learn it."""
    labels = rng.integers(0, 10, n).astype(np.uint8)
    pixels = rng.integers(0, 16, (n, 3, 1024)).astype(np.int64)
    pixels[:, 0] += 26 * labels[:, None]   # red grows with the label
    pixels[:, 2] += 26 * (9 - labels[:, None])
    rec = np.concatenate([labels[:, None], pixels.reshape(n, 3072)], axis=1)
    path.write_bytes(rec.astype(np.uint8).tobytes())


def test_cifar10_example__synthetic_batches__trains(tmp_path):
    """examples/cifar10_resnet.py on a small synthetic file of CIFAR-10's
    binary format, under rumor launch: ResNet-20 with BatchNorm buffers
    averaged by GossipModel."""
    data = tmp_path / "cifar"
    data.mkdir()
    rng = np.random.default_rng(0)
    for k in (1, 2):
        _write_cifar(data / f"data_batch_{k}.bin", 200, rng)
    _write_cifar(data / "test_batch.bin", 200, rng)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    p = subprocess.run(
        [RUMOR_BIN, "launch", "--nodes", "2", "--", sys.executable,
         os.path.join(ROOT, "examples", "cifar10_resnet.py"), "--data",
         str(data), "--steps", "60", "--batch", "16", "--log-every", "10"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    accs = [float(line.split("held-out accuracy ")[1].split()[0])
            for line in p.stdout.splitlines() if "held-out accuracy" in line]
    assert len(accs) == 2 and "after 60 steps" in p.stdout
    assert all(a > 0.3 for a in accs), accs  # chance: 0.1
    assert "[node 0] step 10: loss" in p.stdout


def test_cifar10_example__not_cifar__says_what_is_wrong(tmp_path):
    (tmp_path / "data_batch_1.bin").write_bytes(b"x" * 1000)
    (tmp_path / "test_batch.bin").write_bytes(b"x" * 1000)
    p = subprocess.run([sys.executable, os.path.join(
        ROOT, "examples", "cifar10_resnet.py"), "--data", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert p.returncode != 0
    assert "not whole records of 3073 bytes" in p.stderr


@pytest.mark.parametrize("buffers", ["average", "local"])
def test_gossip_model_workers__batchnorm_buffers__as_documented(tmp_path,
                                                                buffers):
    """rumor.torch.GossipModel in real processes: averaged running
    statistics agree across nodes, local ones keep each node's data shift;
    num_batches_tracked stays local either way."""
    worker = os.path.join(ROOT, "tests", "data", "launch", "bn_worker.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    p = subprocess.run([RUMOR_BIN, "launch", "--nodes", "3", "--",
                        sys.executable, worker, buffers, "60"],
                       cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    results = [json.loads(line.split("] RESULT ", 1)[1])
               for line in p.stdout.splitlines() if "] RESULT " in line]
    assert len(results) == 3
    means = np.array([r["mean"] for r in results])
    spread = (means.max(0) - means.min(0)).max()
    if buffers == "average":
        assert spread < 0.3, spread
    else:
        assert spread > 1.0, spread
    assert all(r["tracked"] == 60 for r in results)
    assert "integer buffers stay local to each node: 1.num_batches_tracked" \
        in p.stdout


def _bucket_run(tmp_path, overlap):
    worker = os.path.join(ROOT, "tests", "data", "launch", "bucket_worker.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    run = tmp_path / overlap
    run.mkdir()
    p = subprocess.run([RUMOR_BIN, "launch", "--nodes", "3", "--",
                        sys.executable, worker, overlap, "30"],
                       cwd=run, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads((run / f"result-{i}.json").read_text())
            for i in range(3)]


def test_gradient_buckets__real_processes__same_model_as_end_of_backward(
        tmp_path):
    """All-reduce under rumor launch, 3 processes: with the gradients in
    buckets during backward every node ends with the same bits, and the
    model is the one the end-of-backward exchange gives (to float32
    roundings: a 3-node ring cuts its chunks per bucket)."""
    on, off = _bucket_run(tmp_path, "on"), _bucket_run(tmp_path, "off")
    assert all(r["buckets"] > 1 for r in on), [r["buckets"] for r in on]
    assert all(r["buckets"] == 0 for r in off)
    models = np.array([r["params"] for r in on])
    assert (models == models[0]).all()
    reference = np.array(off[0]["params"])
    assert np.abs(models[0] - reference).max() < 1e-5
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)  # the worker's initial model, built the same way
    init = torch.cat([q.detach().reshape(-1) for q in torch.nn.Sequential(
        torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
        torch.nn.Tanh(), torch.nn.Linear(64, 5)).parameters()]).numpy()
    assert np.abs(models[0] - init).max() > 1e-2  # it trained


def test_launch_workers__nothing_after_dashes__refused(tmp_path):
    p = subprocess.run([RUMOR_BIN, "launch", "--nodes", "2", "--"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 2
    assert "nothing after --" in p.stderr


def test_launch_nodes_and_topology__refused(tmp_path):
    p = subprocess.run([RUMOR_BIN, "launch", "--nodes", "2", "--topology",
                        "x.topo", "--", "true"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 2
    assert "--nodes and --topology exclude each other" in p.stderr


def test_launch_env__outside_launch__says_how_to_start():
    with pytest.raises(RuntimeError, match="rumor launch --nodes N"):
        rumor.launch_env(environ={})


def test_launch_env__script_and_launch_disagree__names_both():
    environ = {"RUMOR_TOPOLOGY": "/r/ring.topo", "RUMOR_NODE_ID": "1",
               "RUMOR_KEY": "/r/keys/node-1", "RUMOR_METRICS_DIR": "/r",
               "RUMOR_OPTIONS": "algo=choco\ngamma=0.5\n", "RUMOR_JOIN": "1"}
    with pytest.raises(ValueError, match="algo='dpsgd' in the script, "
                       "but `rumor launch` gave --algo choco"):
        rumor.launch_env(environ=environ, algo="dpsgd")
    got = rumor.launch_env(environ=environ, algo="choco", gamma=0.5,
                           join=False, deadline_ms=500)
    assert got["topology"] == "/r/ring.topo" and got["id"] == 1
    assert got["key"] == "/r/keys/node-1" and got["metrics-dir"] == "/r"
    assert got["algo"] == "choco" and got["gamma"] == 0.5
    # the script restored its own checkpoint: its join=False wins
    assert got["join"] is False and got["deadline-ms"] == 500


def _free_port_base(count):
    """A base port whose count ports are free on 127.0.0.1 now."""
    import random
    import socket
    for _ in range(100):
        base = random.randrange(20000, 60000 - count)
        socks = []
        try:
            for k in range(count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.fail("no free ports")


def test_slurm_worker__three_tasks__identity_in_env_and_consensus(tmp_path):
    """scripts/rumor-slurm.sh --worker under faked SLURM_* variables: each
    task runs the Python worker with the environment `rumor launch`
    gives."""
    base = _free_port_base(3)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    if env.get("RUMOR_LIB"):
        env["RUMOR_LIB"] = os.path.abspath(env["RUMOR_LIB"])
    env.update(SLURM_NTASKS="3", SLURM_JOB_NODELIST="localhost",
               SLURM_TASKS_PER_NODE="3", SLURM_JOB_ID="7", SLURM_STEP_ID="0")
    procs = []
    for i in range(3):
        env_i = dict(env, SLURM_PROCID=str(i), SLURM_LOCALID=str(i))
        procs.append(subprocess.Popen(
            ["sh", os.path.join(ROOT, "scripts", "rumor-slurm.sh"), "--dir",
             str(tmp_path / "shared"), "--rumor", RUMOR_BIN, "--port-base",
             str(base), "--worker", "--", sys.executable, WORKER, "100"],
            cwd=tmp_path, env=env_i, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    results = {}
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0, out
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    r = json.loads(line[7:])
                    results[r["id"]] = r
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sorted(results) == [0, 1, 2]
    run = tmp_path / "shared" / "7.0"
    for i, r in results.items():
        e = r["env"]
        assert (e["RUMOR_NODE_ID"], e["RUMOR_NODES"], e["RUMOR_LOCAL_ID"]) \
            == (str(i), "3", str(i))
        assert e["RUMOR_TOPOLOGY"] == str(run / f"topology-{i}")
        assert e["RUMOR_KEY"] == str(tmp_path / "shared" / "keys" / f"node-{i}")
        assert e["RUMOR_METRICS_DIR"] == str(run / "metrics")
        assert r["steps"] == 100
        assert r["value"] == pytest.approx(1.0, abs=1e-4)


def test_launch_hosts_workers__fake_ssh__identity_from_remote_dir(tmp_path):
    """--hosts with workers, through the fake ssh of the deploy tests
    (it runs the remote command here with sh -c): the key and topology
    travel on ssh's stdin into the remote directory, where the worker
    finds them."""
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "ssh"
    fake.write_text(open(os.path.join(ROOT, "tests", "data", "deploy",
                                      "fake-ssh")).read())
    fake.chmod(0o755)
    subprocess.run([RUMOR_BIN, "topo", "gen", "ring", "4", "--out",
                    str(tmp_path / "ring.topo")], check=True)
    (tmp_path / "hosts").write_text("localhost slots=2\n"
                                    "me@127.0.0.1 slots=2 addr=127.0.0.1\n")
    base = _free_port_base(4)
    p, results, run = launch(
        tmp_path, ["--hosts", "hosts", "--topology", "ring.topo",
                   "--base-port", str(base), "--algo", "dpsgd"], ["100"],
        path=tmp_path / "bin")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(results) == [0, 1, 2, 3]
    remote = run.resolve()  # --remote-dir defaults to the run directory
    for i, r in results.items():
        e = r["env"]
        assert e["RUMOR_NODE_ID"] == str(i)
        assert e["RUMOR_LOCAL_ID"] == str(i % 2)  # two slots per host
        assert e["RUMOR_TOPOLOGY"] == str(remote / f"topology-{i}")
        assert e["RUMOR_KEY"] == str(remote / f"node-{i}")
        assert e["RUMOR_OPTIONS"] == "algo=dpsgd\n"
        assert r["steps"] == 100
        assert r["value"] == pytest.approx(1.5, abs=1e-3)
