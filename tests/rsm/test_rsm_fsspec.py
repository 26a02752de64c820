"""fsspec backend behaviour beyond the conformance kit: options, layout, listing, config errors."""

import uuid

import pytest
from s3servers import moto_s3  # noqa: F401  (fixture)

from tieredlog.rsm.api import RemoteResourceNotFoundException
from tieredlog.rsm.config import RemoteStorageConfigError
from tieredlog.rsm.fsspec_rsm import FsspecRemoteStorageManager, storage_options
from tieredlog.rsm.keys import uuid_to_base64
from tieredlog.rsm.testing import make_segment, read_all


def test_storage_options_nest_on_dots_and_coerce_scalars():
    configs = {"storage.fsspec.options.anon": "false", "storage.fsspec.options.client_kwargs.region_name": "eu-west-1",
               "storage.fsspec.options.client_kwargs.verify": "true", "storage.fsspec.options.default_block_size": "1048576",
               "storage.fsspec.options.key": "AKIA", "storage.fsspec.url": "s3://b", "unrelated": "x"}
    assert storage_options(configs) == {"anon": False, "default_block_size": 1048576, "key": "AKIA",
                                        "client_kwargs": {"region_name": "eu-west-1", "verify": True}}


def test_an_option_cannot_be_both_value_and_group():
    with pytest.raises(RemoteStorageConfigError, match="both a value and a group"):
        storage_options({"storage.fsspec.options.a": "1", "storage.fsspec.options.a.b": "2"})


def test_file_layout_on_disk(tmp_path):
    rsm = FsspecRemoteStorageManager()
    rsm.configure({"storage.fsspec.url": f"file://{tmp_path}/root", "key.prefix": "cluster-a/"})
    seg = make_segment(tmp_path / "local", size=300, topic="t", partition=0, start_offset=7, with_txn_index=False)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    folder = tmp_path / "root" / "cluster-a" / f"t-{uuid_to_base64(seg.metadata.topic_id_partition.topic_id)}" / "0"
    stem = f"00000000000000000007-{uuid_to_base64(seg.metadata.remote_log_segment_id.id)}"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{stem}.{s}" for s in ("log", "index", "timeindex", "snapshot", "leader_epoch_checkpoint", "manifest"))
    assert (folder / f"{stem}.log").read_bytes() == seg.log


def test_s3_url_uses_storage_options(moto_s3, tmp_path):
    prefix = f"fs-{uuid.uuid4().hex[:8]}"
    rsm = FsspecRemoteStorageManager()
    rsm.configure({"storage.fsspec.url": f"s3://{moto_s3.bucket}/{prefix}", **moto_s3.fsspec_options()})
    seg = make_segment(tmp_path, size=1234)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    objects = moto_s3.client().list_objects_v2(Bucket=moto_s3.bucket, Prefix=prefix + "/")["Contents"]
    log_key = next(o["Key"] for o in objects if o["Key"].endswith(".log"))
    assert moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=log_key)["Body"].read() == seg.log
    assert len(rsm.list_segment_objects(seg.metadata.topic_id_partition)) == 7


def test_listing_ignores_files_it_did_not_write(tmp_path):
    rsm = FsspecRemoteStorageManager()
    rsm.configure({"storage.fsspec.url": f"file://{tmp_path}/root"})
    seg = make_segment(tmp_path / "local", size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    tp = seg.metadata.topic_id_partition
    part = tmp_path / "root" / f"{tp.topic}-{uuid_to_base64(tp.topic_id)}" / "3"
    (part / "stray.log").write_bytes(b"x")
    (part / "00000000000000001000-short.log").write_bytes(b"x")
    (tmp_path / "root" / "lost+found").mkdir()
    (tmp_path / "root" / "lost+found" / "f").write_bytes(b"x")
    listed = rsm.list_segment_objects()
    assert len(listed) == 7 and {k.segment_id for k in listed} == {seg.metadata.remote_log_segment_id.id}
    manifest = rsm.read_manifest(next(k for k in listed if k.suffix == "manifest"))
    assert manifest["start_offset"] == 1000 and manifest["files"]["log"]["size"] == 100


def test_deleted_segment_disappears_from_listing(tmp_path):
    rsm = FsspecRemoteStorageManager()
    rsm.configure({"storage.fsspec.url": f"memory://list-{uuid.uuid4().hex}"})
    seg = make_segment(tmp_path, size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.delete_log_segment_data(seg.metadata)
    assert rsm.list_segment_objects() == []
    with pytest.raises(RemoteResourceNotFoundException):
        read_all(rsm.fetch_log_segment(seg.metadata, 0))


@pytest.mark.parametrize("configs, message", [
    ({}, "missing required config rsm.config.storage.fsspec.url"),
    ({"storage.fsspec.url": "nosuchprotocol://x"}, "invalid config rsm.config.storage.fsspec.url='nosuchprotocol://x'"),
    ({"storage.fsspec.url": "memory://x", "key.prefix": "/abs"}, "must not start with '/'"),
])
def test_bad_config_gives_one_clear_line(configs, message):
    with pytest.raises(RemoteStorageConfigError) as info:
        FsspecRemoteStorageManager().configure(configs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_bucket_fails_at_configure(moto_s3):
    with pytest.raises(RemoteStorageConfigError, match="bucket 'no-such-bucket-fs' does not exist"):
        FsspecRemoteStorageManager().configure(
            {"storage.fsspec.url": "s3://no-such-bucket-fs/p", **moto_s3.fsspec_options()})


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b"{" * 10, b"x" * ((1 << 20) + 7)])
def test_a_damaged_or_huge_manifest_is_refused_not_read_whole(tmp_path, body):
    from tieredlog.rsm.api import RemoteStorageException

    rsm = FsspecRemoteStorageManager()
    rsm.configure({"storage.fsspec.url": f"file://{tmp_path}/root"})
    seg = make_segment(tmp_path / "local", size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    key = next(k for k in rsm.list_segment_objects() if k.suffix == "manifest")
    path = next((tmp_path / "root").rglob("*.manifest"))
    path.write_bytes(body)
    with pytest.raises(RemoteStorageException, match="manifest"):
        rsm.read_manifest(key)
