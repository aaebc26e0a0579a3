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


# Memory: a value is held once per process, and freed when the last ref to it is gone.

MIB = 1 << 20


def _peak_growth(work) -> "tuple[object, int]":
    """What ``work()`` returns, and how far this process's peak resident memory rose above
    what it held before (a fresh worker's peak is its start-up's, far below the values here)."""

    def kib(field: str) -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith(field))

    before = kib("VmRSS:")
    out = work()
    return out, (kib("VmHWM:") - before) * 1024


@berth.remote(num_cpus=0.1, max_calls=1)
def sizes_held(box):
    """Gets two refs to the same value: fetched once, held once, never copied on the way."""
    def work():
        first, second = berth.get(box["refs"])
        return len(first), first is second, berth.internal.stats()["borrowed"]

    (size, same, borrowed), growth = _peak_growth(work)
    return size, same, borrowed, growth


def test_a_value_is_fetched_and_held_once_per_process_without_copies(two_machines):
    value = b"\x07" * (64 * MIB)
    ref = berth.put(value)
    del value  # bytes are never copied by put: the ref's value is what was put
    on_b = berth.util.scheduling_strategies.NodeAffinitySchedulingStrategy("b", soft=False)
    size, same, borrowed, growth = berth.get(sizes_held.options(scheduling_strategy=on_b).remote(
        {"refs": [ref, ref]}), timeout=120)
    assert size == 64 * MIB and same
    assert borrowed["objects"] == 1 and borrowed["bytes"] >= 64 * MIB
    # Received in place: a second copy (a frame, then the value) would be 128 MiB more.
    assert growth < 64 * MIB * 1.25, f"the worker's peak rose {growth / MIB:.0f} MiB for a 64 MiB value"
    owned = berth.internal.stats()["owned"]
    assert owned["objects"] >= 1 and owned["bytes"] >= 64 * MIB


@berth.remote(num_cpus=0.1)
class Keeper:
    def keep(self, box):
        self.kept = box["ref"]
        return len(berth.get(self.kept))

    def drop(self):
        self.kept = None
        import gc

        gc.collect()
        return berth.internal.stats()["borrowed"]["objects"]

    def lend(self):
        # The actor's own ref is gone as it returns: the ref on its way keeps the value.
        return [berth.put(b"\x01" * (8 * MIB))]

    def lending(self):
        return berth.internal.stats()["lent"]


def _lent() -> dict:
    return berth.internal.stats()["lent"]


def test_a_lent_value_lives_while_a_borrower_holds_it_and_is_freed_after(berth_session):
    import gc

    from conftest import wait_for

    keeper = Keeper.remote()
    ref = berth.put(b"\x02" * (8 * MIB))
    assert berth.get(keeper.keep.remote({"ref": ref}), timeout=60) == 8 * MIB
    del ref
    gc.collect()
    # This process has no ref left, the actor has one: the value stays, lent.
    assert _lent()["objects"] == 1 and _lent()["borrowers"] == 1
    assert berth.internal.stats()["owned"]["bytes"] >= 8 * MIB
    assert berth.get(keeper.drop.remote(), timeout=60) == 0
    wait_for("the value freed", lambda: _lent()["objects"] == 0 and berth.internal.stats()["owned"]["bytes"] < MIB,
             wait_s=30)
    berth.kill(keeper)


def test_a_killed_borrower_lets_the_value_go(berth_session, monkeypatch):
    import gc

    from conftest import wait_for

    # A closed connection's borrows are kept for a grace (a process that lives on borrows
    # again): short here, 60 s by default.
    monkeypatch.setattr(berth._owner, "BORROW_GRACE_S", 0.5)

    keeper = Keeper.remote()
    ref = berth.put(b"\x03" * MIB)
    assert berth.get(keeper.keep.remote({"ref": ref}), timeout=60) == MIB
    del ref
    gc.collect()
    assert _lent()["borrowers"] == 1
    berth.kill(keeper)
    wait_for("the borrow ended with the actor's process", lambda: _lent()["objects"] == 0, wait_s=30)


def test_a_ref_on_its_way_keeps_its_value_until_borrowed(berth_session):
    import gc

    from conftest import wait_for

    keeper = Keeper.remote()
    refs = berth.get(keeper.lend.remote(), timeout=60)
    # The actor kept no ref of its own: the token the ref carried kept it until we borrowed.
    assert len(berth.get(refs[0], timeout=60)) == 8 * MIB
    assert berth.get(keeper.lending.remote(), timeout=60)["borrowers"] == 1
    # Sent on to a task from here (a borrower): the holder gives the ref a token of its own.
    assert berth.get(total_length.remote(refs), timeout=60) == 8 * MIB
    del refs
    gc.collect()
    wait_for("the actor's value freed", lambda: berth.get(keeper.lending.remote(), timeout=60)["objects"] == 0,
             wait_s=30)
    berth.kill(keeper)


@berth.remote(num_cpus=0.1)
def total_length(refs):
    return sum(len(v) for v in berth.get(refs))


def test_bytes_and_bytearrays_travel_beside_the_pickle(berth_session):
    big = bytearray(b"\x04" * (2 * MIB))
    out = berth.get(echo.remote({"b": bytes(big), "a": big, "small": b"s"}), timeout=60)
    assert out == {"b": bytes(big), "a": big, "small": b"s"} and isinstance(out["a"], bytearray)
    ref = berth.put(big)
    big[0] = 0  # put took a copy: later changes are not seen
    assert berth.get(ref)[0] == 4
