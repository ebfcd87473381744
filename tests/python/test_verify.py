"""FABXFER_VERIFY from Python: the keyword, the report's fields and the
exception class. The faults that prove the checks catch what they should
are put in by tests/integration/test_verify.c, which can hook the library
(fx_test_fault); a Python program cannot."""
from __future__ import annotations

import numpy as np
import pytest

import fabxfer
from conftest import one_rank


def job(ctx, versions=3):
    """A one-rank job (source and target of its own tensors); the last
    push's and wait's reports, and every wait's units checked."""
    m = fabxfer.Manifest.from_tensors(
        {"w": ("f32", (64, 8)), "b": ("f32", (5,))},
        {0: ["w", "b"]}, {0: {"w": None, "b": None}})
    src = {"w": np.arange(512, dtype=np.float32).reshape(64, 8),
           "b": np.arange(5, dtype=np.float32)}
    dst = {"w": np.zeros((64, 8), np.float32), "b": np.zeros(5, np.float32)}
    with fabxfer.Session(ctx, m) as s:
        for n in src:
            s.bind(fabxfer.SOURCE, n, src[n])
            s.bind("target", n, dst[n])
        s.setup()
        units = []
        for v in range(1, versions + 1):
            for n in src:
                src[n] += 1
            s.push(v)
            pushed = s.report()
            s.wait(v)
            for n in src:
                assert dst[n].tobytes() == src[n].tobytes()
            waited = s.report()
            units.append(waited["verify_units"])
            s.release(v)  # this rank pushes the next itself
        return pushed, waited, units


def test_full_checks_every_segment():
    with one_rank(verify="full") as ctx:
        pushed, waited, _ = job(ctx)
    # the source checksummed its bytes and wrote a head and a CRC per
    # tensor; the target checked both tensors, all their bytes
    nbytes = 512 * 4 + 5 * 4
    assert pushed["verify_bytes"] == nbytes, pushed
    assert pushed["verify_sent"] == 24 + 2 * 4, pushed
    assert pushed["verify_failed"] == 0
    assert waited["verify_units"] == 2 and waited["verify_bytes"] == nbytes
    assert waited["verify_failed"] == 0
    # what the checks took: the source's wait for its sums (timed even
    # where short), the target's check after the version was in
    assert waited["verify_s"] > 0 and pushed["verify_s"] > 0


def test_off_checks_nothing():
    with one_rank(verify="off") as ctx:
        pushed, waited, _ = job(ctx)
    assert pushed["verify_sent"] == 0 and waited["verify_units"] == 0
    assert pushed["verify_s"] == 0 and waited["verify_s"] == 0


@pytest.mark.parametrize("mode", [None, "auto", "sample"])
def test_sample_rotates(mode, monkeypatch):
    """Every 2 versions: the source's first version checks both tensors,
    then the two, small enough to be one group of neighbours, are due in
    the even versions."""
    monkeypatch.setenv("FABXFER_VERIFY_EVERY", "2")
    with one_rank(**({} if mode is None else {"verify": mode})) as ctx:
        _, _, units = job(ctx, versions=4)
    assert units == [2, 2, 0, 2], units


def test_bad_mode():
    with pytest.raises(fabxfer.InvalidArgumentError) as info:
        one_rank(verify="always")
    assert 'verify="always": expected auto, full, sample or off' in str(
        info.value)
    assert "fx_" not in info.value.detail


def test_verify_error_class():
    assert fabxfer.STATUS_CLASSES[-15] is fabxfer.VerifyError
    assert fabxfer.VerifyError.status_name == "FX_ERR_VERIFY"
    assert issubclass(fabxfer.VerifyError, fabxfer.FabxferError)
    assert "checksum" in fabxfer.strerror(-15)
