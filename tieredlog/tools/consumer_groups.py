"""`tieredlog consumer-groups --bootstrap-server HOST:PORT ...`: Apache Kafka's kafka-consumer-groups.sh
with its options, column headers and messages, built on the brokers' own group APIs so it works
against any Kafka-compatible cluster.

    --list                                  ListGroups on every broker
    --describe --group G [--members|--state] DescribeGroups and OffsetFetch at the group's coordinator,
                                            ListOffsets (latest) at each partition's leader
    --reset-offsets --group G (--topic T[:P,...] | --all-topics) <spec> [--dry-run | --execute]
                                            OffsetCommit as an admin (generation -1, no member), only
                                            while the group is Empty (or does not exist)
    --delete --group G                      DeleteGroups
    --delete-offsets --group G --topic T    OffsetDelete

Errors are printed as Kafka's tool prints them ("Error: ...") and end the command with exit code 1.
"""

from __future__ import annotations

import argparse
import datetime
import re
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO

from kio.schema.errors import ErrorCode

from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.clients.routing import CoordinatorType, find_coordinators
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import (
    CONSUMER_GROUP_DESCRIBE,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
)
from tieredlog.tools import command_config, run_against_broker
from tieredlog.tools.cluster_admin import Node, exception_name
from tieredlog.tools.transaction_admin import AdminApiError, TransactionsAdmin

Clock = Callable[[], int]

# ListOffsets' special timestamps
LATEST = -1
EARLIEST = -2

# Versions every Kafka since 2.4 serves, with the fields this tool uses.
_V = {CONSUMER_GROUP_DESCRIBE: 0, LIST_GROUPS: 4, DESCRIBE_GROUPS: 5, OFFSET_FETCH: 7, LIST_OFFSETS: 5, OFFSET_COMMIT: 8,
      DELETE_GROUPS: 2, OFFSET_DELETE: 0, FIND_COORDINATOR: 3}

# Kafka names these errors' exceptions differently from the code's name
_EXCEPTIONS = {ErrorCode.non_empty_group: "GroupNotEmptyException",
               ErrorCode.group_id_not_found: "GroupIdNotFoundException"}

_NO_ACTION = ("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.")


