"""S3 backend behaviour beyond the conformance kit: key layout, manifest, multipart, retries,
failure clean-up, SSE, checksums and configuration errors, against real servers on loopback."""

import json
import logging

import pytest
from s3servers import FaultyS3Proxy, moto_s3, seaweed_s3, unique_prefix  # noqa: F401
from tls_certs import tls_certs  # noqa: F401

from tieredlog.rsm.api import (
    IndexType,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tieredlog.rsm.config import RemoteStorageConfigError
from tieredlog.rsm.keys import uuid_to_base64
from tieredlog.rsm.s3 import MIB, S3RemoteStorageManager
from tieredlog.rsm.testing import make_segment, read_all


def configured(endpoint, prefix=None, **extra) -> S3RemoteStorageManager:
    rsm = S3RemoteStorageManager()
    rsm.configure(endpoint.rsm_configs(prefix=prefix if prefix is not None else unique_prefix(), **extra))
    return rsm


@pytest.fixture
def proxy(moto_s3):
    with FaultyS3Proxy(moto_s3.url) as p:
        yield p


def via_proxy(moto_s3, proxy, **extra) -> S3RemoteStorageManager:
    return configured(moto_s3, **{"storage.s3.endpoint.url": proxy.url, **extra})


def keys_under(endpoint, prefix, bucket=None) -> list[str]:
    response = endpoint.client().list_objects_v2(Bucket=bucket or endpoint.bucket, Prefix=prefix)
    return sorted(o["Key"] for o in response.get("Contents", []))


def test_key_layout_and_manifest(moto_s3, tmp_path):
    prefix = unique_prefix()
    rsm = configured(moto_s3, prefix)
    seg = make_segment(tmp_path, size=3000, topic="orders.v1", partition=12, start_offset=4242)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    tp = seg.metadata.topic_id_partition
    stem = f"{prefix}orders.v1-{uuid_to_base64(tp.topic_id)}/12/00000000000000004242-" \
           f"{uuid_to_base64(seg.metadata.remote_log_segment_id.id)}"
    suffixes = ["index", "leader_epoch_checkpoint", "log", "manifest", "snapshot", "timeindex", "txnindex"]
    assert keys_under(moto_s3, prefix) == sorted(f"{stem}.{s}" for s in suffixes)
    manifest = json.loads(moto_s3.client().get_object(Bucket=moto_s3.bucket, Key=f"{stem}.manifest")["Body"].read())
    assert manifest["start_offset"] == 4242 and manifest["end_offset"] == 4341
    assert manifest["topic"] == "orders.v1" and manifest["partition"] == 12
    assert manifest["segment_leader_epochs"] == [[0, 0], [3, 4242]]
    assert manifest["files"]["log"] == {"name": stem.rsplit("/", 1)[1] + ".log", "size": 3000}
    assert manifest["tx_index_present"] is True
    assert rsm.read_manifest(f"{stem}.manifest") == manifest


def test_manifest_is_written_last_and_deleted_first(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy)
    seg = make_segment(tmp_path, size=1000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    puts = [r.path.split("?")[0].rsplit(".", 1)[1] for r in proxy.seen("PUT")]
    assert puts[-1] == "manifest" and puts.count("manifest") == 1 and "log" in puts[:-1]
    proxy.requests.clear()
    rsm.delete_log_segment_data(seg.metadata)
    # Batched DeleteObjects: the manifest alone, then every other object in one request.
    batches = proxy.seen("POST", "?delete")
    assert len(batches) == 2 and not proxy.seen("DELETE")
    assert keys_under(moto_s3, rsm.key_prefix) == []


def test_ranged_get_uses_inclusive_http_range(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy)
    seg = make_segment(tmp_path, size=5000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.requests.clear()
    assert read_all(rsm.fetch_log_segment(seg.metadata, 10, 20)) == seg.log[10:21]
    assert read_all(rsm.fetch_log_segment(seg.metadata, 100)) == seg.log[100:]
    assert read_all(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log
    gets = proxy.seen("GET", ".log")
    assert [r.headers.get("range") for r in gets] == ["bytes=10-20", "bytes=100-", None]


def test_start_past_end_of_object_reads_nothing(moto_s3, tmp_path):
    rsm = configured(moto_s3)
    seg = make_segment(tmp_path, size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert read_all(rsm.fetch_log_segment(seg.metadata, 100, 200)) == b""


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_large_file_goes_multipart(moto_s3, proxy, tmp_path, concurrency):
    rsm = via_proxy(moto_s3, proxy, **{"storage.s3.multipart.upload.part.size": str(5 * MIB),
                                        "storage.s3.multipart.upload.concurrency": concurrency})
    seg = make_segment(tmp_path, size=12 * MIB, seed=3)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert len(proxy.seen("PUT", "partNumber=")) == 3
    assert len(proxy.seen("POST", "?uploads")) == 1
    key = next(k for k in keys_under(moto_s3, rsm.key_prefix) if k.endswith(".log"))
    assert moto_s3.client().head_object(Bucket=moto_s3.bucket, Key=key)["ETag"].strip('"').endswith("-3")
    assert read_all(rsm.fetch_log_segment(seg.metadata, 5 * MIB - 3, 5 * MIB + 3)) == seg.log[5 * MIB - 3:5 * MIB + 4]


def test_failed_multipart_upload_is_aborted_and_copy_cleaned_up(moto_s3, proxy, tmp_path):
    bucket = moto_s3.new_bucket()
    rsm = via_proxy(moto_s3, proxy, **{"storage.s3.multipart.upload.part.size": str(5 * MIB),
                                        "storage.s3.bucket.name": bucket, "storage.s3.retry.max.attempts": "2"})
    seg = make_segment(tmp_path, size=11 * MIB)
    proxy.fault = lambda r: 500 if r.method == "PUT" and "partNumber=2" in r.path else None
    with pytest.raises(RetriableRemoteStorageException, match="multipart upload"):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert len(proxy.seen("PUT", "partNumber=2")) == 2  # retried up to max attempts
    assert len(proxy.seen("DELETE", "uploadId=")) == 1  # AbortMultipartUpload
    assert moto_s3.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert keys_under(moto_s3, "", bucket=bucket) == []


def test_failed_copy_removes_objects_already_written(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy, **{"storage.s3.retry.max.attempts": "1"})
    seg = make_segment(tmp_path, size=2000)
    proxy.fault = lambda r: 403 if r.method == "PUT" and r.path.split("?")[0].endswith(".snapshot") else None
    with pytest.raises(RemoteStorageException) as info:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert not isinstance(info.value, RetriableRemoteStorageException)
    assert keys_under(moto_s3, rsm.key_prefix) == []


def test_throttling_is_retried_with_backoff_then_succeeds(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy, **{"storage.s3.retry.max.attempts": "4"})
    seg = make_segment(tmp_path, size=2000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    throttled = {"left": 2}

    def fault(request):
        if request.method == "GET" and ".log" in request.path and throttled["left"] > 0:
            throttled["left"] -= 1
            return 503
        return None

    proxy.fault = fault
    assert read_all(rsm.fetch_log_segment(seg.metadata, 0, 99)) == seg.log[:100]
    assert len(proxy.seen("GET", ".log")) == 3


@pytest.mark.parametrize("mode", ["standard", "adaptive"])
def test_persistent_5xx_becomes_retriable_after_max_attempts(moto_s3, proxy, tmp_path, mode):
    rsm = via_proxy(moto_s3, proxy, **{"storage.s3.retry.max.attempts": "3", "storage.s3.retry.mode": mode})
    seg = make_segment(tmp_path, size=500)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.fault = lambda r: 500 if r.method == "GET" else None
    with pytest.raises(RetriableRemoteStorageException, match="InternalError"):
        read_all(rsm.fetch_index(seg.metadata, IndexType.OFFSET))
    # the first GET goes through the plain pool; its 500 is handed to botocore's path, which tries 3 times
    assert len(proxy.seen("GET", ".index")) == 1 + 3


def test_checksums_only_when_required_by_default(moto_s3, proxy, tmp_path):
    seg = make_segment(tmp_path, size=500)
    via_proxy(moto_s3, proxy).copy_log_segment_data(seg.metadata, seg.data)
    sent = {h for r in proxy.seen("PUT") for h in r.headers}
    assert not any(h.startswith("x-amz-checksum-") or h == "x-amz-sdk-checksum-algorithm" for h in sent)
    proxy.requests.clear()
    via_proxy(moto_s3, proxy, **{"storage.s3.checksum.calculation": "when_supported"}).copy_log_segment_data(
        seg.metadata, seg.data)
    sent = {h for r in proxy.seen("PUT") for h in r.headers}
    assert any(h.startswith("x-amz-checksum-") or h == "x-amz-sdk-checksum-algorithm" for h in sent)


def test_sse_and_storage_class_are_applied(moto_s3, tmp_path):
    rsm = configured(moto_s3, **{"storage.s3.sse.algorithm": "AES256", "storage.s3.storage.class": "STANDARD_IA",
                                 "storage.s3.multipart.upload.part.size": str(5 * MIB)})
    seg = make_segment(tmp_path, size=6 * MIB)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    keys = keys_under(moto_s3, rsm.key_prefix)
    assert len(keys) == 7, keys  # every object of the segment, the multipart .log among them
    for key in keys:
        head = moto_s3.client().head_object(Bucket=moto_s3.bucket, Key=key)
        assert head["ServerSideEncryption"] == "AES256", key
        assert head["StorageClass"] == "STANDARD_IA", key


def test_listing_ignores_keys_it_did_not_write(moto_s3, tmp_path):
    prefix = unique_prefix()
    rsm = configured(moto_s3, prefix)
    seg = make_segment(tmp_path, size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    tp = seg.metadata.topic_id_partition
    good_dir = f"{prefix}{tp.topic}-{uuid_to_base64(tp.topic_id)}"
    client = moto_s3.client()
    for junk in [f"{prefix}README", f"{good_dir}/3/notes.txt", f"{good_dir}/03/00000000000000001000-AAAAAAAAAAAAAAAAAAAAAA.log",
                 f"{good_dir}/3/1000-AAAAAAAAAAAAAAAAAAAAAA.log", f"{good_dir}/3/00000000000000001000-AAAAAAAAAAAAAAAAAAAAA.log",
                 f"{good_dir}/3/00000000000000001000-AAAAAAAAAAAAAAAAAAAAAB.log",  # non-canonical base64
                 f"{good_dir}/3/00000000000000001000-AAAAAAAAAAAAAAAAAAAAAA.exe",
                 f"{prefix}bad topic!-{uuid_to_base64(tp.topic_id)}/3/00000000000000001000-AAAAAAAAAAAAAAAAAAAAAA.log",
                 f"{prefix}../x-{uuid_to_base64(tp.topic_id)}/3/00000000000000001000-AAAAAAAAAAAAAAAAAAAAAA.log"]:
        client.put_object(Bucket=moto_s3.bucket, Key=junk, Body=b"junk")
    listed = rsm.list_segment_objects()
    assert sorted(k.suffix for k in listed) == sorted(
        ["log", "index", "timeindex", "txnindex", "snapshot", "leader_epoch_checkpoint", "manifest"])
    assert {(k.topic, k.partition, k.start_offset, k.segment_id) for k in listed} == {
        (tp.topic, 3, 1000, seg.metadata.remote_log_segment_id.id)}
    assert rsm.list_segment_objects(tp) == listed


# -- configuration ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"storage.s3.bucket.name": None}, "missing required config rsm.config.storage.s3.bucket.name"),
    ({"storage.s3.multipart.upload.part.size": "1024"}, "must be >= 5242880"),
    ({"storage.s3.multipart.upload.part.size": "big"}, "expected an integer"),
    ({"storage.s3.path.style.access.enabled": "yes"}, "expected true or false"),
    ({"storage.s3.checksum.calculation": "always"}, "expected one of when_required, when_supported"),
    ({"storage.s3.retry.mode": "never"}, "expected one of standard, adaptive, legacy"),
    ({"storage.s3.endpoint.url": "127.0.0.1:9000"}, "expected http:// or https://"),
    ({"storage.aws.secret.access.key": None}, "must be set together"),
    ({"storage.s3.sse.kms.key.id": "k1"}, "needs storage.s3.sse.algorithm=aws:kms"),
    ({"key.prefix": "../escape/"}, "rsm.config.key.prefix"),
    ({"storage.s3.bucket.name": "no-such-bucket-xyz"}, "S3 bucket 'no-such-bucket-xyz' does not exist at http://127.0.0.1:"),
])
def test_bad_config_gives_one_clear_line(moto_s3, change, message):
    configs = moto_s3.rsm_configs()
    for key, value in change.items():
        if value is None:
            configs.pop(key)
        else:
            configs[key] = value
    with pytest.raises(RemoteStorageConfigError) as info:
        S3RemoteStorageManager().configure(configs)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert moto_s3.secret_key not in str(info.value)


def test_bad_credentials_fail_at_configure_without_leaking_them(seaweed_s3, caplog):
    caplog.set_level(logging.DEBUG)
    wrong_secret = "wrong-secret-value-1234"
    configs = seaweed_s3.rsm_configs(**{"storage.aws.secret.access.key": wrong_secret,
                                        "storage.s3.retry.max.attempts": "1"})
    with pytest.raises(RemoteStorageConfigError) as info:
        S3RemoteStorageManager().configure(configs)
    text = str(info.value)
    assert "refused access (HTTP 403)" in text and "storage.aws.access.key.id" in text and "\n" not in text
    assert wrong_secret not in text and wrong_secret not in caplog.text


def test_unreachable_endpoint_fails_at_configure(moto_s3):
    from s3servers import free_port
    configs = moto_s3.rsm_configs(**{"storage.s3.endpoint.url": f"http://127.0.0.1:{free_port()}",
                                     "storage.s3.retry.max.attempts": "1"})
    with pytest.raises(RemoteStorageConfigError, match="cannot reach S3 bucket 'tieredlog'"):
        S3RemoteStorageManager().configure(configs)


def test_configured_secret_is_never_logged(seaweed_s3, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    rsm = configured(seaweed_s3)
    seg = make_segment(tmp_path, size=100)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    read_all(rsm.fetch_log_segment(seg.metadata, 0))
    rsm.delete_log_segment_data(seg.metadata)
    assert "S3 remote storage: bucket" in caplog.text
    assert seaweed_s3.secret_key not in caplog.text
    # the GETs went through presigned URLs (below), whose signatures are never logged
    assert "X-Amz-Signature=" not in caplog.text


def test_ranged_gets_go_through_presigned_urls_and_errors_through_botocore(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy)
    seg = make_segment(tmp_path, size=5000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.requests.clear()
    assert read_all(rsm.fetch_log_segment(seg.metadata, 10, 20)) == seg.log[10:21]
    assert read_all(rsm.fetch_log_segment(seg.metadata, 5000, 6000)) == b""  # 416: botocore's answer
    gets = proxy.seen("GET", ".log")
    # a presigned URL carries its signature in the query and no Authorization header
    assert "X-Amz-Signature=" in gets[0].path and "authorization" not in gets[0].headers
    assert gets[0].headers["range"] == "bytes=10-20"
    assert [("X-Amz-Signature=" in g.path, "authorization" in g.headers) for g in gets[1:]] == [(True, False), (False, True)]
    # a store that refuses: the plain GET's 403 is sent again by botocore, whose error is reported
    proxy.fault = lambda r: 403 if r.method == "GET" else None
    with pytest.raises(RemoteStorageException, match="AccessDenied"):
        read_all(rsm.fetch_log_segment(seg.metadata, 0, 99))
    proxy.fault = lambda r: None
    # a missing object is RemoteResourceNotFoundException, as through botocore alone
    rsm.delete_log_segment_data(seg.metadata)
    with pytest.raises(RemoteResourceNotFoundException):
        read_all(rsm.fetch_log_segment(seg.metadata, 0, 99))


def test_a_body_cut_short_on_the_presigned_path_is_retriable(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy)
    seg = make_segment(tmp_path, size=300_000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.cut = lambda r: 1000 if r.method == "GET" and ".log" in r.path else None
    # read whole (the remote reader's way) or piece by piece, the missing bytes are an error
    with pytest.raises(RetriableRemoteStorageException, match="IncompleteRead"):
        read_all(rsm.fetch_log_segment(seg.metadata, 0, 99_999))
    with pytest.raises(RetriableRemoteStorageException, match="1000 bytes short|99000 bytes short"):
        with rsm.fetch_log_segment(seg.metadata, 0, 99_999) as stream:
            assert stream.read(1000) == seg.log[:1000]
            stream.read(5000)
    proxy.cut = lambda r: None
    assert read_all(rsm.fetch_log_segment(seg.metadata, 0, 99_999)) == seg.log[:100_000]


def test_presigned_gets_reuse_connections_and_replace_those_the_server_closed(moto_s3, proxy, tmp_path):
    rsm = via_proxy(moto_s3, proxy)
    seg = make_segment(tmp_path, size=50_000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.requests.clear()
    before = proxy.connections
    for start in range(0, 50_000, 10_000):
        assert read_all(rsm.fetch_log_segment(seg.metadata, start, start + 9_999)) == seg.log[start:start + 10_000]
    assert proxy.connections - before == 1  # one kept-alive connection for the five GETs
    # a server that closes connections after each answer (an idle timeout, without saying so)
    proxy.close_after_answer = True
    before = proxy.connections
    for start in range(0, 50_000, 10_000):
        assert read_all(rsm.fetch_log_segment(seg.metadata, start, start + 9_999)) == seg.log[start:start + 10_000]
    assert proxy.connections - before == 4  # the first went on the connection kept from before
    gets = proxy.seen("GET", ".log")
    # every GET was a presigned one: none fell back to botocore (which signs an Authorization header)
    assert len(gets) == 10 and not any("authorization" in g.headers for g in gets)


def test_presigned_gets_over_https_verify_the_server(moto_s3, tls_certs, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tls_certs.ca_pem))  # botocore's and the presigned GETs' trust
    with FaultyS3Proxy(moto_s3.url, tls=tls_certs.broker_pem) as proxy:
        assert proxy.url.startswith("https://")
        rsm = via_proxy(moto_s3, proxy)
        seg = make_segment(tmp_path, size=5000)
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        proxy.requests.clear()
        assert read_all(rsm.fetch_log_segment(seg.metadata, 100, 199)) == seg.log[100:200]
        gets = proxy.seen("GET", ".log")
        assert len(gets) == 1 and "X-Amz-Signature=" in gets[0].path
        # trusting another CA, neither path gets through: the error is botocore's, and says so
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tls_certs.other_ca_pem))
        with pytest.raises(RemoteStorageConfigError, match="cannot reach S3 bucket|SSL"):
            via_proxy(moto_s3, proxy)


def test_body_reads_whole_range_at_once_or_piecewise(moto_s3, tmp_path):
    rsm = configured(moto_s3)
    seg = make_segment(tmp_path, size=300_000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    # a read asking for at least what is left takes the rest in one read (the remote reader's way)
    with rsm.fetch_log_segment(seg.metadata, 1000, 250_999) as stream:
        assert stream.read(10 ** 7) == seg.log[1000:251_000]
        assert stream.read(10) == b""
    # smaller reads come piece by piece, then the rest, then nothing
    with rsm.fetch_log_segment(seg.metadata, 7) as stream:
        assert stream.read(100) == seg.log[7:107]
        buf = bytearray(50)
        assert stream.readinto(buf) == 50 and bytes(buf) == seg.log[107:157]
        assert stream.read() == seg.log[157:]
        assert stream.read() == b""
