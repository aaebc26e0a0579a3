"""Berth's worker protocol, version 1: frames over TCP, the same for every language.

A frame is a header and a payload::

    u32 big-endian  header length H
    H bytes         header: a UTF-8 JSON object
    u64 big-endian  payload length P
    P bytes         payload: opaque bytes whose encoding the header's "codec" names

The header carries everything the other side needs to route and check a message (``op``,
``work_id``, ``key``, ``seq``, ``status``...); the payload carries user data (a function and its
arguments, a return value, an error) in the encoding of the language that made it
(``python-cloudpickle``; ``json`` where languages must understand each other). The full
message list is in docs/worker-protocol.md.

A header may cut the payload into parts (``"parts": [sizes]``, summing to P): a pickle stream
and the buffers that travel beside it (``"writable"``: which to receive as mutable;
``"by_id"``: how many of the last the stream names by index). Each part is sent from where it lies and received into
memory of its own, in chunks, so a large value is held once on each side, never also as a
frame.
"""

from __future__ import annotations

import json
import socket
import struct

from ._serialize import MAX_PARTS, Packed

VERSION = 1
# Generous but finite: a header is routing data, never user data.
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 40
# Sent and received this much at a time: a large value never needs a second copy of itself.
CHUNK = 4 << 20
# Payloads under this size go out in one write with their header.
SMALL = 64 * 1024
# The most one recv() returns on Linux.
RECV_MAX = 0x7FFFF000

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class ProtocolError(Exception):
    """The other side broke the protocol (or closed the connection mid-frame)."""


class Refused(ProtocolError):
    """A frame the receiver's ``admit`` refused: its payload was read past (into a scratch
    buffer, never kept), so the connection is still in step and may answer."""


def send(sock: socket.socket, header: dict, payload: "bytes | Packed" = b"") -> None:
    """Sends one frame; a ``Packed`` payload of several parts goes part by part, each from
    where it lies."""
    if type(payload) is Packed:
        if len(payload.parts) > 1:
            return _send_parts(sock, header, payload)
        payload = payload.parts[0]
    head = json.dumps(header, separators=(",", ":")).encode()
    size = memoryview(payload).nbytes
    if size < SMALL:
        # One write: copying a small payload costs less than a second system call.
        sock.sendall(b"".join((_U32.pack(len(head)), head, _U64.pack(size), payload)))
        return
    sock.sendall(b"".join((_U32.pack(len(head)), head, _U64.pack(size))))
    _send_view(sock, memoryview(payload).cast("B"))


def _send_parts(sock: socket.socket, header: dict, payload: Packed) -> None:
    views = [memoryview(p).cast("B") for p in payload.parts]
    header = dict(header, parts=[v.nbytes for v in views])
    if payload.writable:
        header["writable"] = payload.writable
    if payload.by_id:
        header["by_id"] = payload.by_id
    head = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(b"".join((_U32.pack(len(head)), head, _U64.pack(sum(v.nbytes for v in views)))))
    for view in views:
        _send_view(sock, view)


def _send_view(sock: socket.socket, view: memoryview) -> None:
    for at in range(0, view.nbytes, CHUNK):
        sock.sendall(view[at:at + CHUNK])


def _exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes, as one ``bytes`` received in place (no copy) on a blocking socket; over
    2 GiB (more than one recv() gives), a read-only view of a buffer of their own."""
    if n == 0:
        return b""
    if n > RECV_MAX:
        return memoryview(_into(sock, n)).toreadonly()
    if sock.gettimeout() is None:
        data = sock.recv(n, socket.MSG_WAITALL)
        if len(data) == n:
            return data
        if not data:
            raise EOFError("the connection was closed")
        # Cut short by a signal: the rest, then one copy (rare).
        whole = bytearray(data)
        whole += _into(sock, n - len(data))
        return bytes(whole)
    return bytes(_into(sock, n))


def _into(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes into a ``bytearray`` of their own, a chunk at a time."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, CHUNK))
        if k == 0:
            raise EOFError("the connection was closed")
        got += k
    return buf


def _skip(sock: socket.socket, n: int) -> None:
    """Reads ``n`` bytes into one small buffer, over and over: nothing is kept."""
    scratch = memoryview(bytearray(min(n, CHUNK)))
    while n:
        k = sock.recv_into(scratch, min(n, len(scratch)))
        if k == 0:
            raise EOFError("the connection was closed")
        n -= k


def _parts(header: dict, length: int) -> "list[int]":
    parts, writable = header.get("parts"), header.get("writable", [])
    if (not isinstance(parts, list) or not 0 < len(parts) <= MAX_PARTS
            or not all(type(p) is int and p >= 0 for p in parts) or sum(parts) != length):
        raise ProtocolError(f"parts: {str(parts)[:80]} are not sizes summing to the payload's {length} bytes")
    if not isinstance(writable, list) or not all(type(i) is int and 0 < i < len(parts) for i in writable):
        raise ProtocolError(f"writable: {str(writable)[:80]} are not indexes of the parts after the first")
    by_id = header.get("by_id", 0)
    if type(by_id) is not int or not 0 <= by_id < len(parts):
        raise ProtocolError(f"by_id: {str(by_id)[:80]} is not a count of the parts after the first")
    return parts


def recv(sock: socket.socket, admit=None) -> "tuple[dict, bytes | Packed]":
    """Receives one frame: (header, payload), the payload ``Packed`` when the header cuts it
    into parts. Raises EOFError when the peer closed between frames, ProtocolError on a
    malformed frame. ``admit(header, length)``, when given, is asked before any memory is
    taken for the payload: a text it returns refuses the frame (``Refused``, once the payload
    was read past)."""
    first = sock.recv(4, socket.MSG_WAITALL)
    if not first:
        raise EOFError("the connection was closed")
    if len(first) < 4:
        first += _exactly(sock, 4 - len(first))
    (size,) = _U32.unpack(first)
    if size > MAX_HEADER:
        raise ProtocolError(f"a header of {size} bytes is over the {MAX_HEADER}-byte limit")
    try:
        header = json.loads(_exactly(sock, size))
        (length,) = _U64.unpack(_exactly(sock, 8))
    except EOFError:
        raise ProtocolError("the connection was closed inside a frame") from None
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("the header is not a JSON object")
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"a payload of {length} bytes is over the limit")
    refused = admit(header, length) if admit is not None and length else None
    if refused:
        try:
            _skip(sock, length)
        except EOFError:
            raise ProtocolError("the connection was closed inside a payload") from None
        raise Refused(refused)
    try:
        if "parts" not in header:
            return header, _exactly(sock, length)
        sizes = _parts(header, length)
        writable = set(header.get("writable", []))
        parts = [_into(sock, n) if i in writable else _exactly(sock, n) for i, n in enumerate(sizes)]
        return header, Packed(parts, sorted(writable), header.get("by_id", 0))
    except EOFError:
        raise ProtocolError("the connection was closed inside a payload") from None
    except MemoryError:
        raise ProtocolError(f"a payload of {length} bytes does not fit in this process's memory") from None


def connect(address: str, timeout: "float | None" = 10.0) -> socket.socket:
    """A TCP connection to ``HOST:PORT`` (Nagle off: small calls must not wait)."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    return sock


# Binding to one of these listens on every interface: only when asked for.
EVERY_INTERFACE = ("0.0.0.0", "::")


def listen_address(toward: str, bind: "str | None" = None) -> "tuple[str, str]":
    """Where this process's listening sockets bind, and the host it tells others to dial:
    ``bind`` (``berth.init(bind=...)``), else ``$BERTH_BIND``, else (inside a worker)
    ``$BERTH_NODE_IP``, the address its node registered with; else the local address that
    routes to ``toward`` (the head). ``0.0.0.0`` or ``::`` listens on every interface and is
    announced as that outward address."""
    import os

    host = bind or os.environ.get("BERTH_BIND") or os.environ.get("BERTH_NODE_IP") or outward_ip(toward)
    return host, (outward_ip(toward) if host in EVERY_INTERFACE else host)


def listen(host: str) -> socket.socket:
    """A listening TCP socket on ``host``, port chosen by the OS; ``OSError`` when ``host`` is
    not an address of this machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), 0), family=family, backlog=512)


def outward_ip(toward: str) -> str:
    """The local IP address that routes to ``toward`` (a URL or HOST:PORT): what other
    machines use to reach this process. No packet is sent."""
    rest = toward.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0].strip("[]") if ":" in rest else rest
    host = host.split("/")[0]
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
