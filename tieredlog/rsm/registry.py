"""Find, import and configure the broker's RemoteStorageManager.

``remote.log.storage.manager.class.name`` is either a short name registered in the entry-point group
``tieredlog.remote_storage`` (built in: ``local``, ``s3``, ``fsspec``; installed plugins add theirs) or
a dotted path, ``package.module:Class`` or ``package.module.Class``. ``remote.log.storage.manager.
class.path`` lists extra folders (``os.pathsep``-separated) put on the import path first, the Python
analogue of Kafka's plugin class path.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from typing import Any, Callable, Mapping

from tieredlog.rsm.api import RemoteStorageException, RemoteStorageManager

ENTRY_POINT_GROUP = "tieredlog.remote_storage"
DEFAULT_CLASS_NAME = "local"
CLASS_NAME_CONFIG = "remote.log.storage.manager.class.name"
CLASS_PATH_CONFIG = "remote.log.storage.manager.class.path"
IMPL_PREFIX_CONFIG = "remote.log.storage.manager.impl.prefix"
DEFAULT_IMPL_PREFIX = "rsm.config."


class PluginLoadError(RemoteStorageException):
    """The RSM could not be imported, built or configured. One line: name and cause."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def available_remote_storage_managers() -> dict[str, str]:
    """Short name -> ``module:attr`` of every registered RSM."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def rsm_configs_from_broker(props: Mapping[str, object]) -> dict[str, object]:
    """The properties ``configure()`` receives: every ``rsm.config.*`` (or the prefix set by
    ``remote.log.storage.manager.impl.prefix``) with the prefix stripped, plus ``broker.id``."""
    prefix = str(props.get(IMPL_PREFIX_CONFIG) or DEFAULT_IMPL_PREFIX)
    configs = {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix) and len(k) > len(prefix)}
    if "broker.id" in props:
        configs["broker.id"] = props["broker.id"]
    return configs


def add_class_path(class_path: str | None, config_name: str = CLASS_PATH_CONFIG) -> None:
    """Put the ``os.pathsep``-separated folders of ``class_path`` first on the import path."""
    if not class_path:
        return
    for folder in reversed([p for p in class_path.split(os.pathsep) if p.strip()]):
        folder = os.path.abspath(folder.strip())
        if not os.path.isdir(folder):
            raise PluginLoadError(f"{config_name} entry {folder!r} is not a folder")
        if folder not in sys.path:
            sys.path.insert(0, folder)


def resolve_plugin_class(class_name: str, group: str, base: type, what: str) -> Any:
    """The class for a short name registered in the entry-point ``group`` or a dotted path
    (``module:Class`` or ``module.Class``), checked to subclass ``base``; ``what`` names the kind of
    plugin in errors. Nothing is built or configured."""
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}
    if class_name in eps:
        target = eps[class_name].load()
    else:
        if ":" in class_name:
            module_name, _, attr = class_name.partition(":")
        elif "." in class_name:
            module_name, _, attr = class_name.rpartition(".")
        else:
            known = ", ".join(sorted(eps)) or "none"
            raise LookupError(f"no {what} named {class_name!r} (installed: {known}; or give module:Class)")
        module = importlib.import_module(module_name)
        target = module
        for part in attr.split("."):
            target = getattr(target, part)
    if not isinstance(target, type) or not issubclass(target, base):
        raise TypeError(f"{target!r} is not a subclass of {base.__module__}.{base.__qualname__}")
    return target


def resolve_class(class_name: str) -> type[RemoteStorageManager]:
    """The RSM class for a short name or dotted path (without configuring anything)."""
    cls: type[RemoteStorageManager] = resolve_plugin_class(class_name, ENTRY_POINT_GROUP, RemoteStorageManager,
                                                           "remote storage manager")
    return cls


def load_plugin(class_name: str, class_path: str | None, class_path_config: str, group: str, base: type,
                what: str, configure: Callable[[Any], None], close: Callable[[Any], None]) -> Any:
    """Import, build (no arguments) and configure a plugin; any failure raises PluginLoadError naming it,
    and a plugin whose configure() failed is closed."""
    add_class_path(class_path, class_path_config)
    try:
        plugin = resolve_plugin_class(class_name, group, base, what)()
    except Exception as exc:
        raise PluginLoadError(f"cannot load {what} {class_name!r}: {_one_line(exc)}") from exc
    try:
        configure(plugin)
    except Exception as exc:
        try:
            close(plugin)
        except Exception:
            pass  # the configure failure is the one to report
        raise PluginLoadError(f"cannot configure {what} {class_name!r}: {_one_line(exc)}") from exc
    return plugin


def load_remote_storage_manager(
    class_name: str | None, class_path: str | None, configs: Mapping[str, object]
) -> RemoteStorageManager:
    """Build and configure the RSM. Any failure raises :class:`PluginLoadError` naming the plugin."""
    rsm: RemoteStorageManager = load_plugin(
        (class_name or DEFAULT_CLASS_NAME).strip(), class_path, CLASS_PATH_CONFIG, ENTRY_POINT_GROUP,
        RemoteStorageManager, "remote storage manager", lambda p: p.configure(dict(configs)), lambda p: p.close())
    return rsm


def load_from_broker_config(props: Mapping[str, object]) -> RemoteStorageManager:
    """Convenience for the broker: read the class name / path from its properties."""
    class_name = props.get(CLASS_NAME_CONFIG)
    class_path = props.get(CLASS_PATH_CONFIG)
    return load_remote_storage_manager(
        str(class_name) if class_name else None, str(class_path) if class_path else None,
        rsm_configs_from_broker(props))
