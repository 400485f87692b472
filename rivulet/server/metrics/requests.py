"""Per-request metrics, as Kafka's RequestMetrics: counts per API and version, error counts per
API and error, and the time of each request split as Kafka splits it, as histograms.

The connection (``server/network.py``) takes five clock readings per request and hands them
to ``RequestMetrics.record`` on the event loop; everything here is plain lists and dicts that
the scrape reads from another thread (whole-number updates under the GIL: a scrape may see a
request's count before its sum, never a torn number).

Rivulet has no request queue between network and handler threads, so the phases are:
queue (the frame read until its handler starts: decoding), local (the handler's own call),
remote (waiting for the answer: purgatory, a coordinator's append), throttle (the throttle
time the answer carries), response queue (waiting behind earlier answers of the connection,
which leave in request order), response send (encoding and handing the bytes to the socket)
and total (the frame read until its answer is handed over).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.fetch_answer import FetchAnswer
from rivulet.protocol.messages.fetch_request import FetchRequest
from rivulet.protocol.schema import Struct

__all__ = ["BUCKETS", "PHASES", "Histogram", "RequestMetrics", "Timings", "count_errors", "error_name", "request_name", "throttle_ms"]

# Histogram bounds in seconds, from 0.1 ms (a metadata answer) to 30 s (a long poll).
BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                              0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Kafka's names (RequestQueueTimeMs, LocalTimeMs, ...) in Prometheus style, in this order.
PHASES: tuple[str, ...] = ("requestqueuetime", "localtime", "remotetime", "throttletime",
                           "responsequeuetime", "responsesendtime", "totaltime")

_FETCH = 1


def request_name(api_key: int, body: object) -> str:
    """Kafka's ``request`` tag: the API's name, Fetch split into FetchConsumer and FetchFollower."""
    if api_key == _FETCH and isinstance(body, FetchRequest):
        replica = body.replica_id  # v15+ carries it in replica_state
        if replica < 0 and body.replica_state is not None:
            replica = body.replica_state.replica_id
        return "FetchFollower" if replica >= 0 else "FetchConsumer"
    return framing.api_name(api_key)


# Per response class, from its schema: a getter of its error_code and of its throttle_time_ms
# (None without the field), and getters of the struct fields that can hold more error codes.
_Getter = Callable[[Struct], Any]
_Plan = tuple[_Getter | None, _Getter | None, tuple[tuple[_Getter, bool], ...]]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type[Struct]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        _PLANS[cls] = (None, None, ())  # a recursive schema ends here
        names = {f.name for f in cls.FIELDS}
        nested = tuple((attrgetter(f.name), f.is_array) for f in cls.FIELDS
                       if f.kind == "struct" and f.struct is not None and _has_errors(f.struct))
        plan = _PLANS[cls] = (attrgetter("error_code") if "error_code" in names else None,
                              attrgetter("throttle_time_ms") if "throttle_time_ms" in names else None, nested)
    return plan


def _has_errors(cls: type[Struct]) -> bool:
    error, _, nested = _plan(cls)
    return error is not None or bool(nested)


def count_errors(response: Struct, request: str, errors: dict[tuple[str, int], int]) -> None:
    """Count every error code in a response under ``(request, code)``, NONE included (Kafka's
    errorCounts): the top level's and those of its topics, partitions and other nested entries."""
    error, _, nested = _plan(type(response))
    if error is not None:
        key = (request, error(response))
        errors[key] = errors.get(key, 0) + 1
    if type(response) is FetchAnswer:  # counted from its results, not the responses they stand for
        for code, n in response.partition_error_counts().items():
            key = (request, code)
            errors[key] = errors.get(key, 0) + n
        return
    for get, is_array in nested:
        value = get(response)
        if value is None:
            continue
        if is_array:
            leaf = _plan(type(value[0])) if value else None
            if leaf is not None and leaf[0] is not None and not leaf[2]:
                # Entries without nested errors (a Fetch's partitions, thousands of them):
                # counted in one loop, not a call each.
                get_error = leaf[0]
                codes: dict[int, int] = {}
                for item in value:
                    code = get_error(item)
                    codes[code] = codes.get(code, 0) + 1
                for code, n in codes.items():
                    key = (request, code)
                    errors[key] = errors.get(key, 0) + n
                continue
            for item in value:
                count_errors(item, request, errors)
        else:
            count_errors(value, request, errors)


def throttle_ms(response: Struct) -> int:
    get = _plan(type(response))[1]
    return (get(response) or 0) if get is not None else 0


class Histogram:
    """Bucket counts (the last one past every bound) and their sum, not cumulative."""

    __slots__ = ("counts", "sum")

    def __init__(self, counts: list[int] | None = None, total: float = 0.0) -> None:
        self.counts = counts if counts is not None else [0] * (len(BUCKETS) + 1)
        self.sum = total

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds


class Timings:
    """One request type's histograms, one per phase, kept flat for the hot path."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [[0] * (len(BUCKETS) + 1) for _ in PHASES]
        self.sums = [0.0] * len(PHASES)

    @property
    def phases(self) -> list[Histogram]:
        """A copy of each phase's histogram (for a scrape)."""
        return [Histogram(list(c), s) for c, s in zip(self.counts, list(self.sums))]


class RequestMetrics:
    """What the connections record; read by ``collectors.RequestCollector`` when scraped."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}  # (request, version) -> answered
        self.errors: dict[tuple[str, int], int] = {}  # (request, error code) -> count
        self.timings: dict[str, Timings] = {}

    def record(self, request: str, version: int, received: float, dispatched: float, handled: float,
               completed: float, write_start: float, sent: float, response: object) -> None:
        """One answered request (``response`` None when it has no answer, as acks=0), with its
        clock readings in seconds."""
        key = (request, version)
        self.requests[key] = self.requests.get(key, 0) + 1
        t = self.timings.get(request)
        if t is None:
            t = self.timings[request] = Timings()
        throttle = 0
        if isinstance(response, Struct):
            count_errors(response, request, self.errors)
            throttle = throttle_ms(response)
        counts, sums = t.counts, t.sums
        for i, seconds in enumerate((dispatched - received, handled - dispatched, completed - handled,
                                     throttle / 1000, write_start - completed, sent - write_start,
                                     sent - received)):
            counts[i][bisect_left(BUCKETS, seconds)] += 1
            sums[i] += seconds


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
