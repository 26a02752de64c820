"""Reading a RemoteStorageManager's ``configure()`` properties with one-line errors that never show a
secret: shared by the built-in backends and open to plugins (exported from ``tieredlog.rsm``)."""

from __future__ import annotations

import enum
from typing import Iterable, Mapping, SupportsIndex, SupportsInt, overload

from tieredlog.rsm.api import RemoteStorageException
from tieredlog.rsm.keys import InvalidKeyError, validate_key_prefix


class RemoteStorageConfigError(RemoteStorageException, ValueError):
    """A bad ``rsm.config.*`` value. The message is one line and never contains a secret."""


class _Required(enum.Enum):
    REQUIRED = enum.auto()


_REQUIRED = _Required.REQUIRED


def config_int(value: object) -> int:
    """``int(value)`` for a config value that may be a string or already a number: TypeError (as from
    ``int()``) for a value that is neither."""
    if isinstance(value, (str, bytes, bytearray, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(f"int() argument must be a string or a number, not {type(value).__name__!r}")


class ConfigReader:
    """Typed access to the configs handed to ``configure()``. Values may be strings (from a properties
    file) or already typed (from Python callers)."""

    def __init__(self, configs: Mapping[str, object], *, display_prefix: str = "rsm.config.") -> None:
        self.configs = dict(configs)
        self.display_prefix = display_prefix

    def _name(self, name: str) -> str:
        return f"{self.display_prefix}{name}"

    def _error(self, name: str, value: object, reason: str, secret: bool = False) -> RemoteStorageConfigError:
        shown = "<hidden>" if secret else repr(value)
        return RemoteStorageConfigError(f"invalid config {self._name(name)}={shown}: {reason}")

    def has(self, name: str) -> bool:
        value = self.configs.get(name)
        return value is not None and value != ""

    @overload
    def string(self, name: str, *, secret: bool = False) -> str: ...
    @overload
    def string(self, name: str, default: str, *, secret: bool = False) -> str: ...
    @overload
    def string(self, name: str, default: str | None, *, secret: bool = False) -> str | None: ...

    def string(self, name: str, default: str | None | _Required = _REQUIRED, *, secret: bool = False) -> str | None:
        """The stripped value; ``default`` when unset, and without a default an unset value is an error."""
        value = self.configs.get(name)
        if value is None or value == "":
            if isinstance(default, _Required):
                raise RemoteStorageConfigError(f"missing required config {self._name(name)}")
            return default
        if not isinstance(value, str):
            raise self._error(name, value, "expected a string", secret)
        return value.strip()

    def boolean(self, name: str, default: bool) -> bool:
        value = self.configs.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self._error(name, value, "expected true or false")

    @overload
    def integer(self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int: ...
    @overload
    def integer(
        self, name: str, default: int | None, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None: ...

    def integer(self, name: str, default: int | None, *, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self.configs.get(name)
        if value is None or value == "":
            return default
        try:
            if isinstance(value, bool):
                raise ValueError
            number = int(value.strip()) if isinstance(value, str) else config_int(value)
        except (TypeError, ValueError):
            raise self._error(name, value, "expected an integer") from None
        if minimum is not None and number < minimum:
            raise self._error(name, value, f"must be >= {minimum}")
        if maximum is not None and number > maximum:
            raise self._error(name, value, f"must be <= {maximum}")
        return number

    def choice(self, name: str, default: str | None, choices: Iterable[str]) -> str | None:
        allowed = list(choices)
        value = self.string(name, default)
        if value is not None and value not in allowed:
            raise self._error(name, value, f"expected one of {', '.join(allowed)}")
        return value

    def with_prefix(self, prefix: str) -> dict[str, object]:
        """The configs under ``prefix``, with the prefix stripped."""
        return {k[len(prefix):]: v for k, v in self.configs.items() if k.startswith(prefix) and len(k) > len(prefix)}




def validated_prefix(reader: ConfigReader, name: str = "key.prefix") -> str:
    prefix = reader.string(name, "") or ""
    try:
        return validate_key_prefix(prefix)
    except InvalidKeyError as exc:
        raise RemoteStorageConfigError(f"invalid config {reader._name(name)}: {exc}") from None
