"""localstack/: the compose files and broker configs agree with each other and with the S3 backend,
and the no-Docker script really serves the bucket those configs name."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from s3servers import S3Endpoint, free_port, wait_for_bucket

from tieredlog.config import BrokerConfig, read_properties
from tieredlog.rsm import s3
from tieredlog.rsm.registry import load_from_broker_config, rsm_configs_from_broker
from tieredlog.rsm.testing import make_segment, read_all

HERE = Path(__file__).resolve().parents[2] / "localstack"
FLAVOURS = {
    # flavour: (compose file, service, port, broker config)
    "localstack": ("docker-compose.localstack.yml", "localstack", 4566, "broker-localstack.properties"),
    "minio": ("docker-compose.minio.yml", "minio", 9000, "broker-minio.properties"),
}


def compose(name: str) -> dict:
    return yaml.safe_load((HERE / name).read_text())


def broker_props(name: str) -> dict[str, str]:
    return read_properties(HERE / name)


def published_ports(service: dict) -> set[int]:
    ports = set()
    for spec in service["ports"]:
        host_part = str(spec).rsplit(":", 1)[0]
        ports.add(int(host_part.rsplit(":", 1)[-1]))
    return ports


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_broker_config_matches_compose_and_s3_backend(flavour):
    compose_file, service_name, port, props_file = FLAVOURS[flavour]
    service = compose(compose_file)["services"][service_name]
    props = broker_props(props_file)
    config = BrokerConfig.from_props(props, warn=False)
    assert config.unknown == ()  # every broker key is one the broker knows
    assert props["remote.log.storage.manager.class.name"] == "s3"
    rsm_configs = rsm_configs_from_broker(props)
    assert set(rsm_configs) <= s3.CONFIG_KEYS, set(rsm_configs) - s3.CONFIG_KEYS
    assert port in published_ports(service)
    assert rsm_configs["storage.s3.endpoint.url"] == f"http://127.0.0.1:{port}"
    assert rsm_configs["storage.s3.bucket.name"] == "tieredlog"
    assert rsm_configs["storage.s3.path.style.access.enabled"] == "true"
    env = service["environment"]
    if flavour == "minio":
        assert (env["MINIO_ROOT_USER"], env["MINIO_ROOT_PASSWORD"]) == (
            rsm_configs["storage.aws.access.key.id"], rsm_configs["storage.aws.secret.access.key"])
    else:
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (
            rsm_configs["storage.aws.access.key.id"], rsm_configs["storage.aws.secret.access.key"])
        assert env["SERVICES"] == "s3" and env["TIERED_BUCKET"] == rsm_configs["storage.s3.bucket.name"]


def test_compose_files_create_the_bucket():
    localstack = compose("docker-compose.localstack.yml")["services"]["localstack"]
    [mount] = [v for v in localstack["volumes"] if "ready.d" in v]
    script = HERE / mount.split(":")[0]
    assert script.is_file() and os.access(script, os.X_OK)
    assert 's3 mb "s3://${TIERED_BUCKET:-tieredlog}"' in script.read_text()
    minio = compose("docker-compose.minio.yml")["services"]
    init = minio["create-bucket"]
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"
    command = " ".join(init["command"])
    env = minio["minio"]["environment"]
    assert f"mc alias set local http://minio:9000 {env['MINIO_ROOT_USER']} {env['MINIO_ROOT_PASSWORD']}" in command
    assert "mc mb --ignore-existing local/tieredlog" in command


@pytest.fixture(scope="module")
def no_docker_server(tmp_path_factory):
    """localstack/s3-server.sh on a free port (the real one, 4566, may be taken on this machine)."""
    port = free_port()
    data = tmp_path_factory.mktemp("s3-server")
    log = (data / "server.log").open("wb")
    env = {**os.environ, "S3_PORT": str(port), "S3_DATA_DIR": str(data / "data")}
    proc = subprocess.Popen([str(HERE / "s3-server.sh")], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    endpoint = S3Endpoint("s3-server.sh", f"http://127.0.0.1:{port}")
    try:
        wait_for_bucket(endpoint, proc=proc)
        yield endpoint
    finally:
        proc.terminate()  # the script exec's weed, so this is the server itself
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_no_docker_server_serves_the_configured_bucket(no_docker_server):
    props = broker_props("broker-localstack.properties")
    client = S3Endpoint("check", no_docker_server.url, bucket=props["rsm.config.storage.s3.bucket.name"],
                        access_key=props["rsm.config.storage.aws.access.key.id"],
                        secret_key=props["rsm.config.storage.aws.secret.access.key"]).client()
    assert client.head_bucket(Bucket="tieredlog")["ResponseMetadata"]["HTTPStatusCode"] == 200
    wrong = S3Endpoint("wrong", no_docker_server.url, secret_key="not-the-secret").client(retries={"max_attempts": 1})
    with pytest.raises(Exception) as info:
        wrong.head_bucket(Bucket="tieredlog")
    assert "403" in str(info.value)


def test_broker_config_tiers_into_the_no_docker_server(no_docker_server, tmp_path):
    props = broker_props("broker-localstack.properties")
    props["rsm.config.storage.s3.endpoint.url"] = no_docker_server.url  # only the port differs
    rsm = load_from_broker_config({**props, "broker.id": 1})
    seg = make_segment(tmp_path, size=100_000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert read_all(rsm.fetch_log_segment(seg.metadata, 10, 20)) == seg.log[10:21]
    keys = [k.key for k in rsm.list_segment_objects()]
    assert keys and all(k.startswith("tiered/") for k in keys)
    rsm.close()
