"""Start-up time of the command line (< 0.5 s for ``--help`` / ``--version``).

Runs each command in a fresh process a few times and prints the best wall time and the
CPU time of that run (an upper bound on a shared machine).

    python bench/cli_startup.py
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

COMMANDS = [["--version"], ["--help"], ["heatmap", "--help"], ["account", "shuffle-ldp", "--help"],
            ["privhist", "--help"], ["federated", "--help"]]


def run(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shuffledp.cli", *argv], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    print(f"{'command':40s} {'wall s':>8s} {'cpu s':>8s}")
    for argv in COMMANDS:
        best = min((run(argv) for _ in range(3)), key=lambda t: t[0])
        print(f"{'shuffledp ' + ' '.join(argv):40s} {best[0]:8.3f} {best[1]:8.3f}")


if __name__ == "__main__":
    main()
