"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Topic configs are resolved like Kafka: a topic override (DYNAMIC_TOPIC_CONFIG), else the broker's
synonym set dynamically for this broker (DYNAMIC_BROKER_CONFIG) or for all (DYNAMIC_DEFAULT_BROKER_CONFIG),
else in server.properties (STATIC_BROKER_CONFIG), else the default (DEFAULT_CONFIG).
Altered topic configs are persisted by the Broker (the response waits until they are on disk) and
survive restarts. Broker configs Kafka can change without a restart are altered through
tieredlog.server.dynamic_config; the others are refused.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.config import BROKER_CONFIG_DEFS, BROKER_SYNONYMS, LISTENER_PREFIX, is_sensitive_config
from tieredlog.errors import InvalidConfigError, InvalidRequestError, KafkaError
from tieredlog.log.config import TOPIC_CONFIGS, TOPIC_CONFIGS_BY_NAME
from tieredlog.protocol.api import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import AuthorizerServer, authorize, authorize_cluster
from tieredlog.server.config_synonyms import (
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    Synonym,
    config_synonyms,
    source_of,
    topic_config_synonyms,
)
from tieredlog.server.config_synonyms import fmt as _fmt
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.dynamic_config import (
    DEFAULT_ENTITY,
    DynamicBrokerConfig,
    DynamicConfigServer,
    alter_broker_configs,
    check_names,
    is_dynamic,
    is_password,
    listener_config,
)
from tieredlog.server.kafka_broker_configs import KAFKA_BROKER_CONFIGS, KAFKA_DYNAMIC_BROKER_CONFIGS

if TYPE_CHECKING:
    from tieredlog.log.config import LogConfig
    from tieredlog.server.admin_requests import (
        KioAlterConfigsRequest,
        KioDescribeConfigsRequest,
        KioIncrementalAlterConfigsRequest,
    )
    from tieredlog.server.topic_store import TopicMetadata

TOPIC = 2
BROKER = 4

# ConfigType
_TYPES = {"bool": 1, "str": 2, "int": 5, "float": 6, "list": 7}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# ConfigResource types whose configs Kafka guards with the cluster's permission
_CLUSTER_CONFIG_TYPES = (BROKER, 8, 16)  # BROKER, BROKER_LOGGER, CLIENT_METRICS
_GROUP_CONFIG_TYPE = 32


class TopicConfigServer(Protocol):
    """What describing a topic's configs needs of the broker."""

    @property
    def dynamic_config(self) -> DynamicBrokerConfig: ...

    def log_config_for(self, overrides: dict[str, str]) -> LogConfig: ...


class ConfigServer(TopicConfigServer, DynamicConfigServer, AuthorizerServer, Protocol):
    """What the config APIs need of the broker."""

    def get_topic(self, name: str) -> TopicMetadata | None: ...

    def alter_topic_configs(self, name: str, overrides: dict[str, str], validate_only: bool = False) -> None: ...

    async def topics_durable(self, wait_s: float = 10.0) -> None: ...


