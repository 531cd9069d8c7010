"""Peer: Rumor's decentralized averaging inside a PyTorch training loop.

    peer = rumor.Peer(topology="ring.topo", node_id=rank, key="keys/node-3",
                      algo="powergossip", rank=1)
    for step, (x, y) in enumerate(loader):
        ...; optimizer.step()
        peer.gossip(model.parameters())

The C side (rumor_peer_*, node/peer.c) is the `rumor node` runtime on the
caller's tensors: the same options, transport, deadlines and byte counts.
"""
import ctypes
import logging
import math
import os
import sys

from . import _lib, _tensors
from ._lib import check, enc, lib

log = logging.getLogger("rumor")

# Python names that are not `rumor node` names with '_' for '-' (PyTorch
# PowerSGDState spells this one with capitals)
_ALIASES = {"node_id": "id", "start_powerSGD_iter": "start-powersgd-iter"}


class Options:
    """A rumor_node_config on the C heap, set by option name exactly as
    `rumor node --NAME VALUE` (python names may use '_' for '-'); _p is its
    struct rumor_node_opts, what rumor_peer_new takes."""

    def __init__(self, config=None, **options):
        self._cfg = ctypes.c_void_p()
        check(lib.rumor_node_config_new(ctypes.byref(self._cfg)))
        self._p = ctypes.c_void_p(lib.rumor_node_config_opts(self._cfg))
        if config is not None:
            diag = _lib.Diag()
            check(lib.rumor_node_config_load(self._cfg, enc(config),
                                             ctypes.byref(diag)), diag)
        for name, value in options.items():
            if value is not None:
                self.set(name, value)

    def set(self, name, value):
        key = _ALIASES.get(name, name.replace("_", "-"))
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        diag = _lib.Diag()
        check(lib.rumor_node_config_set(self._cfg, enc(key), enc(text),
                                        ctypes.byref(diag)), diag,
              f"option {key}={text}")

    def check(self):
        diag = _lib.Diag()
        check(lib.rumor_node_config_check(self._cfg, ctypes.byref(diag)),
              diag)

    def __del__(self):
        if getattr(self, "_cfg", None):
            lib.rumor_node_config_destroy(ctypes.byref(self._cfg))


def _same_value(a, b):
    if str(a) == str(b):
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return str(a).lower() in ("", "true", "1") and \
            str(b).lower() in ("", "true", "1")


def launch_env(environ=None, **options):
    """The Peer options of a worker of `rumor launch ... -- PROG`:

        RUMOR_TOPOLOGY, RUMOR_NODE_ID     topology= and node_id=
        RUMOR_KEY                          key= (absent with --insecure)
        RUMOR_METRICS_DIR                  metrics_dir=
        RUMOR_OPTIONS                      the node options given to launch,
                                           NAME=VALUE lines
        RUMOR_JOIN                         join=True on a restart
        RUMOR_METRICS_LISTEN               metrics_listen= (launch's, its
                                           port plus the node id)
        RUMOR_NODES, RUMOR_LOCAL_ID,       the node count, the worker's index
        RUMOR_RESTART                      on its host (a GPU), its restarts

    options (None: not given) add to them; one given both ways with another
    value is an error, as the script and the launch line disagree. Returns
    a dict of `rumor node` option names (with '-') plus topology, id, key,
    algo, rank, config and insecure."""
    env = os.environ if environ is None else environ
    if "RUMOR_TOPOLOGY" not in env or "RUMOR_NODE_ID" not in env:
        raise RuntimeError(
            "rumor.Peer: no RUMOR_TOPOLOGY/RUMOR_NODE_ID in the environment: "
            "start the script with `rumor launch --nodes N -- python3 "
            "script.py` (or --topology FILE), or pass topology= and node_id=")
    out = {"topology": env["RUMOR_TOPOLOGY"], "id": int(env["RUMOR_NODE_ID"]),
           "key": env.get("RUMOR_KEY") or None}
    if env.get("RUMOR_METRICS_DIR"):
        out["metrics-dir"] = env["RUMOR_METRICS_DIR"]
    if env.get("RUMOR_JOIN") == "1":
        out["join"] = True
    if env.get("RUMOR_METRICS_LISTEN"):
        out["metrics-listen"] = env["RUMOR_METRICS_LISTEN"]
    for line in env.get("RUMOR_OPTIONS", "").splitlines():
        name, _, value = line.partition("=")
        out[name] = value
    for name, value in options.items():
        if value is None:
            continue
        key = _ALIASES.get(name, name.replace("_", "-"))
        if key == "join":  # the script knows whether it restored a model
            out[key] = value
            continue
        if key in out and out[key] is not None and \
                not _same_value(out[key], value):
            raise ValueError(
                f"rumor.Peer: {name}={value!r} in the script, but `rumor "
                f"launch` gave --{key} {out[key]}: drop one of them")
        out[key] = value
    for name in ("algo", "rank", "config", "insecure"):
        out.setdefault(name, None)
    return out


