"""The simulator: drives the pure model from real and synthetic workloads, with timing
and faults drawn from one seed (docs/sim.md)."""

from .faults import Faults, FaultSpecError
from .options import SimError, SimOptions, Timing
from .runner import SimResult, run_main_job, simulate
from .stops import STOPS, SimDivergence, SimInvariantError, SimStuck, stop_record
from .trace import TraceRequest, Workload, WorkloadError, read_trace
from .workload import load_workload

__all__ = [
    "FaultSpecError",
    "Faults",
    "SimDivergence",
    "SimError",
    "SimInvariantError",
    "SimStuck",
    "SimOptions",
    "SimResult",
    "STOPS",
    "Timing",
    "TraceRequest",
    "Workload",
    "WorkloadError",
    "load_workload",
    "read_trace",
    "run_main_job",
    "simulate",
    "stop_record",
]
