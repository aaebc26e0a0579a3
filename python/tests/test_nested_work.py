"""Work created by work, on a head and two agents with their own data directories (no shared
token file): a trainer actor on node `a` creates worker actors with actor affinity to itself,
the workers run tasks that submit tasks, and the whole tree ends when the trainer is killed.
Every process reaches the head with its work's credential, which reaches its own job only."""

from __future__ import annotations

import os
import time

import pytest

import berth
from berth.exceptions import RequestError
from berth.util.scheduling_strategies import (
    ActorAffinityMatchExpression,
    ActorAffinityOperator,
    ActorAffinitySchedulingStrategy,
    NodeAffinitySchedulingStrategy,
)

from conftest import process_alive, wait_for

WAIT_S = 60.0


@berth.remote(num_cpus=0.1)
def leaf(x):
    return x * 2, os.environ["BERTH_NODE_ID"]


@berth.remote(num_cpus=0.1)
def branch(x):
    """A task that submits tasks and waits for them."""
    results = berth.get([leaf.remote(x), leaf.remote(x + 1)])
    return sum(value for value, _ in results)


@berth.remote(num_cpus=0.25)
class Worker:
    def work(self, x):
        return berth.get(branch.remote(x)), os.environ["BERTH_NODE_ID"]


@berth.remote(num_cpus=0.25)
class Trainer:
    def __init__(self, n):
        near_me = ActorAffinitySchedulingStrategy(
            [ActorAffinityMatchExpression("role", ActorAffinityOperator.IN, ["trainer"], False)])
        self.workers = [Worker.options(scheduling_strategy=near_me).remote() for _ in range(n)]

    def run(self):
        answers = berth.get([w.work.remote(i * 10) for i, w in enumerate(self.workers)])
        return answers, [w.actor_id for w in self.workers], os.environ["BERTH_NODE_ID"]

    def reach(self, path):
        """What the head answers this process's credential for ``path``."""
        from berth import _runtime

        try:
            return _runtime.current().client.get(path)
        except RequestError as e:
            return {"status": e.status, "message": str(e)}





def _pids(actor: dict):
    return [int(e["message"][4:]) for e in actor["history"]
            if e["kind"] == "started" and e.get("message", "").startswith("pid ")]


def test_work_from_any_node_and_the_tree_ends_with_its_root(two_machines):
    client, _, root = two_machines
    assert not (root / "a" / "token").exists() and not (root / "b" / "token").exists()
    trainer = Trainer.options(labels={"role": "trainer"},
                              scheduling_strategy=NodeAffinitySchedulingStrategy("a", soft=False)).remote(2)
    answers, worker_ids, trainer_node = berth.get(trainer.run.remote(), timeout=WAIT_S)
    assert trainer_node == "a"
    # (0*2 + 1*2) and (10*2 + 11*2): each worker's task ran two tasks of its own.
    assert [value for value, _ in answers] == [2, 42]
    assert [node for _, node in answers] == ["a", "a"], "the workers run beside their trainer"

    workers = [client.get(f"/api/v1/actors/{w}") for w in worker_ids]
    job = client.get(f"/api/v1/actors/{trainer.actor_id}")["spec"]["job_id"]
    for worker in workers:
        assert worker["spec"]["owner_id"] == trainer.actor_id and worker["spec"]["job_id"] == job, worker["spec"]
    # Each task's process ends just after its result reached its owner.
    deadline = time.monotonic() + WAIT_S
    while True:
        tasks = client.get(f"/api/v1/tasks?job={job}")["items"]
        if len(tasks) == 6 and all(t["state"] == "FINISHED" for t in tasks):
            break
        assert time.monotonic() < deadline, [(t["task_id"], t["state"], t["history"]) for t in tasks]
        time.sleep(0.05)
    assert {t["spec"].get("owner_id") for t in tasks} >= set(worker_ids)

    # The credential reaches its own job and nothing else.
    assert berth.get(trainer.reach.remote(f"/api/v1/actors/{worker_ids[0]}"))["actor_id"] == worker_ids[0]
    for path in ("/api/v1/nodes", "/api/v1/tokens", "/api/v1/jobs"):
        assert berth.get(trainer.reach.remote(path))["status"] == 403, path

    # The root killed: its workers end with it (and their processes), transitively.
    pids = [pid for w in worker_ids for pid in _pids(client.get(f"/api/v1/actors/{w}"))]
    assert len(pids) == 2
    berth.kill(trainer)
    for w in worker_ids:
        dead = wait_for(f"{w} DEAD", lambda w=w: (lambda a: a if a["state"] == "DEAD" else None)(
            client.get(f"/api/v1/actors/{w}")))
        assert trainer.actor_id in dead["death_reason"], dead
    for pid in pids:
        wait_for(f"process {pid} gone", lambda p=pid: not process_alive(p))


@pytest.mark.parametrize("other", ["job", "none"])
def test_a_work_credential_does_not_reach_another_job(two_machines, other):
    """An actor made by the CLI (no job) or by another driver (another job) is out of a
    worker's reach, by ID and in lists."""
    client, _, _ = two_machines
    made = client.create("/api/v1/actors", {"command": "sleep", "args": ["600"], "resources": {"CPU": 0.1},
                                            **({"job_id": client.create("/api/v1/jobs", {"name": "other"})["job_id"]}
                                               if other == "job" else {})})
    trainer = Trainer.options(labels={"role": "trainer"}).remote(0)
    try:
        answer = berth.get(trainer.reach.remote(f"/api/v1/actors/{made['actor_id']}"), timeout=WAIT_S)
        assert answer["status"] == 403 and made["actor_id"] in answer["message"], answer
        listed = berth.get(trainer.reach.remote("/api/v1/actors"), timeout=WAIT_S)
        assert made["actor_id"] not in [a["actor_id"] for a in listed["items"]]
    finally:
        client.request("DELETE", f"/api/v1/actors/{made['actor_id']}", allow=(404,))
