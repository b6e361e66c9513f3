"""`quorumlog certs ca|node`: a cluster CA and node certificates for nodes started by hand (what `cluster up
--tls` makes for the nodes it starts), with the names the nodes check: a node's certificate carries its id (a
DNS name: peers and clients verify the node they dialled by it) and every address it is reached at."""

from __future__ import annotations

import os
from typing import List

import typer

from .common import JsonOpt, out_console, print_json, usage

certs_app = typer.Typer(help="TLS certificates: a cluster CA, and a certificate per node", no_args_is_help=True)


@certs_app.command("ca")
def ca(directory: str = typer.Option(..., "--dir", help="Where ca.pem and ca.key go (keep ca.key off the nodes)"),
       json_out: bool = JsonOpt) -> None:
    """Make the cluster's CA: ca.pem (every node and client trusts it: `tls_ca`) and its key ca.key."""
    from ..transport.certs import make_ca

    if os.path.exists(os.path.join(directory, "ca.key")):
        usage(f"--dir {directory!r} holds a CA already (ca.key): a new one would orphan its certificates")
    pem, key = make_ca(directory)
    if json_out:
        print_json({"ca": pem, "key": key})
    else:
        out_console.print(f"CA certificate {pem} (give it to every node and client), key {key}", highlight=False)


@certs_app.command("node")
def node(directory: str = typer.Option(..., "--dir", help="The CA's directory (from `certs ca`)"),
         node_id: str = typer.Option(..., "--id", help="The node's id, as in its --peers entry"),
         hosts: List[str] = typer.Option(..., "--host", help="An address or DNS name the node is reached at "
                                         "(repeat for each)"),
         json_out: bool = JsonOpt) -> None:
    """A certificate for one node signed by the CA: <id>.pem and <id>.key beside it, and the node settings
    that use them (tls_cert, tls_key, tls_ca)."""
    from ..transport.certs import make_node_cert, node_tls_settings

    if not os.path.exists(os.path.join(directory, "ca.key")):
        usage(f"--dir {directory!r}: no CA there (make one with `quorumlog certs ca --dir {directory}`)")
    make_node_cert(directory, node_id, hosts)
    settings = dict(node_tls_settings(directory, node_id))
    if json_out:
        print_json(settings)
    else:
        out_console.print("\n".join(f'{k} = "{v}"' for k, v in settings.items()), highlight=False)
