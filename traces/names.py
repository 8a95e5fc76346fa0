"""The names clients go by: the id a client gives its request (`X-Request-Id`: the
server names the stream by it and a replay names its requests with it), the name
of an API key (a trace's `key`, a server's `NAME:KEY`), and the keys file that
pairs each key name with its secret: the server reads it to know its clients, the
load generator to send each request with the secret of its trace's key name."""
from __future__ import annotations

import re
from pathlib import Path

REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""A client's own request id: it names the stream, so it must fit in an SSE id
(`<id>:<n>`) and a URL path."""

KEY_NAME = REQUEST_ID
"""The name of an API key: it labels metrics and prefixes the engine's ids of the
key's requests (`<name>/<id>`), so it has an id's grammar, which holds no '/'."""
def read_key_file(path: str) -> list[str]:
    """The entries of a keys file: blank lines and lines starting with '#' skipped."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the keys file: {exc}") from None
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def named_keys(entries: list[str]) -> dict[str, str]:
    """Each key's name and secret, checked: a bad name or secret, or a name or a
    secret given twice, raise ValueError naming the entry."""
    keys: dict[str, str] = {}
    for n, entry in enumerate(entries, 1):
        name, sep, secret = entry.partition(":")
        if not sep:
            name, secret = f"key-{n}", entry
        if not KEY_NAME.fullmatch(name):
            raise ValueError(f"key {n}: a name is 1 to 64 letters, digits, '.', '_' or '-', "
                             f"got {name[:80]!r}")
        check_secret(secret, f"key {n} ({name})")
        if name in keys:
            raise ValueError(f"key {n}: the name {name!r} is given twice")
        if secret in keys.values():
            raise ValueError(f"key {n} ({name}): the same secret as another key")
        keys[name] = secret
    return keys


def check_secret(secret: str, what: str) -> None:
    if not secret or not all("!" <= c <= "~" for c in secret):
        raise ValueError(f"{what}: a key is 1 or more printable ASCII characters without spaces")
