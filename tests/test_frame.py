"""kvsm.tla.frame reads each action's frame condition from the spec: the variables a
top-level UNCHANGED conjunct keeps, and nothing that a conditional, a disjunction or
a LET says of some steps only. `kvsm validate` skips comparing those variables, so a
set that is too large would let a wrong step through."""

from __future__ import annotations

from kvsm.tla.frame import conjuncts, definitions, frames, groups, spec_groups, unchanged
from kvsm.tla.location import spec_dir
from kvsm.tla.canon import SPEC_VARIABLES
from kvsm.tla.trace import SPEC_PARAMS

VARS = frozenset({"a", "b", "c", "d"})


def _unchanged(text: str, name: str = "A") -> set[str]:
    return set(unchanged(name, definitions([text]), VARS))


def test_the_spec_s_frames_leave_each_action_the_variables_it_assigns():
    f = frames(spec_dir(), tuple(SPEC_PARAMS), SPEC_VARIABLES)
    may = {a: set(SPEC_VARIABLES) - s for a, s in f.items()}
    assert may["CommitCall"] == {"commit_round"}
    # the finish query of an appended ack (ack_append = "reference") may move `acked` too
    assert may["WriteDone"] == {"acked", "host_content", "write_done"}
    assert may["AckAppend"] == {"acked"}
    assert may["Arrive"] == {"next_rid", "requests"}
    # Commit's frame is that of CommitFirst, the operator its last conjunct applies
    assert may["Commit"] == {"acked", "commit_round", "nodes", "objects", "pending", "spill_queue", "write_done", "writes"}
    # an action that computes the record after it takes its frame from its To-operator
    assert may["Match"] == {"nodes", "next_id", "clock", "objects", "requests", "spill_queue"}
    # a device eviction's write-back (evict_write_back = "sync"): host evictions, the
    # object, its copy and spill; `halted` where the reference's assert fires
    assert may["EvictDevice"] == {"nodes", "dev_free", "dev_content", "l2_free", "objects", "host_content",
                                  "spill_queue", "diverged", "halted"}
    assert may["SpillAck"] == {"nodes", "spills", "spill_gathered", "spill_done"}
    # a load-back's write-backs (write_back_evict = "sync") reserve, fill and commit
    # host objects and queue them for a spill
    # (and the ghost `halted`, where the reference stops: write_back_evict = "deferred")
    assert may["LoadBack"] == {"nodes", "dev_free", "dev_content", "requests", "loads", "l2_free", "objects",
                               "host_content", "spill_queue", "diverged", "halted"}
    # and none of them may change every variable
    assert all(f[a] for a in f), [a for a in f if not f[a]]


def test_the_spec_s_groups_partition_its_variables():
    g = spec_groups(spec_dir(), SPEC_VARIABLES)
    parts = ("treeVars", "requestVars", "deviceVars", "hostVars", "backupVars", "loadVars", "spillVars", "reloadVars", "diskVars")
    seen = [v for p in parts for v in g[p]]
    assert len(seen) == len(set(seen)), "a variable is in two groups"
    assert set(SPEC_VARIABLES) - set(seen) == {"spill_queue", "diverged", "halted"}
    assert g["vars"] == frozenset(SPEC_VARIABLES)
    assert g["l3Vars"] == g["spillVars"] | g["reloadVars"] | g["diskVars"]
    assert g["hostVars"] == {"l2_free", "objects", "host_content"}


def test_groups_are_tuples_of_variables_and_groups_expanded():
    text = "ab == <<a, b>>\nabc == <<ab, c>>\nK == <<1, 2>>\nM == <<ab, K>>\nN == a\n"
    got = groups(definitions([text]), VARS)
    # a tuple of constants, or of a group and a tuple of constants, is no group
    assert got == {"ab": {"a", "b"}, "abc": {"a", "b", "c"}, "N": {"a"}}
    assert _unchanged(text + "A ==\n    /\\ d' = 1\n    /\\ UNCHANGED <<abc>>\n") == {"a", "b", "c"}


def test_a_top_level_unchanged_conjunct_is_read_and_its_tuples_expanded():
    text = "ab == <<a, b>>\nA(x) ==\n    /\\ x > 0\n    /\\ c' = x\n    /\\ UNCHANGED <<ab, d>>\n"
    assert _unchanged(text) == {"a", "b", "d"}
    assert _unchanged("A == /\\ c' = 1\n     /\\ UNCHANGED a\n") == {"a"}


def test_an_unchanged_that_holds_for_some_steps_only_is_not_read():
    cases = {
        "in an IF": "A ==\n    /\\ IF c = 0 THEN UNCHANGED <<a, b>> ELSE a' = 1 /\\ b' = 2\n    /\\ UNCHANGED d\n",
        "in a disjunction": "A ==\n    /\\ UNCHANGED d\n    /\\ a' = 1 \\/ UNCHANGED b\n",
        "in a LET": "A ==\n    /\\ LET y == 1 IN UNCHANGED b\n    /\\ UNCHANGED d\n",
        "in a list under a disjunction": "A ==\n    \\/ /\\ UNCHANGED b\n       /\\ a' = 1\n    \\/ UNCHANGED d\n",
    }
    got = {k: _unchanged(v) for k, v in cases.items()}
    assert got == {"in an IF": {"d"}, "in a disjunction": {"d"}, "in a LET": {"d"}, "in a list under a disjunction": set()}


def test_an_applied_operator_counts_only_when_the_conjunct_is_that_application():
    text = (
        "K == /\\ UNCHANGED <<a, b>>\n     /\\ c' = 0\n"
        "A == /\\ K\n     /\\ UNCHANGED d\n"
        "B == /\\ K \\/ a' = 1\n     /\\ UNCHANGED d\n"
        "C(x) == /\\ UNCHANGED <<a>>\nD == /\\ C(1) /\\ TRUE\n     /\\ UNCHANGED d\n"
    )
    defs = definitions([text])
    assert unchanged("A", defs, VARS) == {"a", "b", "d"}
    assert unchanged("B", defs, VARS) == {"d"}
    assert unchanged("D", defs, VARS) == {"d"}


def test_a_definition_that_is_not_a_conjunction_list_keeps_nothing():
    assert conjuncts("    x' = 1") is None
    assert _unchanged("A == IF b = 0 THEN UNCHANGED a ELSE UNCHANGED a\n") == set()
    # comments neither add conjuncts nor hide them
    assert _unchanged("A ==\n    /\\ c' = 1 \\* /\\ UNCHANGED b\n    (* /\\ UNCHANGED a *)\n    /\\ UNCHANGED d\n") == {"d"}
