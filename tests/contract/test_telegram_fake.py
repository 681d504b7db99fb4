"""Contract tests for tests/fakes/telegram_fake.py, driven by python-telegram-bot like sheetq is."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from telegram import Bot, LinkPreviewOptions, Message
from telegram import error as tg
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

try:
    from tests.fakes.telegram_fake import FORUM_CHAT_ID, PRIVATE_CHAT_ID, FakeBotAPI
except ModuleNotFoundError:  # plain `pytest` without the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.fakes.telegram_fake import FORUM_CHAT_ID, PRIVATE_CHAT_ID, FakeBotAPI

HTML = object()  # sentinel: default parse mode


@pytest.fixture
def fake() -> Any:
    with FakeBotAPI() as server:
        yield server
    assert server.server_errors == []


@pytest.fixture(autouse=True)
def _ptb_timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest runs with filterwarnings=error; without this opt-in PTB's RetryAfter constructor
    # raises PTBDeprecationWarning instead of RetryAfter (see the dedicated test below).
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


def _bot(
    root: str, token: str, read_timeout: float, bot_base: str | None = None
) -> tuple[HTTPXRequest, Bot]:
    req = HTTPXRequest(
        connect_timeout=2.0, read_timeout=read_timeout, httpx_kwargs={"trust_env": False}
    )
    bot = Bot(
        token,
        base_url=bot_base or f"{root}/bot",
        base_file_url=f"{root}/file/bot",
        request=req,
        get_updates_request=req,
    )
    return req, bot


def send(
    fake: FakeBotAPI,
    text: str = "2 rows failed",
    *,
    chat_id: int | str = FORUM_CHAT_ID,
    parse_mode: Any = HTML,
    token: str | None = None,
    bot_base: str | None = None,
    read_timeout: float = 5.0,
    **kwargs: Any,
) -> Message:
    """Send one message exactly as the product does (own HTTPXRequest, no getMe)."""

    async def main() -> Message:
        req, bot = _bot(fake.base_url, token or fake.token, read_timeout, bot_base)
        async with req:
            return await bot.send_message(
                chat_id=chat_id,
                text=text,
                parse_mode="HTML" if parse_mode is HTML else parse_mode,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                **kwargs,
            )

    return asyncio.run(main())


def call(fake: FakeBotAPI, name: str, **kwargs: Any) -> Any:
    """Run another Bot coroutine method (get_me, get_chat, do_api_request) against the fake."""

    async def main() -> Any:
        req, bot = _bot(fake.base_url, fake.token, 5.0)
        async with req:
            return await getattr(bot, name)(**kwargs)

    return asyncio.run(main())


# ------------------------------------------------------------------ success path


def test_send_message_wire_format_and_result(fake: FakeBotAPI) -> None:
    """One form-encoded sendMessage (no getMe) yields a Message and a recorded delivery."""
    msg = send(fake, "<b>2 rows</b> failed in <code>exports</code>")
    assert [r["method"] for r in fake.requests] == ["sendmessage"]
    req = fake.requests[0]
    assert req["content_type"] == "application/x-www-form-urlencoded"
    assert req["status"] == 200
    assert req["params"]["chat_id"] == str(FORUM_CHAT_ID)
    assert req["params"]["parse_mode"] == "HTML"
    assert json.loads(req["params"]["link_preview_options"]) == {"is_disabled": True}
    assert msg.message_id == fake.messages[0]["message_id"] == 1
    assert msg.chat.id == FORUM_CHAT_ID and msg.chat.title == "Ops"
    assert msg.from_user is not None and msg.from_user.is_bot
    assert msg.text == fake.messages[0]["plain_text"] == "2 rows failed in exports"
    assert [str(e.type) for e in msg.entities] == ["bold", "code"]
    assert msg.link_preview_options is not None and msg.link_preview_options.is_disabled


def test_message_thread_id_is_recorded(fake: FakeBotAPI) -> None:
    """message_thread_id reaches the fake, is recorded and echoed as a topic message."""
    msg = send(fake, message_thread_id=42)
    assert fake.messages[0]["message_thread_id"] == "42"
    assert fake.requests[0]["params"]["message_thread_id"] == "42"
    assert msg.message_thread_id == 42 and msg.is_topic_message


def test_general_topic_thread_id_is_rejected(fake: FakeBotAPI) -> None:
    """message_thread_id=1 (General) in a forum is 'message thread not found', as in Client.cpp."""
    with pytest.raises(tg.BadRequest, match="Message thread not found"):
        send(fake, message_thread_id=1)
    assert fake.messages == []


def test_private_chat_and_sequential_message_ids(fake: FakeBotAPI) -> None:
    """Known private chats accept messages and message ids increase."""
    first = send(fake, chat_id=PRIVATE_CHAT_ID)
    second = send(fake, chat_id=PRIVATE_CHAT_ID)
    assert first.chat.type == "private" and second.message_id == first.message_id + 1


def test_get_me_and_get_chat(fake: FakeBotAPI) -> None:
    """getMe returns the bot; getChat knows configured chats and rejects unknown ones."""
    me = call(fake, "get_me")
    assert me.is_bot and me.id == 123456 and me.username
    chat = call(fake, "get_chat", chat_id=FORUM_CHAT_ID)
    assert chat.title == "Ops" and chat.is_forum
    with pytest.raises(tg.BadRequest, match="Chat not found"):
        call(fake, "get_chat", chat_id=-100999)
    assert [r["method"] for r in fake.requests] == ["getme", "getchat", "getchat"]


def test_concurrent_sends_are_thread_safe(fake: FakeBotAPI) -> None:
    """Thirty parallel sends get thirty distinct message ids and thirty recorded messages."""

    async def main() -> list[Message]:
        req, bot = _bot(fake.base_url, fake.token, 5.0)
        async with req:
            return await asyncio.gather(
                *(bot.send_message(chat_id=FORUM_CHAT_ID, text=f"n{i}") for i in range(30))
            )

    ids = {m.message_id for m in asyncio.run(main())}
    assert len(ids) == 30 == len(fake.messages) == len(fake.requests)


# ------------------------------------------------------------------ injected faults


def test_retry_after_maps_to_retry_after(fake: FakeBotAPI) -> None:
    """429 with parameters.retry_after raises RetryAfter with the delay; the fault is used once."""
    fake.retry_after_next(7)
    with pytest.raises(tg.RetryAfter) as info:
        send(fake)
    assert info.value.retry_after == dt.timedelta(seconds=7)
    assert fake.requests[0]["status"] == 429 and fake.messages == []
    send(fake)
    assert len(fake.messages) == 1


def test_retry_after_without_timedelta_opt_in_is_a_warning_under_werror(
    fake: FakeBotAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PTB_TIMEDELTA, warnings-as-errors turn RetryAfter into PTBDeprecationWarning."""
    monkeypatch.delenv("PTB_TIMEDELTA")
    fake.retry_after_next(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PTBDeprecationWarning):
            send(fake)


