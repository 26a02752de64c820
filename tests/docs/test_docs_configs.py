"""Every config name the user docs quote exists, and every default docs/configuration.md (and the chunked
plugin's README) gives is the one the broker, the metadata manager or the storage backend uses.

A config name in the docs is a backticked token shaped like a Kafka key (``log.retention.ms``). It must be
one of the broker's configs (``tieredlog.config``), a topic config (``tieredlog.log.config``), a key a
remote storage / metadata manager / plugin reads (``rsm.config.<key>``, ``rlmm.config.<key>`` or the key
alone in those sections: a string literal in their sources), or one of the short lists below, each with
its reason. Dotted names that are not configs (file and module names, code) are told apart by rule where
possible (a file extension, a ``tieredlog`` module path) and listed otherwise.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from tieredlog.config import BROKER_CONFIG_DEFS, PASSTHROUGH_PREFIXES
from tieredlog.log.config import LONG_MAX, TOPIC_CONFIGS_BY_NAME

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = sorted(
    [ROOT / "README.md", ROOT / "localstack" / "README.md", *(ROOT / "docs").glob("*.md"),
     *(ROOT / "plugins").glob("*/README.md")]
)
# sources whose string literals are the keys the remote storage/metadata managers and plugins read
PLUGIN_SOURCES = sorted(
    [*(ROOT / "tieredlog" / "rsm").glob("*.py"), *(ROOT / "tieredlog" / "rlmm").glob("*.py"),
     *(ROOT / "plugins").glob("*/*/*.py"),
     # the console tools' --property names (Kafka's LineMessageReader and DefaultMessageFormatter)
     ROOT / "tieredlog" / "tools" / "console_producer.py", ROOT / "tieredlog" / "tools" / "console_consumer.py"]
)

CONFIG_SHAPE = re.compile(r"^[a-z][a-z0-9]*(\.[a-z0-9-]+)+$")
BACKTICKED = re.compile(r"`([^`\n]+)`")
# a dotted token ending like this is a file name, not a config
FILE_SUFFIXES = (".py", ".toml", ".properties", ".cfg", ".json", ".md", ".yml", ".yaml", ".sh", ".txt")

# Kafka client configs (producer, consumer, admin; librdkafka's where it differs): the docs tell users to
# set them in their clients, the broker does not read them.
CLIENT_CONFIGS = frozenset({
    "bootstrap.servers", "client.rack", "group.id", "group.instance.id", "group.remote.assignor", "group.protocol",
    "auto.offset.reset", "enable.auto.commit", "session.timeout.ms", "isolation.level", "transactional.id",
    "transaction.timeout.ms", "enable.idempotence", "message.timeout.ms", "partitioner", "security.protocol",
    "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config", "ssl.ca.location",
    "ssl.certificate.location", "ssl.key.location", "fetch.max.bytes", "max.partition.fetch.bytes",
    "request.timeout.ms", "linger.ms", "acks", "retries", "max.poll.interval.ms", "heartbeat.interval.ms",
    "partition.assignment.strategy", "enable.auto.offset.store", "auto.commit.interval.ms", "interceptor.classes",
    "fetch.error.backoff.ms", "fetch.queue.backoff.ms", "queued.min.messages",
})
# Spark's Kafka source passes ``kafka.<client config>`` options to its clients, and so does the reader.
SPARK_CLIENT_PREFIX = "kafka."
# Kafka's topic-based metadata manager hands these prefixes' client configs to its clients
RLMM_CLIENT_PREFIXES = ("remote.log.metadata.common.client.", "remote.log.metadata.producer.",
                        "remote.log.metadata.consumer.")
# Kafka configs the docs name as not built: they must stay out of the registry until the docs change.
NOT_BUILT = frozenset({
    "max.connection.creation.rate",  # KIP-612 connection creation rate limit
    "listener.name.internal.max.connection.creation.rate",
    "process.roles",  # KRaft
    # Kafka broker configs that are stored as dynamic configs but not acted on
    "metric.reporters",
    "principal.builder.class",
})
# dotted names that are neither configs nor caught by the rules above
NOT_CONFIGS = {
    "meta.properties": "the log dir's identity file, as Kafka's",
    "partition.metadata": "a partition folder's topic id file, as Kafka's",
    "kafka.authorizer.logger": "Kafka's log4j logger name of authorization decisions",
    "os.pathsep": "Python constant",
    "os.sendfile": "Python function",
    "loop.sendfile": "asyncio method",
    "inspect.signature": "Python function",
    "cfg.get": "code in an example",
    "df.write": "Spark DataFrame API",
    "consumer.topics": "code in an example",
    "broker.topics": "an attribute in internals.md",
    "broker.cluster": "an attribute in internals.md",
    "broker.cluster.brokers": "an attribute in internals.md",
    "broker.cluster.register": "an attribute in internals.md",
    "zoo.cfg": "ZooKeeper's config file",
    "rsm.stats": "the chunked plugin RSM's statistics attribute",
    "replication.factor": "CreateTopics' field (kafka-topics --replication-factor), not a config",
    "spark.sql.python.filterpushdown.enabled": "a Spark session setting",
}


def _quoted_names() -> dict[str, set[str]]:
    """Config-shaped backticked tokens per doc file (relative path -> names)."""
    out: dict[str, set[str]] = {}
    for path in DOC_FILES:
        names = set()
        for match in BACKTICKED.finditer(path.read_text()):
            token = match.group(1).strip()
            key, _, _ = token.partition("=")  # `key=value` quotes the key
            if CONFIG_SHAPE.match(key) and not key.endswith(FILE_SUFFIXES) and not key.startswith("tieredlog."):
                names.add(key)
        out[str(path.relative_to(ROOT))] = names
    return out


def _plugin_keys() -> set[str]:
    literals: set[str] = set()
    for path in PLUGIN_SOURCES:
        literals.update(re.findall(r"[\"']([a-z][a-z0-9.<>_-]*)[\"']", path.read_text()))
    return literals


def _unknown(name: str, plugin_keys: set[str]) -> bool:
    if name in BROKER_CONFIG_DEFS or name in TOPIC_CONFIGS_BY_NAME or name in NOT_CONFIGS:
        return False
    if name in CLIENT_CONFIGS or name in NOT_BUILT:
        return False
    for prefix in (SPARK_CLIENT_PREFIX, *RLMM_CLIENT_PREFIXES):
        if name.startswith(prefix) and name[len(prefix):] in CLIENT_CONFIGS:
            return False
    for prefix in PASSTHROUGH_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):] not in plugin_keys
    return name not in plugin_keys


def test_every_quoted_config_name_exists():
    plugin_keys = _plugin_keys()
    quoted = _quoted_names()
    assert sum(len(v) for v in quoted.values()) > 300, "the extraction found too few names to be working"
    unknown = {f: sorted(n for n in names if _unknown(n, plugin_keys)) for f, names in quoted.items()}
    unknown = {f: names for f, names in unknown.items() if names}
    assert not unknown, f"config names quoted in the docs that no registry or plugin knows: {unknown}"


def test_allow_lists_are_not_configs():
    # an entry that became a real config must leave the lists, so the docs are checked against it
    for name in (*NOT_CONFIGS, *NOT_BUILT, *CLIENT_CONFIGS):
        assert name not in TOPIC_CONFIGS_BY_NAME, name
    for name in (*NOT_CONFIGS, *NOT_BUILT):
        assert name not in BROKER_CONFIG_DEFS, name


def _doc_value(text: str) -> object:
    """A default as configuration.md writes it, as the registry holds it."""
    text = text.strip().strip("`")
    if text == "(unset)":
        return None
    if text in ("(empty)", '""'):
        return ""
    if text == "Long.MAX":
        return LONG_MAX
    if text == "Double.MAX":
        return 1.7976931348623157e308
    return text


def _registry_value(default: object) -> object:
    if isinstance(default, bool):
        return "true" if default else "false"
    if default is None or default == "" or default == LONG_MAX:
        return default
    if isinstance(default, float) and math.isclose(default, 1.7976931348623157e308):
        return default
    return str(default)


def _table_rows(heading: str) -> list[list[str]]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_broker_table_defaults_match_the_registry():
    rows = _table_rows("Broker configs")
    assert len(rows) > 150
    wrong = []
    for name_cell, _kind, default, minimum, *_ in rows:
        name = name_cell.strip("`")
        if "<" in name:  # listener.name.<listener>.<config>: a pattern, not one config
            continue
        d = BROKER_CONFIG_DEFS.get(name)
        if d is None:
            wrong.append(f"{name}: not a broker config")
            continue
        if _doc_value(default) != _registry_value(d.default):
            wrong.append(f"{name}: docs say {default}, the registry {d.default!r}")
        if minimum and (d.minimum is None or float(minimum) != d.minimum):
            wrong.append(f"{name}: docs say min {minimum}, the registry {d.minimum!r}")
    assert not wrong, wrong


def test_every_broker_config_is_in_the_table():
    documented = {row[0].strip("`") for row in _table_rows("Broker configs")}
    topic_synonyms = {d.broker_synonym for d in TOPIC_CONFIGS_BY_NAME.values()}
    missing = sorted(n for n in BROKER_CONFIG_DEFS if n not in documented and n not in topic_synonyms)
    assert not missing, f"broker configs missing from docs/configuration.md: {missing}"


def test_topic_table_defaults_match_the_registry():
    rows = _table_rows("Topic configs")
    assert {row[0].strip("`") for row in rows} == set(TOPIC_CONFIGS_BY_NAME)
    wrong = []
    for name_cell, synonym, default, value_range, *_ in rows:
        d = TOPIC_CONFIGS_BY_NAME[name_cell.strip("`")]
        at_least = re.fullmatch(r"≥ (-?\d+)", value_range)
        if (float(at_least.group(1)) if at_least else None) != d.minimum:
            wrong.append(f"{d.name}: docs give range {value_range!r}, the registry minimum {d.minimum!r}")
        if d.choices and value_range != " / ".join(f"`{c}`" for c in d.choices):
            wrong.append(f"{d.name}: docs give range {value_range!r}, the registry {d.choices}")
        expected_synonym = f"`{d.broker_synonym}`" if d.broker_synonym else "—"
        if synonym != expected_synonym:
            wrong.append(f"{d.name}: docs give synonym {synonym}, the registry {d.broker_synonym!r}")
        if _doc_value(default) != _registry_value(d.default):
            wrong.append(f"{d.name}: docs say {default}, the registry {d.default!r}")
    assert not wrong, wrong


@pytest.mark.parametrize("name", ["remote.log.manager.task.interval.ms", "remote.fetch.max.wait.ms",
                                  "remote.log.reader.threads"])
def test_prose_defaults_match(name):
    # the sentence after the "defaults differ" table quotes these with their defaults
    text = (ROOT / "docs" / "configuration.md").read_text()
    match = re.search(rf"`{re.escape(name)}`\s+(\d+)", text)
    assert match, name
    assert int(match.group(1)) == BROKER_CONFIG_DEFS[name].default


def test_rlmm_table_defaults_match_the_metadata_manager():
    from dataclasses import asdict

    from tieredlog.rlmm.topic_based import TopicBasedRlmmConfig

    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("\n## `rlmm.config.*`: the metadata manager\n", 1)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `")]
    assert len(rows) >= 9
    defaults = asdict(TopicBasedRlmmConfig.from_configs({}))
    wrong = []
    for name_cell, default, *_ in rows:
        name = name_cell.strip("`")
        # the field a key sets is the one that changes when the key is given another value
        other = "false" if default == "true" else str(int(default) + 7)
        changed = [f for f, v in asdict(TopicBasedRlmmConfig.from_configs({name: other})).items() if v != defaults[f]]
        if len(changed) != 1:
            wrong.append(f"{name}: not read by the metadata manager")
        elif str(defaults[changed[0]]).lower() != default:
            wrong.append(f"{name}: docs say {default}, the metadata manager {defaults[changed[0]]!r}")
    assert not wrong, wrong


MIB = 1024 * 1024
CONFIG_READS = ("string", "integer", "boolean", "choice")


def _read_defaults(path: Path) -> dict[str, object]:
    """Key -> default of every ``reader.<kind>("key", default)`` call in a backend's source ("required"
    when the call names no default)."""
    import ast

    out: dict[str, object] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONFIG_READS
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            default = node.args[1] if len(node.args) > 1 else None
            out[node.args[0].value] = ("required" if default is None else
                                       eval(compile(ast.Expression(default), str(path), "eval"), {"MIB": MIB}))
    return out


def _doc_default(cell: str) -> object:
    """A backend table's default cell: `required`, a number (with MiB), true/false; else not comparable."""
    match = re.match(r"^`?(required|true|false|-?\d+)`?(?:\s*(MiB))?(?:\s|$)", cell)
    if not match:
        return NotImplemented
    word, unit = match.groups()
    if word in ("required", "true", "false"):
        return {"required": "required", "true": True, "false": False}[word]
    return int(word) * (MIB if unit else 1)


@pytest.mark.parametrize("doc, heading, source", [
    ("docs/configuration.md", "### `s3`", "tieredlog/rsm/s3.py"),
    ("docs/configuration.md", "### `fsspec`", "tieredlog/rsm/fsspec_rsm.py"),
    ("plugins/tieredlog-chunked/README.md", "## Use it", "plugins/tieredlog-chunked/tieredlog_chunked/rsm.py"),
])
def test_backend_table_defaults_match_their_source(doc, heading, source):
    section = re.split(r"\n#{2,3} ", (ROOT / doc).read_text().split(f"\n{heading}", 1)[1], maxsplit=1)[0]
    defaults = _read_defaults(ROOT / source)
    compared, wrong = 0, []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        name_cell, default_cell = [c.strip() for c in line.strip().strip("|").split("|")][:2]
        name = name_cell.split("`")[1]
        documented = _doc_default(default_cell)
        if documented is NotImplemented or name not in defaults:
            continue
        compared += 1
        if documented != defaults[name] and not (documented is False and defaults[name] is None):
            wrong.append(f"{name}: {doc} says {default_cell}, {source} {defaults[name]!r}")
    assert compared >= 1 and not wrong, (compared, wrong)