class ConfigResource(Protocol):
    """A resource of DescribeConfigs, AlterConfigs or IncrementalAlterConfigs (every version)."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


def _config_denied(ctx: RequestContext[ConfigServer], r: ConfigResource, operation: AclOperation) -> ErrorCode | None:
    """Kafka's check of DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource: the error it is
    refused with, or None. Other types are left to the handler (INVALID_REQUEST)."""
    if r.resource_type in _CLUSTER_CONFIG_TYPES:
        return None if authorize_cluster(ctx, operation) else ErrorCode.cluster_authorization_failed
    if r.resource_type == TOPIC:
        return None if authorize(ctx, operation, ResourceType.TOPIC, r.resource_name) \
            else ErrorCode.topic_authorization_failed
    if r.resource_type == _GROUP_CONFIG_TYPE:
        return None if authorize(ctx, operation, ResourceType.GROUP, r.resource_name) \
            else ErrorCode.group_authorization_failed
    return None


def topic_config_entries(broker: TopicConfigServer, overrides: dict[str, str], keys: Any = None, synonyms: bool = False) -> list[dict]:
    values = dataclasses.asdict(broker.log_config_for(overrides))
    out = []
    for d in TOPIC_CONFIGS:
        if keys is not None and d.name not in keys:
            continue
        value = _fmt(values[d.attr])
        dyn = broker.dynamic_config
        syn = topic_config_synonyms(dyn.static, dyn.default, dyn.per_broker, d, overrides, value)
        source = source_of(syn)
        out.append({
            "name": d.name,
            "value": value,
            "read_only": False,
            "config_source": source,
            "is_default": source == DEFAULT_CONFIG,
            "is_sensitive": False,
            "synonyms": syn if synonyms else [],
            "config_type": _TYPES.get(d.kind, 2),
            "documentation": None,
        })
    return out


def _is_sensitive(name: str) -> bool:
    """Kafka's PASSWORD type: the value is answered null with is_sensitive."""
    return is_sensitive_config(name)


def _broker_synonyms(broker: ConfigServer, name: str, sensitive: bool, default_only: bool) -> list[Synonym]:
    """Kafka's synonyms of a broker config; for the cluster-wide default resource only that level's."""
    dyn = broker.dynamic_config
    syn = config_synonyms(dyn.static, dyn.default, dyn.per_broker, name, sensitive)
    return [s for s in syn if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG] if default_only else syn


def _broker_entry(name: str, value: str | None, syn: list[Synonym], synonyms: bool, *, read_only: bool,
                  sensitive: bool, config_type: int, doc: str | None = None) -> dict:
    source = source_of(syn)
    return {"name": name, "value": None if sensitive else value, "read_only": read_only, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": sensitive, "synonyms": syn if synonyms else [],
            "config_type": config_type, "documentation": doc}


def broker_config_entries(broker: ConfigServer, keys: Any = None, synonyms: bool = False, default_only: bool = False) -> list[dict]:
    """This broker's configs; ``default_only``: the cluster-wide dynamic defaults alone (Kafka answers
    resource name "" with those)."""
    cfg = broker.config
    dyn = broker.dynamic_config
    out: list[dict] = []
    for name, d in sorted(BROKER_CONFIG_DEFS.items()):
        if keys is not None and name not in keys:
            continue
        if default_only and name not in dyn.default:
            continue
        sensitive = _is_sensitive(name)
        value = dyn.default[name] if default_only else _fmt(cfg.get(name))
        out.append(_broker_entry(name, value, _broker_synonyms(broker, name, sensitive, default_only), synonyms,
                                 read_only=not is_dynamic(name), sensitive=sensitive,
                                 config_type=_TYPES.get(d.kind, 2), doc=d.doc or None))
    out += _listener_entries(broker, keys, synonyms, default_only)
    out += _stored_only_entries(broker, keys, synonyms, default_only)
    if default_only:
        return out
    for name in sorted(cfg.passthrough):
        if keys is None or name in keys:
            out.append({"name": name, "value": None, "read_only": True, "config_source": STATIC_BROKER_CONFIG,
                        "is_default": False, "is_sensitive": True, "synonyms": [], "config_type": 2, "documentation": None})
    return out


def _listener_entries(broker: ConfigServer, keys: Any, synonyms: bool, default_only: bool) -> list[dict]:
    """``listener.name.<l>.<config>`` configs set statically or dynamically (Kafka lists them beside the others)."""
    dyn = broker.dynamic_config
    names = set(dyn.default) if default_only else set(dyn.default) | set(dyn.per_broker) | {
        f"{LISTENER_PREFIX}{listener}.{c}" for listener, cs in dyn.static.listener_overrides.items() for c in cs}
    out = []
    for name in sorted(n for n in names if keys is None or n in keys):
        prefixed = listener_config(name)
        if prefixed is None:
            continue
        base = BROKER_CONFIG_DEFS.get(prefixed[1])
        sensitive = _is_sensitive(name)
        syn = _broker_synonyms(broker, name, sensitive, default_only)
        out.append(_broker_entry(name, syn[0]["value"] if syn else None, syn, synonyms,
                                 read_only=not is_dynamic(name), sensitive=sensitive,
                                 # Kafka's ConfigType PASSWORD is 9
                                 config_type={**_TYPES, "password": 9}.get(base.kind, 2) if base is not None else 2))
    return out


