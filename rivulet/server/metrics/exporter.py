"""The metrics endpoint (``metrics.listener``): prometheus_client's HTTP server, on a thread of
its own so that serving a scrape never holds up the event loop. The broker's collectors read
state the loop changes, so each scrape asks the loop to run them (one short step between two
requests) and formats the text on the server's thread; the process's CPU and memory are read
there directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
from collections.abc import Iterable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rivulet.server.config import parse_metrics_listener
from rivulet.server.metrics.collectors import histogram_buckets
from rivulet.server.metrics.requests import Histogram

__all__ = ["EventLoopLag", "GcPauses", "MetricsExporter"]

# A scrape waits this long for the loop before failing (the loop is then stuck: a scrape
# error says so better than a hung one).
COLLECT_TIMEOUT_S = 10.0


class _OnLoop(Collector):
    """Runs the collectors of ``inner`` on the broker's event loop and hands back what they
    found, with how long the loop spent on it (the endpoint's own cost to the broker)."""

    def __init__(self, inner: CollectorRegistry, loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
        self.inner = inner
        self.loop = loop
        self.loop_thread = loop_thread
        self.last_seconds = 0.0

    def _collect(self) -> list[Metric]:
        t0 = time.perf_counter()
        found = list(self.inner.collect())
        self.last_seconds = time.perf_counter() - t0
        found.append(GaugeMetricFamily("rivulet_metrics_collect_seconds", "Event loop time this scrape's "
                                       "collection took.", value=self.last_seconds))
        return found

    def collect(self) -> Iterator[Metric]:
        if threading.get_ident() == self.loop_thread:
            return iter(self._collect())
        done: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(self._collect())
            except BaseException as e:  # handed to the scrape, which answers 500
                done.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return iter(done.result(COLLECT_TIMEOUT_S))


class EventLoopLag(Collector):
    """How late the event loop wakes a task that sleeps ``interval_s``: the time callbacks
    (requests, file work on the loop) hold it, which every client waits through."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.histogram = Histogram()
        self.last = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval_s)
            self.last = max(0.0, loop.time() - start - self.interval_s)
            self.histogram.observe(self.last)

    def collect(self) -> Iterator[Metric]:
        h = HistogramMetricFamily("rivulet_event_loop_lag_seconds", "How late the event loop ran a timer, "
                                  f"sampled every {self.interval_s} s.")
        h.add_metric([], histogram_buckets(self.histogram), self.histogram.sum)
        yield h
        yield GaugeMetricFamily("rivulet_event_loop_lag_last_seconds", "The latest event loop lag sample.",
                                value=self.last)


class GcPauses(Collector):
    """How long each garbage collection held the interpreter, per generation: a pause the
    event loop and every client wait through (the tail of request latency looks here)."""

    def __init__(self) -> None:
        self.histograms = [Histogram() for _ in range(3)]
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.histograms[info["generation"]].observe(time.perf_counter() - self._started)

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def collect(self) -> Iterator[Metric]:
        h = HistogramMetricFamily("rivulet_gc_pause_seconds", "Garbage collections, by how long they took.",
                                  labels=["generation"])
        for generation, histogram in enumerate(self.histograms):
            h.add_metric([str(generation)], histogram_buckets(histogram), histogram.sum)
        yield h


class MetricsExporter:
    """The endpoint: ``bind`` at start-up (a port in use stops the broker before it loads
    anything), ``add`` the broker's collectors once they exist, ``close`` at shutdown."""

    def __init__(self, url: str) -> None:
        self.host, self.port = parse_metrics_listener(url)
        self.on_loop = CollectorRegistry(auto_describe=False)
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.loop_lag = EventLoopLag()
        self.on_loop.register(self.loop_lag)
        self.gc_pauses = GcPauses()
        self.on_loop.register(self.gc_pauses)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lag_task: asyncio.Task[None] | None = None

    async def bind(self) -> int:
        """Start serving; the bound port."""
        loop = asyncio.get_running_loop()
        self.registry.register(_OnLoop(self.on_loop, loop, threading.get_ident()))
        self._server, self._thread = start_http_server(self.port, self.host, self.registry)
        self.port = self._server.server_port
        self._lag_task = loop.create_task(self.loop_lag.run())
        self.gc_pauses.install()
        return self.port

    def add(self, collectors: Iterable[Collector]) -> None:
        for c in collectors:
            self.on_loop.register(c)

    async def close(self) -> None:
        self.gc_pauses.uninstall()
        if self._lag_task is not None:
            self._lag_task.cancel()
        server, self._server = self._server, None
        if server is not None:
            # shutdown() waits for the serving thread's next poll: off the loop.
            await asyncio.get_running_loop().run_in_executor(None, server.shutdown)
            server.server_close()
