"""Built-in backends loaded through the registry, against the conformance kit (LocalTieredStorage here;
S3 and fsspec have their own modules)."""

import pytest

from tieredlog.rsm.registry import load_remote_storage_manager
from tieredlog.rsm.testing import RemoteStorageManagerConformance


class TestLocalTieredStorageFromRegistry(RemoteStorageManagerConformance):
    def make_rsm(self, tmp_path):
        return load_remote_storage_manager("local", None, {"dir": str(tmp_path / "remote"), "broker.id": 0})

    # Known gap in tieredlog/rsm/local.py (reported to its owner): a re-copy of the same segment id
    # without a txn index keeps the earlier .txnindex. strict: this fails as soon as it is fixed.
    @pytest.mark.xfail(strict=True, reason="LocalTieredStorage keeps a stale .txnindex on re-copy")
    def test_recopy_without_txn_index_drops_the_old_one(self, rsm, copied, tmp_path):
        super().test_recopy_without_txn_index_drops_the_old_one(rsm, copied, tmp_path)
