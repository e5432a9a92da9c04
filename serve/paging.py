"""Lists and pages: JSON arrays cut at the byte cap, cursors, and the headers that say so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import Response
from pydantic import BaseModel

from serve.schemas import ID_CURSOR, MAX_CURSOR, NUMBER_CURSOR

MAX_LIST_LIMIT = 10_000  # the largest `limit` of GET /v1/jobs (the byte cap binds first)
TRUNCATED_HEADER = "X-Spotplane-Truncated"
NEXT_OFFSET_HEADER = "X-Spotplane-Next-Offset"
NEXT_AFTER_HEADER = "X-Spotplane-Next-After"

LIST_HEADERS = {
    TRUNCATED_HEADER: {"description": "present when the byte cap cut the list short",
                       "schema": {"type": "string"}},
}
CURSOR_PAGE: dict[int | str, dict[str, Any]] = {200: {"description": "one page, oldest first", "headers": {
    **LIST_HEADERS, NEXT_AFTER_HEADER: {"description": "`after` of the next page, while one follows",
                                         "schema": {"type": "string"}}}}}
After = Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR, pattern=ID_CURSOR, description=(
    "cursor: the id of the last item of the previous page (X-Spotplane-Next-After)"))]
NumberAfter = Annotated[str | None, Query(pattern=NUMBER_CURSOR, description=(
    "cursor: the id (a number) of the last item of the previous page (X-Spotplane-Next-After)"))]
Limit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)]


def bounded_list(items: Sequence[BaseModel], max_bytes: int, offset: int | None = None, *,
                 ids: Sequence[str] | None = None, full: bool = False) -> Response:
    """A JSON array of ``items``, cut before it passes ``max_bytes`` (at least one item kept);
    a cut answer says so in its headers, with the offset to continue from when paged. With
    ``ids`` (the items' ids), a cut or ``full`` page names its last id as the next cursor."""
    parts: list[bytes] = []
    size = 2
    for item in items:
        part = item.model_dump_json().encode()
        if parts and size + len(part) + 1 > max_bytes:
            break
        parts.append(part)
        size += len(part) + 1
    headers: dict[str, str] = {}
    if len(parts) < len(items):
        headers[TRUNCATED_HEADER] = "true"
        if offset is not None:
            headers[NEXT_OFFSET_HEADER] = str(offset + len(parts))
    if ids is not None and parts and (full or len(parts) < len(items)):
        headers[NEXT_AFTER_HEADER] = ids[len(parts) - 1]
    return Response(b"[" + b",".join(parts) + b"]", media_type="application/json", headers=headers)


def cursor_page(items: Sequence[BaseModel], ids: Sequence[str], limit: int, max_bytes: int) -> Response:
    """One cursor page from the store's ``limit + 1`` rows after the cursor (the extra row says
    that another page follows)."""
    more = len(items) > limit
    return bounded_list(items[:limit], max_bytes, ids=ids[:limit], full=more)
