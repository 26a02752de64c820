"""The broker tools over a SASL_SSL listener with `--command-config` (a Kafka client properties file),
as Kafka's tools take it: topics, consumer-groups, transactions, leader-election and reassign each
reach the listener (TLS, then a PLAIN login), a wrong password is refused with one line, and a file
that cannot be used is a usage error naming the key, never the password."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from helpers import free_port
from tls_certs import Pki, tls_certs  # noqa: F401

from tieredlog import cli

pytestmark = pytest.mark.integration

ADMIN_SECRET = "cmd-config-admin-s3cret"


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    """The tool run in this process (its start-up is most of a tool's time), output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            rc = int(exc.code or 0)
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


def test_tools_reach_a_sasl_ssl_listener_with_command_config(
        broker_factory: Callable[..., BrokerProcess], tls_certs: Pki, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    b = broker_factory(start=False)
    b.overrides = {
        "listeners": f"SASL_SSL://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{b.port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.broker_pem),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="{ADMIN_SECRET}";',
        "remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    b.start()
    address = f"localhost:{port}"

    def props(password: str, protocol: str = "SASL_SSL") -> str:
        path = tmp_path / f"{protocol}-{password}.properties"
        path.write_text(f"security.protocol={protocol}\nsasl.mechanism=PLAIN\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="admin" password="{password}";\n'
                        f"ssl.truststore.type=PEM\nssl.truststore.location={tls_certs.ca_pem}\n")
        return str(path)

    good = props(ADMIN_SECRET)
    run = tool("topics", "--bootstrap-server", address, "--command-config", good, "create", "--topic", "t1",
               "--partitions", "2", "--replication-factor", "1")
    assert run.returncode == 0, run.stderr
    listed = tool("topics", "--bootstrap-server", address, "--command-config", good, "list")
    assert listed.returncode == 0 and "t1" in listed.stdout.split(), listed.stderr
    groups = tool("consumer-groups", "--bootstrap-server", address, "--command-config", good, "--list")
    assert groups.returncode == 0, groups.stderr
    txns = tool("transactions", "--bootstrap-server", address, "--command-config", good, "list")
    assert txns.returncode == 0 and "TransactionalId" in txns.stdout, txns.stderr
    # a broker alone serves neither ElectLeaders nor the reassignment APIs (a cluster's controller
    # does): that the tools learn it from the broker's ApiVersions shows they logged in over TLS
    elected = tool("leader-election", "--bootstrap-server", address, "--command-config", good,
                   "--election-type", "preferred", "--topic", "t1", "--partition", "0")
    assert "broker does not serve API key 43" in elected.stderr, elected.stderr
    reassignments = tool("reassign", "--bootstrap-server", address, "--command-config", good, "--list")
    assert "broker does not serve API key 46" in reassignments.stderr, reassignments.stderr

    # without it the SASL_SSL listener is not spoken to: the tool fails with one line, no traceback
    plain = tool("topics", "--bootstrap-server", address, "list")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    # a wrong password: refused by the broker, one line
    wrong = tool("topics", "--bootstrap-server", address, "--command-config", props("not-it"), "list")
    assert wrong.returncode == 1 and "Invalid username or password" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    # a file that cannot be used: a usage error naming the key, never the password
    bad = tool("consumer-groups", "--bootstrap-server", address, "--command-config",
               props(ADMIN_SECRET, protocol="KERBEROS"), "--list")
    assert bad.returncode == 2 and "Invalid security.protocol KERBEROS" in bad.stderr
    assert ADMIN_SECRET not in bad.stderr + wrong.stderr
