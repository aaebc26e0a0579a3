"""A Ray program, as Ray's documentation writes one, run on Berth with two changes only: ``import
ray`` becomes ``import berth as ray`` and the ``ray.io/`` label prefix ``berth.io/``. It uses
``ray.put``, refs inside containers, an async actor, a generator task and method, and
``ray.get_runtime_context()``."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

RAY_PROGRAM = '''
import asyncio

import ray

ray.init()


@ray.remote
def add_all(refs):
    return sum(ray.get(refs))


@ray.remote
def squares(n):
    for i in range(n):
        yield i * i


@ray.remote(label_selector={"ray.io/market-type": "spot"}, fallback_strategy=[{"label_selector": {}}])
def context():
    c = ray.get_runtime_context()
    return c.get_job_id(), c.get_task_id(), c.get_node_id() is not None


@ray.remote
class AsyncCounter:
    def __init__(self):
        self.count = 0

    async def incr(self, by):
        await asyncio.sleep(0.01)
        self.count += by
        return self.count

    async def stream(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield f"item-{i}"


data = [ray.put(i) for i in range(10)]
print("sum", ray.get(add_all.remote(data)))
print("nested", ray.get(add_all.remote({"a": data[:2], "b": data[2:4]}["a"] + [data[5]])))
print("squares", [ray.get(ref) for ref in squares.remote(5)])
counter = AsyncCounter.remote()
print("async", sorted(ray.get([counter.incr.remote(1) for _ in range(20)]))[-1])
print("stream", [ray.get(ref) for ref in counter.stream.options(num_returns="streaming").remote(3)])
job, task, on_a_node = ray.get(context.remote())
print("context", job == ray.get_runtime_context().get_job_id(), task.startswith("task-"), on_a_node)
ray.shutdown()
'''


def test_a_ray_program_runs_with_the_import_and_the_label_prefix_changed(cluster, tmp_path):
    program = RAY_PROGRAM.replace("import ray", "import berth as ray").replace("ray.io/", "berth.io/")
    assert program.count("\n") == RAY_PROGRAM.count("\n")
    script = tmp_path / "ray_program.py"
    script.write_text(program)
    env = dict(os.environ, BERTH_ADDRESS=cluster.address, BERTH_TOKEN=cluster.token,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == [
        "sum 45",
        "nested 6",
        "squares [0, 1, 4, 9, 16]",
        "async 20",
        "stream ['item-0', 'item-1', 'item-2']",
        "context True True True",
    ], run.stdout + run.stderr
