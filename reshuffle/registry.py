"""A named table of plug-ins users select by name (attacks, protocol adversaries, models, datasets).

``Registry("attack").register("sign-flip")`` decorates a class and sets its
``name``; ``make(name, **options)`` builds one, turning unknown names and bad
options into :class:`ConfigError` that lists the choices. Entries that are not
classes (a model builder, a dataset spec) go in with ``add`` and come out with
``get``.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from reshuffle.errors import ConfigError

C = TypeVar("C", bound=type)
T = TypeVar("T")


class Registry(Generic[C]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, Any] = {}

    def _article(self) -> str:
        return "an" if self.kind[:1] in "aeiou" else "a"

    def add(self, name: str, entry: T) -> T:
        """Make ``entry`` selectable by ``name`` (a non-empty string without spaces)."""
        if not isinstance(name, str) or not name or len(name.split()) != 1 or name != name.strip():
            raise ConfigError(f"{self._article()} {self.kind} name must be a non-empty string without spaces, "
                              f"got {name!r}")
        if name in self._table:
            raise ConfigError(f"{self._article()} {self.kind} named {name!r} is already registered")
        self._table[name] = entry
        return entry

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: make the class selectable by ``name``."""

        def deco(cls: C) -> C:
            self.add(name, cls)
            cls.name = name
            return cls

        return deco

    def names(self, where: Callable[[Any], bool] | None = None) -> list[str]:
        return sorted(n for n, c in self._table.items() if where is None or where(c))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._table

    def get(self, name: str) -> Any:
        """The entry registered as ``name``."""
        if name not in self:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")
        return self._table[name]

    def make(self, name: str, **options):
        """The class registered as ``name``, built with ``options``."""
        cls = self.get(name)
        try:
            return cls(**options)
        except TypeError as exc:
            raise ConfigError(f"{self.kind} {name!r}: {exc}") from None
