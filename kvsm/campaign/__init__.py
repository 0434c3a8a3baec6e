"""`kvsm campaign`: fault campaigns of many seeded simulations on Dask distributed
(docs/campaign.md). One concern a module:

- `spec`: the campaign's choices (`Space`) and each run derived from its number (`RunSpec`);
- `run`: one run: simulate, check, replay, classify (`execute`);
- `worker`: what a Dask worker runs for one run: execute, shrink a failure (`run_task`);
- `coverage`: what a run exercised, and the campaign's totals;
- `shrink`: a failing run cut down to a local minimum, workload then log;
- `validation`: `--validate`, the runs' logs followed by TLC, a rejection shrunk;
- `cases`: where a shrunk case is written (`write_case`);
- `execute`: the runs on a Dask `LocalCluster` or an existing scheduler;
- `store`: `results.jsonl` (whole lines only) and `--resume`;
- `summary`: the summary, its `--json`, the table and the plots.
"""
