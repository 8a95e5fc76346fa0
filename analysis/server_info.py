"""A running server as the analysis sees it, from its `GET /v1/engine`: what it
runs (to name a profile after), the settings the simulator must share with it,
and how serve flags given on the command line compare with them."""
from __future__ import annotations

from dataclasses import dataclass, fields

from scheduler.flags import flag
from scheduler.settings import SHARED, scoped

from .hardware import model_name


class SettingsDisagree(ValueError):
    """Serve flags given for a running server that it does not run."""


@dataclass(frozen=True)
class ServerInfo:
    model: str
    hardware: str
    torch_threads: int
    scheduler: dict
    """`SchedulerConfig` as the core runs it: the pool as sized, the model's context."""
    settings: dict
    """The `ServeSettings` it was started with, by name."""
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

    @property
    def device(self) -> str:
        return self.settings["device"]

    @property
    def dtype(self) -> str:
        return self.settings["dtype"]

    def disagreements(self, flags: dict) -> list[str]:
        """Each of `flags` (`ServeSettings` fields given on the command line) that
        this server was not started with, as `--flag value (the server runs …)`. A
        model is known by its name, wherever its files lie."""
        out = []
        for name, asked in flags.items():
            runs = self.settings[name]
            if name == "model":
                asked, runs = model_name(asked), self.model
            if asked != runs:
                out.append(f"{flag(name)} {flags[name]} (the server runs {runs})")
        return out

    def sim_settings(self) -> dict:
        """Flat settings for `sim.build_setup`: those it shares with the simulator,
        with the pool and the context as the core runs them."""
        return {**{name: self.settings[name] for name in scoped(SHARED)},
                "num_blocks": self.scheduler["num_blocks"],
                "max_model_len": self.scheduler["max_model_len"]}
