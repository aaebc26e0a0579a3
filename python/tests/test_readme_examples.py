"""The Python examples of the READMEs, taken from the files and run as programs of their own
against the test cluster: each exits 0 and leaves nothing running (its job FINISHED, its actors
DEAD and their processes gone, its tasks ended, its placement groups removed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from berth._client import Client

from conftest import REPO, process_alive, wait_for

SDK = REPO / "python"
DEADLINE_S = 60.0


def python_block(path: Path, marker: str) -> str:
    """The first ```python block after ``marker`` in ``path``."""
    text = path.read_text()
    at = text.index(marker)
    start = text.index("```python\n", at) + len("```python\n")
    return text[start:text.index("\n```", start)]





@pytest.mark.parametrize("readme,marker", [
    (REPO / "README.md", "The [Python SDK]"),
    (REPO / "python" / "README.md", "## A first program"),
])
def test_a_readme_example_leaves_nothing_running(cluster, tmp_path, readme, marker):
    script = tmp_path / "example.py"
    script.write_text(python_block(readme, marker) + "\n")
    env = dict(os.environ, BERTH_ADDRESS=cluster.address, BERTH_TOKEN=cluster.token,
               PYTHONPATH=os.pathsep.join(filter(None, [str(SDK), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=DEADLINE_S * 2)
    assert run.returncode == 0, run.stdout + run.stderr

    head = Client(f"http://{cluster.address}", cluster.token, None, timeout=30)
    jobs = [j for j in head.get("/api/v1/jobs")["items"] if j["spec"]["metadata"].get("entrypoint", "").endswith(
        str(script))]
    assert len(jobs) == 1, jobs
    job_id = jobs[0]["job_id"]
    wait_for("the job FINISHED", lambda: head.get(f"/api/v1/jobs/{job_id}")["state"] == "FINISHED")

    actors = head.get(f"/api/v1/actors?job={job_id}")["items"]
    assert actors, "the example makes actors"
    pids = []
    for actor in actors:
        done = wait_for(f"{actor['actor_id']} DEAD", lambda a=actor: (
            lambda r: r if r["state"] == "DEAD" else None)(head.get(f"/api/v1/actors/{a['actor_id']}")))
        pids += [int(e["message"][4:]) for e in done["history"]
                 if e["kind"] == "started" and e.get("message", "").startswith("pid ")]
    assert pids, actors
    for pid in pids:
        wait_for(f"process {pid} gone", lambda p=pid: not process_alive(p))
    for task in head.get(f"/api/v1/tasks?job={job_id}")["items"]:
        state = head.get(f"/api/v1/tasks/{task['task_id']}")["state"]
        assert state in ("FINISHED", "FAILED", "CANCELLED"), task
    for group in head.get(f"/api/v1/placement_groups?job={job_id}")["items"]:
        wait_for(f"{group['group_id']} REMOVED", lambda g=group: head.get(
            f"/api/v1/placement_groups/{g['group_id']}")["state"] == "REMOVED")
