"""`tieredlog broker [--config server.properties] [--override key=value ...]`.

SIGTERM / Ctrl-C: stop accepting, finish in-flight requests, flush logs, write checkpoints, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from tieredlog.cluster.errors import ClusterError
from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.rsm.api import RemoteStorageException

if TYPE_CHECKING:
    from tieredlog.security.tls import ListenerTls
    from tieredlog.server.listen import BoundListener

log = logging.getLogger("tieredlog.broker")


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tieredlog broker", description="run a tieredlog broker")
    p.add_argument("--config", "-c", help="server.properties file (Kafka property names)")
    p.add_argument("config_file", nargs="?", help="server.properties file, as kafka-server-start takes it")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="set a property")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(config: BrokerConfig, ready: asyncio.Event | None = None) -> int:
    from tieredlog.security.tls_config import listener_tls
    from tieredlog.server.listen import ListenerBindError, bind_listeners, close
    from tieredlog.server.log_dirs_check import LogDirError, check_log_dirs

    loop = asyncio.get_running_loop()
    try:
        # before anything starts: a key store that cannot be used (not PEM, unreadable, wrong
        # password) stops the broker with one line, as Kafka's listeners do
        tls = listener_tls(config)
        # then, before anything is written: every log dir usable (Kafka's LogManager checks), every
        # listener's address free (bound now, listening once the broker has started)
        setting = "log.dirs" if config.get("log.dirs") else "log.dir"
        await loop.run_in_executor(None, check_log_dirs, setting, str(config.get(setting)), config.log_dirs)
        listeners = await bind_listeners(config.listeners)
    except (BrokerConfigError, LogDirError, ListenerBindError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    try:
        return await _serve(config, tls, listeners, ready)
    finally:
        close(listeners)  # no-op for the sockets the server took and closed


async def _serve(config: BrokerConfig, tls: dict[str, ListenerTls], listeners: list[BoundListener],
                 ready: asyncio.Event | None) -> int:
    from tieredlog.security.tls_config import listener_tls
    from tieredlog.server.broker import Broker
    from tieredlog.server.dispatcher import Dispatcher
    from tieredlog.server.listen import ListenerBindError
    from tieredlog.server.network import KafkaServer

    broker = Broker(config)
    try:
        await broker.start()
    except (RemoteStorageException, ClusterError, BrokerConfigError) as exc:
        # the remote tier cannot be used (bad bucket, unreachable endpoint, plugin missing), or the
        # cluster refuses this broker (wrong cluster id, broker id in use, ZooKeeper unreachable, bad
        # zookeeper.connect): the message already says what is at fault, so one line and no traceback
        log.error("cannot start: %s", exc)
        try:
            await broker.shutdown()
        except Exception:
            pass  # the start-up failure is the one to report
        return 1
    if broker.config is not config:
        try:
            # stored dynamic configs (a listener's key store changed live) serve from the first connection
            tls = await asyncio.get_running_loop().run_in_executor(None, listener_tls, broker.config)
        except BrokerConfigError as exc:
            log.error("cannot start: %s", exc)
            await broker.shutdown()
            return 1
    server = KafkaServer(broker, Dispatcher(broker), tls)
    try:
        bound = await server.start(listeners)
    except ListenerBindError as exc:
        log.error("cannot start: %s", exc)
        await broker.shutdown()
        return 1
    loop = asyncio.get_running_loop()
    # before the registration: a SIGTERM while it runs must still shut down in order
    stop = asyncio.Event()
    cluster = broker.cluster

    def on_signal() -> None:
        stop.set()
        if cluster is not None:
            cluster.stop_registering()  # a registration still waiting for a killed run's session gives up

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    if broker.cluster is not None:
        # Kafka's order: registered once the listeners accept connections (the registration
        # advertises them), then the controller election
        try:
            await loop.run_in_executor(None, broker.cluster.register)
        except ClusterError as exc:
            log.error("cannot start: %s", exc)
            await server.stop()
            await broker.shutdown()
            return 1
        broker.cluster.start_controller_election()
        # requests are served once the controller is known: librdkafka's admin client, told "no
        # controller" (-1) by its first Metadata, waits for a refresh that may come after it timed out
        if await loop.run_in_executor(None, broker.cluster.wait_for_controller) is None:
            log.warning("broker %d: no controller elected yet; serving without one", broker.node_id)
    server.enable_request_processing()
    log.info(
        "broker %d started, listening on %s, advertised %s, cluster %s",
        broker.node_id, ", ".join(f"{h}:{p}" for h, p in bound),
        ", ".join(f"{l.name}://{l.host or '127.0.0.1'}:{l.port}" for l in config.advertised_listeners),
        broker.cluster_id,
    )
    _tune_gc()
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("shutting down")
    # while the listeners still serve: the controller moves this broker's leaderships to the others
    await broker.controlled_shutdown()
    broker.stopping = True
    await server.stop()
    await broker.shutdown()
    log.info("shut down cleanly")
    return 0


# Objects a request allocates die with it, but CPython's default young-generation threshold (700)
# runs a collection every request or two, and the older generations then keep re-walking what
# start-up built (botocore's service models, the remote metadata caches, plugin modules): about a
# third of the broker's CPU on a remote catch-up read. A larger young generation, with everything
# alive at start-up moved out of the collector's sight, brings that down to a few percent.
GC_YOUNG_THRESHOLD = 20_000


def _tune_gc() -> None:
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.getLevelNamesMapping().get(str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = BrokerConfig.load(args.config or args.config_file, args.override)
    except (BrokerConfigError, OSError) as exc:
        print(f"tieredlog broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    from tieredlog.server import event_loop

    rc = event_loop.run(serve(config))
    if rc != 0:
        # A start that failed half-way may leave threads behind (a ZooKeeper session's, a scheduler's);
        # the interpreter ending them at exit has been seen to abort the process (SIGABRT) instead of
        # exiting with the code the one logged line explains. Nothing is left to write: end here.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
