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
import layout_ref
from conftest import PROVIDERS, need_cuda, one_provider

VERSIONS = 5


def devices(i):
    """(device, provider) to run a scenario on: the CPU over the i-th
    provider (one_provider), CUDA over each."""
    return [("cpu", p) for p in one_provider(i)] + \
        [("cuda", p) for p in PROVIDERS]


def launch(scenario, device, provider):
    """scenario's 4 ranks with their tensors on device ("cuda": skipped
    where there is none), VERSIONS versions."""
    if device == "cuda":
        need_cuda()
    return harness.launch(scenario, 4, [device, str(VERSIONS)],
                          env={"FX_TEST_PROVIDER": provider},
                          timeout=120 if device == "cpu" else 180)


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


@pytest.mark.parametrize("device, provider", devices(1))
def test_layouts(device, provider):
    check(launch("torch_layouts", device, provider))


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


@pytest.mark.parametrize("device, provider", devices(0))
def test_fp8_block_scales(device, provider):
    check_fp8(launch("torch_fp8", device, provider))


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
QWEN3_MOE = os.path.join(HERE, "..", "data", "tiny-qwen3-moe.json")
DEEPSEEK = os.path.join(HERE, "..", "..", "bench", "configs",
                        "tiny-deepseek-v3.json")
FAMILIES = (QWEN3, LLAMA, QWEN3_MOE, DEEPSEEK)


@pytest.mark.parametrize("provider,trainer,engine,config,ranks", [
    (PROVIDERS[0], "fsdp:2", "vllm:2", QWEN3, 4),
    (PROVIDERS[-1], "megatron_tp:2", "sglang:4", LLAMA, 6),
    (PROVIDERS[0], "megatron:tp=1,dp=2,ep=2", "vllm:4:ep", QWEN3_MOE, 6),
    (PROVIDERS[-1], "fsdp1:2", "vllm:2:ep:round_robin", DEEPSEEK, 4),
    (PROVIDERS[0], "fsdp:2", "sglang:4:ep=2", DEEPSEEK, 6)])
# Megatron's TP-cut experts into vLLM's TP-cut stacks: test_engine_layout_fp8
def test_engine_layout_sync(provider, trainer, engine, config, ranks):
    """layout_ref.torch_engine: trainers in HuggingFace's names (FSDP2,
    FSDP1 flat shards, Megatron tp x dp x ep) to the engines' layouts
    (fused qkv_proj and gate_up_proj, key-value heads replicated over TP,
    o_proj and down_proj cut along dim 1, the padded vocabulary, MLA's
    fused_qkv_a_proj, FusedMoE's stacked w13_weight and w2_weight over
    TP or EP, linear or round robin), every engine tensor equal to the
    one torch builds itself, padding left as the engine had it."""
    got = harness.launch("torch_engine", ranks, [trainer, engine, config],
                         env={"FX_TEST_PROVIDER": provider}, timeout=120)
    by = {r.result["rank"]: r.result for r in got}
    n = layout_ref.trainer_of(trainer).ranks
    sent = sum(by[r]["bytes"] for r in range(n))
    assert sent == sum(by[r]["bytes"] for r in range(n, ranks)), by
    assert len({by[r]["tensors"] for r in range(n, ranks)}) == 1, by


@pytest.mark.parametrize("engine", ["vllm:2"])  # SGLang's grid: above
def test_engine_layout_fp8(engine):
    """DeepSeek-V3 served in FP8 with block scales (16 x 16 here, 128 x 128
    in its checkpoints) from Megatron TP 2 trainers in bf16 (experts cut
    over TP too, as the engine's MoE TP cuts them): every FP8
    weight of the engine, fused (fused_qkv_a_proj, gate_up_proj) and
    stacked (w13_weight, w2_weight), and each fused scale tensor beside it
    (w13_weight_scale_inv, ...) equal to the reference conversion by
    search, cut as the engine cuts them."""
    ranks = 2 + int(engine.split(":")[1])
    got = harness.launch("torch_engine", ranks, ["megatron_tp:2", engine,
                                                 DEEPSEEK, "random", "16"],
                         env={"FX_TEST_PROVIDER": one_provider(1)[0]},
                         timeout=180)
    names = {r.result["tensors"] for r in got[2:]}
    assert len(names) == 1, got


