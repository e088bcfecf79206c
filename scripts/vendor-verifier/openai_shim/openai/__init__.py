"""A stand-in for the parts of the `openai` Python client that the Kimi
Vendor Verifier's tests use, for scripts/vendor-verifier.sh: the real
client is on PyPI, which this project cannot reach.

It only carries JSON over HTTP (httpx) and wraps what comes back for
attribute access. It fills nothing in, fixes nothing and validates
nothing: a response is exactly the server's JSON. Like the real client,
an attribute the API declares on an object (a message's `content` or
`tool_calls`, a choice's `finish_reason`, ...) reads as None when the
server left the key out; any other missing attribute raises
AttributeError, so `hasattr(message, "reasoning_content")` says whether
the server sent it. HTTP errors raise the client's exception classes,
chosen by status as the real client chooses them.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterator

import httpx

__all__ = [
    "OpenAI", "Client", "APIError", "APIStatusError", "APIConnectionError", "APITimeoutError",
    "BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError",
    "ConflictError", "UnprocessableEntityError", "RateLimitError", "InternalServerError",
]

# The fields the API declares on each kind of object (the real client's
# models): absent, they read as None.
_DECLARED = {
    "id", "object", "created", "model", "choices", "usage", "service_tier", "system_fingerprint",
    "index", "message", "delta", "finish_reason", "logprobs",
    "role", "content", "refusal", "tool_calls", "function_call", "audio", "annotations",
    "type", "function", "name", "arguments",
    "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details",
}


class Obj:
    """A JSON object read by attribute; lists and objects inside are
    wrapped the same way when read."""

    def __init__(self, data: dict[str, Any]):
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name: str) -> Any:
        data = object.__getattribute__(self, "_data")
        if name in data:
            return _wrap(data[name])
        if name in _DECLARED:
            return None
        raise AttributeError(name)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return copy.deepcopy(object.__getattribute__(self, "_data"))

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> "Obj":
        return cls(data)

    def __repr__(self) -> str:
        return json.dumps(object.__getattribute__(self, "_data"), ensure_ascii=False)


def _wrap(v: Any) -> Any:
    if isinstance(v, dict):
        return Obj(v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


class APIError(Exception):
    def __init__(self, message: str, body: Any = None):
        super().__init__(message)
        self.message = message
        self.body = body


class APIStatusError(APIError):
    def __init__(self, message: str, response: httpx.Response, body: Any):
        super().__init__(message, body)
        self.response = response
        self.status_code = response.status_code


class BadRequestError(APIStatusError): pass
class AuthenticationError(APIStatusError): pass
class PermissionDeniedError(APIStatusError): pass
class NotFoundError(APIStatusError): pass
class ConflictError(APIStatusError): pass
class UnprocessableEntityError(APIStatusError): pass
class RateLimitError(APIStatusError): pass
class InternalServerError(APIStatusError): pass


class APIConnectionError(APIError):
    def __init__(self, message: str = "Connection error."):
        super().__init__(message)


class APITimeoutError(APIConnectionError):
    def __init__(self, message: str = "Request timed out."):
        super().__init__(message)


_BY_STATUS = {400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
              409: ConflictError, 422: UnprocessableEntityError, 429: RateLimitError}


def _status_error(resp: httpx.Response) -> APIStatusError:
    text = resp.text
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    cls = _BY_STATUS.get(resp.status_code, InternalServerError if resp.status_code >= 500 else APIStatusError)
    return cls(f"Error code: {resp.status_code} - {body}", resp, body)


class _Stream:
    """The chunks of a streamed completion, each wrapped, as the server
    sent them; an error event raises APIError."""

    def __init__(self, http: httpx.Client, ctx: Any, resp: httpx.Response):
        self._http, self._ctx, self._resp = http, ctx, resp

    def __iter__(self) -> Iterator[Obj]:
        try:
            for line in self._resp.iter_lines():
                line = line.strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if isinstance(chunk, dict) and "error" in chunk:
                    raise APIError(str(chunk["error"]), chunk)
                yield _wrap(chunk)
        finally:
            self._ctx.__exit__(None, None, None)


class _Completions:
    def __init__(self, client: "OpenAI"):
        self._client = client

    def create(self, *, extra_body: dict[str, Any] | None = None, extra_headers: dict[str, str] | None = None,
               timeout: float | None = None, **params: Any) -> Any:
        body = {k: v for k, v in params.items()}
        if extra_body:
            body.update(extra_body)
        return self._client._post("/chat/completions", body, stream=bool(body.get("stream")),
                                  headers=extra_headers, timeout=timeout)


class _Chat:
    def __init__(self, client: "OpenAI"):
        self.completions = _Completions(client)


class OpenAI:
    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, timeout: float = 600,
                 max_retries: int = 0, **_: Any):
        self.api_key = api_key or ""
        self.base_url = (base_url or "").rstrip("/")
        self._http = httpx.Client(timeout=timeout)
        self.chat = _Chat(self)

    def _post(self, path: str, body: dict[str, Any], *, stream: bool, headers: dict[str, str] | None,
              timeout: float | None) -> Any:
        h = {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}
        h.update(headers or {})
        url = self.base_url + path
        kw: dict[str, Any] = {"headers": h, "content": json.dumps(body, ensure_ascii=False).encode()}
        if timeout is not None:
            kw["timeout"] = timeout
        try:
            if not stream:
                resp = self._http.post(url, **kw)
                if resp.status_code >= 400:
                    raise _status_error(resp)
                return _wrap(resp.json())
            ctx = self._http.stream("POST", url, **kw)
            resp = ctx.__enter__()
            if resp.status_code >= 400:
                resp.read()
                ctx.__exit__(None, None, None)
                raise _status_error(resp)
            return _Stream(self._http, ctx, resp)
        except httpx.TimeoutException as e:
            raise APITimeoutError() from e
        except httpx.TransportError as e:
            raise APIConnectionError(str(e)) from e

    def close(self) -> None:
        self._http.close()


Client = OpenAI
