"""The errors of the TLC layer: TLC cannot be run, or could not check a model."""


class TLCUnavailable(RuntimeError):
    """Java or tla2tools.jar cannot be found; the message says how to install them."""


class TLCError(RuntimeError):
    """TLC could not check the model at all (a parse or semantic error, a crash)."""
