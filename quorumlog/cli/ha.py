"""`quorumlog ha describe|elect`: master/slave groups' controller (client/ha.py)."""

from __future__ import annotations

from typing import Optional

import typer

from ..client import ha
from .common import ClusterOpt, JsonOpt, PeersOpt, TimeoutOpt, out_console, print_json, resolve_target, run

ha_app = typer.Typer(help="Master/slave groups' controller: describe, elect (a switch by hand)", no_args_is_help=True)


@ha_app.command("describe")
def describe(group: str = typer.Option(..., "--group", help="A master/slave group"),
             peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
             json_out: bool = JsonOpt) -> None:
    """The controller's state of the group: master, epoch, sync_state_set, members, alive."""
    state = run(ha.describe(resolve_target(peers, cluster, None).peers, group, timeout_ms=timeout_ms))
    if json_out:
        print_json(state)
    else:
        out_console.print(f"group {group}: master {state['master']} epoch {state['epoch']} sync_state_set "
                          f"{','.join(state['sync_state_set'])} alive {','.join(state.get('alive', []))}")


@ha_app.command("elect")
def elect(group: str = typer.Option(..., "--group", help="A master/slave group"),
          to: Optional[str] = typer.Option(None, "--to", help="The new master (default: the most caught-up other "
                                                               "member of the sync state set)"),
          peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
          json_out: bool = JsonOpt) -> None:
    """Switch the master by hand; prints the new state once the new master is elected."""
    state = run(ha.elect(resolve_target(peers, cluster, None).peers, group, to, timeout_ms=timeout_ms))
    if json_out:
        print_json(state)
    else:
        out_console.print(f"group {group}: master {state['master']} epoch {state['epoch']}")
