"""Running the ingress under uvicorn (docs/design.md §15): bind, serve, stop on SIGTERM.

SIGTERM or SIGINT: uvicorn stops accepting connections, the requests in flight finish (their
batch is written and each is answered), the committer writes what waits and lets the store
go, and ``serve`` returns (``sheetq serve`` exits 0). A second SIGINT stops at once.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

import uvicorn

from sheetq.backends import on_google, open_queue
from sheetq.clock import Clock
from sheetq.config import Settings
from sheetq.errors import StoreUnavailable
from sheetq.ingress.app import Service, build_app
from sheetq.ingress.config import Ingress
from sheetq.port import QueuePort


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one); ``OSError`` when the
    address is in use or not this host's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def make_service(settings: Settings, ingress: Ingress, *, clock: Clock) -> Service:
    """The service over the configured queue: Google writes in batches of ``batch_window``
    and opens the spreadsheet per batch (each bounded by ``SHEETQ_ENQUEUE_TIMEOUT``); the
    local workbook (its lock wait bounded by ``SHEETQ_ENQUEUE_TIMEOUT``) and PostgreSQL
    (one connection) stay open until a write fails."""
    google = on_google(settings)

    def open_store() -> QueuePort:
        if settings.database_url:
            return open_queue(settings)
        return open_queue(
            settings,
            time_limit=settings.enqueue_timeout,
            time_limit_name="SHEETQ_ENQUEUE_TIMEOUT",
        )

    def open_reader() -> QueuePort:
        return open_queue(
            settings, time_limit=settings.enqueue_timeout, time_limit_name="SHEETQ_ENQUEUE_TIMEOUT"
        )

    return Service(
        settings,
        ingress,
        clock=clock,
        open_store=open_store,
        open_reader=open_reader,
        google=google,
    )


def serve(
    service: Service, sock: socket.socket, *, on_stop: Callable[[], None] | None = None
) -> None:
    """Serve until SIGTERM/SIGINT, then finish the requests in flight."""
    config = uvicorn.Config(
        build_app(service),
        log_config=None,
        access_log=False,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=int(
            service.settings.enqueue_timeout + service.ingress.batch_window + 10
        ),
    )
    server = uvicorn.Server(config)
    # uvicorn takes SIGTERM/SIGINT while it serves and raises them again once it stopped:
    # by then the work is done, so they must not turn into sheetq's "interrupted" (exit 143).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: None)
    server.run(sockets=[sock])
    if on_stop is not None:
        on_stop()
    if not server.started:
        raise StoreUnavailable("sheetq serve: the server did not start (see the lines above)")
