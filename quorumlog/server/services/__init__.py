"""What groups run beside their log (key/value, topics, consumer groups, the HA controller) and what the node
runs beside its groups (its bookie, auto-recovery, its calls to the cluster); each serves requests by type."""
