"""The framed channel through an srun step: the server side of slurm_step.Relay.

Why the framing exists and what is on the wire: tools/remote/slurm_step.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .slurm_step import ACK, LINE, MORE, NUDGE, RS, STREAM, frames, unframe
from .supervisor_client import within

ACK_TIMEOUT_S = 60.0  # the step relay's ack of one chunk


# --------------------------------------------------------------------------
# The framed channel through srun (the server side of slurm_step.Relay)
# --------------------------------------------------------------------------


class FramedChannel:
    """The supervisor's line streams over a step's stdio, framed as slurm_step
    describes: what is written goes as one burst of chunks of at most PIECE
    bytes, each but the last after the relay's ack of the one before, so no
    message waits behind another for a delayed ACK (44 ms each way through
    srun).  Presents what SupervisorClient reads from (``readline``) and writes
    to (``write``, ``drain``, ``write_eof``).

    A pump task reads the wire at all times: acks release the sender, ``+``
    chunks are acked, the stream is cut into lines for ``readline``.  A reader
    that has taken every line of a burst and waits for more sends a nudge: the
    relay's next message then finds its last one acknowledged."""

    def __init__(self, reader: Any, writer: Any) -> None:  # a HostProcess's stdout and stdin
        self._reader, self._writer = reader, writer
        self._lines: asyncio.Queue[bytes | Exception] = asyncio.Queue()
        self._acks = asyncio.Semaphore(0)
        self._pending: list[bytes] = []
        self._send_lock = asyncio.Lock()
        self._ended = False
        self._owe_nudge = False  # a burst ended ("=") and nothing of ours went out since
        self._pump = asyncio.ensure_future(self._read_wire())

    async def _read_wire(self) -> None:
        parts: list[bytes] = []  # the start of a line whose end has not come yet
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                if isinstance(line, str):
                    line = line.encode()
                tag, body = line[:1], line[1:].rstrip(b"\n")
                if tag == ACK:
                    self._acks.release()
                    continue
                if tag in (MORE, STREAM):  # a burst goes on: its ack (or its flow) does what a nudge would
                    self._owe_nudge = False
                if tag == MORE:
                    self._writer.write(ACK + b"\n")
                elif tag == LINE:
                    self._owe_nudge = True
                elif tag == NUDGE:
                    continue
                elif tag != STREAM:  # not framed (cannot come from the relay): passed on as a line
                    body = line.rstrip(b"\n") + RS
                chunk = unframe(body)
                if b"\n" not in chunk:
                    parts.append(chunk)
                    continue
                *complete, rest = chunk.split(b"\n")
                complete[0] = b"".join(parts) + complete[0]
                for text in complete:
                    self._lines.put_nowait(text + b"\n")
                parts = [rest] if rest else []
        except Exception as exc:  # the stream broke: readline raises it
            self._lines.put_nowait(exc)
        finally:
            self._ended = True
            self._acks.release()
            self._lines.put_nowait(b"")

    async def readline(self) -> bytes:
        if self._lines.empty() and self._owe_nudge and not self._ended:
            self._owe_nudge = False
            try:
                self._writer.write(NUDGE + b"\n")
            except Exception:  # the stream is going: the read below says so
                pass
        item = await self._lines.get()
        if isinstance(item, Exception):
            raise item
        if item == b"":
            self._lines.put_nowait(b"")  # every later read sees the end too
        return item

    def write(self, data: bytes) -> None:
        self._pending.append(data)

    async def drain(self) -> None:
        async with self._send_lock:
            data, self._pending = b"".join(self._pending), []
            if not data:
                return
            self._owe_nudge = False  # our data carries the ACK
            for piece in frames(data):
                self._writer.write(piece)
                await self._writer.drain()
                if piece[:1] != MORE:
                    continue
                try:
                    await within(self._acks.acquire(), ACK_TIMEOUT_S)
                except asyncio.TimeoutError:
                    raise ConnectionError(f"the step relay did not ack a chunk within {ACK_TIMEOUT_S:g} s") from None
                if self._ended:
                    raise ConnectionError("the step's output ended while a line was being sent")

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        try:
            if hasattr(self._writer, "can_write_eof") and self._writer.can_write_eof():
                self._writer.write_eof()
            else:
                self._writer.close()
        except Exception:  # the stream may be gone
            pass

    def close(self) -> None:
        self._pump.cancel()
