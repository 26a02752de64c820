"""The topics file is written off the event loop, and a request is answered only once it is durable.

In-process: a Broker on a temporary log dir whose topics-file writes are slowed down; a ticker task
shows whether the event loop kept running while a CreateTopics waited for the write.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

from kio.schema.create_topics.v5.request import CreateTopicsRequest
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest

from tieredlog.config import BrokerConfig
from tieredlog.log import log_manager
from tieredlog.log.log_manager import LogManager
from tieredlog.protocol.api import CREATE_TOPICS, DELETE_TOPICS
from tieredlog.protocol.codec import build_entity
from tieredlog.server import admin_apis, topic_store
from tieredlog.server.broker import Broker
from tieredlog.server.context import RequestContext
from tieredlog.server.topic_store import TopicMetadata, TopicStore

WRITE_DELAY_S = 0.5


def _topic(name: str) -> TopicMetadata:
    return TopicMetadata(name, uuid.uuid4(), 1)


def test_the_newest_snapshot_is_written_once_and_never_replaced_by_an_older_one(tmp_path, monkeypatch):
    writes: list[bytes] = []
    real_write = topic_store.atomic_write
    monkeypatch.setattr(topic_store, "atomic_write", lambda path, data: (writes.append(data), real_write(path, data)))
    store = TopicStore(tmp_path)
    first = store.stage({"a": _topic("a")})
    second = store.stage({"a": _topic("a"), "b": _topic("b")})
    store.sync(first)  # writes what is staged now, which carries the first change too
    store.sync(second)
    store.sync(first)
    assert len(writes) == 1 and set(TopicStore(tmp_path).load()) == {"a", "b"}


def _ctx(broker: Broker, api_key: int, version: int) -> RequestContext:
    return RequestContext(api_key, version, 1, "test", "127.0.0.1", 1, broker)


def test_create_and_delete_topics_wait_for_the_topics_file_off_the_event_loop(tmp_path, monkeypatch):
    broker = Broker(BrokerConfig.load(None, [f"log.dir={tmp_path}", "remote.log.storage.system.enable=false", "metrics.port=-1",
                                             "offsets.topic.num.partitions=1"]))
    write_threads: list[threading.Thread] = []
    real_write = topic_store.atomic_write

    def slow_write(path, data):
        write_threads.append(threading.current_thread())
        time.sleep(WRITE_DELAY_S)
        real_write(path, data)

    async def run() -> None:
        await broker.start()
        try:
            monkeypatch.setattr(topic_store, "atomic_write", slow_write)
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticking = asyncio.create_task(ticker())
            create = build_entity(CreateTopicsRequest, {"topics": [
                {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                for n in ("t1", "t2")], "timeout": 30000, "validate_only": False})
            answer = asyncio.create_task(admin_apis.handle_create_topics(_ctx(broker, CREATE_TOPICS, 5), create))
            await asyncio.sleep(0)
            # Both topics exist before the handler's first wait; the answer waits for their logs and the
            # topics file.
            assert broker.get_topic("t1") is not None and broker.get_topic("t2") is not None
            await asyncio.sleep(WRITE_DELAY_S / 2)
            assert not answer.done() and ticks >= 5, ticks
            response = await answer
            assert broker.get_partition_log("t1", 0) is not None and broker.get_partition_log("t2", 0) is not None
            assert [e["error_code"] for e in response["topics"]] == [0, 0]
            assert set(TopicStore(tmp_path).load()) >= {"t1", "t2"}

            delete = build_entity(DeleteTopicsRequest, {"topic_names": ["t1"], "topics": [{"name": "t1"}],
                                                        "timeout": 30000})
            await admin_apis.handle_delete_topics(_ctx(broker, DELETE_TOPICS, 5), delete)
            assert "t1" not in TopicStore(tmp_path).load()
            ticking.cancel()
        finally:
            monkeypatch.setattr(topic_store, "atomic_write", real_write)
            await broker.shutdown()

    asyncio.run(run())
    assert len(write_threads) == 2 and threading.main_thread() not in write_threads


def test_logs_are_created_and_their_directory_fsynced_off_the_event_loop(tmp_path, monkeypatch):
    """The internal topics' logs at start-up and a created topic's: the directory creation and its fsync
    run on an executor thread, and the answer comes once the logs exist."""
    broker = Broker(BrokerConfig.load(None, [f"log.dir={tmp_path}", "metrics.port=-1", "offsets.topic.num.partitions=3",
                                             "transaction.state.log.num.partitions=2",
                                             "rlmm.config.remote.log.metadata.topic.num.partitions=2"]))
    created_on: list[threading.Thread] = []
    fsynced_on: list[threading.Thread] = []
    real_create = LogManager.get_or_create_log
    real_fsync_dir = log_manager.fsync_dir

    def recording_create(self, *args, **kwargs):
        created_on.append(threading.current_thread())
        return real_create(self, *args, **kwargs)

    def recording_fsync_dir(path):
        fsynced_on.append(threading.current_thread())
        real_fsync_dir(path)

    monkeypatch.setattr(LogManager, "get_or_create_log", recording_create)
    monkeypatch.setattr(log_manager, "fsync_dir", recording_fsync_dir)

    async def run() -> None:
        await broker.start()
        try:
            assert broker.get_partition_log("__remote_log_metadata", 1) is not None
            assert broker.get_partition_log("__transaction_state", 1) is not None
            at_start = len(created_on)
            create = build_entity(CreateTopicsRequest, {"topics": [
                {"name": "many", "num_partitions": 40, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 30000, "validate_only": False})
            response = await admin_apis.handle_create_topics(_ctx(broker, CREATE_TOPICS, 5), create)
            assert [e["error_code"] for e in response["topics"]] == [0]
            assert all(broker.get_partition_log("many", p) is not None for p in range(40))
            assert len(created_on) == at_start + 40
        finally:
            await broker.shutdown()

    asyncio.run(run())
    assert len(created_on) >= 3 + 2 + 2 + 40 and len(fsynced_on) >= len(created_on)
    assert threading.main_thread() not in created_on + fsynced_on
