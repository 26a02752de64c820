"""Transactions are not served here: the one answer for every request that needs a transaction
coordinator (FindCoordinator with key_type TRANSACTION, InitProducerId with a transactional id).

TRANSACTIONAL_ID_AUTHORIZATION_FAILED is the only error both the Java client and librdkafka treat as
fatal at FindCoordinator: any other one (COORDINATOR_NOT_AVAILABLE included) is retried until the
client's init_transactions timeout, so a transactional producer would hang instead of failing.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

NO_TRANSACTION_COORDINATOR = ErrorCode.transactional_id_authorization_failed
NO_TRANSACTION_COORDINATOR_MESSAGE = (
    "this broker has no transaction coordinator (transactions are not supported); unset transactional.id"
)
