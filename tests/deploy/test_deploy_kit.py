"""The deploy kit (deploy/) against a real broker and a real Prometheus (Debian's package, the binary run
directly on a free port with its own config and storage): the rules pass promtool, every metric the
dashboard and the rules name is on the broker's /metrics, every dashboard query returns series, every
alert expression evaluates over series that exist, and the stuck-copy alert fires once the object store
fails (the faulty RSM plugin of tests/harness/rsm_plugins). One broker and one Prometheus for the module.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from helpers import free_port, wait_for
from tiered_broker_harness import FAST, PLUGINS, create, list_offset, produce

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "tieredlog-dashboard.json"
RULES = DEPLOY / "prometheus" / "tieredlog-alerts.yml"
METRIC = re.compile(r"\b((?:kafka|tieredlog)_[a-z0-9_]+)")
TOPIC = "kit"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is needed (Debian's prometheus and systemd packages: make system-deps)")
    return path


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def concrete(expr: str) -> str:
    """A dashboard query as Grafana sends it with every topic selected."""
    return expr.replace("$topic", ".*").replace("$__rate_interval", "1m")


def test_promtool_accepts_the_rules_and_their_unit_tests():
    promtool = _tool("promtool")
    subprocess.run([promtool, "check", "rules", str(RULES)], check=True, capture_output=True)
    out = subprocess.run([promtool, "test", "rules", "tieredlog-alerts.test.yml"], cwd=RULES.parent,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("kit")
    control = base / "control"
    control.mkdir()
    metrics_port = free_port()
    b = BrokerProcess(base / "data", {
        **FAST, "metrics.port": str(metrics_port),
        "remote.log.storage.manager.class.name": "faulty_rsm:FaultyStorage",
        "remote.log.storage.manager.class.path": str(PLUGINS),
        "rsm.config.control.dir": str(control), "rsm.config.dir": str(base / "remote")}).start()
    prom = None
    try:
        # traffic every panel shows: a tiered topic, a group behind it reading from the remote tier
        create(b.bootstrap, TOPIC)
        produce(b.bootstrap, TOPIC, 0, 1500)
        wait_for(lambda: list_offset(b.bootstrap, TOPIC, -4), what="local segments to be tiered")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "kit-group", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(TOPIC, 0, 0)])
            wait_for(lambda: c.poll(1), what="a record from the remote tier")
            c.commit(offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=False)
        finally:
            c.close()
        # the rules as shipped, `for` shortened so that a firing shows within the test (promtool's
        # unit tests cover the durations)
        rules = yaml.safe_load(RULES.read_text())
        for g in rules["groups"]:
            for r in g["rules"]:
                r["for"] = "1s"
        (base / "rules.yml").write_text(yaml.safe_dump(rules))
        (base / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(base / "rules.yml")],
            "scrape_configs": [{"job_name": "tieredlog",
                                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
        }))
        prom_port = free_port()
        prom = subprocess.Popen(
            [_tool("prometheus"), f"--config.file={base / 'prometheus.yml'}", f"--storage.tsdb.path={base / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(base / "prometheus.log", "wb"))
        url = f"http://127.0.0.1:{prom_port}"
        wait_for(lambda: _scraped(url), what="Prometheus's first scrape of the broker")
        yield {"broker": b, "metrics_port": metrics_port, "url": url, "control": control}
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        b.stop()


def _api(url: str, path: str, **params: str) -> Any:
    q = urllib.parse.urlencode(params)
    body = json.loads(urllib.request.urlopen(f"{url}{path}?{q}", timeout=10).read())
    assert body["status"] == "success", body
    return body["data"]


def _scraped(url: str) -> bool:
    try:
        return bool(_query(url, "count(kafka_server_replicamanager_partitioncount)"))
    except OSError:  # not listening yet
        return False


def _query(url: str, expr: str) -> list:
    return _api(url, "/api/v1/query", query=expr)["result"]


def test_every_metric_the_kit_names_is_on_the_broker(kit):
    text = urllib.request.urlopen(f"http://127.0.0.1:{kit['metrics_port']}/metrics", timeout=10).read().decode()
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    used = {m for e in dashboard_queries() + [r["expr"] for r in alert_rules()] for m in METRIC.findall(e)}
    assert used and used <= exported, sorted(used - exported)


def test_every_dashboard_query_returns_series(kit):
    for expr in dashboard_queries():
        wait_for(lambda expr=expr: _query(kit["url"], concrete(expr)), what=f"series for {expr}", timeout_s=60)


def test_every_alert_expression_evaluates_over_series_that_exist(kit):
    for rule in alert_rules():
        _query(kit["url"], rule["expr"])  # evaluates (an alert that does not fire returns no series)
        for name in set(METRIC.findall(rule["expr"])):
            assert _query(kit["url"], name), f"{rule['alert']}: no series of {name}"


def test_the_stuck_copy_alert_fires_when_the_object_store_fails(kit):
    b, control = kit["broker"], kit["control"]
    (control / "fail").touch()
    produce(b.bootstrap, TOPIC, 1500, 1500)  # new segments roll and their copies fail

    def firing() -> set[str]:
        alerts = _api(kit["url"], "/api/v1/alerts")["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing" and a["labels"].get("topic") == TOPIC}

    fired = wait_for(lambda: "TieredlogRemoteCopyErrors" in (f := firing()) and f, what="the stuck-copy alert",
                     timeout_s=60)
    assert "TieredlogRemoteCopyErrors" in fired


def test_systemd_accepts_the_unit(tmp_path):
    analyze = _tool("systemd-analyze")
    unit = (DEPLOY / "systemd" / "tieredlog.service").read_text()
    assert "ExecStart=/opt/tieredlog/venv/bin/tieredlog broker --config /etc/tieredlog/server.properties" in unit
    # the same unit with a command that exists here: verify checks every directive and the command's path
    (tmp_path / "tieredlog.service").write_text(unit.replace("/opt/tieredlog/venv/bin/tieredlog", "/bin/true"))
    out = subprocess.run([analyze, "verify", str(tmp_path / "tieredlog.service")], capture_output=True, text=True)
    # an unknown directive is only a warning: any output at all fails
    assert (out.returncode, out.stdout + out.stderr) == (0, "")
