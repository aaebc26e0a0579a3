"""The owner service: every driver runs one, and the workers of its tasks and actors fetch
their function (or class) and arguments from it and hand their results back to it.

User data never passes through the head: the head only tells a worker who its owner is
(``BERTH_OWNER``, ``BERTH_CALL`` in its environment) and gives it the work key, which the
owner checks on every message, so only that work's processes can fetch its arguments or
set its result.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import secrets
import socket
import threading
import time
import uuid
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple

from . import _protocol
from ._objects import ObjectState
from ._serialize import CODEC, dumps, error_from, error_payload, loads

log = logging.getLogger("berth")

# How long a worker's fetch waits for its driver to learn the work's ID and key (the head
# may start the worker before the driver has read the answer to its submission).
BIND_WAIT_S = 120.0
# How many delivered results the owner remembers, to tell a later attempt of the same call
# that its result has arrived (about 100 bytes each).
DELIVERED_KEPT = 100_000
# The tasks whose results arrived in the last RECENT_S seconds (at most RECENT_KEPT, the head's
# limit per request) are told to the head when this process ends: a task reports its own end
# within moments of handing back its result.
RECENT_S = 60.0
RECENT_KEPT = 10_000


class Call:
    """One task or actor creation this driver owns."""

    def __init__(self, kind: str, payload: bytes, states: List[ObjectState], name: str) -> None:
        self.id = uuid.uuid4().hex
        self.kind = kind
        self.payload: Optional[bytes] = payload
        self.states = states
        self.name = name
        self.work_id: Optional[str] = None
        self.key: Optional[str] = None
        self.bound = threading.Event()
        # Actors: called with the creation error when the constructor raised.
        self.on_failed: Optional[Callable[[BaseException], None]] = None
        # A generator task: where its values go as they are yielded.
        self.stream = None

    def matches(self, work_id: object, key: object) -> bool:
        return (
            isinstance(work_id, str) and isinstance(key, str) and work_id == self.work_id
            and self.key is not None and hmac.compare_digest(key.lower(), self.key.lower())
        )


def _delivered_digest(call_id: object, work_id: object, key: object) -> Optional[bytes]:
    """What the owner keeps of a call whose result it holds: enough to check a later
    request's call, work ID and key as it checked the first, in 16 bytes."""
    if not all(isinstance(v, str) for v in (call_id, work_id, key)):
        return None
    return hashlib.blake2b(f"{call_id}\0{work_id}\0{key.lower()}".encode(), digest_size=16).digest()


