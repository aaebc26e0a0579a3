"""Jobs and owners on a real cluster: a driver's job (``berth.init``) and its lease, what ends
with it (a driver that exits, one killed with SIGKILL, one whose job a user stops), detached
work that stays, work created inside a worker (owned by that worker's process), a later
attempt told that its result already arrived, and the warning for work no node can take."""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import berth
from berth import _objects, _runtime
from berth._client import Client
from berth.exceptions import BerthInfeasibleWarning, GetTimeoutError, InvalidRequestError

from conftest import wait_for

SDK = Path(__file__).resolve().parents[1]
# Generous bounds for what the head does in its own time (a lease running out, a process
# ending): a shared machine may be slow, a correct run is much faster.
DEADLINE_S = 60.0


@berth.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


def _head(cluster) -> Client:
    return Client(f"http://{cluster.address}", cluster.token, None, timeout=30)




def _state(client: Client, collection: str, object_id: str, state: str):
    record = client.get(f"/api/v1/{collection}/{object_id}")
    return record if record["state"] == state else None


class Driver:
    """A driver program in its own process, with its output read line by line."""

    def __init__(self, cluster, tmp_path: Path, code: str, *args: str) -> None:
        script = tmp_path / "driver.py"
        script.write_text(textwrap.dedent(code))
        env = dict(os.environ, BERTH_ADDRESS=cluster.address, BERTH_TOKEN=cluster.token,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(SDK), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stdout: "queue.Queue[str]" = queue.Queue()
        self.stderr: "list[str]" = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream, put) -> None:
        for line in stream:
            put(line)
        put("")

    def line(self) -> str:
        try:
            line = self.stdout.get(timeout=DEADLINE_S)
        except queue.Empty:
            line = ""
        assert line, f"the driver printed nothing; its stderr:\n{''.join(self.stderr)}"
        return line

    def json(self) -> dict:
        return json.loads(self.line())

    def wait(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout=DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE_S)


@pytest.fixture
def driver(cluster, tmp_path):
    started = []

    def start(code: str, *args: str) -> Driver:
        started.append(Driver(cluster, tmp_path, code, *args))
        return started[-1]

    yield start
    for d in started:
        d.kill()


PRELUDE = """
import json, logging, sys, threading
import berth

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")

@berth.remote
class Counter:
    def incr(self):
        return 1
"""


def test_a_driver_that_exits_finishes_its_job_and_what_it_owned_ends(cluster, driver):
    d = driver(PRELUDE + """
berth.init()
counter = Counter.remote()
berth.get(counter.incr.remote())
group = berth.util.placement_group([{"CPU": 0.1}])
berth.get(group.ready())
print(json.dumps({"job": berth.get_runtime_context().get_job_id(), "actor": counter.actor_id,
                  "group": group.id}), flush=True)
""")
    ids = d.json()
    assert d.wait() == 0, "".join(d.stderr)
    head = _head(cluster)
    job = head.get(f"/api/v1/jobs/{ids['job']}")
    assert job["state"] == "FINISHED", job
    assert job["spec"]["name"] == "driver.py"
    metadata = job["spec"]["metadata"]
    assert metadata["sdk"] == "python" and metadata["pid"] == str(d.proc.pid), metadata
    assert metadata["host"] and "driver.py" in metadata["entrypoint"], metadata
    actor = wait_for("the actor DEAD", lambda: _state(head, "actors", ids["actor"], "DEAD"))
    assert actor["spec"]["job_id"] == ids["job"] and "lifetime" not in actor["spec"], actor["spec"]
    assert ids["job"] in actor["death_reason"], actor
    group = wait_for("the group REMOVED", lambda: _state(head, "placement_groups", ids["group"], "REMOVED"))
    assert group["spec"]["job_id"] == ids["job"], group["spec"]