def test_transformers_names():
    """The HuggingFace tensors layouts expects are a transformers model's
    own, names, shapes and dtypes, for the four families (where
    transformers is installed: the GPU machine, not CI)."""
    pytest.importorskip("transformers")
    L = fabxfer.layouts
    for config in FAMILIES:
        m = L.sync_manifest(config, layout_ref.trainer_of("replicas:1"),
                            layout_ref.engine_of("vllm:1"))
        want = {n: (tuple(s), layout_ref.DTYPES[m.tensor(n)[0]]) for n, s in
                L.hf_tensors(L.load_config(config)).items()}
        got = {n: (tuple(t.shape), str(t.dtype).split(".")[1]) for n, t in
               layout_ref.hf_state(config).items()}
        assert got == want, (config, sorted(set(got) ^ set(want))[:8],
                             [(n, got[n], want[n]) for n in got
                              if n in want and got[n] != want[n]][:8])


@pytest.mark.parametrize("config", FAMILIES)
def test_engine_layout_transformers(config):
    """A transformers model's own tensors (random weights) from FSDP2
    trainers to vLLM's TP 2, every engine tensor torch's, and the
    engine's forward pass over its TP shards gives the model's own
    logits (but DeepSeek-V3's; the GPU machine, where transformers
    is)."""
    pytest.importorskip("transformers")
    i = FAMILIES.index(config)
    got = harness.launch("torch_engine", 4, ["fsdp:2", "vllm:2", config,
                                             "transformers"],
                         env={"FX_TEST_PROVIDER": one_provider(i)[0]},
                         timeout=180)
    assert len({r.result["tensors"] for r in got[2:]}) == 1


def test_engine_layout_dtensor():
    """FSDP2's DTensors (Shard(0) on a mesh of the 2 trainers), read by
    layouts.dtensor on the trainers, their local shards bound as they
    are, to vLLM's TP 2 (torch with DTensor: the GPU machine, not CI's
    1.13)."""
    pytest.importorskip("torch.distributed.tensor")
    harness.launch("torch_engine", 4, ["dtensor:2", "vllm:2", QWEN3],
                   env={"FX_TEST_PROVIDER": one_provider(0)[0]}, timeout=180)


def test_padding_kept_by_an_apply():
    """A shadow target of a padded view: the apply copies what the source
    wrote and leaves the padding as the engine had it (a vocabulary of 10
    rows padded to 16, this rank's rows 8 to 16: 2 of the embedding's)."""
    np = pytest.importorskip("numpy")
    from conftest import one_rank
    m = fabxfer.Manifest()
    m.add_tensor("emb", "f32", (10, 4))
    m.add_view("emb#padded", 0, ["emb", (None, 0, 6)])
    m.add_piece(0, fabxfer.SOURCE, "emb")
    m.add_piece(0, fabxfer.TARGET, "emb#padded", 0, 8, 16)
    src = np.arange(40, dtype=np.float32).reshape(10, 4)
    live = np.full((8, 4), 7.0, np.float32)
    with one_rank() as ctx, fabxfer.Session(ctx, m) as s:
        s.bind(fabxfer.SOURCE, "emb", src)
        s.bind(fabxfer.TARGET, "emb#padded", live, shadow=True)
        s.setup()
        s.push(1)
        s.wait(1)
        s.apply(1)
        assert (live[:2] == src[8:]).all(), live
        assert (live[2:] == 7.0).all(), live  # the padding, untouched


