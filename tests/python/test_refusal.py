"""A refusal on one rank before or during set-up reaches every rank (issue
34): three ranks under torch.distributed (gloo, started with env://
variables here), rank 0 a source, 1 and 2 targets. Every rank's error
names the rank and its reason, instead of "the application's allgather
returned -11" chained to gloo's "connection closed"."""
from __future__ import annotations

import harness


def run(case, tmp_path, expect_rc=None):
    ranks = harness.launch("refusal", 3, [case], timeout=150,
                           expect_rc=expect_rc,
                           env={"FX_TEST_DIR": str(tmp_path)})
    return {r.rank: r.result for r in ranks if r.results}


def test_a_bind_refused_on_one_rank(tmp_path):
    res = run("bind", tmp_path)
    why = ("bind('w'): rank 1's target piece of 'w' is bf16 of shape (4, 6), "
           "but the tensor given is torch.float16 of shape (4, 6)")
    # rank 1: its own error, from bind()
    assert res[1]["error"] == "InvalidArgumentError", res
    assert why in res[1]["text"], res[1]
    # the others: from setup(), naming rank 1 and its reason
    for r in (0, 2):
        assert res[r]["error"] == "InvalidArgumentError", res
        assert "rank 1 refused the session set-up: " + why in \
            res[r]["text"], res[r]
        assert "allgather" not in res[r]["text"], res[r]
        assert res[r]["cause"] is None, res[r]


def test_an_exception_before_setup_inside_the_session(tmp_path):
    res = run("inside", tmp_path)
    assert res[1]["error"] == "KeyError", res
    for r in (0, 2):
        assert res[r]["error"] == "InvalidArgumentError", res
        assert "rank 1 refused the session set-up: KeyError: 'layers.0.w " \
            "is not in the checkpoint'" in res[r]["text"], res[r]


def test_a_rank_that_raises_before_its_session(tmp_path):
    res = run("raise", tmp_path, expect_rc={2: 1})
    assert res[2]["error"] == "RuntimeError", res
    for r in (0, 1):
        assert res[r]["error"] == "BootstrapError", res
        assert "rank 2 did not join the set-up: it left with RuntimeError: " \
            "the engine could not load its config (gloo: " in \
            res[r]["text"], res[r]
        assert "allgather returned" not in res[r]["text"], res[r]
        assert res[r]["cause"], res[r]  # gloo's own error stays the cause


def test_a_rank_that_exits_before_its_session(tmp_path):
    res = run("exit", tmp_path, expect_rc={2: 3})
    assert 2 not in res, res
    for r in (0, 1):
        assert res[r]["error"] == "BootstrapError", res
        assert "rank 2 did not join the set-up (gloo: " in res[r]["text"], \
            res[r]


def test_a_subgroup_names_its_own_ranks(tmp_path):
    """An exchange over dist.new_group([1, 2]): only those two take part
    (fabxfer's ranks 0 and 1); the one that leaves is named by its rank
    in the group."""
    res = run("subgroup", tmp_path, expect_rc={2: 1})
    assert 0 not in res, res  # rank 0 took no part
    assert res[2]["error"] == "RuntimeError", res
    assert res[1]["error"] == "BootstrapError", res
    assert "rank 1 did not join the set-up: it left with RuntimeError: " \
        "the engine could not load its config (gloo: " in \
        res[1]["text"], res[1]
