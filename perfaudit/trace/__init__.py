from .model import Event, Frame, Step, Trace
from .parser import load_trace

__all__ = ["Event", "Frame", "Step", "Trace", "load_trace"]
