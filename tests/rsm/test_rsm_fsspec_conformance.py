"""The fsspec backend against the conformance kit: file://, memory:// and s3:// (s3fs on moto)."""

import uuid

import pytest
from s3servers import moto_s3  # noqa: F401  (fixture)

from tieredlog.rsm.fsspec_rsm import FsspecRemoteStorageManager
from tieredlog.rsm.testing import ListableRemoteStorageManagerConformance


class TestFsspecFile(ListableRemoteStorageManagerConformance):
    def make_rsm(self, tmp_path):
        rsm = FsspecRemoteStorageManager()
        rsm.configure({"storage.fsspec.url": f"file://{tmp_path}/remote", "broker.id": 0})
        return rsm


class TestFsspecMemory(ListableRemoteStorageManagerConformance):
    def make_rsm(self, tmp_path):
        rsm = FsspecRemoteStorageManager()
        rsm.configure({"storage.fsspec.url": f"memory://tiered-{uuid.uuid4().hex}", "key.prefix": "kp/"})
        return rsm


class TestFsspecS3(ListableRemoteStorageManagerConformance):
    @pytest.fixture(autouse=True)
    def _endpoint(self, moto_s3):
        self.endpoint = moto_s3

    def make_rsm(self, tmp_path):
        rsm = FsspecRemoteStorageManager()
        rsm.configure({"storage.fsspec.url": f"s3://{self.endpoint.bucket}/fs-{uuid.uuid4().hex[:8]}",
                       **self.endpoint.fsspec_options(), "broker.id": 1})
        return rsm
