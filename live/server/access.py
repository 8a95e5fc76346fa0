"""Who may do what: the client keys (each with a name that labels its streams,
limits and metrics) and the admin key, read from the settings, and the guard in
front of every route that checks a request's key before any route runs.

With no client key the server is open, as a local tool is; with keys, every path
but `/health` needs one, and the operational paths need the admin key (closed
when there is none: they list every client's requests)."""
from __future__ import annotations

import enum
import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.settings import ServeSettings
from traces.names import check_secret, named_keys, read_key_file

from .replies import envelope_for, refuse
from .validation import ErrorKind, RequestError

KEY = "key"
"""Where the guard leaves the name of a request's client key, in its scope state
(None on an open server)."""


class Need(enum.Enum):
    NOTHING = "nothing"
    CLIENT = "client"
    ADMIN = "admin"


OPERATIONS = frozenset({"/stats", "/metrics", "/v1/engine", "/v1/steps", "/v1/requests"})


def need_of(path: str) -> Need:
    if path == "/health":  # for load balancers, which hold no key
        return Need.NOTHING
    return Need.ADMIN if path in OPERATIONS else Need.CLIENT


class KeyRing:
    """The client keys by the digest of their secret (a lookup that takes the same
    time whichever key, or none, matches), and the admin key."""

    def __init__(self, keys: dict[str, str], admin_key: str | None):
        self.names = list(keys)
        self._by_digest = {_digest(secret): name for name, secret in keys.items()}
        self._admin = _digest(admin_key) if admin_key is not None else None

    @classmethod
    def load(cls, settings: ServeSettings) -> KeyRing:
        """The keys the settings give (flags, then the file), checked: a bad entry,
        a name or secret given twice, or per-key limits without client keys raise
        ValueError naming what is wrong."""
        entries = list(settings.api_key)
        if settings.api_keys_file is not None:
            entries += read_key_file(settings.api_keys_file)
        keys = named_keys(entries)
        if settings.admin_key is not None:
            check_secret(settings.admin_key, "the admin key")
            if settings.admin_key in keys.values():
                raise ValueError("the admin key is also a client key: give it a secret of its own")
        limits = [name for name in ("max_streams_per_key", "max_waiting_per_key")
                  if getattr(settings, name) is not None]
        if limits and not keys:
            raise ValueError(f"{', '.join(limits)} count what each client key holds: give "
                             "client keys (api_key or api_keys_file)")
        return cls(keys, settings.admin_key)

    @property
    def open(self) -> bool:
        return not self.names

    def describe(self) -> str:
        """What the server says at start about who may use it."""
        if self.open:
            clients = "open: no client key, anyone who reaches the port may generate"
        else:
            clients = f"{len(self.names)} client keys ({', '.join(self.names[:8])}" \
                      f"{', ...' if len(self.names) > 8 else ''})"
        admin = "admin key set" if self._admin is not None else \
            ("operational endpoints closed (no admin key)" if not self.open
             else "operational endpoints open")
        return f"{clients}; {admin}"

    def check(self, need: Need, headers: dict[str, str]) -> str | None:
        """The client key's name (None on an open server or for an operation), or
        the refusal."""
        if need is Need.NOTHING:
            return None
        presented = _presented(headers)
        if need is Need.ADMIN:
            if self._admin is None:
                if self.open:
                    return None
                raise RequestError(ErrorKind.FORBIDDEN, "this server has no admin key: its "
                                                        "operational endpoints are closed")
            if presented is not None and hmac.compare_digest(_digest(presented), self._admin):
                return None
            if presented is not None and _digest(presented) in self._by_digest:
                raise RequestError(ErrorKind.FORBIDDEN, "this endpoint needs the admin key")
            raise RequestError(ErrorKind.UNAUTHORIZED, "this endpoint needs the admin key "
                                                       "(Authorization: Bearer, or x-api-key)")
        if self.open:
            return None
        name = self._by_digest.get(_digest(presented)) if presented is not None else None
        if name is None:
            what = "no API key was sent" if presented is None else "the API key is not valid"
            raise RequestError(ErrorKind.UNAUTHORIZED,
                               f"{what}: send one as 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
        return name


class AccessGuard:
    """ASGI middleware: a request without the key its path needs is refused in its
    API's envelope before any route (or its body) is read; an accepted one carries
    its key's name in its scope state, under `KEY`."""

    def __init__(self, app: ASGIApp, keys: KeyRing):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope["headers"] if k.lower() in _KEY_HEADERS}
            try:
                name = self.keys.check(need_of(scope["path"]), headers)
            except RequestError as exc:
                service = scope["app"].state.service
                await refuse(service, exc, envelope_for(scope["path"]))(scope, receive, send)
                return
            scope.setdefault("state", {})[KEY] = name
        await self.app(scope, receive, send)


_KEY_HEADERS = (b"authorization", b"x-api-key")


def _presented(headers: dict[str, str]) -> str | None:
    """The key of `Authorization: Bearer KEY` (OpenAI's clients), else of `x-api-key`
    (Anthropic's)."""
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key", "").strip() or None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()

