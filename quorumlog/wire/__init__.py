"""Message types shared by the raft core (which makes them) and the transport (which frames them)."""
