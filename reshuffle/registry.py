"""A named table of classes, for the plug-ins users select by name (attacks, protocol adversaries).

``Registry("attack").register("sign-flip")`` decorates a class and sets its
``name``; ``make(name, **options)`` builds one, turning unknown names and bad
options into :class:`ConfigError` that lists the choices.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from reshuffle.errors import ConfigError

C = TypeVar("C", bound=type)


class Registry(Generic[C]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, type] = {}

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: make the class selectable by ``name``."""

        def deco(cls: C) -> C:
            if name in self._table:
                raise ConfigError(f"an {self.kind} named {name!r} is already registered")
            cls.name = name
            self._table[name] = cls
            return cls

        return deco

    def names(self, where: Callable[[type], bool] | None = None) -> list[str]:
        return sorted(n for n, c in self._table.items() if where is None or where(c))

    def make(self, name: str, **options):
        """The class registered as ``name``, built with ``options``."""
        if name not in self._table:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")
        try:
            return self._table[name](**options)
        except TypeError as exc:
            raise ConfigError(f"{self.kind} {name!r}: {exc}") from None
