"""The tieredlog-chunked plugin (plugins/tieredlog-chunked, pip-installed): conformance over a local
folder and over S3 (moto), read cost in bytes fetched per byte served, cache, prefetch, compression,
encryption and key rotation."""

import base64

import pytest
from s3servers import moto_s3, unique_prefix  # noqa: F401  (fixture)

from tieredlog.rsm.api import IndexType, RemoteStorageException
from tieredlog.rsm.registry import PluginLoadError, load_remote_storage_manager
from tieredlog.rsm.s3 import MIN_PART_SIZE
from tieredlog.rsm.testing import ListableRemoteStorageManagerConformance, make_segment, read_all

KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes(range(100, 132))).decode()
KIB = 1024


def chunked(tmp_path, **extra) -> object:
    configs = {"chunked.backend": "local", "chunked.backend.config.dir": str(tmp_path / "remote"),
               "chunk.size": str(64 * KIB), "broker.id": 1, **extra}
    return load_remote_storage_manager("chunked", None, configs)


def stored_log(tmp_path) -> bytes:
    """The bytes the wrapped backend holds for the (single) segment's log."""
    [path] = [p for p in (tmp_path / "remote").rglob("*.log")]
    return path.read_bytes()


class TestChunkedOverLocalFolder(ListableRemoteStorageManagerConformance):
    def make_rsm(self, tmp_path):
        return chunked(tmp_path, **{
            "compression.enabled": "true", "encryption.enabled": "true", "encryption.key.id": "a",
            "encryption.keys.a": KEY_A, "fetch.chunk.cache.path": str(tmp_path / "cache"),
            "fetch.chunk.cache.size": str(4 * 1024 * KIB), "fetch.chunk.cache.prefetch.max.size": str(128 * KIB)})


class TestChunkedOverS3(ListableRemoteStorageManagerConformance):
    @pytest.fixture(autouse=True)
    def _endpoint(self, moto_s3):
        self.endpoint = moto_s3

    def make_rsm(self, tmp_path):
        backend = {f"chunked.backend.config.{k}": v for k, v in self.endpoint.rsm_configs(
            prefix=unique_prefix(), **{"storage.s3.multipart.upload.part.size": str(MIN_PART_SIZE)}).items()}
        return load_remote_storage_manager("chunked", None, {
            "chunked.backend": "s3", **backend, "chunk.size": str(1024 * KIB), "encryption.enabled": "true",
            "encryption.key.id": "a", "encryption.keys.a": KEY_A, "fetch.chunk.cache.path": str(tmp_path / "cache")})


# -- read cost ------------------------------------------------------------------------------------------

def test_ranged_read_fetches_only_the_chunks_it_needs(tmp_path):
    rsm = chunked(tmp_path)
    seg = make_segment(tmp_path / "local", size=4 * 1024 * KIB, seed=1)  # 64 chunks of 64 KiB
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.stats.bytes_fetched == 0  # copying reads nothing back
    start = 10 * 64 * KIB + 500
    assert read_all(rsm.fetch_log_segment(seg.metadata, start, start + 99)) == seg.log[start:start + 100]
    fetched, served = rsm.stats.bytes_fetched, rsm.stats.bytes_served
    assert served == 100
    # The header read (8 KiB at most) plus exactly one 64 KiB chunk, out of a 4 MiB segment.
    assert 64 * KIB <= fetched <= 64 * KIB + 8 * KIB, fetched
    assert rsm.stats.chunks_decoded == 1
    # Across a chunk border: two chunks, header already cached.
    border = 20 * 64 * KIB
    assert read_all(rsm.fetch_log_segment(seg.metadata, border - 10, border + 9)) == seg.log[border - 10:border + 10]
    assert rsm.stats.bytes_fetched - fetched == 2 * 64 * KIB
    assert rsm.stats.backend_reads == 2 + 1  # header, one chunk, one run of two chunks