def test_chat_migrated_maps_to_chat_migrated(fake: FakeBotAPI) -> None:
    """Migration raises ChatMigrated(new_chat_id); the new chat works, the old id stays migrated."""
    fake.migrate_next(-1009998887776)
    with pytest.raises(tg.ChatMigrated) as info:
        send(fake)
    assert info.value.new_chat_id == -1009998887776
    assert send(fake, chat_id=info.value.new_chat_id).chat.id == -1009998887776
    with pytest.raises(tg.ChatMigrated):
        send(fake)
    assert [m["chat_id"] for m in fake.messages] == ["-1009998887776"]


def test_blocked_maps_to_forbidden(fake: FakeBotAPI) -> None:
    """403 'bot was blocked by the user' raises Forbidden with the server's text."""
    fake.block_next()
    with pytest.raises(tg.Forbidden, match="Forbidden: bot was blocked by the user"):
        send(fake, chat_id=PRIVATE_CHAT_ID)


def test_unknown_token_maps_to_invalid_token(fake: FakeBotAPI) -> None:
    """A token the fake does not know gets 401 Unauthorized, i.e. InvalidToken."""
    with pytest.raises(tg.InvalidToken, match="Unauthorized"):
        send(fake, token="999999:WRONG-token_abcdefghijklmnopqrstuvwxyz0")
    assert fake.requests[0]["status"] == 401 and fake.messages == []


