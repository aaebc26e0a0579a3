"""Borrowing: how a process that holds refs to another process's value keeps that value alive,
and lets it go.

A value lives with the process that made it (its holder: the process that put it, or the
driver a task's result came back to), as in Ray's ownership. Each process that unpickles a ref
to it counts itself a borrower at the holder (``borrow``) before the ref can be used, over one
connection per holder; when its last ref to the value is gone it says so (``release``), and
when it ends its connection closes and every borrow on it ends with it. The holder frees the
value once no ref to it is left: none in its own process, no borrower, and no ref still on
its way (each ref sent carries a token that keeps the value until its receiver borrowed, or
``LEND_PIN_S`` passed).
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading
import weakref
from typing import Any, Dict, Optional, Tuple

from . import _protocol

_holders: Dict[str, "_Holder"] = {}
_holders_lock = threading.Lock()
_releases: "queue.SimpleQueue[Tuple[str, str]]" = queue.SimpleQueue()
_releaser: Optional[threading.Thread] = None


# A holder that answers nothing for this long is taken for gone (the connection is closed, and
# the next request opens another).
ASK_TIMEOUT_S = 30.0


class _Holder:
    """This process's connection to one process whose values it borrows: requests and answers
    in turn. The holder ends a connection's borrows when it closes, so a new connection
    borrows again what this process still holds."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.lock = threading.Lock()
        self.sock = None
        # The borrows this process counts at the holder: object ID -> [key, how many] (a
        # state that died with its release still queued, and a new one for the same value,
        # count two).
        self.live: Dict[str, list] = {}

    def ask(self, header: "dict | None") -> dict:
        """Sends ``header`` and returns the answer (None: only connects, borrowing again)."""
        with self.lock:
            try:
                if self.sock is None:
                    self.sock = _protocol.connect(self.address, timeout=10)
                    self.sock.settimeout(ASK_TIMEOUT_S)
                    for object_id, (key, count) in list(self.live.items()):
                        again = {"op": "borrow", "id": object_id, "key": key, "count": count}
                        if not self._ask(again).get("ok"):
                            self.live.pop(object_id, None)  # freed meanwhile: its fetch will say so
                if header is None:
                    return {"ok": True}
                reply = self._ask(header)
                if header["op"] == "borrow" and header.get("count") and reply.get("ok"):
                    self.live.setdefault(header["id"], [header["key"], 0])[1] += 1
                elif header["op"] == "release":
                    self._released(header["id"])
                return reply
            except BaseException:
                if self.sock is not None:
                    self.sock.close()
                    self.sock = None
                    # Borrow again at once, not at the next request (which may be far off):
                    # the holder keeps a broken connection's borrows for BORROW_GRACE_S.
                    _releases.put((self.address, None))
                raise

    def _released(self, object_id: str) -> None:
        entry = self.live.get(object_id)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del self.live[object_id]

    def _ask(self, header: dict) -> dict:
        _protocol.send(self.sock, header)
        return _protocol.recv(self.sock)[0]


def _holder(address: str) -> _Holder:
    global _releaser
    with _holders_lock:
        holder = _holders.get(address)
        if holder is None:
            holder = _holders[address] = _Holder(address)
        if _releaser is None:
            _releaser = threading.Thread(target=_release_loop, daemon=True, name="berth-release")
            _releaser.start()
        return holder


def borrow(state: Any, origin: Tuple[str, str, str], token: Optional[str], new: bool) -> None:
    """Counts this process a borrower of the value at ``origin`` (``new``: the first ref to it
    here; a later one only hands in its token). A holder that cannot be reached or no longer
    has the value makes the ref lost at once."""
    from .exceptions import ObjectLostError

    address, object_id, key = origin
    try:
        reply = _holder(address).ask({"op": "borrow", "id": object_id, "key": key, "token": token, "count": new})
    except (OSError, EOFError, _protocol.ProtocolError) as e:
        state.set_error(ObjectLostError(f"{state.describe}: the process that holds it ({address}) is gone: {e}"))
        return
    if not reply.get("ok"):
        state.set_error(ObjectLostError(f"{state.describe}: its holder at {address} has it no more: "
                                        f"{reply.get('error')}"))
        return
    if new:
        weakref.finalize(state, _releases.put, (address, object_id))


def token(origin: Tuple[str, str, str]) -> Optional[str]:
    """A token from the holder for a borrowed ref this process sends on: the value is kept
    until its receiver borrowed. None when the holder is out of reach (the receiver then finds
    the value lost)."""
    address, object_id, key = origin
    try:
        reply = _holder(address).ask({"op": "lend", "id": object_id, "key": key})
    except (OSError, EOFError, _protocol.ProtocolError):
        return None
    return reply.get("token") if reply.get("ok") else None


def local_state(origin: Tuple[str, str, str], token: Optional[str]):
    """The state of a ref that came back to the process that holds its value (its token handed
    in); None for any other process's value."""
    runtime = getattr(sys.modules.get("berth._runtime"), "_current", None)
    if runtime is None or runtime.owner.address != origin[0]:
        return None
    state = runtime.owner.take_home(origin[1], origin[2], token)
    if state is None:
        from ._objects import ObjectState
        from .exceptions import ObjectLostError

        state = ObjectState("a value this process held")
        state.origin = origin
        state.set_error(ObjectLostError(f"{origin[1]}: this process held it and freed it (its last ref was gone)"))
    return state


def settle() -> None:
    """Sends the releases queued so far from this thread, closes the connections that borrow
    nothing any more and, if none is left, stops the release thread: a task's worker that
    kept no ref is then as it was, and may run the next task (or end without its holders
    keeping its borrows for BORROW_GRACE_S)."""
    global _releaser
    if _releaser is None:
        return
    while True:
        try:
            address, object_id = _releases.get_nowait()
        except queue.Empty:
            break
        _release(address, object_id)
    with _holders_lock:
        for address, holder in list(_holders.items()):
            with holder.lock:
                if holder.live:
                    continue
                if holder.sock is not None:
                    holder.sock.close()
                del _holders[address]
        if _holders:
            return
        thread, _releaser = _releaser, None
    _releases.put(("", None))  # the thread's cue to end
    thread.join()


def _release_loop() -> None:
    # Releases are sent from here, never from the finalizer that queued them: that runs
    # wherever the garbage collector does, maybe while this thread's connection is in use.
    # An item without an object ID asks for a broken connection to be made again; one
    # without an address, for the thread to end.
    while True:
        address, object_id = _releases.get()
        if not address:
            return
        _release(address, object_id)


def _release(address: str, object_id: "str | None") -> None:
    with _holders_lock:
        holder = _holders.get(address)
    if holder is None:
        return
    try:
        holder.ask(None if object_id is None else {"op": "release", "id": object_id})
    except Exception:  # noqa: BLE001 - releasing must go on
        # The holder is gone, or the connection broke (its borrows are kept there for a
        # while, and borrowed again on the next connection): this one is over either way.
        if object_id is not None:
            with holder.lock:
                holder._released(object_id)


# A clean exit sends what is queued: its holders need not wait out the grace.
atexit.register(settle)

