"""fabxfer.layouts at scale: the compact form (sync_manifest(...,
compact=True), compact_json) gives every rank the pieces the listed form
gives it, piece for piece; its syncs between real processes bring every
engine tensor torch builds (layout_ref.torch_engine, the manifest made
compact); views with ranges in their names read as the views listed one
by one, bytes checked; and Kimi-K2 from 256 trainers to 128 servers is a
few entries and a few MiB of Python, counted, not timed.

Run as a script, this file is the ranks' worker of the syncs:
layout_ref.torch_engine with sync_manifest's compact form."""
from __future__ import annotations

import functools
import json
import os
import sys
import tracemalloc

import pytest

import fabxfer

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "..", "bench", "configs")
DEEPSEEK = os.path.join(CONFIGS, "tiny-deepseek-v3.json")
SMALL_DEEPSEEK = os.path.join(CONFIGS, "small-deepseek-v3.json")
QWEN3 = os.path.join(CONFIGS, "tiny-qwen3.json")
KIMI = os.path.join(CONFIGS, "kimi-k2.json")
LLAMA = os.path.join(HERE, "..", "data", "tiny-llama.json")
QWEN3_MOE = os.path.join(HERE, "..", "data", "tiny-qwen3-moe.json")


def _box(m, name, piece):
    """A piece as its box (a Flat as it is): the listed form's (dim,
    start, end) and the rules' Box say the same thing so."""
    shape = m.tensor(name)[1]
    if piece is None:
        return tuple((0, n) for n in shape)
    if isinstance(piece, fabxfer.Box):
        return tuple(piece.ranges)
    if isinstance(piece, fabxfer.Flat):
        return piece
    d, a, b = piece
    return tuple((a, b) if i == d else (0, n) for i, n in enumerate(shape))


def _same(config, trainer, engine, fp8=None):
    """Both forms of one sync: the same tensors (dtype, shape, target
    dtype) and, for every rank and role, the same pieces."""
    L = fabxfer.layouts
    try:
        listed = L.sync_manifest(config, trainer, engine, fp8=fp8)
    except (NotImplementedError, ValueError) as e:
        # what the listed form refuses, the compact one refuses too
        with pytest.raises((NotImplementedError, ValueError)):
            L.sync_manifest(config, trainer, engine, fp8=fp8, compact=True)
        pytest.skip(str(e))
    compact = L.sync_manifest(config, trainer, engine, fp8=fp8,
                              compact=True)
    assert sorted(listed.tensor_names) == sorted(compact.tensor_names)
    for name in listed.tensor_names:
        assert listed.tensor(name) == compact.tensor(name), name
        assert listed.piece_dtype(fabxfer.TARGET, name) == \
            compact.piece_dtype(fabxfer.TARGET, name), name
    pieces = 0
    for rank in range(trainer.ranks + engine.ranks):
        for role in (fabxfer.SOURCE, fabxfer.TARGET):
            want = {n: _box(listed, n, p)
                    for n, p in listed.pieces(rank, role).items()}
            got = {n: _box(compact, n, p)
                   for n, p in compact.pieces(rank, role).items()}
            assert got == want, (rank, role.name, sorted(
                set(got.items()) ^ set(want.items()))[:4])
            pieces += len(want)
    listed.close()
    compact.close()
    return pieces


@pytest.mark.parametrize("config", [DEEPSEEK, QWEN3_MOE, LLAMA, QWEN3])
@pytest.mark.parametrize("trainer", [
    "replicas(2)", "megatron_tp(2)", "megatron(tp=2, pp=2, dp=2, ep=2)",
    "megatron(tp=2, dp=1, ep=2, etp=1)", "megatron(tp=1, pp=3, dp=2, ep=2)"])
@pytest.mark.parametrize("engine", [
    "vllm(1)", "vllm(2, replicas=2)", "vllm(4)", "vllm(2, ep=True)",
    "vllm(2, ep=True, placement='round_robin')", "sglang(4, ep=2)"])
def test_compact_pieces_are_the_listed(config, trainer, engine):
    """Every rank's pieces by the rules are the listed form's, on either
    side (Megatron's stages, TP and expert grid, vLLM's and SGLang's
    cuts, views and stacks over TP or EP)."""
    L = fabxfer.layouts
    assert _same(config, eval("L." + trainer), eval("L." + engine)) > 0


def _changed(path, **changes):
    """The config at path with some of its fields changed."""
    with open(path) as f:
        return dict(json.load(f), **changes)


