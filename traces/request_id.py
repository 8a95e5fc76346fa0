"""The grammar of a request id a client chooses (`X-Request-Id`): the server names
the stream by it and a replay names its requests with it, so both read it here."""
import re

REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""A client's own request id: it names the stream, so it must fit in an SSE id
(`<id>:<n>`) and a URL path."""
