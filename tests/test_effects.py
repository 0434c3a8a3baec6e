"""The effect values: the batch makers the transactions use for runs of pages make the
very values the classes' constructors make."""

from __future__ import annotations

import dataclasses

import pytest

from kvsm import effects as fx


@pytest.mark.parametrize(
    "make, cls, columns",
    [
        (fx.fill_batch, fx.Fill, ((3, 1, 7), (11, 2**63 + 5, 0))),
        (fx.poison_dev_batch, fx.PoisonDev, ((4, 0, 9, 2),)),
        (fx.store_batch, fx.Store, ((1, 1), (5, 9), (40, 41))),
        (fx.fill_batch, fx.Fill, ((), ())),
    ],
)
def test_a_batch_maker_makes_what_the_constructor_makes_field_by_field(make, cls, columns):
    got = make(*columns)
    want = list(map(cls, *columns))
    assert got == want and [hash(e) for e in got] == [hash(e) for e in want]
    assert all(type(e) is cls for e in got)
    names = [f.name for f in dataclasses.fields(cls)]
    assert [tuple(getattr(e, n) for n in names) for e in got] == list(zip(*columns))
    if got:
        with pytest.raises(dataclasses.FrozenInstanceError):
            got[0].page = 0  # still frozen
