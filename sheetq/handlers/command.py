"""The ``command`` handler: a program gets the payload on stdin, answers by exit code.

Exit codes follow sysexits(3): 0 done, 75 EX_TEMPFAIL transient, 65 EX_DATAERR
permanent, 77 EX_NOPERM auth; anything else is transient with the tail of
stderr as the error. A last stdout line that is a JSON object with a
``status`` decides instead. Killed by the timeout: outcome unknown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from sheetq.handlers import ReconcileAnswer, groups
from sheetq.model import MAX_HANDLER_TEXT, ErrorClass, Status
from sheetq.redact import shorten, tail
from sheetq.retry import Outcome

EX_DATAERR = 65
EX_TEMPFAIL = 75
EX_NOPERM = 77
_STATUSES = {"done", "skipped", "retry", "failed"}


class _Ran:
    def __init__(self, code: int | None, stdout: str, stderr: str, error: str = "") -> None:
        self.code, self.stdout, self.stderr, self.error = code, stdout, stderr, error

    @property
    def last_line(self) -> str:
        lines = [line.strip() for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""


_GRACE = 1.0  # seconds to wait for the last output once the handler has exited
_KEEP = 256 * 1024  # bytes of each stream kept (the tail: the result and the error are there)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Linux: the handler gets SIGKILL if sheetq dies (even by SIGKILL), so a killed run never
    leaves a handler running while the next run recovers and retries its task."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _pump(stream: IO[bytes], sink: bytearray) -> None:
    """Read a handler's output until EOF, keeping the tail; closes the pipe when done (even
    when a child of the handler kept it open past the handler's exit)."""
    with stream:
        for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
            sink.extend(chunk)
            if len(sink) > 2 * _KEEP:
                del sink[:-_KEEP]


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.close()


def _decode(data: bytearray) -> str:
    return bytes(data[-_KEEP:]).decode("utf-8", "replace")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _run(
    argv: Sequence[str], stdin: str, env: Mapping[str, str], timeout: float, cwd: Path | None
) -> _Ran:
    """Run a handler in its own session; its output is read while it runs. The outcome is
    its own exit code: a background child it left holding stdout does not keep sheetq
    waiting. Killed (with its process group) at the timeout or if sheetq is interrupted. Its
    process group is recorded while it runs (``sheetq.handlers.groups``), so that a later
    run on this host can end what it left if sheetq is killed."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    except FileNotFoundError:
        if cwd is not None and not os.path.isdir(cwd):
            return _Ran(None, "", "", f"working folder not found: cwd {str(cwd)!r}")
        return _Ran(None, "", "", f"command not found: {argv[0]!r} (cwd {cwd})")
    except PermissionError:
        return _Ran(None, "", "", f"command not executable: {argv[0]!r}")
    except OSError as exc:
        return _Ran(None, "", "", f"cannot start {argv[0]!r}: {exc}")
    groups.spawned(proc.pid)
    try:
        return _collect(proc, stdin, timeout)
    finally:
        groups.finished(proc.pid)


def _collect(proc: subprocess.Popen[bytes], stdin: str, timeout: float) -> _Ran:
    """Feed the started handler its payload and read its output until it exits."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode("utf-8")), daemon=True),
        threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
    ]
    for thread in threads:
        thread.start()
    error = ""
    try:
        code: int | None = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        code, error = None, f"timed out after {timeout:g}s"
    except BaseException:  # interrupted: take the handler down with us
        _kill(proc)
        raise
    for thread in threads[1:]:
        thread.join(_GRACE)  # a child of the handler may hold the pipe: do not wait for it
    return _Ran(code, _decode(out), _decode(err), error)


def _json_verdict(line: str) -> Outcome | None:
    if not line.startswith("{"):
        return None
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("status") not in _STATUSES:
        return None
    status = Status(answer["status"])
    result = answer.get("result")
    result_text = (
        ""
        if result is None
        else (result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
    )
    error = str(answer.get("error") or "")
    after = answer.get("retry_after")
    retry_after = float(after) if isinstance(after, int | float) and after > 0 else None
    try:
        cls = ErrorClass(str(answer["error_class"])) if answer.get("error_class") else None
    except ValueError:
        cls = None
    if status is Status.DONE:
        return Outcome.done(result_text)
    if status is Status.SKIPPED:
        return Outcome.skipped(error, result_text)
    if status is Status.RETRY:
        return Outcome(
            Status.RETRY,
            cls or ErrorClass.TRANSIENT,
            error or "handler asked to retry",
            result_text,
            retry_after,
        )
    return Outcome(
        Status.FAILED, cls or ErrorClass.PERMANENT, error or "handler reported failure", result_text
    )


def run_command(
    argv: Sequence[str],
    payload_json: str,
    env: Mapping[str, str],
    *,
    timeout: float,
    cwd: Path | None,
) -> Outcome:
    """Run one task as a subprocess and classify its exit (see the module docstring)."""
    ran = _run(argv, payload_json, env, timeout, cwd)
    if ran.code is None and not ran.error.startswith("timed out"):
        return Outcome.failed(ran.error, ErrorClass.CONFIG)
    if ran.code is None:
        return Outcome.unknown(
            f"{ran.error}; killed. " + tail(ran.stderr, 300)
            if ran.stderr.strip()
            else f"{ran.error}; killed"
        )
    verdict = _json_verdict(ran.last_line)
    if verdict is not None:
        return verdict
    why = tail(ran.stderr, 400) or tail(ran.stdout, 200)
    code = ran.code
    if code == 0:
        return Outcome.done(shorten(ran.last_line, MAX_HANDLER_TEXT))
    if code == EX_TEMPFAIL:
        return Outcome.retry(f"exit {code} (EX_TEMPFAIL): {why}".rstrip(": "))
    if code == EX_DATAERR:
        return Outcome.failed(f"exit {code} (EX_DATAERR): {why}".rstrip(": "))
    if code == EX_NOPERM:
        return Outcome.failed(f"exit {code} (EX_NOPERM): {why}".rstrip(": "), ErrorClass.AUTH)
    if code < 0:
        return Outcome.retry(f"killed by signal {-code}: {why}".rstrip(": "))
    return Outcome.retry(f"exit {code}: {why}".rstrip(": "))


def reconcile_command(
    argv: Sequence[str],
    payload_json: str,
    env: Mapping[str, str],
    *,
    timeout: float,
    cwd: Path | None,
) -> ReconcileAnswer:
    """Exit 0: found (last stdout line → result); 1: not found; anything else: cannot tell."""
    ran = _run(argv, payload_json, env, timeout, cwd)
    if ran.code == 0:
        return ReconcileAnswer(True, shorten(ran.last_line, MAX_HANDLER_TEXT))
    if ran.code == 1:
        return ReconcileAnswer(False)
    why = ran.error or f"exit {ran.code}: {tail(ran.stderr, 300)}"
    return ReconcileAnswer(None, message=f"reconcile check could not tell ({why.strip()})")
