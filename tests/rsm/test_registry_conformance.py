"""Built-in backends loaded through the registry, against the conformance kit (LocalTieredStorage here;
S3 and fsspec have their own modules)."""

from tieredlog.rsm.registry import load_remote_storage_manager
from tieredlog.rsm.testing import ListableRemoteStorageManagerConformance


class TestLocalTieredStorageFromRegistry(ListableRemoteStorageManagerConformance):
    def make_rsm(self, tmp_path):
        return load_remote_storage_manager("local", None, {"dir": str(tmp_path / "remote"), "broker.id": 0})
