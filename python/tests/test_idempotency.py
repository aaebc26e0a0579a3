"""A creation cut off before its answer is sent again with the same idempotency key: against a
real HTTP server on loopback that drops the first connection after reading the request (as a
head killed right after it acted would), and against the real cluster, which makes the object
once."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from berth._client import Client
from berth.exceptions import HeadUnreachableError


class _CutsFirstAnswer(http.server.BaseHTTPRequestHandler):
    """Reads every POST; closes the connection without answering the first `cut` of them."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        server = self.server
        server.bodies.append(body)
        if len(server.bodies) <= server.cut:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        answer = json.dumps({"actor_id": "actor-1", "key": body.get("idempotency_key")}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def cutting_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CutsFirstAnswer)
    server.bodies, server.cut = [], 2
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_cut_off_creation_is_sent_again_with_the_same_key(cutting_server):
    client = Client(f"http://127.0.0.1:{cutting_server.server_address[1]}", None, None, timeout=5)
    answer = client.create("/api/v1/actors", {"command": "sleep"})
    keys = [body["idempotency_key"] for body in cutting_server.bodies]
    assert len(keys) == 3, keys
    assert len(set(keys)) == 1 and keys[0].startswith("berth-py-"), keys
    assert answer["key"] == keys[0]


def test_a_batch_gets_a_key_per_item_kept_across_attempts(cutting_server):
    client = Client(f"http://127.0.0.1:{cutting_server.server_address[1]}", None, None, timeout=5)
    client.create("/api/v1/tasks:batch", {"items": [{"command": "a"}, {"command": "b"}]})
    first, *rest = [[item["idempotency_key"] for item in body["items"]] for body in cutting_server.bodies]
    assert len(set(first)) == 2, first
    assert all(keys == first for keys in rest), cutting_server.bodies


def test_nothing_listening_is_said_at_once():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", None, None, timeout=5)
    with pytest.raises(HeadUnreachableError) as raised:
        client.create("/api/v1/actors", {"command": "sleep"})
    assert not getattr(raised.value, "maybe_sent", False)


def test_the_cluster_makes_one_object_per_key(cluster):
    client = Client(f"http://{cluster.address}", cluster.token, None, timeout=10)
    body = {"command": "sleep", "args": ["600"], "resources": {}, "idempotency_key": "py-test-1"}
    first = client.create("/api/v1/actors", body)
    again = client.create("/api/v1/actors", body)
    assert first["actor_id"] == again["actor_id"]
    client.request("DELETE", f"/api/v1/actors/{first['actor_id']}")


def test_a_creation_naming_a_slip_warns_with_the_hint(cluster):
    """A resource in another case is accepted (a node may bring it) and warned about."""
    from berth.exceptions import BerthHintWarning

    client = Client(f"http://{cluster.address}", cluster.token, None, timeout=10)
    with pytest.warns(BerthHintWarning, match='did you mean "CPU"'):
        task = client.create("/api/v1/tasks", {"command": "true", "resources": {"cpu": 1}})
    client.request("POST", f"/api/v1/tasks/{task['task_id']}/cancel")