class OwnerServer:
    """Listens on ``bind_host``, port chosen by the OS; ``address`` (on ``advertise_host``) is
    what workers dial."""

    def __init__(self, bind_host: str, advertise_host: str) -> None:
        self._calls: Dict[str, Call] = {}
        self._lock = threading.Lock()
        # Calls whose result arrived, oldest first: a process of an attempt that starts after
        # (its node died just after the result was handed back, so the head retries) is told
        # the call is done instead of being refused, and the task ends FINISHED.
        self._delivered: Set[bytes] = set()
        self._delivered_order: Deque[bytes] = collections.deque()
        # Tasks whose results arrived lately, with when: told to the head when this process
        # ends, so that what ends with it is not cancelled after it finished its part.
        self._recent: Deque[Tuple[float, str]] = collections.deque(maxlen=RECENT_KEPT)
        # Values lent to other processes (refs sent inside arguments), by object ID.
        self._lent: Dict[str, ObjectState] = {}
        # runtime_env packages (working_dir, py_modules) by content hash, for the workers.
        self.packages: Dict[str, bytes] = {}
        self._sock = _protocol.listen(bind_host)
        self.address = f"{advertise_host}:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="berth-owner").start()

    def add(self, call: Call) -> None:
        with self._lock:
            self._calls[call.id] = call

    def bind(self, call: Call, work_id: str, key: str) -> None:
        """The head accepted the call as ``work_id`` with ``key``."""
        call.work_id, call.key = work_id, key
        for state in call.states:
            state.work_id = work_id
            state.bound.set()
        call.bound.set()

    def forget(self, call: Call) -> None:
        with self._lock:
            self._calls.pop(call.id, None)
        call.payload = None

    def _delivered_result(self, call: Call) -> None:
        digest = _delivered_digest(call.id, call.work_id, call.key)
        with self._lock:
            self._calls.pop(call.id, None)
            if call.work_id is not None and call.work_id.startswith("task-"):
                self._recent.append((time.monotonic(), call.work_id))
            if digest is not None and digest not in self._delivered:
                self._delivered.add(digest)
                self._delivered_order.append(digest)
                if len(self._delivered_order) > DELIVERED_KEPT:
                    self._delivered.discard(self._delivered_order.popleft())
        call.payload = None

    def recently_delivered(self, within_s: float = RECENT_S) -> List[str]:
        """The tasks whose results arrived in the last ``within_s`` seconds: those the head may
        not have seen end yet."""
        since = time.monotonic() - within_s
        with self._lock:
            return [work_id for at, work_id in self._recent if at >= since]

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="berth-owner-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    header, payload = _protocol.recv(conn)
                except (EOFError, OSError, _protocol.ProtocolError):
                    return
                try:
                    reply, body = self._handle(header, payload)
                except Exception as e:  # noqa: BLE001 - answered, never fatal to the driver
                    reply, body = {"ok": False, "error": f"the owner failed: {e}"}, b""
                try:
                    _protocol.send(conn, reply, body)
                except OSError:
                    return

    def lend(self, state: ObjectState) -> Tuple[str, str]:
        """Makes ``state``'s value fetchable by the processes a ref to it is sent to: its ID
        and the key a fetch must show (kept while this process lives)."""
        with self._lock:
            if state.shared is None:
                state.shared = (uuid.uuid4().hex, secrets.token_hex(16))
                self._lent[state.shared[0]] = state
            return state.shared

    def _object(self, header: dict):
        """A lent value, once it is there: its payload, or its error's."""
        with self._lock:
            state = self._lent.get(str(header.get("id")))
        key = header.get("key")
        if state is None or not isinstance(key, str) or not hmac.compare_digest(key, state.shared[1]):
            return {"ok": False, "error": "no such object here (wrong ID or key)"}, b""
        state.event.wait()
        if state.error is not None:
            return {"ok": True, "status": "error"}, error_payload(state.error, state.describe)
        return {"ok": True, "status": "ok"}, dumps(state.value)

    def _handle(self, header: dict, payload: bytes):
        op = header.get("op")
        if op == "object":
            return self._object(header)
        with self._lock:
            call = self._calls.get(str(header.get("call")))
            delivered = call is None and _delivered_digest(
                header.get("call"), header.get("work_id"), header.get("key")) in self._delivered
        if delivered:
            # An earlier attempt handed the result back: nothing to run, nothing to take.
            if op == "fetch":
                return {"ok": True, "done": True}, b""
            if op == "result":
                return {"ok": True}, b""
        if call is None:
            return {"ok": False, "error": "this driver does not own that call (it ended or was cancelled)"}, b""
        if not call.bound.wait(BIND_WAIT_S):
            return {"ok": False, "error": "the driver never learned the work's ID"}, b""
        if not call.matches(header.get("work_id"), header.get("key")):
            return {"ok": False, "error": "wrong work ID or key"}, b""
        if op == "yield":
            if call.stream is None:
                return {"ok": False, "error": f"{call.name} is not a generator task"}, b""
            call.stream._yielded(int(header.get("index", -1)), loads(payload))
            return {"ok": True}, b""
        if op == "package":
            data = self.packages.get(str(header.get("digest")))
            if data is None:
                return {"ok": False, "error": f"no package {header.get('digest')} here"}, b""
            return {"ok": True}, data
        if op == "fetch":
            data = call.payload
            if data is None:
                return {"ok": False, "error": f"{call.work_id} already has its result"}, b""
            return {"ok": True, "codec": CODEC, "kind": call.kind}, data
        if op == "result":
            ok = header.get("status") == "ok"
            if call.kind == "actor":
                # Only a failed constructor reports to the owner; the actor is then killed.
                if not ok and call.on_failed is not None:
                    call.on_failed(error_from(payload))
                return {"ok": True}, b""
            try:
                if ok:
                    value = loads(payload)
                    if len(call.states) == 1:
                        call.states[0].set_value(value)
                    else:
                        values = list(value)
                        if len(values) != len(call.states):
                            raise ValueError(
                                f"{call.name} returned {len(values)} values, not num_returns={len(call.states)}"
                            )
                        for state, v in zip(call.states, values):
                            state.set_value(v)
                else:
                    error = error_from(payload)
                    for state in call.states:
                        state.set_error(error)
            except Exception as e:  # noqa: BLE001 - a result this driver cannot read
                for state in call.states:
                    state.set_error(e)
            self._delivered_result(call)
            return {"ok": True}, b""
        return {"ok": False, "error": f"unknown op {op!r}"}, b""
