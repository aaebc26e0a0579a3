"""Objects, as Ray's: ``berth.put``; refs anywhere inside arguments (lists, dicts, nested),
passed as refs that the callee gets from the process holding the value (never through the
head), top-level refs still resolved before the call; refs of task results passed on before
they are ready; a value whose holder is gone says so."""

from __future__ import annotations

import os

import pytest

import berth
from berth.exceptions import ObjectLostError


@berth.remote(num_cpus=0.1)
def total(refs):
    """Gets the refs it was given inside a list."""
    return sum(berth.get(refs))


@berth.remote(num_cpus=0.1)
def describe(arg):
    refs = arg["refs"]
    return {"types": [type(r).__name__ for r in refs], "values": berth.get(refs), "top": arg["plain"]}


@berth.remote(num_cpus=0.1)
def slow_square(x):
    import time

    time.sleep(0.3)
    return x * x


@berth.remote(num_cpus=0.1)
def passes_on(refs):
    """Passes refs it received on to another task, inside a list again."""
    return berth.get(total.remote(refs))


@berth.remote(num_cpus=0.1)
def node_and_value(holder):
    return os.environ["BERTH_NODE_ID"], berth.get(holder[0])


@berth.remote(num_cpus=0.1)
class Holder:
    def make(self):
        self.ref = berth.put("held by an actor")
        return [self.ref]


def test_put_and_refs_inside_arguments(berth_session):
    a, b = berth.put(20), berth.put(22)
    assert berth.get(a) == 20
    assert berth.get(total.remote([a, b]), timeout=60) == 42
    out = berth.get(describe.remote({"refs": [a, slow_square.remote(3)], "plain": berth.put("x")}), timeout=60)
    assert out["types"] == ["ObjectRef", "ObjectRef"] and out["values"] == [20, 9]
    assert out["top"].__class__.__name__ == "ObjectRef"
    # Top-level refs are still resolved first; refs are passed on from process to process.
    assert berth.get(slow_square.remote(a), timeout=60) == 400
    assert berth.get(passes_on.remote([a, b, slow_square.remote(2)]), timeout=60) == 46
    with pytest.raises(TypeError):
        berth.put(a)


def test_a_ref_to_a_value_an_actor_holds(berth_session):
    holder = Holder.remote()
    inner = berth.get(holder.make.remote(), timeout=60)
    assert berth.get(inner[0], timeout=60) == "held by an actor"
    assert berth.get(node_and_value.remote(inner), timeout=60)[1] == "held by an actor"
    berth.kill(holder)


def test_a_value_whose_holder_is_gone_is_lost_not_waited_for(two_machines):
    client, _, _ = two_machines
    holder = Holder.options(scheduling_strategy=berth.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
        "a", soft=False)).remote()
    inner = berth.get(holder.make.remote(), timeout=60)
    # Fetched on node b from the actor on node a: straight, with no token file on either.
    assert berth.get(node_and_value.options(
        scheduling_strategy=berth.util.scheduling_strategies.NodeAffinitySchedulingStrategy("b", soft=False)
    ).remote(inner), timeout=60) == ("b", "held by an actor")
    berth.kill(holder)
    fresh = berth.get(holder_list(inner), timeout=60)
    with pytest.raises(ObjectLostError, match="is gone"):
        berth.get(fresh[0], timeout=60)


def holder_list(inner):
    """A ref that was never fetched in this process: unpickled anew from another process's copy."""
    return echo.remote(inner)


@berth.remote(num_cpus=0.1)
def echo(x):
    return x


@berth.remote(num_cpus=0.1)
def returns_refs():
    """A task's process ends once it returned: the refs it returns carry their values."""
    return {"put": berth.put("put in a task"), "result": echo.remote(7)}


def test_refs_a_task_returns_outlive_its_process(berth_session):
    out = berth.get(returns_refs.remote(), timeout=60)
    assert berth.get([out["put"], out["result"]], timeout=60) == ["put in a task", 7]
