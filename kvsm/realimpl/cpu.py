"""What SGLang 0.5.20's hierarchical cache needs to run on a CPU, and nothing more
(docs/realimpl.md, "What is stood in"). Everything here is applied once per process by
`load()`; the cache's own logic, its allocators, its controller and its transfer path
stay SGLang's.

Stood in:
- modules its imports reach but the cache never uses (`IPython`, `sentencepiece`,
  `sglang.srt.configs.utils`, and `torchvision` for SGLang's own imports only: the
  registry's torchvision is a CUDA build, and transformers must keep seeing it absent);
  `sglang/__init__.py` (the frontend, which needs an HTTP client) is skipped by
  importing `sglang.srt` under a bare `sglang` package;
- the runtime-config getters the scheduler publishes (`get_memory`, `get_serving`,
  `get_observability`), answered by a `RuntimeConfig`;
- a world-size-1 gloo process group for the cache's MIN all-reduces;
- the host pool's check that 10 GiB of the machine's RAM stay free besides it (the
  pool is a few MB here), as a reserve of 0;
- `pin_memory=False` for the host pool, and its two transfer kernels
  (`backup_from_device_all_layer`, `load_to_device_per_layer`) as index copies;
- `time.monotonic` in the radix-tree modules, as a logical clock, so that the LRU
  order (last access times) is the same on every run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import logging
import os
import sys
import time as _time
import types
import warnings
from dataclasses import dataclass
from typing import Any

# Modules stood in wherever they are imported from, and modules stood in only when
# SGLang's own code imports them.
EVERYWHERE = ("IPython", "sentencepiece", "sglang.srt.configs.utils")
FOR_SGLANG_ONLY = ("torchvision",)


class _Placeholder:
    """Any attribute, call, subscript or union of a stood-in module: a value that does
    nothing (a decorator returns what it decorates)."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __call__(self, *a: Any, **k: Any) -> Any:
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Placeholder()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder_class(name)

    def __getitem__(self, k: Any) -> Any:
        return _Placeholder()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())


