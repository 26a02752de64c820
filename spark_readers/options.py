"""The reader's options, named and shaped as Spark's Kafka source names them (matched case-insensitively).

- ``path``: the remote tier (see :mod:`spark_readers.storage`); storage options pass through there. Or
  the broker's own words instead: ``remote.log.storage.manager.class.name`` (``.class.path``) and every
  ``rsm.config.*`` key.
- ``topic`` or ``subscribe`` (comma-separated names), ``topicPattern`` or ``subscribePattern`` (a regex
  matched against the whole name): exactly one of them.
- ``startingOffsets``: ``earliest`` (default) or JSON ``{"t":{"0":23,"1":-2}}`` (-2 = earliest).
- ``endingOffsets``: ``latest`` (default: the end of the tiered part) or JSON (-1 = latest).
  With JSON, every partition of the topic must be listed, as in Spark.
- ``startingTimestamp`` (epoch ms, every partition) or ``startingOffsetsByTimestamp`` (JSON of epoch ms
  per partition): start at the earliest offset whose timestamp is at or after it; they win over
  ``startingOffsets`` in that order, as in Spark. ``startingOffsetsByTimestampStrategy``: ``error``
  (default) fails when no record is that recent, ``latest`` starts at the end instead.
- ``endingTimestamp`` / ``endingOffsetsByTimestamp``: end (exclusive) at the earliest offset whose
  timestamp is at or after it; when none is, at the end of the tiered part.
- ``failOnDataLoss``: ``true`` (default) fails when a requested offset is no longer in the remote tier,
  a hole lies in the range, or a planned segment is deleted while it is read; ``false`` reads what is
  there (a deleted segment's rows are skipped with a warning).
- ``includeHeaders``: ``false`` (default).
- ``kafka.isolation.level``: ``read_committed`` (default here; Spark passes the option to its Kafka
  consumer, whose default is ``read_uncommitted``) skips the records of aborted transactions and stops
  at a transaction still open at the end of the tiered part; ``read_uncommitted`` reads every record
  (see :mod:`spark_readers.transactions`). Control batches are never rows.
- ``maxBytesPerPartition`` (or its other name ``maxBytesPerTask``, which wins): a segment slice larger
  than this (bytes, default 64 MiB) is split into several input partitions at batch boundaries (from
  the remote offset index), none reading more unless one index interval is larger.
- ``pushFilters``: ``true`` pushes ``where`` clauses on ``partition``, ``offset`` and ``timestamp`` into
  the plan (:mod:`spark_readers.filters`); default ``false``.
- ``assign``: JSON ``{"t":[0,1]}``, the partitions to read, instead of the topic options (as Spark's).
- ``minPartitions`` / ``maxRecordsPerPartition``: split offset ranges into more input partitions, as
  Spark's Kafka source splits them (see :mod:`spark_readers.planner`).
- ``metadataSource``: where the committed segments are listed from: ``manifests`` (default: the
  manifests in the remote tier) or ``brokers`` (``__remote_log_metadata``, read through the brokers of
  ``kafka.bootstrap.servers``, for a tier whose writer leaves no manifests; see
  :mod:`spark_readers.remote_log_metadata`).
- ``kafka.bootstrap.servers``: read the offsets not in the remote tier yet from the brokers; every
  ``kafka.*`` option (prefix removed) configures those clients (librdkafka's names), and
  ``kafkaConsumer.pollTimeoutMs`` bounds how long a task waits for its range (see
  :mod:`spark_readers.brokers`).

Streaming queries (``parse_options(..., streaming=True)``), as Spark's Kafka source: ``startingOffsets``
also takes ``latest`` (and -1 in JSON); the ending options are refused; ``maxOffsetsPerTrigger`` caps
the offsets one micro-batch reads (see :mod:`spark_readers.stream`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Mapping

from tieredlog.rsm.keys import InvalidKeyError, validate_topic

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024
# Spark's kafkaConsumer.pollTimeoutMs default (spark.network.timeout)
DEFAULT_POLL_TIMEOUT_MS = 120_000
# metadataSource: the bucket's segment manifests, or __remote_log_metadata through the brokers
MANIFESTS = "manifests"
BROKERS = "brokers"
METADATA_SOURCES = (MANIFESTS, BROKERS)
# The consumer settings Spark's Kafka source refuses as kafka.* options: the reader owns them.
RESERVED_KAFKA_OPTIONS = ("group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer",
                          "value.deserializer", "interceptor.classes")


class OptionError(ValueError):
    """An option Spark's Kafka source would also refuse, or one of ours with a bad value."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest`` / ``latest`` for every partition, or one offset (or -2 / -1) per listed partition."""

    default: int | None
    per_topic: dict[str, dict[int, int]]
    # The values are epoch-ms timestamps to look up, not offsets.
    by_timestamp: bool = False

    def for_partition(self, topic: str, partition: int, option: str) -> int:
        if self.default is not None:
            return self.default
        try:
            return self.per_topic[topic][partition]
        except KeyError:
            raise OptionError(f"{option} must list every partition of {topic}: partition {partition} is "
                              "missing") from None


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    path: str
    topics: tuple[str, ...]
    topic_pattern: re.Pattern[str] | None
    starting: OffsetSpec
    ending: OffsetSpec
    # startingOffsetsByTimestampStrategy=latest
    start_latest_when_no_timestamp: bool
    fail_on_data_loss: bool
    include_headers: bool
    max_bytes_per_partition: int
    # storage.* and key.* options, lower-cased, for the RSM; kept out of repr (credentials)
    storage: dict[str, str] = field(repr=False)
    # streaming only: offsets per micro-batch over all partitions (None: no limit)
    max_offsets_per_trigger: int | None = None
    # kafka.isolation.level=read_committed
    read_committed: bool = True
    # assign: topic -> the partitions to read (None: every partition of the topics)
    assign: dict[str, tuple[int, ...]] | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    # kafka.* options without the prefix, for the brokers' clients; kept out of repr (SASL passwords)
    kafka: dict[str, str] = field(default_factory=dict, repr=False)
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    # metadataSource: MANIFESTS or BROKERS
    metadata_source: str = MANIFESTS

    @property
    def reads_brokers(self) -> bool:
        return "bootstrap.servers" in self.kafka


