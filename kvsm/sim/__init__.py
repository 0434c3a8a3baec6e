"""The simulator: drives the pure model from real and synthetic workloads, with timing
and faults drawn from one seed (docs/sim.md)."""

from .cluster import SimDivergence
from .faults import Faults, FaultSpecError
from .options import SimError, SimOptions, Timing
from .runner import SimResult, run_main_job, simulate
from .trace import TraceRequest, Workload, WorkloadError, read_trace
from .workload import load_workload

__all__ = [
    "FaultSpecError",
    "Faults",
    "SimDivergence",
    "SimError",
    "SimOptions",
    "SimResult",
    "Timing",
    "TraceRequest",
    "Workload",
    "WorkloadError",
    "load_workload",
    "read_trace",
    "run_main_job",
    "simulate",
]
