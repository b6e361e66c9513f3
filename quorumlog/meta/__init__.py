"""The metadata store: state machines that a group runs over its committed entries (the `_meta` group's
versioned key/value store first, kv.py) and the runner that feeds them (state_machine.py). Sans-I/O; the node
runtime and the simulator drive them. Import the module you need: the client needs kv.py alone."""
