"""The regression corpus (`traces/*.txt`): readable interaction scripts that
`kvsm corpus verify` replays and checks (docs/corpus.md)."""

from .format import Case, CaseError, Entry, format_case, parse_case, parse_step, read_case, step_text
from .run import Failure, case_to_log, log_to_case, play, verify_case

__all__ = [
    "Case", "CaseError", "Entry", "Failure", "case_to_log", "format_case", "log_to_case", "parse_case",
    "parse_step", "play", "read_case", "step_text", "verify_case",
]
