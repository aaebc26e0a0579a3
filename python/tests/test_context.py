"""``berth.get_runtime_context()`` in a driver, a task and an actor: job, namespace, work,
node, attempt, and what was reserved (resources, GPU IDs), as Ray's runtime context says them."""

from __future__ import annotations

import os

import berth
from berth import Exists


def _context():
    c = berth.get_runtime_context()
    return {"job": c.get_job_id(), "namespace": c.namespace, "actor": c.get_actor_id(), "task": c.get_task_id(),
            "node": c.get_node_id(), "attempt": c.get_attempt(), "resources": c.get_assigned_resources(),
            "accelerators": c.get_accelerator_ids(), "gpus": berth.get_gpu_ids(),
            "reconstructed": c.was_current_actor_reconstructed, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


@berth.remote(num_cpus=0.5)
def in_a_task():
    return _context()


@berth.remote(max_restarts=1)
class InAnActor:
    def context(self):
        return _context()

    def exit(self):
        os._exit(1)


def test_the_runtime_context_of_a_driver_a_task_and_an_actor(berth_session):
    driver = _context()
    job = driver["job"]
    assert job and job.startswith("job-")
    assert (driver["namespace"], driver["actor"], driver["task"], driver["node"], driver["attempt"]) == (
        "default", None, None, None, None)
    assert driver["resources"] == {} and driver["gpus"] == []

    task = berth.get(in_a_task.remote(), timeout=60)
    assert task["job"] == job and task["task"].startswith("task-") and task["actor"] is None
    assert task["node"] and task["attempt"] == 1 and task["namespace"] == "default"
    assert task["resources"] == {"CPU": 0.5}, task
    assert task["gpus"] == [] and task["accelerators"] == {}

    actor = InAnActor.options(num_gpus=1, tolerations={"gpu_node": Exists()}).remote()
    first = berth.get(actor.context.remote(), timeout=60)
    assert first["actor"] == actor.actor_id and first["job"] == job and first["attempt"] == 1
    assert first["resources"] == {"GPU": 1.0}, first
    assert first["accelerators"]["GPU"] == [str(g) for g in first["gpus"]] and len(first["gpus"]) == 1
    assert first["visible"] == ",".join(first["accelerators"]["GPU"])
    assert first["reconstructed"] is False

    actor.exit.remote()
    again = None
    for _ in range(200):
        try:
            again = berth.get(actor.context.remote(), timeout=60)
            break
        except berth.exceptions.ActorUnavailableError:
            continue
    assert again is not None and again["attempt"] == 2 and again["reconstructed"] is True, again
