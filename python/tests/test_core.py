"""Tasks, actors, ordering, restarts, retries, errors, timeouts and large arguments on a real
cluster."""

from __future__ import annotations

import os
import signal
import time

import pytest

import berth
from berth.exceptions import (
    ActorDiedError,
    GetTimeoutError,
    TaskError,
    WorkerCrashedError,
)


@berth.remote
def square(x):
    return x * x


@berth.remote(num_cpus=0.5)
def where():
    return os.environ["BERTH_NODE_ID"], os.environ["BERTH_TASK_ID"]


@berth.remote
class Counter:
    def __init__(self, start=0):
        self.value = start
        self.calls = []

    def incr(self, by=1):
        self.value += by
        return self.value

    def record(self, i):
        self.calls.append(i)
        return len(self.calls)

    def history(self):
        return list(self.calls)

    def pid(self):
        return os.getpid()

    def fail(self):
        raise KeyError("no such thing")


def test_tasks_return_values(berth_session):
    refs = [square.remote(i) for i in range(10)]
    assert berth.get(refs) == [i * i for i in range(10)]
    assert berth.get(square.remote(12)) == 144
    node, task = berth.get(where.remote())
    assert node in {"cpu-a", "cpu-b"}, "untolerated GPU nodes are never used"
    assert task.startswith("task-")


def test_object_refs_as_arguments_are_resolved_first(berth_session):
    assert berth.get(square.remote(square.remote(3))) == 81


def test_actor_keeps_state_and_runs_calls_in_order(berth_session):
    counter = Counter.remote(10)
    assert berth.get(counter.incr.remote()) == 11
    assert berth.get(counter.incr.remote(5)) == 16
    refs = [counter.record.remote(i) for i in range(200)]
    assert berth.get(refs) == list(range(1, 201))
    assert berth.get(counter.history.remote()) == list(range(200))
    with pytest.raises(AttributeError, match="no method 'nope'"):
        counter.nope  # noqa: B018 (the attribute access is what raises)


def test_exceptions_surface_with_the_remote_traceback(berth_session):
    @berth.remote(max_retries=0)
    def divide(a, b):
        return a / b

    with pytest.raises(ZeroDivisionError) as info:
        berth.get(divide.remote(1, 0))
    assert isinstance(info.value, TaskError)
    # Functions of the driver's own modules travel by value, without their file: the
    # traceback names the function and the line.
    assert "in divide" in info.value.remote_traceback
    assert "ZeroDivisionError: division by zero" in info.value.remote_traceback
    assert "divide" in str(info.value)

    counter = Counter.remote()
    with pytest.raises(KeyError) as info:
        berth.get(counter.fail.remote())
    assert "in fail" in info.value.remote_traceback
    assert berth.get(counter.incr.remote()) == 1, "an exception does not kill the actor"


def test_get_timeout(berth_session):
    @berth.remote
    def slow():
        time.sleep(30)

    ref = slow.remote()
    started = time.monotonic()
    with pytest.raises(GetTimeoutError):
        berth.get(ref, timeout=0.5)
    assert time.monotonic() - started < 10
    assert isinstance(GetTimeoutError("x"), TimeoutError)
    berth.cancel(ref)
    ready, not_ready = berth.wait([square.remote(2), ref], num_returns=1, timeout=30)
    assert len(ready) == 1 and len(not_ready) == 1


def test_large_arguments_and_results(berth_session):
    @berth.remote
    def size_and_echo(blob):
        return len(blob), blob[-16:]

    blob = os.urandom(100 * 1024 * 1024)
    assert berth.get(size_and_echo.remote(blob), timeout=120) == (len(blob), blob[-16:])

    counter = Counter.remote()
    assert berth.get(counter.record.remote(blob), timeout=120) == 1


