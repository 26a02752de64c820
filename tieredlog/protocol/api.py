"""API keys and the version ranges this broker advertises in ApiVersions.

Ranges are chosen so confluent-kafka, kafka-python 3 and aiokafka all find their versions
(ecosystem.md §6). Produce is advertised from v0 although v0-2 are rejected, as Kafka 4 does
(KAFKA-18659): librdkafka < 2.11.1 turns compression off when Produce's minimum is above 0.
"""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
ALTER_PARTITION = 56
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69

API_NAMES: dict[int, str] = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    LIST_OFFSETS: "ListOffsets",
    METADATA: "Metadata",
    LEADER_AND_ISR: "LeaderAndIsr",
    STOP_REPLICA: "StopReplica",
    UPDATE_METADATA: "UpdateMetadata",
    CONTROLLED_SHUTDOWN: "ControlledShutdown",
    OFFSET_COMMIT: "OffsetCommit",
    OFFSET_FETCH: "OffsetFetch",
    FIND_COORDINATOR: "FindCoordinator",
    JOIN_GROUP: "JoinGroup",
    HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup",
    SYNC_GROUP: "SyncGroup",
    DESCRIBE_GROUPS: "DescribeGroups",
    LIST_GROUPS: "ListGroups",
    SASL_HANDSHAKE: "SaslHandshake",
    API_VERSIONS: "ApiVersions",
    CREATE_TOPICS: "CreateTopics",
    DELETE_TOPICS: "DeleteTopics",
    DELETE_RECORDS: "DeleteRecords",
    INIT_PRODUCER_ID: "InitProducerId",
    OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch",
    ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
    ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    END_TXN: "EndTxn",
    WRITE_TXN_MARKERS: "WriteTxnMarkers",
    TXN_OFFSET_COMMIT: "TxnOffsetCommit",
    DESCRIBE_ACLS: "DescribeAcls",
    CREATE_ACLS: "CreateAcls",
    DELETE_ACLS: "DeleteAcls",
    DESCRIBE_CONFIGS: "DescribeConfigs",
    ALTER_CONFIGS: "AlterConfigs",
    DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    CREATE_PARTITIONS: "CreatePartitions",
    DELETE_GROUPS: "DeleteGroups",
    ELECT_LEADERS: "ElectLeaders",
    INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
    LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
    OFFSET_DELETE: "OffsetDelete",
    DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
    ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
    ALTER_PARTITION: "AlterPartition",
    DESCRIBE_CLUSTER: "DescribeCluster",
    DESCRIBE_PRODUCERS: "DescribeProducers",
    DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    LIST_TRANSACTIONS: "ListTransactions",
    CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat",
    CONSUMER_GROUP_DESCRIBE: "ConsumerGroupDescribe",
}

# APIs the server itself implements: key -> (min advertised, max advertised).
CORE_VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 11),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 9),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 5),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    DESCRIBE_LOG_DIRS: (1, 4),  # v0 left Kafka 4 (KIP-896); kio has no v0 schema
    CREATE_PARTITIONS: (0, 3),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_CLUSTER: (0, 1),
    DESCRIBE_PRODUCERS: (0, 0),
}

# Produce versions a Kafka 4 broker advertises but refuses (answered with UNSUPPORTED_VERSION).
PRODUCE_REJECTED_BELOW = 3

# Transaction APIs (tieredlog.server.txn_apis). Up to KIP-890 part 1: AddPartitionsToTxn v4-5 are the
# brokers' verification requests; EndTxn v5 and TxnOffsetCommit v4+ (part 2's epoch bump per
# transaction) are not served, and clients fall back to the versions below.
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    ADD_PARTITIONS_TO_TXN: (0, 5),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 4),
    WRITE_TXN_MARKERS: (1, 1),
    TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
}

# ACL administration (tieredlog.server.acl_apis), answered SECURITY_DISABLED without an authorizer as
# Kafka does. v0 is gone from Kafka 4 (KIP-896) and from kio; v1 added the pattern types.
ACL_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
}

# Group APIs (served by tieredlog.server.group_apis when present). Kafka 4.0's ranges capped by kio;
# group_apis may publish its own API_VERSIONS dict to narrow or widen these.
GROUP_VERSIONS: dict[int, tuple[int, int]] = {
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    # KIP-848: advertised only when group.coordinator.rebalance.protocols includes consumer (group_apis
    # registers their handlers only then)
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
}

# What brokers of one cluster speak to each other: the controller's requests to brokers (the
# ZooKeeper-mode APIs, served from tieredlog.protocol.inter_broker at the one version implemented
# there, the last of Kafka 3.9) and the brokers' requests to the controller. AlterPartition starts at
# v2, the first with topic ids, the oldest kio has.
INTER_BROKER_VERSIONS: dict[int, tuple[int, int]] = {
    LEADER_AND_ISR: (7, 7),
    STOP_REPLICA: (4, 4),
    UPDATE_METADATA: (8, 8),
    CONTROLLED_SHUTDOWN: (3, 3),
    ALTER_PARTITION: (2, 3),
}

# Cluster administration served once there is a controller: the versions both kio and Kafka 3.9
# have (AlterPartitionReassignments v1 is newer than 3.9).
CLUSTER_ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    ELECT_LEADERS: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
}


# SASL (tieredlog.server.sasl_apis): every listener advertises them, as Kafka's do; on a SASL listener
# the connection's authenticator answers the first two, elsewhere they answer ILLEGAL_SASL_STATE.
# SCRAM credentials (KIP-554) at Kafka's only version.
SASL_VERSIONS: dict[int, tuple[int, int]] = {
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"api#{api_key}")
