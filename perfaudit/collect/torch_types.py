"""Where the type checker cannot see torch's types, named once (issue 43): everything else that touches
torch in perfaudit is checked against torch's own annotations."""
from __future__ import annotations

from typing import Any

# the `torch` module as the audited process hands it to its session (imported there, late, by name)
TorchModule = Any
# torch.profiler.profile: its attributes and methods differ across the torch versions perfaudit supports
# (2.1 to 2.14), and the session reads them through getattr
Profiler = Any
