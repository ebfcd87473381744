"""What the job benchmarks of this folder share: the parser of their
options, --config, --provider, --versions and --json among them, and
playing a rank of a job on this host, or starting their own command line
again as its ranks."""
import argparse
import os
import socket
import subprocess
import sys


def parser(doc):
    """The options of a script whose docstring is doc: --config so far."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--config", default="bench/configs/qwen3-0.6b.json",
                   help="HuggingFace config.json (default: %(default)s)")
    return p


def parse(p, provider, versions):
    """The options of parser p, given what every job benchmark here takes
    after its own: --provider (default provider), --versions (the timed
    versions, described by versions) and --json."""
    p.add_argument("--provider", default=provider,
                   help="libfabric provider (default: %(default)s)")
    p.add_argument("--versions", type=int, default=5,
                   help="timed versions %s, after one warm-up (default: "
                   "%%(default)s)" % versions)
    p.add_argument("--json", help="write the results there too")
    return p.parse_args()


def run(rank_main, a, n):
    """rank_main(a) in a rank (RANK set), else this command line again as
    the job's n ranks."""
    if "RANK" in os.environ:
        return rank_main(a)
    run_ranks(n)


def run_ranks(n):
    """This command line again as n processes, ranks 0 to n - 1 of
    torch.distributed's env:// (MASTER_ADDR 127.0.0.1, a free
    MASTER_PORT); exits with the highest of their statuses."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(
        os.environ, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port))) for r in range(n)]
    sys.exit(max(p.wait() for p in procs))
