"""A live target releases a version only when it says so (issue 34): with
the progress thread landing writes while it computes, a target that holds
version v after wait(v) returned sees no byte of v+1, and the source's
push of v+1 stays not done, until it calls release(v) or wait(v+1)."""
from __future__ import annotations

import pytest

import harness
from conftest import PROVIDERS


@pytest.mark.parametrize("how", ["release", "wait"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_live_target_holds_its_version(provider, how):
    ranks = harness.launch("live_hold", 2, [how], timeout=120,
                           env={"FX_TEST_PROVIDER": provider,
                                "FABXFER_PROGRESS": "thread"})
    src, tgt = ranks[0].result, ranks[1].result
    # never done while the target held version 1, however often asked
    assert src["done_while_held"] == 0 and src["polls"] >= 100, src
    # the target's tensors were version 1's after the hold (checked in the
    # worker, byte for byte) and version 2's after wait(2)
    assert tgt["got"] == 2, tgt