def _stored_only_entries(broker: ConfigServer, keys: Any, synonyms: bool, default_only: bool) -> list[dict]:
    """Dynamic configs this broker stores without using them (Kafka's that it does not implement, and
    custom ones for plugins). Kafka hides the value of a config whose type it does not know."""
    dyn = broker.dynamic_config
    names = set(dyn.default) if default_only else set(dyn.default) | set(dyn.per_broker)
    out = []
    for name in sorted(n for n in names if keys is None or n in keys):
        if name in BROKER_CONFIG_DEFS or listener_config(name) is not None:
            continue
        sensitive = name not in KAFKA_BROKER_CONFIGS or is_password(name)
        syn = _broker_synonyms(broker, name, sensitive, default_only)
        out.append(_broker_entry(name, syn[0]["value"] if syn else None, syn, synonyms,
                                 read_only=name not in KAFKA_DYNAMIC_BROKER_CONFIGS, sensitive=sensitive,
                                 config_type=2 if name in KAFKA_BROKER_CONFIGS else 0))
    return out


async def handle_describe_configs(ctx: RequestContext[ConfigServer], req: KioDescribeConfigsRequest) -> dict:
    broker = ctx.broker
    synonyms = req.include_synonyms
    results = []
    for r in req.resources:
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        res: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                               "resource_name": r.resource_name, "configs": []}
        denied = _config_denied(ctx, r, AclOperation.DESCRIBE_CONFIGS)
        if denied is not None:
            res["error_code"] = denied
        elif r.resource_type == TOPIC:
            t = broker.get_topic(r.resource_name)
            if t is None:
                res.update(error_code=ErrorCode.unknown_topic_or_partition, error_message=f"Topic {r.resource_name} not found")
            else:
                res["configs"] = topic_config_entries(broker, t.configs, keys, synonyms)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.node_id)):
                res.update(error_code=ErrorCode.invalid_request, error_message=f"Unexpected broker id {r.resource_name}")
            else:
                res["configs"] = broker_config_entries(broker, keys, synonyms, default_only=r.resource_name == "")
        else:
            res.update(error_code=ErrorCode.invalid_request, error_message=f"Unsupported resource type {r.resource_type}")
        results.append(res)
    return {"throttle_time": 0, "results": results}


def _apply(broker: ConfigServer, r: ConfigResource, overrides: dict[str, str], validate_only: bool) -> dict:
    res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type, "resource_name": r.resource_name}
    try:
        if r.resource_type != TOPIC:
            raise InvalidRequestError(f"Unsupported resource type {r.resource_type}")
        for name in overrides:
            if name not in TOPIC_CONFIGS_BY_NAME:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
        broker.alter_topic_configs(r.resource_name, overrides, validate_only)
    except KafkaError as exc:
        res.update(error_code=exc.code, error_message=str(exc))
    return res


async def _alter_broker(broker: ConfigServer, r: ConfigResource, names: list[str], configs: dict[str, str] | None,
                        validate_only: bool) -> dict:
    """AlterConfigs on a BROKER resource: ``configs`` replaces the level (None: the level as it is with
    ``names`` checked only, for an incremental request already refused)."""
    res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type, "resource_name": r.resource_name}
    try:
        if r.resource_name not in ("", str(broker.node_id)):
            raise InvalidRequestError(f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                      f"but received {r.resource_name}")
        check_names(names)
        if configs is not None:
            await alter_broker_configs(broker, DEFAULT_ENTITY if r.resource_name == "" else r.resource_name,
                                       configs, validate_only)
    except KafkaError as exc:
        res.update(error_code=exc.code, error_message=str(exc))
    return res


