"""Measure what each sandbox backend actually enforces: the figures in docs/sandbox.md.

Runs a handful of hostile programs on each available backend and prints, per limit, what
was asked, what the kernel and host measured, and what the result reported; plus the cost
of a run (a trivial program, median of several) and the host memory an output flood cost.

    python benchmarks/sandbox_limits.py [--backends subprocess docker] [-o result.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time

from envharness.sandbox import BACKENDS, DockerSandbox, Limits

CASES = {
    "cpu: busy loop, cpu_s=1": ("while True:\n    pass", Limits(cpu_s=1, timeout_s=20)),
    "cpu: 4 busy children, cpu_s=2": (
        "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        while True:\n            pass\nos.wait()",
        Limits(cpu_s=2, timeout_s=30),
    ),
    "memory: 6 children x 60 MiB, memory_mb=128": (
        "import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        x = bytearray(60 * 2**20)\n        time.sleep(5)\n"
        "        os._exit(0)\nfor _ in range(6):\n    os.wait()",
        Limits(memory_mb=128, timeout_s=20),
    ),
    "memory: memfd 300 MiB, memory_mb=128": (
        "import os\nfd = os.memfd_create('x')\nfor _ in range(300):\n    os.write(fd, b'x' * 2**20)",
        Limits(memory_mb=128, file_mb=1000, timeout_s=20),  # file_mb would stop it at 64 MiB first
    ),
    "disk: 8 MiB files, disk_mb=32": (
        "n = 0\ntry:\n    for i in range(100):\n        open(f'f{i}', 'wb').write(b'x' * 8 * 2**20)\n        n += 8\nexcept OSError:\n"
        "    pass\nprint(n)",
        Limits(disk_mb=32, timeout_s=20),
    ),
    "pids: fork bomb, pids=32": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        Limits(pids=32, timeout_s=5),
    ),
    "output: 200 MB flood, output_bytes=1e6": (
        "import sys\nsys.stdout.write('x' * 200_000_000)",
        Limits(output_bytes=1_000_000, timeout_s=20),
    ),
    "timeout: sleeper, timeout_s=1.5": ("import time\ntime.sleep(60)", Limits(timeout_s=1.5)),
}


def measure(backend: str) -> dict:
    sandbox = BACKENDS[backend]()
    sandbox.run_python("print(1)")  # warm: the image, imports
    costs = []
    for _ in range(7):
        started = time.perf_counter()
        sandbox.run_python("print(1)")
        costs.append(time.perf_counter() - started)
    rows = {}
    for name, (code, limits) in CASES.items():
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = sandbox.run_python(code, limits=limits)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
        evidence = result.evidence
        rows[name] = {
            "limit": result.limit,
            "duration_s": round(result.duration_s, 2),
            "cpu_s": evidence.get("cpu_s"),
            "oom_kills": evidence.get("oom_kills"),
            "pids_max_events": evidence.get("pids_max_events"),
            "stdout_bytes": len(result.stdout),
            "host_rss_growth_mib": round(grown, 1),
            "printed": result.stdout.strip()[:20] if len(result.stdout) < 100 else "",
        }
    return {"run_cost_s": round(statistics.median(costs), 3), "cases": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["subprocess", "docker"], choices=sorted(BACKENDS))
    parser.add_argument("-o", "--output", help="also write the figures as JSON here")
    args = parser.parse_args()
    found = {}
    for backend in args.backends:
        if backend == "docker" and not DockerSandbox.available():
            print("docker: no engine; skipped")
            continue
        found[backend] = measure(backend)
    for backend, figures in found.items():
        print(f"\n{backend}: a trivial run costs {figures['run_cost_s']:.3f} s (median of 7)")
        print(f"  {'case':44} {'limit':8} {'wall s':>7} {'cpu s':>6} {'oom':>4} {'pids':>5} {'host MiB':>8}  printed")
        for name, row in figures["cases"].items():
            print(
                f"  {name:44} {row['limit']!s:8} {row['duration_s']:7.2f} {row['cpu_s'] or 0:6.2f} {row['oom_kills'] or 0:4d}"
                f" {row['pids_max_events'] or 0:5d} {row['host_rss_growth_mib']:8.1f}  {row['printed']}"
            )
    if args.output:
        with open(args.output, "w") as handle:
            json.dump({"machine": platform.platform(), "python": platform.python_version(), "backends": found}, handle, indent=2)


if __name__ == "__main__":
    main()
