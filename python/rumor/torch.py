"""rumor.torch: a torch.nn.Module wrapper for decentralized training.

    import rumor.torch
    model = rumor.torch.GossipModel(make_model())  # Peer options, or the
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # `rumor launch` env
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.finish()

Model-exchange algorithms (powergossip, choco, dpsgd, deepsqueeze,
moniqua): each training forward() starts the gossip of the current
parameters x_t in a background thread (the C exchange runs without the
GIL) while the caller computes the gradient at x_t; the next forward()
(or finish()) waits for it and adds the mixing term W x_t - x_t to the
parameters. So a step is x_{t+1} = W x_t - lr g(x_t), the reference loop
of epfml/powergossip, with the exchange hidden behind the compute; the
update is added, not assigned, so it holds whether the optimizer stepped
before or after.

Stale exchanges (stale=S, e.g. algo="localsgd" with S <= period, the
streaming DiLoCo of docs/gossip.md): the C peer runs each exchange on a
thread of its own over a snapshot of the parameters, so each training
forward() only lands the exchanges started S steps ago (x += G - s) and
queues its own step's; nothing waits for the network unless an exchange
due is late. finish() (or close()) lands the last ones at the end of
training. A state_dict() while an exchange is in flight is refused
(save after a step with none in flight: localsgd, t % period >= S).

Gradient-exchange algorithms (allreduce, with or without a codec, and
powersgd): the gradients are averaged over the nodes before opt.step().
With overlap (the default) they travel in buckets, as DDP's: the
parameters in reverse order (the order backward produces their
gradients) cut into buckets of about bucket_cap_mb megabytes; a hook on
each parameter's gradient accumulator counts the gradients that are
ready, and a bucket whose gradients are all ready is handed, in bucket
order, to a background thread that exchanges it (rumor.Peer.gossip_bucket,
the C exchange without the GIL) while backward computes the next ones.
When backward ends (a callback of the autograd engine, as DDP queues) the
buckets not yet started go (a parameter that got no gradient in this
step, an unused one, counts as its .grad, or zero when it has none, as
overlap=False does), and the callback waits for every bucket and writes
the averages into the .grad fields. overlap=False exchanges every
gradient in that callback instead, in one exchange.

Elastic rings: with allreduce or powersgd a dead or stalled worker is
left out of the ring and a restarted one (`rumor launch` restarts it with
RUMOR_JOIN=1) is taken back in. Since the peer exchanges gradients, a
joiner takes the module's state_dict and the optimizer's from a member
(the tensors read back with weights_only=True: no code from a peer runs)
before its first batch (join(), or its first training forward), and a
worker the ring took back after a stall takes them at the end of that
step's backward, before the optimizer steps: give the optimizer
(optimizer=opt, or model.optimizer = opt) so that its state (momentum)
comes too, or the joiner's model drifts from the others'.

Buffers: floating-point buffers (BatchNorm's running statistics) are
gossiped with the parameters by default (buffers="average"; "local" keeps
them per node); integer buffers (num_batches_tracked) stay local, said
once in the log.
"""
import io
import json
import logging
import queue
import threading

import torch

from . import peer as _peer
from ._lib import lib

log = logging.getLogger("rumor")