def include_headers(raw: Mapping[str, str]) -> bool:
    """``includeHeaders`` alone: the schema depends only on it, and is asked for before Spark says
    whether the query is a batch or a stream (whose options differ)."""
    return _boolean({k.lower(): v for k, v in raw.items()}, "includeheaders", False)


def push_filters(raw: Mapping[str, str]) -> bool:
    """``pushFilters``: whether the reader takes Spark's pushed filters (the session must then set
    ``spark.sql.python.filterPushdown.enabled=true``, see :mod:`spark_readers.datasource`)."""
    return _boolean({k.lower(): v for k, v in raw.items()}, "pushfilters", False)


def parse_options(raw: Mapping[str, str], streaming: bool = False) -> ReaderOptions:
    options = {k.lower(): v for k, v in raw.items()}
    if streaming:
        ending = [name for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
                  if options.get(name.lower())]
        if ending:
            # as Spark's Kafka source: a stream has no end; the checkpoint says where it is
            raise OptionError(f"option {ending[0]} is not valid in streaming queries")
    starting_words = {"earliest": EARLIEST, "latest": LATEST} if streaming else {"earliest": EARLIEST}
    named = [k for k in ("topic", "subscribe", "topicpattern", "subscribepattern", "assign") if options.get(k)]
    if len(named) != 1:
        raise OptionError("set exactly one of topic, subscribe, topicPattern, subscribePattern, assign"
                          + (f" (got {', '.join(named)})" if named else ""))
    topics: tuple[str, ...] = ()
    pattern = None
    assign = None
    if named[0] == "assign":
        assign = _assign(options["assign"])
        topics = tuple(sorted(assign))
    elif named[0] in ("topic", "subscribe"):
        try:
            topics = tuple(validate_topic(t.strip()) for t in options[named[0]].split(",") if t.strip())
        except InvalidKeyError as exc:
            raise OptionError(f"option {named[0]}: {exc}") from None
    else:
        try:
            pattern = re.compile(options[named[0]])
        except re.error as exc:
            raise OptionError(f"option {named[0]} is not a valid regular expression: {exc}") from None
    return ReaderOptions(
        path=options.get("path", ""),
        topics=topics,
        topic_pattern=pattern,
        starting=_timestamp_spec(options, "starting")
        or _offset_spec(options, "startingoffsets", "startingOffsets", "earliest", starting_words),
        ending=_timestamp_spec(options, "ending")
        or _offset_spec(options, "endingoffsets", "endingOffsets", "latest", {"latest": LATEST}),
        start_latest_when_no_timestamp=_strategy(options),
        fail_on_data_loss=_boolean(options, "failondataloss", True),
        include_headers=_boolean(options, "includeheaders", False),
        max_bytes_per_partition=_positive(options, "maxbytespertask", 0)
        or _positive(options, "maxbytesperpartition", DEFAULT_MAX_BYTES_PER_PARTITION),
        storage=_storage(raw, options),
        max_offsets_per_trigger=_positive(options, "maxoffsetspertrigger", 0) or None,
        read_committed=_isolation(options),
        assign=assign,
        min_partitions=_positive(options, "minpartitions", 0) or None,
        max_records_per_partition=_positive(options, "maxrecordsperpartition", 0) or None,
        kafka=_kafka(options),
        poll_timeout_ms=_positive(options, "kafkaconsumer.polltimeoutms", DEFAULT_POLL_TIMEOUT_MS),
        metadata_source=_metadata_source(options),
    )


