"""The layouts of real trainers and engines from Python: a compact
manifest whose pieces the library's rules give each rank (workers.
torch_compact), FSDP flat shards,
expert boxes (fabxfer.Flat, fabxfer.Box), vLLM's fused qkv as a view, and
f32 masters served as bf16 (set_target_dtype), synced between real
processes with every byte checked against torch's own rounding
(workers.torch_layouts); bf16 weights served as FP8 with block scales
from the CPU and the GPU, checked against a reference e4m3 by search
(workers.torch_fp8); the manifest's Python side on its own."""
from __future__ import annotations

import json
import os

import pytest

import fabxfer
import harness
from conftest import PROVIDERS, one_provider

VERSIONS = 5


def check(ranks):
    results = sorted((r.result for r in ranks), key=lambda d: d["rank"])
    assert [d["rank"] for d in results] == [0, 1, 2, 3]
    for d in results:
        assert d["report"]["version"] == VERSIONS
        if d["role"] == "TARGET":
            assert d["verified"] == VERSIONS
    sent = sum(d["report"]["bytes"] for d in results if d["role"] == "SOURCE")
    got = sum(d["report"]["bytes"] for d in results if d["role"] == "TARGET")
    # the wire carries bf16: half the bytes of the f32 masters
    assert sent == got == 2 * (12 * 8 * 2 + 2 * 8 * 4 * 2 + 5 * 2)


@pytest.mark.parametrize("provider", one_provider(1))
def test_layouts_cpu(provider):
    check(harness.launch("torch_layouts", 4, ["cpu", str(VERSIONS)],
                         env={"FX_TEST_PROVIDER": provider}, timeout=120))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_layouts_cuda(provider):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    check(harness.launch("torch_layouts", 4, ["cuda", str(VERSIONS)],
                         env={"FX_TEST_PROVIDER": provider}, timeout=180))


def check_fp8(ranks):
    results = sorted((r.result for r in ranks), key=lambda d: d["rank"])
    for d in results:
        assert d["report"]["version"] == VERSIONS
        if d["role"] == "TARGET":
            assert d["verified"] == VERSIONS
    got = sum(d["report"]["bytes"] for d in results if d["role"] == "TARGET")
    # FP8, a byte an element: rows [0, 21) of each weight to one server,
    # columns from 21 to the other; 4 bytes a 16x16 block's scale to both
    assert got == 21 * (40 + 96) + 64 * (19 + 75) + 2 * 4 * (4 * 3 + 4 * 6)


@pytest.mark.parametrize("provider", one_provider(0))
def test_fp8_block_scales_cpu(provider):
    check_fp8(harness.launch("torch_fp8", 4, ["cpu", str(VERSIONS)],
                             env={"FX_TEST_PROVIDER": provider}, timeout=120))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_fp8_block_scales_cuda(provider):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    check_fp8(harness.launch("torch_fp8", 4, ["cuda", str(VERSIONS)],
                             env={"FX_TEST_PROVIDER": provider}, timeout=180))


def test_manifest_layouts_python_side():
    m = fabxfer.Manifest()
    m.add_tensor("w", "f32", (6, 10))
    m.set_target_dtype("w", "bf16")
    m.add_tensor("u", "f32", (2, 10))
    m.set_target_dtype("u", "bfloat16")
    m.add_view("wu", 0, ["w", ("u", 0, 1)])
    assert m.tensor("wu") == ("f32", (7, 10))
    m.add_flat(0, fabxfer.SOURCE, "w", 0, 33)
    m.add_box(1, fabxfer.SOURCE, "w", [(3, 6), (0, 10)])
    m.add_box(2, fabxfer.TARGET, "wu", [(1, 7), (2, 5)])
    assert m.piece(0, fabxfer.SOURCE, "w") == fabxfer.Flat(0, 33)
    assert m.piece_shape(0, fabxfer.SOURCE, "w") == (33,)
    assert m.piece_shape(2, fabxfer.TARGET, "wu") == (6, 3)
    assert m.piece_bytes(0, fabxfer.SOURCE, "w") == 33 * 4
    assert m.piece_bytes(2, fabxfer.TARGET, "wu") == 6 * 3 * 2
    assert m.piece_dtype(fabxfer.TARGET, "wu") == "bf16"
    assert m.piece_dtype(fabxfer.SOURCE, "wu") == "f32"
    with pytest.raises(fabxfer.InvalidArgumentError,
                       match=r"\[2, 12\) along dim 1 is not a range"):
        m.add_box(3, fabxfer.TARGET, "w", [(0, 1), (2, 12)])
    with pytest.raises(fabxfer.UnsupportedError,
                       match="does not convert i32 to bf16"):
        m.add_tensor("i", "i32", (3,))
        m.set_target_dtype("i", "bf16")
    m.close()


