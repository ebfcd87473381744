"""The engine-neutral half of running fabxfer inside an inference engine's
worker process: the model's own parameters, named and cut as the engine
loaded them, bound as *shadow* targets of a weight sync from the trainers.
The next version lands in a receive area beside each parameter while the
engine keeps serving from the parameters; ``apply`` copies it in between
two steps, the only pause.

vllm_worker.py and sglang_worker.py put this where each engine runs code
in its workers, and mark every call into the engine. Nothing here imports
an engine; fabxfer and torch are all it needs.

The job: ranks 0 .. T-1 are the trainers (fabxfer.layouts' sources, in
HuggingFace's names), ranks T .. T + tp * replicas - 1 the engines' TP
workers (replica e's TP rank r is rank T + e * tp + r). Every member meets
through one TCPStore that trainer rank 0 serves (``store="host:port"``):
the engines' processes share no process group with the trainers.
"""
from __future__ import annotations

import contextlib
import datetime
import time
from typing import Any, Dict, Optional

import fabxfer
from fabxfer import layouts

#: The prefix of the exchange's keys on the store. Trainers and engine
#: workers must use the same one, and a new one for each job on a store.
PREFIX = "fabxfer/sync"

TRAINERS = {"fsdp": layouts.fsdp, "megatron_tp": layouts.megatron_tp,
            "replicas": layouts.replicas}
ENGINES = {"vllm": layouts.vllm, "sglang": layouts.sglang}


def trainer_layout(spec: Any) -> layouts.Layout:
    """A trainer layout from a fabxfer.layouts Layout, or from a string
    "fsdp:N", "megatron_tp:N" or "replicas:N" (N trainer ranks): a string
    travels through every engine's RPC, JSON included."""
    if isinstance(spec, layouts.Layout):
        return spec
    kind, _, n = str(spec).partition(":")
    if kind not in TRAINERS or not n.isdigit() or int(n) < 1:
        raise ValueError("trainer=%r: give fsdp:N, megatron_tp:N or "
                         "replicas:N, N the trainer ranks" % (spec,))
    return TRAINERS[kind](int(n))