def test_whole_segment_read_costs_one_object(tmp_path):
    rsm = chunked(tmp_path)
    seg = make_segment(tmp_path / "local", size=1024 * KIB + 7, seed=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert read_all(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log
    assert rsm.stats.bytes_fetched <= len(stored_log(tmp_path)) + 8 * KIB
    assert rsm.stats.bytes_served == len(seg.log)


def test_cache_serves_repeated_reads_and_is_bounded(tmp_path):
    rsm = chunked(tmp_path, **{"fetch.chunk.cache.path": str(tmp_path / "cache"),
                               "fetch.chunk.cache.size": str(256 * KIB)})
    seg = make_segment(tmp_path / "local", size=1024 * KIB, seed=3)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    read_all(rsm.fetch_log_segment(seg.metadata, 70 * KIB, 80 * KIB))
    before = rsm.stats.bytes_fetched
    assert read_all(rsm.fetch_log_segment(seg.metadata, 64 * KIB, 128 * KIB - 1)) == seg.log[64 * KIB:128 * KIB]
    assert rsm.stats.bytes_fetched == before  # served from disk cache
    read_all(rsm.fetch_log_segment(seg.metadata, 0))
    assert rsm.cache.size <= 256 * KIB
    assert len(list(rsm.cache.folder.iterdir())) == 4  # 4 chunks of 64 KiB fit
    rsm.delete_log_segment_data(seg.metadata)
    assert rsm.cache.size == 0 and list(rsm.cache.folder.iterdir()) == []
    folder = rsm.cache.folder
    rsm.close()
    assert not folder.exists()


def test_prefetch_reads_the_next_chunks_ahead(tmp_path):
    rsm = chunked(tmp_path, **{"fetch.chunk.cache.path": str(tmp_path / "cache"),
                               "fetch.chunk.cache.prefetch.max.size": str(128 * KIB)})
    seg = make_segment(tmp_path / "local", size=1024 * KIB, seed=4)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    read_all(rsm.fetch_log_segment(seg.metadata, 0, 100))
    rsm.wait_for_prefetch()
    after_prefetch = rsm.stats.bytes_fetched
    # Chunks 1 and 2 were read ahead: a sequential reader finds them cached.
    assert read_all(rsm.fetch_log_segment(seg.metadata, 64 * KIB, 192 * KIB - 1)) == seg.log[64 * KIB:192 * KIB]
    assert rsm.stats.bytes_fetched == after_prefetch
    rsm.wait_for_prefetch()
    # The prefetch stops at the segment border.
    read_all(rsm.fetch_log_segment(seg.metadata, 1024 * KIB - 10))
    rsm.wait_for_prefetch()
    assert rsm.stats.chunks_decoded == 6  # chunks 0-4 (read or read ahead) and the last one


# -- transforms -----------------------------------------------------------------------------------------

def test_compression_shrinks_compressible_segments_and_skips_random_ones(tmp_path):
    text = b"".join(b"offset=%08d key=user-%04d value=hello world\n" % (i, i % 97) for i in range(20000))
    local = make_segment(tmp_path / "local", size=10)
    local.data.log_segment.write_bytes(text)
    rsm = chunked(tmp_path / "z", **{"compression.enabled": "true"})
    rsm.copy_log_segment_data(local.metadata, local.data)
    assert len(stored_log(tmp_path / "z")) < len(text) / 4
    assert read_all(rsm.fetch_log_segment(local.metadata, 1000, 50_000)) == text[1000:50_001]
    random_seg = make_segment(tmp_path / "local2", size=300 * KIB, seed=5)
    rsm2 = chunked(tmp_path / "r", **{"compression.enabled": "true"})
    rsm2.copy_log_segment_data(random_seg.metadata, random_seg.data)
    assert b'"compression":null' in stored_log(tmp_path / "r")[:4096]  # the heuristic kept it raw


def test_encryption_hides_log_and_indexes(tmp_path):
    rsm = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "a", "encryption.keys.a": KEY_A})
    seg = make_segment(tmp_path / "local", size=200 * KIB, seed=6)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    stored = stored_log(tmp_path)
    assert seg.log[:64] not in stored and seg.log[100_000:100_064] not in stored
    [snapshot] = (tmp_path / "remote").rglob("*.snapshot")
    assert snapshot.read_bytes() != seg.indexes[IndexType.PRODUCER_SNAPSHOT]
    assert read_all(rsm.fetch_index(seg.metadata, IndexType.PRODUCER_SNAPSHOT)) == seg.indexes[IndexType.PRODUCER_SNAPSHOT]
    assert read_all(rsm.fetch_log_segment(seg.metadata, 5, 70_000)) == seg.log[5:70_001]


def test_tampered_chunk_is_detected(tmp_path):
    rsm = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "a", "encryption.keys.a": KEY_A})
    seg = make_segment(tmp_path / "local", size=200 * KIB, seed=7)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    [path] = (tmp_path / "remote").rglob("*.log")
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(RemoteStorageException, match="failed authentication"):
        read_all(rsm.fetch_log_segment(seg.metadata, 200 * KIB - 10))


def test_key_rotation_keeps_old_segments_readable(tmp_path):
    old = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "a", "encryption.keys.a": KEY_A})
    seg = make_segment(tmp_path / "local", size=100 * KIB, seed=8)
    old.copy_log_segment_data(seg.metadata, seg.data)
    rotated = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "b",
                                   "encryption.keys.a": KEY_A, "encryption.keys.b": KEY_B})
    assert read_all(rotated.fetch_log_segment(seg.metadata, 0)) == seg.log
    forgotten = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "b", "encryption.keys.b": KEY_B})
    with pytest.raises(RemoteStorageException, match="key id 'a', which is not in encryption.keys"):
        read_all(forgotten.fetch_log_segment(seg.metadata, 0))
    wrong = chunked(tmp_path, **{"encryption.enabled": "true", "encryption.key.id": "a", "encryption.keys.a": KEY_B})
    with pytest.raises(RemoteStorageException, match="cannot unwrap the data key"):
        read_all(wrong.fetch_log_segment(seg.metadata, 0))


@pytest.mark.parametrize("extra, message", [
    ({"chunked.backend": None}, "missing required config rsm.config.chunked.backend"),
    ({"chunked.backend": "chunked"}, "cannot wrap itself"),
    ({"chunked.backend": "nosuch"}, "no remote storage manager named 'nosuch'"),
    ({"chunk.size": "10"}, "must be >= 1024"),
    ({"encryption.enabled": "true", "encryption.key.id": "a"}, "missing config rsm.config.encryption.keys.<id>"),
    ({"encryption.enabled": "true", "encryption.key.id": "a", "encryption.keys.a": "c2hvcnQ="}, "must be 32 bytes"),
    ({"encryption.enabled": "true", "encryption.key.id": "x", "encryption.keys.a": KEY_A}, "active encryption key id 'x'"),
    ({"fetch.chunk.cache.prefetch.max.size": "1000"}, "prefetch needs fetch.chunk.cache.path"),
])
def test_bad_config_gives_one_clear_line(tmp_path, extra, message):
    configs = {"chunked.backend": "local", "chunked.backend.config.dir": str(tmp_path), **extra}
    configs = {k: v for k, v in configs.items() if v is not None}
    with pytest.raises(PluginLoadError) as info:
        load_remote_storage_manager("chunked", None, configs)
    text = str(info.value)
    assert message in text and "\n" not in text and "'chunked'" in text
    assert KEY_A not in text