def _storage(raw: Mapping[str, str], options: Mapping[str, str]) -> dict[str, str]:
    """The storage options: the short form's ``storage.*`` and ``key.*``, and the broker's own
    ``remote.log.storage.manager.class.*`` and ``rsm.config.*`` (whose keys keep their case: a plugin's
    names may have capitals, as an encryption key id can)."""
    out = {k: v for k, v in options.items() if k.startswith(("storage.", "key.", "remote.log.storage.manager."))}
    for key, value in raw.items():
        if key.lower().startswith("rsm.config."):
            out["rsm.config." + key[len("rsm.config."):]] = value
    return out


def _metadata_source(options: Mapping[str, str]) -> str:
    text = (options.get("metadatasource") or MANIFESTS).strip().lower()
    if text not in METADATA_SOURCES:
        raise OptionError(f"option metadataSource must be {' or '.join(METADATA_SOURCES)}, not {text!r}")
    if text == BROKERS and not options.get("kafka.bootstrap.servers"):
        raise OptionError("option metadataSource=brokers reads __remote_log_metadata through the brokers: "
                          "set kafka.bootstrap.servers")
    return text


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        body = json.loads(text)
        out = {validate_topic(t): tuple(sorted({int(p) for p in parts})) for t, parts in body.items()}
    except (ValueError, AttributeError, TypeError, InvalidKeyError) as exc:
        raise OptionError(f'option assign must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}: {exc}') from None
    if not out or any(not parts or min(parts) < 0 for parts in out.values()):
        raise OptionError("option assign must name at least one partition of each topic, none negative")
    return out


def _kafka(options: Mapping[str, str]) -> dict[str, str]:
    out = {k.removeprefix("kafka."): v for k, v in options.items() if k.startswith("kafka.")}
    for name in RESERVED_KAFKA_OPTIONS:
        if name in out:
            # as Spark's Kafka source: the reader owns these consumer settings
            raise OptionError(f"Kafka option '{name}' is not supported: the reader sets it for its consumers itself")
    # kafka.isolation.level is read above and handed to the consumer as the reader resolved it
    out.pop("isolation.level", None)
    return out


def _offset_spec(options: Mapping[str, str], key: str, name: str, default: str,
                 words: Mapping[str, int]) -> OffsetSpec:
    text = options.get(key, default).strip()
    if text.lower() in words:
        return OffsetSpec(words[text.lower()], {})
    try:
        body = json.loads(text)
        per_topic = {validate_topic(t): {int(p): int(o) for p, o in parts.items()} for t, parts in body.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(f"option {name} must be {' or '.join(words)} or JSON like "
                          f'{{"topic":{{"0":23}}}}: {exc}') from None
    allowed = tuple(words.values())
    for topic, parts in per_topic.items():
        for partition, offset in parts.items():
            if offset < 0 and offset not in allowed:
                raise OptionError(f"option {name}: offset {offset} for {topic}-{partition} is not allowed")
    return OffsetSpec(None, per_topic)


def _timestamp_spec(options: Mapping[str, str], side: str) -> OffsetSpec | None:
    single = options.get(f"{side}timestamp")
    if single:
        return OffsetSpec(_timestamp(single, f"{side}Timestamp"), {}, by_timestamp=True)
    text = options.get(f"{side}offsetsbytimestamp")
    if not text:
        return None
    name = f"{side}OffsetsByTimestamp"
    try:
        body = json.loads(text)
        per_topic = {validate_topic(t): {int(p): _timestamp(v, name) for p, v in parts.items()}
                     for t, parts in body.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(f'option {name} must be JSON like {{"topic":{{"0":1700000000000}}}}: {exc}') from None
    return OffsetSpec(None, per_topic, by_timestamp=True)


def _timestamp(value: object, name: str) -> int:
    try:
        ts = int(str(value).strip())
    except ValueError:
        raise OptionError(f"option {name}: {value!r} is not a timestamp in epoch milliseconds") from None
    if ts < 0:
        raise OptionError(f"option {name}: timestamp {ts} is negative")
    return ts


def _strategy(options: Mapping[str, str]) -> bool:
    text = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if text not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, not {text!r}")
    return text == "latest"


def _isolation(options: Mapping[str, str]) -> bool:
    text = options.get("kafka.isolation.level", "read_committed").strip().lower()
    if text not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"option kafka.isolation.level must be read_committed or read_uncommitted, not {text!r}")
    return text == "read_committed"


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None or text == "":
        return default
    if text.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {key} must be true or false, not {text!r}")
    return text.strip().lower() == "true"


def _positive(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {key} must be an integer, not {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {key} must be positive")
    return value
