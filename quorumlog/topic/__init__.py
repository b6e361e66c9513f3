"""Topics, queues and consumer groups on the log (RocketMQ's message model; issue 16), started: the message
layout inside a log entry (`message.py`) and the consume queue built by dispatching committed entries
(`consume_queue.py`). Not yet: placement of queues over groups, the node's dispatcher and pull path, the
producer and consumer clients, consumer-group offsets and rebalance, the CLI and Spark by topic."""
