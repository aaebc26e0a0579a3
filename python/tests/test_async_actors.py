"""Async actors and generators (as Ray's): an actor with an `async def` method runs its calls on
one event loop, up to max_concurrency at once (1000 by default), plain methods on the loop too;
`async def` tasks run to completion; a generator task or method (async too) returns an
ObjectRefGenerator whose refs are ready as each value is yielded, an error last."""

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
def countdown(n):
    for i in range(n, 0, -1):
        yield i


@berth.remote
def fails_after_two():
    yield "a"
    yield "b"
    raise RuntimeError("third value boom")


@berth.remote
async def async_values(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i * 10


@berth.remote
class Streams:
    def numbers(self, n):
        for i in range(n):
            yield i

    async def later(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield f"v{i}"


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


def test_async_tasks_run(berth_session):
    assert berth.get(coroutine_task.remote(1), timeout=60) == 2


def test_generator_tasks_and_methods_stream_their_values(berth_session):
    gen = countdown.remote(3)
    assert isinstance(gen, berth.ObjectRefGenerator)
    assert [berth.get(ref, timeout=60) for ref in gen] == [3, 2, 1]
    assert berth.get(gen.completed(), timeout=60) == 3
    assert [berth.get(ref, timeout=60) for ref in async_values.remote(3)] == [0, 10, 20]

    refs = list(fails_after_two.remote())
    assert [berth.get(r, timeout=60) for r in refs[:2]] == ["a", "b"]
    with pytest.raises(RuntimeError, match="third value boom"):
        berth.get(refs[2], timeout=60)
    assert len(refs) == 3

    streams = Streams.remote()
    assert [berth.get(r, timeout=60) for r in streams.numbers.remote(4)] == [0, 1, 2, 3]
    assert [berth.get(r, timeout=60) for r in streams.later.remote(2)] == ["v0", "v1"]
    # Each value is ready as soon as it is yielded: the first before the generator ends.
    gen = Streams.remote().numbers.remote(2)
    first = next(gen)
    assert berth.get(first, timeout=60) == 0
