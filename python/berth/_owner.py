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
import weakref
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple

from . import _protocol
from ._objects import ObjectState
from ._serialize import CODEC, Packed, error_from, error_payload, loads, pack, size_of

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
# A ref sent in a message keeps its value here until the receiver counts itself a borrower, or
# for this long (a receiver that died before it read the message never does).
LEND_PIN_S = 300.0
SWEEP_EVERY_S = 30.0
# A borrower's connection that closes leaves its borrows here this long: a process that lives
# on connects again and borrows again; one that ended lets them go then.
BORROW_GRACE_S = 60.0


class Pin:
    """What keeps a lent value here besides this process's own refs: the tokens of refs on
    their way (with when each expires) and how many live refs each borrowing connection
    counted."""

    __slots__ = ("state", "tokens", "borrowers")

    def __init__(self, state: ObjectState) -> None:
        self.state = state
        self.tokens: Dict[str, float] = {}
        self.borrowers: Dict[int, int] = {}


class Call:
    """One task or actor creation this driver owns."""

    def __init__(self, kind: str, payload: "bytes | Packed", states: List[ObjectState], name: str) -> None:
        self.id = uuid.uuid4().hex
        self.kind = kind
        # The function and arguments (their refs' values kept alive with it), until the call
        # has its result.
        self.payload: "bytes | Packed | None" = payload
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
        # Values lent to other processes (refs sent inside other values), by object ID, for as
        # long as a ref to them lives here or ``_pins`` keeps them for other processes.
        self._lent: "weakref.WeakValueDictionary[str, ObjectState]" = weakref.WeakValueDictionary()
        self._pins: Dict[str, Pin] = {}
        self._peers: Dict[int, Set[str]] = {}
        self._next_peer = 0
        self._swept = time.monotonic()
        # runtime_env packages (working_dir, py_modules) by content hash, for the workers.
        self.packages: Dict[str, bytes] = {}
        self._sock = _protocol.listen(bind_host)
        self.address = f"{advertise_host}:{self._sock.getsockname()[1]}"
        self._closed = False
        self._closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="berth-owner").start()
        threading.Thread(target=self._sweeping, daemon=True, name="berth-owner-sweep").start()

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

    def _sweeping(self) -> None:
        # Tokens never handed in (their receiver died first) let go of their values within
        # LEND_PIN_S and one sweep.
        while not self._closing.wait(SWEEP_EVERY_S):
            with self._lock:
                self._sweep(time.monotonic())

    def close(self) -> None:
        self._closed = True
        self._closing.set()
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
            # Blocking whatever socket.setdefaulttimeout() says: an idle borrower's connection
            # must not end its borrows.
            conn.settimeout(None)
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="berth-owner-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._next_peer += 1
            peer = self._next_peer
        try:
            with conn:
                while True:
                    try:
                        header, payload = _protocol.recv(conn, self._admit)
                    except _protocol.Refused as e:
                        # Read past, never kept: the connection is still in step.
                        try:
                            _protocol.send(conn, {"ok": False, "error": str(e)})
                        except OSError:
                            return
                        continue
                    except (EOFError, OSError, _protocol.ProtocolError):
                        return
                    try:
                        if header.get("op") in ("borrow", "release", "lend"):
                            reply, body = self._borrowing(peer, header), b""
                        else:
                            reply, body = self._handle(header, payload)
                    except Exception as e:  # noqa: BLE001 - answered, never fatal to the driver
                        reply, body = {"ok": False, "error": f"the owner failed: {e}"}, b""
                    try:
                        _protocol.send(conn, reply, body)
                    except OSError:
                        return
                    # What the last message carried must not outlive it here.
                    del header, payload, reply, body
        finally:
            # A borrower's process ended, or its connection broke: its borrows end, after a
            # grace in which a process that lives on borrows them again.
            with self._lock:
                until = time.monotonic() + BORROW_GRACE_S
                for object_id in self._peers.pop(peer, ()):
                    pin = self._pins.get(object_id)
                    if pin is not None and pin.borrowers.pop(peer, None):
                        pin.tokens[f"closed-{peer}"] = until

    def _admit(self, header: dict, length: int) -> Optional[str]:
        """Only a call's own worker may send a payload (its result, a yielded value), and it
        is checked before memory is taken for it."""
        if header.get("op") not in ("result", "yield"):
            return f"{header.get('op')!r} takes no payload"
        with self._lock:
            call = self._calls.get(str(header.get("call")))
            if call is not None and call.matches(header.get("work_id"), header.get("key")):
                return None
            if _delivered_digest(header.get("call"), header.get("work_id"), header.get("key")) in self._delivered:
                return None
        return "a payload from a process that is not the call's (unknown call, work ID or key)"

    def lend(self, state: ObjectState) -> Tuple[str, str, str]:
        """Makes ``state``'s value fetchable by the process a ref to it is sent to: its ID, the
        key a fetch must show, and a token that keeps the value here until that process
        borrowed it (or ``LEND_PIN_S`` passed)."""
        with self._lock:
            if state.shared is None:
                state.shared = (uuid.uuid4().hex, secrets.token_hex(16))
                self._lent[state.shared[0]] = state
            return state.shared + (self._new_token(state.shared[0], state),)

    def _new_token(self, object_id: str, state: ObjectState) -> str:
        now = time.monotonic()
        if now - self._swept > 10:
            self._sweep(now)
        pin = self._pins.get(object_id)
        if pin is None:
            pin = self._pins[object_id] = Pin(state)
        token = secrets.token_hex(8)
        pin.tokens[token] = now + LEND_PIN_S
        return token

    def _sweep(self, now: float) -> None:
        """Lets go of the tokens that were never handed in (called under the lock)."""
        self._swept = now
        for object_id, pin in list(self._pins.items()):
            for token in [t for t, until in pin.tokens.items() if until <= now]:
                del pin.tokens[token]
            self._unpin_if_free(object_id, pin)

    def _unpin_if_free(self, object_id: str, pin: Pin) -> None:
        if not pin.tokens and not pin.borrowers:
            del self._pins[object_id]

    def _lent_state(self, object_id: object, key: object) -> Optional[ObjectState]:
        state = self._lent.get(str(object_id))
        if state is None or not isinstance(key, str) or not hmac.compare_digest(key, state.shared[1]):
            return None
        return state

    def take_home(self, object_id: str, key: str, token: Optional[str]) -> Optional[ObjectState]:
        """A ref to this process's own value came back: its state (the token handed in)."""
        with self._lock:
            state = self._lent_state(object_id, key)
            pin = self._pins.get(object_id)
            if state is not None and pin is not None and token is not None:
                pin.tokens.pop(token, None)
                self._unpin_if_free(object_id, pin)
            return state

    def _borrowing(self, peer: int, header: dict) -> dict:
        """``borrow``, ``release`` and ``lend`` (a token for a ref a borrower sends on)."""
        op, object_id = header["op"], str(header.get("id"))
        with self._lock:
            if op == "release":
                pin = self._pins.get(object_id)
                count = pin.borrowers.get(peer, 0) if pin is not None else 0
                if count > 1:
                    pin.borrowers[peer] = count - 1
                elif count == 1:
                    del pin.borrowers[peer]
                    self._peers.get(peer, set()).discard(object_id)
                    self._unpin_if_free(object_id, pin)
                return {"ok": True}
            state = self._lent_state(object_id, header.get("key"))
            if state is None:
                return {"ok": False, "error": "no such object here (freed, or a wrong ID or key)"}
            if op == "lend":
                return {"ok": True, "token": self._new_token(object_id, state)}
            pin = self._pins.get(object_id)
            if pin is None:
                pin = self._pins[object_id] = Pin(state)
            count = header.get("count")
            count = int(count) if type(count) in (bool, int) and 0 <= count <= 1 << 20 else 0
            if count:
                pin.borrowers[peer] = pin.borrowers.get(peer, 0) + count
                self._peers.setdefault(peer, set()).add(object_id)
            pin.tokens.pop(str(header.get("token")), None)
            self._unpin_if_free(object_id, pin)
            return {"ok": True}

    def lending(self) -> Dict[str, int]:
        """What this process lends now: values other processes keep here, their borrowing
        connections, refs on their way."""
        with self._lock:
            self._sweep(time.monotonic())
            return {
                "objects": len(self._pins),
                "borrowers": sum(len(p.borrowers) for p in self._pins.values()),
                "refs_in_flight": sum(len(p.tokens) for p in self._pins.values()),
                "bytes": sum(p.state.size for p in self._pins.values()),
            }

    def _object(self, header: dict):
        """A lent value, once it is there: its payload (a put's as it was put; a result
        pickled now, its buffers sent from where they lie), or its error's."""
        with self._lock:
            state = self._lent_state(header.get("id"), header.get("key"))
        if state is None:
            return {"ok": False, "error": "no such object here (freed, or a wrong ID or key)"}, b""
        state.event.wait()
        if state.error is not None:
            return {"ok": True, "status": "error"}, error_payload(state.error, state.describe)
        return {"ok": True, "status": "ok"}, state.packed if state.packed is not None else pack(state.value)

    def _handle(self, header: dict, payload: "bytes | Packed"):
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
            call.stream._yielded(int(header.get("index", -1)), loads(payload), size_of(payload))
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
                        call.states[0].set_value(value, size_of(payload))
                    else:
                        values = list(value)
                        if len(values) != len(call.states):
                            raise ValueError(
                                f"{call.name} returned {len(values)} values, not num_returns={len(call.states)}"
                            )
                        for state, v in zip(call.states, values):
                            state.set_value(v, size_of(payload) // len(values))
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
