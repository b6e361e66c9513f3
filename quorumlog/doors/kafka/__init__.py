"""The Kafka front door (docs/kafka.md): Kafka clients and tools produce, consume and commit on quorumlog
unchanged. `KafkaDoor(config)` is what doors_for() starts on a node whose `kafka_port` is set."""

from .door import KafkaDoor

__all__ = ["KafkaDoor"]
