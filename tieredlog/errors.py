"""Broker errors that map one-to-one onto Kafka's protocol error codes.

Every layer raises these; the server turns ``exc.code`` into the response's error code. The log
and tiering code never import the protocol package, only this module.
"""

from __future__ import annotations


class KafkaError(Exception):
    code: int = -1  # UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str = ""):
        super().__init__(message or self.__class__.__name__)


def _error(name: str, code: int, retriable: bool = False) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "retriable": retriable})
    globals()[name] = cls
    return cls


UnknownServerError = _error("UnknownServerError", -1)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", 1)
CorruptMessageError = _error("CorruptMessageError", 2, True)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", 3, True)
InvalidFetchSizeError = _error("InvalidFetchSizeError", 4)
LeaderNotAvailableError = _error("LeaderNotAvailableError", 5, True)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", 6, True)
RequestTimedOutError = _error("RequestTimedOutError", 7, True)
ReplicaNotAvailableError = _error("ReplicaNotAvailableError", 9, True)
MessageTooLargeError = _error("MessageTooLargeError", 10)
CoordinatorLoadInProgressError = _error("CoordinatorLoadInProgressError", 14, True)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError", 15, True)
NotCoordinatorError = _error("NotCoordinatorError", 16, True)
InvalidTopicError = _error("InvalidTopicError", 17)
RecordListTooLargeError = _error("RecordListTooLargeError", 18)
NotEnoughReplicasError = _error("NotEnoughReplicasError", 19, True)
NotEnoughReplicasAfterAppendError = _error("NotEnoughReplicasAfterAppendError", 20, True)
InvalidRequiredAcksError = _error("InvalidRequiredAcksError", 21)
IllegalGenerationError = _error("IllegalGenerationError", 22)
InconsistentGroupProtocolError = _error("InconsistentGroupProtocolError", 23)
InvalidGroupIdError = _error("InvalidGroupIdError", 24)
UnknownMemberIdError = _error("UnknownMemberIdError", 25)
InvalidSessionTimeoutError = _error("InvalidSessionTimeoutError", 26)
RebalanceInProgressError = _error("RebalanceInProgressError", 27)
InvalidCommitOffsetSizeError = _error("InvalidCommitOffsetSizeError", 28)
InvalidTimestampError = _error("InvalidTimestampError", 32)
UnsupportedVersionError = _error("UnsupportedVersionError", 35)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", 36)
InvalidPartitionsError = _error("InvalidPartitionsError", 37)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", 38)
InvalidReplicaAssignmentError = _error("InvalidReplicaAssignmentError", 39)
InvalidConfigError = _error("InvalidConfigError", 40)
NotControllerError = _error("NotControllerError", 41, True)
InvalidRequestError = _error("InvalidRequestError", 42)
UnsupportedForMessageFormatError = _error("UnsupportedForMessageFormatError", 43)
PolicyViolationError = _error("PolicyViolationError", 44)
OutOfOrderSequenceNumberError = _error("OutOfOrderSequenceNumberError", 45)
DuplicateSequenceNumberError = _error("DuplicateSequenceNumberError", 46)
InvalidProducerEpochError = _error("InvalidProducerEpochError", 47)
InvalidTxnStateError = _error("InvalidTxnStateError", 48)
InvalidProducerIdMappingError = _error("InvalidProducerIdMappingError", 49)
TransactionalIdAuthorizationFailedError = _error("TransactionalIdAuthorizationFailedError", 53)
KafkaStorageError = _error("KafkaStorageError", 56, True)
LogDirNotFoundError = _error("LogDirNotFoundError", 57)
UnknownProducerIdError = _error("UnknownProducerIdError", 59)
NonEmptyGroupError = _error("NonEmptyGroupError", 68)
GroupIdNotFoundError = _error("GroupIdNotFoundError", 69)
FencedLeaderEpochError = _error("FencedLeaderEpochError", 74, True)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", 75, True)
OffsetNotAvailableError = _error("OffsetNotAvailableError", 78, True)
MemberIdRequiredError = _error("MemberIdRequiredError", 79)
GroupMaxSizeReachedError = _error("GroupMaxSizeReachedError", 81)
FencedInstanceIdError = _error("FencedInstanceIdError", 82)
GroupSubscribedToTopicError = _error("GroupSubscribedToTopicError", 86)
InvalidRecordError = _error("InvalidRecordError", 87)
UnstableOffsetCommitError = _error("UnstableOffsetCommitError", 88, True)
UnknownTopicIdError = _error("UnknownTopicIdError", 100, True)
InconsistentTopicIdError = _error("InconsistentTopicIdError", 103, True)
OffsetMovedToTieredStorageError = _error("OffsetMovedToTieredStorageError", 109)
