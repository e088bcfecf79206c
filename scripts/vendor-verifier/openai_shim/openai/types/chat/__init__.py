"""The stand-in's chat types: the server's JSON, read by attribute (see
openai/__init__.py); model_validate wraps a dict as it is."""

from openai import Obj


class ChatCompletion(Obj):
    pass


class ChatCompletionChunk(Obj):
    pass


__all__ = ["ChatCompletion", "ChatCompletionChunk"]