def connect_store(addr: str, timeout_s: float) -> Any:
    """A client of the job's TCPStore at "host:port". Its timeout bounds
    every wait of the set-up's exchange (a member that never comes)."""
    import torch.distributed as dist

    host, _, port = str(addr).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("store=%r: give the trainers' TCPStore as "
                         "host:port" % (addr,))
    return dist.TCPStore(host, int(port), is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def _few(names: list) -> str:
    return ", ".join(names[:5]) + (" (and %d more)" % (len(names) - 5)
                                   if len(names) > 5 else "")


class ShadowSync:
    """One engine TP worker's side of the sync, set up on construction
    (collective: every trainer and every engine worker of the job at the
    same point, each engine worker with its own ``tp_rank``).

    ``model``: the engine's torch module on this worker; its
    ``named_parameters()`` must be exactly the manifest's target pieces
    of this rank, by name, shape and dtype (a parameter the manifest does
    not feed would silently go stale, so it is refused too).
    ``config``: the HuggingFace config (path or dict) the trainers build
    the manifest from; ``trainer``: their layout (see trainer_layout);
    ``engine``: "vllm" or "sglang"; ``tp``, ``tp_rank``: the engine's
    tensor parallelism; ``replica`` of ``replicas``: which engine this is.
    ``store`` ("host:port") or ``exchange`` (an object fabxfer.Context
    takes as its exchange, with rank and size): how the job meets.
    ``provider``, ``timeout_ms``: fabxfer.Context's. ``dtype``: the wire
    and parameter dtype, default the config's torch_dtype.

    A failure in the set-up (a parameter missing, a shape the manifest
    does not give) is told to the other members, whose set-up then fails
    naming this rank, instead of waiting for it until their timeout.
    """

    def __init__(self, model: Any, tp_rank: int, *, config: Any,
                 trainer: Any, engine: str, tp: int, replica: int = 0,
                 replicas: int = 1, store: Optional[str] = None,
                 exchange: Any = None, provider: Optional[str] = None,
                 timeout_ms: Optional[int] = None,
                 dtype: Optional[str] = None, store_timeout_s: float = 300,
                 prefix: str = PREFIX, engine_options: Any = None,
                 fp8: Any = None) -> None:
        if engine not in ENGINES:
            raise ValueError("engine=%r: give one of %s" % (
                engine, ", ".join(sorted(ENGINES))))
        if not 0 <= tp_rank < tp or not 0 <= replica < replicas:
            raise ValueError("TP rank %d of %d, replica %d of %d: out of "
                             "range" % (tp_rank, tp, replica, replicas))
        side = trainer_layout(trainer)
        # engine_options: the engine's MoE grid (vLLM's ep and placement,
        # SGLang's ep); fp8: the checkpoint's weight_block_size where the
        # engine serves FP8 with block scales (the trainers compute them)
        eng = ENGINES[engine](tp=tp, replicas=replicas,
                              **dict(engine_options or {}))
        self.manifest = layouts.sync_manifest(config, side, eng, dtype,
                                              fp8=fp8)
        self.rank = side.ranks + replica * tp + tp_rank
        self.size = side.ranks + eng.ranks
        self.version = 0  # the weights the engine loaded itself
        if exchange is None:
            if store is None:
                raise ValueError("ShadowSync: give store=\"host:port\" (the "
                                 "trainers' TCPStore) or an exchange")
            exchange = fabxfer.StoreExchange(
                connect_store(store, store_timeout_s), self.rank, self.size,
                prefix)
        with contextlib.ExitStack() as stack:
            # On an exception the stack exits the session (which refuses
            # the set-up, so that the others learn why) and the context.
            self.ctx = stack.enter_context(fabxfer.Context(
                provider=provider, exchange=exchange, timeout_ms=timeout_ms))
            self.session = stack.enter_context(
                fabxfer.Session(self.ctx, self.manifest))
            self.params = self._match(model)
            self.device = next(iter(self.params.values())).device
            for name, p in self.params.items():
                # The parameter's own memory, so that the engine's kernels
                # (and CUDA graphs captured on these addresses) see each
                # version once applied; peers write only the receive area.
                self.session.bind(fabxfer.TARGET, name, p.detach(),
                                  shadow=True)
            self.session.setup()
            self._stack = stack.pop_all()

    def _match(self, model: Any) -> Dict[str, Any]:
        """{name: parameter} of the manifest's target pieces of this rank,
        ValueError naming what the model lacks or has beyond them."""
        have = dict(model.named_parameters())  # tied ones once, as loaded
        # manifest name -> the engine's (a padded vocabulary's differs)
        want = {n: fabxfer.layouts.engine_name(n) for n in
                self.manifest.pieces(self.rank, fabxfer.TARGET)}
        missing = [e for e in want.values() if e not in have]
        extra = [n for n in have if n not in set(want.values())]
        why = []
        if missing:
            why.append("the model has no %s" % _few(missing))
        if extra:
            why.append("the manifest does not feed %s (they would go "
                       "stale)" % _few(extra))
        if why:
            raise ValueError("rank %d: the model's parameters are not the "
                             "manifest's target pieces: %s" % (
                                 self.rank, "; ".join(why)))
        return {n: have[e] for n, e in want.items()}

    def received(self) -> int:
        """The newest version wholly in the receive area and not applied
        yet, 0 if none. Never waits (it drives progress once)."""
        return self.session.received()

    def receive(self, version: int, timeout_s: float = 0.0) -> int:
        """Wait at most timeout_s for version to be wholly in the receive
        area; return received() then (>= version once it is there).
        Nothing here touches the parameters, but the calling thread waits:
        from an engine's step loop (an RPC between steps) keep timeout_s 0,
        a poll, and ask again after the next step."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.received()
            if got >= version or time.monotonic() >= deadline:
                return got
            time.sleep(0.001)

    def apply(self, version: int) -> Dict[str, Any]:
        """Copy version from the receive area into the parameters, waiting
        for its last bytes as Session.wait does (FxTimeoutError naming the
        missing trainers after the context's timeout). On CUDA the copies
        are queued on the current stream, so the engine's next kernels see
        the new weights without a host synchronisation."""
        stream = None
        if self.device.type == "cuda":
            import torch

            stream = torch.cuda.current_stream(self.device)
        t0 = time.perf_counter()
        self.session.apply(version, stream)
        pause = time.perf_counter() - t0
        self.version = version
        rep = self.session.report()
        return {"rank": self.rank, "version": version, "pause_s": pause,
                "apply_s": rep["apply_s"], "apply_bytes": rep["apply_bytes"]}

    def describe(self) -> Dict[str, Any]:
        """What this worker is in the job (small, picklable: an RPC's
        answer)."""
        return {"rank": self.rank, "size": self.size,
                "provider": self.ctx.provider, "version": self.version,
                "tensors": len(self.params),
                "bytes": sum(p.numel() * p.element_size()
                             for p in self.params.values())}

    def close(self, leave: bool = False) -> None:
        """End this worker's part. ``leave``: first tell the trainers, whose
        later pushes then skip this rank without an error (an engine that
        goes away while training goes on). Otherwise close only once no
        trainer will push again: its next push would time out on this
        rank."""
        try:
            if leave:
                self.session.leave()
        finally:
            self._stack.close()
