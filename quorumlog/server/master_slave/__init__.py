"""A master/slave group's member on a node: the runtime around the sans-I/O HA machines of quorumlog.ha."""