@pytest.mark.parametrize("config", FAMILIES[:3])
def test_logits_see_a_misplaced_row(config):
    """The engine's forward pass (engine_forward) over vLLM's TP 1 layout
    of random weights gives hf_logits' logits; with gate and up swapped in
    one gate_up_proj, or one expert's w13 (a layout whose bytes all land,
    in the wrong rows), it does not."""
    torch = pytest.importorskip("torch")
    import json

    import engine_forward as ef
    L = fabxfer.layouts
    cfg = L.load_config(config)
    with open(config) as f:
        raw = json.load(f)
    m = L.sync_manifest(config, layout_ref.trainer_of("replicas:1"),
                        layout_ref.engine_of("vllm:1"))
    full = layout_ref.full_tensors(m, config)
    w = {n: layout_ref.reference(full, cfg, "vllm:1", 0, n)
         for n in m.pieces(1, fabxfer.TARGET)}
    tokens = torch.randint(0, cfg["vocab"], (12,),
                           generator=torch.Generator().manual_seed(3))
    cos, sin = ef.rope_tables(raw, cfg["head_dim"], 12)
    want = ef.hf_logits(full, cfg, raw, tokens, cos, sin)
    experts = list(range(cfg["experts"]))
    ef.compare(ef.engine_logits(w, cfg, raw, tokens, cos, sin, 1, 0,
                                experts, None), want, "as laid out")
    last = cfg["layers"] - 1
    name = "model.layers.%d.mlp.%s" % (last, "experts.w13_weight"
                                       if last in cfg["moe_layers"] else
                                       "gate_up_proj.weight")
    t = w[name]
    t.copy_(torch.cat(t.chunk(2, -2)[::-1], -2))  # up, then gate
    with pytest.raises(AssertionError, match="logits differ"):
        ef.compare(ef.engine_logits(w, cfg, raw, tokens, cos, sin, 1, 0,
                                    experts, None), want, "swapped")


def test_engine_layouts_validate():
    """Every trainer layout to every engine layout, for the four
    families: the manifest passes set-up's checks (every engine byte but
    padding held by a trainer, no two trainers overlapping) and each
    engine rank's tensors have the engine's shapes."""
    torch = pytest.importorskip("torch")
    L = fabxfer.layouts
    trainers = ["replicas:1", "fsdp:3", "fsdp1:2", "megatron_tp:2",
                "megatron:tp=2,pp=2,dp=2,ep=2",
                "megatron:tp=2,dp=1,ep=2,etp=1"]
    engines = ["vllm:1", "vllm:2", "vllm:4", "vllm:2:ep",
               "vllm:4:ep:round_robin", "sglang:2", "sglang:4:ep=2"]
    for config in FAMILIES:
        cfg = L.load_config(config)
        for t in trainers:
            for e in engines:
                side, eng = layout_ref.trainer_of(t), layout_ref.engine_of(e)
                m = L.sync_manifest(config, side, eng)
                m.validate(side.ranks + eng.ranks)
                full = {n: torch.empty(s, device="meta")  # shapes only
                        for n, s in L.hf_tensors(cfg).items()}
                for r in range(eng.tp):
                    for name, shape in L.engine_tensors(
                            m, side.ranks + r).items():
                        want = layout_ref.reference(full, cfg, e, r, name)
                        assert shape == tuple(want.shape), (config, t, e,
                                                            name)
                m.close()


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
    assert cfg["kv_heads"] == 4 and cfg["qk_norm"] and not cfg["experts"]
    # a vocabulary of 2000 padded to 2048: rank 2's last 48 rows padding
    m = L.sync_manifest(dict(json.load(open(QWEN3)), vocab_size=2000),
                        L.replicas(1), L.vllm(tp=2))
    assert L.engine_tensors(m, 2)["lm_head.weight"] == (1024, 256)
    assert m.piece(2, fabxfer.TARGET, "lm_head.weight" + L.PADDED) == \
        (0, 1024, 2048)
    with pytest.raises(NotImplementedError, match="to 1024, which TP 12"):
        L.sync_manifest(dict(json.load(open(QWEN3)), vocab_size=1000,
                             num_attention_heads=12, num_key_value_heads=12),
                        L.replicas(1), L.vllm(tp=12))
    with pytest.raises(NotImplementedError, match="key-value heads .3. "
                       "that divide it"):
        L.sync_manifest(dict(json.load(open(QWEN3)), num_key_value_heads=3),
                        L.replicas(1), L.sglang(tp=2))
    with pytest.raises(NotImplementedError, match="6 experts divisible "
                       "by ep 4"):
        L.sync_manifest(QWEN3_MOE, L.replicas(1), L.sglang(tp=4, ep=4))
    with pytest.raises(NotImplementedError, match="vLLM TP 2 cuts model.layers"
                       ".0.self_attn.q_b_proj.weight into 96 rows per "
                       "rank, not whole FP8 blocks of 128"):
        L.sync_manifest(DEEPSEEK, L.replicas(1), L.vllm(tp=2),
                        fp8=(128, 128))
    with pytest.raises(ValueError, match="ep 4 does not divide 6 experts"):
        L.sync_manifest(QWEN3_MOE, L.megatron(dp=4, ep=4), L.vllm(tp=1))
    with pytest.raises(ValueError, match=r"etp x ep \(2 x 2\) must divide "
                       r"tp x dp \(2 x 1\)"):
        L.megatron(tp=2, ep=2)
    # Qwen3-MoE: layer 0 dense (mlp_only_layers), layer 1 routed experts
    moe = L.load_config(QWEN3_MOE)
    assert moe["moe_layers"] == (1,) and moe["experts"] == 6
    m = L.sync_manifest(QWEN3_MOE, L.replicas(1), L.vllm(tp=4, ep=True))
    got = L.engine_tensors(m, 4)  # TP rank 3: experts 5 only
    assert got["model.layers.1.mlp.experts.w13_weight"] == (1, 128, 128)
    assert got["model.layers.1.mlp.experts.w2_weight"] == (1, 128, 64)
    assert "model.layers.0.mlp.gate_up_proj.weight" in got
    # DeepSeek-V3: MLA's fused down-projection, named per engine
    ds = L.engine_tensors(L.sync_manifest(DEEPSEEK, L.replicas(1),
                                          L.sglang(tp=2)), 1)
    assert ds["model.layers.1.self_attn.fused_qkv_a_proj_with_mqa.weight"] \
        == (96 + 64 + 16, 256)
    assert L.load_config(DEEPSEEK)["moe_layers"] == (1, 2)