def test_bad_paths_map_to_invalid_token(fake: FakeBotAPI) -> None:
    """A base url ending in '/bot/' and unknown methods give 404s, i.e. InvalidToken."""
    with pytest.raises(tg.InvalidToken, match=r"^Not Found$"):
        send(fake, bot_base=f"{fake.base_url}/bot/")
    with pytest.raises(tg.InvalidToken, match="endpoint 'noSuchMethod' does not exist"):
        call(fake, "do_api_request", endpoint="noSuchMethod")
    assert [r["status"] for r in fake.requests] == [404, 404]


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (502, r"Bad Gateway \(502\)\. Parsing the server response"),
        (500, "Internal Server Error"),
        (503, "503"),
    ],
)
def test_server_errors_map_to_network_error(fake: FakeBotAPI, status: int, text: str) -> None:
    """5xx answers (HTML for 502/503, JSON for 500) raise a plain NetworkError."""
    fake.server_error_next(status)
    with pytest.raises(tg.NetworkError, match=text) as info:
        send(fake)
    assert type(info.value) is tg.NetworkError
    assert fake.messages == []


def test_generic_failures_and_fifo_order(fake: FakeBotAPI) -> None:
    """fail_next is queued per method, consumed in order; 429 without parameters is NetworkError."""
    fake.fail_next(429, "Too Many Requests: retry after 5")
    fake.fail_next(400, "Bad Request: not enough rights to send text messages to the chat")
    fake.fail_next(401, "Unauthorized", method="getMe")
    with pytest.raises(tg.NetworkError, match="retry after 5") as info:
        send(fake)
    assert type(info.value) is tg.NetworkError
    with pytest.raises(tg.BadRequest, match="Not enough rights"):
        send(fake)
    send(fake)
    assert fake.pending_faults() == ["reply:401:getme"]
    with pytest.raises(tg.InvalidToken):
        call(fake, "get_me")
    assert fake.pending_faults() == []


def test_times_repeats_a_fault(fake: FakeBotAPI) -> None:
    """times=N makes the same fault hit the next N requests, then traffic flows again."""
    fake.retry_after_next(1, times=2)
    for _ in range(2):
        with pytest.raises(tg.RetryAfter):
            send(fake)
    send(fake)
    assert [r["status"] for r in fake.requests] == [429, 429, 200]


def test_dropped_connection_maps_to_network_error(fake: FakeBotAPI) -> None:
    """A connection closed without an answer raises NetworkError (not TimedOut); nothing sent."""
    fake.drop_next()
    with pytest.raises(tg.NetworkError, match="httpx") as info:
        send(fake)
    assert not isinstance(info.value, tg.TimedOut)
    assert fake.requests[0]["status"] == 0 and fake.messages == []
    send(fake)


def test_down_then_up(fake: FakeBotAPI) -> None:
    """While down every connection is closed unanswered (NetworkError); up() restores service."""
    fake.down()
    with pytest.raises(tg.NetworkError, match="httpx"):
        send(fake)
    assert fake.refused_connections >= 1 and fake.requests == []
    fake.up()
    assert send(fake).message_id == 1


def test_slow_reply_maps_to_timed_out_but_is_delivered(fake: FakeBotAPI) -> None:
    """A reply slower than read_timeout raises TimedOut (ReadTimeout) though it was delivered."""
    fake.slow_next(1.0)
    with pytest.raises(tg.TimedOut) as info:
        send(fake, read_timeout=0.3)
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    assert len(fake.messages) == 1  # delivery unknown to the client, yet it happened


def test_forced_parse_error_spares_plain_text(fake: FakeBotAPI) -> None:
    """force_parse_error_next hits the next HTML send only; a plain-text fallback goes through."""
    fake.force_parse_error_next()
    send(fake, "plain <fallback>", parse_mode=None)
    with pytest.raises(tg.BadRequest, match="Can't parse entities"):
        send(fake, "<b>valid</b>")
    assert fake.messages[0]["plain_text"] == "plain <fallback>"
    assert fake.pending_faults() == []


