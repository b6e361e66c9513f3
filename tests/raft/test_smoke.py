from quorumlog.codes import ResponseCode
from quorumlog.raft.types import Role

from .harness import Cluster


def test_elect_replicate_commit():
    c = Cluster(3)
    leader = c.elect()
    rid = c.append(leader, [b"a", b"b", b"c"])
    c.run_until(lambda: rid in c.completions, 2000)
    done = c.completions[rid]
    assert done.code == ResponseCode.SUCCESS, done
    assert (done.first_index, done.last_index) == (0, 2)
    c.run(300)
    for nid in c.ids:
        assert c.bodies(nid) == [b"a", b"b", b"c"]
        assert c.core(nid).committed_index == 2
    assert sum(c.core(n).role is Role.LEADER for n in c.ids) == 1
