"""SASL and SCRAM credential APIs: SaslHandshake (17), SaslAuthenticate (36),
DescribeUserScramCredentials (50), AlterUserScramCredentials (51, KIP-554).

On a SASL listener the connection's authenticator (``tieredlog.security.sasl.authenticator``) answers
SaslHandshake and SaslAuthenticate before the dispatcher sees them; the handlers here answer them where
Kafka's KafkaApis does: on any other listener, and on a connection already authenticated without a
re-authentication (ILLEGAL_SASL_STATE).

The credential APIs behave as Kafka's ZooKeeper-mode broker: Describe reads the store (every broker)
and needs CLUSTER DESCRIBE; Alter must reach the active controller in a cluster (NOT_CONTROLLER
elsewhere), then needs CLUSTER ALTER, and validates as Kafka's ZkAdminManager does, with its error
codes and messages. The salted password a client sends
becomes StoredKey and ServerKey here; neither the request's secrets nor the stored ones are logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from kio.schema.errors import ErrorCode

from tieredlog.config import BrokerConfigError
from tieredlog.protocol.api import (
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from tieredlog.protocol.codec import encode_response, response_class
from tieredlog.security import scram
from tieredlog.security.authorizer.acl import AclOperation
from tieredlog.security.sasl.authenticator import SaslServerAuthenticator
from tieredlog.security.sasl.config import ListenerSasl, is_sasl, sasl_listeners
from tieredlog.security.scram import ScramCredential
from tieredlog.security.scram_store import FileScramCredentialStore, ScramCredentialStore, ZkScramCredentialStore
from tieredlog.server.authorization import REQUEST_RULES, AuthContext, AuthorizerServer, authorize_cluster
from tieredlog.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from pathlib import Path

    from kio.schema.alter_user_scram_credentials.v0 import AlterUserScramCredentialsRequest
    from kio.schema.describe_user_scram_credentials.v0 import DescribeUserScramCredentialsRequest

    from tieredlog.cluster.config_changes import ConfigChangeListener
    from tieredlog.cluster.membership import ZkClusterMembership
    from tieredlog.config import BrokerConfig
    from tieredlog.controller.controller import KafkaController

log = logging.getLogger(__name__)

USERNAME_MUST_NOT_BE_EMPTY = "Username must not be empty"
UNKNOWN_SCRAM_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS = "Too few iterations"
TOO_MANY_ITERATIONS = "Too many iterations"
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_UNKNOWN = "Attempt to delete a user credential that does not exist"
DESCRIBE_UNKNOWN = "Attempt to describe a user credential that does not exist"
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


class SaslSetupServer(Protocol):
    """What reading the SASL listeners' settings needs of the broker: it keeps them."""

    sasl_listeners: dict[str, ListenerSasl]

    @property
    def config(self) -> BrokerConfig: ...


class ScramStoreServer(Protocol):
    """What opening the SCRAM credential store needs of the broker: it keeps the store."""

    scram_credentials: ScramCredentialStore | None

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def log_dirs(self) -> Sequence[Path]: ...


class SaslListenerServer(Protocol):
    """What a connection's authenticator reads of the broker."""

    @property
    def sasl_listeners(self) -> Mapping[str, ListenerSasl]: ...

    @property
    def scram_credentials(self) -> ScramCredentialStore | None: ...


class ApiVersionsTable(Protocol):
    """The dispatcher's served versions by API key (a SASL client is told ApiVersions' highest)."""

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]: ...


class SaslConnectionServer(Protocol):
    """What a new connection's authenticator needs of the network server."""

    @property
    def broker(self) -> SaslListenerServer: ...

    @property
    def dispatcher(self) -> ApiVersionsTable: ...


class ScramApiServer(AuthorizerServer, Protocol):
    """What the SCRAM credential APIs need of the broker."""

    @property
    def scram_credentials(self) -> ScramCredentialStore | None: ...

    @property
    def cluster(self) -> ZkClusterMembership | None: ...

    @property
    def controller(self) -> KafkaController | None: ...


# ---- wiring ------------------------------------------------------------------------------------------

def configure_sasl(broker: SaslSetupServer) -> None:
    """Read every SASL listener's settings; BrokerConfigError when one is wrong (start-up stops)."""
    broker.sasl_listeners = sasl_listeners(broker.config)