# ------------------------------------------------------------------ HTML and length checks


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("<x>bad</x>", 'unsupported start tag "x" at byte offset 0'),
        ("line<br>break", 'unsupported start tag "br" at byte offset 4'),
        ("1 < 2", 'unsupported start tag "" at byte offset 2'),
        ("<b>unclosed", 'can\'t find end tag corresponding to start tag "b"'),
        ("stray</b>", "unexpected end tag at byte offset 5"),
        ("<b><i>x</b></i>", 'unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("<span>x</span>", 'tag "span" must have class "tg-spoiler" at byte offset 0'),
        ("<b", "unclosed start tag at byte offset 0"),
        ("<a href=x", "unclosed start tag at byte offset 0"),
        ('<a href="https://x.y/">é</a><p>', 'unsupported start tag "p" at byte offset 29'),
    ],
)
def test_bad_html_is_rejected(fake: FakeBotAPI, text: str, detail: str) -> None:
    """Unknown or unbalanced HTML raises BadRequest "can't parse entities" with TDLib's detail."""
    with pytest.raises(tg.BadRequest) as info:
        send(fake, text)
    assert info.value.message == f"Can't parse entities: {detail}"
    assert fake.messages == []


def test_valid_escaped_html_is_accepted(fake: FakeBotAPI) -> None:
    """Every allowed tag plus html.escape-d values are accepted and decoded to plain text."""
    value = "a<b> & \"q\" 'x' > 1"
    text = (
        f"<b>B</b><strong>S</strong><i>I</i><em>E</em><u>U</u><ins>N</ins><s>S</s>"
        f"<strike>K</strike><del>D</del><tg-spoiler>P</tg-spoiler>"
        f'<span class="tg-spoiler">Q</span><a href="https://ex.am/ple?a=1&amp;b=2">L</a>'
        f'<code>C</code><pre><code class="language-python">x = 1</code></pre>'
        f"<blockquote expandable>Z</blockquote>"
        f'<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>'
        f" {html.escape(value)} &#65;&#x42; &nbsp;"
    )
    msg = send(fake, text)
    expected = f"BSIEUNSKDPQLCx = 1Z👍 {value} AB &nbsp;"
    assert msg.text == fake.messages[0]["plain_text"] == expected
    types = {str(e.type) for e in msg.entities}
    assert {"bold", "italic", "underline", "strikethrough", "spoiler", "text_link"} <= types
    assert {"code", "pre", "expandable_blockquote", "custom_emoji"} <= types
    link = next(e for e in msg.entities if e.type == "text_link")
    assert link.url == "https://ex.am/ple?a=1&b=2"


def test_length_is_counted_after_markup(fake: FakeBotAPI) -> None:
    """4096 visible code points pass however long the markup is; 4097 is 'message is too long'."""
    body = "&amp;" * 2000 + "x" * 2095
    send(fake, f"<b>{body}</b>\n")  # raw 12104 chars, visible 4095 (+ trimmed newline)
    send(fake, "👍" * 4096)  # 8192 UTF-16 units, 16384 bytes: code points are what counts
    send(fake, f"<i>{body}y</i>")  # exactly 4096
    with pytest.raises(tg.BadRequest, match=r"^Message is too long$"):
        send(fake, f"<i>{body}yz</i>")
    assert [len(m["plain_text"]) for m in fake.messages] == [4095, 4096, 4096]


def test_raw_text_byte_limit_and_whitespace_only(fake: FakeBotAPI) -> None:
    """Raw text over 32768 bytes is 'text is too long'; markup-only text must be non-empty."""
    with pytest.raises(tg.BadRequest, match=r"^Text is too long$"):
        send(fake, "<b></b>" * 4700)
    with pytest.raises(tg.BadRequest, match=r"^Text must be non-empty$"):
        send(fake, "<b> </b>\n")


