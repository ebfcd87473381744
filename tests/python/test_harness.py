"""No job outlives what started it: a pytest stopped by SIGTERM (a step's
or CI's timeout) or SIGKILL leaves none of its jobs' ranks running, nor
does a fabxfer-run killed outright."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

INNER = '''
import harness

def test_idle_job():
    harness.launch("idle", 2, [%r], timeout=300)
'''


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose: it holds nothing
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(what, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.05)
    return what()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_stopped_pytest_ends_its_jobs(tmp_path, sig):
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    (tmp_path / "test_inner.py").write_text(INNER % str(pids_dir))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # -p conftest: the suite's conftest.py as a plugin, as it is here
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "conftest", "--rootdir", str(tmp_path),
         str(tmp_path / "test_inner.py")],
        env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True)
    pids = []
    try:
        assert wait_for(lambda: len(os.listdir(pids_dir)) == 2 or
                        inner.poll() is not None, 120), \
            "the inner job's ranks did not start"
        assert inner.poll() is None, inner.communicate()[0].decode()
        pids = [int((pids_dir / n).read_text()) for n in sorted(
            os.listdir(pids_dir)) if not n.endswith(".tmp")]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        inner.send_signal(getattr(signal, sig))
        out = inner.communicate(timeout=120)[0].decode()
        left = [p for p in pids if not wait_for(lambda p=p: not alive(p), 30)]
        assert not left, "ranks %s outlived the pytest stopped by %s:\n%s" \
            % (left, sig, out)
        # SIGTERM: stopped as by Ctrl-C, not passed
        assert sig == "SIGKILL" or (inner.returncode != 0 and
                                    "KeyboardInterrupt" in out), out
    finally:
        if inner.poll() is None:
            os.killpg(inner.pid, signal.SIGKILL)
            inner.wait()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_killed_launcher_takes_its_ranks(tmp_path):
    run = os.environ.get("FABXFER_RUN")
    assert run, "FABXFER_RUN (the path of fabxfer-run) is not set"
    # each rank writes its pid, then waits to be killed
    rank = "echo $$ > %s/rank$RANK.tmp && mv %s/rank$RANK.tmp %s/rank$RANK " \
           "&& exec sleep 600" % ((str(tmp_path),) * 3)
    launcher = subprocess.Popen([run, "-n", "2", "sh", "-c", rank],
                                start_new_session=True)
    pids = []
    try:
        assert wait_for(lambda: len([n for n in os.listdir(tmp_path)
                                     if not n.endswith(".tmp")]) == 2 or
                        launcher.poll() is not None, 120), \
            "the ranks did not start"
        assert launcher.poll() is None, "fabxfer-run ended early"
        pids = [int((tmp_path / ("rank%d" % r)).read_text()) for r in (0, 1)]
        assert all(alive(p) for p in pids)
        launcher.kill()  # SIGKILL: nothing to forward
        launcher.wait()
        left = [p for p in pids if not wait_for(lambda p=p: not alive(p), 30)]
        assert not left, "ranks %s outlived fabxfer-run killed by SIGKILL" \
            % left
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