async def open_scram_store(broker: ScramStoreServer, config_changes: ConfigChangeListener | None) -> None:
    """Open the SCRAM credential store: ZooKeeper in a cluster (``broker.cluster`` is connected, and
    ``config_changes`` keeps the cache current), else a file in the first log dir. Before any request
    is served; the reads run on an executor."""
    loop = asyncio.get_running_loop()
    if broker.cluster is not None:
        zk_store = ZkScramCredentialStore(broker.cluster.zk)
        if config_changes is not None:
            config_changes.on_user_config = zk_store.on_user_changed
        # after the listener is told: a change made while the users load is read again
        await loop.run_in_executor(None, zk_store.load)
        broker.scram_credentials = zk_store
        return
    file_store = FileScramCredentialStore(broker.log_dirs[0])
    try:
        await loop.run_in_executor(None, file_store.load)
    except ValueError as exc:
        raise BrokerConfigError(str(exc)) from None
    broker.scram_credentials = file_store


def connection_authenticator(server: SaslConnectionServer, listener_name: str, security_protocol: str
                             ) -> SaslServerAuthenticator | None:
    """The authenticator of a new connection on a SASL listener; None on any other listener."""
    if not is_sasl(security_protocol):
        return None
    broker = server.broker
    settings = broker.sasl_listeners.get(listener_name.upper())
    if settings is None:
        # a SASL listener the broker has no settings for: fail closed (every mechanism refused)
        settings = ListenerSasl(listener_name, ())
        log.error("listener %s speaks %s but has no SASL settings: its connections cannot authenticate",
                  listener_name, security_protocol)

    def credential(user: str, mechanism: str) -> ScramCredential | None:
        store = broker.scram_credentials  # read at each login: the store may open after the connection
        return None if store is None else store.credential(user, mechanism)

    api_versions = server.dispatcher.versions.get(API_VERSIONS, (0, 0))
    return SaslServerAuthenticator(settings, credential, api_versions_max=api_versions[1])


# ---- SaslHandshake / SaslAuthenticate outside the authenticator ---------------------------------------

async def handle_sasl_handshake(ctx: RequestContext[object], req: object) -> dict:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}


async def handle_sasl_authenticate(ctx: RequestContext[object], req: object) -> dict:
    return {"error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime": 0}


# ---- DescribeUserScramCredentials --------------------------------------------------------------------

def _credential_infos(configs: dict[str, str]) -> list[dict]:
    infos = []
    for name, mechanism in scram.MECHANISMS.items():
        text = configs.get(name)
        if text is not None:
            infos.append({"mechanism": mechanism.type_id, "iterations": scram.ScramCredential.from_text(text).iterations})
    return infos


def _has_scram(configs: dict[str, str]) -> bool:
    return any(name in configs for name in scram.MECHANISMS)


def describe_credentials(store: ScramCredentialStore, users: list[str] | None) -> dict:
    """Kafka's ZkAdminManager.describeUserScramCredentials (blocking)."""
    results: dict[str, dict] = {}

    def add(user: str, configs: dict[str, str], explicit: bool) -> None:
        result: dict[str, Any] = {"user": user, "error_code": ErrorCode.none, "error_message": None,
                                  "credential_infos": []}
        if _has_scram(configs):
            try:
                result["credential_infos"] = _credential_infos(configs)
            except scram.ScramFormatError as exc:
                result.update(error_code=ErrorCode.unknown_server_error, error_message=str(exc))
            results[user] = result
        elif explicit:
            result.update(error_code=ErrorCode.resource_not_found, error_message=f"{DESCRIBE_UNKNOWN}: {user}")
            results[user] = result

    try:
        if not users:
            for user, configs in store.all_user_configs().items():
                add(user, configs, False)
            ordered = sorted(results)
        else:
            counts = Counter(users)
            for user in counts:
                if not user:
                    results[user] = {"user": user, "error_code": ErrorCode.resource_not_found,
                                     "error_message": USERNAME_MUST_NOT_BE_EMPTY, "credential_infos": []}
                elif counts[user] > 1:
                    results[user] = {"user": user, "error_code": ErrorCode.duplicate_resource,
                                     "error_message": "Cannot describe SCRAM credentials for the same user twice in "
                                                      f"a single request: {user}", "credential_infos": []}
                else:
                    add(user, store.user_configs(user), True)
            ordered = list(counts)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper or the disk: the whole request fails, as in Kafka
        log.warning("Error processing describe user SCRAM credential configs request: %s", exc)
        return {"error_code": ErrorCode.unknown_server_error, "error_message": str(exc) or type(exc).__name__,
                "results": []}
    return {"error_code": ErrorCode.none, "error_message": None, "results": [results[u] for u in ordered]}