def test_a_killed_driver_s_job_is_lost_and_only_its_detached_actor_stays(cluster, driver):
    name = f"stays-{uuid.uuid4().hex[:8]}"
    d = driver(PRELUDE + """
berth.init(job_lease_s=2)
owned = Counter.remote()
detached = Counter.options(lifetime="detached", name=sys.argv[1]).remote()
berth.get([owned.incr.remote(), detached.incr.remote()])
print(json.dumps({"job": berth.get_runtime_context().get_job_id(), "owned": owned.actor_id,
                  "detached": detached.actor_id}), flush=True)
sys.stdin.read()
""", name)
    ids = d.json()
    head = _head(cluster)
    try:
        job = head.get(f"/api/v1/jobs/{ids['job']}")
        assert job["lease_ms"] == 2000, job
        # The driver renews its lease: its job outlives three leases.
        held_until = time.monotonic() + 3 * 2
        while time.monotonic() < held_until:
            assert head.get(f"/api/v1/jobs/{ids['job']}")["state"] == "RUNNING"
            time.sleep(0.2)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=DEADLINE_S)
        job = wait_for("the job LOST", lambda: _state(head, "jobs", ids["job"], "LOST"))
        assert "renewed no lease" in job["end_reason"], job
        wait_for("the owned actor DEAD", lambda: _state(head, "actors", ids["owned"], "DEAD"))
        detached = head.get(f"/api/v1/actors/{ids['detached']}")
        assert detached["state"] == "ALIVE", detached
        assert detached["spec"]["lifetime"] == "detached" and detached["spec"]["job_id"] == ids["job"]
    finally:
        head.request("DELETE", f"/api/v1/actors/{ids['detached']}", allow=(404,))


def test_a_killed_driver_s_running_task_is_cancelled_with_its_job_not_failed(cluster, driver):
    """A task running when its driver is killed cannot hand back its result; its worker keeps
    trying to reach the driver instead of failing attempt after attempt, and the task ends
    CANCELLED with the job (LOST after its lease), never FAILED with its retries spent."""
    d = driver(PRELUDE + """
import time

berth.init(job_lease_s=4)

@berth.remote(max_retries=3)
def slow(path):
    open(path, "w").close()
    time.sleep(1)
    return 1

ref = slow.remote(sys.argv[1])
while ref.work_id is None:
    time.sleep(0.01)
print(json.dumps({"job": berth.get_runtime_context().get_job_id(), "task": ref.work_id}), flush=True)
sys.stdin.read()
""", str(Path(d_dir := tempfile.mkdtemp()) / "started"))
    ids = d.json()
    head = _head(cluster)
    wait_for("the task runs", lambda: (Path(d_dir) / "started").exists())
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=DEADLINE_S)
    wait_for("the job LOST", lambda: _state(head, "jobs", ids["job"], "LOST"))
    task = wait_for("the task ended", lambda: (lambda t: t if t["state"] in ("FINISHED", "FAILED", "CANCELLED")
                                             else None)(head.get(f"/api/v1/tasks/{ids['task']}")))
    assert task["state"] == "CANCELLED", json.dumps(task)
    assert task["attempts"] == 1, f"no attempt was spent on the missing driver: {task}"


def test_a_job_stopped_by_a_user_is_said_once_and_no_longer_renewed(cluster, driver):
    d = driver(PRELUDE + """
berth.init(job_lease_s=2)

@berth.remote(resources={"no_such_resource": 1})
def never_placed():
    pass

ref = never_placed.remote()
berth.explain(ref)  # accepted by the head
print(berth.get_runtime_context().get_job_id(), flush=True)
try:
    berth.get(ref, timeout=60)
except berth.exceptions.TaskCancelledError as e:
    print(json.dumps({"cancelled": str(e)}), flush=True)
sys.stdin.readline()
renewer = [t for t in threading.enumerate() if t.name == "berth-job"]
for t in renewer:
    t.join(timeout=30)
print(json.dumps({"renewing": any(t.is_alive() for t in renewer)}), flush=True)
""")
    job_id = d.line().strip()
    head = _head(cluster)
    head.post(f"/api/v1/jobs/{job_id}/stop", {"reason": "superseded"})
    cancelled = d.json()["cancelled"]
    assert f"its job {job_id} ended" in cancelled and "superseded" in cancelled, cancelled
    wait_for("the driver's error", lambda: any("ERROR" in line for line in d.stderr))
    d.proc.stdin.write("\n")
    d.proc.stdin.flush()
    assert d.json() == {"renewing": False}
    assert d.wait() == 0
    errors = [line for line in d.stderr if line.startswith("ERROR")]
    assert len(errors) == 1, d.stderr
    assert f"the head ended this driver's job {job_id}" in errors[0] and "superseded" in errors[0], errors
    assert not any("could not finish" in line for line in d.stderr), d.stderr
    job = head.get(f"/api/v1/jobs/{job_id}")
    assert (job["state"], job["end_reason"]) == ("STOPPED", "superseded"), job


