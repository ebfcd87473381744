"""Membership from Python: leave(), remove_target() and join(). The other
multi-process scenarios (a target that leaves and exits, one that stops
and is removed, a join that comes too early) run in C:
tests/integration/test_members.c."""
from __future__ import annotations

import numpy as np
import pytest

import fabxfer
import harness
from conftest import PROVIDERS, one_provider


def one_rank_session(ctx):
    m = fabxfer.Manifest.from_tensors({"w": ("f32", (16,))}, {0: ["w"]},
                                      {0: {"w": None}})
    s = fabxfer.Session(ctx, m)
    src, dst = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    s.bind(fabxfer.SOURCE, "w", src)
    s.bind("target", "w", dst)
    s.setup()
    return s, src, dst


def test_remove_target_refuses_a_stranger(ctx1):
    s, _, _ = one_rank_session(ctx1)
    with s:
        with pytest.raises(fabxfer.InvalidArgumentError) as info:
            s.remove_target(5)
        assert "remove_target(5): rank 0 writes to no such target" in str(
            info.value)


def test_a_removed_target_is_skipped(ctx1):
    """This rank is its own source and target: once removed, its push
    skips it without an error and the report counts it."""
    s, src, dst = one_rank_session(ctx1)
    with s:
        s.push(1)
        s.wait(1)
        assert dst.tobytes() == src.tobytes()
        s.release(1)
        assert s.members() == {
            "rank": 0, "epoch": 0, "joins": 0, "join_s": 0.0,
            "joined_at": 0, "sources": [{"rank": 0, "state": "member"}],
            "targets": [{"rank": 0, "state": "member", "incarnation": 0,
                         "joined_at": 0, "join_s": 0.0}]}
        with pytest.raises(fabxfer.StateError, match="only a target leaves"):
            s.leave()  # it is a source of this session too
        s.remove_target(0)
        src += 1
        s.push(2)  # no target left: nothing written, no error
        assert dst[1] == 1.0
        assert s.report()["targets_left"] == 1
        m = s.members()
        assert (m["epoch"], m["targets"][0]["state"]) == (1, "left"), m


@pytest.mark.parametrize("provider", one_provider(1))
def test_a_killed_target_comes_back(provider, tmp_path):
    """workers.comeback: rank 2 is killed holding version 2; its new
    process joins through a StoreExchange once the source's push of 3
    named it, gets 3 at once (push_to) and 4, whole and checked."""
    ranks = harness.launch("comeback", 3, [str(tmp_path)], timeout=90,
                           env={"FX_TEST_PROVIDER": provider,
                                "FABXFER_VERIFY": "full"})
    by = {r.rank: r.result for r in ranks}
    assert "rank(s) 2" in by[0]["failed"], by[0]
    assert by[0]["sent"] > 0 and by[0]["left"] == 0, by[0]
    assert by[0]["joined"] == 1, by[0]
    assert "rank 2 joined the session at version 3" in by[2]["refused"]
    assert by[2]["checked"] > 0, by[2]


