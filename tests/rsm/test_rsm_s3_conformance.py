"""The S3 backend against the conformance kit, on moto's server and on SeaweedFS."""

import pytest
from s3servers import moto_s3, seaweed_s3, unique_prefix  # noqa: F401  (fixtures)

from tieredlog.rsm.s3 import MIN_PART_SIZE, S3RemoteStorageManager
from tieredlog.rsm.testing import ListableRemoteStorageManagerConformance


class _S3Conformance(ListableRemoteStorageManagerConformance):
    endpoint_fixture = ""

    @pytest.fixture(autouse=True)
    def _endpoint(self, request):
        self.endpoint = request.getfixturevalue(self.endpoint_fixture)

    def make_rsm(self, tmp_path):
        rsm = S3RemoteStorageManager()
        # The smallest legal part size, so the 20 MiB segment goes multipart in four parts.
        rsm.configure(self.endpoint.rsm_configs(prefix=unique_prefix(), **{
            "storage.s3.multipart.upload.part.size": str(MIN_PART_SIZE), "broker.id": 0}))
        return rsm


class TestS3OnMoto(_S3Conformance):
    endpoint_fixture = "moto_s3"


class TestS3OnSeaweedFS(_S3Conformance):
    endpoint_fixture = "seaweed_s3"
