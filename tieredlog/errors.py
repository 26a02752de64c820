"""Broker errors that map one-to-one onto Kafka's protocol error codes.

Every layer raises these; the server turns ``exc.code`` into the response's error code. The codes,
and whether a client may retry, come from one table: kio's ``ErrorCode``, generated from Kafka's
own. The log and tiering code never import the protocol package, only this module.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    code: ErrorCode = ErrorCode.unknown_server_error
    retriable: bool = False

    def __init__(self, message: str = ""):
        super().__init__(message or self.__class__.__name__)


def _error(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code, "retriable": code.retriable})


UnknownServerError = _error("UnknownServerError", ErrorCode.unknown_server_error)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", ErrorCode.offset_out_of_range)
CorruptMessageError = _error("CorruptMessageError", ErrorCode.corrupt_message)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", ErrorCode.unknown_topic_or_partition)
InvalidFetchSizeError = _error("InvalidFetchSizeError", ErrorCode.invalid_fetch_size)
LeaderNotAvailableError = _error("LeaderNotAvailableError", ErrorCode.leader_not_available)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", ErrorCode.not_leader_or_follower)
RequestTimedOutError = _error("RequestTimedOutError", ErrorCode.request_timed_out)
ReplicaNotAvailableError = _error("ReplicaNotAvailableError", ErrorCode.replica_not_available)
MessageTooLargeError = _error("MessageTooLargeError", ErrorCode.message_too_large)
CoordinatorLoadInProgressError = _error("CoordinatorLoadInProgressError", ErrorCode.coordinator_load_in_progress)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError", ErrorCode.coordinator_not_available)
NotCoordinatorError = _error("NotCoordinatorError", ErrorCode.not_coordinator)
InvalidTopicError = _error("InvalidTopicError", ErrorCode.invalid_topic_exception)
RecordListTooLargeError = _error("RecordListTooLargeError", ErrorCode.record_list_too_large)
NotEnoughReplicasError = _error("NotEnoughReplicasError", ErrorCode.not_enough_replicas)
NotEnoughReplicasAfterAppendError = _error("NotEnoughReplicasAfterAppendError", ErrorCode.not_enough_replicas_after_append)
InvalidRequiredAcksError = _error("InvalidRequiredAcksError", ErrorCode.invalid_required_acks)
IllegalGenerationError = _error("IllegalGenerationError", ErrorCode.illegal_generation)
InconsistentGroupProtocolError = _error("InconsistentGroupProtocolError", ErrorCode.inconsistent_group_protocol)
InvalidGroupIdError = _error("InvalidGroupIdError", ErrorCode.invalid_group_id)
UnknownMemberIdError = _error("UnknownMemberIdError", ErrorCode.unknown_member_id)
InvalidSessionTimeoutError = _error("InvalidSessionTimeoutError", ErrorCode.invalid_session_timeout)
RebalanceInProgressError = _error("RebalanceInProgressError", ErrorCode.rebalance_in_progress)
InvalidCommitOffsetSizeError = _error("InvalidCommitOffsetSizeError", ErrorCode.invalid_commit_offset_size)
InvalidTimestampError = _error("InvalidTimestampError", ErrorCode.invalid_timestamp)
UnsupportedVersionError = _error("UnsupportedVersionError", ErrorCode.unsupported_version)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", ErrorCode.topic_already_exists)
InvalidPartitionsError = _error("InvalidPartitionsError", ErrorCode.invalid_partitions)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", ErrorCode.invalid_replication_factor)
InvalidReplicaAssignmentError = _error("InvalidReplicaAssignmentError", ErrorCode.invalid_replica_assignment)
InvalidConfigError = _error("InvalidConfigError", ErrorCode.invalid_config)
NotControllerError = _error("NotControllerError", ErrorCode.not_controller)
InvalidRequestError = _error("InvalidRequestError", ErrorCode.invalid_request)
UnsupportedForMessageFormatError = _error("UnsupportedForMessageFormatError", ErrorCode.unsupported_for_message_format)
PolicyViolationError = _error("PolicyViolationError", ErrorCode.policy_violation)
OutOfOrderSequenceNumberError = _error("OutOfOrderSequenceNumberError", ErrorCode.out_of_order_sequence_number)
DuplicateSequenceNumberError = _error("DuplicateSequenceNumberError", ErrorCode.duplicate_sequence_number)
InvalidProducerEpochError = _error("InvalidProducerEpochError", ErrorCode.invalid_producer_epoch)
InvalidTxnStateError = _error("InvalidTxnStateError", ErrorCode.invalid_txn_state)
InvalidProducerIdMappingError = _error("InvalidProducerIdMappingError", ErrorCode.invalid_producer_id_mapping)
TransactionalIdAuthorizationFailedError = _error("TransactionalIdAuthorizationFailedError", ErrorCode.transactional_id_authorization_failed)
KafkaStorageError = _error("KafkaStorageError", ErrorCode.kafka_storage_error)
LogDirNotFoundError = _error("LogDirNotFoundError", ErrorCode.log_dir_not_found)
UnknownProducerIdError = _error("UnknownProducerIdError", ErrorCode.unknown_producer_id)
NonEmptyGroupError = _error("NonEmptyGroupError", ErrorCode.non_empty_group)
GroupIdNotFoundError = _error("GroupIdNotFoundError", ErrorCode.group_id_not_found)
FencedLeaderEpochError = _error("FencedLeaderEpochError", ErrorCode.fenced_leader_epoch)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", ErrorCode.unknown_leader_epoch)
OffsetNotAvailableError = _error("OffsetNotAvailableError", ErrorCode.offset_not_available)
MemberIdRequiredError = _error("MemberIdRequiredError", ErrorCode.member_id_required)
GroupMaxSizeReachedError = _error("GroupMaxSizeReachedError", ErrorCode.group_max_size_reached)
FencedInstanceIdError = _error("FencedInstanceIdError", ErrorCode.fenced_instance_id)
GroupSubscribedToTopicError = _error("GroupSubscribedToTopicError", ErrorCode.group_subscribed_to_topic)
InvalidRecordError = _error("InvalidRecordError", ErrorCode.invalid_record)
UnstableOffsetCommitError = _error("UnstableOffsetCommitError", ErrorCode.unstable_offset_commit)
UnknownTopicIdError = _error("UnknownTopicIdError", ErrorCode.unknown_topic_id)
InconsistentTopicIdError = _error("InconsistentTopicIdError", ErrorCode.inconsistent_topic_id)
OffsetMovedToTieredStorageError = _error("OffsetMovedToTieredStorageError", ErrorCode.offset_moved_to_tiered_storage)
