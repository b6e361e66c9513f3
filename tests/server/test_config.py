import os
import subprocess
import sys

import pytest

from quorumlog.config import CONFIG_KEYS, ConfigError, NodeConfig, load_config, render_markdown

PEERS = "n0=127.0.0.1:7001,n1=127.0.0.1:7002,n2=127.0.0.1:7003"
BASE = {"node_id": "n0", "peers": PEERS, "data_dir": "/tmp/unused"}


def test_defaults_and_raft_config():
    c = load_config(flags=BASE, env={})
    assert c.flush == "sync" and c.group == "default" and c.max_pending_requests == 10_000
    r = c.raft_config()
    assert r.peers == ("n0", "n1", "n2") and r.node_id == "n0" and r.max_wait_ack_ms == 2_500
    assert c.address == ("127.0.0.1", 7001) and c.listen_host == "127.0.0.1"


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text(f'node_id = "n1"\npeers = "{PEERS}"\ndata_dir = "d"\nmax_wait_ack_ms = 111\n'
                 'max_pending_requests = 7\nflush = "async"\n')
    env = {"QUORUMLOG_MAX_WAIT_ACK_MS": "222", "QUORUMLOG_MAX_PENDING_REQUESTS": "8"}
    c = load_config(str(f), env=env, flags={"max_wait_ack_ms": "333"})
    assert c.max_wait_ack_ms == 333  # flag
    assert c.max_pending_requests == 8  # env
    assert c.flush == "async" and c.node_id == "n1"  # file
    assert c.heartbeat_interval_ms == 100  # default
    # --config can also come from the environment, and the DLedger alias `id` works
    c2 = load_config(env={"QUORUMLOG_CONFIG": str(f), "QUORUMLOG_ID": "n2"})
    assert c2.node_id == "n2" and c2.max_wait_ack_ms == 111


def test_node_table_and_peers_table_in_toml(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text('[node]\nnode_id = "n0"\ndata_dir = "d"\n[node.peers]\nn0 = "127.0.0.1:1"\nn1 = "127.0.0.1:2"\n')
    c = load_config(str(f), env={})
    assert c.peers == {"n0": ("127.0.0.1", 1), "n1": ("127.0.0.1", 2)}


@pytest.mark.parametrize("override, names", [
    ({"flush": "never"}, "flush='never'"),
    ({"max_wait_ack_ms": "soon"}, "max_wait_ack_ms='soon'"),
    ({"max_wait_ack_ms": "0"}, "max_wait_ack_ms=0"),
    ({"disk_full_ratio": "1.5"}, "disk_full_ratio=1.5"),
    ({"pre_vote": "maybe"}, "pre_vote='maybe'"),
    ({"peers": "n0=127.0.0.1"}, "peers="),
    ({"node_id": "n7"}, "node_id='n7'"),
    ({"heartbeat_interval_ms": "400"}, "heartbeat_interval_ms=400"),
    ({"max_entry_bytes": str(100 * 1024 * 1024)}, "max_frame_bytes"),
    ({"preferred_leader_id": "zz"}, "preferred_leader_id='zz'"),
    ({"no_such_key": "1"}, "no_such_key"),
    ({"index_segment_size": "1000"}, "index_segment_size_bytes 1000"),
])
def test_bad_values_name_the_key(override, names):
    with pytest.raises(ConfigError) as e:
        load_config(flags={**BASE, **override}, env={})
    assert names in str(e.value)


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError) as e:
        load_config(flags=BASE, env={"QUORUMLOG_HTTP_PORT": "eighty"})
    assert "QUORUMLOG_HTTP_PORT" in str(e.value) and "eighty" in str(e.value)


def test_bad_toml_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("node_id = \n")
    with pytest.raises(ConfigError) as e:
        load_config(str(f), env={})
    assert "bad.toml" in str(e.value)


def test_missing_required_key():
    with pytest.raises(ConfigError) as e:
        load_config(flags={"node_id": "n0", "peers": PEERS}, env={})
    assert "data_dir" in str(e.value) and "--data-dir" in str(e.value)


def test_every_key_is_a_field_with_the_same_default_and_is_documented():
    fields = NodeConfig.__dataclass_fields__
    for key in CONFIG_KEYS:
        assert key.name in fields, key.name
        f = fields[key.name]
        if not key.required:
            assert f.default == key.default, key.name
        assert key.doc
    assert set(fields) == {k.name for k in CONFIG_KEYS}
    doc = render_markdown()
    for key in CONFIG_KEYS:
        assert f"`{key.name}`" in doc


def test_docs_configuration_md_is_up_to_date():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")
    with open(path) as f:
        assert f.read() == render_markdown(), "regenerate: python -m quorumlog.config > docs/configuration.md"


def test_cli_exits_2_before_writing_anything(tmp_path):
    data_dir = tmp_path / "node-data"
    r = subprocess.run([sys.executable, "-m", "quorumlog.server", "--id", "n0", "--peers", "n0=127.0.0.1:99999",
                        "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "99999" in r.stderr and "peers" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not data_dir.exists()
