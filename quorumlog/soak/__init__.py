"""Jepsen-style fault soak of real node processes: a seeded fault schedule, concurrent writers, and a
clock-free checker of every acknowledgement (see checker.py, nemesis.py, runner.py)."""