def test_dtensor_placements():
    """dtensor() reads placements as torch's DTensor gives them (mesh,
    Shard(d), Replicate): an HSDP mesh of 2 x 2 (replicas x shards) and a
    2-D TP x FSDP cut; a Partial is refused. The objects stand in for
    DTensors (torch 1.13 here has none); the GPU machine's run builds real
    ones (test_dtensor_live)."""
    class P:
        def __init__(self, kind, dim=0):
            self.kind, self.dim = kind, dim

        def is_shard(self):
            return self.kind == "shard"

        def is_replicate(self):
            return self.kind == "replicate"

        def __repr__(self):
            return self.kind.capitalize() + "()"

    class Mesh:
        def __init__(self, grid):
            self.mesh = _List(grid)

    class T:
        def __init__(self, grid, placements):
            self.device_mesh, self.placements = Mesh(grid), placements

    L = fabxfer.layouts
    lay = L.dtensor({"w": T([[0, 1], [2, 3]], [P("replicate"), P("shard")]),
                     "b": T([[0, 1], [2, 3]], [P("shard", 1), P("shard")]),
                     "n": object()})
    assert lay.ranks == 4
    assert lay.piece(3, "w", (7, 4)) == (0, 4, 7)
    assert lay.piece(2, "w", (7, 4)) == (0, 0, 4)
    assert lay.piece(1, "b", (6, 4)) == fabxfer.Box(((3, 6), (0, 2)))
    assert lay.piece(2, "b", (6, 4)) == fabxfer.Box(((0, 3), (2, 4)))
    assert lay.piece(0, "n", (3,)) is None
    with pytest.raises(NotImplementedError, match="Partial"):
        L.dtensor({"w": T([0, 1], [P("partial")])})
    strided = P("shard")
    strided.split_factor = 2
    with pytest.raises(NotImplementedError, match="w is Shard.*, a strided "
                       "shard"):
        L.dtensor({"w": T([0, 1], [strided])})


class _List(list):
    def tolist(self):
        return list(self)
