"""The stand-in's types (see openai/__init__.py)."""