def _stream_handle(stream):
    """The cudaStream_t of stream (a torch.cuda.Stream, or an int): an int,
    0 for None (the default)."""
    if stream is None:
        return 0
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"rumor.Peer: stream={stream!r}: give a "
                        f"torch.cuda.Stream, a cudaStream_t as an int, or "
                        f"None")
    return handle


class Peer:
    """One node of a decentralized run, gossiping the caller's tensors.

    topology: a topology file with endpoints and public keys (see
    rumor.topology.local); node_id: this node; key: the key base
    (DIR/NAME of NAME.key) or insecure=True; algo and its options (rank,
    gamma, codec, period, ...), deadline_ms, connect_timeout_ms,
    metrics_dir, seed, log_level, rate, ...: every `rumor node` option, by
    name (algo defaults to powergossip, rank to the algorithm's: 1 for
    powergossip, 4 for powersgd; config: an INI file as
    `rumor node --config`, keyword options override it). Options that do
    not apply to the algorithm are refused, as on the command line.
    join=True: a restarted worker takes a live neighbour's model and step
    at its first gossip() (`rumor node --join`; its own optimizer state
    starts fresh), and its neighbours re-admit it; down_after,
    deadline_ms and deadline_factor tune how a dead neighbour is skipped
    (docs/reliability.md). The C peer is built at the first gossip() or
    average() (or register()), when the tensors are known; every node must
    pass the same shapes in the same order each time.

    The ring algorithms (allreduce, powersgd, localsgd) re-form their ring
    around a dead or stalled worker and take a restarted one back in
    (docs/reliability.md, "Elastic rings"). When the tensors are gradients
    (allreduce, powersgd), a joiner also needs the model and optimizer
    state: save_state, a callable returning bytes, gives this worker's when
    a joiner asks, and a joiner loads the bytes that join() or
    joined_state() return before its next step (rumor.torch does both).

    CUDA tensors are copied to pinned host memory for each step and back
    after it. stream (a torch.cuda.Stream, or a cudaStream_t as an int;
    see set_stream) orders those copies against the caller's stream with
    events; None (the default) waits on the host instead, as before.
    """

    def __init__(self, topology=None, node_id=None, key=None, algo=None,
                 rank=None, insecure=False, config=None, save_state=None,
                 stream=None, **options):
        if topology is None and node_id is None:
            launched = launch_env(algo=algo, rank=rank, config=config,
                                  insecure=insecure or None, key=key,
                                  **options)
            topology, node_id = launched.pop("topology"), launched.pop("id")
            key, algo, rank = (launched.pop(k) for k in ("key", "algo",
                                                          "rank"))
            config = launched.pop("config")
            insecure = str(launched.pop("insecure")).lower() in (
                "", "true", "1")
            options = launched
        elif topology is None or node_id is None:
            raise TypeError("rumor.Peer: give topology and node_id, or "
                            "neither (then the environment of `rumor "
                            "launch ... -- python3 script.py` gives them)")
        # the default algorithm, unless a config file names one; no rank
        # leaves the C default (powergossip 1, powersgd 4)
        if algo is None and config is None:
            algo = "powergossip"
        self._opts = Options(config=config, topology=topology, id=node_id,
                             key=key, algo=algo, rank=rank,
                             insecure=True if insecure else None, **options)
        self._opts.check()
        self.node_id = node_id
        self.save_state = save_state
        self._p = None
        self._sig = None
        self._keep = None
        self._cuda = False
        self._stream = _stream_handle(stream)
        self._state_fn = _lib.STATE_FN(self._serve_state)

    @classmethod
    def from_env(cls, **options):
        """The Peer of a worker started by `rumor launch ... -- python3
        script.py`: its topology, node id, key, metrics directory and the
        node options given to launch come from the environment (see
        launch_env); keyword options add to them."""
        return cls(**options)

    # --- registration -------------------------------------------------
    def register(self, tensors):
        """Builds the C peer on tensors (zero-copy for float32 CPU
        tensors); they must stay alive and in place for the peer's life
        (the peer keeps a reference)."""
        if self._p is not None:
            raise RuntimeError("rumor.Peer: tensors are already registered")
        tensors = _tensors.tensor_list(tensors)
        if not tensors:
            raise ValueError("rumor.Peer: no tensors to gossip")
        described = [_tensors.describe(t, k) for k, t in enumerate(tensors)]
        if any(d[1][2] == _lib.DEVICE_CUDA for d in described):
            # rumor_peer_new reads them before a stream can be set: once
            import torch
            torch.cuda.current_stream().synchronize()
        arr = (_lib.PeerTensor * len(tensors))(*[d[0] for d in described])
        diag = _lib.Diag()
        p = ctypes.c_void_p()
        check(lib.rumor_peer_new(self._opts._p, arr, len(tensors),
                                 ctypes.byref(p), ctypes.byref(diag)), diag)
        self._p = p
        self._sig = [d[1] for d in described]
        self._keep = tensors
        self._cuda = any(d[1][2] == _lib.DEVICE_CUDA for d in described)
        lib.rumor_peer_state_source(p, self._state_fn, None)
        if self._stream:
            self._set_stream(self._stream)

    def set_stream(self, stream):
        """Orders the copies of the CUDA tensors against stream (a
        torch.cuda.Stream of their device, or its cudaStream_t as an int)
        with events, never waiting on the host or the device: each call
        that reads the tensors reads what the work queued on stream before
        it wrote, and work queued on stream after a call that writes them
        back reads the new values (the call returns before the copies are
        done). None: the default, the copies wait for the work of the
        legacy default stream (PyTorch's default) and this binding
        synchronises the current stream first, for callers on another.
        Between steps; a stream and CPU tensors, or a stream in a CPU-only
        build, raise RumorError (rumor_peer_set_stream)."""
        handle = _stream_handle(stream)
        if self._p is not None:
            self._set_stream(handle)
        self._stream = handle

    def _set_stream(self, handle):
        diag = _lib.Diag()
        check(lib.rumor_peer_set_stream(self._p, handle or None,
                                        ctypes.byref(diag)), diag,
              f"node {self.node_id}")

    @property
    def stream(self):
        """The cudaStream_t given to set_stream (None: the default)."""
        return self._stream or None

    def _serve_state(self, _arg, buf):
        """The C peer asks for this worker's state for a joiner (from
        within a step, on the thread that runs it)."""
        if self.save_state is None:
            return 0
        try:
            blob = bytes(self.save_state())
        except Exception:  # the joiner is told it got none
            log.exception("rumor.Peer: save_state failed")
            return 1
        return lib.rumor_buf_append(buf, blob, len(blob))

    def _same(self, tensors):
        tensors = _tensors.tensor_list(tensors)
        sig = [_tensors.describe(t, k)[1] for k, t in enumerate(tensors)]
        if sig != self._sig:
            raise ValueError(
                "rumor.Peer: these tensors are not the ones registered at "
                "the first call (a peer gossips one fixed list: same "
                "tensors, same order, same memory; do not re-create them)")

    def _step(self, fn, tensors):
        if self._p is None:
            self.register(tensors)
        elif tensors is not None:
            self._same(tensors)
        if self._cuda and not self._stream:
            import torch
            torch.cuda.current_stream().synchronize()
        diag = _lib.Diag()
        check(fn(self._p, ctypes.byref(diag)), diag,
              f"node {self.node_id}")

    # --- joining a ring -----------------------------------------------
    def join(self, tensors=None):
        """The links, and with join=True (a restarted worker: `rumor
        launch` sets it) the ring's state, before the first step: a worker
        whose tensors are gradients joins so before computing its first
        gradient. Returns the state a member's save_state gave when this
        call took the worker into a ring (load it), else None. Does
        nothing once a step has run."""
        if self._p is None:
            self.register(tensors)
        diag = _lib.Diag()
        check(lib.rumor_peer_join(self._p, ctypes.byref(diag)), diag,
              f"node {self.node_id}")
        return self.joined_state()

    def joined_state(self):
        """After a step that took this worker into a ring (a join, or a
        re-admission after the ring removed it): the bytes a member's
        save_state gave (b"" when it has none), once; else None. A worker
        whose tensors are gradients must load them before its next step
        (the step refuses to run until this was called)."""
        if self._p is None:
            return None
        data = ctypes.POINTER(ctypes.c_uint8)()
        n = ctypes.c_size_t()
        if not lib.rumor_peer_joined(self._p, ctypes.byref(data),
                                     ctypes.byref(n)):
            return None
        return ctypes.string_at(data, n.value) if n.value else b""

    # --- training loop ------------------------------------------------
    def gossip(self, tensors=None):
        """One step of the algorithm over the network, in place; as a
        step of `rumor node`, with its fault handling: for algorithms that
        can skip (dpsgd, choco, deepsqueeze, moniqua, powergossip) a dead
        or late neighbour is skipped and re-admitted when it returns, and
        the step number may jump ahead to meet the neighbours (see
        `step`); a ring algorithm's ring re-forms around a dead or
        stalled worker instead (see join()). Raises RumorError only when
        the run cannot go on (links not up, a refused peer, no neighbour
        to join, a diverged model, a ring without a majority of live
        workers, or a missing neighbour for PowerGossip with several
        iterations or CHOCO with adapt). Returns
        False, doing nothing, once the run's agreed stop is reached (see
        stop()), else True.

        With stale=S (a model exchange, e.g. algo="localsgd" with S <=
        period) the call does not wait for the network: the exchanges
        started S or more steps ago land on the tensors (x += G - s),
        then this step's own, when the algorithm exchanges at it, starts
        on a snapshot of them and runs on a thread of the peer while the
        caller trains on. An exchange's error is raised by the call that
        lands it. flush() (or close()) lands the rest at the end."""
        if self._p is not None and lib.rumor_peer_stopped(self._p):
            return False
        self._step(lib.rumor_peer_gossip, tensors)
        return not lib.rumor_peer_stopped(self._p)

    def flush(self, tensors=None):
        """With stale=S: lands every exchange still in flight on the
        tensors now, waiting for them (the end of training; close() does
        it too). Landing early changes the run's numbers, so call it
        once training is done. Does nothing otherwise."""
        if self._p is None:
            return
        self._step(lib.rumor_peer_flush, tensors)

    @property
    def in_flight(self):
        """True while a stale exchange has not landed (stale=S)."""
        return self._p is not None and bool(lib.rumor_peer_in_flight(self._p))

    @property
    def stale(self):
        """The stale option (0: every exchange lands within gossip())."""
        self._need()
        return int(lib.rumor_peer_stale(self._p))

    def set_buckets(self, buckets):
        """Cuts the exchange into buckets: a list of (first, count)
        ranges of the registered tensors, in the order they are exchanged,
        together holding every tensor once (rumor_peer_buckets_set; for a
        gradient exchange: allreduce, powersgd). Before the first step;
        every node sets the same. gossip() then exchanges them all in
        turn; gossip_bucket(k) one at a time, so that bucket k travels
        while the caller computes the gradients of the next ones."""
        self._need()
        arr = (_lib.PeerBucket * len(buckets))(*[
            _lib.PeerBucket(first, count) for first, count in buckets])
        diag = _lib.Diag()
        check(lib.rumor_peer_buckets_set(self._p, arr, len(buckets),
                                         ctypes.byref(diag)), diag,
              f"node {self.node_id}")

    @property
    def buckets(self):
        """The number of buckets (0: one exchange of every tensor)."""
        return 0 if self._p is None else int(lib.rumor_peer_buckets(self._p))

    def gossip_bucket(self, k):
        """The exchange of bucket k of the step, in place: buckets 0, 1,
        ... in order, each once per step; bucket 0 begins the step, the
        last one ends it. Another thread may run it (the C call releases
        the GIL) while the caller computes; calls on one peer must not
        overlap. CUDA tensors must be written when it starts: without a
        stream (set_stream) synchronize the stream that wrote them (this
        call may run on another thread, whose stream is not theirs); with
        one, queue their writes on it before the call. Returns False once
        the run's agreed stop is reached, as gossip()."""
        self._need()
        diag = _lib.Diag()
        check(lib.rumor_peer_gossip_bucket(self._p, k, ctypes.byref(diag)),
              diag, f"node {self.node_id}")
        return not lib.rumor_peer_stopped(self._p)

    def step_ahead(self, tensors=None):
        """Step-ahead error feedback (algo="localsgd" with delta_codec and
        ef_alpha > 0): moves the tensors to the look-ahead point; call it
        once per step before computing the gradient, as `rumor node` does.
        Does nothing for every other configuration (see looks_ahead)."""
        self._step(lib.rumor_peer_step_ahead, tensors)

    @property
    def looks_ahead(self):
        """True when step_ahead() moves the tensors."""
        self._need()
        return bool(lib.rumor_peer_looks_ahead(self._p))

    def stop(self):
        """Asks the run to stop, as SIGTERM asks `rumor node`: the
        request travels with the gossip and every node stops after the
        same step, from which on gossip() returns False (`stopped`)."""
        self._need()
        lib.rumor_peer_stop(self._p)

    @property
    def stopped(self):
        """True once the run's agreed stop is reached."""
        return self._p is not None and bool(lib.rumor_peer_stopped(self._p))

    @property
    def step(self):
        """The next step number: steps done so far, or the neighbours'
        step after join=True or a re-admission that jumped ahead."""
        return 0 if self._p is None else self.metrics()["steps"]

    def average(self, tensors=None):
        """The exact average over all nodes (ring all-reduce), in place:
        the synchronisation of local SGD. Uses a step number like
        gossip(); every node makes the same sequence of calls."""
        self._step(lib.rumor_peer_average, tensors)

    def report(self, loss=None, test_loss=None, accuracy=None):
        """Writes a metrics line (metrics_dir/node-N.jsonl, the format of
        `rumor node`, so `rumor plot` reads it) with the minibatch loss
        and, when evaluated, the held-out loss and accuracy."""
        self._need()
        values = [math.nan if v is None else float(v)
                  for v in (loss, test_loss, accuracy)]
        check(lib.rumor_peer_report(self._p, *values), None, "report")

    def metrics(self):
        """Counters so far: steps, bytes (transport and gossip), seconds,
        and the bytes of CUDA tensors copied each way (pcie_h2d_bytes,
        pcie_d2h_bytes; 0 for host tensors)."""
        self._need()
        st = _lib.PeerStats()
        lib.rumor_peer_stats(self._p, ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in st._fields_}

    @property
    def nodes(self):
        self._need()
        return int(lib.rumor_peer_nodes(self._p))

    # --- checkpoints ---------------------------------------------------
    def state_dict(self):
        """The runtime's state (step counter; the algorithm's own state
        when the library has gossip state save), for torch.save next to
        the model's state_dict; see rumor.checkpoint."""
        from . import checkpoint
        return checkpoint.peer_state(self)

    def load_state_dict(self, state):
        from . import checkpoint
        checkpoint.peer_load(self, state)

    def _need(self):
        if self._p is None:
            raise RuntimeError("rumor.Peer: no tensors registered yet "
                               "(call gossip(), average() or register())")

    # --- life -----------------------------------------------------------
    def close(self, _land=True):
        """Lands the stale exchanges still in flight (flush(); raises
        what they raised, after closing), lets queued messages leave,
        stops the transport, frees the C peer. Safe twice; also done by
        `with` and at garbage collection (which drops what is in flight
        instead of writing into tensors nobody may look at again)."""
        if getattr(self, "_p", None) is None:
            return
        try:
            if _land and self.in_flight:
                self.flush()
        finally:
            if sys.is_finalizing():  # no Python left to serve a state
                lib.rumor_peer_state_source(self._p, _lib.STATE_FN(), None)
            lib.rumor_peer_destroy(ctypes.byref(self._p))
            self._p = None
            self._keep = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close(_land=False)


