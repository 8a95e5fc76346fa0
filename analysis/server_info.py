"""A running server as the analysis sees it, from its `GET /v1/engine`: what it
runs (to name a profile after), the settings the simulator must share with it,
and how serve flags given on the command line compare with them."""
from __future__ import annotations

from dataclasses import dataclass, fields

from .serve_options import ServeOptions


class SettingsDisagree(ValueError):
    """Serve flags given for a running server that it does not run."""


@dataclass(frozen=True)
class ServerInfo:
    model: str
    device: str
    dtype: str
    hardware: str
    torch_threads: int
    scheduler: dict
    """`SchedulerConfig` fields: num_blocks, block_size, max_batch, max_waiting, …"""
    policy: dict
    """The backlog policy's name and its parameters."""
    streams: dict
    """The hub's settings: max_queued, stall_timeout_s, resume_grace_s, keepalive_s, …"""
    runner: dict
    """How the model runs: gpu_memory_fraction (None unless it sized the pool), eager."""
    steps: dict
    """The step ring: its size and the newest step."""
    requests: dict
    """The ring of finished requests: its size and the newest one's number."""
    time_unix: float

    @classmethod
    def from_json(cls, data: dict) -> ServerInfo:
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"the server's /v1/engine lacks {', '.join(missing)}")
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    def serve_flags(self) -> dict:
        """What each of `ServeOptions`' settings is on this server."""
        return {"model": self.model, "device": self.device, "dtype": self.dtype,
                "threads": self.torch_threads, "max_batch": self.scheduler["max_batch"],
                "num_blocks": self.scheduler["num_blocks"],
                "gpu_memory_fraction": self.runner["gpu_memory_fraction"],
                "eager": self.runner["eager"],
                "block_size": self.scheduler["block_size"],
                "max_waiting": self.scheduler["max_waiting"],
                "max_prefill_tokens": self.scheduler["max_prefill_tokens"],
                "chunked_prefill": self.scheduler["chunked_prefill"],
                "admission": self.scheduler["admission"],
                "policy": self.policy["name"],
                "max_queued": self.streams["max_queued"],
                "stall_timeout_s": self.streams["stall_timeout_s"]}

    def disagreements(self, flags: dict) -> list[str]:
        """Each of `flags` (`ServeOptions` fields, given on the command line) that
        this server does not run, as `--flag value (the server runs …)`."""
        server = self.serve_flags()
        out = []
        for name, value in flags.items():
            asked = ServeOptions(model=value).model_name if name == "model" else value
            if asked != server[name]:
                out.append(f"--{name.replace('_', '-')} {value} (the server runs {server[name]})")
        return out

    def sim_settings(self) -> dict:
        """Flat settings for `sim.build_setup`: the scheduler's, the policy's, the
        padding the server adds to every event and its resume grace."""
        parameters = {k: v for k, v in self.policy.items() if k != "name"}
        return dict(policy=self.policy["name"], event_padding=self.streams["event_padding"],
                    resume_grace_s=self.streams["resume_grace_s"], **self.scheduler, **parameters)
