"""cli layer. `entry` is the console script's entry point: it imports the command inside its own guard, so a
Ctrl-C while Python is still importing ends quietly (exit 130) instead of printing a traceback."""


def entry() -> None:
    try:
        from .main import main as run_command
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    run_command()
