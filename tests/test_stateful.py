"""Random transition sequences on small configs: every invariant holds after every
step, and replaying the same sequence from scratch gives the same digests."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvsm.config import load_config
from kvsm.invariants import violations
from kvsm.state import initial_state
from kvsm.transitions import apply, enabled

from .helpers import config

CONFIGS = [
    replace(load_config("small"), max_requests=0, max_live=2),
    config(R=2, L1=2, L2=4, prompts=[[1, 2], [1, 3], [1, 2, 4], [5]], max_live=3),
    config(R=3, L1=2, L2=5, policy="write_back", prompts=[[1, 2, 3], [1, 2, 4], [6, 7]], max_live=2),
    config(R=2, L1=3, L2=6, payloads=("kv", "draft"), write_threshold=2, prompts=[[1, 2], [1, 2, 3], [4]], max_live=2),
    config(R=2, L1=2, L2=4, L3=6, prompts=[[1, 2], [1, 3], [1, 2, 4]], max_live=2, reload_ttl=2),
]


class ModelMachine(RuleBasedStateMachine):
    @initialize(which=st.integers(0, len(CONFIGS) - 1))
    def start(self, which):
        self.cfg = CONFIGS[which]
        self.state = initial_state(self.cfg)
        self.steps = []
        self.digests = [self.state.digest()]

    @rule(data=st.data())
    def step(self, data):
        choices = enabled(self.state)
        if not choices:
            return
        t = data.draw(st.sampled_from(choices), label="transition")
        self.state = apply(self.state, t)
        self.steps.append(t)
        self.digests.append(self.state.digest())

    @invariant()
    def invariants_hold(self):
        if hasattr(self, "state"):
            assert violations(self.state) == []

    def teardown(self):
        if not hasattr(self, "state"):
            return
        s = initial_state(self.cfg)
        assert s.digest() == self.digests[0]
        for t, d in zip(self.steps, self.digests[1:]):
            s = apply(s, t)
            assert s.digest() == d, f"replay of {t} diverged"


TestModel = ModelMachine.TestCase
TestModel.settings = settings(max_examples=40, stateful_step_count=80, deadline=None)
