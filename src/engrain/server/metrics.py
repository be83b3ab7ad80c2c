"""Prometheus metrics in the text exposition format (version 0.0.4), written by hand: a
few counters and one histogram do not justify a dependency.

Series (``route`` is the route's template, ``/v1/memories/{memory_id}``, never a raw path,
so ids cannot blow up the number of series; a route of a mounted app carries the mount's
path, ``/ui/memories/{memory_id}``, and a mounted app without routes of its own, the
inspector's static files, is ``/ui/static/{path}``; unmatched paths count as
``"<unmatched>"``, :func:`route_template`)::

    engrain_http_requests_total{method,route,status}          counter
    engrain_http_request_duration_seconds{method,route}       histogram
    engrain_http_requests_in_flight                           gauge
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Sequence

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import Scope

#: Histogram buckets in seconds: the context path aims at 20 ms, imports take longer.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


#: The route label of a request no route matched.
UNMATCHED = "<unmatched>"


def route_template(scope: Scope, root_path: str, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that answered the request of ``scope`` (read once the app
    has run; ``root_path`` is the scope's before it ran, ``routes`` the app's).

    FastAPI names its own routes in the scope (``scope["route"]``), after the paths of the
    mounts that led there, which Starlette adds to ``root_path`` (without them the
    inspector's ``/ui/memories`` counted as ``/memories``). Routes it does not name — the
    OpenAPI document and ``/docs``, a mount's app without routes (the inspector's static
    files: ``/ui/static/{path}``) — are found by matching the request against ``routes``
    again; a request nothing matches is :data:`UNMATCHED`."""
    route = scope.get("route")
    path = getattr(route, "path_format", None)
    mounted = str(scope.get("root_path", ""))
    if path is not None and not isinstance(route, Mount) and mounted.startswith(root_path):
        return mounted[len(root_path) :] + str(path)
    fresh = {"type": "http", "path": scope.get("path", ""), "root_path": root_path,
             "method": scope.get("method", "GET")}  # fmt: skip
    return _matched(routes, fresh, root_path) or UNMATCHED


def _matched(routes: Sequence[BaseRoute], scope: Scope, root_path: str) -> str | None:
    """The template of the route of ``routes`` the request of ``scope`` reaches (a route
    that would answer another method counts, as a 405 is its answer), through mounts."""
    partial: tuple[BaseRoute, Scope] | None = None
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return _template(route, {**scope, **child}, root_path)
        if match is Match.PARTIAL and partial is None:
            partial = (route, {**scope, **child})
    return None if partial is None else _template(*partial, root_path)


def _template(route: BaseRoute, scope: Scope, root_path: str) -> str | None:
    prefix = str(scope.get("root_path", ""))[len(root_path) :]
    if isinstance(route, Mount):  # an app of routes, or one serving every path below it
        return _matched(route.routes, scope, root_path) if route.routes else f"{prefix}/{{path}}"
    path = getattr(route, "path_format", None)
    return None if path is None else prefix + path


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """The server's counters; safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self._buckets: dict[tuple[str, str], list[int]] = {}
        self._sums: dict[tuple[str, str], float] = defaultdict(float)
        self.in_flight = 0

    def started(self) -> None:
        """A request began."""
        with self._lock:
            self.in_flight += 1

    def finished(self, method: str, route: str, status: int, seconds: float) -> None:
        """A request ended with ``status`` after ``seconds``."""
        key = (method, route)
        with self._lock:
            self.in_flight -= 1
            self._requests[(method, route, status)] += 1
            counts = self._buckets.setdefault(key, [0] * (len(BUCKETS) + 1))
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sums[key] += seconds

    def render(self) -> str:
        """Every series in the Prometheus text format."""
        with self._lock:
            requests = sorted(self._requests.items())
            buckets = {k: list(v) for k, v in sorted(self._buckets.items())}
            sums = dict(self._sums)
            in_flight = self.in_flight
        lines = [
            "# HELP engrain_http_requests_total HTTP requests answered.",
            "# TYPE engrain_http_requests_total counter",
        ]
        for (method, route, status), n in requests:
            lines.append(f'engrain_http_requests_total{{method="{_escape(method)}",'
                         f'route="{_escape(route)}",status="{status}"}} {n}')  # fmt: skip
        lines += [
            "# HELP engrain_http_request_duration_seconds Time to answer a request.",
            "# TYPE engrain_http_request_duration_seconds histogram",
        ]
        for (method, route), counts in buckets.items():
            labels = f'method="{_escape(method)}",route="{_escape(route)}"'
            total = 0
            for bound, n in zip((*BUCKETS, float("inf")), counts, strict=True):
                total += n
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'engrain_http_request_duration_seconds_bucket{{{labels},le="{le}"}}'
                             f" {total}")  # fmt: skip
            lines.append(f"engrain_http_request_duration_seconds_sum{{{labels}}} "
                         f"{sums[(method, route)]:.6f}")  # fmt: skip
            lines.append(f"engrain_http_request_duration_seconds_count{{{labels}}} {total}")
        lines += [
            "# HELP engrain_http_requests_in_flight Requests being answered now.",
            "# TYPE engrain_http_requests_in_flight gauge",
            f"engrain_http_requests_in_flight {in_flight}",
        ]
        return "\n".join(lines) + "\n"