@berth.remote
def makes_actors(token, detached_name):
    berth.init(address=os.environ["BERTH_ADDRESS"], token=token)
    owned = Counter.remote()
    detached = Counter.options(lifetime="detached", name=detached_name).remote()
    berth.get([owned.incr.remote(), detached.incr.remote()], timeout=60)
    context = berth.get_runtime_context()
    return {"owned": owned.actor_id, "detached": detached.actor_id, "task": context.get_task_id(),
            "job": context.get_job_id()}


def test_work_created_in_a_task_is_owned_by_its_process_and_ends_with_it(berth_session):
    head = _head(berth_session)
    ids = berth.get(makes_actors.remote(berth_session.token, f"nested-{uuid.uuid4().hex[:8]}"), timeout=120)
    try:
        job_id = berth.get_runtime_context().get_job_id()
        assert job_id is not None and ids["job"] == job_id, ids
        owned = wait_for("the task's actor DEAD", lambda: _state(head, "actors", ids["owned"], "DEAD"))
        assert owned["spec"]["owner_id"] == ids["task"] and owned["spec"]["job_id"] == ids["job"], owned["spec"]
        assert ids["task"] in owned["death_reason"], owned
        detached = head.get(f"/api/v1/actors/{ids['detached']}")
        assert detached["state"] == "ALIVE" and detached["spec"]["lifetime"] == "detached", detached
        assert head.get(f"/api/v1/tasks/{ids['task']}")["state"] == "FINISHED"
    finally:
        head.request("DELETE", f"/api/v1/actors/{ids['detached']}", allow=(404,))


def test_a_task_whose_result_arrived_before_its_node_lost_it_finishes(berth_session, tmp_path):
    """The first attempt hands its result back and is killed before the head hears it exit;
    the retry is told the result arrived, exits 0 without running, and the task is
    FINISHED (not retried into refusals until it FAILED)."""
    runs = tmp_path / "runs"

    @berth.remote(max_retries=2)
    def delivers_then_dies(path):
        with open(path, "a") as f:
            f.write(os.environ["BERTH_ATTEMPT"] + "\n")
        worker = sys.modules["__main__"].Worker  # this process runs `python -m berth.worker`
        ask = worker.ask_owner

        def ask_then_die(self, header, payload=b""):
            reply = ask(self, header, payload)
            if header.get("op") == "result":
                os.kill(os.getpid(), signal.SIGKILL)
            return reply

        worker.ask_owner = ask_then_die
        return "the value"

    ref = delivers_then_dies.remote(str(runs))
    assert berth.get(ref, timeout=60) == "the value"
    head = _head(berth_session)
    task = wait_for("the task FINISHED", lambda: _state(head, "tasks", ref.work_id, "FINISHED"))
    assert (task["attempts"], task["exit_code"]) == (2, 0), task
    assert runs.read_text() == "1\n", "the retry ran the function again"


def test_lifetime_takes_ray_s_values_only(berth_session):
    with pytest.raises(ValueError, match='lifetime: \'bogus\' is not one of None, "detached", "non_detached"'):
        Counter.options(lifetime="bogus").remote()
    with pytest.raises(ValueError, match="lifetime: 'bogus' is not one of"):
        berth.util.placement_group([{"CPU": 1}], lifetime="bogus")
    with pytest.raises(InvalidRequestError, match="lifetime"):
        berth.process(["true"], actor=True, lifetime="forever")


