"""Objects on the wire, without a cluster: payloads cut into parts (received in place, checked
field by field) and the holder's counting of borrows over its owner service, driven as other
processes drive it."""

from __future__ import annotations

import gc
import socket
import struct
import threading

import pytest

from berth import _owner, _protocol
from berth._objects import ObjectState
from berth._serialize import loads, pack

MIB = 1 << 20


def _pair():
    return socket.socketpair()


def _roundtrip(payload, header=None):
    a, b = _pair()
    with a, b:
        sender = threading.Thread(target=_protocol.send, args=(a, header or {"op": "x"}, payload))
        sender.start()
        got = _protocol.recv(b)
        sender.join()
    return got


def test_large_buffers_travel_beside_the_pickle_and_arrive_as_the_values():
    big, mutable = b"\x01" * (3 * MIB), bytearray(b"\x02" * MIB)
    header, payload = _roundtrip(pack({"b": big, "a": mutable, "small": b"s", "n": [1, 2]}))
    assert header["parts"][1:] == [3 * MIB, MIB] and header["writable"] == [2] and header["by_id"] == 2
    value = loads(payload)
    assert value == {"b": big, "a": mutable, "small": b"s", "n": [1, 2]}
    # The parts received are the values themselves: nothing was copied after the socket.
    assert value["b"] is payload.parts[1] and value["a"] is payload.parts[2]


def test_a_snapshot_copies_what_could_change_and_keeps_bytes_as_they_are():
    big, mutable = b"\x01" * MIB, bytearray(b"\x02" * MIB)
    packed = pack([big, mutable], snapshot=True)
    mutable[0] = 0
    assert packed.parts[1] is big
    assert loads(packed)[1][0] == 2


def test_a_payload_without_parts_is_one_bytes():
    assert _roundtrip(b"hello") == ({"op": "x"}, b"hello")


def _raw_frame(header: dict, payload: bytes) -> bytes:
    import json

    head = json.dumps(header).encode()
    return struct.pack(">I", len(head)) + head + struct.pack(">Q", len(payload)) + payload


@pytest.mark.parametrize("header, message", [
    ({"parts": [1, 1]}, "summing to the payload's 3 bytes"),
    ({"parts": []}, "are not sizes"),
    ({"parts": [1, "2"]}, "are not sizes"),
    ({"parts": [1, -1, 3]}, "are not sizes"),
    ({"parts": [1, 2], "writable": [0]}, "writable"),
    ({"parts": [1, 2], "writable": [2]}, "writable"),
    ({"parts": [1, 2], "by_id": 2}, "by_id"),
    ({"parts": [1, 2], "by_id": "1"}, "by_id"),
])
def test_malformed_parts_are_refused_naming_the_field(header, message):
    a, b = _pair()
    with a, b:
        a.sendall(_raw_frame(dict(header, op="x"), b"abc"))
        with pytest.raises(_protocol.ProtocolError, match=message):
            _protocol.recv(b)


@pytest.fixture
def holder():
    server = _owner.OwnerServer("127.0.0.1", "127.0.0.1")
    yield server
    server.close()


class _Borrower:
    """One borrowing connection, as another process keeps to a holder."""

    def __init__(self, holder):
        self.sock = _protocol.connect(holder.address)

    def ask(self, **header) -> dict:
        _protocol.send(self.sock, header)
        return _protocol.recv(self.sock)[0]

    def close(self) -> None:
        self.sock.close()


def _lent_state(holder, value=b"v"):
    state = ObjectState("put")
    state.set_value(value, len(value))
    object_id, key, token = holder.lend(state)
    return state, object_id, key, token


