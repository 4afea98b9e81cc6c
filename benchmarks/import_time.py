"""What importing the package costs: the two measurements the CHANGELOG reports, each the median
of several fresh interpreters, with the load average of the machine before and after.

    python benchmarks/import_time.py [--runs 5]

1. ``python -X importtime -c "import pyg_private"``: the cumulative time of ``pyg_private`` in
   CPython's import log (microseconds, converted to seconds), and the heaviest modules it pulled in;
2. one interpreter that times ``import torch, torch_geometric`` and then
   ``import pyg_private, pyg_private.nn, pyg_private.transforms, pyg_private.models`` with
   ``time.perf_counter``: the package's own share on top of torch and PyG.

Also printed: which heavy optional dependencies the second interpreter ended up importing (Opacus,
dp-accounting, cryptography, Triton, mpmath, scipy, the C extensions).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

TIMED = ("import time; t = time.perf_counter(); import torch, torch_geometric; t1 = time.perf_counter(); "
         "import pyg_private, pyg_private.nn, pyg_private.transforms, pyg_private.models; "
         "t2 = time.perf_counter(); import sys; "
         "heavy = ('opacus', 'dp_accounting', 'cryptography', 'triton', 'mpmath', 'scipy'); "
         "native = sorted(m for m in sys.modules if m.startswith('pyg_private.') and m.endswith('_native') "
         "and m != 'pyg_private._native'); "
         "print(t1 - t, t2 - t1, ','.join(m for m in heavy if m in sys.modules) or '-', ','.join(native) or '-')")
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def import_log(python: str) -> list[tuple[int, int, str]]:
    """``(self, cumulative, module)`` for each line of ``-X importtime``'s log (microseconds)."""
    done = subprocess.run([python, "-X", "importtime", "-c", "import pyg_private"], capture_output=True, text=True,
                          check=True)
    rows = []
    for line in done.stderr.splitlines():
        match = LINE.match(line)
        if match:
            rows.append((int(match.group(1)), int(match.group(2)), match.group(4)))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)

    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    cumulative, heaviest = [], None
    for _ in range(args.runs):
        rows = import_log(args.python)
        cumulative.append(next(cum for _, cum, name in reversed(rows) if name == "pyg_private") / 1e6)
        heaviest = rows
    print(f"-X importtime, import pyg_private: median {statistics.median(cumulative):.2f} s "
          f"(runs: {', '.join(f'{c:.2f}' for c in cumulative)})")
    top = sorted(((cum, name) for _, cum, name in heaviest if "." not in name and name != "pyg_private"),
                 reverse=True)[:8]
    print("  heaviest top-level imports of the last run (cumulative): "
          + ", ".join(f"{name} {cum / 1e6:.2f} s" for cum, name in top))

    base, ours, heavy, native = [], [], "", ""
    for _ in range(args.runs):
        out = subprocess.run([args.python, "-c", TIMED], capture_output=True, text=True, check=True).stdout.split()
        base.append(float(out[0]))
        ours.append(float(out[1]))
        heavy, native = out[2], out[3]
    print(f"import torch, torch_geometric: median {statistics.median(base):.2f} s "
          f"(runs: {', '.join(f'{b:.2f}' for b in base)})")
    print(f"then pyg_private, .nn, .transforms, .models: median {statistics.median(ours):.2f} s "
          f"(runs: {', '.join(f'{o:.2f}' for o in ours)})")
    print(f"  heavy modules imported: {heavy}; C extensions loaded: {native}")
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
