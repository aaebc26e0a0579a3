"""``python -m berth.bench``: the SDK's three loops, timed, on the cluster ``berth.init()``
finds (or ``--address``): trivial tasks submitted from one driver, method calls on one actor,
and actors created until each answers. Prints medians of ``--runs`` runs; when Ray is
installed, runs the same loops on a local Ray cluster and prints the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List


def _loops(api, n_tasks: int, n_calls: int, n_actors: int) -> Dict[str, Callable[[], float]]:
    @api.remote(num_cpus=0.1)
    def noop(i):
        return i

    @api.remote
    class Echo:
        def ping(self, i):
            return i

    def tasks() -> float:
        start = time.perf_counter()
        out = api.get([noop.remote(i) for i in range(n_tasks)])
        assert out == list(range(n_tasks))
        return n_tasks / (time.perf_counter() - start)

    def calls() -> float:
        actor = Echo.remote()
        api.get(actor.ping.remote(-1))
        start = time.perf_counter()
        out = api.get([actor.ping.remote(i) for i in range(n_calls)])
        assert out == list(range(n_calls))
        rate = n_calls / (time.perf_counter() - start)
        api.kill(actor)
        return rate

    def actors() -> float:
        start = time.perf_counter()
        handles = [Echo.remote() for _ in range(n_actors)]
        api.get([h.ping.remote(i) for i, h in enumerate(handles)])
        rate = n_actors / (time.perf_counter() - start)
        for h in handles:
            api.kill(h)
        return rate

    return {"trivial tasks/s (one driver)": tasks, "actor calls/s (one actor)": calls,
            "actors created/s (until they answer)": actors}


def _measure(loops: Dict[str, Callable[[], float]], runs: int, warmup: int) -> Dict[str, float]:
    result = {}
    for name, loop in loops.items():
        # Unmeasured runs first: both systems keep warm workers (Ray its worker pool, Berth
        # its nodes' fork servers), and a steady state is what a long-running driver sees.
        for _ in range(warmup):
            loop()
        rates = [loop() for _ in range(runs)]
        result[name] = statistics.median(rates)
        print(f"  {name:40} median {result[name]:>10,.0f}   runs: {', '.join(f'{r:,.0f}' for r in rates)}",
              file=sys.stderr)
    return result


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m berth.bench", description=__doc__)
    parser.add_argument("--address", help="the head (default: as berth.init finds it)")
    parser.add_argument("--tasks", type=int, default=200, help="tasks per run (default 200)")
    parser.add_argument("--calls", type=int, default=5000, help="actor calls per run (default 5000)")
    parser.add_argument("--actors", type=int, default=20, help="actors per run (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="runs per loop; the median is reported")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs per loop before those (default 1)")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray even when it is installed")
    args = parser.parse_args(argv)
    for name in ("tasks", "calls", "actors", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")

    import berth

    berth.init(address=args.address)
    print("Berth:", file=sys.stderr)
    ours = _measure(_loops(berth, args.tasks, args.calls, args.actors), args.runs, args.warmup)
    berth.shutdown()

    theirs = None
    if not args.no_ray:
        try:
            import ray  # type: ignore
        except ImportError:
            print("Ray is not installed here: no side-by-side ratio (pip install ray to get one).", file=sys.stderr)
        else:
            ray.init(num_cpus=4)
            print("Ray (local, same machine):", file=sys.stderr)
            theirs = _measure(_loops(ray, args.tasks, args.calls, args.actors), args.runs, args.warmup)
            ray.shutdown()
    print(f"{'loop':40} {'Berth':>12} {'Ray':>12} {'Berth/Ray':>10}")
    for name, rate in ours.items():
        other = theirs.get(name) if theirs else None
        ratio = f"{rate / other:.2f}" if other else "-"
        shown = "-" if other is None else f"{other:,.0f}"
        print(f"{name:40} {rate:>12,.0f} {shown:>12} {ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
