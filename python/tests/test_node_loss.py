"""An actor's node lost, with a head and two agents as separate processes, each in its own
data directory (as on separate machines): the agent of the node running a Python actor is
killed with SIGKILL and never started again. The caller keeps calling the actor through its
handle all along; no answer ever comes from the old copy once the new one has answered, and
the old copy's process is gone by the time the head declares its node dead (the node's
keeper killed it when the node's lease ran out)."""

from __future__ import annotations

import os
import time

import berth
from berth.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import process_alive

# Generous bounds on waits for observable state; the figures are printed.
WAIT_S = 60.0


@berth.remote(num_cpus=1)
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return os.getpid(), self.n



def test_a_caller_never_hears_from_the_copy_on_a_lost_node(two_machines):
    client, agents, root = two_machines
    counter = Counter.options(max_restarts=1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy("a", soft=True)).remote()
    old_pid, _ = berth.get(counter.incr.remote(), timeout=WAIT_S)
    assert berth.get(counter.incr.remote(), timeout=WAIT_S) == (old_pid, 2)
    assert client.get(f"/api/v1/actors/{counter.actor_id}")["node_id"] == "a"

    killed = time.monotonic()
    agents["a"].kill()
    agents["a"].wait()
    answers = []  # (seconds after the kill, pid, count), or an error
    new_pid = None
    dead_seen = None
    while new_pid is None or len([a for a in answers if a[1] == new_pid]) < 3:
        assert time.monotonic() - killed < WAIT_S, answers
        try:
            pid, n = berth.get(counter.incr.remote(), timeout=WAIT_S)
            answers.append((round(time.monotonic() - killed, 2), pid, n))
            if pid != old_pid:
                new_pid = new_pid or pid
            else:
                assert new_pid is None, f"the old copy answered after the new one: {answers}"
        except berth.exceptions.ActorUnavailableError as e:
            answers.append((round(time.monotonic() - killed, 2), None, str(e)[:60]))
        if dead_seen is None and client.get("/api/v1/nodes/a")["state"] == "DEAD":
            dead_seen = time.monotonic() - killed
            # The keeper killed the copy before the head could call its node dead.
            assert not process_alive(old_pid), f"node a is DEAD and its copy {old_pid} still runs"
    actor = client.get(f"/api/v1/actors/{counter.actor_id}")
    assert (actor["state"], actor["node_id"], actor["restarts"]) == ("ALIVE", "b", 1), actor
    # The new copy counts from 1: nothing of the old one's state, and it never answered again.
    assert [n for _, pid, n in answers if pid == new_pid][:3] == [1, 2, 3], answers
    assert not process_alive(old_pid)
    keeper = (root / "a" / "agents" / "a" / "keeper.log").read_text()
    assert "the node's lease ran out" in keeper, keeper
    old_answers = [a for a in answers if a[1] == old_pid]
    print(f"kill -9 of agent a: the old copy answered {len(old_answers)} more call(s), last at "
          f"{old_answers[-1][0] if old_answers else '-'} s; node a DEAD seen at {dead_seen and round(dead_seen, 2)} s; "
          f"the new copy's first answer at {next(a[0] for a in answers if a[1] == new_pid)} s; "
          f"{sum(1 for a in answers if a[1] is None)} call(s) failed in between")
