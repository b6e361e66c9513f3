"""Topics, queues and consumer groups on the log (RocketMQ's message model; issue 16), started: the message
layout inside a log entry (`message.py`), the consume queue built by dispatching committed entries
(`consume_queue.py`), the dispatcher that builds them as a group's state machine (`dispatcher.py`), and a
consumer group's members and queue owners with generations (`group_coordinator.py`). Not yet: the node
hosting the dispatcher, placement of queues over groups, the pull path, the producer and consumer clients,
committed offsets in `_meta`, the CLI and Spark by topic."""
