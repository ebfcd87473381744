#!/usr/bin/env python3
"""Start N copies of a command on this host as one torch.distributed job.

    python3 examples/launch.py -n 4 [--timeout 300] -- python3 script.py ARGS

Each copy gets MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK and LOCAL_WORLD_SIZE (what init_process_group("gloo") reads with
init_method "env://"), for machines where torchrun is missing or broken.
If one copy fails, the others are killed 3 s later (at once past the
timeout, or on Ctrl-C). The exit status is 0 only if every copy exited 0.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

import fabxfer  # free_port() only: the library is not loaded here


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s -n N [--timeout S] -- COMMAND [ARGS...]")
    ap.add_argument("-n", "--nproc", type=int, required=True,
                    help="number of copies (ranks)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds before the whole job is killed (600)")
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="the command, after --")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd or a.nproc < 1:
        ap.error("give -n N >= 1 and a command after --")

    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=os.environ.get("MASTER_PORT",
                                           str(fabxfer.free_port())),
               WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc),
               PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r),
                                            LOCAL_RANK=str(r)),
                              start_new_session=True)
             for r in range(a.nproc)]
    deadline = time.monotonic() + a.timeout
    status = 0
    while any(p.poll() is None for p in procs):
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            print("launch.py: %s; stopping the others" % (
                "rank %d exited %d" % (failed[0], procs[failed[0]].returncode)
                if failed else "interrupted" if deadline == 0
                else "timeout after %g s" % a.timeout),
                file=sys.stderr)
            grace = time.monotonic() + (3 if failed else 0)  # to exit by themselves
            while any(p.poll() is None for p in procs) and time.monotonic() < grace:
                time.sleep(0.05)
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            status = 1
            break
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            deadline = 0  # kill them all at the next turn
    for r, p in enumerate(procs):
        p.wait()
        if p.returncode != 0:
            print("launch.py: rank %d exited %d" % (r, p.returncode),
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