async def handle_describe_user_scram_credentials(ctx: RequestContext[ScramApiServer], req: DescribeUserScramCredentialsRequest
                                                 ) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        # Kafka's getErrorResponse: the error at the top and once per user asked for, without its name
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
                "results": [{"user": "", "error_code": ErrorCode.cluster_authorization_failed,
                             "error_message": CLUSTER_AUTHORIZATION_FAILED_MESSAGE, "credential_infos": []}
                            for _ in req.users or ()]}
    store = ctx.broker.scram_credentials
    if store is None:
        return {"throttle_time": 0, "error_code": ErrorCode.unknown_server_error,
                "error_message": "the SCRAM credential store is not open", "results": []}
    users = None if req.users is None else [u.name for u in req.users]
    answer = await asyncio.get_running_loop().run_in_executor(None, describe_credentials, store, users)
    return {"throttle_time": 0, **answer}


# ---- AlterUserScramCredentials -----------------------------------------------------------------------

def _result(user: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"user": user, "error_code": code, "error_message": message}


# one change at a time on this broker: each reads a user's configs, then writes them whole
_alter_lock = threading.Lock()


def alter_credentials(store: ScramCredentialStore, upsertions: list[Any], deletions: list[Any]) -> list[dict]:
    """Kafka's ZkAdminManager.alterUserScramCredentials (blocking): the same checks in the same order,
    one result per user."""
    with _alter_lock:
        return _alter(store, upsertions, deletions)


def _alter(store: ScramCredentialStore, upsertions: list[Any], deletions: list[Any]) -> list[dict]:
    results: list[dict] = []
    illegal: dict[str, str] = {}
    for d in deletions:
        if not d.name:
            illegal[d.name] = USERNAME_MUST_NOT_BE_EMPTY
        elif int(d.mechanism) not in scram.MECHANISMS_BY_TYPE:
            illegal[d.name] = UNKNOWN_SCRAM_MECHANISM
    for u in upsertions:
        if not u.name:
            illegal[u.name] = USERNAME_MUST_NOT_BE_EMPTY
        elif int(u.mechanism) not in scram.MECHANISMS_BY_TYPE:
            illegal[u.name] = UNKNOWN_SCRAM_MECHANISM
        elif u.iterations > scram.MAX_ITERATIONS:
            illegal[u.name] = TOO_MANY_ITERATIONS
        elif u.iterations < scram.MIN_ITERATIONS:
            illegal[u.name] = TOO_FEW_ITERATIONS
    for user, message in illegal.items():
        code = ErrorCode.unsupported_sasl_mechanism if message == UNKNOWN_SCRAM_MECHANISM else ErrorCode.unacceptable_credential
        results.append(_result(user, code, message))

    pairs = [(u.name, int(u.mechanism)) for u in upsertions if u.name not in illegal]
    pairs += [(d.name, int(d.mechanism)) for d in deletions if d.name not in illegal]
    duplicated = list(dict.fromkeys(user for (user, _), n in Counter(pairs).items() if n > 1))
    for user in duplicated:
        results.append(_result(user, ErrorCode.duplicate_resource, ALTERED_TWICE))
    candidates = list(dict.fromkeys(user for user, _ in pairs if user not in duplicated))

    configs: dict[str, dict[str, str]] = {}
    failed: dict[str, Exception] = {}
    for user in candidates:
        try:
            configs[user] = store.user_configs(user)
        except Exception as exc:  # noqa: BLE001 - reported for this user, as Kafka does
            failed[user] = exc
    missing = list(dict.fromkeys(
        d.name for d in deletions if d.name in configs
        and scram.MECHANISMS_BY_TYPE[int(d.mechanism)].name not in configs[d.name]))
    for user in missing:
        results.append(_result(user, ErrorCode.resource_not_found, DELETE_UNKNOWN))

    for user in candidates:
        if user in missing or user in failed:
            continue
        new = dict(configs[user])
        for d in deletions:
            if d.name == user:
                new.pop(scram.MECHANISMS_BY_TYPE[int(d.mechanism)].name, None)
        for u in upsertions:
            if u.name == user:
                mechanism = scram.MECHANISMS_BY_TYPE[int(u.mechanism)]
                credential = scram.credential_from_salted_password(mechanism, bytes(u.salt), bytes(u.salted_password),
                                                                   int(u.iterations))
                new[mechanism.name] = credential.to_text()
        try:
            store.change_user_configs(user, new)
        except Exception as exc:  # noqa: BLE001 - reported for this user, as Kafka does
            failed[user] = exc
            continue
        log.info("SCRAM credentials of user %s are now %s", user,
                 ", ".join(sorted(m for m in new if m in scram.MECHANISMS)) or "none")
    for user, error in failed.items():
        log.warning("Error encountered while altering user SCRAM credentials of %s: %s", user, error)
        results.append(_result(user, ErrorCode.unknown_server_error, "The server experienced an unexpected error "
                                                                     "when processing the request."))
    results += [_result(user, ErrorCode.none) for user in candidates if user not in missing and user not in failed]
    return results




