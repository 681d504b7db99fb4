"""The ASGI application of ``sheetq serve`` (Starlette; docs/design.md §15).

``POST /hooks/NAME`` (a route of ``[ingress.routes.NAME]``) answers:

| code | body | written |
| --- | --- | --- |
| 202 | ``{"outcome": "enqueued", "task_id": …}`` | the task, durable before the answer |
| 200 | ``{"outcome": "duplicate", "task_id": …, "status": …}`` | a ``duplicate`` log row |
| 409 | ``{"outcome": "conflict", "task_id": …, "error": …}`` | a ``conflict`` log row |
| 401 | ``{"error": "signature refused"}`` | nothing (one log line, no secret, no body) |
| 400 | ``{"error": …}``: not a JSON object nor a form, a bad key | nothing |
| 413 | ``{"error": …}``: over ``max_body`` or 50,000 characters of payload | nothing |
| 404 | no such route | nothing |
| 503 | ``{"error": …}`` and ``Retry-After``: the store cannot be reached | nothing |

The checks run in that order before anything is written: route, size, signature, body, key.
A form (``application/x-www-form-urlencoded``) becomes an object of its fields (a field
given several times: a list of its values). The key is the route's ``key_header`` when the
request has it (``X-GitHub-Delivery`` for ``github``), a Stripe event's ``id`` for
``stripe``, else the type's ``key_fields`` and docs/design.md §4's rules.

``GET /healthz``: ``{"status": "ok", "last_write": "ok" | "failed"}`` (200; 503 while the
last write failed). ``GET /metrics``: Prometheus text: requests by route and code, their
latency, writes and batch sizes, and the queue's tasks by status and type, its oldest
waiting task and each connector's state, running and waiting tasks (read at most every
``STATUS_EVERY`` seconds: on Google each read costs quota).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as Path

from sheetq.accept import NewTask, prepare
from sheetq.clock import Clock
from sheetq.config import Settings
from sheetq.errors import InputError
from sheetq.idempotency import canonical_json, cell_length, parse_payload
from sheetq.ingress.committer import Committer
from sheetq.ingress.config import Ingress, Route
from sheetq.ingress.signatures import check
from sheetq.model import MAX_CELL_CHARS
from sheetq.port import ConnectorView, QueuePort, QueueTally

log = logging.getLogger("sheetq.serve")
disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series

CONNECTOR_STATES = ("closed", "open", "half-open", "paused")
RETRY_AFTER = 30  # seconds a sender is asked to wait when the store cannot be reached
STATUS_EVERY = {"google": 300.0, "other": 5.0}  # seconds between reads of the queue's counts
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0)


class _Refused(Exception):
    """A request answered without writing: ``code``, the body's ``error``."""

    def __init__(self, code: int, error: str) -> None:
        super().__init__(error)
        self.code = code
        self.error = error


class _QueueGauges(Collector):
    """The queue's tasks by status and type, its oldest waiting task, and each connector's
    state, from the last read (``Service.refresh_status``)."""

    def __init__(self) -> None:
        self.tally: QueueTally | None = None
        self.connectors: list[ConnectorView] = []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        tally = self.tally
        if tally is None:
            return []
        tasks = GaugeMetricFamily(
            "sheetq_tasks", "Tasks in the queue by status and type", labels=["status", "type"]
        )
        for task_type, counts in sorted(tally.by_type.items()):
            for status, count in sorted(counts.items()):
                tasks.add_metric([status, task_type], count)
        oldest = GaugeMetricFamily(
            "sheetq_oldest_waiting_seconds",
            "Seconds the longest-due waiting task has been due (0: none due)",
        )
        oldest.add_metric([], tally.oldest or 0.0)
        owed = GaugeMetricFamily(
            "sheetq_failed_unalerted", "Failed tasks whose alert is not sent yet"
        )
        owed.add_metric([], tally.owed)
        return [tasks, oldest, owed, *self._connectors()]

    def _connectors(self) -> list[GaugeMetricFamily]:
        if not self.connectors:
            return []
        state = GaugeMetricFamily(
            "sheetq_connector_state",
            "1 for each connector's current state (closed, open, half-open, paused)",
            labels=["connector", "state"],
        )
        running = GaugeMetricFamily(
            "sheetq_connector_running", "Tasks running under a connector", labels=["connector"]
        )
        waiting = GaugeMetricFamily(
            "sheetq_connector_waiting", "Tasks due under a connector", labels=["connector"]
        )
        for view in self.connectors:
            for name in CONNECTOR_STATES:
                state.add_metric([view.name, name], 1.0 if view.state == name else 0.0)
            running.add_metric([view.name], view.running)
            waiting.add_metric([view.name], view.waiting)
        return [state, running, waiting]


