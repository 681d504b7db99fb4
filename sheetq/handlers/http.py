"""The ``http`` handler: POST the payload as JSON through httpx.

Headers ``Idempotency-Key`` (the task's key, as in the IETF
draft-ietf-httpapi-idempotency-key-header) and ``X-Sheetq-Task-Id``.
2xx done (body → result); 408, 425, 429, 5xx and failures before the request
was sent: transient / rate_limited, ``Retry-After`` honoured (RFC 9110 §10.2.3,
seconds or HTTP-date); 401/403 auth; other 4xx permanent; a timeout or a
dropped connection after the request was sent: outcome unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from sheetq.model import MAX_HANDLER_TEXT, ErrorClass, Task
from sheetq.redact import shorten
from sheetq.retry import Outcome

_RETRYABLE = {408, 425, 429}


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP-date); None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def post_task(
    url: str, method: str, headers: dict[str, str], task: Task, payload_json: str, *, timeout: float
) -> Outcome:
    """Send one task and classify the answer (see the module docstring)."""
    send_headers = {
        "Content-Type": "application/json; charset=utf-8",
        "Idempotency-Key": task.idempotency_key,
        "X-Sheetq-Task-Id": task.task_id,
        "X-Sheetq-Attempt": str(task.attempt),
        "User-Agent": "sheetq",
        **headers,
    }
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = client.request(
                method, url, content=payload_json.encode("utf-8"), headers=send_headers
            )
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        return Outcome.retry(f"could not connect to {httpx.URL(url).host}: {exc}")
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return Outcome.failed(f"bad handler URL: {exc}", ErrorClass.CONFIG)
    except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
        return Outcome.unknown(
            f"timed out after the request was sent ({type(exc).__name__}); "
            "the action may have happened"
        )
    except httpx.TransportError as exc:
        return Outcome.unknown(f"connection lost after the request was sent: {exc}")
    code = response.status_code
    body = response.text
    if 200 <= code < 300:
        return Outcome.done(shorten(body, MAX_HANDLER_TEXT))
    reason = f"HTTP {code} {response.reason_phrase}: {shorten(body, 300)}".rstrip(": ")
    if code == 429:
        return Outcome.retry(
            reason,
            ErrorClass.RATE_LIMITED,
            retry_after_seconds(response.headers.get("Retry-After")),
        )
    if code in _RETRYABLE or code >= 500:
        return Outcome.retry(
            reason, ErrorClass.TRANSIENT, retry_after_seconds(response.headers.get("Retry-After"))
        )
    if code in (401, 403):
        return Outcome.failed(reason, ErrorClass.AUTH)
    return Outcome.failed(reason, ErrorClass.PERMANENT)
