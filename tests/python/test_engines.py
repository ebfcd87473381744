"""The engine side in practice (issue 38): examples/engines' vLLM worker
extension and SGLang custom loader, in a job of 2 trainers and one engine
of TP 2, updates while serving through shadow regions.

No vLLM or SGLang is installed here, and these tests do not pretend
otherwise: engine_workers.py builds, on each engine rank, a torch module
with the engine's parameter names and TP shapes, and calls the example's
code the way the engine calls it (collective_rpc; the custom loader). A
change of the engines' own internals (where a worker keeps its model,
how the loader is called) is not caught here.

What is checked, on every engine rank and version: while the next version
is in the receive area the live parameters still hold the previous one
bit for bit; after apply every parameter equals the engine's tensor built
with torch ops from the trainers' full tensors (q/k/v and gate/up rows of
the TP rank concatenated, o_proj and down_proj cut along dim 1, the
vocabulary split), bit for bit; every byte the trainers sent is one the
engines applied."""
from __future__ import annotations

import os

import pytest

import fabxfer
import harness
from conftest import one_provider

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3 = os.path.join(HERE, "..", "..", "bench", "configs", "tiny-qwen3.json")
LLAMA = os.path.join(HERE, "..", "data", "tiny-llama.json")
VERSIONS = 2


@pytest.mark.parametrize("engine,trainer,config,provider", [
    # tied embeddings (lm_head is embed_tokens), Megatron's cuts
    ("vllm", "megatron_tp:2", LLAMA, one_provider(0)[0]),
    # an untied head and Qwen3's q/k norms, FSDP2's Shard(0)
    ("sglang", "fsdp:2", QWEN3, one_provider(1)[0])])
def test_engine_worker(engine, trainer, config, provider):
    pytest.importorskip("torch")
    ranks = harness.launch("engine_worker", 4,
                           [engine, trainer, config, str(VERSIONS)],
                           env={"FX_TEST_PROVIDER": provider}, timeout=120)
    by = {r.rank: r.result for r in ranks}
    L = fabxfer.layouts
    kind, n = trainer.split(":")
    m = L.sync_manifest(config, getattr(L, kind)(int(n)),
                        getattr(L, engine)(tp=2))
    for e in (2, 3):
        d = by[e]
        assert d["role"] == "engine", d
        assert d["tensors"] == len(m.pieces(e, fabxfer.TARGET)), d
        # each version applied whole: every byte of the rank's parameters
        assert d["applied"] == [d["bytes"]] * VERSIONS, d
    for v in range(VERSIONS):
        assert by[0]["sent"][v] + by[1]["sent"][v] == \
            by[2]["bytes"] + by[3]["bytes"], by


def test_engine_worker_refused():
    """An engine worker whose model lacks a parameter of the manifest
    refuses the set-up: it names the parameter, and every other member's
    set-up fails at once naming that rank, instead of waiting for it."""
    pytest.importorskip("torch")
    ranks = harness.launch(
        "engine_worker", 4, ["vllm", "fsdp:2", QWEN3, str(VERSIONS)],
        env={"FX_TEST_PROVIDER": one_provider(0)[0],
             "FX_TEST_DROP": "3:model.norm.weight"},
        timeout=60, expect_rc={r: 1 for r in range(4)})
    why = "the model has no model.norm.weight"
    assert "ValueError: rank 3: the model's parameters are not the " \
        "manifest's target pieces: " + why in ranks[3].output
    for r in ranks[:3]:
        assert "rank 3 refused the session set-up: rank 3: " in r.output, \
            r.output
        assert why in r.output, r.output