class Service:
    """The ingress's state: settings, routes, the committer, the metrics."""

    def __init__(
        self,
        settings: Settings,
        ingress: Ingress,
        *,
        clock: Clock,
        open_store: Callable[[], QueuePort],
        open_reader: Callable[[], QueuePort],
        google: bool,
    ) -> None:
        self.settings = settings
        self.ingress = ingress
        self.clock = clock
        self._open_reader = open_reader
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "sheetq_ingress_requests",
            "Webhook requests answered, by route and HTTP code",
            ["route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "sheetq_ingress_request_seconds",
            "Seconds from a webhook's arrival to its answer, by route",
            ["route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.writes = Counter(
            "sheetq_ingress_writes",
            "Writes to the queue's store, by result (ok, failed)",
            ["result"],
            registry=self.registry,
        )
        self.batch = Histogram(
            "sheetq_ingress_batch_tasks",
            "Tasks per write",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500),
            registry=self.registry,
        )
        self.gauges = _QueueGauges()
        self.registry.register(self.gauges)
        self.committer = Committer(
            open_store,
            clock=clock,
            window=ingress.batch_window if google else 0.0,
            reopen=google,
            on_batch=self._batched,
        )
        self._status_every = STATUS_EVERY["google" if google else "other"]
        self._status_at = -1e9
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="sheetq-status")
        self._status_lock: asyncio.Lock | None = None

    def _batched(self, size: int, _seconds: float, ok: bool) -> None:
        self.writes.labels("ok" if ok else "failed").inc()
        if ok:
            self.batch.observe(size)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self._status_lock = asyncio.Lock()
        self.committer.start()
        try:
            yield
        finally:
            await self.committer.stop()
            self._reader.shutdown(wait=False)

    # --- the routes ---------------------------------------------------------------------

    async def hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        route = self.ingress.routes.get(name)
        began = time.monotonic()
        label = name if route is not None else "(none)"
        try:
            if route is None:
                raise _Refused(404, f"no route /hooks/{name}")
            task = await self._accept(route, request)
            try:
                done = await self.committer.submit(task)
            except Exception:
                raise _Refused(503, "the queue's store cannot be reached; retry later") from None
        except _Refused as refused:
            headers = {"Retry-After": str(RETRY_AFTER)} if refused.code == 503 else None
            self._count(label, refused.code, began)
            return JSONResponse({"error": refused.error}, refused.code, headers=headers)
        code = {"enqueued": 202, "duplicate": 200}.get(done.outcome, 409)
        body: dict[str, Any] = {"outcome": done.outcome, "task_id": done.task_id}
        if done.outcome != "enqueued":
            body["status"] = done.status
        if done.outcome == "conflict":
            body["error"] = (
                f"the key {done.key!r} belongs to task {done.task_id} with a different "
                "payload; nothing added"
            )
        self._count(label, code, began)
        log.info("POST /hooks/%s: %d %s %s", name, code, done.outcome, done.task_id)
        return JSONResponse(body, code)

    def _count(self, route: str, code: int, began: float) -> None:
        self.requests.labels(route, str(code)).inc()
        self.latency.labels(route).observe(time.monotonic() - began)

    async def _accept(self, route: Route, request: Request) -> NewTask:
        """The request's task, or ``_Refused`` (413, 401, 400) with nothing written."""
        limit = self.ingress.max_body
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise _Refused(413, f"the body is over {limit:,} bytes ([ingress] max_body)")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _Refused(413, f"the body is over {limit:,} bytes ([ingress] max_body)")
        raw = bytes(body)
        why = check(route, request.headers, raw, now=self.clock.now().timestamp())
        if why:
            client = request.client.host if request.client else "?"
            log.warning(
                "POST /hooks/%s from %s: signature refused (%s); nothing written",
                route.name,
                client,
                why,
            )
            raise _Refused(401, "signature refused")
        payload = _payload(request.headers.get("content-type", ""), raw, route)
        try:
            size = cell_length(canonical_json(payload))
        except InputError as exc:
            raise _Refused(400, exc.message) from None
        if size > MAX_CELL_CHARS:
            raise _Refused(
                413,
                f"the payload is {size:,} characters as compact JSON; a task holds at most "
                f"{MAX_CELL_CHARS:,}",
            )
        key = None
        if route.key_header:
            key = (request.headers.get(route.key_header) or "").strip() or None
        if key is None and route.signature == "stripe" and isinstance(payload.get("id"), str):
            key = payload["id"]  # a Stripe event's id: Stripe's advice against redeliveries
        try:
            (task,) = prepare(route.type, [(None, payload)], self.settings, key=key)
        except InputError as exc:
            raise _Refused(400, exc.message.replace("--key", route.key_header or "key")) from None
        return task

    async def healthz(self, _request: Request) -> Response:
        failed = bool(self.committer.stats.last_error)
        return JSONResponse(
            {
                "status": "unavailable" if failed else "ok",
                "last_write": "failed" if failed else "ok",
            },
            503 if failed else 200,
        )

    async def metrics(self, _request: Request) -> Response:
        await self._refresh_status()
        return Response(
            generate_latest(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def _refresh_status(self) -> None:
        """Read the queue's counts when the last read is older than ``STATUS_EVERY``; a read
        that fails keeps the last counts (the error is logged, never shown)."""
        assert self._status_lock is not None
        async with self._status_lock:
            if time.monotonic() - self._status_at < self._status_every:
                return
            self._status_at = time.monotonic()
            try:
                tally, connectors = await asyncio.get_running_loop().run_in_executor(
                    self._reader, self._read_status
                )
            except Exception as exc:
                log.warning("/metrics: the queue's counts could not be read: %s", exc)
                return
            self.gauges.tally = tally
            self.gauges.connectors = connectors

    def _read_status(self) -> tuple[QueueTally, list[ConnectorView]]:
        store = self._open_reader()
        try:
            tally = store.status(clock=self.clock).tally
            connectors: list[ConnectorView] = []
            # PostgreSQL keeps every type's connector; a sheet only [connectors.NAME] ones
            if self.settings.database_url or self.settings.connectors_sheet:
                try:
                    connectors = store.connectors(clock=self.clock)
                except Exception as exc:  # the counts stand without them
                    log.warning("/metrics: the connectors could not be read: %s", exc)
            return tally, connectors
        finally:
            store.close()


def _charset(params: str) -> str:
    """The ``charset`` parameter of a Content-Type's ``params`` (``"utf-8"`` when none)."""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"'):
            return value.strip().strip('"').lower()
    return "utf-8"


def _payload(content_type: str, raw: bytes, route: Route) -> dict[str, Any]:
    """The task's payload: a JSON object, or a form's fields (``_Refused`` 400 otherwise)."""
    kind, _, params = content_type.partition(";")
    kind = kind.strip().lower()
    # JSON is UTF-8 (RFC 8259 §8.1); a form is in the charset its Content-Type declares
    # (WHATWG URL "application/x-www-form-urlencoded"; UTF-8 when none), never guessed
    form = kind == "application/x-www-form-urlencoded"
    charset = _charset(params) if form else "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise _Refused(400, f"unknown charset {charset!r} in Content-Type") from None
    try:
        text = raw.decode(charset).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise _Refused(400, f"the body is not {charset} text (byte {exc.start})") from None
    if form:
        fields: dict[str, Any] = {}
        try:
            pairs = parse_qsl(
                text,
                keep_blank_values=True,
                max_num_fields=1000,
                encoding=charset,
                errors="strict",  # never a replacement character: two senders' data kept apart
            )
        except UnicodeDecodeError as exc:
            raise _Refused(
                400, f"a form field is not {charset} text once %-decoded ({exc.reason})"
            ) from None
        except ValueError as exc:
            raise _Refused(400, f"the form cannot be read: {exc}") from None
        for name, value in pairs:
            if name in fields:
                held = fields[name]
                fields[name] = [*held, value] if isinstance(held, list) else [held, value]
            else:
                fields[name] = value
        if route.signature == "github" and set(fields) == {"payload"}:
            text = str(fields["payload"])  # GitHub's form content type: the JSON in `payload`
        else:
            return fields
    elif kind.startswith("multipart/"):
        raise _Refused(
            400, "multipart forms are not accepted: send JSON or application/x-www-form-urlencoded"
        )
    try:
        return parse_payload(text, where="the body")
    except InputError as exc:
        raise _Refused(400, exc.message) from None


def build_app(service: Service) -> Starlette:
    """The Starlette application over ``service``."""

    async def not_found(_request: Request, _exc: Exception) -> Response:
        return JSONResponse({"error": "not found"}, 404)

    async def not_allowed(_request: Request, _exc: Exception) -> Response:
        return JSONResponse({"error": "method not allowed"}, 405)

    return Starlette(
        routes=[
            Path("/hooks/{name}", service.hook, methods=["POST"]),
            Path("/healthz", service.healthz, methods=["GET"]),
            Path("/metrics", service.metrics, methods=["GET"]),
        ],
        lifespan=service.lifespan,
        exception_handlers={404: not_found, 405: not_allowed},
    )
