"""The worker's progress board: a case's phases posted without a message.

The worker posts each phase of the case in flight as it begins (phases.py's
``Step``: inputs, compile or candidate - with the input metadata -, backward,
reference, consistency) into a small file that it and its supervisor both map.  The supervisor reads
the board only when it needs to: when it wakes to poll (a slow case: the
client gets the news), before it calls a phase's deadline, and when the worker
dies (which phase, and what the case's inputs were).  A fast case so costs the
supervisor one wake-up (the answer) instead of four; on a host whose cores are
busy each wake-up is a wait for the scheduler, and they were most of the
overhead of a warm case there (benchmarks/bench_ssh.py --breakdown).

Layout: two slots of SLOT_SIZE bytes, posts alternate between them, so a
worker killed in the middle of a post leaves its previous post whole.  A slot
is a header ``<QQI`` (sequence number, body length, crc32 of the body) then
the body (JSON).  A slot's sequence number is odd while it is written; a
reader takes the whole slot (even number, crc matches) with the higher number,
and reads again at its next look when a post was in flight (nothing orders
the worker's stores for a reader on another core: the crc does).

Standard library only (the runner is shipped alone).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib

SLOT_SIZE = 2 << 20  # the metadata of a case with many inputs; a bigger post goes as a pipe message
HEADER = struct.Struct("<QQI")
_SEQ = struct.Struct("<Q")
_LEN_CRC = struct.Struct("<QI")


class Board:
    """One worker's board, mapped from ``path`` (``create``: the supervisor makes it)."""

    def __init__(self, path: str, create: bool = False):
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, 2 * SLOT_SIZE)  # sparse: pages are only backed once written
            self._map = mmap.mmap(fd, 2 * SLOT_SIZE)
        finally:
            os.close(fd)
        self._seq = 0

    def post(self, doc: dict) -> bool:
        """Write ``doc`` as the board's latest post; False when it does not fit (send it instead)."""
        body = json.dumps(doc, allow_nan=False).encode("utf-8")
        if HEADER.size + len(body) > SLOT_SIZE:
            return False
        self._seq += 2
        at = (self._seq // 2 % 2) * SLOT_SIZE
        m = self._map
        _SEQ.pack_into(m, at, self._seq - 1)  # odd: being written
        m[at + HEADER.size : at + HEADER.size + len(body)] = body
        _LEN_CRC.pack_into(m, at + _SEQ.size, len(body), zlib.crc32(body))
        _SEQ.pack_into(m, at, self._seq)
        return True

    def read(self) -> dict | None:
        """The latest whole post, or None (nothing posted yet, or a post in flight in both slots)."""
        best, best_seq = None, 0
        for at in (0, SLOT_SIZE):
            doc, seq = self._read_slot(at)
            if doc is not None and seq > best_seq:
                best, best_seq = doc, seq
        return best

    def _read_slot(self, at: int) -> tuple[dict | None, int]:
        m = self._map
        seq, length, crc = HEADER.unpack_from(m, at)
        if seq == 0 or seq % 2 or length > SLOT_SIZE - HEADER.size:
            return None, 0
        body = m[at + HEADER.size : at + HEADER.size + length]
        if _SEQ.unpack_from(m, at)[0] != seq or zlib.crc32(body) != crc:
            return None, 0
        try:
            return json.loads(body), seq
        except ValueError:
            return None, 0

    def close(self) -> None:
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass
