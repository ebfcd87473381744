"""pytest set-up of the Python tests: the package and library come from
PYTHONPATH and FABXFER_LIBRARY (tests/python/run.sh sets both, and
FX_TEST_RUN), falling back to the source tree and a build in _pybuild or
_build beside it for a run by hand."""
from __future__ import annotations

import os
import signal
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.dirname(os.path.dirname(HERE))

if not any(os.path.isdir(os.path.join(p, "fabxfer")) for p in sys.path if p):
    sys.path.insert(0, os.path.join(SRCDIR, "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(SRCDIR, "python")] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
for build in ("_pybuild", "_build"):
    lib = os.path.join(SRCDIR, build, ".libs", "libfabxfer.so")
    if "FABXFER_LIBRARY" not in os.environ and os.path.exists(lib):
        os.environ["FABXFER_LIBRARY"] = lib
    run = os.path.join(SRCDIR, build, "fabxfer-run")
    if "FX_TEST_RUN" not in os.environ and os.path.exists(run):
        os.environ["FX_TEST_RUN"] = run
# The tests choose their providers and timeouts themselves.
for var in ("FABXFER_PROVIDER", "FABXFER_BOOTSTRAP", "FABXFER_TIMEOUT_MS",
            "FABXFER_NOTIFY", "FABXFER_LOG"):
    os.environ.pop(var, None)

import fabxfer  # noqa: E402


def _stop(signum, frame):
    """SIGTERM (a step's or CI's timeout) as Ctrl-C: the running test's
    harness.launch then kills its jobs in its finally. Their ranks run in
    sessions of their own, which a signal to pytest's group misses, and a
    job left running holds ports, /dev/shm and GPU memory for the next."""
    raise KeyboardInterrupt("SIGTERM")


signal.signal(signal.SIGTERM, _stop)

# FX_PY_PROVIDERS="tcp;ofi_rxm" runs the provider-parametrized tests on one
# (scripts/run.sh under AddressSanitizer: the C suites cover both there).
PROVIDERS = [p for p in os.environ.get("FX_PY_PROVIDERS",
                                       "tcp;ofi_rxm,shm").split(",") if p]


def one_provider(i: int) -> list:
    """The i-th of PROVIDERS (in turn), for tests of Python-side logic
    (layouts, conversions) that take the same code over every provider:
    the C suites and the provider-parametrized tests cover the providers,
    and each of these costs a few seconds of CI a provider."""
    return [PROVIDERS[i % len(PROVIDERS)]]


def need_cuda():
    """torch, or a skip where it or a CUDA device is missing."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def one_rank(**kw) -> fabxfer.Context:
    """A context of a one-rank job whose exchange is trivial (the rank's
    own bytes), so that sessions set up within this process."""
    ex = fabxfer.CallableExchange(lambda data: [data], lambda: None,
                                  rank=0, size=1)
    kw.setdefault("provider", "tcp;ofi_rxm")
    return fabxfer.Context(exchange=ex, **kw)


def loopback(ctx: fabxfer.Context) -> fabxfer.Session:
    """A session of a one-rank job in which "w", 8 bytes, goes from the
    rank to itself, both sides bound (not set up)."""
    m = fabxfer.Manifest.from_tensors({"w": ("u8", (8,))}, {0: ["w"]},
                                      {0: ["w"]})
    s = fabxfer.Session(ctx, m)
    s.bind("source", "w", bytearray(8))
    s.bind("target", "w", bytearray(8))
    return s


@pytest.fixture
def ctx1():
    with one_rank() as ctx:
        yield ctx


@pytest.fixture(scope="session")
def header_text() -> str:
    with open(os.path.join(SRCDIR, "include", "fabxfer.h")) as f:
        return f.read()