def _wait_unpinned(holder, objects: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while holder.lending()["objects"] != objects:
        assert time.monotonic() < deadline, holder.lending()
        time.sleep(0.01)


def test_a_value_is_kept_while_a_ref_is_on_its_way_or_borrowed(holder):
    import weakref

    state, object_id, key, token = _lent_state(holder)
    weak = weakref.ref(state)
    del state
    gc.collect()
    # No ref here, but one on its way: kept.
    assert weak() is not None and holder.lending()["refs_in_flight"] == 1
    borrower = _Borrower(holder)
    assert borrower.ask(op="borrow", id=object_id, key=key, token=token, count=True) == {"ok": True}
    assert holder.lending() == {"objects": 1, "borrowers": 1, "refs_in_flight": 0, "bytes": 1}
    # A second ref to it in the same process hands in its token and counts nothing more.
    token2 = borrower.ask(op="lend", id=object_id, key=key)["token"]
    assert borrower.ask(op="borrow", id=object_id, key=key, token=token2, count=False)["ok"]
    assert borrower.ask(op="release", id=object_id) == {"ok": True}
    gc.collect()
    assert weak() is None and holder.lending()["objects"] == 0
    # Gone: a later borrow is refused.
    reply = borrower.ask(op="borrow", id=object_id, key=key, token=None, count=True)
    assert not reply["ok"] and "freed" in reply["error"]
    borrower.close()


def test_a_closed_connection_ends_its_borrows_after_a_grace(holder, monkeypatch):
    monkeypatch.setattr(_owner, "BORROW_GRACE_S", 0.2)
    state, object_id, key, token = _lent_state(holder)
    borrower = _Borrower(holder)
    assert borrower.ask(op="borrow", id=object_id, key=key, token=token, count=True)["ok"]
    assert holder.lending()["borrowers"] == 1
    borrower.close()
    _wait_unpinned(holder, 0)
    # Still here: this process's own ref keeps it.
    assert holder._lent_state(object_id, key) is state


def test_a_borrow_needs_the_key(holder):
    _, object_id, _, token = _lent_state(holder)
    borrower = _Borrower(holder)
    reply = borrower.ask(op="borrow", id=object_id, key="0" * 32, token=token, count=True)
    assert not reply["ok"] and holder.lending()["borrowers"] == 0
    assert not borrower.ask(op="lend", id=object_id, key="wrong")["ok"]
    borrower.close()


def test_tokens_never_handed_in_expire(holder, monkeypatch):
    import time

    state, object_id, key, token = _lent_state(holder)
    assert holder.lending()["refs_in_flight"] == 1
    monkeypatch.setattr(time, "monotonic", lambda real=time.monotonic: real() + _owner.LEND_PIN_S + 1)
    assert holder.lending()["objects"] == 0


def test_the_same_large_buffer_twice_is_one_part_and_one_object():
    big = bytearray(b"\x05" * (2 * MIB))
    header, payload = _roundtrip(pack([big, big]))
    assert header["parts"][1:] == [2 * MIB]
    first, second = loads(payload)
    assert first is second and first == big


class Blob:
    """Pickles its buffer out of band, as numpy arrays do (pickle's protocol 5)."""

    def __init__(self, data) -> None:
        self.data = data

    def __reduce_ex__(self, protocol):
        import pickle

        return Blob, (pickle.PickleBuffer(self.data),)


def test_pickle_buffers_travel_beside_the_stream_and_small_ones_inside():
    small, large = Blob(bytearray(100)), Blob(bytearray(b"\x06" * MIB))
    assert len(pack(small).parts) == 1
    header, payload = _roundtrip(pack([small, large]))
    assert header["parts"][1:] == [MIB] and header["writable"] == [1] and "by_id" not in header
    got = loads(payload)
    # The receiver's buffer is the value's: writable, received in place.
    assert got[1].data is payload.parts[1] and got[1].data == b"\x06" * MIB
    assert bytes(got[0].data) == bytes(100)


def test_a_value_of_too_many_large_buffers_is_refused_when_packed(monkeypatch):
    from berth import _serialize

    monkeypatch.setattr(_serialize, "MAX_PARTS", 3)
    with pytest.raises(ValueError, match="at most 2 can be sent"):
        pack([bytes([i]) * (64 * 1024) for i in range(3)])


def _forget_holder(address: str) -> None:
    from berth import _borrowing

    with _borrowing._holders_lock:
        connection = _borrowing._holders.pop(address, None)
    if connection is not None and connection.sock is not None:
        connection.sock.close()


def test_a_borrower_whose_connection_broke_borrows_again(holder, monkeypatch):
    import time
    import weakref

    from berth import _borrowing

    monkeypatch.setattr(_owner, "BORROW_GRACE_S", 0.2)
    state, object_id, key, token = _lent_state(holder)
    weak = weakref.ref(state)
    del state  # the borrow is all that keeps the value
    mine = ObjectState("borrowed")
    origin = (holder.address, object_id, key)
    _borrowing.borrow(mine, origin, token, True)
    try:
        connection = _borrowing._holders[holder.address]
        connection.sock.close()
        connection.sock = None
        # The next request opens a connection and counts this process again first.
        assert _borrowing.token(origin)
        deadline = time.monotonic() + 30
        while any(t.startswith("closed-") for t in holder._pins[object_id].tokens):
            assert time.monotonic() < deadline, "the closed connection's grace never ran out"
            time.sleep(0.05)
            holder.lending()  # sweeps
        # The grace is over and the value stays: borrowed on the new connection.
        stats = holder.lending()
        assert stats["objects"] == 1 and stats["borrowers"] == 1 and weak() is not None
    finally:
        _forget_holder(holder.address)


def test_two_live_borrows_of_one_value_are_both_borrowed_again(holder):
    from berth import _borrowing

    _, object_id, key, token = _lent_state(holder)
    origin = (holder.address, object_id, key)
    # A state that died with its release still queued, and a new one for the same value.
    first, second = ObjectState("first"), ObjectState("second")
    _borrowing.borrow(first, origin, token, True)
    _borrowing.borrow(second, origin, _borrowing.token(origin), True)
    try:
        connection = _borrowing._holders[holder.address]
        assert connection.live[object_id][1] == 2
        connection.ask({"op": "release", "id": object_id})
        assert connection.live[object_id][1] == 1
        connection.sock.close()
        connection.sock = None
        connection.ask(None)
        assert sorted(holder._pins[object_id].borrowers.values()) == [1]
    finally:
        _forget_holder(holder.address)


def test_a_refused_payload_is_read_past_and_answered(holder):
    with _protocol.connect(holder.address) as conn:
        _protocol.send(conn, {"op": "result", "call": "nope", "work_id": "task-1", "key": "x"}, b"\x00" * MIB)
        reply, _ = _protocol.recv(conn)
        assert not reply["ok"] and "not the call's" in reply["error"]
        # Still in step: the next request is answered.
        _protocol.send(conn, {"op": "lend", "id": "none", "key": "k"})
        assert _protocol.recv(conn)[0]["ok"] is False


def test_unredeemed_tokens_are_swept_without_any_other_request(monkeypatch):
    monkeypatch.setattr(_owner, "LEND_PIN_S", 0.0)
    monkeypatch.setattr(_owner, "SWEEP_EVERY_S", 0.01)
    server = _owner.OwnerServer("127.0.0.1", "127.0.0.1")
    try:
        _lent_state(server)
        import time

        deadline = time.monotonic() + 30
        while server._pins:
            assert time.monotonic() < deadline, "the sweeper never ran"
            time.sleep(0.01)
    finally:
        server.close()


def test_a_payload_from_a_stranger_is_refused_before_any_memory_is_taken(holder):
    import json

    with _protocol.connect(holder.address) as conn:
        head = json.dumps({"op": "result", "call": "nope", "work_id": "task-1", "key": "x",
                           "parts": [1, (1 << 39) - 1], "writable": [1]}).encode()
        # A 512 GiB payload is announced, 1 MiB of it sent, and the sender goes away: the
        # holder reads past what comes into a small buffer and takes no memory for the rest.
        conn.sendall(struct.pack(">I", len(head)) + head + struct.pack(">Q", 1 << 39) + bytes(MIB))
    with _protocol.connect(holder.address) as conn:
        _protocol.send(conn, {"op": "object", "id": "x", "key": "y"}, b"unasked")
        reply, _ = _protocol.recv(conn)
        assert not reply["ok"] and "takes no payload" in reply["error"]
    with open("/proc/self/status") as status:
        peak_mib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    assert peak_mib < 2048
