"""The projection's what-ifs that rewrite a step's work, not only its waits (model.py replays those)."""
