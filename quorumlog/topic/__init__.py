"""Topics, queues and consumer groups on the log (RocketMQ's message model), sans-I/O: the message
layout inside a log entry (`message.py`), the consume queue built by dispatching committed entries
(`consume_queue.py`), the dispatcher that builds them — and applies each topic's retention — as a group's state
machine (`dispatcher.py`), and a consumer group's members and queue owners with generations
(`group_coordinator.py`). The node runs them in server/services/topics.py and
server/services/consumer_groups.py; clients are client/topics.py and client/consumer.py; docs/topics.md.

`pop.py` is RocketMQ 5's pop consumption of one queue by one group (receipt handles, invisible time, retries,
the dead-letter queue, FIFO message groups, delayed and half messages), driven by the RocketMQ front door."""
