"""S3 RemoteStorageManager on boto3: AWS S3, MinIO, LocalStack, SeaweedFS, Ceph, ...

Config names follow Aiven's plugin (given here without the broker's ``rsm.config.`` prefix):

=========================================== ===============================================================
``storage.s3.bucket.name``                  required; checked with HeadBucket at configure()
``key.prefix``                              prepended verbatim to every key (``tiered/`` or ``cluster1-``)
``storage.s3.endpoint.url``                 for S3-compatibles (``http://127.0.0.1:9000``)
``storage.s3.region``                       default: the AWS chain, else ``us-east-1``
``storage.s3.path.style.access.enabled``    ``true`` for MinIO/SeaweedFS/LocalStack without DNS tricks
``storage.aws.access.key.id`` / ``storage.aws.secret.access.key`` / ``storage.aws.session.token``
                                            never logged; when absent, boto3's default credential chain
``storage.s3.multipart.upload.part.size``   bytes, default 25 MiB, min 5 MiB; larger files go multipart
``storage.s3.multipart.upload.concurrency`` parts uploaded at once per file, default 4
``storage.s3.checksum.calculation``         ``when_required`` (default) or ``when_supported``
``storage.s3.checksum.validation``          ``when_required`` (default) or ``when_supported``
``storage.s3.sse.algorithm``                ``AES256``, ``aws:kms`` or ``aws:kms:dsse``
``storage.s3.sse.kms.key.id``               KMS key for the ``aws:kms*`` algorithms
``storage.s3.storage.class``                e.g. ``STANDARD_IA``, ``INTELLIGENT_TIERING``
``storage.s3.retry.mode``                   botocore ``standard`` (default), ``adaptive`` or ``legacy``
``storage.s3.retry.max.attempts``           total attempts per request, default 5 (a GET: one more, the
                                            first, sent outside botocore: see ``s3_gets``)
``storage.s3.api.call.timeout.ms``          connect and read timeout per attempt, default 30000
``storage.s3.max.connections``              HTTP pool size, default 32 (reader pool + copier)
=========================================== ===============================================================

Checksums default to ``when_required`` because boto3 >= 1.36 otherwise sends CRC trailers that older
MinIO, Ceph and other S3-compatibles reject.
"""

from __future__ import annotations

import http.client
import io
import logging
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Mapping, cast

import boto3
import botocore.exceptions
import botocore.httpsession
import botocore.session
from botocore.config import Config

from tieredlog.rsm.api import (
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RetriableRemoteStorageException,
)
from tieredlog.rsm.config import ConfigReader, RemoteStorageConfigError, validated_prefix
from tieredlog.rsm.objectstore import ObjectStoreRemoteStorageManager
from tieredlog.rsm.s3_gets import PresignedGets

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB  # S3's own minimum for every part but the last
MAX_PARTS = 10_000
DELETE_BATCH = 1000  # DeleteObjects limit

# Every config this backend reads (``broker.id`` comes from the broker). Others are reported.
CONFIG_KEYS = frozenset({
    "storage.s3.bucket.name", "key.prefix", "storage.s3.endpoint.url", "storage.s3.region",
    "storage.s3.path.style.access.enabled", "storage.aws.access.key.id", "storage.aws.secret.access.key",
    "storage.aws.session.token", "storage.s3.multipart.upload.part.size", "storage.s3.checksum.calculation",
    "storage.s3.checksum.validation", "storage.s3.sse.algorithm", "storage.s3.sse.kms.key.id",
    "storage.s3.storage.class", "storage.s3.multipart.upload.concurrency", "storage.s3.retry.mode", "storage.s3.retry.max.attempts",
    "storage.s3.api.call.timeout.ms", "storage.s3.max.connections", "broker.id",
})

_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchBucket"}
_RETRIABLE_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
    "RequestThrottled", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed",
    "503", "500", "502", "504",
}