@pytest.mark.parametrize("provider", one_provider(2))
def test_fabxfer_run_restarts_a_killed_target(provider, tmp_path):
    """workers.restarted: as above under fabxfer-run --restart 1, the new
    process started by fabxfer-run and joined through its folder."""
    (job,) = harness.launch("restarted", 3, [str(tmp_path)], timeout=90,
                            env={"FX_TEST_PROVIDER": provider,
                                 "FABXFER_VERIFY": "full"},
                            fabxfer_run=True, restarts=1)
    by = {d["rank"]: d for d in job.results}
    assert sorted(by) == [0, 1, 2], job.output
    assert "rank 2 (pid" in job.output and "killed by signal SIGKILL" in \
        job.output, job.output
    assert "starting rank 2 again (FABXFER_RESTARTED=1" in job.output
    assert "rank(s) 2" in by[0]["failed"], by[0]
    assert by[0]["joined"] == 1, by[0]
    assert by[2]["again"] == 1
    assert "rank 2 joined the session at version 3" in by[2]["refused"]
    assert by[2]["checked"] > 0, by[2]
    # the membership as each rank saw it: the source before and after the
    # join, the new process after
    gone, back = by[0]["gone"], by[0]["back"]
    assert gone["epoch"] == 1 and gone["joins"] == 0, gone
    assert [(t["rank"], t["state"], t["incarnation"]) for t in
            gone["targets"]] == [(1, "member", 0), (2, "failed", 0)], gone
    assert back["epoch"] == 2 and back["joins"] == 1, back
    two = back["targets"][1]
    assert (two["rank"], two["state"], two["incarnation"], two["joined_at"]) \
        == (2, "member", 1, 3), back
    assert two["join_s"] > 0 and two["join_s"] == back["join_s"], back
    new = by[2]["members"]
    assert (new["epoch"], new["joined_at"], new["targets"]) == (1, 3, []), new
    assert new["sources"] == [{"rank": 0, "state": "member"}], new


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_compact_grid_grows_under_fabxfer_run(provider):
    """workers.grown: 2 trainer replicas -> one TP-2 group by rules, then
    the grid grows to two groups (Session.grow): the new ranks get the
    current version at once and the next, the first group every one."""
    (job,) = harness.launch("grown", 6, timeout=90,
                            env={"FX_TEST_PROVIDER": provider,
                                 "FABXFER_VERIFY": "full"},
                            fabxfer_run=True)
    by = {d["rank"]: d for d in job.results}
    assert sorted(by) == list(range(6)), job.output
    # every new rank takes w's and b's bytes from one trainer or the other
    assert by[0]["size"] == by[1]["size"] == 6, by[0]
    assert by[0]["joined"] + by[1]["joined"] >= 2, (by[0], by[1])
    assert by[0]["manifest"] and by[1]["manifest"], by[0]
    for r in (4, 5):
        assert by[r]["checked"] > 0, by[r]
        assert by[r]["members"]["joined_at"] == 2, by[r]
    joined = [t for t in by[0]["members"]["targets"] if t["rank"] >= 4]
    assert all(t["state"] == "member" and t["joined_at"] == 2
               for t in joined), by[0]["members"]


def test_join_refusals(ctx1):
    s, _, _ = one_rank_session(ctx1)
    with s:
        lonely = fabxfer.StoreExchange({}, 0, 1)
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match="a group of 1 with this rank at 0"):
            s.join(lonely)
        with pytest.raises(TypeError, match="rank and size"):
            s.join(object())
        with pytest.raises(fabxfer.BootstrapError,
                           match="not started by fabxfer-run"):
            s.join(fabxfer.RunGroup(0, 2, "r1-1"))  # not under fabxfer-run


def test_grow_refusals(ctx1):
    s, _, _ = one_rank_session(ctx1)
    with s:
        with pytest.raises(TypeError, match="manifest must be a Manifest"):
            s.grow(fabxfer.StoreExchange({}, 0, 2), "grown.json")
        with pytest.raises(fabxfer.InvalidArgumentError,
                           match="fx_session_grow: a group of 1"):
            s.grow(fabxfer.StoreExchange({}, 0, 1), s.manifest)
        assert ctx1.size == 1  # refused before anything grew


def test_store_exchange_order():
    class Store(dict):
        def get(self, key):  # noqa: A003 (a store's get waits; here all is in)
            return self[key]

        def set(self, key, value):  # noqa: A003
            self[key] = value

    store = Store()
    store.set("p/0/1", b"one")  # the other member was first
    ex = fabxfer.StoreExchange(store, 0, 2, prefix="p")
    assert ex.allgather(b"zero") == [b"zero", b"one"]
    with pytest.raises(ValueError, match="rank 2 outside a group of 2"):
        fabxfer.StoreExchange(store, 2, 2)
