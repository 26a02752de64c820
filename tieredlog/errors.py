"""Broker errors that map one-to-one onto Kafka's protocol error codes.

Every layer raises these; the server turns ``exc.code`` into the response's error code. The codes,
and whether a client may retry, come from one table: kio's ``ErrorCode``, generated from Kafka's
own. The log and tiering code never import the protocol package, only this module.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error
    retriable: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.retriable = cls.code.retriable

    def __init__(self, message: str = "", *, record_errors: Sequence[tuple[int, str]] = ()):
        super().__init__(message or self.__class__.__name__)
        # Kafka's RecordValidationException: the records of a refused batch that broke a per-record
        # rule, as (index in the record set, message); Produce answers them as KIP-467's record_errors.
        self.record_errors: list[tuple[int, str]] = list(record_errors)


class UnknownServerError(KafkaError):
    code = ErrorCode.unknown_server_error


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class UnexpectedAppendOffsetError(UnknownServerError):
    """A follower's append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException: the broker's own, with no error code of its own). The offsets
    let the partition tell a log start inside the leader's batch from a real overlap."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class CorruptMessageError(KafkaError):
    code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class InvalidFetchSizeError(KafkaError):
    code = ErrorCode.invalid_fetch_size


class LeaderNotAvailableError(KafkaError):
    code = ErrorCode.leader_not_available


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class RequestTimedOutError(KafkaError):
    code = ErrorCode.request_timed_out


class ReplicaNotAvailableError(KafkaError):
    code = ErrorCode.replica_not_available


class MessageTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(KafkaError):
    code = ErrorCode.not_coordinator


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class RecordListTooLargeError(KafkaError):
    code = ErrorCode.record_list_too_large


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    code = ErrorCode.not_enough_replicas_after_append


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.invalid_required_acks


class IllegalGenerationError(KafkaError):
    code = ErrorCode.illegal_generation


class InconsistentGroupProtocolError(KafkaError):
    code = ErrorCode.inconsistent_group_protocol


class InvalidGroupIdError(KafkaError):
    code = ErrorCode.invalid_group_id


class UnknownMemberIdError(KafkaError):
    code = ErrorCode.unknown_member_id


class InvalidSessionTimeoutError(KafkaError):
    code = ErrorCode.invalid_session_timeout


class RebalanceInProgressError(KafkaError):
    code = ErrorCode.rebalance_in_progress


class InvalidCommitOffsetSizeError(KafkaError):
    code = ErrorCode.invalid_commit_offset_size


class InvalidTimestampError(KafkaError):
    code = ErrorCode.invalid_timestamp


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.unsupported_version


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


class StaleControllerEpochError(KafkaError):
    code = ErrorCode.stale_controller_epoch


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedForMessageFormatError(KafkaError):
    code = ErrorCode.unsupported_for_message_format


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class OutOfOrderSequenceNumberError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceNumberError(KafkaError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


class InvalidProducerIdMappingError(KafkaError):
    code = ErrorCode.invalid_producer_id_mapping


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = ErrorCode.transactional_id_authorization_failed


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class LogDirNotFoundError(KafkaError):
    code = ErrorCode.log_dir_not_found


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class NonEmptyGroupError(KafkaError):
    code = ErrorCode.non_empty_group


class GroupIdNotFoundError(KafkaError):
    code = ErrorCode.group_id_not_found


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class OffsetNotAvailableError(KafkaError):
    code = ErrorCode.offset_not_available


class MemberIdRequiredError(KafkaError):
    code = ErrorCode.member_id_required


class GroupMaxSizeReachedError(KafkaError):
    code = ErrorCode.group_max_size_reached


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.fenced_instance_id


class GroupSubscribedToTopicError(KafkaError):
    code = ErrorCode.group_subscribed_to_topic


class InvalidRecordError(KafkaError):
    code = ErrorCode.invalid_record


class UnstableOffsetCommitError(KafkaError):
    code = ErrorCode.unstable_offset_commit


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.unknown_topic_id


class InconsistentTopicIdError(KafkaError):
    code = ErrorCode.inconsistent_topic_id


class OffsetMovedToTieredStorageError(KafkaError):
    code = ErrorCode.offset_moved_to_tiered_storage
