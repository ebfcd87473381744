"""The RL example as the README starts it: fabxfer-run sets
torch.distributed's variables, two trainers push, two tensor-parallel
inference ranks check their logits against the trainer's; over two "hosts"
with a path per pair; examples/launch.py (the launcher for machines without
fabxfer-run) runs it the same way; its --async mode (updates while
serving: shadow regions applied between decode steps, pushes overlapped
with training); and its --elastic mode (an inference rank killed, its new
process joins the running session and checks the next version)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
STEPS = 2
PATHS = os.path.join(os.path.dirname(HERE), "integration", "test_paths.sh")


def run_example(launcher, provider, args=(), steps=STEPS):
    pytest.importorskip("torch")
    env = dict(os.environ, FABXFER_PROVIDER=provider)
    cmd = launcher + [sys.executable, os.path.join(EXAMPLES,
                      "rl_weight_sync.py"), "--steps", str(steps)] + \
        list(args)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=240)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out
    assert "ok: %d versions pushed and verified on 2 inference ranks" % steps \
        in out, out
    assert "over %s:" % provider in out, out
    return out


def test_example_under_fabxfer_run():
    run_example([os.environ["FX_TEST_RUN"], "-n", "4", "-t", "200"],
                "tcp;ofi_rxm")


def test_example_over_two_hosts(monkeypatch):
    """A path per pair with the application's exchange: shm,tcp;ofi_rxm,
    trainer 1 and inference rank 2 on a second "host" (a UTS namespace,
    through test_paths.sh's --rank), the blobs through torch.distributed
    (TorchExchange). Each trainer's inference rank is on the other host:
    the weights cross over tcp;ofi_rxm. (The example over shm alone runs
    in test_example_async.)"""
    if os.geteuid() != 0 or subprocess.run(
            ["unshare", "--uts", "true"]).returncode != 0:
        pytest.skip("a UTS namespace per host needs root and unshare")
    monkeypatch.setenv("FX_HOST_B", "1 2")
    monkeypatch.setenv("FABXFER_LOG", "info")
    out = run_example([os.environ["FX_TEST_RUN"], "-n", "4", "-t", "200",
                       "--", PATHS, "--rank"], "shm,tcp;ofi_rxm")
    for a, b in ((0, 2), (1, 3), (2, 0), (3, 1)):
        assert "rank %d: rank %d is reached over tcp;ofi_rxm" % (a, b) in out, \
            out


def test_example_under_launch_py():
    run_example([sys.executable, os.path.join(EXAMPLES, "launch.py"), "-n",
                 "4", "--"], "tcp;ofi_rxm")


def test_example_async():
    """Over shm: its shadows and overlapped pushes are the package's calls
    on any provider, and test_serve.py runs those over both."""
    out = run_example([os.environ["FX_TEST_RUN"], "-n", "4", "-t", "200"],
                      "shm", ["--async"])
    assert "updates while serving (--async)" in out, out
    assert "inference paused" in out and "trainers blocked" in out, out
    assert "MISMATCH" not in out, out


def test_example_elastic():
    """Inference rank 3 is killed after version 1; fabxfer-run starts it
    again (--restart 1) 5 s later, and its new process joins through the
    job's folder once a trainer's push of 2 named it, gets 2 at once
    (push_to) and 3, and checks their logits. (The example's own
    supervisor, for launchers that restart nothing, joins through a
    StoreExchange, as test_members' comeback does.) Before version 3 a
    third inference group, rank 4, outside the job until then, joins as
    the trainers grow it (Session.grow), and checks 3."""
    # the new process starts 5 s late, longer than the trainers' 3 s
    # timeout, as torch and CUDA make a restart on the GPU machine
    late = ["sh", "-c", '[ "${FABXFER_RESTARTED:-0}" = 0 ] || sleep 5; '
            'exec "$@"', "late"]
    out = run_example([os.environ["FX_TEST_RUN"], "-n", "5", "-t", "200",
                       "--restart", "1"] + late,
                      "tcp;ofi_rxm", ["--tp", "1", "--elastic", "--grow-at",
                                      "3"], steps=3)
    assert "starting rank 3 again (FABXFER_RESTARTED=1" in out, out
    for v in (2, 3):  # 2 at once (push_to), 3 as the others
        assert "version %d, inference rank 3 (new process): max|diff|" % v \
            in out, out
    assert "named the dead rank" in out, out
    assert "version 3: inference rank(s) 4 joined as a third group" in out
    assert "version 3, inference rank 4 (third group): max|diff|" in out, out
    assert "MISMATCH" not in out, out