def test_a_task_whose_worker_is_killed_is_retried(berth_session, tmp_path):
    marker = tmp_path / "first-attempt"

    @berth.remote(max_retries=2)
    def dies_once(path):
        import pathlib

        p = pathlib.Path(path)
        if not p.exists():
            p.write_text(str(os.getpid()))
            time.sleep(120)  # killed with -9 below
        return int(os.environ["BERTH_ATTEMPT"])

    ref = dies_once.remote(str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the first attempt never started"
        time.sleep(0.05)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    assert berth.get(ref, timeout=120) == 2


def test_a_task_whose_worker_keeps_dying_fails(berth_session):
    @berth.remote(max_retries=1)
    def always_dies():
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(WorkerCrashedError, match="no retries left"):
        berth.get(always_dies.remote(), timeout=120)


def test_a_restarted_actor_is_reachable_through_the_same_handle(berth_session):
    counter = Counter.options(max_restarts=1).remote()
    assert berth.get(counter.incr.remote()) == 1
    first = berth.get(counter.pid.remote())
    os.kill(first, signal.SIGKILL)
    # The restarted instance starts from its constructor again; the handle finds it.
    deadline = time.monotonic() + 60
    while True:
        try:
            second = berth.get(counter.pid.remote(), timeout=60)
            break
        except berth.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline
    assert second != first
    assert berth.get(counter.incr.remote()) == 1
    berth.kill(counter)
    with pytest.raises(ActorDiedError):
        berth.get(counter.incr.remote(), timeout=60)


def test_named_actors_are_found_by_name(berth_session):
    Counter.options(name="shared-counter").remote(100)
    again = berth.get_actor("shared-counter")
    assert berth.get(again.incr.remote()) == 101
    with pytest.raises(ValueError, match="no live actor named"):
        berth.get_actor("nobody")


def test_a_failing_constructor_kills_the_actor(berth_session):
    @berth.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot build")

        def ping(self):
            return "pong"

    broken = Broken.remote()
    with pytest.raises(ActorDiedError, match="cannot build"):
        berth.get(broken.ping.remote(), timeout=60)


def test_commands_run_as_tasks_and_actors(berth_session):
    task = berth.process(["sh", "-c", "exit 3"], max_retries=0)
    ended = task.wait(timeout=60)
    assert ended["state"] == "FAILED" and ended["exit_code"] == 3
    actor = berth.process(["sleep", "600"], actor=True, labels={"app": "sleeper"})
    assert actor.id.startswith("actor-")
    actor.kill()


def test_cluster_calls(berth_session):
    nodes = {n["NodeID"]: n for n in berth.nodes()}
    assert set(nodes) == {"cpu-a", "cpu-b", "gpu-a", "gpu-b"}
    assert nodes["gpu-a"]["Labels"]["berth.io/accelerator-type"] == "nvidia-a100"
    assert nodes["gpu-a"]["Taints"] == {"gpu_node": "true"}
    total = berth.cluster_resources()
    assert total["CPU"] == 48 and total["GPU"] == 8
    assert berth.available_resources()["GPU"] <= 8


def test_a_head_that_cannot_be_reached_is_a_connection_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot reach the Berth head"):
        berth.init(address=f"127.0.0.1:{port}", token="x")
    assert time.monotonic() - started < 10
    assert not berth.is_initialized()


def test_bad_input_is_refused_before_anything_is_sent(berth_session):
    client = berth._runtime.current().client

    def counts():
        return client.get("/api/v1/actors")["total"], client.get("/api/v1/tasks")["total"]

    before = counts()
    with pytest.raises(ValueError, match="resources.GPU: 1.5 is not allowed"):
        Counter.options(num_gpus=1.5).remote()
    with pytest.raises(ValueError, match="label_selector.zone"):
        square.options(label_selector={"zone": "in(a,"}).remote(1)
    with pytest.raises(ValueError, match="unknown operator"):
        square.options(tolerations={"gpu_node": "near(a)"}).remote(1)
    with pytest.raises(ValueError, match="bundle_label_selector"):
        berth.util.placement_group([{"CPU": 1}], bundle_label_selector=[{}, {}])
    assert counts() == before


def test_only_holders_of_the_work_key_reach_an_actor(berth_session):
    from berth import _protocol

    counter = Counter.remote()
    assert berth.get(counter.incr.remote()) == 1
    client = berth._runtime.current().client
    endpoint = client.get(f"/api/v1/actors/{counter.actor_id}/endpoint")
    assert endpoint["work_key"] == counter._key
    sock = _protocol.connect(endpoint["endpoint"]["address"])
    with sock:
        _protocol.send(sock, {"op": "hello", "key": "0" * 64, "version": 1})
        reply, _ = _protocol.recv(sock)
    assert reply == {"ok": False, "error": "wrong work key"}
    # A read token may see the actor but not its key.
    made = client.post("/api/v1/tokens", {"role": "read", "name": "viewer"})
    reader = berth._client.Client(client.url, made["secret"])
    assert reader.get(f"/api/v1/actors/{counter.actor_id}")["state"] == "ALIVE"
    with pytest.raises(berth.exceptions.RequestError) as info:
        reader.get(f"/api/v1/actors/{counter.actor_id}/endpoint")
    assert info.value.status == 403


def test_a_copy_never_answers_for_another_attempt(berth_session):
    """A caller names the attempt the head gave it: a worker of another attempt refuses, and
    one that learns a later attempt exists (a stale copy) ends, so it never answers a call."""
    from berth import _protocol

    counter = Counter.options(max_restarts=1).remote()
    assert berth.get(counter.incr.remote()) == 1
    client = berth._runtime.current().client
    endpoint = client.get(f"/api/v1/actors/{counter.actor_id}/endpoint")
    address, attempt = endpoint["endpoint"]["address"], endpoint["endpoint"]["attempt"]

    def hello(wanted):
        with _protocol.connect(address) as sock:
            _protocol.send(sock, {"op": "hello", "key": counter._key, "version": 1, "attempt": wanted})
            reply, _ = _protocol.recv(sock)
            return reply

    assert hello(attempt) == {"ok": True, "attempt": attempt}
    # An earlier attempt named (a caller behind the head): refused, the copy stays.
    assert hello(attempt - 1) == {"ok": False, "error": f"this is attempt {attempt}, not {attempt - 1}",
                                  "attempt": attempt}
    assert berth.get(counter.incr.remote()) == 2
    # A later attempt named: this copy is stale, refuses and ends; the head starts the next
    # attempt, and the handle finds it.
    assert hello(attempt + 1)["attempt"] == attempt
    deadline = time.monotonic() + 60
    while True:
        actor = client.get(f"/api/v1/actors/{counter.actor_id}")
        if actor["state"] == "ALIVE" and actor["restarts"] == 1:
            break
        assert time.monotonic() < deadline, actor
        time.sleep(0.05)
    assert berth.get(counter.incr.remote(), timeout=60) == 1


def test_methods_with_several_returns(berth_session):
    @berth.remote
    class Pair:
        @berth.method(num_returns=2)
        def split(self, a, b):
            return a, b

        def both(self, a, b):
            return a, b

    pair = Pair.remote()
    first, second = pair.split.remote(1, 2)
    assert berth.get([first, second]) == [1, 2]
    assert berth.get(pair.both.remote(1, 2)) == (1, 2)
    refs = pair.both.options(num_returns=3).remote(1, 2)
    assert len(refs) == 3
    with pytest.raises(ValueError, match="returned 2 values, not num_returns=3"):
        berth.get(refs, timeout=60)