def map_s3_error(exc: BaseException, what: str) -> RemoteStorageException:
    """One tieredlog exception for any boto3 failure; ``what`` names the operation and key."""
    if isinstance(exc, RemoteStorageException):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
        text = f"{what}: {code or status} {error.get('Message', '')}".strip()
        if code in _NOT_FOUND_CODES or status == 404:
            return RemoteResourceNotFoundException(text)
        if code in _RETRIABLE_CODES or status >= 500 or status == 429:
            return RetriableRemoteStorageException(text)
        return RemoteStorageException(text)
    if isinstance(exc, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError,
                        botocore.exceptions.ReadTimeoutError, ConnectionError, TimeoutError)):
        return RetriableRemoteStorageException(f"{what}: {type(exc).__name__}: {exc}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return RemoteStorageException(f"{what}: no AWS credentials found (set storage.aws.access.key.id or the AWS chain)")
    return RemoteStorageException(f"{what}: {type(exc).__name__}: {exc}")


class S3Body(io.RawIOBase):
    """The body of one GetObject response.

    ``read()`` / ``read(n)`` with ``n`` covering the rest of the body take it in one read: one
    copy from the socket into one ``bytes``, the loop in C (a remote reader asks for the whole
    range it requested, so that is the common case). Smaller reads go through botocore's
    StreamingBody piece by piece. Read failures come out through ``on_error`` (tieredlog
    exceptions); a body cut short raises instead of returning fewer bytes.
    """

    def __init__(
        self, body: Any, length: int | None, on_error: Callable[[Exception], BaseException]
    ) -> None:  # body: botocore's StreamingBody
        super().__init__()
        self._body = body
        self._left = length
        self._on_error = on_error

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self._left == 0:
            return b""
        try:
            data: bytes
            if size is None or size < 0 or (self._left is not None and size >= self._left):
                data = self._body.read()  # botocore checks the length against Content-Length
            elif size == 0:
                return b""
            else:
                data = self._body.read(size)
        except Exception as exc:
            raise self._on_error(exc) from exc
        if self._left is not None:
            self._left -= len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer)
        data = self.read(len(view))
        n = len(data)
        view[:n] = data
        return n

    def close(self) -> None:
        try:
            self._body.close()
        finally:
            super().close()


def _presigned_gets_usable(checksum_validation: str | None) -> bool:
    # botocore validates response checksums when asked to, and sends requests through the proxies
    # the environment names: neither is done by PresignedGets, so those setups keep botocore's path
    return checksum_validation == "when_required" and not urllib.request.getproxies()


