"""Tasks ready to run go to the head in batches (``POST /api/v1/tasks:batch``): a burst is a
few requests, not one per task, and an item the head refuses fails only its own task, with
the error the single endpoint would have given."""

from __future__ import annotations

import re

import berth
from berth import _runtime
from berth.exceptions import RequestError


def _batch_posts() -> int:
    """How many ``POST /api/v1/tasks:batch`` the head has answered (its /metrics)."""
    text = _runtime.current().client.request("GET", "/metrics")[1]
    total = 0
    for line in str(text).splitlines():
        if line.startswith("berth_http_requests_total{") and 'route="/api/v1/tasks:batch"' in line \
                and 'method="POST"' in line:
            total += int(float(re.split(r"\s+", line)[-1]))
    return total


@berth.remote(num_cpus=0.1)
def square(x):
    return x * x


def test_a_burst_of_tasks_is_submitted_in_batches(berth_session):
    before = _batch_posts()
    refs = [square.remote(i) for i in range(300)]
    assert berth.get(refs, timeout=120) == [i * i for i in range(300)]
    posts = _batch_posts() - before
    assert 1 <= posts < 300, f"{posts} batch requests for 300 tasks"


def test_an_item_refused_by_the_head_fails_its_own_task_with_the_heads_error():
    error = _runtime.item_error({"status": 400, "error": {
        "error": "invalid", "field": "resources.CPU", "message": "-1 is below 0"}})
    assert isinstance(error, RequestError)
    assert error.status == 400 and error.field == "resources.CPU"
    assert "-1 is below 0" in str(error)
    conflict = _runtime.item_error({"status": 409, "error": {"error": "conflict", "message": "taken"}})
    assert isinstance(conflict, berth.exceptions.ConflictError)
