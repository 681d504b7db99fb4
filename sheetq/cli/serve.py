"""``sheetq serve``: the HTTP ingress for webhooks and forms (docs/design.md §15).

The web stack (Starlette, uvicorn, prometheus_client) is imported inside the command, so
that no other command pays for it at start-up.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sheetq.cli._output import warn
from sheetq.errors import UsageError


def serve(
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            metavar="HOST:PORT",
            help="Address to listen on (default: [ingress] listen, else 127.0.0.1:8080; "
            "port 0 picks a free one).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Receive webhooks and forms and enqueue them: POST /hooks/NAME for each
    [ingress.routes.NAME] of sheetq.toml, signatures checked (hmac-sha256, github, stripe).

    Answers 202 once the task is durable, 200 for a duplicate, 409 for a conflict, 401 for a
    bad signature, 400 for a body that is not a JSON object or a form, 413 over the size
    limit (none of these writes anything), 503 with Retry-After when the store cannot be
    reached. On Google, requests within [ingress] batch_window (default 1s) share one
    write. GET /healthz, GET /metrics (Prometheus). SIGTERM finishes the requests in flight
    and exits 0.

    Examples:

      sheetq serve

      sheetq serve --listen 0.0.0.0:8080
    """
    from sheetq.cli.app import state
    from sheetq.ingress.config import load_ingress, unconfigured_types
    from sheetq.ingress.server import bind, make_service
    from sheetq.ingress.server import serve as run

    settings = state.settings()
    ingress = load_ingress(settings, listen=listen)
    for line in unconfigured_types(ingress, settings):
        warn(f"serve: {line}")
    try:
        sock = bind(ingress.host, ingress.port)
    except OSError as exc:
        raise UsageError(
            f"sheetq serve: cannot listen on {ingress.host}:{ingress.port}: {exc.strerror}"
        ) from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    service = make_service(settings, ingress, clock=state.clock())
    routes = ", ".join(f"/hooks/{name}" for name in ingress.routes)
    warn(f"serve: listening on http://{shown}:{port} ({routes}); queue {settings.queue_sheet!r}")

    def stopped() -> None:
        stats = service.committer.stats
        warn(f"serve: stopped; {stats.writes} write(s), {stats.failed} failed")

    run(service, sock, on_stop=stopped)