async def handle_alter_user_scram_credentials(ctx: RequestContext[ScramApiServer], req: AlterUserScramCredentialsRequest) -> dict:
    broker = ctx.broker
    upsertions, deletions = list(req.upsertions), list(req.deletions)
    users = sorted({x.name for x in upsertions} | {x.name for x in deletions})
    if broker.cluster is not None and (broker.controller is None or not broker.controller.is_active):
        # Kafka's ZooKeeper mode: one writer, the controller, so two brokers never race on a user
        return {"throttle_time": 0, "results": [_result(user, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
                                                for user in users]}
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return {"throttle_time": 0, "results": [
            _result(user, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
            for user in users]}
    store = broker.scram_credentials
    if store is None:
        return {"throttle_time": 0, "results": [
            _result(user, ErrorCode.unknown_server_error, "the SCRAM credential store is not open")
            for user in users]}
    results = await asyncio.get_running_loop().run_in_executor(None, alter_credentials, store, upsertions, deletions)
    return {"throttle_time": 0, "results": results}


def handlers() -> dict[int, Handler[ScramApiServer]]:
    return {
        SASL_HANDSHAKE: handle_sasl_handshake,
        SASL_AUTHENTICATE: handle_sasl_authenticate,
        DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
        ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    }



def authenticator_answer(sasl: SaslServerAuthenticator, api_key: int, api_version: int, correlation_id: int,
                         body: Any) -> tuple[bytes, str | None]:
    """A SaslHandshake or SaslAuthenticate the connection's authenticator answers: (the response
    frame, None) or, when the authentication failed, (the frame, the reason to log before closing)."""
    if api_key == SASL_HANDSHAKE:
        reply = sasl.handshake(api_version, body.mechanism)
    else:
        reply = sasl.authenticate(api_version, bytes(body.auth_bytes))
    return encode_response(api_key, api_version, correlation_id, reply.body), reply.failure


def illegal_sasl_state_answer(ctx: AuthContext, body: Any) -> bytes | None:
    """The response Kafka's SaslServerAuthenticator sends to a request other than SaslAuthenticate
    while a mechanism runs: the request's own error response (its ``getErrorResponse``) carrying
    ILLEGAL_SASL_STATE. Built for the APIs whose error response is known here (those the authorizer
    refuses whole, and any whose response has a top-level error code); None for the others, and for a
    Produce with acks=0: the connection then closes without an answer."""
    code = ErrorCode.illegal_sasl_state
    rule = REQUEST_RULES.get(ctx.api_key)
    if rule is not None:
        answer = rule.deny(ctx, body, code)
    elif any(f.name == "error_code" for f in dataclasses.fields(response_class(ctx.api_key, ctx.api_version))):
        answer = {"error_code": code}
    else:
        return None
    if not isinstance(answer, dict):
        return None
    return encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, answer)

