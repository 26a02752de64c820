"""delete.topic.enable=false: DeleteTopics is refused with TOPIC_DELETION_DISABLED for every topic named, as
Kafka's broker refuses it, and the topic stays readable."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def test_delete_topics_refused_when_deletion_is_disabled(broker_factory) -> None:
    b = broker_factory({"delete.topic.enable": "false", "remote.log.storage.system.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(timeout=30)
    with pytest.raises(KafkaException) as err:
        admin.delete_topics(["kept"], operation_timeout=10)["kept"].result(timeout=30)
    assert err.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED, err.value
    assert "kept" in admin.list_topics(timeout=10).topics
