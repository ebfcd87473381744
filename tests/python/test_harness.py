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


def rank_pids(folder, n: int, proc: subprocess.Popen, who: str) -> list:
    """The pids that n ranks write into folder (rank<r>, each by a
    rename), once all have, while proc, which started them, still runs."""
    def written() -> list:
        return sorted(f for f in os.listdir(folder) if not f.endswith(".tmp"))

    assert wait_for(lambda: len(written()) == n or proc.poll() is not None,
                    120), "%s's ranks did not start" % who
    assert proc.poll() is None, "%s ended early:\n%s" % (
        who, (proc.communicate()[0] or b"").decode())
    pids = [int((folder / f).read_text()) for f in written()]
    assert all(alive(p) for p in pids)
    return pids


def outlived(pids: list) -> list:
    """Those of pids still running after a while."""
    return [p for p in pids if not wait_for(lambda p=p: not alive(p), 30)]


def end(proc: subprocess.Popen, pids: list) -> None:
    """Whatever a test left: proc's session and the ranks."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
        pids = rank_pids(pids_dir, 2, inner, "the inner pytest")
        inner.send_signal(getattr(signal, sig))
        out = inner.communicate(timeout=120)[0].decode()
        left = outlived(pids)
        assert not left, "ranks %s outlived the pytest stopped by %s:\n%s" \
            % (left, sig, out)
        # SIGTERM: stopped as by Ctrl-C, not passed
        assert sig == "SIGKILL" or (inner.returncode != 0 and
                                    "KeyboardInterrupt" in out), out
    finally:
        end(inner, pids)


def test_killed_launcher_takes_its_ranks(tmp_path):
    run = os.environ.get("FX_TEST_RUN")
    assert run, "FX_TEST_RUN (the path of fabxfer-run) is not set"
    # each rank writes its pid, then waits to be killed
    rank = "echo $$ > %s/rank$RANK.tmp && mv %s/rank$RANK.tmp %s/rank$RANK " \
           "&& exec sleep 600" % ((str(tmp_path),) * 3)
    launcher = subprocess.Popen([run, "-n", "2", "sh", "-c", rank],
                                start_new_session=True)
    pids = []
    try:
        pids = rank_pids(tmp_path, 2, launcher, "fabxfer-run")
        launcher.kill()  # SIGKILL: nothing to forward
        launcher.wait()
        left = outlived(pids)
        assert not left, "ranks %s outlived fabxfer-run killed by SIGKILL" \
            % left
    finally:
        end(launcher, pids)
