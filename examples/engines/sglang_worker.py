"""fabxfer inside SGLang's TP workers: a custom weight loader, which
SGLang runs in every TP worker on the ModelRunner's model, carrying
fabxfer's commands in place of weights.

    import sglang as sgl
    import sglang_worker                      # examples/engines on the path

    # ENGINE CALL (SGLang): the loader must be allowed when the engine
    # starts (--custom-weight-loader sglang_worker.fabxfer_loader).
    engine = sgl.Engine(model_path=path, tp_size=2,
                        custom_weight_loader=[sglang_worker.LOADER])

    def run(op, flush_cache=False, **args):
        # ENGINE CALL (SGLang): every TP worker's ModelRunner calls
        # fabxfer_loader(self.model, named_tensors), between batches.
        engine.update_weights_from_tensor(
            sglang_worker.command(op, **args),
            load_format=sglang_worker.LOADER, flush_cache=flush_cache)

    run("setup", trainer="fsdp:2", store="trainer0:29500")  # with them
    ...                                   # serve; trainers push version v
    run("apply", version=v, flush_cache=True)  # the pause; drop old KV
    run("close")

The next version lands in each parameter's receive area while SGLang
serves, with no call at all; ``apply`` is the only pause. Unlike vLLM's
collective_rpc, SGLang gives back nothing of what a loader returns, so
there is no poll through the engine: the controller applies version v
once the trainers' push of v returned (the bytes are sent then, and
apply waits at most for the last of them, bounded by FABXFER_TIMEOUT_MS).
Code running in the worker process itself may poll ``sync_of(model)
.received()``.

Every access to SGLang is marked ``ENGINE CALL (SGLang)``; sglang itself
is imported only inside them, so this module imports without it (the
tests drive it with a module of SGLang's names and shapes, not with
SGLang). Weights as the checkpoint lays them out, as for vLLM.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Tuple

try:
    from .shadow_sync import ShadowSync
except ImportError:  # imported as a top-level module (SGLang's import path)
    from shadow_sync import ShadowSync

#: load_format of update_weights_from_tensor, and the import path SGLang's
#: --custom-weight-loader must list: this module as the workers import it.
LOADER = __name__ + ".fabxfer_loader"
#: The name prefix of a command among named_tensors.
COMMAND = "fabxfer."
OPS = ("setup", "apply", "close")

log = logging.getLogger(__name__)
#: id(model) -> its sync, in this worker process (one model a worker).
_SYNCS: Dict[int, ShadowSync] = {}


def command(op: str, **args: Any) -> List[Tuple[str, Any]]:
    """The named_tensors of update_weights_from_tensor that carry one
    command: ("fabxfer.<op>", its arguments as JSON bytes in a uint8
    tensor, which SGLang's serializer carries to every TP worker).
    setup: trainer, store, config (default the engine's), replica,
    replicas, provider, timeout_ms, dtype, prefix (ShadowSync's);
    apply: version; close: leave."""
    import torch

    if op not in OPS:
        raise ValueError("command(%r): one of %s" % (op, ", ".join(OPS)))
    data = json.dumps(args).encode()
    return [(COMMAND + op, torch.tensor(list(data), dtype=torch.uint8))]


def engine_tp() -> Tuple[int, int]:
    """(this worker's TP rank, the TP size)."""
    # ENGINE CALL (SGLang): the worker's place in its tensor-parallel group
    # (sglang/srt/distributed/parallel_state.py).
    from sglang.srt.distributed import (get_tensor_model_parallel_rank,
                                        get_tensor_model_parallel_world_size)
    return (get_tensor_model_parallel_rank(),
            get_tensor_model_parallel_world_size())


def sync_of(model: Any) -> ShadowSync:
    """The sync set up on model in this process (KeyError before setup)."""
    try:
        return _SYNCS[id(model)]
    except KeyError:
        raise KeyError("fabxfer: no sync set up on this model in this "
                       "process: run the setup command first") from None


def fabxfer_loader(model: Any, named_tensors: List[Tuple[str, Any]]) -> None:
    """What SGLang calls in each TP worker for load_format=LOADER: run the
    fabxfer commands among named_tensors, in order; load any other tensor
    as SGLang's default loader would. A failed command raises, as a failed
    weight load does."""
    weights = []
    for name, t in named_tensors:
        if not name.startswith(COMMAND):
            weights.append((name, t))
            continue
        # SGLang moved the tensor to the worker's device: bring it back
        args = json.loads(bytes(t.cpu().tolist()).decode())
        _run(model, name[len(COMMAND):], args)
    if weights:
        # ENGINE CALL (SGLang): the model's own loader (load_format None).
        model.load_weights(weights)


def _run(model: Any, op: str, args: Dict[str, Any]) -> None:
    key = id(model)
    if op == "setup":
        if key in _SYNCS:
            raise RuntimeError("fabxfer setup: set up already (rank %d); "
                               "close first" % _SYNCS[key].rank)
        if args.get("config") is None:
            # ENGINE CALL (SGLang): its model classes keep the HuggingFace
            # config they were built from as model.config.
            args["config"] = model.config.to_dict()
        tp_rank, tp = engine_tp()
        _SYNCS[key] = ShadowSync(model, tp_rank, engine="sglang", tp=tp,
                                 **args)
        log.info("fabxfer: %s", _SYNCS[key].describe())
    elif op == "apply":
        log.info("fabxfer: %s", sync_of(model).apply(int(args["version"])))
    elif op == "close":
        sync = sync_of(model)
        del _SYNCS[key]
        sync.close(bool(args.get("leave", False)))
    else:
        raise ValueError("fabxfer: unknown command %r (one of %s)" % (
            op, ", ".join(OPS)))
