"""A named table of plug-ins users select by name: attacks, protocol adversaries, models, datasets, rules and
pre-aggregators all use this one mechanism.

``Registry("attack").register("sign-flip")`` decorates a class and sets its
``name``; ``make(name, **options)`` builds one, turning unknown names and bad
options into :class:`ConfigError` that lists the choices. Entries that are not
classes (a model builder, a dataset spec) go in with ``add`` and come out with
``get``. ``base`` restricts ``register`` to subclasses of it, and ``reserved``
lists characters a name may not hold (the rules' ``+`` and ``:`` join names).
``add_lazy`` names an entry whose module is imported only when the entry is first
used, so listing the names (a command's help) imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, TypeVar

from reshuffle.errors import ConfigError

C = TypeVar("C", bound=type)
T = TypeVar("T")


class _Lazy:
    """An entry not imported yet: ``module.attribute``."""

    __slots__ = ("module", "attribute")

    def __init__(self, module: str, attribute: str) -> None:
        self.module, self.attribute = module, attribute

    def load(self) -> Any:
        return getattr(importlib.import_module(self.module), self.attribute)


class Registry(Generic[C]):
    def __init__(self, kind: str, base: type | None = None, reserved: str = "") -> None:
        self.kind, self.base, self.reserved = kind, base, reserved
        self._table: dict[str, Any] = {}

    def _article(self) -> str:
        return "an" if self.kind[:1] in "aeiou" else "a"

    def check_name(self, name: object) -> None:
        """Refuse a name that is empty, holds spaces or a reserved character."""
        ok = isinstance(name, str) and name and len(name.split()) == 1 and name == name.strip()
        if not ok or any(c in name for c in self.reserved):
            without = "".join(f"{c!r}, " for c in self.reserved)
            raise ConfigError(f"{self._article()} {self.kind} name must be a non-empty string without "
                              f"{without}spaces, got {name!r}")

    def add(self, name: str, entry: T) -> T:
        """Make ``entry`` selectable by ``name`` (a non-empty string without spaces or reserved characters)."""
        self.check_name(name)
        if name in self._table:
            held = self._table[name]
            what = f" ({held.__name__})" if isinstance(held, type) else ""
            raise ConfigError(f"{self._article()} {self.kind} named {name!r} is already registered{what}")
        self._table[name] = entry
        return entry

    def add_lazy(self, name: str, module: str, attribute: str) -> None:
        """Make ``module.attribute`` selectable by ``name``; the module is imported when the entry is first used."""
        self.add(name, _Lazy(module, attribute))

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: make the class selectable by ``name`` (and set its ``name``)."""
        self.check_name(name)

        def deco(cls: C) -> C:
            if self.base is not None and not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise ConfigError(f"register_{self.kind}({name!r}) decorates a {self.base.__name__} subclass, "
                                  f"got {cls!r}")
            self.add(name, cls)
            cls.name = name
            return cls

        return deco

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test that registered a plug-in cleans up); absent names are ignored."""
        self._table.pop(name, None)

    def names(self, where: Callable[[Any], bool] | None = None) -> list[str]:
        return sorted(n for n in self._table if where is None or where(self.get(n)))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._table

    def get(self, name: str) -> Any:
        """The entry registered as ``name``."""
        if name not in self:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")
        entry = self._table[name]
        if isinstance(entry, _Lazy):
            entry = self._table[name] = entry.load()
        return entry

    def make(self, name: str, **options):
        """The class registered as ``name``, built with ``options``."""
        cls = self.get(name)
        try:
            return cls(**options)
        except TypeError as exc:
            raise ConfigError(f"{self.kind} {name!r}: {exc}") from None
