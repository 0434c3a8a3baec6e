"""The reference's write-back eviction (`write_back_evict = "sync"`, docs/model.md): a
load-back short of device pages writes its unbacked device victim back inside its own
step, and the defect `loadback_evicts_own_host` (sglang PR 27631, docs/defects.md) lets
that write-back's host eviction take the node the load restores (and
`write_back_fail_evict`, sglang PR 27108, evicts a victim whose write-back failed).
The run below is spec/MC_write_back_sync's: node 1 (two pages) backed and off L1, node 2 (one page)
unbacked on L1, and a request whose load-back of node 1 needs node 2's lane."""

from __future__ import annotations

import pytest

from kvsm import effects as fx
from kvsm.config import Config, ConfigError, Prompt
from kvsm.invariants import violations
from kvsm.state import Rejected, initial_state
from kvsm.transitions import Transition, apply

T = Transition.make

BEFORE_LOAD = [
    T("Arrive", rid=0, tokens=(1, 2), out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0),
    T("Arrive", rid=1, tokens=(3,), out_pages=0), T("Match", rid=1), T("Reserve", node=1, fits=True),
    T("WriteDone", rank=0), T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"),
    T("Insert", rid=1), T("Finish", rid=1), T("Arrive", rid=2, tokens=(1, 2, 5), out_pages=0), T("Match", rid=2),
]


def _before_load(L2: int, write_back_evict: str = "sync", bug: str = "none"):
    cfg = Config(R=2, L1=1, L2=L2, policy="write_back", write_back_evict=write_back_evict, bug=bug,
                 prompts=(Prompt((1, 2)), Prompt((3,)), Prompt((1, 2, 5))))
    s = initial_state(cfg)
    for t in BEFORE_LOAD:
        s = apply(s, t)
    # node 1 backed and off L1, node 2 unbacked on lane 0's only page
    assert s.nodes[1].host is not None and not s.nodes[1].dev
    assert s.nodes[2].host is None and s.nodes[2].dev == (0,)
    return s


def test_a_load_back_writes_its_unbacked_victim_back_in_its_own_step():
    s = _before_load(L2=3)
    after = apply(s, T("LoadBack", rid=2))
    assert not violations(after)
    victim = after.nodes[2]
    obj = after.objects[victim.host]
    # backed (committed) and evicted from L1; its host copy holds the KV its page held
    assert obj.committed and victim.dev == () and after.host_content[obj.base] == s.dev_content[0]
    assert [e for e in after.effects if isinstance(e, fx.Store)] == [fx.Store(0, 0, obj.base)]
    assert after.nodes[1].dev and after.loads[-1].node == 1
    # the model before the knob: an unbacked leaf is no victim, and the load-back is refused
    with pytest.raises(Rejected, match="owner-lane planner cannot free"):
        apply(_before_load(L2=3, write_back_evict="locked"), T("LoadBack", rid=2))


def test_the_load_back_protects_its_own_host_copies_and_the_defect_evicts_them():
    # the host pool holds node 1 only: the write-back finds room only by evicting it
    with pytest.raises(Rejected, match="finds no host room"):
        apply(_before_load(L2=2), T("LoadBack", rid=2))
    after = apply(_before_load(L2=2, bug="loadback_evicts_own_host"), T("LoadBack", rid=2))
    assert 1 not in after.nodes and after.nodes[2].host is not None
    found = violations(after)
    assert found and all(v.startswith("5 DevicePages") for v in found), found


def test_a_victim_whose_write_back_fails_is_evicted_as_backed_only_under_the_defect():
    # sglang PR 27108: the failed write-back's victim leaves L1 with its KV nowhere
    after = apply(_before_load(L2=2, bug="write_back_fail_evict"), T("LoadBack", rid=2))
    assert after.nodes[2].dev == () and after.nodes[2].host is None and after.nodes[1].dev
    assert violations(after) == ["2 Residency: node 2 is neither on L1 nor backed on L2"]


def test_the_knob_is_left_out_of_a_config_s_json_at_its_default_and_checked():
    assert "write_back_evict" not in Config().to_json()
    assert Config(write_back_evict="sync").to_json()["write_back_evict"] == "sync"
    with pytest.raises(ConfigError, match="field 'write_back_evict' must be one of locked, sync"):
        Config.from_json({"write_back_evict": "async"})


# ---- the GPU backend ---------------------------------------------------------------------------------


def test_the_gpu_backend_stores_a_write_back_before_the_eviction_poisons_it_and_agrees_after():
    from kvsm.gpu.plan import agreements, plan_rank

    s = _before_load(L2=3)
    after = apply(s, T("LoadBack", rid=2))
    obj = after.objects[after.nodes[2].host]
    store = [b for b in plan_rank(after, 0) if b.op is fx.Store]
    # the page's KV as it was stored (the ghost after the step has it poisoned)
    assert [(b.dev, b.host, b.content) for b in store] == [([0], [obj.base], [s.dev_content[0]])]
    assert after.dev_content.get(0) is None
    # its commit is in the step: the ranks agree after it, as after a Commit
    assert agreements("LoadBack", after.effects) == (False, True)
    # a load-back that stores nothing meets no other rank
    assert agreements("LoadBack", tuple(e for e in after.effects if not isinstance(e, (fx.Store, fx.PoisonHost)))) == (False, False)


@pytest.mark.exhaustive
def test_the_gpu_backend_replays_a_write_back_and_loads_it_back_on_real_bytes(tmp_path):
    # rank processes on the CPU: node 2 written back inside request 2's LoadBack, then loaded
    # back by request 3 from the host pages its write-back filled (several seconds: torch)
    pytest.importorskip("torch")
    from kvsm.defects import write_log
    from kvsm.gpu.launch import Options, replay as gpu_replay

    s = _before_load(L2=3)
    steps = BEFORE_LOAD + [T("LoadBack", rid=2), T("LoadDone", rank=0), T("LoadDone", rank=1), T("Abort", rid=2),
                           T("Arrive", rid=3, tokens=(3, 4), out_pages=0), T("Match", rid=3), T("LoadBack", rid=3),
                           T("LoadDone", rank=1), T("LoadDone", rank=0)]
    log = write_log(s.config, steps, tmp_path / "write-back.jsonl")
    out = gpu_replay(Options(str(log), device="cpu", page_bytes=512, layers=1, timeout_s=120))
    assert out["ok"] and out["pages_loaded"] == 3 and out["pages_stored"] == 3, out
