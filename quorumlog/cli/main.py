"""The `quorumlog` command (placeholder until the CLI lands)."""


def main() -> None:
    raise SystemExit("quorumlog CLI: not built yet")
