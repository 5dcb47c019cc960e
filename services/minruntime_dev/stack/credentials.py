"""The local stack's database passwords: generated once, kept in a libpq password file.

The file (``<stack dir>/pgpass``, mode 0600) is both the store and what clients use: a URL
without a password that names it (``?passfile=...``) logs in with no secret on the command
line, in the environment or in ``stack status``. Lines are libpq's ``host:port:db:user:password``
with ``*`` wildcards, so every database of the stack (scratch ones included) matches.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from minruntime_dev.stack.process import write_private

_HEADER = "# minruntime local stack: generated database passwords (libpq passfile). Keep private.\n"


def _escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _split(line: str) -> list[str]:
    fields, current, escaped = [], [], False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def read_passwords(path: Path) -> dict[str, str]:
    """Role → password from a passfile this module wrote (empty when there is none)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = _split(line)
        if len(fields) == 5:
            found[fields[3]] = fields[4]
    return found


def ensure_passwords(path: Path, roles: Iterable[str], given: Mapping[str, str]) -> dict[str, str]:
    """Each role's password: ``given`` wins, then the file's, else a new random one.

    The file is (re)written with mode 0600 before anything else can read it.
    """
    kept = read_passwords(path)
    passwords = {
        role: given.get(role) or kept.get(role) or secrets.token_urlsafe(24) for role in roles
    }
    if passwords != {role: kept.get(role) for role in passwords} or _mode(path) != 0o600:
        _write(path, passwords)
    return passwords


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return None


def passfile_text(passwords: Mapping[str, str]) -> str:
    """A libpq passfile giving each role its password on every server and database."""
    lines = [f"*:*:*:{_escape(role)}:{_escape(pw)}\n" for role, pw in passwords.items()]
    return _HEADER + "".join(lines)


def _write(path: Path, passwords: Mapping[str, str]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    # Created 0600 from the start: the passwords are never readable by others, not even briefly.
    write_private(temporary, passfile_text(passwords))
    os.replace(temporary, path)
