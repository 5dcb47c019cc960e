"""The bridge's list and watch loop: paged lists, resume from the last resourceVersion, relist
on 410 Gone (also mid-pagination), garbage on the stream, back off.

A scripted list call stands in for the API server (the real one is in tests/e2e/); it answers
the list and watch requests the official client makes, in the API server's wire format.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from minruntime.cluster.api import (
    LIST_END,
    LIST_PAGE,
    LIST_RESTART,
    LIST_START,
    Inbox,
    Notification,
    Source,
    Watcher,
    list_all,
)
from minruntime.cluster.mirror import Kind
from tests.unit.fake_stop import FakeStop


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}}


class Response:
    """What urllib3 hands the client with _preload_content=False."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.data = body
        self.status = status

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield self.data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class ScriptedServer:
    """Answers each call with the next scripted reply; records the arguments."""

    def __init__(self, stop: threading.Event, replies: list[Any]) -> None:
        self.stop = stop
        self.replies = replies
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Response:
        self.calls.append(kwargs)
        if not self.replies:
            self.stop.set()
            return Response(b"")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, Response):
            return reply
        return Response(reply)


def listing(rv: str, *items: dict[str, Any], more: str | None = None) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if more:
        meta["continue"] = more
    return json.dumps({"metadata": meta, "items": list(items)}).encode()


def events(*pairs: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in pairs)


def gone() -> bytes:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    return events(("ERROR", status))


def run(replies: list[Any]) -> tuple[list[Notification], ScriptedServer]:
    stop = threading.Event()
    server = ScriptedServer(stop, replies)
    inbox = Inbox(1000)
    Watcher(Source(Kind.NODE, server), inbox, stop, watch_seconds=5, backoff_max=0.01).run()
    return inbox.take(0, 10_000), server


def shown(notes: list[Notification]) -> list[tuple[str, list[str]]]:
    return [(n.action, [o["metadata"]["name"] for o in n.objects]) for n in notes]


def listed(*names: str) -> list[tuple[str, list[str]]]:
    return [(LIST_START, []), (LIST_PAGE, list(names)), (LIST_END, [])]


def test_it_resumes_from_the_last_version_and_relists_on_410_gone() -> None:
    notes, server = run(
        [
            listing("5", obj("a", "4")),
            events(("ADDED", obj("b", "6")), ("BOOKMARK", {"metadata": {"resourceVersion": "7"}})),
            gone(),
            listing("9", obj("b", "6")),
        ]
    )
    assert shown(notes) == [*listed("a"), ("ADDED", ["b"]), *listed("b")]
    versions = [call.get("resource_version") for call in server.calls if call.get("watch")]
    assert versions == ["5", "7", "9"]  # after the watch's end, from its last bookmark


def test_lists_are_paged_and_each_page_is_handed_over_as_it_comes() -> None:
    notes, server = run(
        [
            listing("5", obj("a", "4"), more="token-1"),
            listing("5", obj("b", "3"), more="token-2"),
            listing("5", obj("c", "5")),
        ]
    )
    assert shown(notes) == [
        (LIST_START, []),
        (LIST_PAGE, ["a"]),
        (LIST_PAGE, ["b"]),
        (LIST_PAGE, ["c"]),
        (LIST_END, []),
    ]
    lists = [call for call in server.calls if not call.get("watch")]
    assert [call.get("_continue") for call in lists] == [None, "token-1", "token-2"]
    assert {call["limit"] for call in lists} == {500}
    watch = next(call for call in server.calls if call.get("watch"))
    assert watch["resource_version"] == "5"


def test_an_expired_continue_token_starts_the_listing_over() -> None:
    from kubernetes.client.exceptions import ApiException

    notes, server = run(
        [
            listing("5", obj("a", "4"), more="token-1"),
            ApiException(status=410, reason="Expired"),
            listing("8", obj("a", "4"), more="token-2"),
            listing("8", obj("b", "7")),
        ]
    )
    assert shown(notes) == [
        (LIST_START, []),
        (LIST_PAGE, ["a"]),
        (LIST_RESTART, []),
        (LIST_PAGE, ["a"]),
        (LIST_PAGE, ["b"]),
        (LIST_END, []),
    ]
    assert [call.get("_continue") for call in server.calls[:4]] == [
        None,
        "token-1",
        None,
        "token-2",
    ]


def test_list_all_pages_through_everything() -> None:
    stop = threading.Event()
    server = ScriptedServer(
        stop, [listing("5", obj("a", "1"), more="t"), listing("6", obj("b", "2"))]
    )
    objects, version = list_all(Source(Kind.NODE, server), page_size=1)
    assert [o["metadata"]["name"] for o in objects] == ["a", "b"]
    assert version == "6"


def test_an_unreachable_api_server_is_retried_with_one_status_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    notes, server = run(
        [
            ConnectionError("refused"),
            ConnectionError("refused"),
            ConnectionError("refused"),
            listing("3"),
        ]
    )
    assert [n.action for n in notes] == [LIST_START, LIST_PAGE, LIST_END]
    assert len(server.calls) >= 4
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1  # one line per outage, not one per attempt


def test_a_watch_refused_with_http_410_relists_too() -> None:
    notes, _ = run([listing("5"), Response(b"{}", status=410), listing("8", obj("c", "8"))])
    assert [n.action for n in notes] == [LIST_START, LIST_PAGE, LIST_END] * 2


def test_garbage_or_a_line_cut_short_is_logged_and_the_watch_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    good = events(("ADDED", obj("b", "6")))
    notes, server = run(
        [
            listing("5"),
            good + b'{"type": "MODIFIED", "object": {"metad',  # the connection dropped
            b"\x00\xffnot json at all\n",
            events(("MODIFIED", obj("c", "9"))),
        ]
    )
    assert shown(notes)[3:] == [("ADDED", ["b"]), ("MODIFIED", ["c"])]
    versions = [call.get("resource_version") for call in server.calls if call.get("watch")]
    assert versions == ["5", "6", "6", "9"]  # resumed after the last good event each time
    assert any("not JSON" in r.getMessage() for r in caplog.records)


def test_the_inbox_bounds_the_objects_it_holds() -> None:
    inbox = Inbox(3)
    stop = threading.Event()
    page = Notification(Kind.POD, LIST_PAGE, tuple(obj(str(i), "1") for i in range(3)))
    assert inbox.put(page, stop)
    stop.set()  # a second page would wait for room: a stopping watcher gives up instead
    assert not inbox.put(Notification(Kind.POD, "ADDED", (obj("x", "2"),)), stop)
    assert [len(n.objects) for n in inbox.take(0, 10)] == [3]


def test_an_outage_of_many_attempts_is_one_warning_and_one_line_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = FakeStop()
    away = [ConnectionError("API server away") for _ in range(5)]
    server = ScriptedServer(stop, [*away, listing("5", obj("a", "4")), events()])
    inbox = Inbox(1000)
    watcher = Watcher(Source(Kind.NODE, server), inbox, stop, watch_seconds=5, backoff_max=4.0)
    with caplog.at_level(logging.INFO, "minruntime.cluster.api"):
        watcher.run()
    assert stop.delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert shown(inbox.take(0, 10_000)) == listed("a")
    said = [r.getMessage() for r in caplog.records if r.name == "minruntime.cluster.api"]
    assert said == [
        "watch of Node: ConnectionError: API server away; retrying with backoff",
        "watch of Node is back after 0s (6 attempts)",
    ]
