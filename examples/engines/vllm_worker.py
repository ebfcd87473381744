"""fabxfer inside vLLM's worker processes: a worker extension whose
methods the driver calls on every TP worker with ``collective_rpc``.

    # ENGINE CALL (vLLM): the extension is named when the engine starts
    # (vllm serve --worker-extension-cls ...); examples/engines must be on
    # the workers' PYTHONPATH.
    llm = LLM(model=path, tensor_parallel_size=2,
              worker_extension_cls="vllm_worker.FabxferWorkerExtension")

    # ENGINE CALL (vLLM): collective_rpc runs a method on every TP worker
    # and returns their answers, a list.
    llm.collective_rpc("fabxfer_setup", kwargs=dict(
        trainer="fsdp:2", store="trainer0:29500"))      # with the trainers
    while serving:
        outputs = llm.generate(prompts, params)         # serve
        got = llm.collective_rpc("fabxfer_receive", args=(v,))  # a poll
        if min(got) >= v:                               # every TP worker
            llm.collective_rpc("fabxfer_apply", args=(v,))  # the pause
            llm.reset_prefix_cache()  # ENGINE CALL (vLLM): old weights' KV
            v += 1
    llm.collective_rpc("fabxfer_close")

vLLM adds this class to its worker class's bases, so ``self`` is vLLM's
worker: its model is ``self.model_runner.model``, whose
``named_parameters()`` are the names and TP cuts fabxfer.layouts.vllm
gives (``model.layers.0.self_attn.qkv_proj.weight``, ...). Every access
to vLLM is marked ``ENGINE CALL (vLLM)``; vllm itself is imported only
inside them, so this module imports without it (the tests drive it with
a module of vLLM's names and shapes, not with vLLM).

Weights as the checkpoint lays them out: bf16, or FP8 with block scales
(``fp8=(128, 128)``); a quantization whose parameters are what vLLM made
of the checkpoint after loading (AWQ, Marlin, re-laid FP8) is not the
trainers' tensors. After ``llm.sleep()`` the weights move: close and set
up again.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

try:
    from .shadow_sync import PREFIX, ShadowSync
except ImportError:  # imported as a top-level module (vLLM's import path)
    from shadow_sync import PREFIX, ShadowSync


class FabxferWorkerExtension:
    """Methods for ``collective_rpc``; each runs in every TP worker of the
    engine, in the thread that runs its steps, so between two steps.
    Answers are small dicts and ints (they travel back to the driver)."""

    _fabxfer: Optional[ShadowSync] = None

    def fabxfer_tp(self) -> Tuple[int, int]:
        """(this worker's TP rank, the TP size)."""
        # ENGINE CALL (vLLM): the worker's place in its tensor-parallel
        # group (vllm/distributed/parallel_state.py).
        from vllm.distributed import (get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)
        return (get_tensor_model_parallel_rank(),
                get_tensor_model_parallel_world_size())

    def fabxfer_model(self) -> Any:
        """The torch module this worker serves, as vLLM loaded it."""
        # ENGINE CALL (vLLM): the worker's model runner holds the model.
        return self.model_runner.model

    def fabxfer_setup(self, trainer: Any, store: Optional[str] = None,
                      config: Any = None, replica: int = 0,
                      replicas: int = 1, provider: Optional[str] = None,
                      timeout_ms: Optional[int] = None,
                      dtype: Optional[str] = None,
                      prefix: str = PREFIX, engine_options: Any = None,
                      fp8: Any = None) -> Dict[str, Any]:
        """Bind this worker's parameters as shadow targets and set up the
        session with the trainers (collective: they set up at the same
        time). ``trainer``: their layout ("fsdp:N", "megatron_tp:N",
        "replicas:N"); ``store``: their TCPStore, "host:port";
        ``config``: the HuggingFace config (path or dict) the trainers
        use, default the one this engine loaded; ``replica`` of
        ``replicas``: which engine this is among those the trainers feed;
        ``prefix``: the store keys' (the trainers' too);
        ``engine_options``: the MoE grid as started ({"ep": True} for
        --enable-expert-parallel); ``fp8``: the checkpoint's
        weight_block_size where the engine serves FP8. Returns this
        worker's place: rank, tensors, bytes."""
        if self._fabxfer is not None:
            raise RuntimeError("fabxfer_setup: set up already (rank %d); "
                               "fabxfer_close first" % self._fabxfer.rank)
        if config is None:
            # ENGINE CALL (vLLM): the HuggingFace config the engine loaded
            # (a transformers PretrainedConfig).
            config = self.model_runner.model_config.hf_config.to_dict()
        tp_rank, tp = self.fabxfer_tp()
        self._fabxfer = ShadowSync(
            self.fabxfer_model(), tp_rank, config=config, trainer=trainer,
            engine="vllm", tp=tp, replica=replica, replicas=replicas,
            store=store, provider=provider, timeout_ms=timeout_ms,
            dtype=dtype, prefix=prefix, engine_options=engine_options,
            fp8=fp8)
        return self._fabxfer.describe()

    def _sync(self, call: str) -> ShadowSync:
        if self._fabxfer is None:
            raise RuntimeError("%s: call fabxfer_setup first" % call)
        return self._fabxfer

    def fabxfer_receive(self, version: int, timeout_s: float = 0.0) -> int:
        """The newest version in this worker's receive area (0: none),
        after waiting at most timeout_s for ``version``. The bytes land
        while the engine serves; this only asks. The driver applies a
        version once every TP worker has it (the smallest answer)."""
        return self._sync("fabxfer_receive").receive(version, timeout_s)

    def fabxfer_apply(self, version: int) -> Dict[str, Any]:
        """Copy ``version`` into the parameters (CUDA: on the current
        stream, ahead of the next step's kernels); the only pause. Every
        TP worker applies the same version in the same RPC, so the group
        never runs a step on mixed weights."""
        return self._sync("fabxfer_apply").apply(version)

    def fabxfer_close(self, leave: bool = False) -> None:
        """End the sync on this worker (``leave``: the trainers skip it
        from their next push on, without an error)."""
        sync, self._fabxfer = self._sync("fabxfer_close"), None
        sync.close(leave)