@pytest.mark.parametrize("config, trainer, engine, fp8", [
    # dense layers first and MoE every other layer
    (_changed(DEEPSEEK, first_k_dense_replace=2, moe_layer_freq=2,
              num_hidden_layers=6), "megatron(tp=2, pp=2, dp=2, ep=2)",
     "vllm(2, ep=True)", None),
    # a tied head over a vocabulary the engine pads
    (_changed(LLAMA, vocab_size=1000, tie_word_embeddings=True),
     "megatron_tp(2)", "vllm(4)", None),
    # sparse every other layer; experts cut wider than tp
    (_changed(QWEN3_MOE, decoder_sparse_step=2, mlp_only_layers=[]),
     "megatron(tp=2, dp=4, ep=2, etp=2)", "sglang(2, ep=2)", None),
    (DEEPSEEK, "megatron(tp=2, dp=2, ep=2)", "sglang(4)", (16, 16)),
    (DEEPSEEK, "megatron(tp=2, dp=2, ep=2)", "vllm(2, ep=True)", (16, 16))])
def test_compact_pieces_more_shapes(config, trainer, engine, fp8):
    """The same for the shapes a review tried beside the grid above."""
    L = fabxfer.layouts
    assert _same(config, eval("L." + trainer), eval("L." + engine),
                 fp8=fp8) > 0


def test_compact_pieces_fp8_and_scale():
    """FP8 targets (block scales, their views cut as the weights) and
    Kimi-K2's grid shape at a small model's size: 32 -> 32 ranks."""
    L = fabxfer.layouts
    assert _same(DEEPSEEK, L.megatron_tp(2), L.vllm(2), fp8=(16, 16)) > 0
    assert _same(SMALL_DEEPSEEK, L.megatron(tp=4, pp=2, dp=4, ep=16, etp=1),
                 L.vllm(tp=16, replicas=2)) > 0
    # a trainer's cut through FP8 blocks: both forms refuse it at once
    # (the compact one used to pass it on to every rank's set-up)
    with pytest.raises(ValueError, match="cuts through its FP8 blocks"):
        L.sync_manifest(DEEPSEEK, L.megatron(tp=8), L.vllm(2), fp8=(32, 32),
                        compact=True)
    with pytest.raises((ValueError, NotImplementedError)):
        L.sync_manifest(DEEPSEEK, L.megatron(tp=8), L.vllm(2), fp8=(32, 32))


def test_compact_refusals():
    """What rules cannot say is refused by name, not made wrong."""
    L = fabxfer.layouts
    with pytest.raises(NotImplementedError, match="fsdp has no compact"):
        L.sync_manifest(QWEN3, L.fsdp(2), L.vllm(2), compact=True)
    with pytest.raises(NotImplementedError, match="6 experts over EP 4 "
                       "are no equal blocks"):
        L.sync_manifest(QWEN3_MOE, L.replicas(1), L.vllm(4, ep=True),
                        compact=True)
    with pytest.raises(NotImplementedError, match="do not nest"):
        L.sync_manifest(QWEN3_MOE, L.megatron(tp=4, dp=3, ep=3, etp=2),
                        L.vllm(2), compact=True)


# ---- syncs of the compact form between real processes --------------------

def _worker(*args):
    """The ranks' side: layout_ref.torch_engine, its manifest compact."""
    import layout_ref
    L = fabxfer.layouts
    L.sync_manifest = functools.partial(L.sync_manifest, compact=True)
    layout_ref.torch_engine(*args)


@pytest.mark.parametrize("i,trainer,engine,config,ranks,extra", [
    (0, "megatron:tp=2,dp=2,ep=2", "vllm:2", DEEPSEEK, 6, []),
    (1, "megatron:tp=1,dp=2,ep=2", "vllm:4:ep:round_robin", DEEPSEEK, 6, []),
    (0, "replicas:2", "sglang:4:ep=2", DEEPSEEK, 6, []),
    (1, "megatron_tp:2", "vllm:2", LLAMA, 4, []),
    (0, "megatron_tp:2", "vllm:2", DEEPSEEK, 4, ["random", "16"])])
