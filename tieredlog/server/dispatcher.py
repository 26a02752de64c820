"""Maps (api key, version) to a handler and turns the handler's answer into response bytes.

Wiring, with main: the one place the Broker meets the handlers, so its table is where the type checker
holds the Broker to each API module's broker Protocol."""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import (
    ACL_VERSIONS,
    API_VERSIONS,
    CLUSTER_ADMIN_VERSIONS,
    CORE_VERSIONS,
    GROUP_VERSIONS,
    INTER_BROKER_VERSIONS,
    PRODUCE_REJECTED_BELOW,
    SASL_VERSIONS,
    TXN_VERSIONS,
)
from tieredlog.protocol.codec import encode_response
from tieredlog.server.authorization import check_request
from tieredlog.server.context import CLOSE_CONNECTION, NO_RESPONSE, Handler, RequestContext
from tieredlog.server.network import RawResponse

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, broker: Broker) -> None:
        from tieredlog.server import (
            acl_apis,
            admin_apis,
            cluster_admin_apis,
            config_apis,
            fetch_api,
            group_apis,
            inter_broker_apis,
            log_dir_apis,
            metadata_apis,
            offset_apis,
            produce_api,
            producer_apis,
            sasl_apis,
            txn_apis,
        )

        self.broker = broker
        # each module's handlers take a context of its own broker Protocol: here the broker is held to each
        self.handlers: dict[int, Handler[Broker]] = {API_VERSIONS: self.api_versions}
        for mod in (produce_api, fetch_api, metadata_apis, offset_apis, admin_apis, config_apis, producer_apis,
                    log_dir_apis, acl_apis):
            self.handlers.update(mod.handlers())
        self.handlers.update(group_apis.group_handlers(broker))
        self.handlers.update(txn_apis.handlers())
        self.handlers.update(sasl_apis.handlers())
        versions = {**CORE_VERSIONS, **GROUP_VERSIONS, **TXN_VERSIONS, **ACL_VERSIONS}
        versions.update(SASL_VERSIONS)
        if broker.config.get("zookeeper.connect"):
            # as a ZooKeeper-mode Kafka broker: the controller's requests and the brokers' to it
            self.handlers.update(inter_broker_apis.handlers())
            self.handlers.update(cluster_admin_apis.handlers())
            versions.update(INTER_BROKER_VERSIONS)
            versions.update(CLUSTER_ADMIN_VERSIONS)
        self.versions: dict[int, tuple[int, int]] = {k: v for k, v in versions.items() if k in self.handlers}

    def handler_for(self, api_key: int, version: int) -> Handler[Broker] | None:
        rng = self.versions.get(api_key)
        if rng is None or not rng[0] <= version <= rng[1]:
            return None
        return self.handlers.get(api_key)

    async def run(self, handler: Handler[Broker], ctx: RequestContext[Broker], body: Any, received: float | None = None) -> Any:
        if received is not None:  # the request waited this long for the event loop to start it
            ctx.broker.metrics.record_queue_time(ctx.api_key, received)
        # an API's per-request authorization (its cluster operation, group or transactional id): a
        # denied request is answered with the API's own error response and its handler never runs
        result = check_request(ctx, body)
        if result is None:
            result = await handler(ctx, body)
        if result is NO_RESPONSE or result is CLOSE_CONNECTION or isinstance(result, (RawResponse, bytes)):
            return result
        return encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, result)

    def api_keys(self) -> list[dict[str, int]]:
        return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(self.versions.items())]

    async def api_versions(self, ctx: RequestContext[object], req: object) -> dict:
        return {"error_code": ErrorCode.none, "api_keys": self.api_keys(), "throttle_time": 0}

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """ApiVersions v0 response with UNSUPPORTED_VERSION and the table (Kafka's answer to a version
        it does not know, so the client can retry with one it does)."""
        return encode_response(
            API_VERSIONS, 0, correlation_id, {"error_code": ErrorCode.unsupported_version, "api_keys": self.api_keys()}
        )

    def reject_old_produce(self, payload: bytes, version: int, correlation_id: int) -> bytes:
        """Produce v0-2 are advertised (KAFKA-18659) but refused: every partition gets
        UNSUPPORTED_VERSION. kio has no v0-2 schemas, so these few fields are read by hand."""
        assert version < PRODUCE_REJECTED_BELOW
        pos = 8
        (cid_len,) = struct.unpack_from(">h", payload, pos)
        pos += 2 + max(cid_len, 0)
        acks, _timeout, ntopics = struct.unpack_from(">hii", payload, pos)
        pos += 10
        out = bytearray(struct.pack(">i", correlation_id))
        out += struct.pack(">i", ntopics)
        for _ in range(ntopics):
            (nlen,) = struct.unpack_from(">h", payload, pos)
            name = bytes(payload[pos : pos + 2 + nlen])
            pos += 2 + nlen
            (nparts,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            out += name + struct.pack(">i", nparts)
            for _ in range(nparts):
                index, rlen = struct.unpack_from(">ii", payload, pos)
                pos += 8 + max(rlen, 0)
                out += struct.pack(">ihq", index, ErrorCode.unsupported_version, -1)
                if version >= 2:
                    out += struct.pack(">q", -1)  # log_append_time
        if version >= 1:
            out += struct.pack(">i", 0)  # throttle_time_ms
        if acks == 0:
            return NO_RESPONSE  # type: ignore[return-value]
        return struct.pack(">i", len(out)) + bytes(out)
