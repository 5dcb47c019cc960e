"""Debian's Chromium, headless: a page's DOM after it rendered, and its console messages.

``scripts/chromium.sh`` installs it (``scripts/test.sh`` runs it); a test that needs it skips,
saying why, when it is not there. The browser gets no network: every request goes to a proxy
that does not exist, so a page that fetched anything would log a failed load.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest

_CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)$", re.MULTILINE)
_URL = re.compile(r'"url":"([a-z]+://[^"/]*)[^"]*"')
# The browser's own background traffic (updates, time, accounts), not the page's.
_BROWSER_HOSTS = re.compile(r"://([^/]*\.)?(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)$")


class Rendered(NamedTuple):
    dom: str
    console: list[str]
    # Every network request the page made (scheme and host).
    requests: list[str]


def chromium() -> str:
    """The browser's path, or skip the test saying why."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium: run scripts/chromium.sh (apt-get install chromium) to install it")


def _flags(profile: str) -> list[str]:
    return [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        "--proxy-server=127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
    ]


def render(page: Path) -> Rendered:
    """Load ``page`` (a file) and return its DOM and console."""
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="minruntime-chromium-") as profile:
        net_log = Path(profile) / "net-log.json"
        done = subprocess.run(
            [
                browser,
                *_flags(profile),
                f"--log-net-log={net_log}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        logged = net_log.read_text(errors="replace") if net_log.exists() else ""
    requests = sorted({url for url in _URL.findall(logged) if not _BROWSER_HOSTS.search(url)})
    return Rendered(done.stdout, _CONSOLE.findall(done.stderr), requests)
