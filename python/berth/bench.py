"""``python -m berth.bench``: the SDK's loops, timed, on the cluster ``berth.init()`` finds (or
``--address``): trivial tasks submitted from one driver, method calls on one actor, actors
created until each answers, and a large object passed from task to task. Prints medians of
``--runs`` runs; when Ray is installed, runs the same loops on a local Ray cluster and prints
the ratio.

``--transfer-mib N`` measures instead one object of N MiB sent from a task on one node to a
task on another, straight (the first task puts it and passes the ref inside a list): the
throughput and each process's peak resident memory, beside ``cat`` copying a file as large.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List


def _loops(api, n_tasks: int, n_calls: int, n_actors: int, object_mb: int) -> Dict[str, Callable[[], float]]:
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

    @api.remote(num_cpus=0.1)
    def produce(size):
        return b"\x01" * size

    @api.remote(num_cpus=0.1)
    def consume(value):
        return len(value)

    size = object_mb * 1000 * 1000

    def objects() -> float:
        start = time.perf_counter()
        for _ in range(10):
            assert api.get(consume.remote(produce.remote(size))) == size
        return 10 / (time.perf_counter() - start)

    loops = {"trivial tasks/s (one driver)": tasks, "actor calls/s (one actor)": calls,
             "actors created/s (until they answer)": actors}
    if object_mb:
        loops[f"{object_mb} MB objects task to task/s"] = objects
    return loops


def _rate(rate: float) -> str:
    """A rate with the digits that matter (a few objects/s, thousands of calls/s)."""
    return f"{rate:,.2f}" if rate < 100 else f"{rate:,.0f}"


def _measure(loops: Dict[str, Callable[[], float]], runs: int, warmup: int) -> Dict[str, float]:
    result = {}
    for name, loop in loops.items():
        # Unmeasured runs first: both systems keep warm workers (Ray its worker pool, Berth
        # its nodes' fork servers), and a steady state is what a long-running driver sees.
        for _ in range(warmup):
            loop()
        rates = [loop() for _ in range(runs)]
        result[name] = statistics.median(rates)
        print(f"  {name:40} median {_rate(result[name]):>10}   runs: {', '.join(_rate(r) for r in rates)}",
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
    parser.add_argument("--object-mb", type=int, default=100,
                        help="the size of the object passed task to task (default 100; 0 skips that loop)")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray even when it is installed")
    parser.add_argument("--transfer-mib", type=int, metavar="N",
                        help="measure one N MiB object sent from a task on one node to a task on another instead")
    args = parser.parse_args(argv)
    for name in ("tasks", "calls", "actors", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    if args.object_mb < 0:
        parser.error("--object-mb must be at least 0")
    if args.transfer_mib is not None and args.transfer_mib < 1:
        parser.error("--transfer-mib must be at least 1")

    import berth

    berth.init(address=args.address)
    if args.transfer_mib is not None:
        try:
            return _transfer(berth, args.transfer_mib, args.runs)
        finally:
            berth.shutdown()
    print("Berth:", file=sys.stderr)
    ours = _measure(_loops(berth, args.tasks, args.calls, args.actors, args.object_mb), args.runs, args.warmup)
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
            theirs = _measure(_loops(ray, args.tasks, args.calls, args.actors, args.object_mb), args.runs, args.warmup)
            ray.shutdown()
    print(f"{'loop':40} {'Berth':>12} {'Ray':>12} {'Berth/Ray':>10}")
    for name, rate in ours.items():
        other = theirs.get(name) if theirs else None
        ratio = f"{rate / other:.2f}" if other else "-"
        shown = "-" if other is None else _rate(other)
        print(f"{name:40} {_rate(rate):>12} {shown:>12} {ratio:>10}")
    return 0


def _peak_mib() -> float:
    """This process's peak resident memory so far."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def _transfer(berth, mib: int, runs: int) -> int:
    """One object of ``mib`` MiB from a task on one node to a task on another, ``runs`` times;
    then ``cat`` copying a file of the same size."""
    import os
    import subprocess
    import tempfile

    from berth.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n["NodeID"] for n in berth.nodes() if n.get("Alive")]
    if len(nodes) < 2:
        print(f"--transfer-mib needs two live nodes; the cluster has {len(nodes)}", file=sys.stderr)
        return 2
    size = mib << 20

    @berth.remote(num_cpus=0.1, max_calls=1)
    def consumer(box):
        start = time.perf_counter()
        value = berth.get(box[0])
        took = time.perf_counter() - start
        return len(value), took, _peak_mib(), os.environ.get("BERTH_NODE_ID")

    @berth.remote(num_cpus=0.1, max_calls=1)
    def producer(size, there):
        ref = berth.put(b"\x01" * size)
        got, took, consumer_peak, node = berth.get(consumer.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(there, soft=False)).remote([ref]))
        assert got == size
        return took, consumer_peak, _peak_mib(), os.environ.get("BERTH_NODE_ID"), node

    here = NodeAffinitySchedulingStrategy(nodes[0], soft=False)
    rows = []
    for _ in range(runs):
        took, consumer_peak, producer_peak, a, b = berth.get(producer.options(scheduling_strategy=here).remote(
            size, nodes[1]))
        rows.append((took, consumer_peak, producer_peak))
        print(f"  {a} -> {b}: {mib / took:,.0f} MiB/s ({took:.2f} s), peak RSS producer {producer_peak:,.0f} MiB, "
              f"consumer {consumer_peak:,.0f} MiB", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        source, copy = os.path.join(tmp, "source"), os.path.join(tmp, "copy")
        with open(source, "wb") as out:
            block = b"\x01" * (1 << 20)
            for _ in range(mib):
                out.write(block)
        cats, cat_peaks = [], []
        # GNU time reports cat's own peak memory (this process's children include its forks).
        timed = ["/usr/bin/time", "-f", "%M"] if os.path.exists("/usr/bin/time") else []
        for _ in range(runs):
            start = time.perf_counter()
            with open(copy, "wb") as out:
                done = subprocess.run([*timed, "cat", source], stdout=out, stderr=subprocess.PIPE, check=True)
            cats.append(time.perf_counter() - start)
            if timed:
                cat_peaks.append(int(done.stderr.split()[-1]) / 1024)
            os.unlink(copy)
    cat_peak = f"{statistics.median(cat_peaks):,.1f}" if cat_peaks else "-"
    took = statistics.median(r[0] for r in rows)
    print(f"{'':34} {'MiB/s':>8} {'seconds':>8} {'peak RSS (MiB)':>26}")
    print(f"{f'Berth, {mib} MiB task to task':34} {mib / took:>8,.0f} {took:>8.2f} "
          f"{f'producer {statistics.median(r[2] for r in rows):,.0f}, consumer {statistics.median(r[1] for r in rows):,.0f}':>26}")
    cat_took = statistics.median(cats)
    print(f"{f'cat, a {mib} MiB file to a file':34} {mib / cat_took:>8,.0f} {cat_took:>8.2f} {cat_peak:>26}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