class _PlaceholderMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder_class(f"{cls.__name__}.{name}")

    def __getitem__(cls, k: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


def _placeholder_class(name: str) -> type:
    return _PlaceholderMeta(name, (_Placeholder,), {})


class _StoodIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _under(fullname: str, roots: tuple[str, ...]) -> bool:
    return any(fullname == r or fullname.startswith(r + ".") for r in roots)


def _imported_by_sglang() -> bool:
    """Whether the import being resolved comes from a file of SGLang's package."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith("<frozen") or name == __file__:
            f = f.f_back
            continue
        return f"{os.sep}sglang{os.sep}" in name
    return False


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the imports of the stood-in modules with empty modules."""

    def __init__(self) -> None:
        self.hits: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if _under(fullname, EVERYWHERE) or (_under(fullname, FOR_SGLANG_ONLY) and _imported_by_sglang()):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        self.hits.append(spec.name)
        m = _StoodIn(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module: Any) -> None:
        pass


@dataclass
class RuntimeConfig:
    """What the scheduler normally publishes and the cache reads at construction: the
    hierarchical-cache settings (`get_memory`), the served model name (`get_serving`)
    and the metrics labels (`get_observability`)."""

    hicache_ratio: float = 2.0
    hicache_size: int = 0
    hicache_mem_layout: str = "layer_first"
    hicache_storage_backend: str | None = None
    hicache_storage_backend_extra_config: str | None = None
    hicache_storage_prefetch_policy: str = "best_effort"
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "direct"
    served_model_name: str = "kvsm-realimpl"
    extra_metric_labels: Any = None


class LogicalClock:
    """`time.monotonic` for the radix-tree modules: 1, 2, 3, ... per call."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def monotonic(self) -> int:
        return next(self._next)

    def reset(self) -> None:
        self._next = itertools.count(1)

    # the other names those modules read from `time`
    perf_counter = staticmethod(_time.perf_counter)
    time = staticmethod(_time.time)
    sleep = staticmethod(_time.sleep)


@dataclass
class Loaded:
    """The SGLang modules the adapter uses, with the stand-ins applied."""

    hr: Any  # sglang.srt.mem_cache.hiradix_cache
    rc: Any  # sglang.srt.mem_cache.radix_cache
    params: Any  # sglang.srt.mem_cache.base_prefix_cache (MatchPrefixParams, ...)
    RadixKey: Any
    MHATokenToKVPool: Any
    PagedTokenToKVPoolAllocator: Any
    CacheInitParams: Any
    runtime: RuntimeConfig
    clock: LogicalClock
    finder: StandInFinder
    torch: Any
    group: Any


_LOADED: Loaded | None = None


class NotInstalled(ImportError):
    """SGLang (or torch) is not importable here: `kvsm realimpl install sglang`."""


def available() -> bool:
    return importlib.util.find_spec("sglang") is not None and importlib.util.find_spec("torch") is not None


def load() -> Loaded:
    """Import SGLang's cache with the stand-ins (once per process: about 12 s)."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    if not available():
        raise NotInstalled("SGLang 0.5.20 and torch are not installed in this environment: run `kvsm realimpl install sglang`")
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations is not None
    finder = StandInFinder()
    sys.meta_path.insert(0, finder)
    if "sglang" not in sys.modules:
        # a bare package: sglang/__init__.py imports the frontend (an HTTP client), which
        # the cache does not need
        pkg = types.ModuleType("sglang")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["sglang"] = pkg
    _hide_torchvision_from_transformers()
    # SGLang's import-time notes about CUDA-only features and CPU event timing are not
    # this run's output
    warnings.filterwarnings("ignore", module=r"sglang(\.|$)")
    logging.getLogger("sglang").setLevel(logging.ERROR)

    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    if not dist.is_initialized():
        # one rank: an in-process store, no port to listen on
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    import sglang.srt.mem_cache.hiradix_cache as hr  # noqa: PLC0415
    import sglang.srt.mem_cache.radix_cache as rc  # noqa: PLC0415
    import sglang.srt.mem_cache.pool_host.base as host_base  # noqa: PLC0415
    import sglang.srt.mem_cache.pool_host.common as host_common  # noqa: PLC0415
    import sglang.srt.mem_cache.pool_host.mha as host_mha  # noqa: PLC0415
    import sglang.srt.mem_cache.base_prefix_cache as params  # noqa: PLC0415
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: PLC0415
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: PLC0415
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: PLC0415

    runtime = RuntimeConfig()
    for mod in (hr, host_common):
        mod.get_memory = lambda: runtime
    hr.get_serving = lambda: runtime
    hr.get_observability = lambda: runtime

    _host_pool_on_cpu(host_mha.MHATokenToKVPoolHost)
    # a production guard against oversubscribing the host's RAM: it refuses even this
    # run's few-MB pool on a machine with less than 10 GiB available
    host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES = 0

    clock = LogicalClock()
    for mod in (hr, rc):
        mod.time = clock

    _LOADED = Loaded(
        hr=hr, rc=rc, params=params, RadixKey=rc.RadixKey, MHATokenToKVPool=MHATokenToKVPool,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator, CacheInitParams=CacheInitParams,
        runtime=runtime, clock=clock, finder=finder, torch=torch, group=dist.group.WORLD,
    )
    return _LOADED


def _hide_torchvision_from_transformers() -> None:
    """transformers asks whether torchvision is installed; it is not (SGLang's own imports
    of it get a stood-in module), so it must keep answering no."""
    try:
        import transformers.utils.import_utils as iu  # noqa: PLC0415
    except ImportError:
        return
    original = iu._is_package_available

    def is_available(pkg_name: str, return_version: bool = False) -> Any:
        if pkg_name == "torchvision":
            return (False, "N/A") if return_version else False
        return original(pkg_name, return_version)

    iu._is_package_available = is_available


def _host_pool_on_cpu(cls: Any) -> None:
    """The MHA host pool without pinned memory, its copies as tensor index copies (the
    layer-first layout: `kv_buffer[k or v, layer, token, head, dim]`)."""
    init = cls.__init__

    def __init__(self: Any, *a: Any, **k: Any) -> None:
        k["pin_memory"] = False
        init(self, *a, **k)

    def backup_from_device_all_layer(self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any) -> None:
        for layer in range(self.layer_num):
            self.kv_buffer[0, layer, host_indices] = device_pool.k_buffer[layer][device_indices]
            self.kv_buffer[1, layer, host_indices] = device_pool.v_buffer[layer][device_indices]

    def load_to_device_per_layer(self: Any, device_pool: Any, host_indices: Any, device_indices: Any, layer_id: int, io_backend: Any, *, is_draft: bool = False) -> None:
        device_pool.k_buffer[layer_id][device_indices] = self.kv_buffer[0, layer_id, host_indices]
        device_pool.v_buffer[layer_id][device_indices] = self.kv_buffer[1, layer_id, host_indices]

    cls.__init__ = __init__
    cls.backup_from_device_all_layer = backup_from_device_all_layer
    cls.load_to_device_per_layer = load_to_device_per_layer