class Workload:
    """The built-in workload `rumor node` trains with the same options
    (dataset, shard of this node, seed, batch, ...): parameters and
    gradients as numpy arrays over the C memory. For driving Rumor's own
    workloads from Python (the tests compare such a loop with `rumor
    node`)."""

    def __init__(self, topology, node_id, **options):
        import numpy as np
        self._np = np
        self._opts = Options(topology=topology, id=node_id, **options)
        self._p = ctypes.c_void_p()
        diag = _lib.Diag()
        check(lib.rumor_node_workload_new(self._opts._p,
                                          ctypes.byref(self._p),
                                          ctypes.byref(diag)), diag)
        self._model = lib.rumor_workload_model(self._p)
        self._grad = ctypes.POINTER(_lib.Model)()
        check(lib.rumor_model_clone(self._model, ctypes.byref(self._grad)))
        self.params = self._arrays(self._model)
        self.grads = self._arrays(self._grad)

    def _arrays(self, model):
        out = []
        for k in range(model.contents.count):
            t = model.contents.tensors[k]
            shape = tuple(t.shape[d] for d in range(t.ndim))
            n = 1
            for s in shape:
                n *= s
            flat = self._np.ctypeslib.as_array(t.data, shape=(max(n, 1),))
            out.append(flat[:n].reshape(shape))
        return out

    def grad(self, step):
        """Loss of step's minibatch; fills self.grads."""
        loss = ctypes.c_double()
        check(lib.rumor_workload_grad(self._p, step, self._grad,
                                      ctypes.byref(loss)))
        return loss.value

    @property
    def sizes(self):
        """(samples in this node's training shard, samples in the held-out
        set): the official test files when the dataset has them
        (fashion-mnist, mnist:DIR), else test_fraction of the data."""
        return (lib.rumor_workload_train_size(self._p),
                lib.rumor_workload_test_size(self._p))

    def evaluate(self, split="test"):
        """(loss, accuracy) on the held-out split ("test") or the shard."""
        ev = _lib.Eval()
        check(lib.rumor_workload_eval(self._p, None,
                                      0 if split == "test" else 1,
                                      ctypes.byref(ev)))
        return ev.loss, ev.accuracy

    def close(self):
        if getattr(self, "_p", None):
            lib.rumor_model_free(ctypes.byref(self._grad))
            lib.rumor_workload_destroy(ctypes.byref(self._p))
            self._p = None

    def __del__(self):
        self.close()
