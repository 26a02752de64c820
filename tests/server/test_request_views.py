"""The typed request views of the server's handlers: built from every served version of kio's request
class, each field is the request's where the version has it and Kafka's default where it has none."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Callable

import pytest
from helpers import kio_sample

from tieredlog.protocol import api
from tieredlog.protocol.schemas import load_request_schema
from tieredlog.server import admin_requests, group_requests, metadata_requests, txn_requests

SERVED = {**api.CORE_VERSIONS, **api.GROUP_VERSIONS, **api.TXN_VERSIONS, **api.CLUSTER_ADMIN_VERSIONS}

# (api key, builder, [(path into the view, first version with the field, Kafka's default before it)]);
# kio_sample fills every field with "x", 1, a random uuid or a one-element array, so a value from the
# request never equals these defaults
VIEWS: list[tuple[int, Callable[[Any, int], Any], list[tuple[str, int, Any]]]] = [
    (api.FIND_COORDINATOR, group_requests.find_coordinator_request,
     [("key_type", 1, 0), ("coordinator_keys", 4, ())]),
    (api.JOIN_GROUP, group_requests.join_group_request, [("group_instance_id", 5, None)]),
    (api.SYNC_GROUP, group_requests.sync_group_request,
     [("group_instance_id", 3, None), ("protocol_type", 5, None), ("protocol_name", 5, None)]),
    (api.HEARTBEAT, group_requests.heartbeat_request, [("group_instance_id", 3, None)]),
    (api.LEAVE_GROUP, group_requests.leave_group_request, [("members.0.1", 3, None)]),
    (api.OFFSET_COMMIT, group_requests.offset_commit_request,
     [("group_instance_id", 7, None), ("topics.0.partitions.0.committed_leader_epoch", 6, -1)]),
    (api.OFFSET_FETCH, group_requests.offset_fetch_request, []),
    (api.DESCRIBE_GROUPS, group_requests.describe_groups_request, []),
    (api.LIST_GROUPS, group_requests.list_groups_request, [("states_filter", 4, ()), ("types_filter", 5, ())]),
    (api.CONSUMER_GROUP_HEARTBEAT, group_requests.subscribed_topic_regex, [("", 1, None)]),
    (api.TXN_OFFSET_COMMIT, txn_requests.txn_offset_commit_request,
     [("generation_id", 3, -1), ("member_id", 3, ""), ("group_instance_id", 3, None),
      ("topics.0.partitions.0.committed_leader_epoch", 2, -1)]),
    (api.LIST_TRANSACTIONS, txn_requests.list_transactions_request, [("duration_filter", 1, -1)]),
    (api.METADATA, metadata_requests.metadata_request,
     [("allow_auto_topic_creation", 4, True), ("topics.0.topic_id", 10, None)]),
    (api.DESCRIBE_CLUSTER, metadata_requests.endpoint_type, []),
    (api.LIST_OFFSETS, metadata_requests.list_offsets_request,
     [("isolation_level", 2, 0), ("topics.0.partitions.0.current_leader_epoch", 4, -1)]),
    (api.ELECT_LEADERS, admin_requests.election_type, [("", 1, 0)]),
]


def _at(view: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        view = view[int(part)] if part.isdigit() else getattr(view, part)
    return view


@pytest.mark.parametrize("key, build, defaults", VIEWS, ids=[api.api_name(k) for k, _, _ in VIEWS])
def test_view_of_every_served_version(key: int, build: Callable[[Any, int], Any],
                                      defaults: list[tuple[str, int, Any]]) -> None:
    lo, hi = SERVED[key]
    for version in range(lo, hi + 1):
        view = build(kio_sample(load_request_schema(key, version)), version)
        for path, since, default in defaults:
            value = _at(view, path)
            if version < since:
                assert value == default, (api.api_name(key), version, path)
            else:
                assert value != default, (api.api_name(key), version, path)


def test_join_group_v0_rebalances_within_the_session_timeout() -> None:
    # Kafka's JoinGroupRequest: v0 has no rebalance timeout, the session timeout stands for it
    v0 = load_request_schema(api.JOIN_GROUP, 0)
    req = dataclasses.replace(kio_sample(v0), session_timeout=datetime.timedelta(seconds=7))
    assert group_requests.join_group_request(req, 0).rebalance_timeout == datetime.timedelta(seconds=7)


def test_metadata_v0_empty_topics_means_every_topic() -> None:
    for version, topics, expected_all in ((0, (), True), (1, (), False), (1, None, True)):
        cls = load_request_schema(api.METADATA, version)
        req = dataclasses.replace(kio_sample(cls), topics=topics)
        assert (metadata_requests.metadata_request(req, version).topics is None) is expected_all, (version, topics)

