"""The bridge's long-lived state held packed: each kept object and ledger record as one
``marshal`` blob instead of a tree of dicts, lists and strings.

At 100,000 pods the bridge holds one kept object and one ledger record per pod for as long as
it runs. As dicts a kept pod is about 4.7 KB (a dozen small dicts and lists, fifteen string
objects) and a record read from the ledger about 0.9 KB; packed they are about 0.55 KB and
0.15 KB: one bytes object each, which the cyclic collector never walks. Reading one back
(``marshal.loads``, C) costs a few microseconds, and the mirror reads an object only when a
change of it or of its gang is mapped (docs/benchmarks.md, "The bridge at 100,000 pods").

The values are JSON-shaped (dicts, lists, strings, numbers, booleans, None: what the API
server and the ledger send); a value marshal cannot write (another Mapping type, in a test) is
held as it is. What is read back is a new object: the store is changed only by assignment.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Final, Generic, TypeVar, overload

V = TypeVar("V", bound=Mapping[str, object])
T = TypeVar("T")
_MISSING: Final = object()


def pack(value: Mapping[str, object]) -> bytes | Mapping[str, object]:
    """``value`` as a marshal blob (itself when marshal cannot write it)."""
    try:
        return marshal.dumps(value if type(value) is dict else dict(value))
    except ValueError:  # a nested value of another type than JSON's
        return value


class Packed(MutableMapping[str, V], Generic[V]):
    """A dict of JSON-shaped mappings, each held packed (``pack``); ``wrap`` makes what is
    read back (e.g. the ``Kept`` marker type) of the unpacked dict (None: the dict itself)."""

    __slots__ = ("_items", "_wrap")

    def __init__(self, wrap: Callable[[dict[str, object]], V] | None = None) -> None:
        self._items: dict[str, bytes | Mapping[str, object]] = {}
        self._wrap = wrap

    def _unpack(self, item: bytes | Mapping[str, object]) -> V:
        if type(item) is not bytes:
            return item  # type: ignore[return-value]  # held as it is (see pack)
        value = marshal.loads(item)
        return value if self._wrap is None else self._wrap(value)

    def __getitem__(self, key: str) -> V:
        return self._unpack(self._items[key])

    @overload
    def get(self, key: str, /) -> V | None: ...
    @overload
    def get(self, key: str, /, default: V | T) -> V | T: ...
    def get(self, key: str, /, default: object = None) -> object:
        item = self._items.get(key)
        return default if item is None else self._unpack(item)

    def __setitem__(self, key: str, value: V) -> None:
        self._items[key] = pack(value)

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    @overload
    def pop(self, key: str, /) -> V: ...
    @overload
    def pop(self, key: str, /, default: V | T) -> V | T: ...
    def pop(self, key: str, /, default: object = _MISSING) -> object:
        item = self._items.pop(key, None)
        if item is not None:
            return self._unpack(item)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def packed_items(self) -> Iterator[tuple[str, bytes | Mapping[str, object]]]:
        """(key, packed value) pairs: moved to another store without unpacking."""
        return iter(self._items.items())

    def put_packed(self, key: str, item: bytes | Mapping[str, object]) -> None:
        """Store a value packed by another store (``packed_items``)."""
        self._items[key] = item
