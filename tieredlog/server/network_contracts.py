"""What the listeners' connections (tieredlog.server.network) need of the broker and of the dispatcher:
Protocols that the Broker and the Dispatcher satisfy, checked where server/main.py wires them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, TypeVar

from tieredlog.server.authorization import AuthorizerServer
from tieredlog.server.context import Handler, RequestContext
from tieredlog.server.dynamic_tls import Reconfigurable
from tieredlog.server.sasl_apis import SaslListenerServer

if TYPE_CHECKING:
    from tieredlog.config import BrokerConfig
    from tieredlog.replication.delayed_fetch import PartitionWatchers


class RequestMetrics(Protocol):
    """The broker's metrics as the writer records each response (tieredlog.server.broker_metrics)."""

    def record_request(self, api_key: int, received: float) -> None: ...


class NetworkBroker(AuthorizerServer, SaslListenerServer, Protocol):
    """What the connections need of the broker, beside the broker the request contexts carry."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def dynamic_config(self) -> Reconfigurable: ...

    @property
    def metrics(self) -> RequestMetrics: ...

    @property
    def append_watchers(self) -> PartitionWatchers: ...


B = TypeVar("B", bound=NetworkBroker)


class RequestDispatcher(Protocol[B]):
    """What the connections need of the dispatcher (tieredlog.server.dispatcher), whose handlers take
    contexts of the broker ``B``."""

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]: ...

    def handler_for(self, api_key: int, version: int) -> Handler[B] | None: ...

    async def run(self, handler: Handler[B], ctx: RequestContext[B], body: Any, received: float | None = None
                  ) -> Any: ...

    def unsupported_api_versions(self, correlation_id: int) -> bytes: ...

    def reject_old_produce(self, payload: bytes, version: int, correlation_id: int) -> bytes: ...
