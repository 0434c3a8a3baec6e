"""`kvsm sweep`: capacity and policy what-if studies, a grid of `kvsm sim` runs on Dask
distributed, run and stored as `kvsm campaign` runs its runs (docs/sim.md, "Sweeps").

- `grid`: each option's list of values, the points they cross into, and what a worker
  runs for a point (`run_point`);
- `report`: `results.csv`, the knees, the plots and the one-file HTML report.
"""