class CommandFailed(Exception):
    """Kafka's printError: "Error: <message>" on stderr; the tool exits with 1."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def error_text(code: ErrorCode, message: str | None = None) -> str:
    name = _EXCEPTIONS.get(code) or exception_name(code)
    text = f"org.apache.kafka.common.errors.{name}"
    return f"{text}: {message}" if message else text


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignor: str
    members: tuple[Member, ...]
    coordinator: Node


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment (any version: later ones only add fields after
    them); bytes that are not one (another protocol type) assign nothing."""
    out: list[TopicPartition] = []
    try:
        pos = 2
        (ntopics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(ntopics, 0)):
            (nlen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + nlen]).decode()
            pos += nlen
            (nparts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = struct.unpack_from(f">{max(nparts, 0)}i", data, pos)
            pos += 4 * max(nparts, 0)
            out += [TopicPartition(topic, p) for p in parts]
    except (struct.error, UnicodeDecodeError):
        return ()
    return tuple(out)


class GroupsAdmin(TransactionsAdmin):
    """The group APIs over TransactionsAdmin's connections: the bootstrap broker, and one client per
    broker a request is routed to."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 30.0,
                 settings: command_config.ClientSettings | None = None) -> None:
        super().__init__(bootstrap, client_id="tieredlog-consumer-groups", timeout_s=timeout_s, settings=settings)

    def __enter__(self) -> "GroupsAdmin":
        return self

    def _request(self, node_id: int, api_key: int, body: dict[str, Any]) -> Any:
        return self._client(node_id).request(api_key, body, version=_V[api_key])

    def coordinator(self, group: str) -> Node:
        def attempt() -> Node:
            (c,) = find_coordinators(self._any(), CoordinatorType.GROUP, [group], version=_V[FIND_COORDINATOR])
            if c.error_code != ErrorCode.none:
                raise AdminApiError(c.error_code, c.error_message)
            node = Node(c.node_id, c.host, c.port, None)
            self._nodes[node.node_id] = node
            return node

        return self._retrying(attempt)

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, from every broker."""
        out: dict[str, tuple[str, str, str]] = {}
        for node_id in sorted(self.cluster([]).brokers):
            r = self._request(node_id, LIST_GROUPS, {"states_filter": []})
            if r.error_code != ErrorCode.none:
                raise AdminApiError(r.error_code)
            for g in r.groups:
                out[g.group_id] = (g.group_id, g.protocol_type, g.group_state)
        return list(out.values())

    def _describe_consumer_group(self, node: Node, group: str) -> GroupDescription | None:
        """A KIP-848 consumer group through ConsumerGroupDescribe, as Kafka's admin asks first; None for
        a classic group (GROUP_ID_NOT_FOUND: not a consumer group) or a coordinator without the API."""
        client = self._client(node.node_id)
        try:
            client.version_for(CONSUMER_GROUP_DESCRIBE)
        except KafkaProtocolError:
            return None
        r = self._request(node.node_id, CONSUMER_GROUP_DESCRIBE, {"group_ids": [group],
                                                                  "include_authorized_operations": False})
        (g,) = r.groups
        if g.error_code == ErrorCode.group_id_not_found:
            return None
        if g.error_code != ErrorCode.none:
            raise AdminApiError(g.error_code, g.error_message)
        members = tuple(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                               tuple(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                                     for p in t.partitions))
                        for m in g.members)
        return GroupDescription(g.group_id, g.group_state, "consumer", g.assignor_name, members, node)

    def describe_group(self, group: str) -> GroupDescription:
        def attempt() -> GroupDescription:
            node = self.coordinator(group)
            described = self._describe_consumer_group(node, group)
            if described is not None:
                return described
            r = self._request(node.node_id, DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
            (g,) = r.groups
            if g.error_code != ErrorCode.none:
                raise AdminApiError(g.error_code)
            members = tuple(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   decode_assignment(m.member_assignment) if g.protocol_type == "consumer" else ())
                            for m in g.members)
            return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, node)

        return self._retrying(attempt)

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        def attempt() -> dict[TopicPartition, int]:
            node = self.coordinator(group)
            r = self._request(node.node_id, OFFSET_FETCH, {"group_id": group, "topics": None, "require_stable": False})
            if r.error_code != ErrorCode.none:
                raise AdminApiError(r.error_code)
            out: dict[TopicPartition, int] = {}
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise AdminApiError(p.error_code)
                    if p.committed_offset >= 0:
                        out[TopicPartition(t.name, p.partition_index)] = int(p.committed_offset)
            return out

        return self._retrying(attempt)

    def partitions_of(self, topics: Sequence[str]) -> list[TopicPartition]:
        view = self.cluster(topics)
        out = []
        for name in topics:
            t = view.topics.get(name)
            if t is None or t.error_code != ErrorCode.none:
                code = ErrorCode.unknown_topic_or_partition if t is None else t.error_code
                raise AdminApiError(code, f"Topic {name} does not exist" if t is None or
                                    code == ErrorCode.unknown_topic_or_partition else None, retriable=False)
            out += [TopicPartition(name, p.partition) for p in t.partitions]
        return out

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offset for each partition's timestamp (LATEST, EARLIEST or ms), asked of its leader; -1
        when no record is that recent."""
        found: dict[TopicPartition, int] = {}

        def attempt() -> dict[TopicPartition, int]:
            pending = [tp for tp in timestamps if tp not in found]
            view = self.cluster(sorted({tp.topic for tp in pending}))
            by_node: dict[int, dict[str, list[dict[str, int]]]] = {}
            for tp in pending:
                by_node.setdefault(self._leader_of(tp, view), {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": timestamps[tp]})
            moved = []
            for node_id, topics in sorted(by_node.items()):
                r = self._request(node_id, LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": n, "partitions": ps} for n, ps in topics.items()]})
                for t in r.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            found[tp] = int(p.offset)
                        elif AdminApiError(p.error_code).retriable:
                            moved.append(tp)
                        else:
                            raise AdminApiError(p.error_code, retriable=False)
            if moved:
                raise AdminApiError(ErrorCode.not_leader_or_follower, f"the leader of {moved[0]} moved")
            return {tp: found[tp] for tp in timestamps}

        return self._retrying(attempt)

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, off in sorted(offsets.items()):
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": ""})

        def attempt() -> None:
            node = self.coordinator(group)
            r = self._request(node.node_id, OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise AdminApiError(p.error_code)

        self._retrying(attempt)

    def delete_group(self, group: str) -> ErrorCode:
        def attempt() -> ErrorCode:
            node = self.coordinator(group)
            (res,) = self._request(node.node_id, DELETE_GROUPS, {"groups_names": [group]}).results
            if AdminApiError(res.error_code).retriable:
                raise AdminApiError(res.error_code)
            return ErrorCode(res.error_code)

        return self._retrying(attempt)

    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        topics: dict[str, list[dict[str, int]]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition})

        def attempt() -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
            node = self.coordinator(group)
            r = self._request(node.node_id, OFFSET_DELETE, {
                "group_id": group, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]})
            if AdminApiError(r.error_code).retriable:
                raise AdminApiError(r.error_code)
            return ErrorCode(r.error_code), {TopicPartition(t.name, p.partition_index): ErrorCode(p.error_code)
                                            for t in r.topics for p in t.partitions}

        return self._retrying(attempt)


# ---- printing -------------------------------------------------------------------------------------------


def print_columns(out: TextIO, widths: Sequence[int], rows: Sequence[Sequence[str]]) -> None:
    """Kafka's printf("%-Ns %-Ms ... %s"): each column padded to its width, one space apart, the last
    one as is; a blank line before the header, as Kafka prints it."""
    out.write("\n")
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths)] + list(row[len(widths):])
        out.write(" ".join(cells).rstrip() + "\n")


def _width(minimum: int, values: Sequence[str]) -> int:
    return max([minimum, *map(len, values)])


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- --list -----------------------------------------------------------------------------------------------


def cmd_list(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    groups = admin.list_groups()
    if a.state is None:
        for gid, _ptype, _state in groups:
            out.write(gid + "\n")
        return 0
    wanted = {s.lower() for s in a.state.split(",")} if isinstance(a.state, str) and a.state else None
    rows = [(gid, state) for gid, _, state in groups if wanted is None or state.lower() in wanted]
    gw = _width(15, [g for g, _ in rows])
    print_columns(out, [gw], [("GROUP", "STATE"), *rows])
    return 0


# ---- --describe -------------------------------------------------------------------------------------------


def describe_offsets(admin: GroupsAdmin, group: str, out: TextIO, err: TextIO) -> bool:
    d = admin.describe_group(group)
    if d.state == "Dead":
        err.write(f"Error: Consumer group '{group}' does not exist.\n")
        return False
    if d.state == "Empty":
        err.write(f"\nConsumer group '{group}' has no active members.\n")
    elif d.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        err.write(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
    committed = admin.committed_offsets(group)
    owner: dict[TopicPartition, Member] = {tp: m for m in d.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    ends = admin.list_offsets({tp: LATEST for tp in partitions}) if partitions else {}
    rows = []
    for tp in partitions:
        cur = committed.get(tp)
        end = ends.get(tp)
        lag = None if cur is None or end is None or end < 0 else max(end - cur, 0)
        m = owner.get(tp)
        rows.append((group, tp.topic, str(tp.partition), _dash(cur), _dash(end), _dash(lag),
                     m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"))
    # members with nothing assigned still show, as Kafka's tool shows them
    for m in d.members:
        if not m.assignment:
            rows.append((group, "-", "-", "-", "-", "-", m.member_id, m.host, m.client_id))
    widths = [_width(15, [group]), _width(15, [r[1] for r in rows]), 10, 15, 15, 15,
              _width(15, [r[6] for r in rows]), _width(15, [r[7] for r in rows])]
    print_columns(out, widths, [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                 "CONSUMER-ID", "HOST", "CLIENT-ID"), *rows])
    return True


def describe_members(admin: GroupsAdmin, group: str, out: TextIO, err: TextIO) -> bool:
    d = admin.describe_group(group)
    if d.state == "Dead":
        err.write(f"Error: Consumer group '{group}' does not exist.\n")
        return False
    if not d.members:
        err.write(f"\nConsumer group '{group}' has no active members.\n")
        return True
    rows = [(group, m.member_id, m.host, m.client_id, str(len(m.assignment))) for m in d.members]
    widths = [_width(15, [group]), _width(15, [r[1] for r in rows]), _width(15, [r[2] for r in rows]),
              _width(15, [r[3] for r in rows])]
    print_columns(out, widths, [("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"), *rows])
    return True


def describe_state(admin: GroupsAdmin, group: str, out: TextIO, err: TextIO) -> bool:
    d = admin.describe_group(group)
    if d.state == "Dead":
        err.write(f"Error: Consumer group '{group}' does not exist.\n")
        return False
    coordinator = f"{d.coordinator.address}  ({d.coordinator.node_id})"
    row = (group, coordinator, d.assignor, d.state, str(len(d.members)))
    print_columns(out, [_width(15, [group]), _width(25, [coordinator]), 20, 15],
                  [("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"), row])
    return True


def cmd_describe(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    groups = [g for g, _, _ in admin.list_groups()] if a.all_groups else a.group
    if not groups:
        raise CommandFailed("Option [describe] takes one of these options: [all-groups], [group]")
    show = describe_members if a.members else describe_state if a.state is not None else describe_offsets
    ok = True
    for g in groups:
        ok = show(admin, g, out, err) and ok
    return 0 if ok else 1


# ---- --reset-offsets --------------------------------------------------------------------------------------


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse takes it (PnDTnHnMn.nS)."""
    m = _DURATION.match(text.strip())
    if m is None or text.strip().upper() in ("P", "PT"):
        raise CommandFailed(f"Text cannot be parsed to a Duration: {text}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime format, 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone ('Z', '+01:00');
    without one the local zone, as Kafka's tool reads it."""
    s = text.strip()
    try:
        if s.endswith("Z"):
            dt = datetime.datetime.fromisoformat(s[:-1]).replace(tzinfo=datetime.timezone.utc)
        else:
            dt = datetime.datetime.fromisoformat(s)
        if dt.tzinfo is None:
            dt = dt.astimezone()  # the local zone
    except ValueError:
        raise CommandFailed(f"Error parsing timestamp. It does not match format 'yyyy-MM-dd'T'HH:mm:ss.SSS': {text}") from None
    return int(dt.timestamp() * 1000)


def _reset_scope(admin: GroupsAdmin, a: argparse.Namespace, committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if a.all_topics:
        return sorted(committed)
    if not a.topic:
        raise CommandFailed("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
    out: list[TopicPartition] = []
    for spec in a.topic:
        name, _, parts = spec.partition(":")
        if parts:
            out += [TopicPartition(name, int(p)) for p in parts.split(",") if p.strip()]
        else:
            out += admin.partitions_of([name])
    return sorted(dict.fromkeys(out))


def _clamp(target: int, tp: TopicPartition, low: dict[TopicPartition, int], high: dict[TopicPartition, int]) -> int:
    return min(max(target, low[tp]), high[tp])


def new_offsets(admin: GroupsAdmin, a: argparse.Namespace, partitions: list[TopicPartition],
                committed: dict[TopicPartition, int], clock: Clock) -> dict[TopicPartition, int]:
    if a.to_earliest:
        return admin.list_offsets({tp: EARLIEST for tp in partitions})
    if a.to_latest:
        return admin.list_offsets({tp: LATEST for tp in partitions})
    if a.to_datetime is not None or a.by_duration is not None:
        ts = parse_datetime_ms(a.to_datetime) if a.to_datetime is not None else clock() - parse_duration_ms(a.by_duration)
        found = admin.list_offsets({tp: ts for tp in partitions})
        missing = [tp for tp, off in found.items() if off < 0]
        # no record at or after the time: the end of the log, as Kafka resets it
        latest = admin.list_offsets({tp: LATEST for tp in missing}) if missing else {}
        return {tp: latest.get(tp, off) if off < 0 else off for tp, off in found.items()}
    low = admin.list_offsets({tp: EARLIEST for tp in partitions})
    high = admin.list_offsets({tp: LATEST for tp in partitions})
    if a.to_offset is not None:
        return {tp: _clamp(a.to_offset, tp, low, high) for tp in partitions}
    if a.shift_by is not None:
        out = {}
        for tp in partitions:
            if tp not in committed:
                raise CommandFailed(f"Consumer group has no committed offset for partition {tp}: "
                                    "--shift-by needs one to shift")
            out[tp] = _clamp(committed[tp] + a.shift_by, tp, low, high)
        return out
    raise CommandFailed("Option [reset-offsets] takes one of these options: [to-datetime], [by-duration], "
                        "[to-earliest], [to-latest], [shift-by], [to-offset]")


def cmd_reset_offsets(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    if a.dry_run and a.execute:
        raise CommandFailed("Option [reset-offsets] takes only one of these options: [dry-run], [execute]")
    if not a.dry_run and not a.execute:
        err.write(_NO_ACTION + "\n")
    if not a.group or len(a.group) != 1:
        raise CommandFailed("Option [reset-offsets] takes one [group] (or [all-groups], not served here)")
    (group,) = a.group
    d = admin.describe_group(group)
    if d.state not in ("Empty", "Dead"):
        raise CommandFailed(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                            f"state is {d.state}.")
    committed = admin.committed_offsets(group)
    partitions = _reset_scope(admin, a, committed)
    offsets = new_offsets(admin, a, partitions, committed, clock)
    if a.execute and offsets:
        admin.commit_offsets(group, offsets)
    rows = [(group, tp.topic, str(tp.partition), str(off)) for tp, off in sorted(offsets.items())]
    print_columns(out, [_width(15, [group]), _width(15, [r[1] for r in rows]), 10],
                  [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), *rows])
    return 0


# ---- --delete, --delete-offsets ---------------------------------------------------------------------------


def cmd_delete(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    groups = [g for g, _, _ in admin.list_groups()] if a.all_groups else a.group
    if not groups:
        raise CommandFailed("Option [delete] takes one of these options: [all-groups], [group]")
    failed = {}
    for g in groups:
        code = admin.delete_group(g)
        if code != ErrorCode.none:
            failed[g] = code
    ok = [g for g in groups if g not in failed]
    if ok:
        out.write("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.\n")
    if failed:
        err.write("Error: Deletion of some consumer groups failed:\n")
        for g, code in failed.items():
            err.write(f"* Group '{g}' could not be deleted due to: {error_text(code)}\n")
        return 1
    return 0


def cmd_delete_offsets(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    if not a.group or len(a.group) != 1 or not a.topic:
        raise CommandFailed("Option [delete-offsets] takes the following options: [bootstrap-server], [group], [topic]")
    (group,) = a.group
    partitions: list[TopicPartition] = []
    for spec in a.topic:
        name, _, parts = spec.partition(":")
        partitions += ([TopicPartition(name, int(p)) for p in parts.split(",") if p.strip()] if parts
                       else admin.partitions_of([name]))
    top, per_partition = admin.delete_offsets(group, partitions)
    topics = ", ".join(dict.fromkeys(tp.topic for tp in partitions))
    if top != ErrorCode.none:
        err.write(f"Error: Encounter some unknown error: {error_text(top)}\n" if top not in (
            ErrorCode.group_id_not_found, ErrorCode.non_empty_group) else
            f"Error: Request failed for deleting offsets with topic {topics} group {group} due to "
            f"{error_text(top)}\n")
        return 1
    failed = any(c != ErrorCode.none for c in per_partition.values())
    verdict = "failed" if failed else "succeed"
    out.write(f"Request {verdict} for deleting offsets with topic {topics} group {group}\n")
    rows = [(tp.topic, str(tp.partition), "Successful" if c == ErrorCode.none else f"Error: {error_text(c)}")
            for tp, c in sorted(per_partition.items())]
    print_columns(out, [_width(15, [r[0] for r in rows]), 10], [("TOPIC", "PARTITION", "STATUS"), *rows])
    return 1 if failed else 0


# ---- the command line -------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tieredlog consumer-groups",
        description="This tool helps to list all consumer groups, describe a consumer group, delete consumer group "
                    "info, or reset consumer group offsets.")
    p.add_argument("--bootstrap-server", required=True, metavar="host:port",
                   help="the server(s) to connect to")
    command_config.add_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe consumer group(s) and list offset lag")
    action.add_argument("--reset-offsets", action="store_true", help="reset offsets of a consumer group (one group "
                        "at a time; the group must be inactive)")
    action.add_argument("--delete", action="store_true", help="delete consumer group(s)")
    action.add_argument("--delete-offsets", action="store_true", help="delete a consumer group's offsets of a topic")
    p.add_argument("--group", action="append", metavar="GROUP", help="the consumer group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                   help="the topic, with optional partitions (reset-offsets, delete-offsets)")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for (reset-offsets)")
    p.add_argument("--members", action="store_true", help="describe the group's members")
    p.add_argument("--state", nargs="?", const="", default=None,
                   help="describe the group's state; with --list, filter groups by comma-separated states")
    p.add_argument("--offsets", action="store_true", help="describe the group's offsets and lag (the default)")
    spec = p.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    spec.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    spec.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (clamped to the log)")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                      help="reset to the first offset at or after this time")
    spec.add_argument("--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be negative)")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS", help="reset to the offsets of this long ago")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only show the result")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    return p



build_parser = parser  # the name every tool module exposes

def execute(admin: GroupsAdmin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock = now_ms) -> int:
    command = (cmd_list if a.list else cmd_describe if a.describe else cmd_reset_offsets if a.reset_offsets
               else cmd_delete if a.delete else cmd_delete_offsets)
    try:
        return command(admin, a, out, err, clock)
    except CommandFailed as exc:
        print(f"Error: {exc}", file=err)
        return 1
    except AdminApiError as exc:
        print(f"Error: Executing consumer group command failed due to {error_text(exc.code, str(exc))}", file=err)
        return 1


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    settings = command_config.from_args(p, a)

    def run() -> int:
        with GroupsAdmin(a.bootstrap_server, settings=settings) as admin:
            return execute(admin, a, sys.stdout, sys.stderr)

    return run_against_broker("consumer-groups", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