def test_validation_order_follows_the_real_server(fake: FakeBotAPI) -> None:
    """Text checks come before chat checks, as in Client.cpp (empty text, markup, then chat)."""
    with pytest.raises(tg.BadRequest, match=r"^Message text is empty$"):
        send(fake, "", chat_id="")
    with pytest.raises(tg.BadRequest, match=r"^Unsupported parse_mode$"):
        send(fake, chat_id=-42, parse_mode="XML")
    with pytest.raises(tg.BadRequest, match="Can't parse entities"):
        send(fake, "<x>", chat_id=-42)
    with pytest.raises(tg.BadRequest, match=r"^Chat_id is empty$"):
        send(fake, chat_id="")
    with pytest.raises(tg.BadRequest, match=r"^Chat not found$"):
        send(fake, chat_id=-42)
    assert fake.messages == []


def test_markdown_v2_reserved_character(fake: FakeBotAPI) -> None:
    """MarkdownV2 with an unescaped '.' is rejected like on Telegram; escaped text passes."""
    with pytest.raises(tg.BadRequest, match=r"character '\.' is reserved and must be escaped"):
        send(fake, "*2 rows* failed.", parse_mode="MarkdownV2")
    msg = send(fake, "*2 rows* failed\\.", parse_mode="MarkdownV2")
    assert msg.text == "2 rows failed." and msg.entities[0].type == "bold"


# ------------------------------------------------------------------ parsing and hygiene


def test_json_and_query_string_requests(fake: FakeBotAPI) -> None:
    """JSON bodies and GET query strings are accepted; non-string JSON values become JSON text."""
    url = f"{fake.base_url}/bot{fake.token}"
    with httpx.Client(trust_env=False) as client:
        body = {
            "chat_id": FORUM_CHAT_ID,
            "text": "j",
            "link_preview_options": {"is_disabled": True},
        }
        assert client.post(f"{url}/sendMessage", json=body).json()["ok"] is True
        got = client.get(f"{url}/SENDMESSAGE", params={"chat_id": PRIVATE_CHAT_ID, "text": "q"})
        assert got.json()["result"]["chat"]["id"] == PRIVATE_CHAT_ID
        bad = client.post(
            f"{url}/sendMessage", data={"chat_id": 1, "text": "t", "link_preview_options": "{nope"}
        )
        assert bad.status_code == 400
        assert bad.json()["description"] == (
            "Bad Request: can't parse link preview options JSON object"
        )
        wrong = client.get(f"{fake.base_url}/nothing")
        assert wrong.status_code == 404 and wrong.json()["description"] == "Not Found"
        unknown = client.post(f"{url}/noSuchMethod")
        assert unknown.json() == {
            "ok": False,
            "error_code": 404,
            "description": "Not Found: method not found",
        }
    first, second = fake.requests[:2]
    assert first["content_type"] == "application/json"
    assert first["params"]["chat_id"] == str(FORUM_CHAT_ID)
    assert json.loads(first["params"]["link_preview_options"]) == {"is_disabled": True}
    assert second["http_method"] == "GET" and second["method"] == "sendmessage"


def test_token_never_logged_or_stored(fake: FakeBotAPI, capfd: pytest.CaptureFixture[str]) -> None:
    """The fake prints nothing (no request lines with the token) and never stores the token."""
    send(fake)
    fake.drop_next()
    with pytest.raises(tg.NetworkError):
        send(fake)
    with pytest.raises(tg.InvalidToken):
        send(fake, bot_base=f"{fake.base_url}/bot/")
    out, err = capfd.readouterr()
    assert out == err == ""
    assert fake.token not in repr(fake.requests) + repr(fake.messages)


def test_stop_is_quick_with_a_sleeping_handler() -> None:
    """stop() wakes slow handlers and closes every connection (no leaked threads or sockets)."""
    before = threading.active_count()
    fake = FakeBotAPI().start()
    fake.slow_next(30)
    with pytest.raises(tg.TimedOut):
        send(fake, read_timeout=0.2)
    fake.stop()
    fake.stop()  # idempotent
    assert threading.active_count() <= before
    with pytest.raises(RuntimeError):
        _ = fake.base_url
