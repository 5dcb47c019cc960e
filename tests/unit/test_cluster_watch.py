"""The bridge's watch loop: resume from the last resourceVersion, relist on 410 Gone, back off.

A scripted list call stands in for the API server (the real one is in tests/e2e/); it answers
the list and watch requests the official client makes, in the API server's wire format.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

from minruntime.cluster.api import RELIST, Notification, Source, Watcher
from minruntime.cluster.mirror import Kind


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


def listing(rv: str, *items: dict[str, Any]) -> bytes:
    return json.dumps({"metadata": {"resourceVersion": rv}, "items": list(items)}).encode()


def events(*pairs: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in pairs)


def gone() -> bytes:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    return events(("ERROR", status))


def run(replies: list[Any]) -> tuple[list[Notification], ScriptedServer]:
    stop = threading.Event()
    server = ScriptedServer(stop, replies)
    out: queue.Queue[Notification] = queue.Queue()
    Watcher(Source(Kind.NODE, server), out, stop, watch_seconds=5, backoff_max=0.01).run()
    notes = []
    while not out.empty():
        notes.append(out.get())
    return notes, server


def test_it_resumes_from_the_last_version_and_relists_on_410_gone() -> None:
    notes, server = run(
        [
            listing("5", obj("a", "4")),
            events(("ADDED", obj("b", "6")), ("BOOKMARK", {"metadata": {"resourceVersion": "7"}})),
            gone(),
            listing("9", obj("b", "6")),
        ]
    )
    assert [(n.action, [o["metadata"]["name"] for o in n.objects]) for n in notes] == [
        (RELIST, ["a"]),
        ("ADDED", ["b"]),
        (RELIST, ["b"]),
    ]
    versions = [call.get("resource_version") for call in server.calls if call.get("watch")]
    assert versions == ["5", "7", "9"]  # after the watch's end, from its last bookmark


def test_an_unreachable_api_server_is_retried() -> None:
    notes, server = run([ConnectionError("refused"), ConnectionError("refused"), listing("3")])
    assert [n.action for n in notes] == [RELIST]
    assert len(server.calls) >= 3


def test_a_watch_refused_with_http_410_relists_too() -> None:
    notes, _ = run([listing("5"), Response(b"{}", status=410), listing("8", obj("c", "8"))])
    assert [n.action for n in notes] == [RELIST, RELIST]
