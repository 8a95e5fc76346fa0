"""`python -m live serve`: the entry that wires the layers. The model is loaded and
put in a runner, the KV pool sized, the engine built over the core with its step
log, and the HTTP app run by uvicorn until a signal stops it."""
from __future__ import annotations

import functools
import importlib.util
import json
import logging
from collections.abc import Callable

from . import collector
from .engine.engine import Engine
from .engine.engine_process import EngineProcess
from .engine.engine_thread import EngineThread
from .engine.handle import EngineHandle
from scheduler.settings import ServeSettings
from .server.access import KeyRing
from .server.app import create_app
from .server.uvicorn_server import LiveServer
from .server.validation import ServedModel

log = logging.getLogger("twinstep.server")


def build_engine(settings: ServeSettings) -> tuple[Engine, ServedModel]:
    """Load the model and put an engine around it, as `settings` say."""
    import torch

    from .engine.step_log import StepLog
    from .runner.architectures import kv_layout
    from .runner.gpu_memory import gpu_kv_blocks
    from .runner.model_runner import ModelRunner
    from .runner.models import load_model

    dtype = getattr(torch, settings.dtype)
    torch.set_num_threads(settings.torch_threads())
    loaded = load_model(settings.model, settings.device, dtype)
    on_gpu = torch.device(settings.device).type == "cuda"
    num_blocks = settings.num_blocks
    if num_blocks is None and on_gpu:
        num_blocks = gpu_kv_blocks(settings.gpu_pool_fraction(), kv_layout(loaded.model.config),
                                   settings.block_size, dtype, settings.device)
    elif num_blocks is None:
        num_blocks = ModelRunner.blocks_for_budget(loaded, settings.kv_cache_mb << 20,
                                                   settings.block_size, dtype)
    graphs = on_gpu and not settings.eager and importlib.util.find_spec("triton") is not None
    runner = ModelRunner(loaded, num_blocks, settings.block_size, settings.device, dtype,
                         cuda_graph_max_batch=settings.max_batch if graphs else 0)
    step_log = StepLog(settings.step_log, settings.device,
                       {"model": loaded.name, "dtype": settings.dtype}, settings.step_ring)
    config = settings.scheduler_config(num_blocks, loaded.max_model_len)
    engine = Engine(runner, loaded.tokenizer, config, step_log)
    return engine, ServedModel(loaded.name, loaded.tokenizer, loaded.max_model_len,
                               runner.vocab_size)


def place_engine(build: Callable[[], tuple[Engine, ServedModel]],
                 settings: ServeSettings) -> tuple[EngineHandle, ServedModel]:
    """The engine `build` makes (a picklable callable), stepping where the settings
    say: in a process of its own, or in a thread of this one."""
    if settings.engine_process:
        engine = EngineProcess(build, settings.device, settings.backlog_policy().engine_waits)
        return engine, engine.served
    built, served = build()
    return EngineThread(built, settings.device), served


def serve(settings: ServeSettings, keys: KeyRing) -> int:
    engine, served = place_engine(functools.partial(build_engine, settings), settings)
    config = engine.facts.config
    log.info("serving %s on http://%s:%d (device %s, %s; %d KV blocks of %d; batch %d; "
             "policy %s)", served.name, settings.host, settings.port, settings.device,
             settings.dtype, config.num_blocks, config.block_size, config.max_batch,
             settings.policy)
    log.info("settings %s", json.dumps(settings.as_dict()))
    log.info("access: %s", keys.describe())
    app = create_app(engine, served, settings, keys)
    collector.settle()
    LiveServer(app, settings.host, settings.port).run()
    collector.release()
    return 0