class GossipModel(torch.nn.Module):
    """module, trained decentrally with a rumor.Peer (peer=, or one made
    from the options: Peer(**options), which reads `rumor launch`'s
    environment when no topology is given). overlap=False runs the same
    exchange in the caller's thread; for a gradient exchange, at the end
    of backward in one piece instead of in buckets of bucket_cap_mb
    megabytes (every node must use the same) during backward.

    CUDA parameters: with stream=True (the default) the peer's copies
    are ordered on a side stream of the wrapper's, which meets the
    current stream through events only (wait_stream), so no step waits
    on the host for the GPU and the exchange overlaps the forward and
    backward work queued meanwhile; stream=False leaves the peer's
    default (the current stream synchronised before each exchange)."""

    def __init__(self, module, peer=None, buffers="average", overlap=True,
                 bucket_cap_mb=25, optimizer=None, stream=True, **options):
        super().__init__()
        if buffers not in ("average", "local"):
            raise ValueError(f"rumor.torch.GossipModel: buffers={buffers!r}:"
                             f" use 'average' or 'local'")
        if not bucket_cap_mb > 0:
            raise ValueError(f"rumor.torch.GossipModel: bucket_cap_mb="
                             f"{bucket_cap_mb!r}: use a size in MB above 0")
        self.module = module
        self.optimizer = optimizer
        self.peer = peer if peer is not None else _peer.Peer(**options)
        self.overlap = overlap
        self.gradient_exchange = bool(
            lib.rumor_node_opts_gradient_exchange(self.peer._opts._p))
        self._joined = False  # join() asked, before the first gradient
        if self.gradient_exchange and self.peer.save_state is None:
            self.peer.save_state = self._state_bytes
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._live = self._params + self._float_buffers(buffers)
        self._side = self._side_stream() if stream else None
        self._thread = None
        self._error = None
        self._more = True
        self._send = self._before = None
        self._grads = None
        self._queued = False
        self._pending = False
        self._done = 0
        self._buckets = None
        self._stale = None  # the peer's stale option, read once built
        self._hooks = []  # removed by close(): the module may be rewrapped
        if self.gradient_exchange and overlap:
            self._hook_buckets(bucket_cap_mb)
        elif self.gradient_exchange:
            self._hooks = [p.register_hook(self._on_grad)
                           for p in self._params]

    # --- CUDA streams ----------------------------------------------------
    def _side_stream(self):
        """CUDA parameters: a stream the peer's copies are ordered on (the
        peer's stream waits on an event recorded there before it reads,
        and records one there after it writes back). The current stream
        meets it only through wait_stream (events): _to_peer after the
        tensors the peer reads are written, _from_peer before the caller
        reads what it wrote, so neither side waits on the host and the
        exchange overlaps the work queued in between."""
        cuda = [t for t in self._live if t.is_cuda]
        if not cuda:
            return None
        side = torch.cuda.Stream(device=cuda[0].device)
        self.peer.set_stream(side)
        return side

    def _to_peer(self):
        if self._side is not None:
            self._side.wait_stream(torch.cuda.current_stream(
                self._side.device))

    def _from_peer(self):
        if self._side is not None:
            torch.cuda.current_stream(self._side.device).wait_stream(
                self._side)

    def _float_buffers(self, mode):
        floats, ints = [], []
        for name, b in self.module.named_buffers():
            (floats if b.is_floating_point() else ints).append((name, b))
        if ints:
            log.warning("rumor.torch: integer buffers stay local to each "
                     "node: %s", ", ".join(n for n, _ in ints))
        if mode == "local" or self.gradient_exchange:
            return []
        return [b for _, b in floats]

    # --- model exchange ----------------------------------------------
    def forward(self, *args, **kwargs):
        if self.training and self._runs_stale():
            self._stale_step()
        elif self.training and not self.gradient_exchange:
            self.finish()
            self._start()
        elif self.training:
            self.join()
        return self.module(*args, **kwargs)

    @property
    def step(self):
        """The step the next forward() trains: steps done, counting the
        exchange in flight, or the neighbours' step after a join."""
        if self.gradient_exchange or self._runs_stale():
            return self.peer.step
        return self._done + (self._thread is not None or self._pending)

    def _start(self):
        if not self._more:
            return
        with torch.no_grad():
            if self._send is None:
                self._send = [t.detach().clone().contiguous()
                              for t in self._live]
                self._before = [t.clone() for t in self._send]
            for s, t in zip(self._send, self._live):
                s.copy_(t)
            self._look_ahead()
            for b, s in zip(self._before, self._send):
                b.copy_(s)
        self._to_peer()
        if self.overlap:
            self._thread = threading.Thread(target=self._exchange,
                                            name="rumor-gossip", daemon=True)
            self._thread.start()
        else:
            self._exchange()
            self._pending = True

    def _look_ahead(self):
        """Step-ahead error feedback (localsgd, delta_codec, ef_alpha):
        the gradient of this step is taken at the look-ahead point."""
        if self.peer._p is None:
            self.peer.register(self._send)
        if not self.peer.looks_ahead:
            return
        self._to_peer()
        self.peer.step_ahead(self._send)
        self._from_peer()
        for t, s in zip(self._live, self._send):
            t.copy_(s)

    def _exchange(self):
        try:
            self._more = self.peer.gossip(self._send)
        except BaseException as e:  # re-raised in the caller's thread
            self._error = e

    def _runs_stale(self):
        """True for a model exchange with stale=S > 0 (the peer is built
        at the first call)."""
        if self.gradient_exchange:
            return False
        if self._stale is None:
            self._register()
            self._stale = self.peer.stale
        return self._stale > 0

    def _stale_step(self, flush=False):
        """The parameters to the peer, its landings back: one step's
        gossip() (or with flush the landing of all in flight)."""
        if not self._more and not flush:
            return
        with torch.no_grad():
            for s, t in zip(self._send, self._live):
                s.copy_(t)
            self._to_peer()
            if flush:
                self.peer.flush(self._send)
            else:
                self._more = self.peer.gossip(self._send)
            self._from_peer()
            for s, t in zip(self._send, self._live):
                t.copy_(s)

    def finish(self):
        """Waits for the exchange started by the last forward() and adds
        its mixing term to the parameters; raises what the exchange
        raised. Safe to call at any time (nothing pending: nothing).
        With stale=S: lands every exchange still in flight (the end of
        training; landing early changes the run's numbers)."""
        if self._stale:
            if self.peer.in_flight:
                self._stale_step(flush=True)
            return
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        elif not self._pending:
            return
        self._pending = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._from_peer()
        with torch.no_grad():
            for s, b, t in zip(self._send, self._before, self._live):
                t.add_(s).sub_(b)
        self._done = self.peer.step  # read with no exchange running

    @property
    def stopped(self):
        """True once the run's agreed stop is reached (peer.stop())."""
        return not self._more or self.peer.stopped

    # --- gradient exchange ---------------------------------------------
    def _hook_buckets(self, cap_mb):
        """Buckets of about cap_mb MB over the parameters in reverse
        order, as (first, count) ranges of self._params, and a hook on
        each parameter's gradient accumulator (the AccumulateGrad node,
        as DDP finds it; torch 1.13 has no post-accumulate tensor hook):
        it runs once the parameter's .grad holds this backward's
        gradient."""
        cap = cap_mb * 2**20
        self._buckets, self._bucket_of = [], [0] * len(self._params)
        size, last = 0, len(self._params)
        for k in reversed(range(len(self._params))):
            p = self._params[k]
            self._bucket_of[k] = len(self._buckets)
            size += p.numel() * p.element_size()
            if size >= cap or k == 0:
                self._buckets.append((k, last - k))
                size, last = 0, k
        self._ready = [0] * len(self._buckets)
        self._started = 0  # buckets of this backward handed to the thread
        self._work = self._bucket_thread = None
        self._accumulators = []  # the hooks live as long as these
        for k, p in enumerate(self._params):
            with torch.enable_grad():
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(
                acc.register_hook(lambda *_, k=k: self._on_ready(k)))
            self._accumulators.append(acc)

    def _on_ready(self, k):
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(
                self._end_buckets)
        self._ready[self._bucket_of[k]] += 1
        try:
            while self._started < len(self._buckets) and self._ready[
                    self._started] == self._buckets[self._started][1]:
                self._start_bucket()
        except BaseException:  # backward fails: its callback never runs
            self._stop_buckets()
            raise

    def _start_bucket(self):
        """Copies the next bucket's gradients into the peer's tensors and
        hands it to the exchange thread (started with the first)."""
        b = self._started
        first, count = self._buckets[b]
        if b == 0:
            self._buckets_registered()
        with torch.no_grad():
            for k in range(first, first + count):
                g = self._params[k].grad
                if g is None:
                    self._grads[k].zero_()
                else:
                    self._grads[k].copy_(g)
        if self._side is not None:
            self._to_peer()
        elif self.peer._cuda:
            torch.cuda.current_stream().synchronize()
        if self._bucket_thread is None:
            self._work = queue.SimpleQueue()
            self._bucket_thread = threading.Thread(
                target=self._exchange_buckets, args=(self._work,),
                name="rumor-buckets", daemon=True)
            self._bucket_thread.start()
        self._work.put(b)
        self._started += 1

    def _exchange_buckets(self, work):
        """The exchange thread of one backward: buckets in order until
        None; after an error it only drains (the callback re-raises)."""
        for b in iter(work.get, None):
            if self._error is not None:
                continue
            try:
                self._more = self.peer.gossip_bucket(b)
            except BaseException as e:  # re-raised in the caller's thread
                self._error = e

    def _end_buckets(self):
        """The end of backward: the buckets not started go (unused
        parameters count as their .grad or zero), then every bucket is
        waited for and its average written into .grad."""
        try:
            while self._started < len(self._buckets):
                self._start_bucket()
        finally:
            self._stop_buckets()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._from_peer()
        self._load_state(self.peer.joined_state())
        self._write_grads()

    def _stop_buckets(self):
        """Waits for the exchange thread and resets the backward's
        counts."""
        self._queued = False
        self._started = 0
        self._ready = [0] * len(self._buckets)
        if self._bucket_thread is not None:
            self._work.put(None)
            self._bucket_thread.join()
            self._bucket_thread = None

    def _buckets_registered(self):
        if self._grads is None:
            self._grads = [p.detach().clone().contiguous()
                           for p in self._params]
        if self.peer._p is None:
            self.peer.register(self._grads)
        if self.peer.buckets == 0:
            self.peer.set_buckets(self._buckets)

    def _write_grads(self):
        with torch.no_grad():
            for p, s in zip(self._params, self._grads):
                if p.grad is None:
                    p.grad = s.clone()
                else:
                    p.grad.copy_(s)

    def _on_grad(self, grad):
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(
                self._average_grads)
        return grad

    def _average_grads(self):
        self._queued = False
        with torch.no_grad():
            grads = [p.grad if p.grad is not None else torch.zeros_like(p)
                     for p in self._params]
            if self._grads is None:
                self._grads = [g.detach().clone().contiguous()
                               for g in grads]
            for s, g in zip(self._grads, grads):
                s.copy_(g)
            self._to_peer()
            self._more = self.peer.gossip(self._grads)
            self._from_peer()
        self._load_state(self.peer.joined_state())
        self._write_grads()

    # --- elastic rings ---------------------------------------------------
    def join(self):
        """Before the first step of a gradient exchange: the links and,
        for a worker that joins a running ring (a restart), the ring's
        model, optimizer state and step (model.step). The first training
        forward() does it otherwise; call it first when the data order
        follows model.step. Does nothing for a model exchange (its first
        exchange joins) or once done."""
        if self.gradient_exchange and not self._joined:
            self._joined = True
            self._register()
            self._to_peer()
            blob = self.peer.join()
            self._from_peer()
            self._load_state(blob)

    def _state_bytes(self):
        """This worker's state for a joiner: the peer calls it within a
        step, where the parameters are those of the step's start."""
        opt = self.optimizer
        return _pack({"module": self.module.state_dict(),
                      "optimizer": None if opt is None else
                      opt.state_dict()})

    def _load_state(self, blob):
        """A member's state, when a step (or the join) took this worker
        into the ring; None: nothing to load."""
        if blob is None:
            return
        if not blob:
            raise RuntimeError(
                f"rumor.torch: node {self.peer.node_id} joined the ring at "
                f"step {self.peer.step}, but the member it joined through "
                f"gave no model state (its peer has no save_state: wrap "
                f"every worker's model in rumor.torch.GossipModel)")
        try:
            state = _unpack(blob)
        except Exception as e:  # bytes from the network
            raise RuntimeError(
                f"rumor.torch: node {self.peer.node_id}: the state a member "
                f"sent for joining the ring does not read ({e})") from e
        with torch.no_grad():
            self.module.load_state_dict(state["module"])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            log.warning("rumor.torch: node %s joined the ring: took a "
                        "member's model and optimizer state",
                        self.peer.node_id)
            return
        log.warning("rumor.torch: node %s joined the ring: took a member's "
                    "model but not its optimizer state (%s): its momentum "
                    "starts fresh and its model drifts from the others'",
                    self.peer.node_id,
                    "give GossipModel optimizer=" if self.optimizer is None
                    else "the member's GossipModel has no optimizer=")

    # --- checkpoints ---------------------------------------------------
    def _register(self):
        if self._buckets is not None:
            self._buckets_registered()
            return
        tensors = self._grads if self.gradient_exchange else self._send
        if tensors is None:
            with torch.no_grad():
                source = [p.detach() for p in self._params] \
                    if self.gradient_exchange else self._live
                tensors = [t.detach().clone().contiguous() for t in source]
            if self.gradient_exchange:
                self._grads = tensors
            else:
                self._send = tensors
                self._before = [t.clone() for t in tensors]
        if self.peer._p is None:
            self.peer.register(tensors)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not self._stale:  # stale: refused while in flight, not landed
            self.finish()
        if self.peer._p is not None:
            destination[prefix + "rumor_peer"] = self.peer.state_dict()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              strict, missing_keys, unexpected_keys,
                              error_msgs):
        state = state_dict.pop(prefix + "rumor_peer", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if state is not None:
            if not self._stale:
                self.finish()
            self._register()
            self.peer.load_state_dict(state)

    def close(self):
        """Finishes the pending exchange and closes the peer; the
        gradient hooks go, so the module may be wrapped again."""
        try:
            self.finish()
        finally:
            for hook in self._hooks:
                hook.remove()
            self._hooks = []
            self.peer.close()


def _pack(state):
    """state (dicts, lists, tuples, tensors, numbers, strings) as bytes:
    the structure as JSON, the tensors by torch.save, so that a joiner
    reads them with weights_only=True (torch 1.13's weights-only reader
    has no floats, which an optimizer's state_dict holds)."""
    tensors = []

    def enc(o):
        if isinstance(o, torch.Tensor):
            tensors.append(o.detach().cpu())
            return {"t": len(tensors) - 1}
        if isinstance(o, dict):
            return {"d": [[enc(k), enc(v)] for k, v in o.items()]}
        if isinstance(o, (list, tuple)):
            return {"l" if isinstance(o, list) else "u": [enc(v) for v in o]}
        if o is None or isinstance(o, (bool, int, float, str)):
            return {"v": o}
        raise TypeError(f"rumor.torch: a {type(o).__name__} in the state "
                        f"for a joiner (only tensors, numbers, strings, "
                        f"lists and dicts travel)")

    head = json.dumps(enc(state)).encode()
    out = io.BytesIO()
    out.write(len(head).to_bytes(8, "little"))
    out.write(head)
    torch.save(tensors, out)
    return out.getvalue()


def _unpack(blob):
    n = int.from_bytes(blob[:8], "little")
    tensors = torch.load(io.BytesIO(blob[8 + n:]), map_location="cpu",
                         weights_only=True)

    def dec(o):
        (kind, v), = o.items()
        if kind == "t":
            return tensors[v]
        if kind == "d":
            return {dec(k): dec(x) for k, x in v}
        if kind in ("l", "u"):
            items = [dec(x) for x in v]
            return items if kind == "l" else tuple(items)
        return v

    return dec(json.loads(blob[8:8 + n]))
