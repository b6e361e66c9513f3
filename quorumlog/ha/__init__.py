"""RocketMQ's master/slave HA transfer (the seed `rocketmq-master-slave-sync.txt`), sans-I/O like the Raft core:
the master's HAConnection per slave (`master.py`), the slave's HAClient (`slave.py`) and the
GroupTransferService that completes SYNC_MASTER appends (`transfer.py`), over logs addressed by physical byte
offset (`log.py`). The runtime moves the messages (`messages.py`) and tells them the time; nothing here does
I/O, so the simulator drives the same code (tests/ha).

Issue 14 is started, not done: the controller (SyncStateSet and epochs in `_meta`, automatic switch), the HA
port in the node runtime, and the CLI/client mode are still to build on these.
"""

from .log import MemoryHALog
from .master import HAConnection
from .messages import Drop, Reset, SlaveReport, Transfer
from .slave import HAClient
from .transfer import GroupTransferService, TransferDone

__all__ = ["Drop", "GroupTransferService", "HAClient", "HAConnection", "MemoryHALog", "Reset", "SlaveReport",
           "Transfer", "TransferDone"]