def _broker_level(broker: ConfigServer, r: ConfigResource) -> dict[str, str]:
    return dict(broker.dynamic_config.level(DEFAULT_ENTITY if r.resource_name == "" else r.resource_name))


async def handle_alter_configs(ctx: RequestContext[ConfigServer], req: KioAlterConfigsRequest) -> dict:
    """Legacy AlterConfigs replaces a topic's whole override set."""
    out = []
    for r in req.resources:
        denied = _config_denied(ctx, r, AclOperation.ALTER_CONFIGS)
        if denied is not None:
            out.append({"error_code": denied, "error_message": None, "resource_type": r.resource_type,
                        "resource_name": r.resource_name})
            continue
        overrides = {c.name: c.value for c in r.configs if c.value is not None}
        if r.resource_type == BROKER:
            out.append(await _alter_broker(ctx.broker, r, list(overrides), overrides, req.validate_only))
            continue
        out.append(_apply(ctx.broker, r, overrides, req.validate_only))
    if not req.validate_only:
        await ctx.broker.topics_durable()
    return {"throttle_time": 0, "responses": out}


async def handle_incremental_alter_configs(ctx: RequestContext[ConfigServer], req: KioIncrementalAlterConfigsRequest) -> dict:
    broker = ctx.broker
    out = []
    for r in req.resources:
        denied = _config_denied(ctx, r, AclOperation.ALTER_CONFIGS)
        if denied is not None:
            out.append({"error_code": denied, "error_message": None, "resource_type": r.resource_type,
                        "resource_name": r.resource_name})
            continue
        t = broker.get_topic(r.resource_name) if r.resource_type == TOPIC else None
        is_broker = r.resource_type == BROKER
        overrides = dict(t.configs) if t else _broker_level(broker, r) if is_broker else {}
        error: dict | None = None
        for c in r.configs:
            op = c.config_operation
            d = TOPIC_CONFIGS_BY_NAME.get(BROKER_SYNONYMS.get(c.name, "") if is_broker else c.name)
            if op == SET:
                overrides[c.name] = c.value if c.value is not None else ""
            elif op == DELETE:
                overrides.pop(c.name, None)
            elif op in (APPEND, SUBTRACT):
                if d is None or d.name not in ("cleanup.policy", "leader.replication.throttled.replicas",
                                               "follower.replication.throttled.replicas"):
                    error = {"error_code": InvalidConfigError.code,
                             "error_message": f"Config {c.name} is not a list; APPEND/SUBTRACT do not apply"}
                    break
                current = overrides.get(c.name, _fmt(dataclasses.asdict(broker.log_config_for({}))[d.attr]) or "")
                items = [x for x in current.split(",") if x]
                delta = [x.strip() for x in (c.value or "").split(",") if x.strip()]
                if op == APPEND:
                    items += [x for x in delta if x not in items]
                else:
                    items = [x for x in items if x not in delta]
                overrides[c.name] = ",".join(items)
            else:
                error = {"error_code": ErrorCode.invalid_request, "error_message": f"Unknown config operation {op}"}
                break
        if is_broker:
            names = [c.name for c in r.configs]
            res = await _alter_broker(broker, r, names, overrides if error is None else None, req.validate_only)
            if res["error_code"] or error is None:
                out.append(res)
                continue
        if error is not None:
            out.append({"resource_type": r.resource_type, "resource_name": r.resource_name, **error})
            continue
        out.append(_apply(broker, r, overrides, req.validate_only))
    if not req.validate_only:
        await broker.topics_durable()
    return {"throttle_time": 0, "responses": out}


def handlers() -> dict[int, Handler[ConfigServer]]:
    return {
        DESCRIBE_CONFIGS: handle_describe_configs,
        ALTER_CONFIGS: handle_alter_configs,
        INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    }
