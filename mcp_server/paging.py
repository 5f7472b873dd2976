"""Pages of a resource larger than one transport event.

The SDK's streamable-HTTP client refuses an SSE event over 1 MiB ("SSE event
exceeded the 1048576 byte limit"): the ``results`` resource of a 1,333-case run
is 1.38 MB.  A text resource that would come near that limit (``WHOLE_LIMIT``,
measured as it is sent: JSON-escaped) is therefore answered a page of
``PAGE_BYTES`` at a time, on every transport alike: ``URI`` is its first page and
``URI?page=N`` its N-th.  Each page is a small JSON document::

    {"uri": "opdebug://runs/r/results", "page": 1, "pages": 11,
     "next": "opdebug://runs/r/results?page=2", "text": "<this page's part>"}

so the page count is in the first page, and the parts' ``text`` joined in page
order is the resource, byte for byte.  A page ends after a line where it can (the
results view holds one result per line: a page holds whole results).  The same
numbers are in the contents' ``_meta`` for a client that reads them there.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

# One page's text in UTF-8 bytes.  Inside the page's JSON and then the JSON-RPC message a
# byte can grow to 4 (a quote escaped twice), so a page stays under 512 KiB on the wire.
PAGE_BYTES = 128 * 1024
WHOLE_LIMIT = 768 * 1024  # a text this long once JSON-escaped is sent in pages (the SDK client's event: 1 MiB)
_PAGE_QUERY = re.compile(r"^(?P<base>[^?#]+)\?page=(?P<page>[^&#]*)$")
MAX_PAGE = 1_000_000


def split_page(uri: str) -> tuple[str, int | None]:
    """``(the resource's URI, the page asked for or None)``: ``?page=N`` is the only query
    a resource URI takes here."""
    match = _PAGE_QUERY.match(uri)
    if match is None:
        return uri, None
    page = match.group("page")
    if not page.isdigit() or not 1 <= int(page) <= MAX_PAGE:
        raise ResourceNotFoundError(f"page must be a whole number from 1 (got {page[:40]!r}) in {uri[:300]}")
    return match.group("base"), int(page)


def page_cuts(data: bytes, size: int = PAGE_BYTES) -> list[int]:
    """Where each page starts in ``data``: at most ``size`` bytes a page, cut after the last
    newline in that window when there is one, never inside a UTF-8 character."""
    starts, at = [0], 0
    while len(data) - at > size:
        end = at + size
        newline = data.rfind(b"\n", at, end)
        if newline > at:
            end = newline + 1
        else:
            while end > at and (data[end] & 0xC0) == 0x80:  # a continuation byte: back to the character's start
                end -= 1
        starts.append(end)
        at = end
    return starts


def paged(uri: str, page: int | None, contents: Any) -> Any:
    """``contents`` as they are when small (and no page was asked for); else the page asked
    for (the first by default) of its one text content, as described above."""
    if not isinstance(contents, list) or len(contents) != 1 or not isinstance(contents[0].content, str):
        if page is not None and page != 1:
            raise ResourceNotFoundError(f"{uri[:300]} has one page only (asked for page {page})")
        return contents
    text = contents[0].content
    data = text.encode("utf-8")
    if page is None and len(json.dumps(text, ensure_ascii=False).encode("utf-8")) <= WHOLE_LIMIT:
        return contents
    starts = page_cuts(data)
    number = page or 1
    if number > len(starts):
        raise ResourceNotFoundError(f"{uri[:300]} has {len(starts)} page(s); page {number} does not exist")
    ends = starts[1:] + [len(data)]
    part = data[starts[number - 1] : ends[number - 1]].decode("utf-8")
    following = f"{uri}?page={number + 1}" if number < len(starts) else None
    about = {"uri": uri, "page": number, "pages": len(starts), "next": following}
    body = json.dumps({**about, "mime_type": contents[0].mime_type, "text": part}, separators=(",", ":"))
    return [
        ReadResourceContents(content=body, mime_type="application/json", meta={**(contents[0].meta or {}), **about})
    ]
