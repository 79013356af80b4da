"""The judge/runner channel: length-prefixed JSON messages over a Unix socketpair.

Each message is a 4-byte big-endian length, then that many bytes of UTF-8 JSON holding
an object with an `op` string. The judge passes shared-memory file descriptors to the
runner with SCM_RIGHTS (`socket.send_fds`); the runner never passes any back, and the
judge reads with a plain `recv`, so descriptors the runner tries to send are discarded
by the kernel. Nothing here unpickles or evaluates: a message is data, checked by the
side that reads it.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time

HEADER = struct.Struct(">I")
# The largest message either side accepts; layouts and timing reports stay far below.
MAX_BYTES = 4 << 20
MAX_FDS = 8


class ChannelError(Exception):
    """The other side sent something that is not a well-formed message, or went away."""


class Closed(ChannelError):
    """The other side closed the channel (it exited, or was killed)."""


class Timeout(ChannelError):
    """No message arrived before the deadline."""


def send(sock: socket.socket, message: dict, fds: list[int] | tuple = ()) -> None:
    payload = json.dumps(message, allow_nan=False, separators=(",", ":")).encode()
    frame = HEADER.pack(len(payload)) + payload
    if fds:
        # The descriptors travel with the first byte; the rest follows as plain data.
        sent = socket.send_fds(sock, [frame], list(fds))
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def recv(sock: socket.socket, deadline: float | None = None, *, accept_fds: bool = False) -> tuple[dict, list[int]]:
    """The next message and any descriptors sent with it (only when `accept_fds`).

    `deadline` is a time.monotonic() value; None waits forever.
    """
    fds: list[int] = []
    if accept_fds:
        head, fds = _recv_with_fds(sock, HEADER.size, deadline)
    else:
        head = _recv_exactly(sock, HEADER.size, deadline)
    (length,) = HEADER.unpack(head)
    if length > MAX_BYTES:
        raise ChannelError(f"a message of {length} bytes (the limit is {MAX_BYTES})")
    body = _recv_exactly(sock, length, deadline)
    try:
        message = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise ChannelError(f"a message that is not JSON ({e})") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ChannelError("a message that is not an object with an 'op' string")
    return message, fds


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _wait(sock, deadline):
    if deadline is None:
        sock.settimeout(None)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("no message before the deadline")
    sock.settimeout(left)


def _recv_exactly(sock, n: int, deadline) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk, _ = _recv_once(sock, min(n - got, 1 << 20), deadline, with_fds=False)
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv_with_fds(sock, n: int, deadline) -> tuple[bytes, list[int]]:
    data, fds = _recv_once(sock, n, deadline, with_fds=True)
    if len(data) < n:
        data += _recv_exactly(sock, n - len(data), deadline)
    return data, fds


def _recv_once(sock, n: int, deadline, *, with_fds: bool) -> tuple[bytes, list[int]]:
    """One receive of up to n bytes (and, `with_fds`, the descriptors sent with them)."""
    _wait(sock, deadline)
    try:
        if with_fds:
            data, fds, _flags, _addr = socket.recv_fds(sock, n, MAX_FDS)
        else:
            data, fds = sock.recv(n), []
    except TimeoutError:
        raise Timeout("no message before the deadline") from None
    except OSError as e:
        raise Closed(f"the channel broke ({e})") from None
    if not data:
        raise Closed("the other side closed the channel")
    return data, list(fds)


# ---- validation of what the judge reads ------------------------------------------

def number(message: dict, key: str, *, minimum: float = 0.0) -> float:
    """A finite number >= minimum at message[key]; ChannelError otherwise."""
    value = message.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise ChannelError(f"{message.get('op')!r} message: {key!r} must be a finite number >= {minimum:g}, "
                           f"not {value!r}")
    return float(value)


def text(message: dict, key: str, limit: int = 8000, *, optional: bool = False) -> str | None:
    value = message.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ChannelError(f"{message.get('op')!r} message: {key!r} must be a string")
    return value[:limit]


def expect(message: dict, *ops: str) -> str:
    op = message["op"]
    if op not in ops:
        raise ChannelError(f"a {op!r} message where {' or '.join(map(repr, ops))} was due")
    return op
