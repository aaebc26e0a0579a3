"""Where the SDK's sockets listen: the driver's owner service and an actor's worker bind the
node's address (loopback on the test cluster, a `berth up`), never every interface unless told
to; a `bind` that is not an address of this machine is refused, naming the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import berth
from berth.exceptions import InvalidRequestError


def _listening(pid: int):
    """The local addresses of the TCP sockets process ``pid`` listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            host = local.split(":")[0]
            if width == 8:
                found.append(".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0)))
            else:
                found.append("::" if int(host, 16) == 0 else host)
    return found


@berth.remote
class Where:
    def pid(self):
        return os.getpid(), os.environ.get("BERTH_NODE_IP")


def test_the_owner_service_and_an_actor_listen_on_the_nodes_address(berth_session):
    mine = _listening(os.getpid())
    assert mine and set(mine) == {"127.0.0.1"}, mine
    pid, node_ip = berth.get(Where.remote().pid.remote(), timeout=60)
    assert node_ip == "127.0.0.1"
    theirs = _listening(pid)
    assert theirs and set(theirs) == {"127.0.0.1"}, theirs


def test_bind_says_where_and_a_foreign_address_is_refused(cluster):
    berth.shutdown()
    try:
        berth.init(address=cluster.address, token=cluster.token, bind="0.0.0.0")
        assert "0.0.0.0" in _listening(os.getpid())
        assert berth._runtime.current().owner.address.startswith("127.0.0.1:")
        berth.shutdown()
        with pytest.raises(InvalidRequestError) as info:
            berth.init(address=cluster.address, token=cluster.token, bind="192.0.2.1")
        assert info.value.field == "bind" and "cannot listen on '192.0.2.1'" in str(info.value)
        with pytest.raises(InvalidRequestError):
            berth.init(address=cluster.address, token=cluster.token, bind="")
    finally:
        berth.shutdown()
