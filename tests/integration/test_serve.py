"""`sheetq serve` as a real process (docs/design.md §15): every answer, nothing written for a
refusal, secrets kept out of every output, group commit on Google, the store unreachable
and back, SIGTERM."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Book, write_config

ON_POSTGRES = True

SECRET = "whsec_" + "5f1c" * 8
GITHUB_SECRET = "gh-" + "a9" * 12
STRIPE_SECRET = "whsec_stripe_" + "0b" * 10
CONFIG = """
[ingress]
listen = "127.0.0.1:0"
max_body = "100KB"
batch_window = "{window}"

[types.lead]
key_fields = ["lead_id"]

[ingress.routes.tilda]
type = "lead"
signature = "hmac-sha256"
secret = "${{TILDA_SECRET}}"
signature_header = "X-Tilda-Signature"
signature_prefix = "sha256="
key_header = "X-Delivery-Id"

[ingress.routes.github]
type = "push"
signature = "github"
secret = "${{GITHUB_SECRET}}"

[ingress.routes.stripe]
type = "payment"
signature = "stripe"
secret = "${{STRIPE_SECRET}}"

[ingress.routes.form]
type = "form"
signature = "none"
"""


def _sig(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Server:
    """A running `sheetq serve`: its base URL, process and stderr (a file: a busy server
    never blocks on a pipe)."""

    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def post(self, route: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
        return httpx.post(
            f"{self.url}/hooks/{route}",
            content=body,
            headers={"content-type": "application/json", **(headers or {})},
            timeout=30,
        )

    def tilda(self, payload: dict[str, Any], delivery: str | None = None) -> Any:
        body = json.dumps(payload).encode()
        headers = {"X-Tilda-Signature": "sha256=" + _sig(SECRET, body)}
        if delivery:
            headers["X-Delivery-Id"] = delivery
        return self.post("tilda", body, headers)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return self.proc.returncode, out + self.log.read_text()


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Server]]:
    """``start(window="1s", extra="", **env)``: `sheetq serve` on a free port with CONFIG
    (and ``extra`` TOML after it)."""
    monkeypatch.setenv("TILDA_SECRET", SECRET)
    monkeypatch.setenv("GITHUB_SECRET", GITHUB_SECRET)
    monkeypatch.setenv("STRIPE_SECRET", STRIPE_SECRET)
    started: list[Server] = []

    def start(window: str = "1s", extra: str = "", **env: str) -> Server:
        write_config(CONFIG.format(window=window) + extra)
        log = tmp_path / f"serve{len(started)}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sheetq", "serve"],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, **env},
            )
        deadline = time.monotonic() + 20
        while True:
            found = re.search(r"listening on (http://\S+)", log.read_text())
            if found:
                break
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        server = Server(proc, found.group(1), log)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


def _written(book: Book) -> tuple[int, int]:
    return len(book.records()), len(book.log())


@pytest.mark.slow
def test_every_answer_and_nothing_written_for_a_refusal(
    book: Book, serve: Callable[..., Server]
) -> None:
    """202 after the write, 200 duplicate, 409 conflict; 401 (missing, wrong, replayed), 400
    (not an object, not JSON), 413 (body, payload), 404 — each refusal writes nothing and a
    bad signature logs one line without the secret or the body."""
    server = serve(window="0s")
    first = server.tilda({"lead_id": "L-1", "name": "Олена"}, delivery="D-1")
    assert first.status_code == 202, first.text
    assert first.json() == {"outcome": "enqueued", "task_id": first.json()["task_id"]}
    task_id = first.json()["task_id"]
    assert [r["task_id"] for r in book.records()] == [task_id]
    assert book.row_of(task_id)["idempotency_key"] == "lead:D-1"  # the delivery header
    again = server.tilda({"name": "Олена", "lead_id": "L-1"}, delivery="D-1")
    assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
    assert again.json()["task_id"] == task_id
    clash = server.tilda({"lead_id": "L-1", "name": "Other"}, delivery="D-1")
    assert clash.status_code == 409 and clash.json()["task_id"] == task_id

    before = _written(book)
    secret_body = b'{"lead_id": "L-SECRET-BODY-7"}'
    refusals = {
        "missing": server.post("tilda", secret_body),
        "wrong": server.post("tilda", secret_body, {"X-Tilda-Signature": "sha256=" + "0" * 64}),
        "other secret": server.post(
            "github", secret_body, {"X-Hub-Signature-256": "sha256=" + _sig(SECRET, secret_body)}
        ),
        "replayed": server.post(
            "stripe",
            secret_body,
            {
                "Stripe-Signature": f"t={int(time.time()) - 301},v1="
                + _sig(STRIPE_SECRET, f"{int(time.time()) - 301}.".encode() + secret_body)
            },
        ),
    }
    for why, answer in refusals.items():
        assert answer.status_code == 401, (why, answer.text)
    for body, code in (
        (b"[1, 2]", 400),
        (b'{"lead_id": ', 400),
        (b"\xff\xfe", 400),
        (b'{"a": "' + b"x" * 120_000 + b'"}', 413),  # over max_body
    ):
        answer = server.post("form", body)
        assert answer.status_code == code, (body[:20], answer.text)
    big = json.dumps({"a": "x" * 50_001}).encode()  # under max_body, over a cell
    assert server.post("form", big).status_code == 413
    url_form = {"content-type": "application/x-www-form-urlencoded"}
    for body, content_type in (
        (b"lead_id=X%FF", url_form["content-type"]),  # not UTF-8 once %-decoded
        (b"name=%CE%EB", url_form["content-type"] + "; charset=no-such-charset"),
    ):
        answer = server.post("form", body, {"content-type": content_type})
        assert answer.status_code == 400, (body, answer.text)
    assert server.post("nowhere", b"{}").status_code == 404
    assert _written(book) == before

    form = httpx.post(
        f"{server.url}/hooks/form",
        content=b"name=%D0%9E%D0%BB%D0%B5%D0%BD%D0%B0&tag=a&tag=b&empty=",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 202, form.text
    row = book.row_of(form.json()["task_id"])
    assert json.loads(row["payload_json"]) == {"name": "Олена", "tag": ["a", "b"], "empty": ""}
    cp1251 = httpx.post(  # a form in the charset its Content-Type declares
        f"{server.url}/hooks/form",
        content=b"name=%CE%EB%E5%ED%E0",
        headers={"content-type": "application/x-www-form-urlencoded; charset=windows-1251"},
    )
    assert cp1251.status_code == 202, cp1251.text
    row = book.row_of(cp1251.json()["task_id"])
    assert json.loads(row["payload_json"]) == {"name": "Олена"}
    push = json.dumps({"ref": "refs/heads/main"}).encode()
    hub = {"X-Hub-Signature-256": "sha256=" + _sig(GITHUB_SECRET, push), "X-GitHub-Delivery": "g1"}
    assert server.post("github", push, hub).status_code == 202
    assert server.post("github", push, hub).status_code == 200  # GitHub's redelivery
    now = int(time.time())
    event = json.dumps({"id": "evt_1", "type": "charge.succeeded"}).encode()
    stripe = {"Stripe-Signature": f"t={now},v1=" + _sig(STRIPE_SECRET, f"{now}.".encode() + event)}
    paid = server.post("stripe", event, stripe)
    assert paid.status_code == 202
    assert book.row_of(paid.json()["task_id"])["idempotency_key"] == "payment:evt_1"

    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'sheetq_ingress_requests_total{code="401",route="tilda"} 2.0' in metrics
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok", "last_write": "ok"}
    code, output = server.stop()
    assert code == 0, output
    refused = [line for line in output.splitlines() if "signature refused" in line]
    assert len(refused) == len(refusals)
    for text in (output, metrics):
        for secret in (SECRET, GITHUB_SECRET, STRIPE_SECRET, "L-SECRET-BODY-7"):
            assert secret not in text


@pytest.mark.slow
@pytest.mark.google
def test_a_burst_of_200_webhooks_on_google_is_a_few_writes(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """200 webhooks over 4 seconds, many at once: every one answered 202, each only once its
    task is in the sheet, within 20 writes (one per batch window), every task once."""
    from tests.conftest import make_google, run_cli

    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    server = serve(window="1s")
    sheets_emulator.reset_counts()
    late: list[str] = []

    def in_sheet(task_id: str) -> bool:
        return any(task_id in row for row in book.grid("Queue"))

    async def burst() -> list[Any]:
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(n: int) -> Any:
                await asyncio.sleep(n * 0.02)  # a campaign's burst: 200 over 4 seconds
                body = json.dumps({"lead_id": f"L-{n}"}).encode()
                answer = await client.post(
                    f"{server.url}/hooks/tilda",
                    content=body,
                    headers={"X-Tilda-Signature": "sha256=" + _sig(SECRET, body)},
                )
                if answer.status_code == 202 and not in_sheet(answer.json()["task_id"]):
                    late.append(answer.json()["task_id"])
                return answer

            return await asyncio.gather(*(one(n) for n in range(200)))

    answers = asyncio.run(burst())
    assert [a.status_code for a in answers] == [202] * 200
    assert late == []  # no answer before its write
    writes = sheets_emulator.count("spreadsheets.batchUpdate")
    assert 1 <= writes <= 20, writes
    ids = sorted(r["task_id"] for r in book.records())
    assert ids == sorted(a.json()["task_id"] for a in answers)
    assert server.stop()[0] == 0


@pytest.mark.slow
@pytest.mark.google
def test_store_unreachable_answers_503_then_recovers(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """Google answering 503 past SHEETQ_ENQUEUE_TIMEOUT: the webhook gets 503 with
    Retry-After and nothing is written; once Google is back the same delivery gets 202."""
    from tests.conftest import make_google, run_cli

    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    server = serve(window="0.2s", SHEETQ_ENQUEUE_TIMEOUT="2s")
    sheets_emulator.fail_next(503, times=10_000)
    down = server.tilda({"lead_id": "L-1"})
    assert down.status_code == 503 and int(down.headers["Retry-After"]) > 0
    assert "error" in down.json()
    health = httpx.get(f"{server.url}/healthz")
    assert (health.status_code, health.json()["status"]) == (503, "unavailable")
    sheets_emulator.clear_faults()
    assert book.records() == []
    back = server.tilda({"lead_id": "L-1"})
    assert back.status_code == 202, back.text
    assert [r["task_id"] for r in book.records()] == [back.json()["task_id"]]
    assert httpx.get(f"{server.url}/healthz").status_code == 200
    assert server.stop()[0] == 0


@pytest.mark.slow
@pytest.mark.google
def test_sigterm_answers_the_requests_in_flight_and_exits_0(
    sheets_emulator: Any, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """SIGTERM while requests wait in a 4-second batch window: they are written and
    answered 202, then serve exits 0."""
    from tests.conftest import make_google, run_cli

    book = make_google(sheets_emulator, monkeypatch)
    assert run_cli(["init"]).code == 0
    server = serve(window="4s")
    answers: list[Any] = []
    threads = [
        threading.Thread(target=lambda n=n: answers.append(server.tilda({"lead_id": f"L-{n}"})))
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.5)  # the three reach serve (a loaded machine is slow) and wait in the window
    server.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(30)
    code, output = server.stop()
    assert code == 0, output
    assert [a.status_code for a in answers] == [202] * 3
    assert len(book.records()) == 3


def test_bad_configuration_exits_2_without_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`none` off loopback, a missing secret variable: exit 2, one line, no secret."""
    from tests.conftest import run_cli

    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'book.db'}")
    monkeypatch.setenv("TILDA_SECRET", SECRET)
    write_config(
        '[ingress.routes.a]\ntype = "lead"\nsignature = "hmac-sha256"\n'
        'secret = "${TILDA_SECRET}"\n[ingress.routes.b]\ntype = "job"\nsignature = "none"\n'
    )
    r = run_cli(["serve", "--listen", "0.0.0.0:0"])
    assert r.code == 2 and "loopback" in r.stderr and SECRET not in r.stderr + r.stdout
    write_config('[ingress.routes.a]\ntype = "lead"\nsignature = "github"\nsecret = "${NOPE}"\n')
    r = run_cli(["serve"])
    assert r.code == 2 and "NOPE is not set" in r.stderr


