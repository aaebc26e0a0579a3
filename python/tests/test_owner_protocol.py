"""The owner service (``berth._owner``), driven over TCP with the worker protocol's frames as a
worker drives it, and by real ``python -m berth.worker`` processes. A fetch for a call whose
result the owner already holds is answered ``done``, and the worker then exits 0 without
running the call. The cluster tests (``test_jobs.py``) cover the same behind a real agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from berth import _owner, _protocol
from berth._objects import ObjectState
from berth._serialize import dumps

SDK = Path(__file__).resolve().parents[1]
KEY = "ab" * 32


@pytest.fixture
def owner():
    server = _owner.OwnerServer("127.0.0.1", "127.0.0.1")
    yield server
    server.close()


def _task(owner: _owner.OwnerServer, work_id: str, payload: bytes = b"the call") -> _owner.Call:
    call = _owner.Call("task", payload, [ObjectState(work_id)], work_id)
    owner.add(call)
    owner.bind(call, work_id, KEY)
    return call


def _ask(owner: _owner.OwnerServer, call_id: str, work_id: str, op: str, key: str = KEY, **header):
    with _protocol.connect(owner.address) as conn:
        payload = header.pop("payload", b"")
        _protocol.send(conn, dict(header, op=op, call=call_id, work_id=work_id, key=key, attempt=1), payload)
        return _protocol.recv(conn)


def test_a_fetch_after_the_result_arrived_is_answered_done(owner):
    call = _task(owner, "task-1")
    assert _ask(owner, call.id, "task-1", "fetch") == ({"ok": True, "codec": "python-cloudpickle", "kind": "task"},
                                                       b"the call")
    assert _ask(owner, call.id, "task-1", "result", status="ok", payload=dumps(42)) == ({"ok": True}, b"")
    assert call.states[0].value == 42

    # A later attempt (the first one's node died before the head heard it exit).
    assert _ask(owner, call.id, "task-1", "fetch") == ({"ok": True, "done": True}, b"")
    # Its result, had it run anyway, is taken and dropped: the first one stands.
    assert _ask(owner, call.id, "task-1", "result", status="ok", payload=dumps(7)) == ({"ok": True}, b"")
    assert call.states[0].value == 42

    # The same checks as before the result: the work's own ID and key only.
    for work_id, key in (("task-2", KEY), ("task-1", "cd" * 32)):
        reply, body = _ask(owner, call.id, work_id, "fetch", key=key)
        assert reply["ok"] is False and "does not own that call" in reply["error"], reply
    assert _ask(owner, call.id, "task-1", "fetch", key=KEY.upper())[0] == {"ok": True, "done": True}


def test_a_call_that_ended_without_its_result_is_still_refused(owner):
    call = _task(owner, "task-1")
    owner.forget(call)  # cancelled, or failed for good
    reply, _ = _ask(owner, call.id, "task-1", "fetch")
    assert reply["ok"] is False and "does not own that call" in reply["error"], reply


def test_the_owner_remembers_the_latest_delivered_results_only(owner, monkeypatch):
    monkeypatch.setattr(_owner, "DELIVERED_KEPT", 2)
    calls = [_task(owner, f"task-{i}") for i in range(3)]
    for i, call in enumerate(calls):
        assert _ask(owner, call.id, f"task-{i}", "result", status="ok", payload=dumps(i)) == ({"ok": True}, b"")
    assert _ask(owner, calls[0].id, "task-0", "fetch")[0]["ok"] is False
    for i in (1, 2):
        assert _ask(owner, calls[i].id, f"task-{i}", "fetch")[0] == {"ok": True, "done": True}


def _worker(owner: _owner.OwnerServer, call: _owner.Call, attempt: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SDK), BERTH_TASK_ID=call.work_id, BERTH_ATTEMPT=str(attempt),
               BERTH_WORK_KEY=KEY, BERTH_OWNER=owner.address, BERTH_CALL=call.id)
    env.pop("BERTH_ACTOR_ID", None)
    env.pop("BERTH_FORK_SERVER", None)
    return subprocess.run([sys.executable, "-m", "berth.worker"], env=env, capture_output=True, text=True, timeout=60)


def test_a_worker_told_done_exits_0_without_running_the_call(owner, tmp_path):
    runs = tmp_path / "runs"

    def record_run(path):
        with open(path, "a") as f:
            f.write(os.environ["BERTH_ATTEMPT"] + "\n")
        return "the value"

    payload = dumps({"function_pickled": dumps(record_run), "args": (str(runs),), "kwargs": {}, "max_calls": 0})
    call = _task(owner, "task-1", payload)
    first = _worker(owner, call, 1)
    assert first.returncode == 0, first.stderr
    assert call.states[0].value == "the value"

    again = _worker(owner, call, 2)
    assert again.returncode == 0, again.stderr
    assert "task-1's result has already arrived" in again.stderr
    assert runs.read_text() == "1\n", "the second attempt ran the call"
