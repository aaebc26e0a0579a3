"""Several head addresses (a head and its standbys): the SDK uses the first whose head is
active, as the CLI and the agents do."""

from __future__ import annotations

import socket

from berth._client import discover


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_first_active_head_of_several_addresses_is_used(cluster):
    down = f"127.0.0.1:{closed_port()}"
    url, token, _ = discover(f"{down},{cluster.address}", cluster.token, None)
    assert url == f"http://{cluster.address}"
    assert token == cluster.token
    # None answers: the first is kept, and the error comes from using it.
    url, _, _ = discover(f"{down}, {down}", cluster.token, None)
    assert url == f"http://{down}"
