"""RocketMQ's master/slave HA transfer (the seed `rocketmq-master-slave-sync.txt`), sans-I/O like the Raft core:
the master's HAConnection per slave (`master.py`), the slave's HAClient (`slave.py`) and the
GroupTransferService that completes SYNC_MASTER appends (`transfer.py`), over logs addressed by physical byte
offset (`log.py`); the controller that elects masters (`controller.py`), the epoch entries and consistent point
(`epochs.py`) and what a member decides under the controller (`member.py`). The runtime
(server/master_slave/member.py, server/services/ha_controller.py) moves the messages (`messages.py`) and tells
them the time; nothing here does I/O, so the simulators (sim/ha.py, sim/ha_switch.py) drive the same code.
"""

from .log import MemoryHALog
from .master import HAConnection
from .messages import Drop, Reset, SlaveReport, Transfer
from .slave import HAClient
from .transfer import GroupTransferService, TransferDone

__all__ = ["Drop", "GroupTransferService", "HAClient", "HAConnection", "MemoryHALog", "Reset", "SlaveReport",
           "Transfer", "TransferDone"]
