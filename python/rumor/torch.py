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
before or after. Gradient-exchange algorithms (allreduce, powersgd):
the gradients are averaged over the nodes when the backward pass ends
(a callback of the autograd engine, as DDP queues), before opt.step().

Buffers: floating-point buffers (BatchNorm's running statistics) are
gossiped with the parameters by default (buffers="average"; "local" keeps
them per node); integer buffers (num_batches_tracked) stay local, said
once in the log.
"""
import logging
import threading

import torch

from . import peer as _peer
from ._lib import lib

log = logging.getLogger("rumor")


class GossipModel(torch.nn.Module):
    """module, trained decentrally with a rumor.Peer (peer=, or one made
    from the options: Peer(**options), which reads `rumor launch`'s
    environment when no topology is given). overlap=False runs the same
    exchange in the caller's thread."""

    def __init__(self, module, peer=None, buffers="average", overlap=True,
                 **options):
        super().__init__()
        if buffers not in ("average", "local"):
            raise ValueError(f"rumor.torch.GossipModel: buffers={buffers!r}:"
                             f" use 'average' or 'local'")
        self.module = module
        self.peer = peer if peer is not None else _peer.Peer(**options)
        self.overlap = overlap
        self.gradient_exchange = bool(
            lib.rumor_node_opts_gradient_exchange(self.peer._opts._p))
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._live = self._params + self._float_buffers(buffers)
        self._thread = None
        self._error = None
        self._more = True
        self._send = self._before = None
        self._grads = None
        self._queued = False
        self._pending = False
        self._done = 0
        if self.gradient_exchange:
            for p in self._params:
                p.register_hook(self._on_grad)

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
        if self.training and not self.gradient_exchange:
            self.finish()
            self._start()
        return self.module(*args, **kwargs)

    @property
    def step(self):
        """The step the next forward() trains: steps done, counting the
        exchange in flight, or the neighbours' step after a join."""
        if self.gradient_exchange:
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
        self.peer.step_ahead(self._send)
        for t, s in zip(self._live, self._send):
            t.copy_(s)

    def _exchange(self):
        try:
            self._more = self.peer.gossip(self._send)
        except BaseException as e:  # re-raised in the caller's thread
            self._error = e

    def finish(self):
        """Waits for the exchange started by the last forward() and adds
        its mixing term to the parameters; raises what the exchange
        raised. Safe to call at any time (nothing pending: nothing)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        elif not self._pending:
            return
        self._pending = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        with torch.no_grad():
            for s, b, t in zip(self._send, self._before, self._live):
                t.add_(s).sub_(b)
        self._done = self.peer.step  # read with no exchange running

    @property
    def stopped(self):
        """True once the run's agreed stop is reached (peer.stop())."""
        return not self._more or self.peer.stopped

    # --- gradient exchange ---------------------------------------------
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
            self._more = self.peer.gossip(self._grads)
            for p, s in zip(self._params, self._grads):
                if p.grad is None:
                    p.grad = s.clone()
                else:
                    p.grad.copy_(s)

    # --- checkpoints ---------------------------------------------------
    def _register(self):
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
            self.finish()
            self._register()
            self.peer.load_state_dict(state)

    def close(self):
        """Finishes the pending exchange and closes the peer."""
        try:
            self.finish()
        finally:
            self.peer.close()