def _read_error(exc: BaseException, key: str) -> RemoteStorageException:
    if isinstance(exc, (http.client.HTTPException, OSError)):  # a reset, a timeout, a body cut short
        return RetriableRemoteStorageException(f"reading {key}: {type(exc).__name__}: {exc}")
    return map_s3_error(exc, f"reading {key}")


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """Thread safe: one boto3 client (clients are thread safe) shared by every caller."""

    def __init__(self) -> None:
        self._client: Any = None  # a boto3 S3 client once configured
        self.bucket = ""
        self.key_prefix = ""
        self.part_size = 25 * MIB
        self.upload_concurrency = 4
        self._extra_put_args: dict[str, str] = {}
        self._presigned_gets: PresignedGets | None = None

    # -- configuration -----------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, object]) -> None:
        reader = ConfigReader(configs)
        for unknown in sorted(k for k in configs if k.startswith(("storage.", "key.")) and k not in CONFIG_KEYS):
            log.warning("unknown S3 remote storage config rsm.config.%s ignored", unknown)  # a typo, usually
        self.bucket = reader.string("storage.s3.bucket.name")
        self.key_prefix = validated_prefix(reader)
        endpoint = reader.string("storage.s3.endpoint.url", None)
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise RemoteStorageConfigError(
                f"invalid config rsm.config.storage.s3.endpoint.url={endpoint!r}: expected http:// or https://")
        region = reader.string("storage.s3.region", None)
        path_style = reader.boolean("storage.s3.path.style.access.enabled", False)
        self.part_size = reader.integer("storage.s3.multipart.upload.part.size", 25 * MIB,
                                        minimum=MIN_PART_SIZE, maximum=5 * 1024 * MIB)
        self.upload_concurrency = reader.integer("storage.s3.multipart.upload.concurrency", 4,
                                                 minimum=1, maximum=64)
        checksum_calc = reader.choice("storage.s3.checksum.calculation", "when_required",
                                      ("when_required", "when_supported"))
        checksum_valid = reader.choice("storage.s3.checksum.validation", "when_required",
                                       ("when_required", "when_supported"))
        sse = reader.choice("storage.s3.sse.algorithm", None, ("AES256", "aws:kms", "aws:kms:dsse"))
        kms_key = reader.string("storage.s3.sse.kms.key.id", None)
        if kms_key and sse not in ("aws:kms", "aws:kms:dsse"):
            raise RemoteStorageConfigError(
                "invalid config rsm.config.storage.s3.sse.kms.key.id: needs storage.s3.sse.algorithm=aws:kms or aws:kms:dsse")
        storage_class = reader.string("storage.s3.storage.class", None)
        retry_mode = reader.choice("storage.s3.retry.mode", "standard", ("standard", "adaptive", "legacy"))
        max_attempts = reader.integer("storage.s3.retry.max.attempts", 5, minimum=1, maximum=50)
        timeout_ms = reader.integer("storage.s3.api.call.timeout.ms", 30_000, minimum=1)
        max_connections = reader.integer("storage.s3.max.connections", 32, minimum=1)
        access_key = reader.string("storage.aws.access.key.id", None, secret=True)
        secret_key = reader.string("storage.aws.secret.access.key", None, secret=True)
        session_token = reader.string("storage.aws.session.token", None, secret=True)
        if (access_key is None) != (secret_key is None):
            raise RemoteStorageConfigError(
                "invalid config: rsm.config.storage.aws.access.key.id and rsm.config.storage.aws.secret.access.key "
                "must be set together (or neither, for the default AWS credential chain)")

        self._extra_put_args = {}
        if sse:
            self._extra_put_args["ServerSideEncryption"] = sse
        if kms_key:
            self._extra_put_args["SSEKMSKeyId"] = kms_key
        if storage_class:
            self._extra_put_args["StorageClass"] = storage_class

        config = Config(
            # SigV4 for presigned URLs too (PresignedGets): botocore presigns with SigV2 in us-east-1 otherwise
            signature_version="s3v4",
            s3={"addressing_style": "path" if path_style else "auto"},
            retries={"mode": retry_mode, "total_max_attempts": max_attempts},
            request_checksum_calculation=checksum_calc,
            response_checksum_validation=checksum_valid,
            connect_timeout=timeout_ms / 1000,
            read_timeout=timeout_ms / 1000,
            max_pool_connections=max_connections,
        )
        core = botocore.session.get_session()
        # Response timestamps stay the strings the server sent: this backend reads none of them, and
        # dateutil's parse of every GetObject's Last-Modified was a tenth of a ranged read's CPU.
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        session = boto3.session.Session(
            aws_access_key_id=access_key, aws_secret_access_key=secret_key, aws_session_token=session_token,
            region_name=region, botocore_session=core,
        )
        self._client = session.client(
            "s3", endpoint_url=endpoint, config=config, region_name=region or session.region_name or "us-east-1"
        )
        self._check_bucket(endpoint)
        if self._presigned_gets is not None:
            self._presigned_gets.close()
        self._presigned_gets = None
        if _presigned_gets_usable(checksum_valid):
            ca_bundle = core.get_config_variable("ca_bundle")  # AWS_CA_BUNDLE, ~/.aws/config
            self._presigned_gets = PresignedGets(self._client, self.bucket, max_connections, timeout_ms / 1000,
                                                 ca_bundle or botocore.httpsession.get_cert_path(True))
        log.info("S3 remote storage: bucket %s, prefix %r, endpoint %s, part size %d",
                 self.bucket, self.key_prefix, endpoint or "AWS", self.part_size)

    def _check_bucket(self, endpoint: str | None) -> None:
        where = f"at {endpoint}" if endpoint else "on AWS"
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status == 404:
                raise RemoteStorageConfigError(f"S3 bucket {self.bucket!r} does not exist {where} "
                                               "(rsm.config.storage.s3.bucket.name)") from None
            if status in (301, 400, 403):
                raise RemoteStorageConfigError(
                    f"S3 bucket {self.bucket!r} {where} refused access (HTTP {status}): check "
                    "rsm.config.storage.aws.access.key.id/secret.access.key or the AWS credential chain, "
                    "and rsm.config.storage.s3.region") from None
            raise map_s3_error(exc, f"HeadBucket {self.bucket}") from None
        except botocore.exceptions.NoCredentialsError:
            raise RemoteStorageConfigError(
                "no AWS credentials: set rsm.config.storage.aws.access.key.id and "
                "rsm.config.storage.aws.secret.access.key, or configure the AWS credential chain") from None
        except Exception as exc:
            raise RemoteStorageConfigError(
                f"cannot reach S3 bucket {self.bucket!r} {where}: {map_s3_error(exc, 'HeadBucket')}") from None

    @property
    def client(self) -> Any:  # a boto3 S3 client (boto3 has no type information)
        if self._client is None:
            raise RemoteStorageException("S3RemoteStorageManager used before configure()")
        return self._client

    # -- primitives ----------------------------------------------------------------------------------

    def _put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **self._extra_put_args)
        except Exception as exc:
            raise map_s3_error(exc, f"PutObject {key}") from exc

    def _put_file(self, key: str, path: Path) -> None:
        size = path.stat().st_size
        if size <= self.part_size:
            self._put_bytes(key, path.read_bytes())
            return
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        try:
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, **self._extra_put_args)["UploadId"]
        except Exception as exc:
            raise map_s3_error(exc, f"CreateMultipartUpload {key}") from exc
        try:
            count = -(-size // part_size)

            def upload(number: int) -> dict[str, Any]:
                # Each task reads its own part when it runs: at most `concurrency` parts in memory.
                with path.open("rb") as f:
                    f.seek((number - 1) * part_size)
                    chunk = f.read(part_size)
                response = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk)
                return {"PartNumber": number, "ETag": response["ETag"]}

            workers = min(self.upload_concurrency, count)
            if workers == 1:
                parts = [upload(n) for n in range(1, count + 1)]
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="s3-part") as pool:
                    parts = list(pool.map(upload, range(1, count + 1)))
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
        except Exception as exc:
            # An unfinished upload keeps its parts (and bills for them) until aborted.
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception as abort_exc:
                log.warning("could not abort multipart upload of %s: %s", key, map_s3_error(abort_exc, "Abort"))
            raise map_s3_error(exc, f"multipart upload {key}") from exc

    def _get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        byte_range = f"bytes={start}-" if end is None else f"bytes={start}-{end}"
        args: dict[str, str] = {"Bucket": self.bucket, "Key": key}
        if start > 0 or end is not None:
            args["Range"] = byte_range
        if self._presigned_gets is not None:
            got = self._presigned_gets.get(key, args.get("Range"))
            if got is not None:
                return cast(BinaryIO, S3Body(got[0], got[1], lambda e: _read_error(e, key)))
        try:
            response = self.client.get_object(**args)
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                # The start lies past the end of an existing object: nothing to read.
                return io.BytesIO(b"")
            raise map_s3_error(exc, f"GetObject {key} {byte_range}") from exc
        except Exception as exc:
            raise map_s3_error(exc, f"GetObject {key} {byte_range}") from exc
        body = S3Body(response["Body"], response.get("ContentLength"), lambda e: map_s3_error(e, f"reading {key}"))
        # A raw binary stream: read, readinto, close and the context manager are what readers use.
        return cast(BinaryIO, body)

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i:i + DELETE_BATCH]
            if not batch:
                continue
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            except Exception as exc:
                raise map_s3_error(exc, f"DeleteObjects {batch[0]} (+{len(batch) - 1})") from exc
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                cls = RetriableRemoteStorageException if first.get("Code") in _RETRIABLE_CODES else RemoteStorageException
                raise cls(f"DeleteObjects: {len(errors)} keys failed, first {first.get('Key')}: "
                          f"{first.get('Code')} {first.get('Message', '')}")

    def _list_keys(self, prefix: str) -> Iterator[str]:
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield item["Key"]
        except Exception as exc:
            raise map_s3_error(exc, f"ListObjectsV2 {prefix}") from exc

    def close(self) -> None:
        if self._presigned_gets is not None:
            self._presigned_gets.close()
            self._presigned_gets = None
        if self._client is not None:
            self._client.close()
            self._client = None
