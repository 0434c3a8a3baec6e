"""The simulator: drives the pure model from real and synthetic workloads, with timing
and faults drawn from one seed (docs/sim.md)."""

from .workload import TraceRequest, Workload, WorkloadError, load_workload, read_trace

__all__ = ["TraceRequest", "Workload", "WorkloadError", "load_workload", "read_trace"]