def test_job_lease_s_is_checked_before_anything_is_sent(cluster):
    assert not berth.is_initialized()
    for bad in (0.5, 86401, "30", True):
        with pytest.raises(InvalidRequestError, match=r"job_lease_s: .* is not from 1 to 86400 seconds"):
            berth.init(address=cluster.address, token=cluster.token, job_lease_s=bad)
    assert not berth.is_initialized()


def test_a_job_s_name_and_metadata_are_text_the_head_takes(monkeypatch):
    for argv, name in ((["-c"], "python"), ([""], "python"), (["/srv/app/train.py", "--epochs", "3"], "train.py"),
                       (["/usr/lib/python3/site-packages/pkg/__main__.py"], "pkg")):
        monkeypatch.setattr(sys, "argv", argv)
        assert _runtime._program_name() == name, argv
    # A `-c` program's newlines, a right-to-left override: escaped, as the head refuses them.
    assert _runtime._visible("import berth\nberth.init()\u202e", 4096) == "import berth\\nberth.init()\\u202e"
    cut = _runtime._visible("é" * 3000, 4096)
    assert cut == "é" * 2048 and len(cut.encode()) == 4096


@pytest.fixture
def quick_checks(monkeypatch):
    """The first check of a waiting call 1 s in (5 s by default), so these tests are quick."""
    monkeypatch.setattr(_objects, "CHECK_AFTER_S", 1.0)


def _infeasible_warning(record, caplog, object_id: str) -> None:
    warned = [w for w in record if issubclass(w.category, BerthInfeasibleWarning)]
    assert len(warned) == 1, [str(w.message) for w in warned]
    message = str(warned[0].message)
    assert message.startswith(object_id) and 'no node has the resource "no_such_resource"' in message, message
    assert warned[0].filename == __file__, "the warning points at the caller's line"
    logged = [r for r in caplog.records if r.name == "berth" and r.levelno == logging.WARNING]
    assert any(message in r.getMessage() for r in logged), [r.getMessage() for r in logged]


@berth.remote
def square(x):
    return x * x


def test_waiting_on_a_task_no_node_can_take_warns_once_and_keeps_waiting(berth_session, quick_checks, caplog):
    ref = square.options(resources={"no_such_resource": 1}).remote(3)
    started = time.monotonic()
    with pytest.warns(BerthInfeasibleWarning) as record, pytest.raises(GetTimeoutError):
        berth.get(ref, timeout=3)
    assert time.monotonic() - started >= 3
    _infeasible_warning(record, caplog, ref.work_id)
    with pytest.warns(BerthInfeasibleWarning):
        ready, waiting = berth.wait([ref, square.remote(2)], num_returns=2, timeout=3)
    assert waiting == [ref]
    berth.cancel(ref)


def test_waiting_on_an_actor_or_a_group_no_node_can_take_warns(berth_session, quick_checks, caplog):
    actor = Counter.options(resources={"no_such_resource": 1}).remote()
    with pytest.warns(BerthInfeasibleWarning) as record, pytest.raises(GetTimeoutError):
        berth.get(actor.incr.remote(), timeout=3)
    _infeasible_warning(record, caplog, actor.actor_id)
    berth.kill(actor)

    group = berth.util.placement_group([{"no_such_resource": 1}])
    caplog.clear()
    with pytest.warns(BerthInfeasibleWarning) as record:
        assert group.wait(3) is False
    _infeasible_warning(record, caplog, group.id)
    caplog.clear()
    with pytest.warns(BerthInfeasibleWarning) as record, pytest.raises(GetTimeoutError):
        berth.get(group.ready(), timeout=3)
    _infeasible_warning(record, caplog, group.id)
    berth.util.remove_placement_group(group)


def test_work_that_waits_its_turn_is_not_warned_about(berth_session, quick_checks, recwarn):
    @berth.remote
    def slow():
        time.sleep(3)
        return "done"

    assert berth.get(slow.remote(), timeout=60) == "done"
    assert not [w for w in recwarn if issubclass(w.category, BerthInfeasibleWarning)]
