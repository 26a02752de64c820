"""The console on the metrics port, read in headless Chromium: its numbers are the broker's (ListOffsets,
the committed offsets), and a partition's picture changes as segments are tiered and then deleted
locally. One tiered broker and one browser for the module.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from helpers import free_port, wait_for
from selenium import webdriver
from selenium.webdriver.common.by import By
from tiered_broker_harness import FAST, create, list_offset, produce

pytestmark = pytest.mark.integration


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("CONSOLE_ARTIFACTS", "/tmp/tieredlog-console-artifacts"))


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data", {**FAST, "metrics.port": str(port)}).start()
    try:
        yield b, port
    finally:
        b.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are needed (make system-deps)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _field(scope, name: str) -> str:
    return scope.find_element(By.CSS_SELECTOR, f'[data-field="{name}"]').text


def _partition(driver, port: int, topic: str, partition: int = 0):
    driver.get(f"http://127.0.0.1:{port}/console/topic/{topic}")
    return driver.find_element(By.CSS_SELECTOR, f'[data-partition="{topic}-{partition}"]')


def _picture(block) -> dict[str, int]:
    count = lambda css: len(block.find_elements(By.CSS_SELECTOR, f"svg.offset-line rect.{css}"))  # noqa: E731
    return {"remote": count("seg.remote.finished"), "local": count("seg.local"),
            "local_tiered": count("seg.local.tiered")}


def _alter(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def test_overview_shows_the_cluster_and_topics(tiered_broker, browser):
    b, port = tiered_broker
    create(b.bootstrap, "overview-t")
    browser.get(f"http://127.0.0.1:{port}/")  # redirected to /console
    assert browser.current_url.endswith("/console")
    assert (_field(browser, "brokers"), _field(browser, "controller")) == ("1", "0")
    assert (_field(browser, "offline"), _field(browser, "under-replicated"), _field(browser, "under-min-isr")) == (
        "0", "0", "0")
    charts = [e.get_attribute("data-chart") for e in browser.find_elements(By.CSS_SELECTOR, "[data-chart]")]
    assert charts == ["bytes_in", "bytes_out", "remote_copy_bytes", "remote_fetch_bytes", "remote_errors", "loop_lag"]
    row = browser.find_element(By.CSS_SELECTOR, '[data-topic="overview-t"]')
    assert (_field(row, "partitions"), _field(row, "tiered")) == ("1", "yes")
    # read-only, and no record data: a POST is refused, an unknown page is a 404
    req = urllib.request.Request(f"http://127.0.0.1:{port}/console", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/console/topic/no-such-topic", timeout=10)
    assert err.value.code == 404


def test_partition_picture_follows_tiering_and_local_retention(tiered_broker, browser):
    b, port = tiered_broker
    topic = "console-t"
    # copying held back first, and a long local retention: every rolled segment is local only
    # (Kafka asks for local.retention.ms = retention.ms while copying is disabled)
    create(b.bootstrap, topic, **{"remote.log.copy.disable": "true", "local.retention.bytes": "-1",
                                  "local.retention.ms": "-1", "retention.ms": "-1"})
    produce(b.bootstrap, topic, 0, 1500)
    block = _partition(browser, port, topic)
    before = _picture(block)
    assert before["remote"] == 0 and before["local_tiered"] == 0 and before["local"] > 2, before
    assert int(_field(block, "tiering-lag-bytes")) > 0 and int(_field(block, "tiering-lag-segments")) == before["local"] - 1
    assert _field(block, "tiering-lag-time") != "—"  # the oldest waiting segment's age, from its timestamps
    assert int(_field(block, "high-watermark")) == list_offset(b.bootstrap, topic, -1) == 1500

    # copying on: the rolled segments go to the remote tier and stay local too
    _alter(b.bootstrap, topic, remote_log_copy_disable="false")
    tiered = wait_for(lambda: (p := _picture(_partition(browser, port, topic)))["local_tiered"] == before["local"] - 1 and p,
                      what="the rolled segments to show as tiered")
    assert tiered["remote"] == before["local"] - 1
    block = _partition(browser, port, topic)
    assert _field(block, "tiering-lag-bytes") == "0"
    assert int(_field(block, "remote-end")) == list_offset(b.bootstrap, topic, -5)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "console-topic-tiered.png"))

    # local retention on: the tiered local segments go, the remote ones stay
    _alter(b.bootstrap, topic, local_retention_bytes="1")
    after = wait_for(lambda: (p := _picture(_partition(browser, port, topic)))["local_tiered"] == 0 and p,
                     what="the tiered local segments to be deleted")
    assert after["remote"] == tiered["remote"] and after["local"] == 1  # the active segment
    block = _partition(browser, port, topic)
    for field, timestamp in (("log-start", -2), ("local-start", -4), ("high-watermark", -1), ("remote-end", -5)):
        assert int(_field(block, field)) == list_offset(b.bootstrap, topic, timestamp), field
    assert int(_field(block, "local-start")) > int(_field(block, "log-start")) == 0
    browser.save_screenshot(str(ARTIFACTS / "console-topic-local-deleted.png"))


def test_group_lag_is_flagged_when_read_from_the_remote_tier(tiered_broker, browser):
    b, port = tiered_broker
    topic = "console-g"
    create(b.bootstrap, topic)  # tiered, local.retention.bytes=1: old offsets are remote only
    produce(b.bootstrap, topic, 0, 1500)
    local_start = wait_for(lambda: list_offset(b.bootstrap, topic, -4), what="local segments to be tiered")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "console-group", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    finally:
        c.close()
    browser.get(f"http://127.0.0.1:{port}/console")
    row = browser.find_element(By.CSS_SELECTOR, '[data-group="console-group"]')
    assert _field(row, "from-remote") == "1"
    browser.get(f"http://127.0.0.1:{port}/console/group/console-group")
    offsets = browser.find_element(By.CSS_SELECTOR, f'[data-partition="{topic}-0"]')
    hw = list_offset(b.bootstrap, topic, -1)
    assert (_field(offsets, "committed"), _field(offsets, "lag")) == ("10", str(hw - 10))
    assert _field(offsets, "from-remote") == "remote tier" and local_start > 10


def _samples(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
    return out


def test_object_store_requests_are_counted_per_topic_and_priced(tiered_broker, browser):
    b, port = tiered_broker
    topic = "console-cost"
    create(b.bootstrap, topic)
    produce(b.bootstrap, topic, 0, 1500)
    wait_for(lambda: list_offset(b.bootstrap, topic, -4), what="local segments to be tiered")
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "cost", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert wait_for(lambda: c.poll(1), what="a record read from the remote tier").offset() == 0
    finally:
        c.close()
    req = 'tieredlog_remote_storage_requests_total{operation="%s",topic="' + topic + '"}'
    copied = f'kafka_server_brokertopicmetrics_remotecopyrequests_total{{topic="{topic}"}}'

    def settled() -> dict[str, float] | None:
        """The samples once no copy is in flight: a copy is counted when it starts, its PUTs as they end."""
        m = _samples(port)
        return m if m[copied] > 0 and m[req % "PUT"] == 5 * m[copied] else None

    # one PUT per part of each copied segment: log, offset and time indexes, producer snapshot, epochs
    m = wait_for(settled, what="every copied segment's five PUTs counted")
    assert m[req % "GET"] >= 1 and m[f'tieredlog_remote_storage_bytes_total{{direction="in",topic="{topic}"}}'] > 0
    browser.get(f"http://127.0.0.1:{port}/console")
    row = browser.find_element(By.CSS_SELECTOR, f'[data-topic="{topic}"]')
    puts, gets, lists, deletes = (int(x) for x in _field(row, "requests").split(" / "))
    assert puts == m[req % "PUT"] and gets >= m[req % "GET"] and (lists, deletes) == (0, 0)
    assert _field(row, "monthly-cost").startswith("$") and _field(row, "monthly-cost") != "$0.00"


def test_kafkas_main_metrics_and_the_event_loop_lag_are_exported(tiered_broker):
    b, port = tiered_broker
    produce(b.bootstrap, "overview-t", 0, 10)
    m = _samples(port)
    assert m['kafka_network_requestmetrics_requestqueuetimems_count{request="Produce"}'] >= 1
    for op in ("Fetch", "Produce", "RemoteFetch"):
        assert f'kafka_server_delayedoperationpurgatory_purgatorysize{{delayedoperation="{op}"}}' in m
    assert "kafka_server_delayedremotefetchmetrics_expires_total" in m
    assert m["kafka_log_logflushstats_logflushrateandtimems_count"] >= 1  # rolled segments were flushed
    assert m["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"] == 0
    assert m["tieredlog_rlmm_not_ready_partitions"] == 0
    assert m["tieredlog_event_loop_lag_seconds_count"] >= 1 and "tieredlog_event_loop_lag_max_seconds" in m


def test_the_remote_log_metadata_managers_lag_and_time_to_ready_are_exported(tiered_broker):
    b, port = tiered_broker
    topic = "rlmm-metrics"
    create(b.bootstrap, topic)
    produce(b.bootstrap, topic, 0, 600)
    wait_for(lambda: list_offset(b.bootstrap, topic, -5) >= 0, what="a segment of the topic to be tiered")
    lag = "kafka_consumer_consumer_fetch_manager_metrics_records_lag"
    client = "__remote_log_metadata_client_0_consumer"

    def caught_up() -> dict[str, float] | None:
        m = _samples(port)
        lags = {k: v for k, v in m.items() if k.startswith(lag + "{")}
        return m if lags and not any(lags.values()) else None

    # the manager reads back its own writes: once the copies settle, it is at the end of every partition
    m = wait_for(caught_up, what="the metadata consumer's lag at 0")
    loaded = {k.split('partition="')[1].split('"')[0] for k in m if k.startswith(lag + "{")}
    assert all(f'client_id="{client}"' in k and 'topic="__remote_log_metadata"' in k for k in m if k.startswith(lag))
    ready = {p: m[f'tieredlog_rlmm_partition_ready_time_seconds{{partition="{p}"}}'] for p in loaded}
    assert ready and all(v >= 0 for v in ready.values())
    assert loaded <= {"0", "1", "2"}  # remote.log.metadata.topic.num.partitions is 3 here
    assert m["tieredlog_rlmm_not_ready_partitions"] == 0