def test_compact_sync(monkeypatch, i, trainer, engine, config, ranks, extra):
    """Each rank expands the compact manifest itself: the engine's views
    and stacks (fused_qkv_a_proj, qkv_proj with replicated key-value
    heads, gate_up_proj, w13_weight and w2_weight over TP or EP, the
    padded vocabulary, FP8 with their scales' views) from trainers with
    replicas, every engine tensor equal to torch's."""
    import harness
    from conftest import one_provider
    monkeypatch.setattr(harness, "WORKER", os.path.abspath(__file__))
    got = harness.launch("compact_engine", ranks,
                         [trainer, engine, config] + extra,
                         env={"FX_TEST_PROVIDER": one_provider(i)[0]},
                         timeout=180)
    by = {r.result["rank"]: r.result for r in got}
    import layout_ref
    n = layout_ref.trainer_of(trainer).ranks
    assert sum(by[r]["bytes"] for r in range(n)) == \
        sum(by[r]["bytes"] for r in range(n, ranks)) > 0, by


# ---- views with ranges, read as listed -------------------------------------

def _ranged_doc(ranged: bool):
    """Two layers of three experts: a stack of each layer's experts (gate
    and up rows of two TP ranks, as w13_weight), a stack of whole ones
    (w2_weight), a view with padding; names with ranges or listed."""
    layers, experts = (1, 2), (0, 1, 2)

    def names(pat, vals):
        return [pat.format(*v) for v in vals]
    tensors = []
    for kind in ("g", "u"):
        if ranged:
            tensors.append({"name": "l.{1..2}.e.{0..2}.%s" % kind,
                            "dtype": "f32", "shape": [4, 3]})
        else:
            tensors += [{"name": n, "dtype": "f32", "shape": [4, 3]}
                        for n in names("l.{}.e.{}.%s" % kind,
                                       [(l, e) for l in layers
                                        for e in experts])]

    def slab(l, e):
        return [{"tensor": "l.%s.e.%s.%s" % (l, e, k), "start": a,
                 "end": a + 2} for a in (0, 2) for k in ("g", "u")]
    if ranged:
        tensors += [
            {"name": "l.{1..2}.w13",
             "view": {"stack": [slab("{1..2}", "{0..2}")]}},
            {"name": "l.{1..2}.w2",
             "view": {"stack": [{"tensor": "l.{1..2}.e.{0..2}.u"}]}},
            {"name": "l.{1..2}.gp", "view": {"dim": 0, "of": [
                {"tensor": "l.{1..2}.e.2.g"}, {"pad": 3}]}}]
    else:  # each entry's views, the first range slowest
        tensors += [{"name": "l.%d.w13" % l,
                     "view": {"stack": [slab(l, e) for e in experts]}}
                    for l in layers]
        tensors += [{"name": "l.%d.w2" % l,
                     "view": {"stack": [{"tensor": "l.%d.e.%d.u" % (l, e)}
                                        for e in experts]}}
                    for l in layers]
        tensors += [{"name": "l.%d.gp" % l, "view": {"dim": 0, "of": [
            {"tensor": "l.%d.e.2.g" % l}, {"pad": 3}]}} for l in layers]
    plain = [n for k in ("g", "u") for n in
             names("l.{}.e.{}.%s" % k, [(l, e) for l in layers
                                         for e in experts])]
    views = ["l.%d.%s" % (l, v) for v in ("w13", "w2", "gp") for l in layers]
    return {"tensors": tensors, "ranks": [
        {"rank": 0, "source": [{"tensor": n} for n in plain],
         "target": [{"tensor": n} for n in views]}]}, plain, views


def test_ranged_views_as_listed():
    """A view's name with ranges stands for the views listed one by one
    (its values fill its ranges' names), a stack's slab whose names hold
    one more range for a slab per value: the same tensors in the same
    order, the same shapes, and a sync on one rank writes each view as
    numpy builds it."""
    np = pytest.importorskip("numpy")
    from conftest import one_rank
    doc, plain, views = _ranged_doc(True)
    m = fabxfer.Manifest.from_dict(doc)
    listed = fabxfer.Manifest.from_dict(_ranged_doc(False)[0])
    assert m.tensor_names == listed.tensor_names
    for n in listed.tensor_names:
        assert m.tensor(n) == listed.tensor(n), n
    assert m.tensor("l.2.w13") == ("f32", (3, 8, 3))
    assert m.tensor("l.1.w2") == ("f32", (3, 4, 3))
    assert m.tensor("l.1.gp") == ("f32", (7, 3))
    rng = np.random.default_rng(3)
    src = {n: rng.standard_normal((4, 3)).astype(np.float32) for n in plain}
    dst = {n: np.full(m.tensor(n)[1], 7.0, np.float32) for n in views}
    with one_rank() as ctx, fabxfer.Session(ctx, m) as s:
        for n, a in src.items():
            s.bind(fabxfer.SOURCE, n, a)
        for n, a in dst.items():
            s.bind(fabxfer.TARGET, n, a)
        s.setup()
        s.push(1)
        s.wait(1)
    for l in (1, 2):
        def t(e, k):
            return src["l.%d.e.%d.%s" % (l, e, k)]
        w13 = np.stack([np.concatenate([t(e, "g")[:2], t(e, "u")[:2],
                                        t(e, "g")[2:], t(e, "u")[2:]])
                        for e in range(3)])
        assert (dst["l.%d.w13" % l] == w13).all()
        assert (dst["l.%d.w2" % l] == np.stack([t(e, "u")
                                                for e in range(3)])).all()
        assert (dst["l.%d.gp" % l][:4] == t(2, "g")).all()
        assert (dst["l.%d.gp" % l][4:] == 7.0).all()  # padding untouched
    m.close()
    listed.close()


