"""The replication throttles of `tieredlog reassign` (KIP-73), as kafka-reassign-partitions.sh sets
and clears them.

``--execute --throttle R`` sets, before the reassignment starts, each moving topic's
``leader.replication.throttled.replicas`` (``partition:broker`` for every current replica, which the
new ones copy from) and ``follower.replication.throttled.replicas`` (the replicas being added), and
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` = R on every broker
of the move. ``--verify`` clears them all once no partition of the plan is still moving (unless
``--preserve-throttles``): the rates on every live broker, the lists on the plan's topics. Configs go
through IncrementalAlterConfigs; a broker's own configs to that broker, as Kafka's admin client sends
them.
"""

from __future__ import annotations

from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import INCREMENTAL_ALTER_CONFIGS
from tieredlog.tools.cluster_admin import AdminCommandFailed, describe_cluster, exception_text
from tieredlog.tools.command_config import same_as

TP = tuple[str, int]
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SET, DELETE = 0, 1
BROKER_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
VERIFY_WARNING = "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."


def _alter(c: KafkaClient, resource_type: int, name: str, ops: list[dict[str, Any]]) -> None:
    r = c.request(INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configs": ops}],
        "validate_only": False}).responses[0]
    if r.error_code != ErrorCode.none:
        kind = "broker" if resource_type == BROKER_RESOURCE else "topic"
        raise AdminCommandFailed(f"Error altering the configs of {kind} {name}: {exception_text(r.error_code, r.error_message)}")


def _alter_brokers(c: KafkaClient, brokers: Iterable[int], ops: list[dict[str, Any]]) -> None:
    nodes = describe_cluster(c, []).brokers
    for b in sorted(brokers):
        node = nodes.get(b)
        if node is None:
            continue  # not live: nothing to set or clear there now
        with same_as(c, node.address) as own:
            _alter(own, BROKER_RESOURCE, str(b), ops)


def throttled_replicas(current: dict[TP, list[int]], target: dict[TP, list[int]]) -> dict[str, tuple[str, str]]:
    """topic -> (leader list: every current replica of its moving partitions, follower list: the
    replicas being added), Kafka's ``p:b`` entries in its (string) order."""
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for (topic, p), replicas in target.items():
        sources = current.get((topic, p), [])
        leaders.setdefault(topic, set()).update(f"{p}:{b}" for b in sources)
        followers.setdefault(topic, set()).update(f"{p}:{b}" for b in replicas if b not in sources)
    return {t: (",".join(sorted(leaders[t])), ",".join(sorted(followers.get(t, ())))) for t in leaders}


def set_throttles(c: KafkaClient, current: dict[TP, list[int]], target: dict[TP, list[int]], rate: int) -> None:
    """``--execute --throttle rate``: the topics' lists, then the rate on every broker of the move."""
    for topic, (leader_list, follower_list) in sorted(throttled_replicas(current, target).items()):
        _alter(c, TOPIC_RESOURCE, topic, [
            {"name": TOPIC_LISTS[0], "config_operation": SET, "value": leader_list},
            {"name": TOPIC_LISTS[1], "config_operation": SET, "value": follower_list}])
    brokers = {b for tp, replicas in target.items() for b in [*current.get(tp, []), *replicas]}
    _alter_brokers(c, brokers, [{"name": n, "config_operation": SET, "value": str(rate)} for n in BROKER_RATES])
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def clear_throttles(c: KafkaClient, plan: Iterable[TP]) -> None:
    """``--verify`` once the plan is done: every throttle a reassignment may have set."""
    plan = list(plan)
    brokers = sorted(describe_cluster(c, []).brokers)
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} {','.join(map(str, brokers))}")
    _alter_brokers(c, brokers, [{"name": n, "config_operation": DELETE, "value": None} for n in BROKER_RATES])
    topics = sorted({t for t, _ in plan})
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    for topic in topics:
        _alter(c, TOPIC_RESOURCE, topic, [{"name": n, "config_operation": DELETE, "value": None} for n in TOPIC_LISTS])
