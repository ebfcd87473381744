"""Membership from Python: leave() and remove_target(). The multi-process
scenarios (a target that leaves and exits, one that stops and is removed)
run in C: tests/integration/test_members.c."""
from __future__ import annotations

import numpy as np
import pytest

import fabxfer


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
        with pytest.raises(fabxfer.StateError, match="only a target leaves"):
            s.leave()  # it is a source of this session too
        s.remove_target(0)
        src += 1
        s.push(2)  # no target left: nothing written, no error
        assert dst[1] == 1.0
        assert s.report()["targets_left"] == 1
