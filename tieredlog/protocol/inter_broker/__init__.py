"""The controller-to-broker APIs of Kafka's ZooKeeper mode, which kio no longer generates.

One version of each, the last Kafka 3.9 defines: LeaderAndIsr v7, StopReplica v4, UpdateMetadata
v8, ControlledShutdown v3. ``tieredlog.protocol.schemas`` serves them beside kio's own schemas.
"""

from kio.static.protocol import HeaderV1ResponsePayload, HeaderV2RequestPayload

from tieredlog.protocol.inter_broker.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from tieredlog.protocol.inter_broker.leader_and_isr import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
)
from tieredlog.protocol.inter_broker.stop_replica import (
    StopReplicaPartitionError,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
)
from tieredlog.protocol.inter_broker.update_metadata import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    UpdateMetadataTopicState,
)

# (request, response) per api key; each class carries its own __api_key__ and __version__
_PAIRS: tuple[tuple[type[HeaderV2RequestPayload], type[HeaderV1ResponsePayload]], ...] = (
    (LeaderAndIsrRequest, LeaderAndIsrResponse),
    (StopReplicaRequest, StopReplicaResponse),
    (UpdateMetadataRequest, UpdateMetadataResponse),
    (ControlledShutdownRequest, ControlledShutdownResponse),
)

REQUESTS: dict[tuple[int, int], type[HeaderV2RequestPayload]] = {(int(q.__api_key__), int(q.__version__)): q for q, _ in _PAIRS}
RESPONSES: dict[tuple[int, int], type[HeaderV1ResponsePayload]] = {(int(r.__api_key__), int(r.__version__)): r for _, r in _PAIRS}

__all__ = [
    "REQUESTS",
    "RESPONSES",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "RemainingPartition",
    "LeaderAndIsrLiveLeader",
    "LeaderAndIsrPartitionError",
    "LeaderAndIsrPartitionState",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "LeaderAndIsrTopicError",
    "LeaderAndIsrTopicState",
    "StopReplicaPartitionError",
    "StopReplicaPartitionState",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "StopReplicaTopicState",
    "UpdateMetadataBroker",
    "UpdateMetadataEndpoint",
    "UpdateMetadataPartitionState",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
    "UpdateMetadataTopicState",
]
