"""Async actors (as Ray's): an actor with an `async def` method runs its calls on one event loop,
up to max_concurrency at once (1000 by default), plain methods on the loop too; `async def`
tasks run to completion; generators are refused with a message that says so."""

from __future__ import annotations

import asyncio

import pytest

import berth


@berth.remote
class Gate:
    """Calls wait on one event until it opens: they can only all return if they run at once."""

    def __init__(self):
        self.waiting = 0
        self.event = asyncio.Event()

    async def wait(self, n):
        self.waiting += 1
        if self.waiting >= n:
            self.event.set()
        await self.event.wait()
        return self.waiting

    def plain(self):
        return "on the loop"

    async def fails(self):
        await asyncio.sleep(0)
        raise ValueError("async boom")


@berth.remote(max_concurrency=2)
class Pair:
    def __init__(self):
        self.running = 0
        self.most = 0

    async def work(self):
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        return self.most


@berth.remote
async def coroutine_task(x):
    await asyncio.sleep(0)
    return x + 1


@berth.remote
def generator_task():
    yield 1


@berth.remote
class Streams:
    def numbers(self):
        yield 1


def test_an_async_actor_runs_its_calls_at_once_on_its_loop(berth_session):
    gate = Gate.remote()
    # 50 calls that each wait until all 50 have started: one at a time, they would never end.
    assert berth.get([gate.wait.remote(50) for _ in range(50)], timeout=60) == [50] * 50
    assert berth.get(gate.plain.remote(), timeout=60) == "on the loop"
    with pytest.raises(ValueError, match="async boom"):
        berth.get(gate.fails.remote(), timeout=60)


def test_max_concurrency_bounds_an_async_actor(berth_session):
    pair = Pair.remote()
    assert max(berth.get([pair.work.remote() for _ in range(10)], timeout=60)) == 2


def test_async_tasks_run_and_generators_say_they_are_not_supported(berth_session):
    assert berth.get(coroutine_task.remote(1), timeout=60) == 2
    with pytest.raises(TypeError, match="generator: streaming returns are not supported yet"):
        berth.get(generator_task.remote(), timeout=60)
    with pytest.raises(TypeError, match="generator: streaming returns are not supported yet"):
        berth.get(Streams.remote().numbers.remote(), timeout=60)