def test_manifest_layouts_from_json():
    m = fabxfer.Manifest.from_dict({
        "tensors": [
            {"name": "a", "dtype": "f32", "shape": [4, 6],
             "target_dtype": "bf16"},
            {"name": "b", "dtype": "f32", "shape": [2, 6],
             "target_dtype": "bf16"},
            {"name": "ab", "view": {"dim": 0, "of": [
                {"tensor": "a", "start": 0, "end": 2}, {"tensor": "b"},
                {"tensor": "a", "start": 2, "end": 4}]}}],
        "ranks": [
            {"rank": 0, "source": [{"tensor": "a", "flat": [0, 13]},
                                   {"tensor": "b", "box": [[0, 2], [0, 3]]}]},
            {"rank": 1, "target": [{"tensor": "ab",
                                    "box": [[1, 5], [2, 6]]}]}]})
    assert m.tensor("ab") == ("f32", (6, 6))
    assert m.piece(0, fabxfer.SOURCE, "a") == fabxfer.Flat(0, 13)
    assert m.piece(1, fabxfer.TARGET, "ab") == fabxfer.Box(((1, 5), (2, 6)))
    assert m.piece_dtype(fabxfer.TARGET, "ab") == "bf16"
    assert m.piece_bytes(1, fabxfer.TARGET, "ab") == 4 * 4 * 2
    m.close()


def test_compact_pieces():
    """What the rules give each rank, as Manifest.pieces and piece_box
    see it, names with ranges expanded."""
    from workers import COMPACT_MANIFEST
    m = fabxfer.Manifest.from_dict(COMPACT_MANIFEST)
    w = ["layers.0.w", "layers.1.w", "layers.2.w"]
    assert m.pieces(0, fabxfer.SOURCE) == dict(
        {n: fabxfer.Box(((0, 3), (0, 9))) for n in w}, norm=None)
    assert m.pieces(1, fabxfer.SOURCE)["layers.2.w"] == \
        fabxfer.Box(((3, 6), (0, 9)))
    assert m.pieces(4, fabxfer.TARGET) == dict(
        {n: fabxfer.Box(((0, 6), (6, 9))) for n in w}, norm=None)
    assert m.piece_shape(3, fabxfer.TARGET, "layers.1.w") == (6, 3)
    assert m.piece_bytes(3, fabxfer.TARGET, "layers.1.w") == 6 * 3 * 2
    assert m.piece_box(2, fabxfer.TARGET, "norm") == ((0, 9),)
    assert m.pieces(2, fabxfer.SOURCE) == {}
    assert m.pieces(0, fabxfer.TARGET) == {}
    with pytest.raises(fabxfer.InvalidArgumentError, match="rank 0 holds no "
                       "target piece of tensor \"norm\" by the manifest's "
                       "rules"):
        m.piece_box(0, fabxfer.TARGET, "norm")


def test_piece_box_listed():
    """piece_box of listed pieces: whole, a dim's range, a box; a flat
    range refused by name."""
    m = fabxfer.Manifest.from_tensors(
        {"a": ("f32", (4, 6)), "b": ("f32", (4, 6))},
        sources={0: {"a": None, "b": fabxfer.Flat(1, 13)}},
        targets={1: {"a": (1, 2, 6), "b": fabxfer.Box(((0, 4), (0, 6)))}})
    assert m.piece_box(0, fabxfer.SOURCE, "a") == ((0, 4), (0, 6))
    assert m.piece_box(1, fabxfer.TARGET, "a") == ((0, 4), (2, 6))
    assert m.piece_box(1, fabxfer.TARGET, "b") == ((0, 4), (0, 6))
    with pytest.raises(fabxfer.UnsupportedError, match="flat range"):
        m.piece_box(0, fabxfer.SOURCE, "b")
    assert m.piece_flat(0, fabxfer.SOURCE, "b") == (1, 13)
    with pytest.raises(fabxfer.UnsupportedError, match="is a box"):
        m.piece_flat(1, fabxfer.TARGET, "b")