def test_ranged_views_refused():
    """Ranges a view cannot take are refused, naming the range."""
    base = [{"name": "a.{0..1}.x.{0..2}", "dtype": "f32", "shape": [2]},
            {"name": "b", "dtype": "f32", "shape": [2]}]
    cases = [
        ({"name": "v.{0..1}", "view": {"dim": 0, "of": [{"tensor": "b"}]}},
         r"tensors\[2\]\.view\.of\[0\]\.tensor: \"b\" has no ranges: a "
         "view's name takes no ranges of its own"),
        ({"name": "v.{0..1}", "view": {"dim": 0, "of": [
            {"tensor": "a.{0..1}.x.{0..2}"}]}},
         "has 2 ranges and its view's name 1"),
        ({"name": "v", "view": {"stack": [[
            {"tensor": "a.0.x.{0..2}"}, {"tensor": "a.1.x.{0..1}"}]]}},
         r"stack\[0\]\[1\].*a slab's ranges make one slab per value of "
         "the same range")]
    for view, want in cases:
        with pytest.raises(fabxfer.InvalidArgumentError, match=want):
            fabxfer.Manifest.from_dict({"tensors": base + [view]})
    m = fabxfer.Manifest.from_dict({"tensors": base + [
        {"name": "v", "view": {"stack": [[{"tensor": "a.0.x.{0..2}"},
                                          {"tensor": "b"}]]}}]})
    assert m.tensor("v") == ("f32", (3, 4))  # b in every slab
    m.close()


# ---- Kimi-K2, 256 -> 128: counted ------------------------------------------

def test_kimi_compact_is_small():
    """Kimi-K2 from Megatron (tp 4, pp 16, dp 4, ep 16, etp 1) to vLLM
    (tp 16, 8 engines): a document of a few hundred JSON objects for its
    70,217 tensors and 242 views (its w13_weight stacks alone are 737,280
    ranges), and a build whose Python allocations peak at a few MiB past
    the record of the tensors' names (the listed form peaks at twice
    that). Counts, not times: a return to per-range objects fails them."""
    L = fabxfer.layouts
    trainer = L.megatron(tp=4, pp=16, dp=4, ep=16, etp=1)
    engine = L.vllm(tp=16, replicas=8)
    doc = json.loads(L.compact_json(KIMI, trainer, engine))

    def objects(o):
        if isinstance(o, dict):
            return 1 + sum(objects(v) for v in o.values())
        if isinstance(o, list):
            return sum(objects(v) for v in o)
        return 0
    assert len(doc["tensors"]) <= 40
    assert objects(doc) <= 400, objects(doc)
    fabxfer.Manifest().close()  # the library loaded before counting
    tracemalloc.start()
    try:
        m = L.sync_manifest(KIMI, trainer, engine, compact=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(m) == 70217
    assert peak < 40 << 20, peak
    shape = (384, 2 * 2048, 7168)
    assert m.tensor("model.layers.60.mlp.experts.w13_weight") == \
        ("bf16", shape)
    assert m.piece_box(256 + 17, fabxfer.TARGET,
                       "model.layers.60.mlp.experts.w13_weight") == \
        ((0, 384), (256, 512), (0, 7168))
    assert m.piece_box(255, fabxfer.SOURCE,
                       "model.layers.60.mlp.experts.383.up_proj.weight") == \
        ((0, 2048), (0, 7168))
    m.validate(384)
    m.close()


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import traceback
    try:
        assert sys.argv[1] == "compact_engine", sys.argv
        _worker(*sys.argv[2:])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
