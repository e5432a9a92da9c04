"""Strict query strings: a parameter a route does not take, or a one-value one given twice, is a 422."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi.exceptions import RequestValidationError
from starlette.requests import HTTPConnection

_QUERY_NAMES: dict[int, tuple[frozenset[str], frozenset[str]]] = {}


def _is_sequence(annotation: Any) -> bool:
    """Whether a query parameter's type takes several values (``list[X] | None`` does)."""
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        return True
    if origin is Annotated:
        return _is_sequence(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_is_sequence(a) for a in get_args(annotation))
    return False


def _query_names(route: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The query parameters a route declares (its own and its dependencies') and those of them
    that take one value, cached per route."""
    known = _QUERY_NAMES.get(id(route))
    if known is not None:
        return known
    names: set[str] = set()
    single: set[str] = set()
    stack = [route.dependant]
    while stack:
        dependant = stack.pop()
        for p in dependant.query_params:
            names.add(p.alias)
            if not _is_sequence(p.field_info.annotation):
                single.add(p.alias)
        stack.extend(dependant.dependencies)
    known = _QUERY_NAMES[id(route)] = (frozenset(names), frozenset(single))
    return known


async def refuse_unknown_query(request: HTTPConnection) -> None:
    """Strict query strings: a parameter the route does not take is a 422, not silently ignored
    (``?stat=RUNNING`` would otherwise list every job), and so is a one-value parameter given
    twice (``?tenant_id=a&tenant_id=b`` would otherwise take the last)."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    known, single = _query_names(route)
    errors = [{"type": "extra_forbidden", "loc": ("query", k), "msg": "unknown query parameter"}
              for k in request.query_params if k not in known]
    errors += [{"type": "repeated_parameter", "loc": ("query", k),
                "msg": "is given more than once"}
               for k in sorted(set(request.query_params))
               if k in single and len(request.query_params.getlist(k)) > 1]
    if errors:
        raise RequestValidationError(errors)
