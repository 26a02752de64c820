"""`tieredlog users`: the SCRAM users of a running broker or cluster, as kafka-configs.sh handles them
(``--entity-type users``), through DescribeUserScramCredentials and AlterUserScramCredentials.

    tieredlog users --bootstrap-server H:P --describe [--entity-name alice]
    tieredlog users --bootstrap-server H:P --alter --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    tieredlog users --bootstrap-server H:P --alter --entity-name alice --delete-config SCRAM-SHA-512

``--add-config`` creates the user or changes its password; the salted password is computed here, as
Kafka's admin client does, so the password itself never travels. ``--command-config`` is a client
properties file, as for Kafka's tools (``tieredlog.tools.command_config``).

The change is sent to the bootstrap broker; in a cluster one that is not the controller answers
NOT_CONTROLLER and the tool asks the controller Metadata names, as Kafka's admin client does.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.clients.routing import ControllerNotFound, call_controller
from tieredlog.protocol.api import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS
from tieredlog.security import scram
from tieredlog.security.sasl.client import SaslClientError
from tieredlog.tools import command_config, run_tool
from tieredlog.tools.cluster_admin import (
    CONTROLLER_WAIT_S,
    RETRY_BACKOFF_S,
    AdminCommandFailed,
    exception_name,
    exception_text,
)
from tieredlog.tools.command_config import CommandConfigError

# ---- --add-config / --delete-config (kafka-configs' syntax) -----------------------------------------

_SPLIT_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def parse_add_config(text: str) -> dict[str, tuple[int, str]]:
    """``SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=x]`` -> mechanism ->
    (iterations, password), with ConfigCommand's parsing and messages."""
    out: dict[str, tuple[int, str]] = {}
    for item in re.split("," + _SPLIT_OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _SPLIT_OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise AdminCommandFailed('Invalid entity config: all configs to be added must be in the format "key=val".')
        key, value = pair[0].strip(), re.sub(r"\[?\]?", "", pair[1]).strip()
        mechanism = scram.MECHANISMS.get(key)
        if mechanism is None:
            raise AdminCommandFailed("Only SCRAM credential configs can be added for 'users' with this tool. "
                                     f"Unexpected config names: {key}")
        m = _CREDENTIAL.fullmatch(value)
        if m is None:
            # the value holds the password: only the mechanism is named
            raise AdminCommandFailed(f"Invalid credential property {key}=<hidden>: expected [iterations=N,]password=...")
        iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") else scram.DEFAULT_ITERATIONS
        if iterations < scram.MIN_ITERATIONS:
            raise AdminCommandFailed(f"Iterations {iterations} is less than the minimum {scram.MIN_ITERATIONS} "
                                     f"required for {key}")
        out[key] = (iterations, m.group(2))
    return out


def parse_delete_config(values: list[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in scram.MECHANISMS]
    if unknown:
        raise AdminCommandFailed("Only SCRAM credential configs can be deleted for 'users' with this tool. "
                                 f"Unexpected config names: {','.join(unknown)}")
    return names


def alteration(user: str, add: dict[str, tuple[int, str]], delete: list[str]) -> dict[str, Any]:
    """The AlterUserScramCredentials body: a fresh salt per mechanism, the salted password."""
    upsertions = []
    for name, (iterations, password) in add.items():
        mechanism = scram.MECHANISMS[name]
        salt = scram.random_salt()
        upsertions.append({"name": user, "mechanism": mechanism.type_id, "iterations": iterations, "salt": salt,
                           "salted_password": scram.salted_password(mechanism, password, salt, iterations)})
    deletions = [{"name": user, "mechanism": scram.MECHANISMS[name].type_id} for name in delete]
    return {"deletions": deletions, "upsertions": upsertions}


# ---- the requests ----------------------------------------------------------------------------------

def alter_on_controller(client: KafkaClient, body: dict[str, Any]) -> Any:
    """AlterUserScramCredentials to the bootstrap broker, then to the controller while the answer is
    NOT_CONTROLLER (a cluster's other brokers), until CONTROLLER_WAIT_S has passed."""
    answer = client.request(ALTER_USER_SCRAM_CREDENTIALS, body, version=0)
    if not _not_controller(answer):
        return answer
    try:
        return call_controller(client, ALTER_USER_SCRAM_CREDENTIALS, body, version=0, wait_s=CONTROLLER_WAIT_S,
                               backoff_s=RETRY_BACKOFF_S, not_controller=_not_controller)
    except ControllerNotFound:
        raise AdminCommandFailed("Timed out waiting for the controller") from None


def _not_controller(answer: Any) -> bool:
    return any(r.error_code == ErrorCode.not_controller for r in answer.results)


def describe(client: KafkaClient, users: list[str]) -> int:
    body = {"users": [{"name": u} for u in users] if users else None}
    answer = client.request(DESCRIBE_USER_SCRAM_CREDENTIALS, body, version=0)
    if answer.error_code != ErrorCode.none:
        raise AdminCommandFailed(exception_text(answer.error_code, answer.error_message))
    names = {m.type_id: name for name, m in scram.MECHANISMS.items()}
    for r in answer.results:
        if r.error_code == ErrorCode.resource_not_found:
            continue  # Kafka's admin client leaves users without credentials out
        if r.error_code != ErrorCode.none:
            print(f"Error retrieving SCRAM credential configs for user-principal '{r.user}': "
                  f"{exception_name(r.error_code)}: {r.error_message}")
            continue
        text = ", ".join(f"{names.get(int(i.mechanism), f'UNKNOWN({int(i.mechanism)})')}=iterations={i.iterations}"
                         for i in r.credential_infos)
        print(f"SCRAM credential configs for user-principal '{r.user}' are {text}")
    return 0


def alter(client: KafkaClient, user: str, add: dict[str, tuple[int, str]],
          delete: list[str]) -> int:
    answer = alter_on_controller(client, alteration(user, add, delete))
    failed = [r for r in answer.results if r.error_code != ErrorCode.none]
    if failed:
        raise AdminCommandFailed("\n".join(exception_text(r.error_code, r.error_message) for r in failed))
    print(f"Completed updating config for user {user}.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog users",
                                description="Describe, add, change and delete SCRAM users (kafka-configs.sh "
                                            "--entity-type users).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    command_config.add_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="the users' SCRAM mechanisms and iterations")
    action.add_argument("--alter", action="store_true", help="add, change or delete a user's credentials")
    p.add_argument("--entity-type", default="users", choices=["users"], help="users (the only type here)")
    p.add_argument("--entity-name", "--user", dest="entity_name", action="append", default=[], metavar="USER",
                   help="the user (--describe: may repeat; none: every user)")
    p.add_argument("--add-config", metavar="CONFIGS",
                   help="'SCRAM-SHA-256=[iterations=8192,password=secret],SCRAM-SHA-512=[password=secret]'")
    p.add_argument("--delete-config", action="append", default=[], metavar="MECHANISMS",
                   help="SCRAM-SHA-256 and/or SCRAM-SHA-512, comma-separated")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if a.alter:
        if len(a.entity_name) != 1:
            parser.error("--alter needs exactly one --entity-name")
        if not a.add_config and not a.delete_config:
            parser.error("--alter needs --add-config and/or --delete-config")
    elif a.add_config or a.delete_config:
        parser.error("--add-config and --delete-config go with --alter")

    def run() -> int:
        try:
            settings = command_config.load(a.command_config)
            if a.alter:
                add = parse_add_config(a.add_config) if a.add_config else {}
                delete = parse_delete_config(a.delete_config)
            with settings.client(a.bootstrap_server, client_id="tieredlog-users") as client:
                if a.describe:
                    return describe(client, a.entity_name)
                return alter(client, a.entity_name[0], add, delete)
        except (AdminCommandFailed, CommandConfigError) as exc:
            print(f"Error while executing config command: {exc}", file=sys.stderr)
            return 1
        except SaslClientError as exc:
            print(f"tieredlog users: authentication with {a.bootstrap_server} failed: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            raise  # our stdout, not the broker: run_tool ends quietly
        except (OSError, ConnectionError, KafkaProtocolError) as exc:
            print(f"tieredlog users: cannot reach {a.bootstrap_server}: {exc}", file=sys.stderr)
            return 1

    return run_tool(run)


if __name__ == "__main__":
    sys.exit(main())
