"""Loading an RSM by short name, dotted path or class path, and the one-line failures."""

import textwrap
import uuid

import pytest
from s3servers import moto_s3  # noqa: F401  (fixture)

from tieredlog.rsm.api import RemoteStorageManager
from tieredlog.rsm.fsspec_rsm import FsspecRemoteStorageManager
from tieredlog.rsm.local import LocalTieredStorage
from tieredlog.rsm.registry import (
    PluginLoadError,
    available_remote_storage_managers,
    load_from_broker_config,
    load_remote_storage_manager,
    rsm_configs_from_broker,
)
from tieredlog.rsm.s3 import S3RemoteStorageManager


def write_plugin(folder, body: str) -> str:
    """A plugin module in ``folder`` with a unique name; returns the module name."""
    name = f"plugin_{uuid.uuid4().hex[:10]}"
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return name


RECORDING_PLUGIN = """
    from tieredlog.rsm import RemoteStorageManager

    class Recording(RemoteStorageManager):
        def configure(self, configs):
            self.configs = dict(configs)
        def copy_log_segment_data(self, md, data): return None
        def fetch_log_segment(self, md, start, end=None): raise NotImplementedError
        def fetch_index(self, md, index_type): raise NotImplementedError
        def delete_log_segment_data(self, md): return None
"""


def test_builtin_short_names_are_registered():
    names = available_remote_storage_managers()
    assert {"local", "s3", "fsspec"} <= set(names)


def test_rsm_configs_strip_prefix_and_add_broker_id():
    props = {"rsm.config.storage.s3.bucket.name": "b", "rsm.config.key.prefix": "p/",
             "rlmm.config.x": "1", "broker.id": 7, "rsm.config.": "empty-name-dropped"}
    assert rsm_configs_from_broker(props) == {"storage.s3.bucket.name": "b", "key.prefix": "p/", "broker.id": 7}


def test_rsm_configs_honour_custom_impl_prefix():
    props = {"remote.log.storage.manager.impl.prefix": "my.rsm.", "my.rsm.dir": "/x", "rsm.config.dir": "/y"}
    assert rsm_configs_from_broker(props) == {"dir": "/x"}


def test_local_by_short_name_and_default(tmp_path):
    rsm = load_remote_storage_manager("local", None, {"dir": str(tmp_path), "broker.id": 0})
    assert type(rsm) is LocalTieredStorage
    assert type(load_remote_storage_manager(None, None, {"dir": str(tmp_path)})) is LocalTieredStorage


def test_fsspec_by_short_name(tmp_path):
    rsm = load_remote_storage_manager("fsspec", None, {"storage.fsspec.url": f"file://{tmp_path}"})
    assert type(rsm) is FsspecRemoteStorageManager and rsm.root == str(tmp_path)


def test_s3_through_broker_properties(moto_s3):
    props = {"remote.log.storage.manager.class.name": "s3", "broker.id": 3,
             **{f"rsm.config.{k}": v for k, v in moto_s3.rsm_configs(prefix="reg/").items()}}
    rsm = load_from_broker_config(props)
    assert type(rsm) is S3RemoteStorageManager and rsm.key_prefix == "reg/" and rsm.bucket == moto_s3.bucket


@pytest.mark.parametrize("separator", [":", "."])
def test_dotted_path_from_class_path(tmp_path, separator):
    module = write_plugin(tmp_path, RECORDING_PLUGIN)
    rsm = load_remote_storage_manager(f"{module}{separator}Recording", str(tmp_path), {"a.b": "1", "broker.id": 2})
    assert isinstance(rsm, RemoteStorageManager)
    assert rsm.configs == {"a.b": "1", "broker.id": 2}


def test_class_path_with_several_folders(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir(), second.mkdir()
    module = write_plugin(second, RECORDING_PLUGIN)
    import os
    rsm = load_remote_storage_manager(f"{module}:Recording", f"{first}{os.pathsep}{second}", {})
    assert rsm.configs == {}


def _assert_one_line(exc: BaseException, *parts: str) -> None:
    text = str(exc)
    assert "\n" not in text
    for part in parts:
        assert part in text, (part, text)


def test_unknown_short_name():
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager("nosuchbackend", None, {})
    _assert_one_line(info.value, "'nosuchbackend'", "installed:", "s3")


def test_plugin_that_fails_to_import(tmp_path):
    module = write_plugin(tmp_path, "import not_a_real_dependency_xyz\n")
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager(f"{module}:Anything", str(tmp_path), {})
    _assert_one_line(info.value, module, "ModuleNotFoundError", "not_a_real_dependency_xyz")


def test_plugin_that_fails_to_configure(tmp_path):
    module = write_plugin(tmp_path, RECORDING_PLUGIN + """
    class Broken(Recording):
        closed = False
        def configure(self, configs):
            raise ValueError("bad value for\\nmy.option")
        def close(self):
            type(self).closed = True
    """)
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager(f"{module}:Broken", str(tmp_path), {})
    _assert_one_line(info.value, "cannot configure", f"{module}:Broken", "ValueError: bad value for my.option")
    import importlib
    assert importlib.import_module(module).Broken.closed is True


def test_class_that_is_not_an_rsm(tmp_path):
    module = write_plugin(tmp_path, "class NotAnRsm:\n    pass\n")
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager(f"{module}:NotAnRsm", str(tmp_path), {})
    _assert_one_line(info.value, "not a subclass")


def test_missing_class_path_folder(tmp_path):
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager("x:Y", str(tmp_path / "absent"), {})
    _assert_one_line(info.value, "absent", "not a folder")


def test_s3_with_missing_bucket_fails_at_load(moto_s3):
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager("s3", None, moto_s3.rsm_configs(bucket="no-such-bucket-here"))
    _assert_one_line(info.value, "'s3'", "no-such-bucket-here", "does not exist")