@pytest.mark.slow
def test_postgres_unreachable_answers_503_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """A database nobody answers for: 503 with Retry-After, /healthz 503, no password in
    any output."""
    monkeypatch.delenv("SHEETQ_SPREADSHEET", raising=False)
    monkeypatch.setenv("SHEETQ_DATABASE_URL", "postgresql://sheetq:pa55word-x@127.0.0.1:9/jobs")
    server = serve(window="0s")
    down = server.tilda({"lead_id": "L-1"})
    assert down.status_code == 503 and down.headers["Retry-After"] == "30"
    assert httpx.get(f"{server.url}/healthz").status_code == 503
    metrics = httpx.get(f"{server.url}/metrics")
    assert metrics.status_code == 200
    code, output = server.stop()
    assert code == 0
    assert "pa55word-x" not in output + metrics.text + down.text


def test_doctor_checks_the_ingress_without_showing_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sheetq doctor` loads [ingress] as serve would: its routes, or the variable missing."""
    from tests.conftest import run_cli

    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'book.db'}")
    assert run_cli(["init"]).code == 0
    route = '[ingress.routes.tilda]\nsignature = "hmac-sha256"\nsecret = "${TILDA_SECRET}"\n'
    lead = '[types.lead]\ncommand = "true"\n'
    write_config(lead + route + 'type = "lead"\n')
    missing = run_cli(["doctor", "--json"])
    assert missing.code == 1
    (line,) = [c for c in missing.json()["checks"] if c["check"] == "ingress"]
    assert not line["ok"] and "TILDA_SECRET is not set" in line["detail"]
    monkeypatch.setenv("TILDA_SECRET", SECRET)
    good = run_cli(["doctor", "--json"])
    (line,) = [c for c in good.json()["checks"] if c["check"] == "ingress"]
    assert line["ok"] and "/hooks/tilda → lead (hmac-sha256)" in line["detail"]
    assert SECRET not in good.stdout + good.stderr
    write_config(lead + route + 'type = "laed"\n')  # a typo: its tasks would never run
    typo = run_cli(["doctor", "--json"])
    (line,) = [c for c in typo.json()["checks"] if c["check"] == "ingress"]
    assert not line["ok"] and "'laed': no [types.laed]" in line["detail"]
    assert "did you mean 'lead'?" in line["detail"]


@pytest.mark.slow
def test_metrics_without_connectors_warn_of_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """/metrics on a workbook whose configuration has no [connectors.NAME]: the counts, and
    no warning in the log (there is no Connectors worksheet to miss)."""
    from tests.conftest import run_cli

    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'book.db'}")
    write_config(CONFIG.format(window="0s"))
    assert run_cli(["init"]).code == 0
    server = serve(window="0s")
    assert server.post("form", b'{"name": "a"}').status_code == 202
    metrics = httpx.get(f"{server.url}/metrics").text
    code, output = server.stop()
    assert code == 0
    assert 'sheetq_tasks{status="pending",type="form"} 1.0' in metrics, output
    assert "WARNING" not in output and "Connectors" not in output, output
    assert "[ingress.routes.github].type 'push': no [types.push]" in output  # said at start


def test_metrics_show_the_queue_and_its_connectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[..., Server]
) -> None:
    """/metrics: tasks by status and type, the oldest waiting task, each connector's state."""
    from tests.conftest import run_cli

    monkeypatch.setenv("SHEETQ_SPREADSHEET", f"local:{tmp_path / 'book.db'}")
    extra = '[connectors.crm]\nrate_limit = "30/min"\n[types.form]\nconnector = "crm"\n'
    write_config(CONFIG.format(window="0s") + extra)
    assert run_cli(["init"]).code == 0  # the Connectors worksheet
    server = serve(window="0s", extra=extra)
    assert server.post("form", b'{"name": "a"}').status_code == 202
    metrics = httpx.get(f"{server.url}/metrics").text
    code, output = server.stop()
    assert code == 0
    assert 'sheetq_tasks{status="pending",type="form"} 1.0' in metrics, output
    assert "sheetq_oldest_waiting_seconds" in metrics
    assert 'sheetq_connector_state{connector="crm",state="closed"} 1.0' in metrics
    assert 'sheetq_connector_state{connector="crm",state="open"} 0.0' in metrics
    assert 'sheetq_connector_waiting{connector="crm"} 1.0' in metrics
