"""The rows of an mps.sh run from bench/gpu.sh's all.txt: for each kind
(turns, mps) and job, the seconds a version of each round (ms), their
median against off of the same kind and job, and each rank's verify_s (ms)
per round (source(s) first).   python3 mps_summary.py all.txt"""
import json
import re
import statistics
import sys

text = open(sys.argv[1]).read()
parts = re.split(r'^=== (\S+)\n', text, flags=re.M)
rows = {}
for name, body in zip(parts[1::2], parts[2::2]):
    if not name.startswith('./mps/'):
        continue
    base = name.rsplit('/', 1)[-1]
    if base.startswith('ipc-') and base.endswith('.txt'):
        print(base[:-4], '|', ' | '.join(body.strip().splitlines()[:2]))
    elif base.endswith('.json'):
        job, mode, kind = base[:-5].split('-')
        kind, rnd = kind.split('.')
        fx = [r for r in json.loads(body) if r['mode'] == 'fabxfer'][0]
        rows.setdefault((kind, job), {}).setdefault(mode, []).append(fx)
for (kind, job), modes in sorted(rows.items()):
    off = statistics.median(r['seconds_per_version'] for r in modes['off'])
    for mode in ('off', 'sample', 'full'):
        runs = modes.get(mode, [])
        secs = [r['seconds_per_version'] for r in runs]
        if not secs:
            continue
        checks = ' | '.join(' '.join('%.2f' % (v * 1e3)
                                     for v in r.get('rank_verify_s', []))
                            for r in runs)
        print('%-6s %-6s %-7s %s  %+6.1f %%  verify_s %s' % (
            kind, job, mode, ' '.join('%7.3f' % (s * 1e3) for s in secs),
            (statistics.median(secs) / off - 1) * 100, checks))
