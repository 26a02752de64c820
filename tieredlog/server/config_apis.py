"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Topic configs are resolved like Kafka: a topic override (DYNAMIC_TOPIC_CONFIG), else the broker's
synonym when the operator set it (STATIC_BROKER_CONFIG), else the default (DEFAULT_CONFIG).
Altered topic configs are persisted by the Broker (the response waits until they are on disk) and
survive restarts. Broker configs are static.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tieredlog.config import BROKER_CONFIG_DEFS
from tieredlog.errors import InvalidConfigError, InvalidRequestError, KafkaError
from tieredlog.log.config import TOPIC_CONFIGS, TOPIC_CONFIGS_BY_NAME
from tieredlog.protocol.api import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from tieredlog.security.authorizer.acl import AclOperation, ResourceType
from tieredlog.server.authorization import authorize, authorize_cluster
from tieredlog.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker

TOPIC = 2
BROKER = 4

# ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# ConfigType
_TYPES = {"bool": 1, "str": 2, "int": 5, "float": 6, "list": 7}
_SENSITIVE_HINTS = ("password", "secret", "credentials")

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# ConfigResource types whose configs Kafka guards with the cluster's permission
_CLUSTER_CONFIG_TYPES = (BROKER, 8, 16)  # BROKER, BROKER_LOGGER, CLIENT_METRICS
_GROUP_CONFIG_TYPE = 32


def _config_denied(ctx: RequestContext, r: Any, operation: AclOperation) -> ErrorCode | None:
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


def _fmt(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def topic_config_entries(broker: Broker, overrides: dict[str, str], keys: Any = None, synonyms: bool = False) -> list[dict]:
    values = dataclasses.asdict(broker.log_config_for(overrides))
    out = []
    for d in TOPIC_CONFIGS:
        if keys is not None and d.name not in keys:
            continue
        broker_value, broker_explicit = (
            broker.config.broker_value_for_topic_config(d.name) if d.broker_synonym else (d.default, False)
        )
        if d.name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif broker_explicit:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        syn = []
        if synonyms:
            if d.name in overrides:
                syn.append({"name": d.name, "value": _fmt(values[d.attr]), "source": DYNAMIC_TOPIC_CONFIG})
            if broker_explicit:
                syn.append({"name": d.broker_synonym, "value": _fmt(broker_value), "source": STATIC_BROKER_CONFIG})
            syn.append({"name": d.broker_synonym or d.name, "value": _fmt(d.default), "source": DEFAULT_CONFIG})
        out.append({
            "name": d.name,
            "value": _fmt(values[d.attr]),
            "read_only": False,
            "config_source": source,
            "is_default": source == DEFAULT_CONFIG,
            "is_sensitive": False,
            "synonyms": syn,
            "config_type": _TYPES.get(d.kind, 2),
            "documentation": None,
        })
    return out


def broker_config_entries(broker: Broker, keys: Any = None) -> list[dict]:
    cfg = broker.config
    out: list[dict] = []
    for name, d in sorted(BROKER_CONFIG_DEFS.items()):
        if keys is not None and name not in keys:
            continue
        sensitive = any(h in name for h in _SENSITIVE_HINTS)
        explicit = name in cfg.explicit
        out.append({
            "name": name,
            "value": None if sensitive else _fmt(cfg.get(name)),
            "read_only": True,
            "config_source": STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG,
            "is_default": not explicit,
            "is_sensitive": sensitive,
            "synonyms": [],
            "config_type": _TYPES.get(d.kind, 2),
            "documentation": d.doc or None,
        })
    for name in sorted(cfg.passthrough):
        if keys is None or name in keys:
            out.append({"name": name, "value": None, "read_only": True, "config_source": STATIC_BROKER_CONFIG,
                        "is_default": False, "is_sensitive": True, "synonyms": [], "config_type": 2, "documentation": None})
    return out


async def handle_describe_configs(ctx: RequestContext, req: Any) -> dict:
    broker = ctx.broker
    synonyms = getattr(req, "include_synonyms", False)
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
                res["configs"] = broker_config_entries(broker, keys)
        else:
            res.update(error_code=ErrorCode.invalid_request, error_message=f"Unsupported resource type {r.resource_type}")
        results.append(res)
    return {"throttle_time": 0, "results": results}


def _apply(broker: Broker, r: Any, overrides: dict[str, str], validate_only: bool) -> dict:
    res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type, "resource_name": r.resource_name}
    try:
        if r.resource_type == BROKER:
            raise InvalidRequestError("Broker configs are static on this broker; change server.properties and restart")
        if r.resource_type != TOPIC:
            raise InvalidRequestError(f"Unsupported resource type {r.resource_type}")
        for name in overrides:
            if name not in TOPIC_CONFIGS_BY_NAME:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
        broker.alter_topic_configs(r.resource_name, overrides, validate_only)
    except KafkaError as exc:
        res.update(error_code=exc.code, error_message=str(exc))
    return res


async def handle_alter_configs(ctx: RequestContext, req: Any) -> dict:
    """Legacy AlterConfigs replaces a topic's whole override set."""
    out = []
    for r in req.resources:
        denied = _config_denied(ctx, r, AclOperation.ALTER_CONFIGS)
        if denied is not None:
            out.append({"error_code": denied, "error_message": None, "resource_type": r.resource_type,
                        "resource_name": r.resource_name})
            continue
        overrides = {c.name: c.value for c in r.configs if c.value is not None}
        out.append(_apply(ctx.broker, r, overrides, req.validate_only))
    if not req.validate_only:
        await ctx.broker.topics_durable()
    return {"throttle_time": 0, "responses": out}


async def handle_incremental_alter_configs(ctx: RequestContext, req: Any) -> dict:
    broker = ctx.broker
    out = []
    for r in req.resources:
        denied = _config_denied(ctx, r, AclOperation.ALTER_CONFIGS)
        if denied is not None:
            out.append({"error_code": denied, "error_message": None, "resource_type": r.resource_type,
                        "resource_name": r.resource_name})
            continue
        t = broker.get_topic(r.resource_name) if r.resource_type == TOPIC else None
        overrides = dict(t.configs) if t else {}
        error: dict | None = None
        for c in r.configs:
            op = c.config_operation
            d = TOPIC_CONFIGS_BY_NAME.get(c.name)
            if op == SET:
                overrides[c.name] = c.value if c.value is not None else ""
            elif op == DELETE:
                overrides.pop(c.name, None)
            elif op in (APPEND, SUBTRACT):
                if d is None or c.name not in ("cleanup.policy", "leader.replication.throttled.replicas",
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
        if error is not None:
            out.append({"resource_type": r.resource_type, "resource_name": r.resource_name, **error})
            continue
        out.append(_apply(broker, r, overrides, req.validate_only))
    if not req.validate_only:
        await broker.topics_durable()
    return {"throttle_time": 0, "responses": out}


def handlers() -> dict[int, Handler]:
    return {
        DESCRIBE_CONFIGS: handle_describe_configs,
        ALTER_CONFIGS: handle_alter_configs,
        INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    }