def test_compact_flat_pieces():
    """A rules' flat cut (FSDP's flat shards): a range that is no box is a
    Flat, one that is a box a Box, and piece_shape is what to allocate."""
    m = fabxfer.Manifest.from_dict({
        "version": 1,
        "tensors": [{"name": "a", "dtype": "f32", "shape": [7, 5]},
                    {"name": "b", "dtype": "f32", "shape": [6, 5]}],
        "layout": {
            "sources": {"grid": [["fsdp", 3]], "rules": [
                {"tensors": "*", "cut": {"fsdp": "flat"}}]},
            "targets": {"first": 3, "grid": [["tp", 1]],
                        "rules": [{"tensors": "*"}]}}})
    assert m.pieces(1, fabxfer.SOURCE) == {
        "a": fabxfer.Flat(11, 23), "b": fabxfer.Box(((2, 4), (0, 5)))}
    assert m.piece_flat(0, fabxfer.SOURCE, "a") == (0, 11)
    assert m.piece_shape(2, fabxfer.SOURCE, "a") == (12,)
    assert m.piece_bytes(2, fabxfer.SOURCE, "a") == 12 * 4
    assert m.pieces(3, fabxfer.TARGET) == {"a": None, "b": None}


@pytest.mark.parametrize("provider", one_provider(1))
def test_compact_sync(provider):
    ranks = harness.launch("torch_compact", 5, [str(VERSIONS)],
                           env={"FX_TEST_PROVIDER": provider}, timeout=120)
    results = sorted((r.result for r in ranks), key=lambda d: d["rank"])
    for d in results:
        assert d["report"]["version"] == VERSIONS
        if d["role"] == "TARGET":
            assert d["verified"] == VERSIONS
            assert d["pieces"] == dict(
                {"layers.%d.w" % i: [6, 3] for i in range(3)}, norm=[9])
    got = sum(d["report"]["bytes"] for d in results if d["role"] == "TARGET")
    # every weight once, cut three ways; the norm whole to each server
    assert got == 3 * 6 * 9 * 2 + 3 * 9 * 2


# ---- fabxfer.layouts: the engines' own layouts from a config ---------------

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3 = os.path.join(HERE, "..", "..", "bench", "configs", "tiny-qwen3.json")
LLAMA = os.path.join(HERE, "..", "data", "tiny-llama.json")


@pytest.mark.parametrize("provider,trainer,tp,config", [
    (PROVIDERS[0], "fsdp", 2, QWEN3),
    (PROVIDERS[-1], "megatron_tp", 2, LLAMA)])
def test_engine_layout_sync(provider, trainer, tp, config):
    """workers.torch_engine: trainers in HuggingFace's names (FSDP2
    Shard(0), Megatron TP) to vLLM's TP layout (fused qkv_proj and
    gate_up_proj, o_proj and down_proj cut along dim 1, the vocabulary
    split), every engine tensor equal to torch's own cat and split."""
    ranks = harness.launch("torch_engine", 4, [trainer, str(tp), config],
                           env={"FX_TEST_PROVIDER": provider}, timeout=120)
    by = {r.result["rank"]: r.result for r in ranks}
    fused = 19 if config == QWEN3 else 14  # per layer 7 (+2 qk norms)
    assert by[2]["tensors"] == by[3]["tensors"] == fused, by
    sent = by[0]["bytes"] + by[1]["bytes"]
    assert sent == by[2]["bytes"] + by[3]["bytes"], by


def test_engine_layout_names_and_refusals():
    L = fabxfer.layouts
    m = L.sync_manifest(QWEN3, L.replicas(1), L.vllm(tp=2))  # ranks 1, 2
    p = "model.layers.1."
    assert m.piece(1, fabxfer.TARGET, p + "self_attn.qkv_proj.weight") == \
        (0, 0, (256 + 128 + 128) // 2)
    assert m.piece(1, fabxfer.TARGET, p + "self_attn.o_proj.weight") == \
        (1, 0, 128)
    assert m.piece(2, fabxfer.TARGET, p + "mlp.down_proj.weight") == \
        (1, 384, 768)
    assert m.piece(2, fabxfer.TARGET, "lm_head.weight") == (0, 1024, 2048)
    assert m.piece(1, fabxfer.TARGET, p + "self_attn.q_norm.weight") is None
    assert p + "self_attn.q_proj.weight" not in m.pieces(1, fabxfer.TARGET)
    assert L.fsdp(3).piece(2, "x", (7, 4)) == (0, 6, 7)
    assert L.fsdp(8).piece(7, "x", (7, 4)) is False  # torch.chunk: empty
    cfg = L.load_config(QWEN3)
    with pytest.raises(NotImplementedError, match="pads a vocabulary of 2000"):
        L.sync_manifest(dict(json.load(open(QWEN3)), vocab_size=2000),
                        L.replicas(1), L.vllm(tp=2))
    with pytest.raises(NotImplementedError, match="key-value heads .4."):
        L.sync_manifest(QWEN3, L.replicas(1), L.sglang(tp=8))
    with pytest.raises(NotImplementedError, match="mixture-of-experts"):
        L.load_config(dict(json.load(open(QWEN3)), num_experts=8))
    assert cfg["kv_heads"] == 4 and cfg["qk_norm"]
